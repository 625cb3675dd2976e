"""A sandbox's ops leave no reference cycles holding tensors: on a GPU those are GiBs kept alive
until the garbage collector happens to run (the persistent reference process ran out of memory)."""

from __future__ import annotations

import subprocess
import sys

_SCRIPT = r'''
import gc, tempfile, torch
from drkernel.sandbox.wire import protocol as P
from drkernel.sandbox.inside import timingwork, trialwork
from drkernel.sandbox.inside.worker import Sandbox
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
assert isinstance(trialwork.run(sb, P.Run(seeds=[0, 1, 2], tag="trial")), P.RunReply)
prepare = P.BenchPrepare(seed=5, calls=2, warmup=1, warmup_s=0.0, graph=False, compile=False, window_ms=1.0)
assert isinstance(timingwork.bench_prepare(sb, prepare), P.BenchPrepareReply)
assert isinstance(timingwork.bench_run(sb, P.BenchRun(seeds=[[7, 8], [9, 10]], wseeds=[[1, 2], [3, 4]])),
                  P.BenchRunReply)
assert isinstance(timingwork.checksums(sb, P.Checksums(seeds=[[7, 8]], wseeds=[[1, 2]])), P.ChecksumsReply)
del sb._bench
gc.collect()
print("CYCLIC_TENSORS", sum(isinstance(o, torch.Tensor) for o in gc.garbage))
'''


def test_run_and_timing_ops_leave_no_cyclic_garbage_holding_tensors():
    proc = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "CYCLIC_TENSORS 0" in proc.stdout, proc.stdout + proc.stderr[-2000:]


_CACHE_SCRIPT = r'''
import tempfile, torch
from drkernel.sandbox.wire import protocol as P
from drkernel.sandbox.inside import worker
from drkernel.sandbox.inside.worker import Sandbox
REF = """
import torch
import torch.nn as nn
class Model(nn.Module):
    def forward(self, x):
        return x * 2
def get_inputs():
    return [torch.randn(64, 32)]
def get_init_inputs():
    return []
"""
def load(sb, h):
    assert sb.load(P.Load(reference_code=REF, size_snippet="", reference_hash=h, init_seed=1,
                   entry_point="Model", candidate_path=None)).ok
sb = Sandbox("reference", "cpu", tempfile.mkdtemp())
sb.warm_up(0.9)
load(sb, "a")
one = 64 * 32 * 4
for seed in range(5):
    sb._inputs(seed)
print("BY_SEEDS", sorted(sb._input_cache))
worker.INPUT_CACHE_BYTES = 2 * one  # room for two seeds' inputs
sb._input_cache.clear()
for seed in range(5):
    sb._inputs(seed)
print("BY_BYTES", sorted(sb._input_cache))
worker.INPUT_CACHE_BYTES = one // 2  # not even one: the newest stays all the same
sb._input_cache.clear()
for seed in range(3):
    again = sb._inputs(seed)
print("NEWEST", sorted(sb._input_cache), tuple(again[0].shape))
sb._bench = {"inputs": [torch.zeros(4)]}
model, old = sb.model, list(sb._input_cache.values())
load(sb, "a")  # the same problem: kept
print("SAME", sb.model is model, "_bench" in sb.__dict__, len(sb._input_cache))
load(sb, "b")  # another problem: the last one's state is dropped
kept = [v for v in sb._input_cache.values() if any(v is o for o in old)]
print("OTHER", sb.model is not model, "_bench" in sb.__dict__, len(kept), sb._span)
'''


def test_cached_inputs_are_bounded_by_seeds_and_bytes_and_dropped_with_their_problem():
    """A reference sandbox outlives problems: inputs of 8 GiB cached for three seeds ran the judge's
    own reference out of device memory (KernelBench L1/4 at full size, run BH)."""
    proc = subprocess.run([sys.executable, "-c", _CACHE_SCRIPT], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout
    assert "BY_SEEDS [2, 3, 4]" in out, out
    assert "BY_BYTES [3, 4]" in out, out
    assert "NEWEST [2] (64, 32)" in out, out
    assert "SAME True True 1" in out, out
    assert "OTHER True False 0 None" in out, out


def test_trim_gives_back_only_what_is_cached_beyond_twice_the_reservation(monkeypatch):
    """devicemem.trim on a fake device: below TRIM_OVER x the reservation nothing is freed; above it
    the cache is emptied and the reservation taken again."""
    import torch

    from drkernel.sandbox.inside import devicemem

    calls: list[object] = []
    reserved = {"now": 3 << 30}
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: reserved["now"])
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append("empty"))
    monkeypatch.setattr(devicemem, "reserve", lambda device, n, *a, **k: calls.append(("reserve", n)) or n)
    dev = torch.device("cuda", 0)
    assert devicemem.trim(dev, 2 << 30) is False and calls == []  # 3 GiB cached, 4 GiB allowed
    reserved["now"] = 5 << 30
    assert devicemem.trim(dev, 2 << 30) is True
    assert calls == ["empty", ("reserve", 2 << 30)]
