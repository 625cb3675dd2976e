"""What travels between the judge and its processes: the typed control messages of the sandboxes
(protocol), the tensor files (tensorfile), the sealed span's shared memory (sharedmem), and the typed
messages of the judge's two helpers, the comparison process and the fork server (helpermsg)."""
