"""The judge: EvalRequest -> EvalResult, with warm sandbox processes kept ready.

Each candidate runs in its own fresh sandbox process (spawned ahead of time, torch and triton
already imported) that is killed afterwards; references run in a separate process that never sees
candidate code. One Judge evaluates one request at a time (one GPU, one evaluation).
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from drkernel.device import resolve_device
from drkernel.errors import ConfigError
from drkernel.sandbox.cardmem import CardWitness
from drkernel.sandbox.comparator import JudgeFault, claim_fault, make_comparator
from drkernel.sandbox.pipeline import Evaluation, ReferenceFailure
from drkernel.sandbox.plumbing import isolation
from drkernel.sandbox.plumbing.process import (
    ComparisonProcess,
    SandboxFailure,
    SandboxProcess,
    Zygote,
    sandbox_env,
    scratch_root,
    sweep_stale_folders,
)
from drkernel.sandbox.plumbing.tritonseed import TritonSeed
from drkernel.sandbox.refcache import ReferenceTimingCache
from drkernel.sandbox.requestcheck import validate_request
from drkernel.settings import DEFAULT_SPARES, JudgeSettings, cache_folder
from drkernel.types import (
    DeviceInfo,
    ErrorInfo,
    EvalOutcome,
    EvalRequest,
    EvalResult,
)

__all__ = ["Judge"]

log = logging.getLogger(__name__)

_FAILURE_OUTCOMES = {"timeout": EvalOutcome.TIMEOUT}


class Judge:
    """Judges candidates on one device. Use as a context manager, or call close()."""

    Config = JudgeSettings  # what builds one besides its device: drkernel/settings.py

    def __init__(self, device: str | None = None, config: JudgeSettings | None = None, *,
                 zygote: Zygote | None = None, comparison: ComparisonProcess | None = None,
                 **settings: Any) -> None:
        """A judge on `device` (None: the GPU if there is one), built as `config` says, or as the
        keyword fields of one say (`Judge(device="cpu", spares=1)`; drkernel/settings.py JudgeSettings:
        spares, memory caps, isolation, hidden paths, scratch folder, retries). A judge reads no
        environment variable: `drkernel.settings.judge_settings_from_env` turns the `DRKERNEL_*` ones
        into a JudgeSettings.
        `zygote`: a fork server started earlier (`drkernel eval` starts one before importing torch);
        the judge owns it from here, and replaces it if it was started for another device.
        `comparison`: the same for the comparison child of a GPU judge (sandbox/comparator.py)."""
        if config is not None and settings:
            raise TypeError(f"Judge: a config or its fields ({', '.join(settings)}), not both")
        if "hide" in settings:
            settings["hide"] = tuple(map(str, settings["hide"]))
        self.config = config if config is not None else JudgeSettings(**settings)
        self.disk_limit_mb = self.config.disk_limit_mb
        self.retries = self.config.retries
        self._comparison: ComparisonProcess | None = comparison
        self._seed: TritonSeed | None = None
        self.refill = self.config.refill
        try:
            self._setup(device, zygote)
        except BaseException:
            if zygote is not None:
                zygote.close()
            if self._comparison is not None:
                self._comparison.close()
            raise

    @classmethod
    def from_config(cls, config: JudgeSettings, device: str | None = None, *, zygote: Zygote | None = None,
                    comparison: ComparisonProcess | None = None) -> Judge:
        """A judge on `device` built as `config` says (`zygote`, `comparison`: started earlier)."""
        return cls(device, config, zygote=zygote, comparison=comparison)

    def _setup(self, device: str | None, zygote: Zygote | None) -> None:
        c = self.config
        self.device = resolve_device(device)
        self.cuda = self.device.startswith("cuda")
        # where sandbox folders go: the config's, else /dev/shm on a GPU with room, else the temp folder
        self.scratch = c.scratch_dir or scratch_root(self.device)
        self.spares = c.spares if c.spares is not None else DEFAULT_SPARES["cuda" if self.cuda else "cpu"]
        self.memory_limit_mb = c.memory_limit_mb or (16384 if self.cuda else 6144)
        self.candidate_gpu_fraction = c.candidate_gpu_fraction
        self.reference_gpu_fraction = c.reference_gpu_fraction
        # None: every sandbox compiles into its own fresh cache (a candidate cannot plant binaries
        # for the next one); a shared directory trades that isolation for no recompilation.
        self.shared_triton_cache = c.shared_triton_cache
        # hidden from every sandbox: the reference-timing cache's folder and the sandboxes' scratch root
        extra = [*c.hide]
        # Triton's C helpers, built once and copied into each sandbox's private cache (tritonseed.py)
        seeded = self.cuda and c.shared_triton_cache is None
        seed_folder, seed_kept = (_seed_folder(self.scratch, c.cache_path, c.insecure) if seeded
                                  else (None, False))
        if seed_folder is not None and seed_kept:
            extra.append(str(seed_folder))
        self._hide = _to_hide(c.cache_path, self.scratch, extra)
        self.insecure = c.insecure
        if not c.insecure:
            _require_isolation(c.fork_server, c.shared_triton_cache, self._hide)
            self.isolation = "namespaces"
            self.isolate_uid = True
            sweep_stale_folders(self.scratch)  # a crashed judge's sandboxes' filesystems
        else:
            log.warning("insecure judge: candidate sandboxes run without namespaces (for your own code only)")
            # shared with the judge, unless asked for a leased uid (root only)
            self.isolate_uid = bool(c.isolate_uid)
            self.isolation = "uid" if self.isolate_uid else "none"
        self.cache = ReferenceTimingCache(c.cache_path)
        if seed_folder is not None:
            self._seed = TritonSeed(seed_folder, sandbox_env(self.device, "", ""), persistent=seed_kept)
        # A fork server imports torch and triton once; each sandbox is then a fork (fast to spawn).
        if zygote is not None and (not c.fork_server or not zygote.serves(self.device)):
            zygote.close()
            zygote = None
        self._zygote: Zygote | None = (zygote or Zygote(self.device)) if c.fork_server else None
        self._pool: collections.deque[SandboxProcess] = collections.deque()
        self._ref: SandboxProcess | None = None
        self._closed = False
        # On a GPU the judge's only device context lives in this child (comparisons, fingerprints)
        self._comparator = make_comparator(self.device, self._comparison, fault=claim_fault(c.debug_fault))
        self._comparison = None  # the comparator owns it now
        self.judge_restarts = 0
        self._fill_pool()
        self._ref = self._spawn("reference")

    # -- processes ------------------------------------------------------------------------------
    def _check_zygote(self) -> None:
        if self._zygote is not None and not self._zygote.alive():
            log.warning("the fork server died or was stopped; starting a new one")
            self._replace_zygote()

    def _replace_zygote(self) -> None:
        """A new fork server. The sandboxes the old one forked die with it (each dies with its
        parent): the spares and the reference are dropped here, before anything uses them, so that no
        evaluation meets a sandbox killed under it (which would read as the candidate's crash)."""
        assert self._zygote is not None
        self._zygote.close()
        while self._pool:
            self._pool.popleft().kill()
        if self._ref is not None:
            self._ref.kill()
            self._ref = None
        self._zygote = Zygote(self.device)

    def _spawn(self, role: str) -> SandboxProcess:
        fraction = self.candidate_gpu_fraction if role == "candidate" else self.reference_gpu_fraction
        self._check_zygote()
        disk = self.disk_limit_mb if self.disk_limit_mb is not None else (32768 if self.cuda else 4096)

        def start() -> SandboxProcess:
            return SandboxProcess(role, self.device, self.memory_limit_mb, fraction,
                                  triton_cache=self.shared_triton_cache, zygote=self._zygote,
                                  isolate_uid=self.isolate_uid, namespaces=not self.insecure,
                                  hide=self._hide, triton_seed=self._seed.ready() if self._seed else None,
                                  disk_limit_mb=disk, scratch=self.scratch)

        try:
            return start()
        except SandboxFailure as exc:
            if self._zygote is None or "did not answer" not in exc.message:
                raise
            # frozen (stopped, or stuck): a new fork server, once
            log.warning("the fork server did not answer; starting a new one: %s", exc.message[:200])
            self._replace_zygote()
            return start()

    def _fill_pool(self) -> None:
        while len(self._pool) < self.spares:
            self._pool.append(self._spawn("candidate"))

    def _take_candidate(self) -> SandboxProcess:
        self._check_zygote()  # a stopped or dead one takes its spares with it
        while True:
            proc = self._pool.popleft() if self._pool else self._spawn("candidate")
            if self.refill:
                self._fill_pool()  # the next one warms up while this one works
            if proc.zygote is not self._zygote:  # its fork server was replaced meanwhile: it is gone too
                proc.kill()
                continue
            try:
                proc.wait_ready()
                return proc
            except SandboxFailure as exc:
                log.warning("a candidate sandbox failed to start: %s", exc.message)
                proc.kill()
                if not self._pool:
                    raise

    def _reference(self) -> SandboxProcess:
        if self._ref is None or not self._ref.alive() or self._ref.zygote is not self._zygote:
            if self._ref is not None:
                self._ref.kill()
            self._ref = self._spawn("reference")
        self._ref.wait_ready()
        return self._ref

    def warm(self) -> None:
        """Block until the reference and the spare sandboxes are ready."""
        self._reference()
        for proc in list(self._pool):
            proc.wait_ready()

    # -- evaluation -----------------------------------------------------------------------------
    def evaluate(self, request: EvalRequest) -> EvalResult:
        """Judge one request. A fault of the judge's own (its comparison process, a CUDA error there)
        never becomes a verdict: the judge replaces its device state and tries once more."""
        if self._closed:
            raise ConfigError("this Judge is closed")
        validate_request(request)
        started = time.monotonic()
        result = self._evaluate_once(request)
        for retry in range(1, self.retries + 1):
            if result.error is None or result.error.kind != "judge_error":
                break
            log.warning("judge fault (%s); retrying on fresh device state", result.error.message[:200])
            result = self._evaluate_once(request)
            result.judge_retries = retry
        result.wall_s = round(time.monotonic() - started, 4)
        return result

    def _evaluate_once(self, request: EvalRequest) -> EvalResult:
        cand: SandboxProcess | None = None
        evaluation: Evaluation | None = None
        device = self.device_info()
        try:
            t_take = time.monotonic()
            # the candidate's sandbox first: where its start finds the fork server frozen, the new
            # one replaces the reference too (_replace_zygote), before this evaluation holds it
            cand = self._take_candidate()
            waited = time.monotonic() - t_take  # > 0.05 s: the spare pool did not keep up
            ref = self._reference()
            device = self.device_info()
            evaluation = Evaluation(request, cand, ref, self.cache, device, self._comparator, self.device,
                                    respawn_ref=self._respawn_reference, witness=self._witness(ref))
            result = evaluation.run()
            result.stage_s["spare_wait"] = round(waited, 4)
        except SandboxFailure as exc:
            outcome = _FAILURE_OUTCOMES.get(exc.kind, EvalOutcome.RUNTIME_ERROR)
            result = EvalResult.failure(outcome, exc.kind, exc.message, device=device,
                                        task_id=request.task_id)
            result.compiled = True
        except ReferenceFailure as exc:
            self._restart_reference()
            result = EvalResult.failure(EvalOutcome.INFRA_ERROR, exc.kind, exc.message, device=device,
                                        task_id=request.task_id)
        except Exception as exc:  # noqa: BLE001 - process edge: a judge bug must not kill the caller
            if not isinstance(exc, JudgeFault):
                log.exception("judge failure")
            result = EvalResult(outcome=EvalOutcome.INFRA_ERROR, device=device, task_id=request.task_id,
                                error=ErrorInfo("judge_error", f"{type(exc).__name__}: {exc}",
                                                traceback.format_exc()))
            self._replace_device_state()
        finally:
            output = cand.output_tail() if cand is not None and cand.used else ""
            if cand is not None:
                cand.kill()
            if evaluation is not None:
                evaluation.close()  # after the kill: its processes are gone
        result.sandbox_output = output
        result.isolation = self.isolation
        return result

    def _replace_device_state(self) -> None:
        """After a judge fault: a new comparison process and a new reference process."""
        self.judge_restarts += 1
        self._comparator.restart()
        self._restart_reference()

    def _restart_reference(self) -> None:
        if self._ref is not None:
            self._ref.kill()
        self._ref = self._spawn("reference")

    def _witness(self, ref: SandboxProcess) -> CardWitness | None:
        """Who ran the card short, from the reference's hello (read before any candidate code ran)."""
        info = ref.info
        if not self.cuda or info is None or not info.device_id:
            return None
        return CardWitness(info.device_id, int(self.candidate_gpu_fraction * info.device_total))

    def _respawn_reference(self) -> SandboxProcess:
        """A fresh, ready reference sandbox (an evaluation's retry of a reference op alone)."""
        self._restart_reference()
        return self._reference()

    def device_info(self) -> DeviceInfo:
        info = self._ref.info if self._ref is not None else None
        return DeviceInfo(
            kind="cuda" if self.cuda else "cpu",
            name=info.device_name if info is not None else self.device,
            interpreter=not self.cuda,
            torch_version=info.torch if info is not None else "",
            triton_version=info.triton if info is not None else "",
        )

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        procs = [*self._pool, *([self._ref] if self._ref is not None else [])]
        # all at once: each one's exit (its CUDA context torn down) overlaps the others'
        self._comparator.signal_kill()
        for proc in procs:
            proc.signal_kill()
        for proc in procs:
            proc.kill()
        self._pool.clear()
        if self._zygote is not None:
            self._zygote.close()
        self._comparator.close()
        if self._seed is not None:
            self._seed.close()
        self.cache.close()

    def __enter__(self) -> Judge:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


def _seed_folder(scratch: str | None, cache_path: str | Path | None, insecure: bool) -> tuple[Path, bool]:
    """Where the judge's Triton seed lives, and whether it stays for the next judge on this host: beside
    the reference-timing cache (the default one's folder without a cache: ~/.cache's, as a judge reads
    no $XDG_CACHE_HOME), hidden from every sandbox and writable by root alone. An insecure judge's
    sandboxes share its uid and could rewrite a seed, so it gets one of its own under the scratch root,
    removed when it closes."""
    import tempfile

    if not insecure:
        folder = Path(os.path.abspath(cache_path)).parent if cache_path else cache_folder({})
        return folder / "triton-seed", True
    return Path(tempfile.mkdtemp(prefix="drkernel-seed-", dir=scratch or tempfile.gettempdir())), False


def _to_hide(cache_path: str | Path | None, scratch: str | None, extra: list[str]) -> list[str]:
    """Files and folders covered in every sandbox's view besides /tmp, /var/tmp and /dev/shm.

    The scratch root, the cache file and its folder, unless the Python installation or this
    package lives under that folder; files are covered with an empty one.
    """
    import importlib.util
    import tempfile

    # where torch and triton live, without importing triton here (0.2 s of a single eval, run AO)
    needed = [sys.prefix, sys.base_prefix, str(Path(__file__).resolve().parents[2])]
    for name in ("torch", "triton"):
        spec = importlib.util.find_spec(name)
        needed += list(spec.submodule_search_locations or []) if spec is not None else []
    hide = []
    candidates = [scratch or tempfile.gettempdir(), *extra]
    if cache_path is not None:
        cache = os.path.abspath(cache_path)
        candidates += [cache, cache + "-wal", cache + "-shm", os.path.dirname(cache)]
    for folder in candidates:
        folder = os.path.abspath(folder)
        if os.path.isfile(folder):
            hide.append(folder)
        elif folder != "/" and not any(os.path.abspath(n) == folder
                                       or os.path.abspath(n).startswith(folder + os.sep)
                                       for n in needed):
            hide.append(folder)
    return hide


def _require_isolation(fork_server: bool, shared_triton_cache: str | None, hide: list[str]) -> None:
    """Raise ConfigError unless sandboxes can get namespaces and a uid of their own here."""
    advice = "; pass insecure=True (drkernel eval/serve --insecure) to run your own code without isolation"
    if not fork_server:
        raise ConfigError("sandbox isolation needs the fork server (fork_server=True)" + advice)
    if shared_triton_cache is not None:
        raise ConfigError("a Triton cache shared between sandboxes crosses the sandbox boundary" + advice)
    problem = isolation.probe(hide)
    if problem is not None:
        raise ConfigError(f"cannot isolate candidate sandboxes on this machine: {problem}" + advice)


def _uid_isolation_works() -> bool:
    """Root can give sandboxes their own uid, if that uid can read the Python installation."""
    if os.geteuid() != 0:
        return False
    import torch
    import triton

    files = [sys.executable, os.__file__, torch.__file__, triton.__file__, __file__]
    try:
        probe = subprocess.run(["cat", *files], user=65534, group=65534, extra_groups=[],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return False
    if probe.returncode != 0:
        log.warning(_SHARED_UID, _first_unreadable(files))
    return probe.returncode == 0


_SHARED_UID = (
    "sandboxes share the judge's uid, so a candidate could signal or trace the judge and other sandboxes "
    "and read their files (the clean environment, private temp dir and resource limits still hold). "
    "A uid of its own per sandbox needs the judge to run as root with the Python installation and the "
    "drkernel package readable by other users (e.g. chmod -R o+rX on their folders and every folder "
    "above them); not readable now: %s"
)


def _first_unreadable(files: list[str]) -> str:
    """The first of `files` that the unprivileged uid cannot read (a folder above it may be the cause)."""
    for path in files:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            if subprocess.run(["cat", path], user=65534, group=65534, extra_groups=[],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              timeout=10).returncode != 0:
                return path
    return "?"


