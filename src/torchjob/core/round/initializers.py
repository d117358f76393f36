"""A job's initializers (`spec.initializers`; Kubeflow Trainer's `dataset-initializer` and `model-initializer`
jobs): each runs to completion before any replica is made, all of them at once, as
Trainer's JobSet runs them (its `node` job dependsOn both with status Complete). A failed step is
made again up to its `backoffLimit` (its Job's retries), after a Job's backoff (`retry_delay`); past
it the job fails with the step's own last words (its termination message) as the root cause, the
other steps are stopped, and no replica is ever made. Once every step has succeeded they are done
for good: a restart of the replicas does not run them again (what they filled is kept). A finished
job's steps are stopped; a suspended job's unfinished steps start anew on resume. Pure.

A step is carried out as an attempt of `ReplicaId(name, 0)` (Create, Stop, Forget): its pod (on
Kubernetes) or process (locally) is `<name>-0`, never a rank."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from torchjob.api.model import Initializer, TorchJob
from torchjob.api.status import ConditionType, EventType, FailureInfo, InitializerStatus, Reason, StepState
from torchjob.core.round.conditions import exit_text, fail
from torchjob.core.round.plan import Create, Plan, Round, Stop
from torchjob.core.round.world import Phase, World
from torchjob.core.shape.topology import ReplicaId

# A Kubernetes Job makes a failed pod's replacement after 10 s, doubling with each failure, at most
# 10 min, counted from the failed pod's end (kubernetes pkg/controller/job: job_controller.go
# DefaultJobPodFailureBackOff, MaxJobPodFailureBackOff; backoff_utils.go getRemainingTimeForFailuresCount;
# its docs still say "capped at six minutes", the code's cap is 10 min). Trainer's initializers are Jobs.
JOB_RETRY_BASE_S = 10.0
JOB_RETRY_MAX_S = 600.0


def retry_delay(failures: int) -> float:
    """Seconds a Job waits after its `failures`-th failure (1, 2, ...) before it makes the next pod:
    10, 20, 40, ... at most 600."""
    if failures <= 0:
        return 0.0
    return min(JOB_RETRY_BASE_S * float(2 ** min(failures - 1, 16)), JOB_RETRY_MAX_S)


def retry_at(failures: int, failed_at: datetime) -> datetime:
    """When the next attempt after the `failures`-th failure, ended at `failed_at`, may be made."""
    return failed_at + timedelta(seconds=retry_delay(failures))


def step(name: str) -> ReplicaId:
    """The id a step's attempts are carried out under (`dataset-initializer-0`)."""
    return ReplicaId(name, 0)


def step_named(job: TorchJob, replica: str) -> Initializer | None:
    """The initializer whose attempts are named `replica` (`dataset-initializer-0`); None for a replica."""
    return next((s for s in job.spec.initializers or [] if step(s.name).name == replica), None)


def is_step(job: TorchJob, rid: ReplicaId) -> bool:
    return any(s.name == rid.rtype for s in job.spec.initializers or [])


def ready(r: Round) -> bool:
    """Whether the replicas may be made: every initializer has succeeded (at once for a job with
    none). Until then the steps due are made, a failed one is retried or fails the job."""
    waiting = False
    for s in r.job.spec.initializers or []:
        st = r.status.initializers.setdefault(s.name, InitializerStatus())
        obs = r.world.steps.get(s.name)
        if st.state is StepState.SUCCEEDED:
            continue
        waiting = waiting or obs is None or obs.phase is not Phase.SUCCEEDED or obs.attempt < st.attempt
        if obs is not None and obs.attempt < st.attempt:
            r.plan.retire(obs, "replaced by a newer attempt")  # the next attempt once it is gone
        elif obs is None:
            st.state = StepState.PENDING
            if st.notBefore is not None and r.now < st.notBefore:
                r.plan.requeue(st.notBefore)  # a retry waits out its backoff
            else:
                st.notBefore = None
                r.plan.actions.append(Create(step(s.name), st.attempt))
        elif obs.phase.active:
            st.state = StepState.RUNNING if obs.phase is Phase.RUNNING else StepState.PENDING
        elif obs.phase is Phase.SUCCEEDED:
            st.state, st.message = StepState.SUCCEEDED, None
            r.plan.event(EventType.NORMAL, Reason.INITIALIZED, f"initializer {s.name} completed")
        elif st.attempt < (s.backoffLimit or 0):
            st.attempt, st.state, st.message = st.attempt + 1, StepState.PENDING, obs.message
            st.notBefore = retry_at(st.attempt, obs.finished_at or r.now)
            r.plan.event(EventType.WARNING, Reason.RESTARTING,
                         f"initializer {s.name} failed ({exit_text(obs)}); retried {retry_delay(st.attempt):g}s "
                         f"after its end (attempt {st.attempt} of {s.backoffLimit})")
            r.plan.retire(obs, "retried")
        else:
            st.state, st.message = StepState.FAILED, obs.message
            said = f"initializer {s.name} failed ({exit_text(obs)})"
            fail(r.plan, r.now, Reason.INITIALIZER_FAILED, said, FailureInfo(
                reason=Reason.INITIALIZER_FAILED, message=f"{said}: {obs.message}" if obs.message else said,
                replica=obs.replica.name, attempt=obs.attempt, exitCode=obs.exit_code))
            return False
    return not waiting


def halt(job: TorchJob, world: World, plan: Plan) -> None:
    """A finished job's steps still running are stopped; a suspended job's unfinished ones are
    retired, to start anew (a new attempt) on resume."""
    suspended = plan.status.is_true(ConditionType.SUSPENDED)
    if not (plan.status.finished or suspended):
        return
    stopping = {a.replica for a in plan.actions if isinstance(a, Stop)}
    for name, obs in world.steps.items():
        st = plan.status.initializers.get(name)
        if suspended and st is not None and st.state is not StepState.SUCCEEDED:
            st.attempt, st.state, st.notBefore = max(st.attempt, obs.attempt + 1), StepState.PENDING, None
            plan.retire(obs, "the job is suspended")
        elif obs.phase.active and not obs.stopping and obs.replica not in stopping:
            plan.actions.append(Stop(obs.replica, obs.attempt, "the job has finished"))


def active(world: World) -> bool:
    return any(o.phase.active for o in world.steps.values())


def with_steps(job: TorchJob, world: World) -> World:
    """`world` with the initializers' attempts that a runtime observed among its replicas (locally: its
    processes) moved to `steps`."""
    steps = {o.replica.rtype: o for o in world.replicas.values() if is_step(job, o.replica)}
    if not steps:
        return world
    rest = {n: o for n, o in world.replicas.items() if not is_step(job, o.replica)}
    return replace(world, replicas=rest, steps={**world.steps, **steps})
