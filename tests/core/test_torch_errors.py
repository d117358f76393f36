"""torch's error file, as locally written and as a pod's termination message."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from tests.jobs import make_job
from torchjob.api.status import ConditionType
from torchjob.core import torch_errors
from torchjob.core.reconcile import Observed, Phase, World, reconcile
from torchjob.core.topology import ReplicaId

TRACE = ("Traceback (most recent call last):\n  File \"x.py\", line 3, in f\n"
         "RuntimeError: worker-0 could not load its shard")
ERROR_FILE = json.dumps({"message": {"message": "RuntimeError: worker-0 could not load its shard",
                                     "extraInfo": {"py_callstack": TRACE, "timestamp": "1"}}})


def test_the_traceback_and_its_headline() -> None:
    assert torch_errors.traceback(ERROR_FILE) == TRACE
    assert torch_errors.headline(ERROR_FILE) == "RuntimeError: worker-0 could not load its shard"
    assert torch_errors.traceback("killed by the OOM killer") is None
    assert torch_errors.headline("first\nkilled by the OOM killer\n") == "killed by the OOM killer"
    assert torch_errors.headline("x" * 400, limit=10) == "xxxxxxx..."
    assert torch_errors.headline("\n \n") is None


def test_the_root_cause_carries_the_replica_s_own_error() -> None:
    job = make_job("demo", workers=1, restart_policy="Never")
    now = datetime(2026, 11, 23, tzinfo=UTC)
    first = reconcile(job, World(replicas={}), now)
    job = job.model_copy(update={"status": first.status})
    failed = Observed(ReplicaId("Worker", 0), 0, Phase.FAILED, 1, "Error",
                      "RuntimeError: worker-0 could not load its shard", now)
    plan = reconcile(job, World(replicas={"worker-0": failed,
                                          "master-0": Observed(ReplicaId("Master", 0), 0, Phase.RUNNING)}), now)
    assert plan.status.failure is not None
    assert plan.status.failure.message == ("worker-0 failed with exit code 1 (restartPolicy Never): "
                                           "RuntimeError: worker-0 could not load its shard")
    failed = plan.status.condition(ConditionType.FAILED)
    assert failed.message == "worker-0 failed with exit code 1 (restartPolicy Never)"
