"""The exception tree for infrastructure failures. A bad kernel is never an exception: it is an
`EvalResult` (see drkernel.types). These are for problems of ours, the user's input, or the network.

    DrKernelError
    ├── ConfigError          bad option, bad recipe field, bad input file
    ├── ProblemError         a reference file that is not KernelBench format
    ├── ExecutorError        the evaluation machinery failed
    │   ├── WorkerLost       a worker died and the task could not be retried
    │   ├── EvalTimeout      a wait ran past its deadline
    │   └── Overloaded       the queue is full (back-pressure)
    └── PolicyError          the model backend failed (HTTP error, bad response)
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "DrKernelError",
    "EvalTimeout",
    "ExecutorError",
    "Overloaded",
    "PolicyError",
    "ProblemError",
    "WorkerLost",
]


class DrKernelError(Exception):
    """Base of every error drkernel raises on purpose."""


class ConfigError(DrKernelError):
    pass


class ProblemError(DrKernelError):
    pass


class ExecutorError(DrKernelError):
    pass


class WorkerLost(ExecutorError):
    pass


class EvalTimeout(ExecutorError):
    pass


class Overloaded(ExecutorError):
    pass


class PolicyError(DrKernelError):
    pass
