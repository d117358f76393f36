"""The runtime interface: what the `torchjob` command asks of a runtime, the same for both.

TorchX's split is the model: `dryrun(job)` gives a plan of exactly what will run (locally the
processes with their argv, env and ports; on Kubernetes the objects), `schedule(plan)` starts that
plan, and the verbs on a job by name (`describe`, `list`, `logs`, `suspend`, `resume`, `delete`)
work the same way on both. The local runtime (`torchjob.local.local_runtime.LocalRuntime`) and the
Kubernetes one (`torchjob.kube.clientside.kube_runtime.KubeRuntime`) implement it; `torchjob.connect`
builds one, and every face (the command line, the Python API, the dashboard) asks only this interface.

A reader (`describe`, `list`, `logs`) never writes: it shows what core decides from the facts.
Both runtimes fill one typed view of a job (`JobView`) that one printer shows, and refuse what
cannot be done with one message (`refuse_suspend`, `refuse_resume`, `no_such_job`); a job that is
not there is its own kind of error (`JobNotFound`), as is a bare name that jobs of several kinds hold
on a cluster (`AmbiguousJob`, with the kinds), so that a face tells them apart without reading the
message.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from torchjob.api.errors import UserError
from torchjob.api.model import JobStatus, TorchJob
from torchjob.api.status import EventType, JobState

if TYPE_CHECKING:
    from torchjob.console import Console
    from torchjob.core.diagnosis.stacks import Stacks


def stacks_view(taken: Stacks) -> dict[str, Any]:
    """What a face shows of a job's stacks (the dashboard): `-o json`'s data and the text `torchjob stacks` prints."""
    from torchjob.core.diagnosis import stacks as core_stacks

    return {**core_stacks.as_data(taken), "text": core_stacks.text(taken)}


Say = Callable[[str], None]
Show = Callable[[Path | None], "Console"]  # the console a run shows a job on, from its combined log (if any)
Code = Mapping[str, bytes]  # the files a job ships with it: its code ConfigMap's keys -> contents


@dataclass(frozen=True)
class AttemptView:
    """One attempt of one replica: a local process, or a pod."""

    replica: str  # worker-1
    attempt: int
    started: float | None = None  # seconds since the epoch
    ended: float | None = None
    exit_code: int | None = None
    reason: str | None = None  # Completed, Error, SupervisorLost, a pod's phase
    pid: int | None = None  # local
    pod: str | None = None  # Kubernetes
    waiting: str | None = None  # why a pod that should run does not (Unschedulable: ...)
    log: str | None = None  # local: the attempt's output file


# A job of more replicas than this shows them summarised (describe, the dashboard's job page): counts
# by state, and each attempt that is not running or done named, unless every line is asked for.
SUMMARY_OVER = 16
NAMED_AT_MOST = 20  # of those named in a summary; the rest counted


def attempt_state(a: AttemptView) -> str:
    """An attempt's state in one word: Running, Completed, Error, Pending, Stopping, Failed, ..."""
    return (a.reason or ("Running" if a.ended is None else "Ended")).split(" (")[0]


def summarised(attempts: list[AttemptView]) -> tuple[dict[str, int], list[AttemptView]]:
    """The latest attempt of each replica counted by state (most first), and the attempts a reader
    should see named: those neither running nor completed, in the table's order."""
    latest: dict[str, AttemptView] = {}
    for a in attempts:
        if a.replica not in latest or a.attempt >= latest[a.replica].attempt:
            latest[a.replica] = a
    counts: dict[str, int] = {}
    for a in latest.values():
        counts[attempt_state(a)] = counts.get(attempt_state(a), 0) + 1
    odd = [a for a in attempts if attempt_state(a) not in ("Running", "Completed", "Succeeded")]
    return dict(sorted(counts.items(), key=lambda kv: -kv[1])), odd


@dataclass(frozen=True, init=False)
class EventView:
    type: EventType
    reason: str  # a word of `api.status.Reason`, or another component's on a cluster
    message: str
    time: float | None = None

    def __init__(self, type: EventType | str, reason: str, message: str, time: float | None = None) -> None:
        # Readers hand over the word they stored or the API server gave: Kubernetes knows two.
        kind = EventType.WARNING if type == EventType.WARNING else EventType.NORMAL
        for name, value in (("type", kind), ("reason", reason), ("message", message), ("time", time)):
            object.__setattr__(self, name, value)


@dataclass
class JobView:
    """What `list` and `describe` show of a job, whichever runtime runs it."""

    name: str
    job: TorchJob
    status: JobStatus
    created: float | None = None
    namespace: str | None = None  # Kubernetes
    uid: str | None = None
    attempts: list[AttemptView] = field(default_factory=list)
    events: list[EventView] = field(default_factory=list)
    supervisor: int | None = None  # local: the live supervisor's pid
    directory: str | None = None  # local: logs and volumes
    root_cause: str | None = None  # torchrun-style summary of a failure
    raw: dict[str, Any] | None = None  # `describe -o json`: the runtime's own record (store row, object)
    kind: str | None = None  # Kubernetes: a kind served beside TorchJob (TrainJob, PyTorchJob, PyTorchTrainingJob)

    @property
    def replicas(self) -> dict[str, int]:
        return {t: self.job.replica_count(t) for t in self.job.spec.pytorchReplicaSpecs}


class DryRun(Protocol):
    """A plan of exactly what `schedule` starts."""

    @property
    def job(self) -> TorchJob: ...

    @property
    def notes(self) -> list[str]:
        """What only a run would refuse (a dry run notes it and goes on)."""
        ...

    @property
    def warnings(self) -> list[str]:
        """What this runtime does not do of what the job asks (a line each, said before it starts, also
        by a dry run), e.g. warm spares on a cluster; the job runs all the same."""
        ...

    @property
    def code(self) -> Code | None:
        """The files shipped with the job (None: none); `data()` shows where they go."""
        ...

    @property
    def hint(self) -> str | None:
        """A line `render` adds on stderr about the plan (e.g. that its ports are this plan's)."""
        ...

    def data(self) -> Any:
        """The plan for `-o json|yaml`."""
        ...

    def documents(self) -> list[dict[str, Any]]:
        """What `schedule` creates, as documents to keep (`run --dry-run -o yaml`): the job, and on a
        cluster its code's ConfigMap before it; a kept file applies as it is."""
        ...

    def text(self) -> str:
        """The plan as `render` prints it."""
        ...


PlanT = TypeVar("PlanT", bound=DryRun)


class Runtime(Protocol[PlanT]):
    """What the CLI asks of a runtime; each verb is one call. A runtime starts only the plans its own
    dry run made (`Runtime[LocalPlan]`, `Runtime[KubePlan]`)."""

    def dryrun(self, job: TorchJob, lenient: bool = False, code: Code | None = None) -> PlanT:
        """The plan of what `schedule` would start, `code` (the files the job ships, as the
        builder keyed them: `torchjob.api.build.Built`) included. `lenient` (`render`): what only a
        run refuses is a note in the plan instead of an error."""
        ...

    def schedule(self, plan: PlanT) -> str:
        """Start the plan detached; returns the line that tells the user how to follow it."""
        ...

    def run(self, plan: PlanT, quiet: bool = False, console: Show | None = None) -> JobView:
        """Start the plan and follow it to its end in the foreground; returns its last view.
        `console`: where its lines and progress are shown (default: this terminal)."""
        ...

    def describe(self, name: str, summary: bool = False) -> JobView:
        """`summary`: the caller shows a job of more than SUMMARY_OVER replicas summarised (summarised:
        counts by state, the others named), so a runtime may read its running replicas' attempts
        without their times (on a cluster, thousands of pods as their metadata), and no `raw`."""
        ...

    def list(self) -> list[JobView]: ...

    def logs(self, name: str, replica: str | None = None, attempt: int | None = None, *, follow: bool = False,
             tail: int | None = None) -> Iterator[str]:
        """The job's output line by line (no line ends): every replica's, prefixed `[worker-1] `,
        or one replica's attempt (default: its latest) as it wrote it. `tail`: only the last that
        many lines of each source read (nothing before them is read); `follow`: then go on as lines
        come, until the job ends. Raises at the first `next()` when there is nothing to read."""
        ...

    def stacks(self, name: str, wait_s: float | None = None) -> Stacks:
        """Every running rank's Python stacks (core.diagnosis.stacks reads, groups and words them)."""
        ...

    def suspend(self, name: str) -> None: ...

    def resume(self, name: str) -> None: ...

    def delete(self, name: str) -> None: ...

    @property
    def flags(self) -> str:
        """The flags that name this runtime on the command line (`` --kube``), for hints."""
        ...


# --- one answer to one request, whichever runtime ---------------------------------------


class JobNotFound(UserError):
    """No job of that name where the runtime looked."""


class AmbiguousJob(UserError):
    """A bare NAME that jobs of several kinds hold (on a cluster a TorchJob and a TrainJob may share a
    name): `kinds` says which (TorchJob first), so that a face can offer `KIND/NAME` for each."""

    def __init__(self, name: str, kinds: list[str], namespace: str) -> None:
        super().__init__(f"{len(kinds)} jobs are named {name!r} in {namespace}: a {' and a '.join(kinds)}",
                         fix="name one as KIND/NAME, as kubectl does: "
                             + " or ".join(f"{k.lower()}/{name}" for k in kinds))
        self.name, self.kinds, self.namespace = name, kinds, namespace


class OutputGone(UserError):
    """The output asked for was there and is not any more (removed with its replica)."""


def no_such_job(name: str, known: list[str], where: str = "") -> JobNotFound:
    hint = f"known jobs{where}: {', '.join(known)}" if known else \
        f"there are no jobs{where}; start one with torchjob run"
    return JobNotFound(f"no job named {name!r}" + where, fix=hint)


def name_taken(name: str, status: JobStatus, flags: str = "", where: str = "") -> UserError:
    """A job of that name is there and not finished: a new one does not replace it."""
    return UserError(f"a job named {name!r}{where} exists and is {status.state.lower()}",
                     fix=f"wait for it, delete it with `torchjob delete{flags} {name}`, or change metadata.name")


def no_output(name: str, replica: str | None, known: list[str]) -> UserError:
    if replica is None:
        return UserError(f"job {name!r} has no output yet", fix="try again in a moment, or use -f")
    return UserError(f"job {name!r} has no replica {replica!r} with output",
                     fix=f"use one of {sorted(known)}" if known else "it has not started any replica yet")


def refuse_suspend(name: str, job: TorchJob, status: JobStatus) -> None:
    """A finished job cannot be suspended (nothing runs); a suspended one may be asked again."""
    if status.finished:
        raise UserError(f"job {name!r} has already {status.state.lower()}", fix="run it again instead")


def refuse_resume(name: str, job: TorchJob, status: JobStatus) -> None:
    """Only a suspended job (by `suspend`, or held for a Kueue queue) can be resumed."""
    if status.finished:
        raise UserError(f"job {name!r} has already {status.state.lower()}", fix="run it again instead")
    if not job.run_policy.suspend:
        raise UserError(f"job {name!r} is not suspended", fix=f"suspend it first: torchjob suspend {name}")


def created(rt: Runtime[Any], view: JobView, timeout: float = 30.0) -> JobView:
    """The job once its supervisor has taken it (no longer `Pending`), or as it is after `timeout`
    (the SDK's `submit` and the agents' `submit_job` answer with it)."""
    import time

    end = time.monotonic() + timeout
    while view.status.state is JobState.PENDING and not view.status.finished and time.monotonic() < end:
        time.sleep(0.05)
        view = rt.describe(view.name)
    return view
