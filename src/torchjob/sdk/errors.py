"""The typed errors of the Python API. A mistake in the input is a `UserError` (the same class the
`torchjob` command shows as `error: ... fix: ...` with exit 2), raised before anything starts; a job
that ran and failed is a `JobFailed`, carrying its result and root cause."""

from __future__ import annotations

from typing import Any, Protocol

from torchjob.api.errors import UserError


class _Outcome(Protocol):  # a JobResult (torchjob.sdk.result imports this module: no import back)
    @property
    def name(self) -> str: ...

    @property
    def state(self) -> str: ...

    @property
    def root_cause(self) -> str | None: ...

__all__ = ["JobFailed", "JobTimeout", "UnreturnableValue", "UnshippableFunction", "UserError"]


class UnshippableFunction(UserError):
    """The function cannot be shipped to the replicas: a lambda, a closure, a nested function, a
    builtin, one whose source cannot be read, or one that uses globals that cannot travel (see
    `Job.from_function`). Raised by `Job.from_function`; nothing was started."""


class JobFailed(Exception):
    """A job that ran did not succeed (`Job.run`, `JobHandle.wait(check=True)`).

    Attributes:
        result: the job's `JobResult` (its state, status and root cause).
        root_cause: the first failure, torchrun-style: the replica, its exit code or signal, and the
            error torch recorded where there is one.
    """

    def __init__(self, result: _Outcome, *, shown: bool = False) -> None:
        self.result: Any = result
        self.root_cause = result.root_cause
        cause = brief(result.root_cause) if shown and result.root_cause else result.root_cause
        super().__init__(f"job {result.name} {result.state.lower()}" + (f":\n{cause}" if cause else ""))


def brief(root_cause: str) -> str:
    """The root cause without the traceback it quotes, for a message shown under the job's output,
    where that traceback was just streamed (a notebook cell shows it once, not again in the error):
    the error's line and where it was raised instead (core.torch_errors.brief)."""
    from torchjob.core.diagnosis.torch_errors import brief as briefly

    return briefly(root_cause, "`.root_cause` has it")


class UnreturnableValue(JobFailed):
    """The function ran, but what it returned on rank 0 cannot travel back as JSON (e.g. a tensor or
    a model): return plain numbers, strings, lists and dicts (`tensor.tolist()`, `float(loss)`), or
    save the object to storage and return its path. The job is failed; nothing is left running."""


class JobTimeout(TimeoutError):
    """`JobHandle.wait(timeout=...)` ran out of time; the job goes on (delete it to stop it)."""
