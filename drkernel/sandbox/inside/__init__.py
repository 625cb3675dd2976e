"""What runs inside a sandbox process, beside the candidate's code: the worker's op loop and its ops
(worker: loading, trials, launch modes, timing, checksums, profiling), the harness captured before any
candidate code runs (harness), the sealed span's ops (sealedwork), the peak bandwidth and FLOP probes
(peak) and the device memory a process reserves and gives back (devicemem)."""
