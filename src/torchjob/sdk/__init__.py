"""The Python API (`import torchjob`): build a job from a function, a script, a module, a command or a
document; run it on this machine or submit it to a cluster with the same calls; wait, read its state,
progress and logs; suspend, resume, delete; list jobs. A face over the runtimes, like the `torchjob`
command: each call maps to a runtime verb.

    import torchjob

    def train(epochs):
        import torch.distributed as dist
        dist.init_process_group("gloo")
        ...
        return {"loss": 0.01}

    result = torchjob.Job.from_function(train, args=(3,), nnodes=2, nproc_per_node=4).run()
    print(result.value)
"""

from torchjob.sdk.errors import JobFailed, JobTimeout, UnreturnableValue, UnshippableFunction, UserError
from torchjob.sdk.job import Job
from torchjob.sdk.result import JobHandle, JobResult, list_jobs

__all__ = ["Job", "JobFailed", "JobHandle", "JobResult", "JobTimeout", "UnreturnableValue", "UnshippableFunction",
           "UserError", "list_jobs"]
