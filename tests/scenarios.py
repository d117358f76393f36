"""Job lifecycles that every runtime must agree on.

The same table is run by the core driver (`tests/core/test_scenarios.py`, a simulated clock) and
by the local driver (real processes). A scenario says when each attempt of each replica exits and
with which code, and what the job must end as. Times are seconds after that attempt started,
coarse (multiples of 0.5 s) so that real processes can follow them.

Restart backoff (core/policies/policy.py): a replica's first restart is immediate, then 1 s, 2 s, 4 s ...

Progress (`reports`): an attempt with an entry reports progress from its start until that many
seconds after it, then goes quiet (still running, as a rank stuck in a collective does); an
attempt without one never reports. With `progress_deadline` (runPolicy.progressDeadlineSeconds),
a quiet replica is the event Stalled.

Facts a runtime learns (`deleted`, `refused`, `runner_lost`) are in the world core reads, and core
decides what they end in. A driver that cannot produce a row's fact yet leaves the row out, and
the row says why (`unplayable`: driver -> why), as the real-node driver does for rows timed finer
than its pod starts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tests.jobs import job_data
from torchjob.api.load import job_from_data
from torchjob.api.model import TorchJob


@dataclass(frozen=True)
class Scenario:
    name: str
    workers: int                      # worker replicas
    master: bool = True               # one Master replica when True
    restart_policy: str = "Never"     # for every replica type
    # runPolicy.restartScope: most rows play Kubeflow's per-replica restarts; None: the default (Job,
    # or Replica for an elastic job)
    restart_scope: str | None = "Replica"
    backoff_limit: int | None = None
    deadline: int | None = None       # runPolicy.activeDeadlineSeconds
    elastic: bool = False             # adds elasticPolicy (only meaningful without master)
    # replica name -> one (seconds after that attempt started, exit code) per attempt;
    # a replica with no entry left for its current attempt runs until it is stopped.
    exits: Mapping[str, tuple[tuple[float, int], ...]] = field(default_factory=dict)
    expect_state: str = "Succeeded"   # final JobStatus.state
    expect_reason: str = "Succeeded"  # reason of the final Succeeded/Failed condition
    expect_restarts: int = 0          # status.restartCount
    expect_failed_replica: str | None = None  # status.failure.replica
    # replica name -> its last attempt (status.replicas[name].attempt); a replica not named is not checked
    expect_attempts: Mapping[str, int] = field(default_factory=dict)
    # Lifecycle policies: job-level, and per replica type ("Master"/"Worker").
    policies: tuple[Mapping[str, Any], ...] = ()
    replica_policies: Mapping[str, tuple[Mapping[str, Any], ...]] = field(default_factory=dict)
    max_restarts: Mapping[str, int] = field(default_factory=dict)  # per replica type
    min_success: int | None = None
    progress_deadline: int | None = None  # runPolicy.progressDeadlineSeconds
    # replica name -> one entry per attempt: seconds after that attempt started when it last reports
    reports: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    # replica name -> seconds after its first attempt started when someone else deletes it (a drain)
    deleted: Mapping[str, float] = field(default_factory=dict)
    refused: tuple[float, str, str] | None = None  # (seconds after the start, reason, message)
    runner_lost: tuple[float, str] | None = None  # (seconds after the start, how it was found)
    # driver ("local": real processes, "kube": a real API server, "real": real pods) -> why it
    # cannot produce this row's fact yet
    unplayable: Mapping[str, str] = field(default_factory=dict)

    def plays_on(self, driver: str) -> bool:
        return driver not in self.unplayable

    def check(self, status: Mapping[str, Any]) -> None:
        """The job's status (as a runtime on Kubernetes writes it) is the end this scenario expects."""
        conds = {c["type"]: c for c in status["conditions"] if c["status"] == "True"}
        assert self.expect_state in conds, status
        assert conds[self.expect_state]["reason"] == self.expect_reason, status
        assert status.get("restartCount", 0) == self.expect_restarts, status
        if self.expect_failed_replica is not None:
            assert status["failure"]["replica"] == self.expect_failed_replica, status
        for name, attempt in self.expect_attempts.items():
            assert status["replicas"][name].get("attempt", 0) == attempt, status

    def job(self, command: list[str]) -> TorchJob:
        """A valid TorchJob named after the scenario, `command` for every replica."""
        run_policy: dict[str, int] = {}
        if self.backoff_limit is not None:
            run_policy["backoffLimit"] = self.backoff_limit
        if self.deadline is not None:
            run_policy["activeDeadlineSeconds"] = self.deadline
        if self.progress_deadline is not None:
            run_policy["progressDeadlineSeconds"] = self.progress_deadline
        elastic = (
            {"minReplicas": 1, "maxReplicas": self.workers, "rdzvBackend": "c10d"} if self.elastic else None
        )
        data = job_data(
            self.name,
            workers=self.workers,
            master=self.master,
            restart_policy=self.restart_policy,
            command=command,
            run_policy=run_policy,
            elastic=elastic,
            restart_scope=self.restart_scope,
        )
        spec = data["spec"]
        if self.policies:
            spec["policies"] = [dict(p) for p in self.policies]
        for rtype, pols in self.replica_policies.items():
            spec["pytorchReplicaSpecs"][rtype]["policies"] = [dict(p) for p in pols]
        for rtype, n in self.max_restarts.items():
            spec["pytorchReplicaSpecs"][rtype]["maxRestarts"] = n
        if self.min_success is not None:
            spec["minSuccess"] = self.min_success
        return job_from_data(data)


SCENARIOS: list[Scenario] = [
    # --- success -------------------------------------------------------------------------
    Scenario(
        name="success",
        workers=2,
        exits={"master-0": ((1.0, 0),), "worker-0": ((0.5, 0),), "worker-1": ((0.5, 0),)},
    ),
    Scenario(
        name="master-only",
        workers=0,
        exits={"master-0": ((0.5, 0),)},
    ),
    Scenario(
        # workers that do not end on their own are stopped once the success has settled (10 s)
        name="master-success-stops-workers",
        workers=2,
        exits={"master-0": ((1.0, 0),)},
    ),
    Scenario(
        name="worker-only-success",
        workers=2,
        master=False,
        exits={"worker-0": ((0.5, 0),), "worker-1": ((1.5, 0),)},
    ),
    Scenario(
        # succeeds when worker-1 does; worker-0 failing later, while the job settles, changes nothing
        name="elastic-one-worker-succeeds",
        workers=2,
        master=False,
        elastic=True,
        exits={"worker-1": ((1.0, 0),), "worker-0": ((2.0, 1),)},
    ),
    # --- Never ---------------------------------------------------------------------------
    Scenario(
        name="never-worker-fails",
        workers=2,
        exits={"worker-0": ((0.5, 1),)},
        expect_state="Failed",
        expect_reason="ReplicaFailed",
        expect_failed_replica="worker-0",
    ),
    Scenario(
        name="never-master-fails",
        workers=2,
        exits={"master-0": ((1.0, 1),)},
        expect_state="Failed",
        expect_reason="ReplicaFailed",
        expect_failed_replica="master-0",
    ),
    Scenario(
        name="worker-only-worker-fails",
        workers=2,
        master=False,
        exits={"worker-0": ((0.5, 0),), "worker-1": ((1.0, 3),)},
        expect_state="Failed",
        expect_reason="ReplicaFailed",
        expect_failed_replica="worker-1",
    ),
    Scenario(
        name="earlier-failure-is-root-cause",
        workers=2,
        exits={"worker-1": ((0.5, 2),), "worker-0": ((1.5, 1),)},
        expect_state="Failed",
        expect_reason="ReplicaFailed",
        expect_failed_replica="worker-1",
    ),
    # --- ExitCode ------------------------------------------------------------------------
    Scenario(
        name="exitcode-137-then-0",
        workers=1,
        restart_policy="ExitCode",
        exits={"master-0": ((2.0, 0),), "worker-0": ((0.5, 137), (0.5, 0))},
        expect_restarts=1,
    ),
    Scenario(
        name="exitcode-138-retry",
        workers=1,
        restart_policy="ExitCode",
        exits={"master-0": ((2.5, 0),), "worker-0": ((0.5, 138), (1.0, 0))},
        expect_restarts=1,
    ),
    Scenario(
        name="exitcode-master-138-retry",
        workers=1,
        restart_policy="ExitCode",
        exits={"master-0": ((0.5, 138), (1.0, 0))},
        expect_restarts=1,
    ),
    Scenario(
        name="exitcode-1-fails-at-once",
        workers=2,
        restart_policy="ExitCode",
        backoff_limit=5,
        exits={"worker-0": ((0.5, 1),)},
        expect_state="Failed",
        expect_reason="NonRetryableExitCode",
        expect_failed_replica="worker-0",
    ),
    Scenario(
        name="exitcode-backoff-limit",
        workers=1,
        restart_policy="ExitCode",
        backoff_limit=1,
        exits={"worker-0": ((0.5, 137), (0.5, 143))},
        expect_state="Failed",
        expect_reason="BackoffLimitExceeded",
        expect_restarts=1,
        expect_failed_replica="worker-0",
    ),
    # --- OnFailure -----------------------------------------------------------------------
    Scenario(
        name="onfailure-backoff-limit",
        workers=2,
        restart_policy="OnFailure",
        backoff_limit=2,
        exits={"worker-0": ((0.5, 1), (0.5, 1), (0.5, 1))},
        expect_state="Failed",
        expect_reason="BackoffLimitExceeded",
        expect_restarts=2,
        expect_failed_replica="worker-0",
    ),
    Scenario(
        name="onfailure-recovers",
        workers=2,
        restart_policy="OnFailure",
        backoff_limit=3,
        exits={"master-0": ((2.0, 0),), "worker-1": ((0.5, 1), (0.5, 0))},
        expect_restarts=1,
    ),
    Scenario(
        # restarts at 0.5 (immediate), 2.0 (after 1 s), 4.5 (after 2 s); succeeds at 5.0
        name="onfailure-restart-backoff",
        workers=1,
        restart_policy="OnFailure",
        exits={"master-0": ((6.0, 0),), "worker-0": ((0.5, 1), (0.5, 1), (0.5, 1), (0.5, 0))},
        expect_restarts=3,
    ),
    # --- restartScope Job (the default without elasticPolicy): one failure, one restart ----
    Scenario(
        # worker-1 is killed at 0.5: the whole gang restarts at once, counted once, and trains again
        name="gang-restart-on-a-killed-worker",
        workers=2,
        restart_policy="OnFailure",
        restart_scope=None,
        backoff_limit=1,
        exits={"master-0": ((30.0, 0), (1.5, 0)), "worker-0": ((30.0, 0), (1.0, 0)),
               "worker-1": ((0.5, 137), (1.0, 0))},
        expect_restarts=1,
    ),
    Scenario(
        # the peers fail with it in their collective ("Connection closed by peer"): one failure of the
        # gang, one restart (per replica, this needed 3 restarts, past backoffLimit)
        name="gang-restart-peers-failing-with-it",
        workers=2,
        restart_policy="OnFailure",
        restart_scope=None,
        backoff_limit=1,
        exits={"master-0": ((0.5, 1), (1.5, 0)), "worker-0": ((0.5, 1), (1.0, 0)),
               "worker-1": ((0.5, 137), (1.0, 0))},
        expect_restarts=1,
    ),
    Scenario(
        name="gang-restart-backoff-limit",
        workers=2,
        restart_policy="OnFailure",
        restart_scope=None,
        backoff_limit=1,
        exits={"master-0": ((30.0, 0), (30.0, 0)), "worker-0": ((30.0, 0), (30.0, 0)),
               "worker-1": ((0.5, 137), (0.5, 137))},
        expect_state="Failed",
        expect_reason="BackoffLimitExceeded",
        expect_restarts=1,
        expect_failed_replica="worker-1",
    ),
    # --- Always --------------------------------------------------------------------------
    Scenario(
        name="always-restarts-finished-worker",
        workers=1,
        restart_policy="Always",
        exits={"master-0": ((2.0, 0),), "worker-0": ((0.5, 0),)},
        expect_restarts=1,
    ),
    # --- runPolicy -----------------------------------------------------------------------
    Scenario(
        name="deadline-exceeded",
        workers=2,
        deadline=2,
        expect_state="Failed",
        expect_reason="DeadlineExceeded",
    ),
    Scenario(
        name="deadline-during-restarts",
        workers=1,
        restart_policy="OnFailure",
        deadline=8,  # two restarts well inside it at load 18 too (3 s was missed there)
        exits={"worker-0": ((0.5, 1), (0.5, 1))},
        expect_state="Failed",
        expect_reason="DeadlineExceeded",
        expect_restarts=2,
    ),
]

# --- lifecycle policies (Volcano's, native here) ---------------------------------------------
SCENARIOS += [
    Scenario(
        # the seeds' `TaskCompleted -> CompleteJob` on the master: done at once, lingering workers stopped
        name="taskcompleted-completejob",
        workers=2,
        replica_policies={"Master": ({"event": "TaskCompleted", "action": "CompleteJob"},)},
        exits={"master-0": ((1.0, 0),)},
        expect_reason="Completed",
    ),
    Scenario(
        name="podfailed-restartjob",
        workers=1,
        backoff_limit=2,
        policies=({"event": "PodFailed", "action": "RestartJob"},),
        exits={"master-0": ((30.0, 0), (1.5, 0)), "worker-0": ((0.5, 1), (0.5, 0))},
        expect_restarts=1,
    ),
    Scenario(
        name="exitcode-policy-restarttask",
        workers=2,
        replica_policies={"Worker": ({"exitCode": 3, "action": "RestartTask"},)},
        exits={"master-0": ((3.0, 0),), "worker-0": ((30.0, 0), (0.5, 0)), "worker-1": ((0.5, 3), (0.5, 0))},
        expect_restarts=1,
    ),
    Scenario(
        name="restartpod-overrides-never",
        workers=1,
        policies=({"event": "PodFailed", "action": "RestartPod"},),
        exits={"master-0": ((2.0, 0),), "worker-0": ((0.5, 1), (0.5, 0))},
        expect_restarts=1,
    ),
    Scenario(
        name="podfailed-abortjob",
        workers=2,
        restart_policy="OnFailure",
        policies=({"event": "PodFailed", "action": "AbortJob"},),
        exits={"worker-1": ((0.5, 1),)},
        expect_state="Failed",
        expect_reason="Aborted",
        expect_failed_replica="worker-1",
    ),
    Scenario(
        name="exitcode-terminatejob",
        workers=1,
        restart_policy="OnFailure",
        policies=({"exitCode": 7, "action": "TerminateJob"},),
        exits={"worker-0": ((0.5, 7),)},
        expect_state="Failed",
        expect_reason="Terminated",
        expect_failed_replica="worker-0",
    ),
    Scenario(
        name="replica-policy-before-job-policy",
        workers=1,
        restart_policy="Never",
        policies=({"event": "PodFailed", "action": "AbortJob"},),
        replica_policies={"Worker": ({"event": "PodFailed", "action": "RestartPod"},)},
        exits={"master-0": ((2.0, 0),), "worker-0": ((0.5, 1), (0.5, 0))},
        expect_restarts=1,
    ),
    Scenario(
        name="policy-timeout-delays-restart",
        workers=1,
        policies=({"event": "PodFailed", "action": "RestartJob", "timeout": "1s"},),
        exits={"master-0": ((30.0, 0), (1.0, 0)), "worker-0": ((0.5, 1), (0.5, 0))},
        expect_restarts=1,
    ),
    Scenario(
        name="max-restarts-task-failed",
        workers=1,
        restart_policy="OnFailure",
        max_restarts={"Worker": 1},
        exits={"worker-0": ((0.5, 1), (0.5, 1))},
        expect_state="Failed",
        expect_reason="TaskFailed",
        expect_restarts=1,
        expect_failed_replica="worker-0",
    ),
    Scenario(
        name="taskfailed-policy",
        workers=1,
        restart_policy="OnFailure",
        max_restarts={"Worker": 1},
        replica_policies={"Worker": ({"event": "TaskFailed", "action": "TerminateJob"},)},
        exits={"worker-0": ((0.5, 1), (0.5, 1))},
        expect_state="Failed",
        expect_reason="Terminated",
        expect_restarts=1,
        expect_failed_replica="worker-0",
    ),
    Scenario(
        name="min-success",
        workers=3,
        master=False,
        min_success=2,
        exits={"worker-0": ((0.5, 0),), "worker-1": ((1.0, 0),)},
        expect_reason="MinSuccess",
    ),
]

# --- progress and stalls (runPolicy.progressDeadlineSeconds) ---------------------------------
SCENARIOS += [
    Scenario(
        # the master reports, then hangs; the worker never reports (only rank 0 does): no policy, the job fails
        name="stalled-fails",
        workers=1,
        progress_deadline=2,
        reports={"master-0": (1.0,)},
        expect_state="Failed",
        expect_reason="ProgressDeadlineExceeded",
        expect_failed_replica="master-0",
    ),
    Scenario(
        # the hang is restarted by the policy, and the new attempts (which keep reporting) succeed
        name="stalled-restartjob-recovers",
        workers=1,
        backoff_limit=2,
        # 5 s: the second attempts report all along; a 2 s gap in their reports (or in the operator's
        # or supervisor's turns) at load 18 was a false second stall before their exits
        progress_deadline=5,
        policies=({"event": "Stalled", "action": "RestartJob"},),
        reports={"master-0": (1.0, 30.0), "worker-0": (1.0, 30.0)},
        exits={"master-0": ((30.0, 0), (2.0, 0)), "worker-0": ((30.0, 0), (1.5, 0))},
        expect_restarts=1,
    ),
    Scenario(
        # every attempt hangs (the master first): the restarts count toward backoffLimit
        name="stalled-backoff-limit",
        workers=1,
        backoff_limit=1,
        # the worker goes quiet 2 s after the master (0.5 s was inside the start skew of two pods under
        # load), reports 5 s apart from a deadline a starved reporter cannot reach
        progress_deadline=5,
        policies=({"event": "Stalled", "action": "RestartJob"},),
        reports={"master-0": (1.0, 1.0), "worker-0": (3.0, 3.0)},
        expect_state="Failed",
        expect_reason="BackoffLimitExceeded",
        expect_restarts=1,
        expect_failed_replica="master-0",
    ),
    Scenario(
        # only the worker goes quiet: its replica type's policy restarts it alone
        name="stalled-worker-restartpod",
        workers=1,
        # 5 s: the master reports until it exits, with no policy (a false stall of it fails the job);
        # its exit 5 s after the worker's stall (was 2.5 s: the restart must come before it)
        progress_deadline=5,
        replica_policies={"Worker": ({"event": "Stalled", "action": "RestartPod"},)},
        reports={"master-0": (30.0,), "worker-0": (1.0, 30.0)},
        exits={"master-0": ((11.0, 0),), "worker-0": ((30.0, 0), (1.0, 0))},
        expect_restarts=1,
    ),
    Scenario(
        # a job that never reports is never judged, however long it runs
        name="never-reporting-never-stalls",
        workers=1,
        progress_deadline=1,
        exits={"master-0": ((3.0, 0),), "worker-0": ((2.5, 0),)},
    ),
]

# --- facts a runtime learns (issue 10): a replica deleted by someone else, a refusal, a lost runner ---
NOT_DELETED = {"local": "a local replica is a process: it exits, nobody deletes it",
               "real": "the real-node driver does not delete pods yet (tests/kube does)"}
NO_SUPERVISOR = "a cluster has no supervisor per job: an operator that dies is restarted and carries on"
SCENARIOS += [
    Scenario(
        # a drain deletes worker-0 while it runs: with a policy on PodEvicted it is a failure that the
        # policy acts on (every replica anew), and the new attempts succeed
        name="evicted-restartjob",
        workers=1,
        backoff_limit=2,
        policies=({"event": "PodEvicted", "action": "RestartJob"},),
        deleted={"worker-0": 1.0},
        exits={"master-0": ((30.0, 0), (1.5, 0)), "worker-0": ((30.0, 0), (0.5, 0))},
        expect_restarts=1,
        unplayable=NOT_DELETED,
    ),
    Scenario(
        name="evicted-abortjob",
        workers=2,
        replica_policies={"Worker": ({"event": "PodEvicted", "action": "AbortJob"},)},
        deleted={"worker-1": 1.0},
        expect_state="Failed",
        expect_reason="Aborted",
        expect_failed_replica="worker-1",
        unplayable=NOT_DELETED,
    ),
    Scenario(
        # no policy on PodEvicted: the deleted replica is simply made again, as Kubeflow does (uncounted)
        name="deleted-made-again",
        workers=1,
        deleted={"worker-0": 0.5},
        exits={"master-0": ((2.0, 0),)},
        unplayable=NOT_DELETED,
    ),
    Scenario(
        # a gang (restartScope Job, the default): the master deleted after the worker's collective
        # (chaos run 6). Made again alone it would wait for a worker that has ended: every replica
        # restarts at once, uncounted, whatever restartPolicy says, and the new attempts succeed
        name="deleted-gang-restarts",
        workers=1,
        restart_scope=None,
        deleted={"master-0": 1.5},
        exits={"master-0": ((30.0, 0), (1.0, 0)), "worker-0": ((1.0, 0), (0.5, 0))},
        expect_attempts={"master-0": 1, "worker-0": 1},
        unplayable=NOT_DELETED,
    ),
    Scenario(
        # the runtime learns, once the job runs, that it cannot run it (here: the PodGroup kind is gone)
        name="refused-while-running",
        workers=1,
        refused=(1.0, "PodGroupUnavailable", "the PodGroup kind (scheduling.volcano.sh/v1beta1) is not served"),
        expect_state="Failed",
        expect_reason="PodGroupUnavailable",
        unplayable={
            "local": "PodGroupUnavailable is a cluster's refusal (the local one, LocalSetupFailed, comes before "
                     "any replica starts)",
            "kube": "the operator serves PodGroups only with --gang-scheduler volcano; this cluster's Volcano "
                    "kinds cannot be taken away under a running job here",
            "real": "as on tests/kube",
        },
    ),
    Scenario(
        # the local supervisor is killed (SIGKILL) while the job runs: the job fails, its attempts end
        name="runner-lost",
        workers=1,
        runner_lost=(1.0, "the supervisor is gone; its watchdog stopped every replica"),
        expect_state="Failed",
        expect_reason="SupervisorLost",
        unplayable={"kube": NO_SUPERVISOR, "real": NO_SUPERVISOR},
    ),
]

BY_NAME: dict[str, Scenario] = {s.name: s for s in SCENARIOS}
