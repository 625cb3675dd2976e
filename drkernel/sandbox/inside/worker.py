"""Sandbox process: loads one reference (and, in the candidate role, one candidate) and runs ops.

Started by drkernel.sandbox.plumbing.process with a clean environment; talks JSON on two inherited pipe fds
and writes tensors as files. Never trusted by the judge: every answer is re-checked outside. Here are the
sandbox's state, its start-up, the load, the calls that the ops share, the process limits and the op loop;
the ops beyond load live beside it, as the judge's stages do: trialwork (correctness trials), timingwork,
profilework and sealedwork, each typing the sandbox it takes with a protocol of its own (`Box`).
"""

from __future__ import annotations

import contextlib
import importlib.util
import math
import os
import resource
import socket
import sys
import time
from typing import Any

import torch

from drkernel.sandbox import cardmem
from drkernel.sandbox.inside import devicemem, harness, profilework, sealedwork, timingwork, trialwork
from drkernel.sandbox.inside.failure import error
from drkernel.sandbox.inside.profilework import profiler_session
from drkernel.sandbox.wire import protocol as P
from drkernel.sandbox.wire.protocol import read_message, write_message

__all__ = ["OPS", "Sandbox", "main", "serve"]

_perf = time.perf_counter  # captured before any candidate code runs

_INTERPRETER_UNSUPPORTED = {
    torch.bfloat16, *(getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2") if hasattr(torch, n))
}


def _stub_autotune_benchmark() -> None:
    """The interpreter has no GPU driver to benchmark autotune configs: run each once, time none."""
    from triton.runtime import autotuner

    def do_bench(self: Any, fn: Any, quantiles: Any = None, **kwargs: Any) -> list[float]:
        fn()
        return [0.0] * len(quantiles or (0,))

    autotuner.Autotuner.do_bench = do_bench  # type: ignore[assignment, method-assign]


INPUT_CACHE_SEEDS = 3  # the seeds of one evaluation's trials whose inputs stay on the device
INPUT_CACHE_BYTES = 4 << 30  # ... within this many bytes in all, the newest kept whatever its size


def _tensor_bytes(inputs: list[Any]) -> int:
    return sum(x.nbytes for x in inputs if isinstance(x, torch.Tensor))


class Sandbox:
    _bench: dict[str, Any]  # the timed window (timingwork): set by bench_prepare, absent until then

    def __init__(self, role: str, device: str, workdir: str) -> None:
        self.role = role
        self.cuda = device.startswith("cuda")
        self.device = torch.device("cuda", 0) if self.cuda else torch.device("cpu")
        self.workdir = workdir
        self.recorder = harness.LaunchRecorder()
        self.watch = harness.TamperWatch()
        self.threads = harness.ThreadWatch()
        self.mode: contextlib.AbstractContextManager[Any] = (
            contextlib.nullcontext() if self.cuda else harness.CpuDeviceMode()
        )
        self.model: Any = None
        self.side: socket.socket | None = None  # file descriptors only (the sealed span's region)
        self._span: Any = None  # sealedwork._Span
        self.get_inputs: Any = None
        self.loaded_key: str | None = None
        self._poison_sizes: set[int] = set()
        self._input_cache: dict[int, list[Any]] = {}
        self._cycles_per_ms: float | None = None
        self._flops: float | None = None  # the reference's FLOPS per call, where the problem states one
        self._sync = torch.cuda.synchronize if self.cuda else (lambda *a, **k: None)
        if self.cuda:
            self._event = torch.cuda.Event
            self._record = torch.cuda.Event.record
            self._elapsed = torch.cuda.Event.elapsed_time
            self._event_sync = torch.cuda.Event.synchronize
            self._query = torch.cuda.Event.query
            self._spin = torch.cuda._sleep
        else:
            torch.cuda.synchronize = lambda *a, **k: None  # type: ignore[assignment]

    # -- start-up -------------------------------------------------------------------------
    def warm_up(self, gpu_memory_fraction: float) -> P.Hello:
        import triton

        startup: dict[str, float] = {}
        t0 = _perf()
        if self.cuda:
            torch.cuda.set_device(0)
            torch.cuda.set_per_process_memory_fraction(gpu_memory_fraction, 0)
            x = torch.randn(1024, device=self.device)
            (x * 2).sum().item()
            startup["cuda_init"] = round(_perf() - t0, 4)
            if self.role == "reference":  # held before any candidate runs (devicemem.py)
                _, total = torch.cuda.mem_get_info(self.device)
                share = int(0.9 * gpu_memory_fraction * total)
                devicemem.reserve(self.device, min(share, devicemem.REFERENCE_BYTES))
                startup["reserve"] = round(_perf() - t0 - startup["cuda_init"], 4)
            if self.role == "candidate":  # only candidates are profiled
                # The first profiler session of a process can come back without device events, takes
                # seconds (CUPTI starts), and replaces watched functions: warm it here, before the
                # tamper watch takes its baseline. (It does not slow the kernels timed later:
                # bench/timing_probe.py graphprof, 4.34 against 4.30 us, run R.)
                t1 = _perf()
                with profiler_session(True):
                    (x + 1).sum().item()
                startup["profiler_warm"] = round(_perf() - t1, 4)
            self._sync()
            name = torch.cuda.get_device_name(0)
        else:
            name = "cpu"
            _stub_autotune_benchmark()
        if self.role == "candidate":
            self.recorder.install()
        self.watch.add_defaults(self.cuda)
        for owner, attr, _ in self.recorder.hooked():
            self.watch.add(owner, attr, f"{owner.__name__}.{attr}")
        startup["warm_up"] = round(_perf() - t0, 4)
        device_id, device_total = cardmem.card_identity() if self.cuda else ("", 0)
        return P.Hello(device_name=name, torch=torch.__version__, triton=triton.__version__,
                       startup_s=startup, device_id=device_id, device_total=device_total)

    # -- loading ---------------------------------------------------------------------------
    def load(self, msg: P.Load) -> P.LoadReply | P.ErrorReply:
        key = f"{msg.reference_hash}:{msg.size_snippet}:{msg.init_seed}"
        if self.role == "reference" and key == self.loaded_key:
            return P.LoadReply(cached=True, flops=self._flops)
        self.loaded_key = None  # a load that fails part way must not pass for the last good one
        entry = msg.entry_point
        self._forget_problem()
        ns: dict[str, Any] = {"__name__": "drkernel_reference", "__builtins__": __builtins__}
        try:
            with self.mode:
                exec(compile(msg.reference_code, "<reference>", "exec"), ns)
                if msg.size_snippet:
                    exec(compile(msg.size_snippet, "<size>", "exec"), ns)
                for name in ("get_inputs", "get_init_inputs", entry):
                    if name not in ns:  # a clear reference_error, not a bare KeyError
                        raise NameError(f"the reference defines no {name} (KernelBench format: "
                                        f"class {entry}, get_inputs() and get_init_inputs())")
                self.get_inputs = ns["get_inputs"]
                torch.manual_seed(msg.init_seed)
                init_inputs = harness.input_list(ns["get_init_inputs"](), "get_init_inputs")
        except Exception as exc:  # the reference itself is broken
            return error("reference_error", exc)
        if self.role == "reference":
            flops = ns.get("FLOPS")  # a problem may state the FLOPs of one call (speed of light)
            self._flops = None
            if (isinstance(flops, (int, float)) and not isinstance(flops, bool) and math.isfinite(flops)
                    and flops > 0):
                self._flops = float(flops)
            reply = self._build(ns[entry], init_inputs, msg.init_seed, "reference_error", key)
            if isinstance(reply, P.ErrorReply) or self.cuda:
                return reply
            return self._interpreter_dtypes(reply)
        ns.pop(entry, None)  # keep the reference class out of the candidate's reach
        self.threads.snapshot()
        path = msg.candidate_path
        if path is None:
            return error("harness_error", message="a candidate's load names no submission file")
        self.recorder.own_file = path
        try:
            with self.mode:
                spec = importlib.util.spec_from_file_location("drkernel_candidate", path)
                assert spec is not None and spec.loader is not None
                module = importlib.util.module_from_spec(spec)
                sys.modules["drkernel_candidate"] = module
                spec.loader.exec_module(module)
        except BaseException as exc:  # noqa: BLE001 - candidate code may raise anything
            return error("import_error", exc)
        cls = getattr(module, f"{entry}New", None)
        if cls is None:
            return error("missing_model_new", message=f"the submission defines no class {entry}New")
        return self._build(cls, init_inputs, msg.init_seed, "init_error", key)

    def _build(self, cls: Any, init_inputs: list[Any], seed: int, kind: str,
               key: str) -> P.LoadReply | P.ErrorReply:
        try:
            with self.mode:
                model = harness.on_device_first(lambda: cls(*init_inputs), seed, self.device)
                if isinstance(model, torch.nn.Module):
                    model = model.to(self.device)
        except BaseException as exc:  # noqa: BLE001
            return error(kind, exc)
        self.model = model
        self.loaded_key = key
        self.recorder.take()
        return P.LoadReply(cached=False, flops=self._flops if self.role == "reference" else None,
                           tampered=self.watch.changed(), threads=self.threads.extra())

    def _interpreter_dtypes(self, reply: P.LoadReply) -> P.LoadReply | P.ErrorReply:
        """Refuse dtypes that Triton's interpreter computes wrongly (it has no real bf16/fp8)."""
        tensors = [t for t in self._inputs(0) if isinstance(t, torch.Tensor)]
        if isinstance(self.model, torch.nn.Module):
            tensors += list(self.model.parameters()) + list(self.model.buffers())
        bad = sorted({str(t.dtype) for t in tensors if t.dtype in _INTERPRETER_UNSUPPORTED})
        if bad:
            self.loaded_key = None
            return error("unsupported_dtype", message=f"{', '.join(bad)} cannot be judged on the CPU: "
                         "Triton's interpreter computes these dtypes wrongly; judge this problem on a GPU")
        return reply

    def _forget_problem(self) -> None:
        """Drop what the last problem left (model, cached inputs, timing windows, sealed span); a
        reference on a GPU then gives the memory it cached beyond its reservation back to the device:
        the judge's reference sandbox outlives problems, and a 4-8 GiB one left 35-42 GiB cached in it
        for the next (run BH)."""
        self.model = None
        self._input_cache.clear()
        self.__dict__.pop("_bench", None)
        sealedwork.drop(self)
        if self.cuda and self.role == "reference":
            devicemem.trim(self.device, devicemem.REFERENCE_BYTES)

    # -- calls -------------------------------------------------------------------------------
    def _inputs(self, seed: int) -> list[Any]:
        """Fresh copies of the inputs for `seed`; get_inputs runs once per seed.

        get_inputs builds GPU-sized problems on the host, which can take seconds; the few seeds of
        one evaluation (at most INPUT_CACHE_SEEDS, within INPUT_CACHE_BYTES unless the newest alone is
        larger) are kept on the device and every call gets its own copy.
        """
        base = self._input_cache.pop(seed, None)
        if base is None:
            with self.mode:
                base = harness.make_inputs(self.get_inputs, seed, self.device)
        self._input_cache[seed] = base
        while len(self._input_cache) > 1 and (
                len(self._input_cache) > INPUT_CACHE_SEEDS
                or sum(map(_tensor_bytes, self._input_cache.values())) > INPUT_CACHE_BYTES):
            self._input_cache.pop(next(iter(self._input_cache)))
        return harness.fresh_copy(base)

    def _fresh_inputs(self, seed: int) -> list[Any]:
        """The inputs of one call under `seed`, built now (timed windows: never cached)."""
        with self.mode:
            return harness.make_inputs(self.get_inputs, int(seed), self.device)

    def _forward(self, inputs: list[Any]) -> Any:
        with self.mode:
            return self.model(*inputs)

    def _clock(self) -> tuple[Any, Any]:
        """A start and an end event (CUDA), or the host clock and None (CPU): what the timing, peak and
        sealed span's ops time with."""
        if not self.cuda:
            return _perf, None
        return self._event(enable_timing=True), self._event(enable_timing=True)


def _limits(memory_limit_mb: int, cuda: bool) -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    with contextlib.suppress(ValueError, OSError):  # per-uid: contains fork bombs (not for root)
        resource.setrlimit(resource.RLIMIT_NPROC, (4096, 4096))
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_FSIZE, (8 << 30, 8 << 30))
    with contextlib.suppress(ValueError, OSError):  # open files (CUDA and Triton need a few hundred)
        resource.setrlimit(resource.RLIMIT_NOFILE, (4096, 4096))
    if not cuda and memory_limit_mb > 0:  # CUDA reserves address space; the judge polls RSS there
        with contextlib.suppress(ValueError, OSError):
            limit = (memory_limit_mb + 2048) << 20
            resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))


OPS: dict[str, Any] = {"load": Sandbox.load, **trialwork.OPS, **timingwork.OPS, **profilework.OPS,
                       **sealedwork.OPS}


def die_with_parent(parent_pid: int) -> None:
    """SIGKILL this process when its parent dies, so nothing outlives a killed judge or fork server.

    Set after any uid change (the kernel clears it on a change of credentials).
    """
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL
    if parent_pid > 0 and os.getppid() != parent_pid:  # the parent was already gone
        os._exit(1)


def serve(cmd_fd: int, resp_fd: int, role: str, device: str, workdir: str, memory_limit_mb: int,
          gpu_fraction: float, parent_pid: int = 0, side_fd: int = -1) -> None:
    """Answer ops on `cmd_fd` until the judge closes it."""
    die_with_parent(int(parent_pid))
    _limits(memory_limit_mb, device.startswith("cuda"))
    try:
        box = Sandbox(role, device, workdir)
        if side_fd >= 0:
            box.side = socket.socket(fileno=side_fd)
            box.side.setblocking(True)
        write_message(resp_fd, box.warm_up(gpu_fraction).to_wire())
    except Exception as exc:  # noqa: BLE001 - process edge
        write_message(resp_fd, error("sandbox_start", exc).to_wire())
        return
    while True:
        try:
            msg = read_message(cmd_fd)
        except EOFError:
            return
        op, kind = OPS.get(msg.get("op", "")), P.REQUESTS.get(msg.get("op", ""))
        if op is None or kind is None:
            return
        t0 = _perf()
        try:
            reply = op(box, kind.from_wire(msg)).to_wire()
        except BaseException as exc:  # noqa: BLE001 - process edge: report, never die silently
            reply = error("harness_error", exc).to_wire()
        reply["op_s"] = round(_perf() - t0, 4)
        write_message(resp_fd, reply | {"seq": msg.get("seq")})


def main() -> None:
    a = sys.argv
    serve(int(a[1]), int(a[2]), a[3], a[4], a[5], int(a[6]), float(a[7]), int(a[8]),
          int(a[9]) if len(a) > 9 else -1)


def _conforms_sealed(box: Sandbox) -> sealedwork.Box:
    """mypy's check that a Sandbox is what the sealed span's ops take (never called)."""
    return box


def _conforms_trial(box: Sandbox) -> trialwork.Box:
    """mypy's check that a Sandbox is what the correctness trials' ops take (never called)."""
    return box


def _conforms_timing(box: Sandbox) -> timingwork.Box:
    """mypy's check that a Sandbox is what the timing ops take (never called)."""
    return box


def _conforms_profile(box: Sandbox) -> profilework.Box:
    """mypy's check that a Sandbox is what the profile op takes (never called)."""
    return box


if __name__ == "__main__":
    main()
