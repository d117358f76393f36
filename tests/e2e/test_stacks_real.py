"""Where a stuck job's ranks are, on real pods (issue 42): a job (by default its pods run the stacks front) whose last
rank blocks in a `recv` nobody answers while the others wait for it in `all_reduce` (tests/programs/hang_collective.py,
mounted from the host). A handle's `stacks()` and `torchjob stacks --kube` name each rank's function and line, and
the rank that differs. They are taken through the pods' annotations and logs only: the pods run as Pod Security
`restricted` asks (no root, no capability: no ptrace), and nothing execs into them. The dumps are in the pods' logs
too; taking them stops nothing. A job annotated torchjob.dev/stacks "false" is refused, saying it opted out and how to
opt in (its pod starts beside the other's: one wait for both)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from lightkube import Client

import torchjob as api
from tests.e2e.conftest import status_of, torchjob, wait_for
from tests.e2e.images import TESTS_IMAGE
from tests.jobs import job_data
from tests.kube.conftest import REPO

pytestmark = pytest.mark.kube
PROGRAM = REPO / "tests" / "programs" / "hang_collective.py"


def line_of(mark: str) -> int:
    return next(i for i, text in enumerate(PROGRAM.read_text().splitlines(), 1) if mark in text)


RECV = f"wait_for_peer (hang_collective.py:{line_of('HANG-RECV')})"
ALL_REDUCE = f"step (hang_collective.py:{line_of('HANG-ALL-REDUCE')})"
RESTRICTED_POD = {"runAsNonRoot": True, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}}
RESTRICTED_CONTAINER = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def stuck_job(tmp_path: Path) -> Path:
    data = job_data("stuck", workers=2, command=("python", "/programs/hang_collective.py"))  # no annotation: by default
    for rspec in data["spec"]["pytorchReplicaSpecs"].values():
        pod = rspec["template"]["spec"]
        container = pod["containers"][0]
        container.update(image=TESTS_IMAGE, securityContext=RESTRICTED_CONTAINER,
                         volumeMounts=[{"name": "programs", "mountPath": "/programs", "readOnly": True}])
        pod["securityContext"] = RESTRICTED_POD
        pod["volumes"] = [{"name": "programs", "hostPath": {"path": str(PROGRAM.parent), "type": "Directory"}}]
    path = tmp_path / "stuck.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def plain_job(tmp_path: Path) -> Path:
    data = job_data("plain", workers=0, command=("python", "-c", "import time; time.sleep(600)"))
    data["metadata"]["annotations"] = {"torchjob.dev/stacks": "false"}  # opted out
    data["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["image"] = TESTS_IMAGE
    (tmp_path / "plain.yaml").write_text(yaml.safe_dump(data))
    return tmp_path / "plain.yaml"


def test_stacks_from_pods_name_each_ranks_function_and_line(node_kubeconfig: str, node: Client, ns: str,
                                                            tmp_path: Path) -> None:
    for path in (stuck_job(tmp_path), plain_job(tmp_path)):  # their pods start together
        sub = torchjob(node_kubeconfig, "submit", str(path), "-n", ns)
        assert sub.returncode == 0, sub.stdout + sub.stderr
    # the Python API's handle on the cluster's job, until every rank is in its collective (at its own pace)
    handle = wait_for("the job listed", lambda: next(
        (h for h in api.list_jobs(kube=True, namespace=ns, kubeconfig=node_kubeconfig) if h.name == "stuck"), None))

    def in_collectives() -> dict[str, Any] | None:
        try:
            data = handle.stacks()
        except api.UserError as e:
            assert "no running pod" in str(e), e  # not started yet
            return None
        # every rank in it: under load a rank may still be between init_process_group and its collective
        return data if data["short"].startswith(f"ranks 0-1 in {ALL_REDUCE}; rank 2 in {RECV}") else None

    data = wait_for("every rank in its collective", in_collectives, timeout=180, every=1)
    mains = [g for g in data["groups"] if g["mainThread"]]
    assert [g["ranks"] for g in mains] == [[0, 1], [2]], data
    waiting, receiving = mains
    assert [p["replica"] for p in waiting["processes"]] == ["master-0", "worker-0"], waiting
    assert waiting["summary"].startswith("ranks 0-1: all_reduce (torch/distributed/distributed_c10d.py:"), waiting
    assert f"<- {ALL_REDUCE} <- main (hang_collective.py:" in waiting["summary"], waiting["summary"]
    assert receiving["summary"].startswith("rank 2: recv (torch/distributed/distributed_c10d.py:"), receiving
    users = [f for f in receiving["frames"] if f["user"]]
    assert users[0] == {"file": "/programs/hang_collective.py", "line": line_of("HANG-RECV"),
                        "function": "wait_for_peer", "user": True}, users
    assert not any(f["user"] for f in receiving["frames"] if "/threading.py" in f["file"])  # the pod's stdlib
    assert data["short"] == f"ranks 0-1 in {ALL_REDUCE}; rank 2 in {RECV}; rank 2 differs from the rest (ranks 0-1)"
    assert data["missing"] == [] and data["differs"] == [[2]], data

    # the command says the same
    text = torchjob(node_kubeconfig, "stacks", "stuck", "-n", ns)
    assert text.returncode == 0, text.stderr
    assert text.stdout.splitlines()[0].startswith("ranks 0-1: all_reduce (torch/distributed/"), text.stdout
    assert text.stdout.splitlines()[2] == "rank 2 differs from the rest (ranks 0-1): look there first", text.stdout
    assert "3 process(es) answered in" in text.stdout
    # the dumps are in the pods' logs; the job runs on
    logs = torchjob(node_kubeconfig, "logs", "stuck", "-n", ns, "--replica", "worker-1").stdout
    assert "torchjob-stacks: begin request=" in logs and "in wait_for_peer" in logs, logs
    assert status_of(node, "stuck", ns)["conditions"][-1]["type"] == "Running"

    # a job that opted out: refused, saying so and how to opt in
    refused = wait_for("the refusal", lambda: (r := torchjob(node_kubeconfig, "stacks", "plain", "-n", ns))
                       and "no running pod" not in r.stderr and r, timeout=120, every=1)
    assert refused.returncode != 0 and 'opted out of stacks (its annotation torchjob.dev/stacks: "false")' in \
        refused.stderr, refused.stderr
    assert "remove the job's metadata.annotations torchjob.dev/stacks" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_a_collective_hung_without_reports_on_real_pods_is_a_hang_with_the_stacks(
        node_kubeconfig: str, node: Client, ns: str, tmp_path: Path) -> None:
    """runPolicy.hangDeadlineSeconds on a cluster (issue 42): a script that never reports, its rank 1 in a `recv`
    nobody answers and rank 0 in `all_reduce`. Each pod's stacks front samples its ranks (every tenth of the
    deadline) and tells the operator how long none moved; once none of the job's did for the deadline, the operator
    takes their stacks and the job fails as hung, saying where each rank was."""
    data = yaml.safe_load(stuck_job(tmp_path).read_text())
    data["metadata"]["name"] = "hung"
    data["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 1
    data["spec"]["runPolicy"] = {**data["spec"].get("runPolicy", {}), "hangDeadlineSeconds": 20}
    path = tmp_path / "hung.yaml"
    path.write_text(yaml.safe_dump(data))
    run = torchjob(node_kubeconfig, "run", str(path), "-n", ns, timeout=300)
    assert run.returncode != 0, run.stdout + run.stderr
    failure = status_of(node, "hung", ns)["failure"]
    where = f"rank 0 in {ALL_REDUCE}; rank 1 in {RECV}"
    assert failure["reason"] == "HangDeadlineExceeded", failure
    assert failure["message"].startswith("no rank moved for 20s") and where in failure["message"], failure
    assert where in run.stdout + run.stderr, run.stdout + run.stderr
