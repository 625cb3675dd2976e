"""The steps of one evaluation, in the order sandbox/pipeline.py runs them: correctness (the static
gate, loading, the trials, the launch modes), timing, profiling, and the held-out shape variants.
Each step is a function of the evaluation's `Context` (sandbox/channel.py)."""
