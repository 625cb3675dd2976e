"""How sandbox processes are made and held: the judge's handles of them and their folders (process),
the fork server that forks them (zygote), the namespaces and seccomp filter that isolate them
(isolation), and the Triton build they are seeded with (tritonseed)."""
