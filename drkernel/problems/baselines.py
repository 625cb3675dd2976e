"""Reference baseline timings: Problem x device x backend -> BaselineTiming, kept in a JSON store.

Eager and torch.compile timings of each reference, keyed by (problem hash, device name, backend,
torch version) so a stored timing is reused only where it still means something. CPU timings say so.
They are taken as the judge takes its reference's (sandbox/devicelock.py): with no candidate process
alive on the host and the GPU held exclusively, so that judges and surveys sharing it wait meanwhile.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import statistics
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from drkernel.errors import ConfigError
from drkernel.files import held_lock, write_text_atomically
from drkernel.problems.reference import load_reference
from drkernel.sandbox.devicelock import gpu_work, no_candidates, timing_lock
from drkernel.settings import cache_folder
from drkernel.types import Problem

__all__ = ["BACKENDS", "BaselineStore", "BaselineTiming", "default_store_path", "measure_baseline",
           "refresh_baselines"]

log = logging.getLogger(__name__)

BACKENDS = ("eager", "compile")


def default_store_path() -> Path:
    """Where `drkernel suite baselines` keeps its timings without --store: in drkernel's cache folder
    ($XDG_CACHE_HOME's where set, as the reference-timing cache's)."""
    return cache_folder() / "baselines.json"


@dataclass(slots=True)
class BaselineTiming:
    problem: str
    code_hash: str
    device_name: str  # "NVIDIA H200", or "cpu"
    backend: str  # "eager" | "compile"
    torch_version: str
    median_ms: float
    mean_ms: float
    std_ms: float
    min_ms: float
    max_ms: float
    n: int
    clock: str  # "cuda_event" on a GPU, "cpu_wall" on the CPU (not comparable to GPU timings)
    measured_at: float

    @property
    def key(self) -> str:
        return baseline_key(self.code_hash, self.device_name, self.backend, self.torch_version)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def baseline_key(code_hash: str, device_name: str, backend: str, torch_version: str) -> str:
    return f"{code_hash}|{device_name}|{backend}|torch-{torch_version}"


def _device_name(device: str) -> str:
    return torch.cuda.get_device_name(torch.device(device)) if device.startswith("cuda") else "cpu"


class BaselineStore:
    """A JSON file of BaselineTiming entries; written atomically after each update."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path is not None else default_store_path()
        if self.path.is_dir():
            raise ConfigError(f"{self.path}: is a folder, not a baseline store (a .json file)")
        self._entries = self._read()

    def _read(self) -> dict[str, dict[str, Any]]:
        if not self.path.is_file():
            return {}
        try:
            data = json.loads(self.path.read_bytes())
        except OSError as exc:
            raise ConfigError(f"{self.path}: cannot read: {exc.strerror or exc}") from None
        except ValueError as exc:  # not JSON, nor UTF-8 text
            raise ConfigError(f"{self.path}: not a baseline store: {exc}") from None
        # another JSON file (a survey given as --store) read as an empty store, then replaced by one
        if not (isinstance(data, dict) and isinstance(data.get("entries"), dict)):
            raise ConfigError(f"{self.path}: not a baseline store (a JSON object whose \"entries\" is an "
                              "object); give --store a file of its own")
        entries: dict[str, dict[str, Any]] = data["entries"]
        for key, entry in entries.items():
            why = _not_a_timing(entry)
            if why:  # a hand-edited or damaged entry: named here, never blamed on the reference it keys
                raise ConfigError(f"{self.path}: entry {key!r} is not a baseline timing ({why}); "
                                  "remove it to measure that reference again")
        return entries

    def get(self, problem: Problem, device: str, backend: str) -> BaselineTiming | None:
        key = baseline_key(problem.code_hash, _device_name(device), backend, torch.__version__)
        entry = self._entries.get(key)
        return _timing(entry) if entry else None

    def put(self, timing: BaselineTiming) -> None:
        """Store one timing. The file may be shared by runs at once (the default store is one per user):
        under a lock, what they stored since is read back first, and a file of this run's own replaces it."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with held_lock(self.path.with_name(f".{self.path.name}.lock"), wait=True):
                self._entries = {**self._entries, **self._read(), timing.key: timing.to_dict()}
                text = json.dumps({"version": 1, "entries": self._entries}, indent=1, sort_keys=True)
                write_text_atomically(self.path, text)
        except OSError as exc:
            raise ConfigError(f"{self.path}: cannot write: {exc.strerror or exc}") from None

    def entries(self) -> list[BaselineTiming]:
        return [_timing(e) for e in self._entries.values()]


_FIELD_TYPES = {"str": (str,), "float": (int, float), "int": (int,)}


def _timing(entry: dict[str, Any]) -> BaselineTiming:
    """A store entry as a BaselineTiming; a field it does not know (a note written by hand, another
    drkernel version's) is left out: it was a TypeError, blamed on the reference the entry keys."""
    return BaselineTiming(**{f.name: entry[f.name] for f in dataclasses.fields(BaselineTiming)})


def _not_a_timing(entry: Any) -> str | None:
    """What keeps a store entry from being a BaselineTiming; None when it is one."""
    if not isinstance(entry, dict):
        return f"{type(entry).__name__}, not an object"
    for f in dataclasses.fields(BaselineTiming):
        if f.name not in entry:
            return f"no {f.name}"
        value = entry[f.name]
        if isinstance(value, bool) or not isinstance(value, _FIELD_TYPES[str(f.type)]):
            return f"{f.name} is {value!r}"
    return None


def measure_baseline(problem: Problem, device: str = "cpu", backend: str = "eager", *, trials: int = 20,
                     warmup: int = 3, seed: int = 0) -> BaselineTiming:
    """Time one reference's forward (median of `trials` calls on the same inputs, after warm-up)."""
    if backend not in BACKENDS:
        raise ConfigError(f"backend {backend!r}: expected one of {', '.join(BACKENDS)}")
    if trials < 1 or warmup < 0:
        raise ConfigError("trials must be >= 1 and warmup >= 0")
    cuda = device.startswith("cuda")
    ref = load_reference(problem)
    with gpu_work(device, "baseline_build"):  # device work, untimed: never inside another's window
        model = ref.build(seed, device)
        inputs = ref.inputs(seed + 1, device)
    fn = torch.compile(model) if backend == "compile" else model
    times = []
    with torch.no_grad(), _alone(device):
        # torch.compile compiles, and autotunes on the device, at its first call: inside the hold, as
        # the judge's reference sandbox does (another's work would skew the configs it picks)
        for _ in range(max(warmup, 1 if backend == "compile" else 0)):
            fn(*inputs)
        for _ in range(trials):
            times.append(_time_call(fn, inputs, cuda))
    return BaselineTiming(
        problem=problem.name, code_hash=problem.code_hash, device_name=_device_name(device), backend=backend,
        torch_version=torch.__version__, median_ms=statistics.median(times), mean_ms=statistics.fmean(times),
        std_ms=statistics.pstdev(times), min_ms=min(times), max_ms=max(times), n=len(times),
        clock="cuda_event" if cuda else "cpu_wall", measured_at=time.time(),
    )


@contextlib.contextmanager
def _alone(device: str) -> Iterator[None]:
    """The judge's conditions for timing a reference (sandbox/stages/timing.reference_first): no
    candidate process alive on the host (its CPUs skewed reference times 1.6-1.9x, issue 32), then the
    device's timing lock held exclusively (nothing on the CPU)."""
    with no_candidates(), timing_lock(device, "baseline"):
        yield


def _time_call(fn: Any, inputs: list[Any], cuda: bool) -> float:
    if not cuda:
        start = time.perf_counter()
        fn(*inputs)
        return (time.perf_counter() - start) * 1e3
    torch.cuda.synchronize()
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    fn(*inputs)
    end.record()
    torch.cuda.synchronize()
    return float(begin.elapsed_time(end))


def refresh_baselines(problems: Iterable[Problem], store: BaselineStore, *, device: str = "cpu",
                      backends: Iterable[str] = ("eager",), force: bool = False, trials: int = 20,
                      warmup: int = 3) -> list[BaselineTiming]:
    """Stored timing of each (problem, backend) on `device`, measuring only what is missing
    (everything when `force`)."""
    out = []
    for problem in problems:
        for backend in backends:
            timing = None if force else store.get(problem, device, backend)
            if timing is None:
                log.info("timing %s (%s) on %s", problem.name, backend, device)
                timing = measure_baseline(problem, device, backend, trials=trials, warmup=warmup)
                store.put(timing)
            # the entry may be another problem's of the same code (a copy, a renamed file)
            out.append(dataclasses.replace(timing, problem=problem.name))
    return out
