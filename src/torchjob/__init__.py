"""torchjob: run PyTorch distributed training jobs locally or on Kubernetes.

The Python API is here, loaded on first use so that `import torchjob` stays fast (no Kubernetes
client, no job model built at import):

    import torchjob

    job = torchjob.Job.from_function(train, args=(3,), nnodes=2, nproc_per_node=4)
    result = job.run()                      # on this machine; job.submit(kube=True) for a cluster
    print(result.state, result.value)

See `torchjob.sdk` for every name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torchjob.version import __version__

if TYPE_CHECKING:
    from torchjob.sdk import (
        Job,
        JobFailed,
        JobHandle,
        JobResult,
        JobTimeout,
        UnreturnableValue,
        UnshippableFunction,
        UserError,
        list_jobs,
    )

__all__ = ["Job", "JobFailed", "JobHandle", "JobResult", "JobTimeout", "UnreturnableValue", "UnshippableFunction",
           "UserError", "__version__", "list_jobs"]
_LAZY = frozenset(__all__) - {"__version__"}


def __getattr__(name: str) -> Any:
    """`torchjob.Job` and the other API names, imported from torchjob.sdk when first asked for."""
    if name in _LAZY:
        from torchjob import sdk

        value = getattr(sdk, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'torchjob' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
