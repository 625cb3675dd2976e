"""The checks every evaluation request passes before a judge (or a server's queue) takes it.

Input: an EvalRequest; output: nothing, or a ConfigError naming the bad field. Imports neither torch nor
triton: a server checks each submission with it in its event loop, and its first submission waited
1.5 s on a CPU host for torch to import when the check lived in sandbox/judge.py.
"""

from __future__ import annotations

import math

from drkernel.errors import ConfigError
from drkernel.settings import MAX_MEMORY_LIMIT_MB
from drkernel.types import MAX_SEED, MAX_SOURCE_BYTES, MAX_TIMEOUT_S, EvalRequest

__all__ = ["validate_request"]


def validate_request(request: EvalRequest) -> None:
    """The checks every request passes before it is judged (or, on a server, queued). Raises ConfigError."""
    o = request.options
    if o.num_correct_trials < 1 or o.num_correct_trials > 100:
        raise ConfigError("num_correct_trials: must be between 1 and 100")
    if o.num_perf_trials is not None and not 1 <= o.num_perf_trials <= 10000:
        raise ConfigError("num_perf_trials: must be between 1 and 10000")
    if o.num_warmup < 0:
        raise ConfigError("num_warmup: must be >= 0")
    if not 0 < o.timeout_s <= MAX_TIMEOUT_S:  # inf (or 1e300) overflowed the waits that use it
        raise ConfigError(f"timeout_s: must be > 0 and at most {MAX_TIMEOUT_S:.0f} seconds")
    if not 1 <= o.num_profile_calls <= 10000 or not 0 <= o.num_verified_timed_calls <= 10000:
        raise ConfigError("num_profile_calls: must be between 1 and 10000 "
                          "(num_verified_timed_calls between 0 and 10000)")
    if o.seed is not None and not 0 <= o.seed <= MAX_SEED:
        raise ConfigError("seed: must be between 0 and 2**63 - 1")
    if not 0.0 < o.gpu_memory_fraction <= 1.0:
        raise ConfigError("gpu_memory_fraction: must be > 0 and at most 1")
    if not (isinstance(o.entry_point, str) and o.entry_point.isidentifier()):
        raise ConfigError(f"entry_point: {o.entry_point!r} is not a Python class name")
    for name in ("atol", "rtol"):
        value = getattr(o, name)
        if value is not None and not (math.isfinite(value) and value >= 0):
            raise ConfigError(f"{name}: must be a number >= 0")
    if not 0.0 <= o.launch_preroll_us <= 1000.0:
        raise ConfigError("launch_preroll_us: must be between 0 and 1000")
    if not isinstance(o.memory_limit_mb, int) or not 64 <= o.memory_limit_mb <= MAX_MEMORY_LIMIT_MB:
        raise ConfigError(f"memory_limit_mb: {o.memory_limit_mb!r} is not between 64 and "
                          f"{MAX_MEMORY_LIMIT_MB} (MiB of host memory a sandbox may hold)")
    if o.reference_backend not in ("eager", "compile"):
        raise ConfigError(f"reference_backend: {o.reference_backend!r} is not 'eager' or 'compile'")
    if not isinstance(request.kernel_code, str) or not isinstance(request.reference_code, str):
        raise ConfigError("reference_code and kernel_code must be text")
    # (a kernel past the gate's limit is the candidate's compile error: sandbox/static.py)
    text = request.reference_code
    if len(text) > MAX_SOURCE_BYTES or len(text.encode(errors="replace")) > MAX_SOURCE_BYTES:
        raise ConfigError(f"reference_code: exceeds {MAX_SOURCE_BYTES >> 20} MiB")
