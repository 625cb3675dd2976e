"""A sandbox's ops leave no reference cycles holding tensors: on a GPU those are GiBs kept alive
until the garbage collector happens to run (the persistent reference process ran out of memory)."""

from __future__ import annotations

import subprocess
import sys

_SCRIPT = r'''
import gc, tempfile, torch
from drkernel.sandbox import protocol as P
from drkernel.sandbox.worker import Sandbox
REF = """
import torch
import torch.nn as nn
class Model(nn.Module):
    def forward(self, x):
        return (torch.relu(x), [x.sum(dim=0), (x * 2,)])
def get_inputs():
    return [torch.randn(64, 32)]
def get_init_inputs():
    return []
"""
sb = Sandbox("reference", "cpu", tempfile.mkdtemp())
sb.warm_up(0.9)
assert sb.load(P.Load(reference_code=REF, size_snippet="", reference_hash="h", init_seed=1,
               entry_point="Model", candidate_path=None)).ok
gc.collect()
gc.disable()
gc.set_debug(gc.DEBUG_SAVEALL)
assert isinstance(sb.run(P.Run(seeds=[0, 1, 2], tag="trial")), P.RunReply)
assert isinstance(sb.bench_prepare(P.BenchPrepare(seed=5, calls=2, warmup=1, warmup_s=0.0, graph=False,
                                                  compile=False, window_ms=1.0)), P.BenchPrepareReply)
assert isinstance(sb.bench_run(P.BenchRun(seeds=[[7, 8], [9, 10]], wseeds=[[1, 2], [3, 4]])), P.BenchRunReply)
assert isinstance(sb.checksums(P.Checksums(seeds=[[7, 8]], wseeds=[[1, 2]])), P.ChecksumsReply)
del sb._bench
gc.collect()
print("CYCLIC_TENSORS", sum(isinstance(o, torch.Tensor) for o in gc.garbage))
'''


def test_run_and_timing_ops_leave_no_cyclic_garbage_holding_tensors():
    proc = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "CYCLIC_TENSORS 0" in proc.stdout, proc.stdout + proc.stderr[-2000:]
