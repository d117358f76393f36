"""The status of a job of thousands of replicas is written in a JSON patch the API server takes
(kube/machinery/guarded_patch.py): it refuses one of more than 10,000 ops (413), and `status.replicas`
merged key by key made four ops a replica, 16,403 for one job of 4,096 (bench/operator_scale.py
--job-pods 4096: its status never left Created, its round failed 26 times in a row)."""

from __future__ import annotations

from torchjob.kube.machinery.guarded_patch import OPS_AT_MOST, guarded_ops


def replicas(n: int, attempt: int) -> dict[str, dict[str, object]]:
    return {f"worker-{i}": {"attempt": attempt, "restarts": attempt, "notBefore": None} for i in range(n)}


def test_a_status_of_4096_replicas_is_one_op_for_them_merged_with_what_was_seen() -> None:
    seen = {"metadata": {"uid": "u"}, "status": {"state": "Created", "replicas": {
        **replicas(4096, 0), "gone-0": {"attempt": 0}}, "replicaStatuses": {"Worker": {"active": 0}}}}
    patch = {"state": "Restarting", "replicas": {**replicas(4096, 1), "gone-0": None},
             "replicaStatuses": {"Worker": {"active": 4096}}}
    ops = guarded_ops("u", "status", patch, seen)
    assert len(ops) < 10 <= OPS_AT_MOST
    whole = next(op for op in ops if op["path"] == "/status/replicas")
    assert whole["op"] == "add" and whole["value"] == {f"worker-{i}": {"attempt": 1, "restarts": 1}
                                                       for i in range(4096)}
    assert {"op": "add", "path": "/status/replicaStatuses/Worker/active", "value": 4096} in ops  # small: key by key

