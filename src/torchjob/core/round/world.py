"""What a runtime observes and tells core: the current attempt of each replica, what the job's
admitters say (Kueue's Workload, the gang scheduler's PodGroup), and the facts it learned (a user's
stop, a refusal, a lost runner, a replica deleted by someone else)."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from torchjob.core.shape.topology import ReplicaId


class Phase(str, enum.Enum):
    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"

    @property
    def active(self) -> bool:
        return self in (Phase.PENDING, Phase.RUNNING)


@dataclass(frozen=True)
class Observed:
    """The current attempt of one replica, as the runtime sees it."""

    replica: ReplicaId
    attempt: int
    phase: Phase
    exit_code: int | None = None
    reason: str | None = None  # an ExitReason, e.g. "Error", "Evicted", "OOMKilled"
    message: str | None = None
    finished_at: datetime | None = None
    stopping: bool = False  # a stop was asked for and is in progress
    last_report: datetime | None = None  # when this attempt last reported progress (None: never)
    # Its latest progress report said its work is complete (step == total, 100 %): a failure after it
    # is a death in teardown, which core weighs against the master's outcome (core/round/reconcile.py).
    reported_done: bool = False
    # Deleted, by someone other than torchjob as far as the runtime knows (a drain, `kubectl delete
    # pod`): `stopping` while it is still going away, not once it is gone (its last state is kept
    # until core has decided on it). Core decides what it means (core/round/facts.py): while the job runs
    # and the attempt is current, with a lifecycle policy on PodEvicted a failure with reason Evicted
    # (finished at `finished_at`, the deletion's time); else in a gang (restartScope Job) a lost rank:
    # the gang restarts, uncounted; otherwise the replica is simply missing and is made again
    # (Kubeflow's behaviour), once it is gone.
    deleted: bool = False
    # Its pod stays up between attempts (a restart in place, with a warm spare: kube/inpod): once this
    # attempt has ended, the replica's next attempt starts in the same pod, so it does not wait for it to go.
    in_place: bool = False
    # Pending and the scheduler found no node for it (a pod's PodScheduled False, Unschedulable): the
    # scheduler's words ("0/2 nodes are available: ..."). Core says the job waits for a node.
    unschedulable: str | None = None


@dataclass(frozen=True)
class Refusal:
    """The runtime cannot run this job as written: a fact it learned. Core fails the job with it."""

    reason: str  # a Reason: InvalidSpec | PodRefused | PodGroupUnavailable | KueueUnavailable | LocalSetupFailed
    message: str


class Seen(str, enum.Enum):
    """An admitter's object of the job's name (a Workload, a PodGroup), as the runtime observed it."""

    NONE = "None"  # there is none (not made yet, or deleted by someone)
    NOT_OURS = "NotOurs"  # one the job does not control (an earlier job's, another kind's): never read
    PENDING = "Pending"  # the job's own, not admitted (or its admission was taken back)
    ADMITTED = "Admitted"  # the job's own, admitted (a PodGroup whose scheduler admits none: made)


@dataclass(frozen=True)
class Admission:
    """What admits the job, observed; core decides on it (core/policies/admission.py). `workload`: Kueue's
    Workload (None: the job waits for no queue); `podgroup`: its gang scheduler's PodGroup (None: it
    has none); `podgroup_awaited`: its pods wait for the PodGroup's admission (Volcano), not only
    for the PodGroup to exist (scheduler-plugins)."""

    workload: Seen | None = None
    workload_finished: bool = False  # the job's own Workload is marked Finished
    podgroup: Seen | None = None
    podgroup_awaited: bool = False


@dataclass(frozen=True)
class Still:
    """No rank of the job moved (its main thread's stack the same, its CPU time the same) from `since`
    to `seen_at`, the runtime's latest sample of every running replica's ranks (core/policies/hangs.py)."""

    since: datetime
    seen_at: datetime


@dataclass(frozen=True)
class World:
    replicas: Mapping[str, Observed] = field(default_factory=dict)  # by replica name
    stop_requested: str | None = None  # why the user stopped the job (e.g. "SIGINT")
    # The job fails with this reason and message (Failed condition, status.failure, a Warning event,
    # every running replica stopped), once; a finished job ignores it.
    refused: Refusal | None = None
    # Local: the supervisor died; the message says how that was found. The job fails with reason
    # SupervisorLost and every open attempt is ended (Abandon: nothing is left to stop them).
    runner_lost: str | None = None
    admission: Admission = field(default_factory=Admission)
    # Where each rank was when replicas went quiet (core.stacks.short: `ranks 0-2 in step (train.py:41);
    # rank 3 in recv (train.py:33)`), taken by the runtime before a stall's replicas are stopped; the
    # stall's message carries it.
    stacks: str | None = None
    # The runtime is taking the quiet replicas' stacks until then (the operator, without holding its round:
    # kube/controller/pods/stall_stacks.py): core waits for them, at most until then, before it acts on the stall.
    stacks_due: datetime | None = None
    # Since when no rank moved, as the runtime's samples of every rank's stack saw it (None: it does not
    # sample, or some running replica had no rank to sample): runPolicy.hangDeadlineSeconds judges it.
    still: Still | None = None
    # The initializer steps (spec.initializers), each its current attempt by step name
    # (core/round/initializers.py): `replica` is ReplicaId(step, 0).
    steps: Mapping[str, Observed] = field(default_factory=dict)
