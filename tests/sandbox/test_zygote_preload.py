"""The fork server imports what a sandbox's first profiler session would (sandbox/zygote.py preload):
without it each candidate sandbox imported ~900 modules in its profiler warm-up (5.6 s of a single
`drkernel eval` on the H200, docs/benchmarks.md run Y). The preload must not initialise CUDA or start a
thread, or the forked children would not be clean; after it, a profiler session imports almost nothing
and replaces none of the functions the tamper watch guards."""

from __future__ import annotations

import json
import os
import subprocess
import sys

CHILD = r"""
import json, sys, threading
preload = sys.argv[1] == "1"
if preload:
    from drkernel.sandbox import zygote
    zygote.preload()
import torch
from drkernel.sandbox.harness import TamperWatch
state = {"threads": threading.active_count(), "cuda": torch.cuda.is_initialized()}
before = set(sys.modules)
watch = TamperWatch()
watch.add_defaults(False)
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
    (torch.randn(8) + 1).sum().item()
state.update(new_modules=len(set(sys.modules) - before), replaced=watch.changed())
print(json.dumps(state))
"""


def _first_session(preload: bool, visible: str = "0") -> dict:
    """`visible`: the CUDA_VISIBLE_DEVICES the judge gives a GPU sandbox's fork server ("" for the
    interpreter's); on this CPU machine no GPU is found either way."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": visible}
    cp = subprocess.run([sys.executable, "-c", CHILD, "1" if preload else "0"], capture_output=True,
                        text=True, timeout=300, env=env)
    assert cp.returncode == 0, cp.stderr[-2000:]
    return json.loads(cp.stdout.strip().splitlines()[-1])


def test_after_the_preload_a_first_profiler_session_imports_and_replaces_nothing_it_guards() -> None:
    got = _first_session(preload=True)
    assert got["threads"] == 1 and got["cuda"] is False, got  # the zygote still forks clean
    assert got["new_modules"] < 50 and got["replaced"] == [], got


def test_without_it_the_first_session_is_the_import_the_preload_saves() -> None:
    """The control: this is what the preload removes (so the test above can fail); and the
    interpreter's fork server, whose sandboxes are never profiled, does not pay for it."""
    assert _first_session(preload=False)["new_modules"] > 300
    assert _first_session(preload=True, visible="")["new_modules"] > 300
