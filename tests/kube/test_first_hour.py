"""A newcomer's first hour on a cluster, the pieces that need no cluster: `install --init-image`
reaches the operator's Deployment, and a document without `image:` is refused before anything is
created (no kubeconfig is even read: the refusal comes first)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.jobs import job_data

REPO = Path(__file__).resolve().parents[2]


def torchjob(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "torchjob", *args], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL, env=env)


def test_install_sets_the_wait_for_master_init_image() -> None:
    out = torchjob("install", "--dry-run", "--init-image", "localhost/torchjob-e2e:dev")
    assert out.returncode == 0, out.stderr
    deployment = next(d for d in yaml.safe_load_all(out.stdout) if d and d["kind"] == "Deployment")
    c = deployment["spec"]["template"]["spec"]["containers"][0]
    args = [*c.get("command", []), *c.get("args", [])]
    assert args[args.index("--init-image") + 1] == "localhost/torchjob-e2e:dev"


def test_a_document_without_an_image_is_refused_before_anything_is_created(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job_data("noimage", workers=1)))
    # a kubeconfig that names no cluster at all: the refusal comes before any call to one
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "KUBECONFIG": str(tmp_path / "none")}
    for verb in ("run", "submit"):
        out = torchjob(verb, str(path), "--kube", env=env)
        assert out.returncode == 2, out.stderr
        assert out.stderr.startswith(
            "error: job noimage: spec.pytorchReplicaSpecs.Master.template.spec.containers[0] (pytorch) has no "
            "image: a pod on a cluster runs an image\n    fix: set its image: (e.g. image: pytorch/pytorch:"
        ), out.stderr
        assert "Traceback" not in out.stderr and "Kubernetes configuration" not in out.stderr


def test_describe_words_a_run_policy_as_fields_and_a_suspended_job_has_no_eta(
        capsys: pytest.CaptureFixture[str]) -> None:
    from datetime import UTC, datetime

    from tests.jobs import make_job
    from torchjob.api.status import Condition, JobStatus, Progress
    from torchjob.cli import views
    from torchjob.runtime import JobView

    job = make_job("demo", workers=1, run_policy={"backoffLimit": 3, "suspend": True})
    at = datetime(2026, 11, 29, tzinfo=UTC)
    status = JobStatus(conditions=[Condition(type="Suspended", status="True", reason="Suspended")],
                       progress=Progress(percent=40.0, step=40, total=100, etaSeconds=75, lastReportTime=at))
    views.describe(JobView(name="demo", job=job, status=status), "text", lambda data, fmt: None)
    out = capsys.readouterr().out
    assert "Run policy:  backoffLimit: 3, suspend: true, restartScope: Replica" in out.splitlines(), out
    assert "40%" in out and "ETA" not in out


def test_a_job_of_one_replica_is_created_with_1_replica_and_its_end_is_not_running() -> None:
    from datetime import UTC, datetime

    from tests.jobs import make_job
    from torchjob.api.status import ConditionType
    from torchjob.core.round.reconcile import Observed, Phase, World, reconcile
    from torchjob.core.shape.topology import ReplicaId

    now = datetime(2026, 11, 29, tzinfo=UTC)
    job = make_job("one", workers=0)
    first = reconcile(job, World(replicas={}), now)
    assert "job one created with 1 replica" in [e.message for e in first.events]
    job = job.model_copy(update={"status": first.status})
    running = reconcile(job, World(replicas={"master-0": Observed(ReplicaId("Master", 0), 0, Phase.RUNNING)}), now)
    job = job.model_copy(update={"status": running.status})
    done = reconcile(job, World(replicas={"master-0": Observed(ReplicaId("Master", 0), 0, Phase.SUCCEEDED, 0)}), now)
    cond = done.status.condition(ConditionType.RUNNING)
    assert cond is not None and (cond.status, cond.reason, cond.message) == (
        "False", "Succeeded", "it no longer runs: it succeeded")
