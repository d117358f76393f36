"""The client side shows the kinds torchjob's operator serves beside TorchJob: `torchjob list`,
`describe` and `logs --kube`, the Python API's handles and the dashboard's listing show a Kubeflow
Trainer v2 TrainJob and a T9k PyTorchTrainingJob beside a TorchJob, each with its kind, read from a
real API server with the CRDs `torchjob install --trainer-api` and `--t9k-api` make and the operator
as a process; the TrainJob's pods run on the dev cluster's KWOK node, whose kubelet answers logs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from lightkube import Client, codecs
from lightkube.core.exceptions import ApiError
from lightkube.generic_resource import create_namespaced_resource
from lightkube.resources.core_v1 import Pod

from tests.jobs import job_data
from tests.kube.conftest import Operator, wait_job
from tests.kube.test_kubeflow_api import kubectl
from tests.kube.test_operator import create
from tests.kube.test_trainjob_api import apply_trainer_api
from tests.ui.conftest import Dashboard, Page
from torchjob.kube.machinery.client import T9kPyTorchTrainingJobRes, TrainJobRes
from torchjob.kube.objects.labels.trainjob import JOBSET_NAME
from torchjob.kube.served import t9k_objects

pytestmark = pytest.mark.kube
SEED = Path(__file__).resolve().parents[1] / "dialects" / "seeds" / "003-t9k.yaml"
KWOK = [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}]
LINE = "fake container output from KWOK (scripts/dev-cluster.sh)"


@pytest.fixture
def served_api(kube: Client, kubeconfig: str) -> Client:
    """Trainer's CRDs, its runtime and T9k's CRD as `torchjob install --trainer-api --t9k-api` apply
    them (less the operator's RBAC: it runs here as a process with the test's credentials)."""
    return apply_trainer_api(kube, kubeconfig, [t9k_objects.crd()])


@pytest.fixture
def served_operator(served_api: Client, kubeconfig: str, tmp_path: Path) -> Iterator[Operator]:
    op = Operator(kubeconfig, tmp_path / "operator.log", ("--no-leader-elect",))
    op.start()
    yield op
    op.stop()
    print(op.log.read_text()[-4000:])


def trainjob_on_kwok(name: str, namespace: str) -> dict[str, Any]:
    """A TrainJob of two nodes whose pods go to the KWOK node (a runtimePatches entry, as Kueue's placement)."""
    placed = {"trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
        {"name": "node", "template": {"spec": {"template": {"spec": {"tolerations": KWOK}}}}}]}}}}
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"runtimeRef": {"name": "torch-distributed"},
                     "trainer": {"numNodes": 2, "command": ["torchrun", "train.py"]},
                     "runtimePatches": [{"manager": "example.com/placement", **placed}]}}


def torchjob(kubeconfig: str, *args: str) -> subprocess.CompletedProcess[str]:
    """The command as a user runs it, in a terminal wide enough for every column (a pipe is 80 wide)."""
    return subprocess.run([sys.executable, "-m", "torchjob", *args, "--kube", "--kubeconfig", kubeconfig],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
                          env={**os.environ, "COLUMNS": "200"})


def wait_for(what: str, pred: Any, timeout: float = 60) -> Any:
    end = time.monotonic() + timeout
    last = None
    while time.monotonic() < end:
        last = pred()
        if last:
            return last
        time.sleep(0.2)
    raise AssertionError(f"never {what}: {last}")


def running_pods(kube: Client, name: str, namespace: str, n: int) -> list[Any]:
    def found() -> list[Any] | None:
        pods = [p for p in kube.list(Pod, namespace=namespace, labels={JOBSET_NAME: name})
                if p.status and p.status.phase == "Running"]
        return pods if len(pods) == n else None
    return list(wait_for(f"{n} pods of {name} running", found))


def test_list_describe_logs_the_sdk_and_the_dashboard_show_trainjobs_and_t9k_jobs_beside_torchjobs(
        kube: Client, kubeconfig: str, namespace: str, served_operator: Operator, tmp_path: Path) -> None:
    create(kube, job_data("tj", workers=1), namespace)
    kube.create(codecs.from_dict(trainjob_on_kwok("train", namespace)), namespace=namespace)
    seed = yaml.safe_load(SEED.read_text())
    seed["metadata"]["namespace"] = namespace
    (tmp_path / "t9k.yaml").write_text(yaml.safe_dump(seed))
    kubectl(kubeconfig, "apply", "-f", str(tmp_path / "t9k.yaml"))
    wait_job(kube, "tj", namespace, lambda s: s.get("state") is not None)
    pods = running_pods(kube, "train", namespace, 2)
    # The pods run (KWOK's write) before the operator's status write says so, which list, describe and
    # the handle read: waited for, as they show it (status.torchjob.state), not read at once
    from tests.kube.test_trainjob_api import wait_trainjob

    wait_trainjob(kube, "train", namespace, lambda s: (s.get("torchjob") or {}).get("state") == "Running")

    listed = torchjob(kubeconfig, "list", "-n", namespace)
    assert listed.returncode == 0, listed.stderr
    rows = {line.split()[0]: line.split() for line in listed.stdout.splitlines()}
    assert rows["NAME"][:3] == ["NAME", "KIND", "STATE"], listed.stdout
    assert rows["tj"][1] == "TorchJob"
    assert rows["train"][1:3] == ["TrainJob", "Running"] and rows["train"][4] == "2x1"
    assert rows["pytorch-example"][1] == "PyTorchTrainingJob", listed.stdout
    as_json = json.loads(torchjob(kubeconfig, "list", "-n", namespace, "-o", "json").stdout)
    assert {r["name"]: r.get("kind") for r in as_json} == {
        "tj": None, "train": "TrainJob", "pytorch-example": "PyTorchTrainingJob"}

    described = torchjob(kubeconfig, "describe", "train", "-n", namespace)
    assert described.returncode == 0, described.stderr
    text = described.stdout
    assert "Kind:        TrainJob" in text and "State:       Running" in text
    assert {p.metadata.name for p in pods} <= set(text.split())  # both node pods, as the job's attempts
    t9k = torchjob(kubeconfig, "describe", "pytorch-example", "-n", namespace)
    assert t9k.returncode == 0 and "Kind:        PyTorchTrainingJob" in t9k.stdout, t9k.stderr
    assert "Kind:" not in torchjob(kubeconfig, "describe", "tj", "-n", namespace).stdout

    logs = torchjob(kubeconfig, "logs", "train", "-n", namespace)
    assert logs.returncode == 0, logs.stderr
    replicas = sorted({line.split("]")[0] + "]" for line in logs.stdout.splitlines()})
    assert len(replicas) == 2 and logs.stdout.count(LINE) == 2, logs.stdout

    import torchjob as api

    handles = {h.name: h for h in api.list_jobs(kube=True, namespace=namespace, kubeconfig=kubeconfig)}
    assert set(handles) == {"tj", "train", "pytorch-example"}
    view = handles["train"].describe()
    assert view.kind == "TrainJob" and len(view.attempts) == 2 and handles["train"].state == "Running"
    assert LINE in handles["train"].logs()

    from torchjob.connect import Target
    from torchjob.ui.source import Source

    dashboard = Source(Target(True, kubeconfig, None, namespace))
    assert {r["name"]: r["kind"] for r in dashboard.jobs()} == {
        "tj": None, "train": "TrainJob", "pytorch-example": "PyTorchTrainingJob"}

    refused = torchjob(kubeconfig, "suspend", "pytorch-example", "-n", namespace)  # T9k's pauses, it does not suspend
    assert refused.returncode != 0 and "is a PyTorchTrainingJob" in refused.stderr, refused.stderr
    assert "kubectl patch pytorchtrainingjob pytorch-example" in refused.stderr and "runMode" in refused.stderr
    assert "Traceback" not in refused.stderr
    deleted = torchjob(kubeconfig, "delete", "train", "-n", namespace)
    assert deleted.returncode == 0, deleted.stderr
    with pytest.raises(ApiError):
        wait_for("the TrainJob gone", lambda: kube.get(TrainJobRes, "train", namespace=namespace) and None, 30)
    assert kube.get(T9kPyTorchTrainingJobRes, "pytorch-example", namespace=namespace) is not None


def test_kind_slash_name_picks_one_of_two_jobs_of_a_name_and_a_trainjob_suspends(
        kube: Client, kubeconfig: str, namespace: str, served_operator: Operator) -> None:
    """A TorchJob and a TrainJob both named `same`: a bare name is refused, naming both kinds and the
    KIND/NAME to write; `trainjob/same` and `tj/same` reach each; suspend and resume of the TrainJob
    set its spec.suspend (the operator stops its pods, then makes them again); delete of
    `trainjob/same` leaves the TorchJob."""
    from tests.kube.test_trainjob_api import condition, wait_trainjob

    kube.create(codecs.from_dict(trainjob_on_kwok("same", namespace)), namespace=namespace)
    running_pods(kube, "same", namespace, 2)
    # Both cannot run (one pod and Service name each): the TorchJob is made suspended, so it makes none
    own_data = job_data("same", workers=0)
    own_data["spec"].setdefault("runPolicy", {})["suspend"] = True
    create(kube, own_data, namespace)

    for verb in ("describe", "logs", "delete", "suspend"):
        bare = torchjob(kubeconfig, verb, "same", "-n", namespace)
        assert bare.returncode != 0 and "Traceback" not in bare.stderr, bare.stderr
        assert "2 jobs are named 'same'" in bare.stderr and "torchjob/same or trainjob/same" in bare.stderr
    assert "Kind:        TrainJob" in torchjob(kubeconfig, "describe", "trainjob/same", "-n", namespace).stdout
    assert "Kind:        TrainJob" in torchjob(kubeconfig, "describe", "trainjobs.trainer.kubeflow.org/same",
                                              "-n", namespace).stdout
    own = torchjob(kubeconfig, "describe", "tj/same", "-n", namespace)
    assert own.returncode == 0 and "Kind:" not in own.stdout, own.stderr
    assert torchjob(kubeconfig, "logs", "TrainJob/same", "-n", namespace).stdout.count(LINE) == 2
    wrong = torchjob(kubeconfig, "describe", "deployment/same", "-n", namespace)
    assert wrong.returncode != 0 and "trainjob" in wrong.stderr and "Traceback" not in wrong.stderr, wrong.stderr
    missing = torchjob(kubeconfig, "describe", "pytorchjob/same", "-n", namespace)
    assert missing.returncode != 0 and "no job named 'pytorchjob/same'" in missing.stderr, missing.stderr

    suspended = torchjob(kubeconfig, "suspend", "trainjob/same", "-n", namespace)
    assert suspended.returncode == 0, suspended.stderr
    def suspended_is(value: str) -> Any:
        return lambda s: (condition(s, "Suspended") or {}).get("status") == value

    stored = wait_trainjob(kube, "same", namespace, suspended_is("True"))
    assert stored["spec"]["suspend"] is True
    def live() -> list[Any]:  # a pod being deleted (KWOK keeps it for its grace period) is gone
        return [p for p in kube.list(Pod, namespace=namespace, labels={JOBSET_NAME: "same"})
                if not p.metadata.deletionTimestamp]

    wait_for("the TrainJob's pods stopped", lambda: not live())
    assert torchjob(kubeconfig, "resume", "trainjob/same", "-n", namespace).returncode == 0
    stored = wait_trainjob(kube, "same", namespace, suspended_is("False"))
    assert stored["spec"]["suspend"] is False
    wait_for("its pods made again", lambda: len(live()) == 2)

    assert torchjob(kubeconfig, "delete", "trainjob/same", "-n", namespace).returncode == 0
    with pytest.raises(ApiError):
        wait_for("the TrainJob gone", lambda: kube.get(TrainJobRes, "same", namespace=namespace) and None, 30)
    assert "Kind:" not in torchjob(kubeconfig, "describe", "same", "-n", namespace).stdout  # the TorchJob, alone now


def test_a_kind_whose_crd_is_not_installed_lists_as_none(kube: Client, kubeconfig: str, namespace: str,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The API server's 404 for a type it does not know (no CRD) is no job of that kind, not an error."""
    from torchjob.kube.clientside import served_jobs
    from torchjob.kube.clientside.kube_runtime import KubeRuntime

    absent = create_namespaced_resource("absent.torchjob.dev", "v1", "Absent", "absents")
    monkeypatch.setattr(served_jobs, "kinds", lambda: [("Absent", absent)])
    create(kube, job_data("only", workers=0), namespace)
    rt = KubeRuntime(kubeconfig, None, namespace)
    assert [(v.name, v.kind) for v in rt.list()] == [("only", None)]
    assert served_jobs.find(rt.kube, "only", namespace) is None
    assert served_jobs.list_all(rt.kube, namespace) == []


def test_the_dashboard_tags_a_trainjob_with_its_kind(kube: Client, kubeconfig: str, namespace: str,
                                                     served_api: Client, tmp_path: Path, page: Page,
                                                     dashboard: Any) -> None:
    create(kube, job_data("tj", workers=0), namespace)
    kube.create(codecs.from_dict(trainjob_on_kwok("train", namespace)), namespace=namespace)
    d: Dashboard = dashboard(tmp_path, "--kube", "-n", namespace, env={"KUBECONFIG": kubeconfig})
    p = page.page
    p.goto(d.url)
    row = p.locator('tr[data-job="train"]')
    row.wait_for(timeout=30_000)
    assert row.locator('[data-testid="kind"]').inner_text() == "TrainJob"
    p.locator('tr[data-job="tj"]').wait_for()
    assert p.locator('tr[data-job="tj"] [data-testid="kind"]').count() == 0
    p.goto(d.job_url("train", namespace))
    p.locator("#job-kind").wait_for()
    assert p.locator("#job-kind").inner_text() == "TrainJob"
    assert page.dialogs == [] and page.errors == []
