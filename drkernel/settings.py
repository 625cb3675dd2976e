"""Settings that many commands share: the judge's typed config, and the one reader of the environment.

Input: a mapping like `os.environ` (`DRKERNEL_*`) and explicit overrides; output: frozen, validated
configs. `JudgeSettings` is what builds a judge (`Judge.from_config`); executors nest it and send it to
their judge processes pickled, so no judge reads the environment. `server/settings.py` reads the
server's own variables through `read_environment`.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from drkernel.errors import ConfigError

__all__ = ["DEBUG_FAULTS", "DEFAULT_SPARES", "JUDGE_ENV", "MAX_MEMORY_LIMIT_MB", "JudgeSettings",
           "cache_folder", "default_timing_cache", "is_header_value", "is_http_url",
           "judge_settings_from_env", "read_environment"]

MAX_MEMORY_LIMIT_MB = 1 << 40  # 1 EiB: the most a sandbox's host memory limit may say
DEFAULT_SPARES = {"cuda": 6, "cpu": 2}  # warm sandboxes (6 beat 3 by 10-13 % a minute on the H200)
DEBUG_FAULTS = ("compare", "device_assert")  # what JudgeSettings.debug_fault may break (a test hook)


def is_header_value(token: str) -> bool:
    """Whether a bearer token can ride in an Authorization header as it is: ASCII, printable, no space at
    either end (a token read from a file keeps its newline). The client's `token` and serve's
    DRKERNEL_AUTH_TOKEN are held to it."""
    return token.isascii() and token.isprintable() and token == token.strip()


def is_http_url(url: str) -> bool:
    """Whether `url` is an http or https URL (a scheme has no case: HTTP:// is one). The client's and the
    http executor's base_url are held to it."""
    return url.lower().startswith(("http://", "https://"))


def cache_folder(environ: Mapping[str, str] | None = None) -> Path:
    """drkernel's folder of the user's cache: under $XDG_CACHE_HOME where it is an absolute path (the XDG
    spec ignores an empty or relative one), else ~/.cache. `environ`: where that is read (None:
    os.environ; a judge, which reads no variable, passes {})."""
    env = os.environ if environ is None else environ
    xdg = env.get("XDG_CACHE_HOME", "")
    return (Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache") / "drkernel"


def default_timing_cache(environ: Mapping[str, str] | None = None) -> str:
    """The user's reference-timing cache (a judge's `cache_path`): `drkernel eval` and `drkernel serve`'s
    judges keep the device's peaks and each problem's reference times there, one file for all of them,
    in `cache_folder`."""
    return str(cache_folder(environ) / "reference_timings.sqlite")


@dataclass(frozen=True, kw_only=True, slots=True)
class JudgeSettings:
    """What a judge is built with, besides its device. None: the judge's own default for the device.

    `insecure`: sandboxes without namespaces, for one's own code only (each result says
    "isolation": "none"); otherwise a judge refuses to start where it cannot isolate them. `hide`:
    more paths no sandbox may see (the timing cache and the scratch folders always are). `refill`:
    start a spare each time one is taken (a judge of one evaluation, `drkernel eval`, says False: a
    spare it would kill unused only competes with the evaluation for the device). `disk_limit_mb`:
    the filesystem of its own that each isolated sandbox's folder is (None: 32 GiB on a GPU, 4 GiB
    on the CPU: five trials' outputs of a KernelBench-sized problem). `retries`: judge faults (its
    comparison process, a CUDA error there) retried on fresh device state, in the judge; a pool then
    retries only a worker that died or froze, never a judge fault again. `scratch_dir`: where
    sandbox folders go (None: /dev/shm on a GPU with 16 GiB free there, else the temp folder).
    `debug_fault`: a test hook, never set in use: "compare" or "device_assert" breaks the judge's
    first comparison; "KIND@PATH" only the first judge's that creates PATH (once across processes)."""

    spares: int | None = None  # None: DEFAULT_SPARES for the device
    cache_path: str | None = None  # the reference-timing cache; None: none kept
    memory_limit_mb: int | None = None  # None: 16 GiB on a GPU, 6 GiB on the CPU
    candidate_gpu_fraction: float = 0.6
    reference_gpu_fraction: float = 0.3
    shared_triton_cache: str | None = None
    fork_server: bool = True
    isolate_uid: bool | None = None
    insecure: bool = False
    hide: tuple[str, ...] = ()
    refill: bool = True
    disk_limit_mb: int | None = None
    retries: int = 1
    scratch_dir: str | None = None
    debug_fault: str | None = None

    def __post_init__(self) -> None:
        if self.spares is not None and not 1 <= self.spares <= 64:
            raise ConfigError(f"judge.spares: {self.spares} not in 1..64")
        # a sandbox's limit in bytes must fit setrlimit's C long: past it every sandbox died at its start
        if self.memory_limit_mb is not None and not 64 <= self.memory_limit_mb <= MAX_MEMORY_LIMIT_MB:
            raise ConfigError(f"judge.memory_limit_mb: {self.memory_limit_mb} not in "
                              f"64..{MAX_MEMORY_LIMIT_MB} (MiB of host memory a sandbox may hold)")
        if not 0 <= self.retries <= 3:
            raise ConfigError(f"judge.retries: {self.retries} not in 0..3")
        for name in ("candidate_gpu_fraction", "reference_gpu_fraction"):
            if not 0.0 < getattr(self, name) <= 1.0:
                raise ConfigError(f"judge.{name}: {getattr(self, name)} not in (0, 1]")
        if self.scratch_dir is not None and not os.path.isdir(self.scratch_dir):
            raise ConfigError(f"judge.scratch_dir: {self.scratch_dir!r} is not a folder")
        if self.debug_fault is not None and self.debug_fault.partition("@")[0] not in DEBUG_FAULTS:
            raise ConfigError(f"judge.debug_fault: {self.debug_fault!r}: expected "
                              f"{' or '.join(DEBUG_FAULTS)}, optionally followed by @PATH")

    def replace(self, **changes: Any) -> JudgeSettings:
        return dataclasses.replace(self, **changes)

    def shared(self, judges: int) -> JudgeSettings:
        """The config of one of `judges` judges sharing a GPU: 1/judges of a lone judge's candidate
        memory cap, and fewer warm spares (their compiles overlap, their timing takes turns).

        The reference's cap is not divided. The reference is trusted: it holds a fixed reservation
        from its start (sandbox/inside/devicemem.py), grows only to its problem's size and gives a large
        problem's memory back once done, so its cap is a ceiling against a reference too large for
        the card, not a partition. Divided four ways it was 5.94 GiB on an 80 GB H100, and an honest
        kernel of a 16384 x 8192 elementwise problem was blamed for the reference running out of it
        (run BK). The candidates' caps are what keeps judges from overcommitting the card."""
        n = max(1, judges)
        if n == 1:
            return self
        return self.replace(spares=self.spares or max(2, DEFAULT_SPARES["cuda"] // n),
                            candidate_gpu_fraction=self.candidate_gpu_fraction / n)


# env var -> what it sets in a JudgeSettings
JUDGE_ENV = {
    "DRKERNEL_INSECURE": "insecure (1, true or yes)",
    "DRKERNEL_SANDBOX_HIDE": "hide (a list like PATH)",
    "DRKERNEL_SPARES": "spares (1 to 64)",
    "DRKERNEL_SCRATCH_DIR": "scratch_dir (a folder)",
    "DRKERNEL_DEBUG_JUDGE_FAULT": "debug_fault (a test hook: compare or device_assert[@PATH])",
}


def judge_settings_from_env(environ: Mapping[str, str] | None = None, **overrides: Any) -> JudgeSettings:
    """A JudgeSettings from the `DRKERNEL_*` variables of JUDGE_ENV, then `overrides` (None: unset).
    The commands that build judges for a user (`eval`, `serve`, `drkernel.evaluate`) call this."""
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    if env.get("DRKERNEL_INSECURE", "").strip().lower() in ("1", "true", "yes"):
        values["insecure"] = True
    hide = tuple(p for p in env.get("DRKERNEL_SANDBOX_HIDE", "").split(os.pathsep) if p)
    if hide:
        values["hide"] = hide
    raw = env.get("DRKERNEL_SPARES")
    if raw is not None and raw.strip():
        try:
            spares = int(raw)
        except ValueError:
            spares = 0
        if not 1 <= spares <= 64:
            raise ConfigError(f"DRKERNEL_SPARES={raw!r}: expected a whole number of warm sandboxes "
                              "from 1 to 64")
        values["spares"] = spares
    for var, field in (("DRKERNEL_SCRATCH_DIR", "scratch_dir"),
                       ("DRKERNEL_DEBUG_JUDGE_FAULT", "debug_fault")):
        text = env.get(var, "").strip()
        if text:
            values[field] = text
    for key, value in overrides.items():
        if value is None:
            continue
        if key == "hide":
            value = (*values.get("hide", ()), *map(str, value))
        values[key] = value
    return JudgeSettings(**values)


def read_environment(spec: Mapping[str, tuple[str, type]],
                     environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """{field: value} from the variables of `spec` (var -> (field, type)) that are set and not empty."""
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for var, (name, kind) in spec.items():
        raw = env.get(var)
        if raw is None or raw == "":
            continue
        try:
            values[name] = kind(raw)
        except ValueError:
            raise ConfigError(f"{var}={raw!r}: not a valid {kind.__name__}") from None
    return values
