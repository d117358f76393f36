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


class JobState(StrEnum):
    """One word for tables (`status.state`, `kubectl get tj`): the last true condition, or Pending."""

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
    # failure, decided from the replicas
    REPLICA_FAILED = "ReplicaFailed"
    NON_RETRYABLE_EXIT_CODE = "NonRetryableExitCode"
    BACKOFF_LIMIT_EXCEEDED = "BackoffLimitExceeded"
    TASK_FAILED = "TaskFailed"
    DEADLINE_EXCEEDED = "DeadlineExceeded"
    PROGRESS_DEADLINE_EXCEEDED = "ProgressDeadlineExceeded"
    STALLED = "Stalled"  # an event: replicas went quiet
    TERMINATED = "Terminated"  # a user's stop, or a TerminateJob policy
    ABORTED = "Aborted"  # an AbortJob policy
    # failure, from what a runtime learned (core.reconcile.Refusal, World.runner_lost)
    INVALID_SPEC = "InvalidSpec"
    POD_GROUP_UNAVAILABLE = "PodGroupUnavailable"
    KUEUE_UNAVAILABLE = "KueueUnavailable"
    LOCAL_SETUP_FAILED = "LocalSetupFailed"
    SUPERVISOR_LOST = "SupervisorLost"
    # the operator's events
    QUEUED = "Queued"
    ADMITTED = "Admitted"
    POD_GROUP_PENDING = "PodGroupPending"
    TENSORBOARD_CREATED = "TensorBoardCreated"
    RECONCILE_ERROR = "ReconcileError"  # a reconcile failed; retried with a backoff


class ExitReason(StrEnum):
    """Why one attempt of a replica ended (`Observed.reason`, an attempt's record), as the kubelet says it."""

    COMPLETED = "Completed"
    ERROR = "Error"
    EVICTED = "Evicted"
    OOM_KILLED = "OOMKilled"
    STOPPED = "Stopped"  # stopped by torchjob (local)
    START_ERROR = "StartError"  # the process could not start (local)


class Condition(BaseModel):
    type: ConditionType
    status: Literal["True", "False"] = "True"
    reason: str = ""
    message: str = ""
    lastTransitionTime: datetime | None = None
    lastUpdateTime: datetime | None = None


class ReplicaStatus(BaseModel):
    active: int = 0
    succeeded: int = 0
    failed: int = 0
    restarts: int = 0


class FailureInfo(BaseModel):
    """Why the job failed: the root cause, the way torchrun's summary names it."""

    reason: str
    message: str
    replica: str | None = None
    attempt: int | None = None
    exitCode: int | None = None
    signal: str | None = None


class ReplicaAttemptState(BaseModel):
    """What the controller has decided for one replica: its current attempt, restart backoff."""

    attempt: int = 0
    restarts: int = 0
    notBefore: datetime | None = None


class Metric(BaseModel):
    """A named value a replica reported (Kubeflow Trainer's `trainerStatus.metrics[]` entry)."""

    name: str
    value: str


class Progress(BaseModel):
    """How far the job is, from the replicas' latest progress report. Written by the runtime (the
    local supervisor, the operator) as reports arrive, never by `core`."""

    percent: float | None = None  # 0-100
    etaSeconds: int | None = None  # estimated time left
    step: int | None = None
    total: int | None = None
    rate: float | None = None  # steps per second, over the recent reports
    metrics: list[Metric] = Field(default_factory=list)
    lastReportTime: datetime | None = None
    reporter: str | None = None  # the replica that sent the latest report


class JobStatus(BaseModel):
    conditions: list[Condition] = Field(default_factory=list)
    replicaStatuses: dict[str, ReplicaStatus] = Field(default_factory=dict)
    replicas: dict[str, ReplicaAttemptState] = Field(default_factory=dict)
    restartCount: int = 0
    startTime: datetime | None = None
    completionTime: datetime | None = None
    failure: FailureInfo | None = None
    progress: Progress | None = None

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
