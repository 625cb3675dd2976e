"""What runs inside a sandbox process, beside the candidate's code: the worker's op loop, its state and
the load (worker), its ops in rooms that mirror the judge's stages (trialwork: trials and launch modes;
timingwork: timing, checksums, the paper's timing, the peak; profilework: profiling; sealedwork: the sealed
span), how an op fails (failure), the harness captured before any candidate code runs (harness), the peak
bandwidth and FLOP probes (peak) and the device memory a process reserves and gives back (devicemem)."""
