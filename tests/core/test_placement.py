"""A job whose pods wait for a node (core/policies/admission.placement): the scheduler's "no node
fits" is observed on each pending replica (Observed.unschedulable); core says it on the job, as the
Scheduled condition False with reason WaitingForNode, which replicas wait and the scheduler's words,
and a Warning event once; the condition goes once every pod has a node. Pure: no API, no clock."""

from __future__ import annotations

from tests.core.sim import Driver, ended, pending, up, world
from tests.jobs import make_job
from torchjob.api.status import ConditionType, Reason
from torchjob.core.policies.admission import NAMED_AT_MOST
from torchjob.core.round.reconcile import Observed, Phase, World
from torchjob.core.shape.topology import ReplicaId

M0 = ReplicaId("Master", 0)
W = [ReplicaId("Worker", i) for i in range(12)]
SAID = ("0/2 nodes are available: 1 node(s) didn't match pod topology spread constraints, "
        "1 node(s) were unschedulable. preemption: 0/2 nodes are available: 2 Preemption is not helpful.")


def unschedulable(rid: ReplicaId, attempt: int = 0, said: str = SAID) -> Observed:
    return Observed(rid, attempt, Phase.PENDING, unschedulable=said)


def waiting(d: Driver) -> tuple[str, str, str] | None:
    c = d.status.condition(ConditionType.SCHEDULED)
    return None if c is None else (c.status, c.reason, c.message)


def test_a_replica_no_node_fits_makes_the_job_wait_for_a_node_until_it_is_scheduled() -> None:
    d = Driver(make_job(workers=1))
    d(World(), 0)
    assert waiting(d) is None
    plan = d(world(pending(M0), pending(W[0])), 1)  # not tried yet by the scheduler: nothing said
    assert waiting(d) is None and plan.events == []
    plan = d(world(up(M0), unschedulable(W[0])), 2)
    assert waiting(d) == ("False", Reason.WAITING_FOR_NODE, f"worker-0 waits for a node: {SAID}")
    assert [(e.type, e.reason, e.message) for e in plan.events] == [
        ("Warning", "WaitingForNode", f"worker-0 waits for a node: {SAID}")]
    assert d.status.state == "Created"  # not running: a rank has no node
    again = d(world(up(M0), unschedulable(W[0])), 3)
    assert again.events == [] and again.status == plan.status  # said once
    plan = d(world(up(M0), pending(W[0])), 4)  # bound to a node, its containers starting
    assert waiting(d) is None and plan.events == []
    d(world(up(M0), up(W[0])), 5)
    assert d.status.state == "Running" and waiting(d) is None


def test_the_message_follows_the_scheduler_and_names_a_few_of_many_replicas() -> None:
    d = Driver(make_job(workers=12))
    d(World(), 0)
    d(world(up(M0), *(unschedulable(w) for w in W)), 1)
    # in rank order, not as strings sort (worker-10 after worker-2), the rest counted
    names = ", ".join(f"worker-{i}" for i in range(NAMED_AT_MOST))
    assert waiting(d) == ("False", "WaitingForNode", f"{names} and {12 - NAMED_AT_MOST} more wait for a node: {SAID}")
    before = d.status.condition(ConditionType.SCHEDULED)
    assert before is not None
    plan = d(world(up(M0), *(up(w) for w in W[:11]), unschedulable(W[11], said="0/2 nodes are available: "
                                                                                "2 Insufficient cpu.")), 2)
    assert waiting(d) == ("False", "WaitingForNode", "worker-11 waits for a node: 0/2 nodes are available: "
                                                     "2 Insufficient cpu.")
    assert plan.events == []  # still waiting: no new event, the words updated
    after = d.status.condition(ConditionType.SCHEDULED)
    assert after is not None and after.lastTransitionTime == before.lastTransitionTime


def test_an_old_attempt_or_one_going_away_does_not_wait_and_a_restart_keeps_both_conditions() -> None:
    d = Driver(make_job(workers=1, restart_policy="OnFailure"))
    d(World(), 0)
    d(world(up(M0), up(W[0])), 1)
    d(world(up(M0), ended(W[0], 1, 2.0)), 2)  # a worker fails: restarted
    assert d.status.replicas["worker-0"].attempt == 1
    # its old pod, unschedulable, is no longer what the job waits for
    assert d(world(up(M0), unschedulable(W[0], attempt=0)), 3).events == []
    assert waiting(d) is None
    plan = d(world(up(M0), unschedulable(W[0], attempt=1)), 4)
    assert waiting(d) is not None and [e.reason for e in plan.events] == ["WaitingForNode"]
    assert d.status.is_true(ConditionType.RESTARTING) and d.status.state == "Restarting"
    d(world(up(M0), up(W[0], attempt=1)), 5)
    assert waiting(d) is None and d.status.state == "Running"


def test_a_stopped_job_waits_for_no_node() -> None:
    d = Driver(make_job(workers=1))
    d(World(), 0)
    d(world(up(M0), unschedulable(W[0])), 1)
    assert waiting(d) is not None
    d(world(up(M0), unschedulable(W[0]), stop="SIGTERM"), 2)
    assert d.status.finished and waiting(d) is None


def test_a_suspended_job_waits_for_no_node() -> None:
    d = Driver(make_job(workers=1))
    d(World(), 0)
    d(world(up(M0), unschedulable(W[0])), 1)
    assert waiting(d) is not None
    d.job = d.job.model_copy(update={"spec": d.job.spec.model_copy(update={
        "runPolicy": d.job.spec.runPolicy.model_copy(update={"suspend": True})})})
    plan = d(world(up(M0, stopping=True), unschedulable(W[0])), 2)
    assert d.status.is_true(ConditionType.SUSPENDED) and waiting(d) is None and plan.events[-1].reason != (
        "WaitingForNode")
