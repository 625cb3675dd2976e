"""In-sandbox instruments: Triton launch hook, tamper watch, thread watch, device shims, inputs.

Runs only inside sandbox processes (drkernel.sandbox.inside.worker). Everything here is captured before any
candidate code is imported, so the harness keeps working references to the originals.
"""

from __future__ import annotations

import inspect
import sys
import threading
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

__all__ = [
    "CpuDeviceMode",
    "LaunchRecorder",
    "NotInputs",
    "TamperWatch",
    "ThreadWatch",
    "flat_row",
    "flatten_outputs",
    "fresh_copy",
    "input_list",
    "make_inputs",
    "on_device_first",
    "to_device",
]


class LaunchRecorder:
    """Records successful launches of Triton kernels whose source lives in one file."""

    def __init__(self) -> None:
        self.own_file: str | None = None
        self.launches: list[str] = []
        self.enabled = True
        self._patched: list[tuple[type, Callable[..., Any]]] = []

    def install(self) -> None:
        from triton.runtime.jit import JITFunction

        classes: list[Any] = [JITFunction]
        try:
            from triton.runtime.interpreter import InterpretedFunction

            classes.append(InterpretedFunction)
        except ImportError:  # pragma: no cover - older triton
            pass
        for cls in classes:
            original = cls.run
            self._patched.append((cls, original))
            cls.run = self._wrap(original)

    def _wrap(self, original: Callable[..., Any]) -> Callable[..., Any]:
        recorder = self

        def run(kernel: Any, *args: Any, **kwargs: Any) -> Any:
            result = original(kernel, *args, **kwargs)
            if recorder.enabled and not kwargs.get("warmup", False):
                fn = getattr(kernel, "fn", None)
                code = getattr(fn, "__code__", None)
                if fn is not None and code is not None and code.co_filename == recorder.own_file:
                    recorder.launches.append(fn.__name__)
            return result

        return run

    def take(self) -> list[str]:
        out, self.launches = self.launches, []
        return out

    def hooked(self) -> list[tuple[Any, str, Any]]:
        return [(cls, "run", inspect.getattr_static(cls, "run")) for cls, _ in self._patched]


class TamperWatch:
    """Keeps the identity of functions a candidate might patch; reports any that changed."""

    def __init__(self) -> None:
        self.watched: list[tuple[Any, str, Any, str]] = []

    def add(self, owner: Any, attr: str, label: str | None = None) -> None:
        try:
            value = inspect.getattr_static(owner, attr)
        except AttributeError:
            return
        name = label or f"{getattr(owner, '__name__', type(owner).__name__)}.{attr}"
        self.watched.append((owner, attr, value, name))

    def add_defaults(self, cuda: bool) -> None:
        import time

        for attr in ("allclose", "equal", "isclose", "manual_seed", "randn", "rand", "randint",
                     "randn_like", "rand_like", "empty", "zeros", "save", "load"):
            self.add(torch, attr, f"torch.{attr}")
        self.add(torch.testing, "assert_close", "torch.testing.assert_close")
        for attr in ("__eq__", "clone", "cpu", "to", "contiguous", "__torch_function__"):
            self.add(torch.Tensor, attr, f"torch.Tensor.{attr}")
        self.add(torch.nn.Module, "__call__", "torch.nn.Module.__call__")
        self.add(torch.nn.Module, "_call_impl", "torch.nn.Module._call_impl")
        for attr in ("perf_counter", "perf_counter_ns", "time", "monotonic", "process_time"):
            self.add(time, attr, f"time.{attr}")
        self.add(torch.profiler, "profile", "torch.profiler.profile")
        self.add(torch.autograd.profiler, "profile", "torch.autograd.profiler.profile")
        self.add(torch.cuda, "synchronize", "torch.cuda.synchronize")
        if cuda:
            self.add(torch.cuda, "Event", "torch.cuda.Event")
            for attr in ("record", "elapsed_time", "synchronize", "query"):
                self.add(torch.cuda.Event, attr, f"torch.cuda.Event.{attr}")
            self.add(torch.cuda, "current_stream", "torch.cuda.current_stream")
            self.add(torch.cuda, "Stream", "torch.cuda.Stream")

    def changed(self) -> list[str]:
        out = []
        for owner, attr, value, name in self.watched:
            try:
                current = inspect.getattr_static(owner, attr)
            except AttributeError:
                out.append(name)
                continue
            if current is not value:
                out.append(name)
        return out


class ThreadWatch:
    """Python threads alive now that were not alive at the baseline."""

    def __init__(self) -> None:
        self.baseline: set[int] = set()

    def snapshot(self) -> None:
        self.baseline = set(sys._current_frames()) | {t.ident for t in threading.enumerate() if t.ident}

    def extra(self) -> int:
        now = set(sys._current_frames()) | {t.ident for t in threading.enumerate() if t.ident}
        return len(now - self.baseline)


def _is_cuda(device: Any) -> bool:
    if isinstance(device, torch.device):
        return device.type == "cuda"
    if isinstance(device, str):
        return device.startswith("cuda")
    return isinstance(device, int)  # Tensor.to(0) / .cuda(0) meant a GPU index


class CpuDeviceMode(TorchFunctionMode):
    """Rewrites requests for CUDA tensors to the CPU (CPU mode: references and prompts say 'cuda')."""

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = dict(kwargs or {})
        if func is torch.Tensor.cuda:
            return args[0]
        if "device" in kwargs and _is_cuda(kwargs["device"]):
            kwargs["device"] = "cpu"
        if func is torch.Tensor.to and len(args) > 1 and _is_cuda(args[1]):
            args = (args[0], "cpu", *args[2:])
        return func(*args, **kwargs)


def to_device(obj: Any, device: torch.device) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_device(o, device) for o in obj)
    return obj


def fresh_copy(obj: Any) -> Any:
    """New tensors (new storage) with the same values; other values as they are."""
    if isinstance(obj, torch.Tensor):
        return obj.clone()
    if isinstance(obj, (list, tuple)):
        return type(obj)(fresh_copy(o) for o in obj)
    return obj


def make_inputs(get_inputs: Callable[[], Any], seed: int, device: torch.device) -> list[Any]:
    """Inputs of one call: get_inputs() under `seed`, on `device`; the reference process builds the
    same values from the same seed."""
    raw = on_device_first(lambda: input_list(get_inputs(), "get_inputs"), seed, device)
    return to_device(raw, device)


class NotInputs(TypeError):
    """get_inputs() or get_init_inputs() returned something that is no list of a call's arguments."""


def input_list(value: Any, name: str) -> list[Any]:
    """What get_inputs() or get_init_inputs() returned, as the list of a call's arguments. A bare
    tensor, whose rows would become the arguments (a (1, N) input judged as one of shape (N,)), None,
    a string or a mapping is NotInputs, a TypeError naming the function (the reference's error, before
    any work)."""
    if isinstance(value, (torch.Tensor, str, bytes, dict)) or not hasattr(value, "__iter__"):
        kind = "None" if value is None else f"a {type(value).__name__}"
        raise NotInputs(f"{name}() returned {kind}, not a list of inputs ([x], not x)")
    return list(value)


def on_device_first(build: Callable[[], Any], seed: int, device: torch.device) -> Any:
    """`build()` under `seed` with `device` as the default device; on the host if that fails.

    KernelBench-sized inputs and weights take seconds to fill on the host with one thread and
    milliseconds on the GPU. The reference process and the sandbox build the same way, so both see
    the same values. Code that cannot run with a CUDA default device gets the host, as before.
    """
    torch.manual_seed(seed)
    if device.type != "cuda":
        return build()
    try:
        with torch.device(device):
            return build()
    except Exception:  # noqa: BLE001 - e.g. numpy interop on a CUDA default device
        torch.manual_seed(seed)
        return build()


def flatten_outputs(out: Any) -> tuple[Any, list[torch.Tensor]]:
    """Split an output into a JSON structure with tensor slots, and the tensors."""
    tensors: list[torch.Tensor] = []
    return _walk(out, tensors), tensors


def _real_row(t: torch.Tensor) -> torch.Tensor:
    """`t` detached and flattened, complex as its real pairs (no copy where none is needed)."""
    x = t.detach()
    if x.is_complex():
        x = torch.view_as_real(x)
    return x.reshape(-1)


def flat_row(t: torch.Tensor) -> torch.Tensor:
    """`t` as one row that a norm can be taken over without loss: complex as its real pairs, float32
    and float64 as they are, half-width floats in float32 (a float16 norm overflows at 65504) and
    integers and bools exactly, in float64."""
    x = _real_row(t)
    if x.dtype in (torch.float32, torch.float64):
        return x
    return x.to(torch.float32 if x.is_floating_point() else torch.float64)


def _walk(o: Any, tensors: list[torch.Tensor]) -> Any:
    # a module-level function, not a closure over itself: a self-referencing closure is a reference
    # cycle that would keep every output (GiBs on a GPU) alive until the garbage collector runs
    if isinstance(o, torch.Tensor):
        tensors.append(o)
        return {"t": len(tensors) - 1}
    if isinstance(o, (list, tuple)):
        return {"seq": [_walk(x, tensors) for x in o]}
    if o is None or isinstance(o, (bool, int, float, str)):
        return {"v": o}
    return {"bad": type(o).__name__}


def checksum(out: Any, wseed: int) -> list[list[Any]]:
    """Per output leaf: [shape, dtype, sum(w * x), sum(x * x), NaN count, +Inf count, -Inf count].

    `w` is a fresh N(0, 1) tensor of the leaf's full shape, drawn from `wseed`: with a full-shape
    projection, computing the sum without the output costs as much as the output itself (a rank-one
    projection would let a linear problem shortcut it). The reference computes the same from the
    same inputs; an honest output differs by about ||out - ref|| in the first sum.
    """
    return checksums([out], [wseed])[0]


def checksums(outs: Iterable[Any], wseeds: list[int]) -> list[list[list[Any]]]:
    """checksum() of each output, read back from each device once for all of them.

    A window has up to 100 calls: one read per output leaf would wait for the device 100 times, and
    a dozen small ops per leaf cost more host time than a small kernel's whole window (run AF: the
    device lock held ~0.95 s per evaluation). So leaves of one length are copied into the rows of a
    batch (at most CHECKSUM_BATCH_BYTES) and summed row-wise a batch at a time: each row's sums are
    its own leaf's, with its own `w`. `outs` may be a generator: each output is dropped once copied."""
    metas: list[list[tuple[list[Any], str, int]]] = []  # per output leaf: [shape, dtype], device, slot
    batches: dict[tuple[str, int], _Batch] = {}  # (device, numel) -> rows not yet summed
    done: dict[str, list[torch.Tensor]] = {}  # device -> summed blocks of [slot, s, q, nan, pinf, ninf]
    slots: dict[str, int] = {}
    for out, wseed in zip(outs, wseeds, strict=True):
        _, tensors = flatten_outputs(out)  # every leaf is a tensor
        row: list[tuple[list[Any], str, int]] = []
        for k, t in enumerate(tensors):
            x = _as_float_row(t)
            dev = str(x.device)
            batch = batches.get((dev, x.numel()))
            if batch is None:
                batch = batches[(dev, x.numel())] = _Batch(x.numel())
            slot = slots.get(dev, 0)
            slots[dev] = slot + 1
            batch.add(x, (int(wseed) * 1_000_003 + k) % (1 << 63), slot)
            if batch.full():
                done.setdefault(dev, []).append(batch.flush())
            row.append(([list(t.shape), str(t.dtype)], dev, slot))
        metas.append(row)
    for (dev, _), batch in batches.items():
        if batch.rows:
            done.setdefault(dev, []).append(batch.flush())
    values: dict[str, dict[int, list[float]]] = {}
    for dev, blocks in done.items():
        table = torch.cat(blocks).tolist()  # one read per device
        values[dev] = {int(r[0]): r[1:] for r in table}
    rows: list[list[list[Any]]] = []
    for row in metas:
        sums: list[list[Any]] = []
        for meta, dev, i in row:
            s, q, nan, pinf, ninf = values[dev][i]
            sums.append([*meta, s, q, int(nan), int(pinf), int(ninf)])
        rows.append(sums)
    return rows


CHECKSUM_BATCH_BYTES = 64 << 20  # of float32 rows per batch (each batch holds as much again of w)
_SMALL = 1 << 22  # leaves under this many elements are summed in float64
_generators: dict[str, torch.Generator] = {}


def _as_float_row(t: torch.Tensor) -> torch.Tensor:
    return _real_row(t).to(torch.float32)


class _Batch:
    """Rows of equal length (float32 leaves) and their `w`s, summed row-wise at once."""

    def __init__(self, numel: int) -> None:
        self.numel = numel
        self.cap = max(1, CHECKSUM_BATCH_BYTES // (4 * max(numel, 1)))
        self.x: torch.Tensor | None = None
        self.w: torch.Tensor | None = None
        self.rows: list[int] = []  # the slots of the rows, in order

    def add(self, x: torch.Tensor, seed: int, slot: int) -> None:
        if self.x is None or self.w is None:
            shape = (self.cap, self.numel)
            self.x = torch.empty(shape, dtype=torch.float32, device=x.device)
            self.w = torch.empty(shape, dtype=torch.float32, device=x.device)
        r = len(self.rows)
        self.x[r].copy_(x)
        g = _generators.get(str(x.device))
        if g is None:
            g = _generators[str(x.device)] = torch.Generator(device=x.device)
        g.manual_seed(seed)
        torch.randn(self.numel, generator=g, device=x.device, dtype=torch.float32, out=self.w[r])
        self.rows.append(slot)

    def full(self) -> bool:
        return len(self.rows) >= self.cap

    def flush(self) -> torch.Tensor:
        """[slot, sum(w * x), sum(x * x), NaN, +Inf, -Inf] per row, as float64, on the device."""
        assert self.x is not None and self.w is not None
        n = len(self.rows)
        x, w = self.x[:n], self.w[:n]
        counts = torch.stack([torch.isnan(x).sum(1), torch.isposinf(x).sum(1), torch.isneginf(x).sum(1)],
                             dim=1).double()
        x = torch.nan_to_num(x, nan=0.0, posinf=0.0, neginf=0.0)
        if self.numel < _SMALL:
            xd = x.double()
            s, q = (xd * w.double()).sum(1), xd.square().sum(1)
        else:
            s, q = (x * w).sum(1).double(), x.square().sum(1).double()
        slots = torch.tensor(self.rows, dtype=torch.float64, device=x.device)
        self.rows = []
        return torch.cat([slots[:, None], s[:, None], q[:, None], counts], dim=1)


def refill(dst: list[Any], src: list[Any]) -> bool:
    """Copy fresh inputs into the buffers a timed window was built on; False if they do not fit."""
    if len(dst) != len(src):
        return False
    for d, s in zip(dst, src, strict=True):
        if isinstance(d, torch.Tensor) != isinstance(s, torch.Tensor):
            return False
        if isinstance(d, torch.Tensor):
            if d.shape != s.shape or d.dtype != s.dtype or d.device != s.device:
                return False
            d.copy_(s)
        elif isinstance(d, (list, tuple)):
            if not refill(list(d), list(s)):
                return False
        elif d != s:
            return False
    return True
