"""A job with runPolicy.warmSpares sent to a cluster (issue 32) whose replicas cannot restart in place
there (`python -c`, torchrun): every face says so, in one warning line before the cluster is asked (a
dry run too), naming each replica type and why; the job is not refused and the same document keeps its
spares locally. One whose command Python runs restarts in place: not a word. Offline: the kubeconfig
named does not exist."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.local.conftest import REPO, Torchjob, write_job

WARNING = ("warning: runPolicy.warmSpares: on a cluster these replicas restart as new pods, not in place with a warm "
           "spare: Master: Master's command is not `python SCRIPT` or `python -m MODULE` (nor torchrun): a spare can "
           "only stand in for a command Python runs itself (see docs/explanation/faults.md)")


def spares_job(path: Path, spares: bool = True, command: tuple[str, ...] = ("python", "-c", "print(1)")) -> Path:
    container = {"name": "pytorch", "image": "img", "command": list(command)}
    return write_job(path, {
        "apiVersion": "torchjob.dev/v1", "kind": "TorchJob", "metadata": {"name": "spared"},
        "spec": {"runPolicy": {"warmSpares": spares, "backoffLimit": 2}, "pytorchReplicaSpecs": {
            "Master": {"replicas": 1, "restartPolicy": "OnFailure", "template": {"spec": {"containers": [container]}}},
        }}})


@pytest.fixture
def offline(torchjob: Torchjob, tmp_path: Path) -> Torchjob:
    torchjob.env["KUBECONFIG"] = str(tmp_path / "no-kubeconfig")  # no cluster is asked
    return torchjob


def test_every_cluster_face_warns_once_and_a_local_plan_not_at_all(offline: Torchjob, tmp_path: Path) -> None:
    doc = spares_job(tmp_path / "job.yaml")
    for argv in (("run", "--kube", str(doc), "--dry-run"), ("submit", "--kube", str(doc), "--dry-run"),
                 ("render", "--kube", str(doc))):
        out = offline(*argv)
        assert out.returncode == 0, out.stderr
        assert out.stderr.splitlines().count(WARNING) == 1, (argv, out.stderr)
    # a real submit says it before it asks the cluster (which this one cannot reach)
    out = offline("submit", "--kube", str(doc))
    assert out.returncode == 2 and "no Kubernetes configuration" in out.stderr and "Traceback" not in out.stderr
    assert out.stderr.splitlines()[0] == WARNING
    # a job built from flags: --warm-spares
    script = tmp_path / "train.py"
    script.write_text("print(1)\n")
    out = offline("run", "-j", "2x1", "--max-restarts", "1", "--warm-spares", "--kube", "--image", "img", str(script),
                  "--dry-run")
    assert out.returncode == 0, out.stderr
    said = [line for line in out.stderr.splitlines() if "warmSpares" in line]
    assert len(said) == 1 and said[0].startswith(WARNING[:90]) and "Worker runs torchrun" in said[0], out.stderr
    # locally spares work: not a word; nor on a cluster for a job without them, or one that restarts in place
    for argv in (("run", str(doc), "--dry-run"), ("render", str(doc)),
                 ("run", "--kube", str(spares_job(tmp_path / "plain.yaml", spares=False)), "--dry-run"),
                 ("run", "--kube", str(spares_job(tmp_path / "py.yaml", command=("python", "train.py"))), "--dry-run")):
        out = offline(*argv)
        assert out.returncode == 0, out.stderr
        assert "warmSpares" not in out.stderr, (argv, out.stderr)


def test_the_python_api_warns_when_it_submits_to_a_cluster(tmp_path: Path) -> None:
    doc = spares_job(tmp_path / "job.yaml")
    code = ("import sys, torchjob\n"
            "from torchjob.api.errors import UserError\n"
            f"job = torchjob.Job.from_file({str(doc)!r})\n"
            "try:\n"
            f"    job.submit(kube=True, kubeconfig={str(tmp_path / 'no-kubeconfig')!r})\n"
            "except UserError as e:\n"
            "    print('refused:', e)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                         stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stderr
    assert out.stderr.splitlines() == [f"torchjob: {WARNING}"], out.stderr
    assert "refused: no Kubernetes configuration" in out.stdout
