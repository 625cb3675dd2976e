"""drkernel: judge, serve and train LLM-written Triton kernels against PyTorch references."""

from drkernel.errors import ConfigError, DrKernelError, ExecutorError, PolicyError, ProblemError
from drkernel.types import (
    EvalOptions,
    EvalOutcome,
    EvalRequest,
    EvalResult,
    EvalStatus,
    Problem,
)

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "DrKernelError",
    "EvalOptions",
    "EvalOutcome",
    "EvalRequest",
    "EvalResult",
    "EvalStatus",
    "ExecutorError",
    "PolicyError",
    "Problem",
    "ProblemError",
    "__version__",
    "evaluate",
]


def evaluate(reference_code: str, kernel_code: str, options: EvalOptions | None = None, *,
             device: str | None = None) -> EvalResult:
    """Judge one candidate in a fresh judge (spawns its sandbox processes; use Judge to reuse them).
    `device`: "cpu", "cuda" or "cuda:N"; None: the GPU when there is one."""
    from drkernel.sandbox.requestcheck import validate_request

    opts = EvalOptions() if options is None else options
    if not isinstance(opts, EvalOptions):
        raise ConfigError(f"options: expected drkernel.EvalOptions (EvalOptions.paper(), EvalOptions(...)), "
                          f"got {type(opts).__name__}")
    request = EvalRequest(reference_code=reference_code, kernel_code=kernel_code, options=opts)
    validate_request(request)  # a request no judge takes, refused before one starts (seconds)

    from drkernel.sandbox.judge import Judge
    from drkernel.settings import judge_settings_from_env

    with Judge.from_config(judge_settings_from_env(), device) as judge:  # DRKERNEL_INSECURE & co.
        return judge.evaluate(request)
