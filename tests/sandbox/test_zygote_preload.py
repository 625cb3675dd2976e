"""The candidate sandbox's profiler session (profilework.profiler_session) and the fork server's preload
(sandbox/plumbing/zygote.py): torch.profiler.profile's first start imports torch._inductor and torch._dynamo
(about 900 modules), which every candidate sandbox paid in its profiler warm-up (5.6 s of a single
`drkernel eval` on the H200, docs/benchmark_log.md run Y), and which a preload of dynamo moved onto the
fork server's start (run AA). The sandbox's session imports none of it and replaces none of the
functions the tamper watch guards; the preload must not initialise CUDA or start a thread, or the
forked children would not be clean."""

from __future__ import annotations

import json
import os
import subprocess
import sys

CHILD = r"""
import json, sys, threading
from drkernel.sandbox.plumbing import zygote
zygote.preload()
import torch
from drkernel.sandbox.inside import profilework
from drkernel.sandbox.inside.harness import TamperWatch
state = {"threads": threading.active_count(), "cuda": torch.cuda.is_initialized()}
before = set(sys.modules)
watch = TamperWatch()
watch.add_defaults(False)
session = sys.argv[1]
with (profilework.profiler_session(False) if session == "sandbox" else
      torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])) as prof:
    (torch.randn(8) + 1).sum().item()
events = prof.function_events if session == "sandbox" else prof.events()
state.update(new_modules=len(set(sys.modules) - before), replaced=watch.changed(),
             names=sorted({e.name for e in events}))
print(json.dumps(state))
"""


def _first_session(session: str = "sandbox", visible: str = "0") -> dict:
    """`visible`: the CUDA_VISIBLE_DEVICES the judge gives a GPU sandbox's fork server ("" for the
    interpreter's); on this CPU machine no GPU is found either way."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": visible}
    cp = subprocess.run([sys.executable, "-c", CHILD, session], capture_output=True, text=True,
                        timeout=300, env=env)
    assert cp.returncode == 0, cp.stderr[-2000:]
    return json.loads(cp.stdout.strip().splitlines()[-1])


def test_the_sandboxes_first_profiler_session_imports_and_replaces_nothing_it_guards() -> None:
    got = _first_session()
    assert got["threads"] == 1 and got["cuda"] is False, got  # the zygote still forks clean
    assert got["new_modules"] < 50 and got["replaced"] == [], got
    assert "aten::add" in got["names"], got  # and it records: the ops of the block are there


def test_torch_profilers_first_session_is_the_import_the_sandbox_avoids() -> None:
    """The control: the wrapper's session imports hundreds of modules (so the test above can fail)."""
    got = _first_session("torch.profiler")
    assert got["new_modules"] > 300 and "aten::add" in got["names"], got
