"""What a job gives back (`JobResult`) and the handle on a submitted job (`JobHandle`), the same for a
job on this machine and one on a cluster."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from torchjob.api.errors import UserError
from torchjob.api.model import JobStatus, Progress
from torchjob.api.output import hidden
from torchjob.api.status import JobState
from torchjob.sdk.errors import JobFailed, JobTimeout, UnreturnableValue
from torchjob.sdk.ship import value_in

ENDED = (JobState.SUCCEEDED, JobState.FAILED)

if TYPE_CHECKING:
    from torchjob.runtime import JobView, Runtime


@dataclass(frozen=True, repr=False)
class JobResult:
    """A job's outcome.

    Attributes:
        name: the job's name.
        state: `JobState.SUCCEEDED`, `FAILED`, `RUNNING`, `SUSPENDED`, ... (`JobStatus.state`; a `str`
            enum: it equals and prints as "Succeeded", "Failed", ...).
        status: the full status (conditions, replica counts, progress, failure).
        root_cause: the first failure, torchrun-style (None when it succeeded).

    Example:
        >>> result = torchjob.Job.from_function(train, args=(3,), nproc_per_node=2).run()
        >>> result.ok, result.value
        (True, {'loss': 0.01})
    """

    name: str
    state: JobState
    status: JobStatus
    root_cause: str | None = None
    has_value: bool = False
    returned: Any = None
    unreturnable: str | None = None

    @property
    def ok(self) -> bool:
        """True when the job succeeded."""
        return self.state is JobState.SUCCEEDED

    @property
    def value(self) -> Any:
        """What the function returned on rank 0 (a job built with `Job.from_function`), read back as JSON;
        None for a job without a function, or one that has not returned."""
        return self.returned

    def __repr__(self) -> str:
        """One line (the status, with its history and conditions, is a long model: `result.status`)."""
        parts = [self.name, str(self.state)]
        if self.has_value:
            text = repr(self.returned)
            parts.append(f"value={text if len(text) <= 80 else text[:77] + '...'}")
        if self.status.failure is not None:
            parts.append(f"reason={self.status.failure.reason}")
        return f"<JobResult {' '.join(parts)}>"

    def check(self, *, shown: bool = False) -> JobResult:
        """This result, or the typed error of a failed job (`UnreturnableValue`, `JobFailed`); `shown`:
        the job's output was just shown, and the error's message leaves out the traceback it holds."""
        __tracebackhide__ = True  # IPython: the error is the job's, not this frame's
        if self.unreturnable is not None:
            raise UnreturnableValue(self, shown=shown)
        if not self.ok:
            raise JobFailed(self, shown=shown)
        return self


def result_of(view: JobView, rt: Runtime[Any] | None = None, nonce: str | None = None,
              ref: str | None = None) -> JobResult:
    """A view of a job as a JobResult; for a function's job (its `nonce` given), with the value rank 0
    printed, read from the output of the replica that holds rank 0 (`ref`: how the runtime names the
    job, `torchjob/NAME` on a cluster)."""
    found, value, why = value_in(rank0_lines(view, rt, ref), nonce) if rt is not None and nonce else \
        (False, None, None)
    root = view.root_cause
    if why is not None:
        root = f"{why}\n{root}" if root else why
    state = view.status.state
    return JobResult(view.name, state, view.status, None if state is JobState.SUCCEEDED else root, found, value, why)


def rank0_lines(view: JobView, rt: Runtime[Any], ref: str | None = None) -> list[str]:
    """The output of the replica whose processes include rank 0: the master's; an elastic job (no
    master, ranks given by the rendezvous) any worker's, each read. Empty once the output is gone."""
    names = ["master-0"] if "Master" in view.job.spec.pytorchReplicaSpecs else \
        [f"worker-{i}" for i in range(view.job.replica_count("Worker"))]
    lines: list[str] = []
    for name in names:
        try:
            lines += list(rt.logs(ref or view.name, name))
        except UserError:
            continue
    return lines


class JobHandle:
    """A submitted job: wait for it, read its state, progress and logs, suspend, resume or delete it.

    Example:
        >>> handle = job.submit()                     # or job.submit(kube=True, namespace="team-a")
        >>> handle.progress()                         # percent, step, ETA, metrics (None before a report)
        >>> result = handle.wait(timeout=600)
        >>> print(handle.logs(replica="master-0"))
    """

    def __init__(self, name: str, runtime: Runtime[Any], *, kube: bool = False, namespace: str | None = None,
                 nonce: str | None = None, kind: str | None = None) -> None:
        self.name = name
        # how the runtime is asked for it: on a cluster `KIND/NAME` (a TorchJob and a TrainJob may share a name)
        self._ref = f"{kind.lower()}/{name}" if kube and kind else name
        self.kube = kube  # where it runs, for its repr: each call goes to the runtime alike
        self.namespace = namespace
        self._rt = runtime
        self._nonce = nonce  # a function's job: the nonce its value's line carries

    def __repr__(self) -> str:
        """One line, read from nothing (a repr that called the runtime could fail or block)."""
        where = f"kube, namespace {self.namespace}" if self.kube else "local"
        return f"<JobHandle {self.name} ({where})>"

    def describe(self) -> JobView:
        """What `torchjob describe` shows: the job, its status, each replica's attempts with their exit
        codes, its events, and the root cause of a failure."""
        return self._rt.describe(self._ref)

    def status(self) -> JobStatus:
        """The job's status now."""
        return self._rt.describe(self._ref).status

    @property
    def state(self) -> JobState:
        """`JobState.CREATED`, `RUNNING`, `SUCCEEDED`, `FAILED`, `SUSPENDED`, ... (equal to "Created",
        "Running", ...). A job submitted on this machine is `Created` at least when `submit` returns;
        on a cluster it is `Pending` until the operator takes it."""
        return self.status().state

    def progress(self) -> Progress | None:
        """The job's latest progress (percent, step, rate, ETA, metrics) as its replicas report it with
        `torchjob.report.report`; None before the first report."""
        return self.status().progress

    def wait(self, timeout: float | None = None, *, check: bool = False, poll_s: float = 0.5) -> JobResult:
        """Block until the job ends (succeeds or fails) and return its result.

        Args:
            timeout: seconds to wait at most (None: as long as it takes); past it, `JobTimeout` is raised
                and the job goes on.
            check: raise `JobFailed` (or `UnreturnableValue`) when the job did not succeed.
        """
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            view = self._rt.describe(self._ref)
            if view.status.finished:
                break
            if end is not None and time.monotonic() >= end:
                raise JobTimeout(f"job {self.name} is still {view.status.state.lower()} after {timeout:g}s")
            time.sleep(poll_s)
        result = result_of(view, self._rt, self._nonce, self._ref)
        return result.check() if check else result

    def output(self) -> str:
        """Every line of the job's output; empty once the job and its output are gone."""
        try:
            return self.logs()
        except UserError:
            return ""

    def logs(self, replica: str | None = None, *, follow: bool = False) -> str:
        """The job's output: every replica's lines prefixed (`[worker-1] ...`), or one replica's
        (`replica="master-0"`). With `follow`, also print them as they come until the job ends."""
        lines: list[str] = []
        for line in self._rt.logs(self._ref, replica, follow=follow):
            if hidden(line):  # a function's value travels on a line of its own, not for reading
                continue
            lines.append(line)
            if follow:
                print(line, flush=True)
        return "\n".join(lines) + ("\n" if lines else "")

    def stacks(self, *, all_threads: bool = True) -> dict[str, Any]:
        """Where the running job's ranks are (what `torchjob stacks -o json` prints): `groups`, each
        with its `ranks`, `processes`, `frames` (innermost first: `file`, `line`, `function`, `user`:
        the user's own code or a library's) and a one-line `summary`; `short` (for each group the
        innermost frame of the user's code), `missing` (processes that did not answer), `seconds`.
        On a cluster, from the job's pods (by default; not a job annotated `torchjob.dev/stacks: "false"`)."""
        from torchjob.core.diagnosis import stacks as core_stacks

        take = self._rt.stacks
        taken: core_stacks.Stacks = take(self._ref)
        return core_stacks.as_data(taken, all_threads=all_threads)

    def suspend(self, *, wait: bool = True, timeout: float = 120) -> None:
        """Stop every replica; `resume` starts them again. Returns once the job is suspended (its state
        `Suspended`, every replica stopped); `wait=False` returns at once, the change under way."""
        self._rt.suspend(self._ref)
        if wait:
            self._until(lambda st: st.state in (JobState.SUSPENDED, *ENDED), "suspended", timeout)

    def resume(self, *, wait: bool = True, timeout: float = 120) -> None:
        """Start a suspended job's replicas again. Returns once it is no longer suspended (`Running`,
        or `Created` while its replicas start); `wait=False` returns at once. A job under a Kueue
        queue stays suspended until Kueue admits it: resume it with `wait=False`."""
        self._rt.resume(self._ref)
        if wait:
            self._until(lambda st: st.state is not JobState.SUSPENDED, "resumed", timeout)

    def _until(self, done: Callable[[JobStatus], bool], what: str, timeout: float, poll_s: float = 0.1) -> None:
        end = time.monotonic() + timeout
        while True:
            st = self.status()
            if done(st):
                return
            if time.monotonic() >= end:
                raise JobTimeout(f"job {self.name} is not {what} after {timeout:g}s (it is {st.state.lower()})")
            time.sleep(poll_s)

    def delete(self) -> None:
        """Stop the job if it runs, and remove it (its record and logs; on a cluster, its pods and its code's
        ConfigMap)."""
        self._rt.delete(self._ref)


def list_jobs(*, kube: bool = False, namespace: str | None = None, all_namespaces: bool = False,
              kubeconfig: str | None = None, context: str | None = None) -> list[JobHandle]:
    """Every job: on this machine (newest last), or with `kube=True` in a namespace of the cluster
    (`all_namespaces=True`: in every one). Each is a handle; `handle.state` reads its state.

    Example:
        >>> [(h.name, h.state) for h in torchjob.list_jobs()]
    """
    if not kube:
        from torchjob.sdk.local import local_runtime

        rt = local_runtime()
        return [JobHandle(v.name, rt) for v in rt.list()]
    from torchjob.connect import ALL_NAMESPACES, Target, connect

    every = Target(True, kubeconfig, context, ALL_NAMESPACES if all_namespaces else namespace)
    found = connect(every).list()
    runtimes = {ns: connect(every.in_namespace(ns)) for ns in {v.namespace for v in found}}
    return [JobHandle(v.name, runtimes[v.namespace], kube=True, namespace=v.namespace, kind=v.kind or "TorchJob")
            for v in found]
