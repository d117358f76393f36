"""A job's status: its conditions, the reasons they give, the job's one-word state, and what the
controller keeps to decide (the attempt of each replica).

The vocabularies are `StrEnum`s: a member is the string it names, so status documents read and
write the same strings as before (`Reason.BACKOFF_LIMIT_EXCEEDED == "BackoffLimitExceeded"`).
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, Field


class ConditionType(StrEnum):
    CREATED = "Created"
    RUNNING = "Running"
    RESTARTING = "Restarting"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    SUSPENDED = "Suspended"
    # False while a replica's pod waits for a node (the scheduler found none that fits: reason
    # WaitingForNode, the scheduler's words); dropped once every pod is on a node. Never true, so it
    # names no state.
    SCHEDULED = "Scheduled"


class JobState(StrEnum):
    """One word for tables (`status.state`, `kubectl get tj`): the last true condition, or Pending
    (Scheduled, only ever False, names none)."""

    PENDING = "Pending"
    CREATED = "Created"
    RUNNING = "Running"
    RESTARTING = "Restarting"
    SUSPENDED = "Suspended"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


# Which true condition names the state, the first that is true.
STATE_ORDER = (ConditionType.FAILED, ConditionType.SUCCEEDED, ConditionType.SUSPENDED, ConditionType.RESTARTING,
               ConditionType.RUNNING, ConditionType.CREATED)


class EventType(StrEnum):
    NORMAL = "Normal"
    WARNING = "Warning"


class Reason(StrEnum):
    """Why: the reason of a condition, of `status.failure`, of an event."""

    # the lifecycle
    CREATED = "Created"
    RUNNING = "Running"
    RESTARTING = "Restarting"
    SUSPENDED = "Suspended"
    RESUMED = "Resumed"
    # success
    SUCCEEDED = "Succeeded"  # by the success rules (the master, every worker, an elastic worker)
    COMPLETED = "Completed"  # by a CompleteJob policy
    MIN_SUCCESS = "MinSuccess"
    FAILED_AFTER_DONE = "FailedAfterDone"  # an event: a replica died after every rank reported its work complete
    # failure, decided from the replicas
    REPLICA_FAILED = "ReplicaFailed"
    NON_RETRYABLE_EXIT_CODE = "NonRetryableExitCode"
    BACKOFF_LIMIT_EXCEEDED = "BackoffLimitExceeded"
    TASK_FAILED = "TaskFailed"
    DEADLINE_EXCEEDED = "DeadlineExceeded"
    PROGRESS_DEADLINE_EXCEEDED = "ProgressDeadlineExceeded"
    HANG_DEADLINE_EXCEEDED = "HangDeadlineExceeded"  # no rank moved for runPolicy.hangDeadlineSeconds
    STALLED = "Stalled"  # an event: replicas went quiet
    STACKS_TAKEN = "StacksTaken"  # an event: where every rank was, taken before a stall's replicas were stopped
    TERMINATED = "Terminated"  # a user's stop, or a TerminateJob policy
    INITIALIZER_FAILED = "InitializerFailed"  # an initializer step failed past its backoffLimit
    INITIALIZED = "Initialized"  # an event: an initializer step completed
    ABORTED = "Aborted"  # an AbortJob policy
    # failure, from what a runtime learned (core.reconcile.Refusal, World.runner_lost)
    INVALID_SPEC = "InvalidSpec"
    POD_GROUP_UNAVAILABLE = "PodGroupUnavailable"
    KUEUE_UNAVAILABLE = "KueueUnavailable"
    LOCAL_SETUP_FAILED = "LocalSetupFailed"
    SUPERVISOR_LOST = "SupervisorLost"
    # the API server refused a pod for good: Pod Security, an admission webhook, a quota's or
    # LimitRange's requirement (core.refusals)
    POD_REFUSED = "PodRefused"
    # the operator's events
    QUEUED = "Queued"
    ADMITTED = "Admitted"
    POD_GROUP_PENDING = "PodGroupPending"
    WAITING_FOR_NODE = "WaitingForNode"  # a replica's pod is unschedulable: no node fits it (Scheduled False)
    TENSORBOARD_CREATED = "TensorBoardCreated"
    RECONCILE_ERROR = "ReconcileError"  # a reconcile failed; retried with a backoff
    NOT_OURS = "NotOurs"  # an object named or labelled as the job's that it does not own: left alone
    POD_DISRUPTED = "PodDisrupted"  # Kubernetes deletes a pod of the job (a lost node's taint, preemption, eviction)
    FORCE_DELETED = "ForceDeleted"  # a pod stuck terminating past its grace period (its node is lost)
    WARM_SPARES_NOT_IN_PLACE = "WarmSparesNotInPlace"  # warmSpares, replicas not restarting in place


class ExitReason(StrEnum):
    """Why one attempt of a replica ended (`Observed.reason`, an attempt's record), as the kubelet says it."""

    COMPLETED = "Completed"
    ERROR = "Error"
    EVICTED = "Evicted"
    OOM_KILLED = "OOMKilled"
    STOPPED = "Stopped"  # stopped by torchjob (local)
    START_ERROR = "StartError"  # the process could not start (local)


class Condition(BaseModel):
    """A condition of the job, as Kubernetes objects have them: one per type, the latest transition."""

    type: ConditionType = Field(description="What the condition says of the job.")
    status: Literal["True", "False"] = Field("True", description="Whether it holds.")
    reason: str = Field("", description="One word saying why (e.g. BackoffLimitExceeded).")
    message: str = Field("", description="Why, for people.")
    lastTransitionTime: datetime | None = Field(None, description="When the condition last changed status.")
    lastUpdateTime: datetime | None = Field(None, description="When the condition was last written.")


class ReplicaStatus(BaseModel):
    """The replicas of one type (Master, Worker), counted as Kubeflow counts them."""

    active: int = Field(0, description="Replicas whose current attempt is pending or running.")
    succeeded: int = Field(0, description="Replicas whose current attempt succeeded.")
    failed: int = Field(0, description="Replicas whose current attempt failed.")
    restarts: int = Field(0, description="Restarts of the replicas of this type, in all.")


class FailureInfo(BaseModel):
    """Why the job failed: the root cause, the way torchrun's summary names it."""

    reason: str = Field(description="One word saying why (the reason of the Failed condition).")
    message: str = Field(description="Why, for people.")
    replica: str | None = Field(None, description="The replica that failed first (e.g. worker-1).")
    attempt: int | None = Field(None, description="Its attempt that failed (0 for the first).")
    exitCode: int | None = Field(None, description="Its exit code.")
    signal: str | None = Field(None, description="The signal that ended it (e.g. SIGKILL).")


class ReplicaAttemptState(BaseModel):
    """What the controller has decided for one replica: its current attempt, restart backoff."""

    attempt: int = Field(0, description="The replica's current attempt (0 for the first; its pod carries it).")
    restarts: int = Field(0, description="Times this replica was restarted.")
    notBefore: datetime | None = Field(None, description="Its next attempt starts no earlier (restart backoff).")


class StepState(StrEnum):
    """Where an initializer step is."""

    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


class InitializerStatus(BaseModel):
    """An initializer step (spec.initializers) as the job's status keeps it."""

    state: StepState = Field(StepState.PENDING, description="Pending, Running, Succeeded or Failed.")
    attempt: int = Field(0, description="Its current attempt (0 for the first; retries up to its backoffLimit).")
    message: str | None = Field(None, description="Its last words when an attempt failed (its termination message).")
    notBefore: datetime | None = Field(None, description="Its next attempt starts no earlier: a failed attempt's retry "
                                       "waits as a Kubernetes Job's does (10 s, doubling, at most 10 min).")


class KeptTail(BaseModel):
    """The end of a replica attempt's log, kept in the status after its pod went (a gang restart, a
    suspend or the job's end deletes pods, and their logs with them): its container's termination
    message, which with FallbackToLogsOnError the kubelet fills with the last lines of a failed
    container's log (80 lines, 2 KiB at most)."""

    replica: str = Field(description="The replica (master-0, worker-3).")
    attempt: int = Field(description="Its attempt whose pod went.")
    exitCode: int | None = Field(None, description="The container's exit code (143: stopped by SIGTERM).")
    tail: str = Field(description="The end of its log, as the kubelet kept it (2 KiB at most here).")


class KeptStacks(BaseModel):
    """Where every rank was when replicas stalled, taken by the operator before it stopped them (issue 42): the
    stacks its pods' watchers gave (kube/controller/pods/stall_stacks.py), kept in the status with that attempt, since
    the restart or the job's end deletes the pods and their logs."""

    attempts: dict[str, int] = Field(description="The replica attempts that were asked (replica -> attempt): the "
                                     "stacks are theirs.")
    stalled: list[str] = Field(description="The replicas that went quiet (runPolicy.progressDeadlineSeconds).")
    takenAt: datetime = Field(description="When they were asked.")
    short: str = Field(description="For each group of ranks with the same stack, the innermost frame of the user's "
                       "own code, as the root cause and the Stalled event say it.")
    stacks: str = Field(description="The stacks in full, grouped (8 KiB at most here; a longer text is cut).")


class Metric(BaseModel):
    """A named value a replica reported (Kubeflow Trainer's `trainerStatus.metrics[]` entry)."""

    name: str = Field(description="The metric's name (e.g. loss).")
    value: str = Field(description="Its latest value, as reported.")


class MetricSeries(BaseModel):
    """One metric's values along the history's steps (null: not reported there, or NaN)."""

    name: str = Field(description="The metric's name.")
    values: list[float | None] = Field(default_factory=list, description="One value per step of the history.")


class MetricHistory(BaseModel):
    """Every metric reported, over steps, bounded and downsampled (progress/history.py): each point
    stands for `stride` steps; the curves the dashboard draws."""

    stride: int = Field(1, description="Steps each point stands for (doubles as the job goes on).")
    steps: list[int] = Field(default_factory=list, description="The step of each point, ascending.")
    series: list[MetricSeries] = Field(default_factory=list, description="Each metric's values (loss first).")
    omitted: int = Field(0, description="Metrics reported but not kept (past the history's number of series).")


class Straggler(BaseModel):
    """A replica whose step time is far over the others' (torchjob.progress.stragglers decides)."""

    replica: str = Field(description="The replica that reports (under torchrun, one node's workers: `rank` "
                         "names the worker).")
    factor: float = Field(description="Its step time over the median of the others' step time.")
    stepSeconds: float = Field(description="Its seconds per step over the last minute.")
    message: str = Field(description="In words: `worker-2: 1.9x the median step time over the last minute`.")
    rank: int | None = Field(None, description="Under torchrun (several ranks per replica): the rank whose reports "
                             "these are, each worker timed on its own (`worker-0 rank 3: 1.9x ...`).")


class Progress(BaseModel):
    """How far the job is, from the replicas' latest progress report. Written by the runtime (the
    local supervisor, the operator) as reports arrive, never by `core`."""

    percent: float | None = Field(None, description="Done, in percent (0-100).")
    etaSeconds: int | None = Field(None, description="Estimated seconds left.")
    step: int | None = Field(None, description="The latest step reported.")
    total: int | None = Field(None, description="The steps in all.")
    rate: float | None = Field(None, description="Steps per second, over the recent reports.")
    metrics: list[Metric] = Field(default_factory=list, description="The latest metrics reported (loss, ...).")
    lastReportTime: datetime | None = Field(None, description="When the latest report arrived.")
    reporter: str | None = Field(None, description="The replica that sent the latest report.")
    history: MetricHistory | None = Field(None, description="The metrics over steps, downsampled.")
    stragglers: list[Straggler] = Field(
        default_factory=list, description="Replicas far slower per step than the others, now (never a stall).")


class JobStatus(BaseModel):
    """What the job's runtime (the operator, the local supervisor) observed and decided."""

    conditions: list[Condition] = Field(default_factory=list, description="The job's conditions, one per type.")
    replicaStatuses: dict[str, ReplicaStatus] = Field(
        default_factory=dict, description="The replicas of each type (Master, Worker), counted.")
    replicas: dict[str, ReplicaAttemptState] = Field(
        default_factory=dict, description="Each replica's attempt and restart backoff (master-0, worker-0, ...), "
        "as the controller decided them.")
    restartCount: int = Field(0, description="Restarts of the job's replicas, in all (backoffLimit counts them).")
    startTime: datetime | None = Field(None, description="When the job started.")
    completionTime: datetime | None = Field(None, description="When the job succeeded or failed.")
    failure: FailureInfo | None = Field(None, description="Why the job failed: its root cause.")
    initializers: dict[str, InitializerStatus] = Field(
        default_factory=dict, description="Each initializer step (spec.initializers), by name.")
    keptTails: list[KeptTail] = Field(
        default_factory=list, description="The end of the logs of replica attempts whose pods are gone, newest "
        "attempt first, a few at most (on Kubernetes; `logs --kube --replica R --attempt N` shows them).")
    keptStacks: list[KeptStacks] = Field(
        default_factory=list, description="Where every rank was before a stall's replicas were stopped, newest "
        "first, a few at most (on Kubernetes; `logs --kube --replica R --attempt N` shows them with that attempt).")
    progress: Progress | None = Field(None, description="How far the job is, as its replicas report it.")

    def condition(self, ctype: ConditionType) -> Condition | None:
        for c in self.conditions:
            if c.type == ctype:
                return c
        return None

    def is_true(self, ctype: ConditionType) -> bool:
        c = self.condition(ctype)
        return c is not None and c.status == "True"

    @property
    def finished(self) -> bool:
        return self.is_true(ConditionType.SUCCEEDED) or self.is_true(ConditionType.FAILED)

    @property
    def state(self) -> JobState:
        """One word for tables: the last condition that is true, in lifecycle order."""
        for ctype in STATE_ORDER:
            if self.is_true(ctype):
                return JobState(ctype.value)
        return JobState.PENDING
