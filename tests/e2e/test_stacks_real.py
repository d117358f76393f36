"""Where a stuck job's ranks are, on real pods (issue 42): a job annotated torchjob.dev/stacks "true" whose last rank
blocks in a `recv` nobody answers while the others wait for it in `all_reduce` (tests/programs/hang_collective.py,
mounted from the host). `torchjob stacks --kube` and a handle's `stacks()` name each rank's function and line. They
are taken through the pods' annotations and logs only: the pods run as Pod Security `restricted` asks (no root, no
capability: no ptrace), and nothing execs into them. The dumps are in the pods' logs too; taking them stops nothing."""

from __future__ import annotations

import json
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
    data = job_data("stuck", workers=2, command=("python", "/programs/hang_collective.py"))
    data["metadata"]["annotations"] = {"torchjob.dev/stacks": "true"}
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


def test_stacks_from_pods_name_each_ranks_function_and_line(node_kubeconfig: str, node: Client, ns: str,
                                                            tmp_path: Path) -> None:
    sub = torchjob(node_kubeconfig, "submit", str(stuck_job(tmp_path)), "-n", ns)
    assert sub.returncode == 0, sub.stdout + sub.stderr

    def in_collectives() -> dict[str, Any] | None:  # the ranks start at their own pace
        out = torchjob(node_kubeconfig, "stacks", "stuck", "-n", ns, "-o", "json")
        assert out.returncode == 0 or "no running pod" in out.stderr, out.stderr
        data = json.loads(out.stdout) if out.returncode == 0 else {"short": ""}
        return data if "step (" in data["short"] and "wait_for_peer (" in data["short"] else None

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
    assert data["short"].startswith(f"ranks 0-1 in {ALL_REDUCE}; rank 2 in {RECV}") and data["missing"] == []

    text = torchjob(node_kubeconfig, "stacks", "stuck", "-n", ns)
    assert text.returncode == 0, text.stderr
    assert text.stdout.splitlines()[0].startswith("ranks 0-1: all_reduce (torch/distributed/"), text.stdout
    assert "3 process(es) answered in" in text.stdout
    # the Python API's handle on the cluster's job says the same
    handle = next(h for h in api.list_jobs(kube=True, namespace=ns, kubeconfig=node_kubeconfig) if h.name == "stuck")
    assert handle.stacks()["short"] == data["short"]
    # the dumps are in the pods' logs; the job runs on
    logs = torchjob(node_kubeconfig, "logs", "stuck", "-n", ns, "--replica", "worker-1").stdout
    assert "torchjob-stacks: begin request=" in logs and "in wait_for_peer" in logs, logs
    assert status_of(node, "stuck", ns)["conditions"][-1]["type"] == "Running"


def test_a_job_not_annotated_is_refused_with_the_fix(node_kubeconfig: str, ns: str, tmp_path: Path) -> None:
    data = job_data("plain", workers=0, command=("python", "-c", "import time; time.sleep(600)"))
    data["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["image"] = TESTS_IMAGE
    (tmp_path / "plain.yaml").write_text(yaml.safe_dump(data))
    assert torchjob(node_kubeconfig, "submit", str(tmp_path / "plain.yaml"), "-n", ns).returncode == 0
    refused = wait_for("the refusal", lambda: (r := torchjob(node_kubeconfig, "stacks", "plain", "-n", ns))
                       and "no running pod" not in r.stderr and r, timeout=120, every=1)
    assert refused.returncode != 0 and "were not made to give their stacks" in refused.stderr, refused.stderr
    assert 'torchjob.dev/stacks: "true"' in refused.stderr and "Traceback" not in refused.stderr
