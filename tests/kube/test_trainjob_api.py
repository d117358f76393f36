"""torchjob serving Kubeflow Trainer v2's `trainer.kubeflow.org/v1alpha1` TrainJob: the Kubeflow SDK
(`kubeflow` from PyPI, its TrainerClient, code unchanged) and kubectl against a real API server with
the CRDs `torchjob install --trainer-api` makes, the operator as a process; the test plays the
kubelet (real pods run in tests/e2e/test_trainjob_real.py)."""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from lightkube import Client, codecs
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Event, Pod
from lightkube.types import PatchType

from tests.kube.conftest import Operator, set_pod, wait_established
from tests.kube.test_kubeflow_api import kubectl
from torchjob.kube.machinery.client import ClusterTrainingRuntimeRes, TrainJobRes
from torchjob.kube.objects.install import apply
from torchjob.kube.objects.labels import LABEL_JOB
from torchjob.kube.objects.labels.trainjob import COMPLETION_INDEX, JOBSET_NAME, REPLICATED_JOB
from torchjob.kube.served import trainer_objects

trainer = pytest.importorskip("kubeflow.trainer")


@pytest.fixture
def trainer_api(kube: Client, kubeconfig: str) -> Client:
    """What `torchjob install --trainer-api` applies, less the operator's own RBAC (the operator runs
    here as a process with the test's credentials)."""
    return apply_trainer_api(kube, kubeconfig)


def apply_trainer_api(kube: Client, kubeconfig: str, more_crds: Sequence[dict[str, Any]] = ()) -> Client:
    """Trainer's CRDs (and `more_crds`) established, then its runtime, namespace and ConfigMap."""
    objs = trainer_objects.trainer_api_objects("torchjob-system", runtime_image="busybox:1.36")
    crds = [o for o in objs if o["kind"] == "CustomResourceDefinition"] + list(more_crds)
    apply(crds, kubeconfig)
    for c in crds:
        wait_established(kube, c["metadata"]["name"])
    apply([o for o in objs if o["kind"] in ("ClusterTrainingRuntime", "Namespace", "ConfigMap")], kubeconfig)
    return kube


@pytest.fixture
def trainer_operator(trainer_api: Client, kubeconfig: str, tmp_path: Path) -> Iterator[Operator]:
    op = Operator(kubeconfig, tmp_path / "operator.log", ("--no-leader-elect",))  # served: the CRD is torchjob's
    op.start()
    yield op
    op.stop()
    print(op.log.read_text()[-4000:])


def sdk(kubeconfig: str, namespace: str) -> Any:
    from kubeflow.common.types import KubernetesBackendConfig

    return trainer.TrainerClient(KubernetesBackendConfig(namespace=namespace, config_file=kubeconfig))


def node_pods(kube: Client, name: str, namespace: str, n: int, timeout: float = 30) -> dict[int, Any]:
    """The job's pods by node rank, as the SDK finds them (JobSet's labels)."""
    end = time.monotonic() + timeout
    pods: list[Any] = []
    while time.monotonic() < end:
        pods = [p for p in kube.list(Pod, namespace=namespace, labels={JOBSET_NAME: name, REPLICATED_JOB: "node"})
                if not p.metadata.deletionTimestamp]
        if len(pods) == n:
            return {int(p.metadata.labels[COMPLETION_INDEX]): p for p in pods}
        time.sleep(0.1)
    raise AssertionError(f"expected {n} pods of {name}, got {len(pods)}")


def trainjob(kube: Client, name: str, namespace: str) -> dict[str, Any]:
    return dict(kube.get(TrainJobRes, name, namespace=namespace).to_dict())


def wait_trainjob(kube: Client, name: str, namespace: str, pred: Any, timeout: float = 60) -> dict[str, Any]:
    end = time.monotonic() + timeout
    last: dict[str, Any] = {}
    while time.monotonic() < end:
        last = trainjob(kube, name, namespace)
        if pred(last.get("status") or {}):
            return last
        time.sleep(0.1)
    raise AssertionError(f"timed out on {namespace}/{name}: {last.get('status')}")


def condition(status: dict[str, Any], type_: str) -> dict[str, Any] | None:
    return next((c for c in status.get("conditions") or [] if c["type"] == type_), None)


def events_of(kube: Client, name: str, namespace: str) -> list[Any]:
    return [e for e in kube.list(Event, namespace=namespace)
            if e.involvedObject.kind == "TrainJob" and e.involvedObject.name == name]


def train(x: int) -> None:  # the function the SDK ships to the nodes (not run here: the test plays the kubelet)
    print("trained", x)


def test_the_sdk_lists_the_runtime_trains_on_two_nodes_follows_it_to_complete_and_deletes_it(
        kube: Client, kubeconfig: str, namespace: str, trainer_operator: Operator) -> None:
    from kubeflow.trainer import CustomTrainer

    client = sdk(kubeconfig, namespace)
    runtimes = {r.name: r for r in client.list_runtimes()}
    assert "torch-distributed" in runtimes and runtimes["torch-distributed"].trainer.framework == "torch"
    assert runtimes["torchtune-llama3.2-1b"].trainer.framework == "torchtune"  # installed beside it
    name = client.train(runtime="torch-distributed", trainer=CustomTrainer(
        func=train, func_args={"x": 3}, image="busybox:1.36", num_nodes=2, resources_per_node={"cpu": 1}))
    pods = node_pods(kube, name, namespace, 2)
    for rank, p in pods.items():
        c = p.spec.containers[0]
        env = {e.name: e.value for e in c.env if e.value is not None}
        assert c.name == "node" and c.image == "busybox:1.36"
        assert env["PET_NNODES"] == "2" and env["PET_NODE_RANK"] == str(rank) and env["PET_NPROC_PER_NODE"] == "1"
        assert env["PET_MASTER_PORT"] == "29500"
        # node 0's name, through the job's headless Service (pod hostname.subdomain)
        host, subdomain = env["PET_MASTER_ADDR"].split(".")
        assert (host, subdomain) == (pods[0].spec.hostname, pods[0].spec.subdomain) == (pods[0].metadata.name, name)
        assert [(o.kind, o.name, o.blockOwnerDeletion) for o in p.metadata.ownerReferences] == [
            ("TrainJob", name, True)]
    assert client.get_job(name).status == "Created"  # no pod runs yet
    for p in pods.values():
        set_pod(kube, p, "Running")
    job = client.wait_for_job_status(name, status={"Running"}, timeout=60, polling_interval=1)
    assert sorted((s.name, s.status, s.device_count) for s in job.steps) == [
        ("node-0", "Running", "1"), ("node-1", "Running", "1")]
    # The SDK says Running from the pods it reads, so the operator's status write for the second pod's
    # start may still be on its way: wait for it (bounded) rather than read it once.
    running = {"name": "node", "ready": 1, "succeeded": 0, "failed": 0, "active": 1, "suspended": 0}
    stored = wait_trainjob(kube, name, namespace, lambda s: s.get("jobsStatus") == [running])["status"]
    assert stored["conditions"] == []  # no condition while running: the SDK says Running only then
    for p in pods.values():
        set_pod(kube, p, "Succeeded", 0)
    job = client.wait_for_job_status(name, status={"Complete"}, timeout=60, polling_interval=1)
    assert {s.name: s.status for s in job.steps} == {"node-0": "Succeeded", "node-1": "Succeeded"}
    assert job.num_nodes == 2 and job.runtime.name == "torch-distributed"
    stored = trainjob(kube, name, namespace)["status"]
    (complete,) = stored["conditions"]
    assert complete["type"] == "Complete" and complete["status"] == "True" and complete["reason"]
    assert complete["message"] and complete["lastTransitionTime"]
    assert stored["jobsStatus"][0] == {"name": "node", "ready": 0, "succeeded": 1, "failed": 0, "active": 0,
                                       "suspended": 0}
    events = client.get_job_events(name)
    assert any(e.involved_object_kind == "TrainJob" and e.involved_object_name == name for e in events), events
    assert name in [j.name for j in client.list_jobs()]
    client.delete_job(name)
    with pytest.raises(ApiError):
        trainjob(kube, name, namespace)


def test_a_failed_node_fails_the_trainjob_and_the_sdk_raises(
        kube: Client, kubeconfig: str, namespace: str, trainer_operator: Operator) -> None:
    from kubeflow.trainer import CustomTrainer

    # a namespaced runtime whose Job retries no failure (torch-distributed's retries six, as a Job's default)
    rt = trainer_objects.default_runtime("busybox:1.36")
    rt["kind"], rt["metadata"] = "TrainingRuntime", {"name": "torch-once", "namespace": namespace,
                                                     "labels": {"trainer.kubeflow.org/framework": "torch"}}
    rt["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["backoffLimit"] = 0
    apply([rt], kubeconfig)
    client = sdk(kubeconfig, namespace)
    name = client.train(runtime="torch-once", trainer=CustomTrainer(func=train, func_args={"x": 1}, num_nodes=2))
    pods = node_pods(kube, name, namespace, 2)
    for p in pods.values():
        set_pod(kube, p, "Running")
    client.wait_for_job_status(name, status={"Running"}, timeout=60, polling_interval=1)
    set_pod(kube, pods[1], "Failed", 3)
    with pytest.raises(RuntimeError):
        client.wait_for_job_status(name, status={"Complete"}, timeout=60, polling_interval=1)
    status = trainjob(kube, name, namespace)["status"]
    failed = condition(status, "Failed")
    assert failed is not None and failed["status"] == "True" and failed["lastTransitionTime"]
    assert "worker-0" in failed["message"] and "3" in failed["message"], failed  # the root cause: node 1
    assert status["jobsStatus"][0]["failed"] == 1


def _trainjob(name: str, namespace: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"runtimeRef": {"name": "torch-distributed"},
                     "trainer": {"numNodes": 2, "command": ["torchrun", "train.py"]}, **spec}}


def _create(kube: Client, data: dict[str, Any], namespace: str) -> None:
    kube.create(codecs.from_dict(copy.deepcopy(data)), namespace=namespace)


@pytest.mark.parametrize(("case", "says"), [
    ("missing-runtime", "ClusterTrainingRuntime 'no-such-runtime' does not exist"),
    ("no-node-container", "no container named 'node'"),
    ("reserved-env", "PET_NNODES"),
])
def test_bad_input_is_a_failed_condition_and_an_event_naming_the_fix_and_nothing_is_made(
        kube: Client, kubeconfig: str, namespace: str, trainer_operator: Operator, case: str, says: str) -> None:
    data = _trainjob(case, namespace)
    if case == "missing-runtime":
        data["spec"]["runtimeRef"]["name"] = "no-such-runtime"
    elif case == "no-node-container":
        rt = trainer_objects.default_runtime("busybox:1.36")
        rt["metadata"]["name"] = f"unnamed-{namespace}"
        rt["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
            "containers"][0]["name"] = "trainer"
        apply([rt], kubeconfig)
        data["spec"]["runtimeRef"]["name"] = rt["metadata"]["name"]
    else:
        data["spec"]["trainer"]["env"] = [{"name": "PET_NNODES", "value": "4"}]
    _create(kube, data, namespace)
    status = wait_trainjob(kube, case, namespace, lambda s: condition(s, "Failed") is not None)["status"]
    failed = condition(status, "Failed")
    assert failed is not None and says in failed["message"] and "fix" in failed["message"].lower(), failed
    end = time.monotonic() + 30  # events are recorded after the status is written
    while not any(says in (e.message or "") for e in events_of(kube, case, namespace)):
        assert time.monotonic() < end, [e.message for e in events_of(kube, case, namespace)]
        time.sleep(0.2)
    assert list(kube.list(Pod, namespace=namespace, labels={LABEL_JOB: case})) == []  # nothing made
    # the operator is unharmed: a good TrainJob beside them still gets its pods
    _create(kube, _trainjob("good", namespace), namespace)
    node_pods(kube, "good", namespace, 2)


def test_kubectl_get_suspend_deadline_and_another_manager(
        kube: Client, kubeconfig: str, namespace: str, trainer_operator: Operator, tmp_path: Path) -> None:
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(_trainjob("suspended", namespace, suspend=True)))
    assert "trainjob.trainer.kubeflow.org/suspended created" in kubectl(kubeconfig, "apply", "-f",
                                                                        str(tmp_path / "job.yaml"))
    status = wait_trainjob(kube, "suspended", namespace, lambda s: condition(s, "Suspended") is not None)["status"]
    assert condition(status, "Suspended") == {**condition(status, "Suspended"),  # type: ignore[dict-item]
                                              "status": "True", "reason": "Suspended"}
    assert status["jobsStatus"][0]["suspended"] == 1
    lines = kubectl(kubeconfig, "get", "trainjobs", "-n", namespace).splitlines()
    assert lines[0].split() == ["NAME", "STATE", "AGE"] and lines[1].split()[:2] == ["suspended", "Suspended"]
    assert list(kube.list(Pod, namespace=namespace)) == []
    kube.patch(TrainJobRes, "suspended", {"spec": {"suspend": False}}, namespace=namespace,
               patch_type=PatchType.MERGE)
    node_pods(kube, "suspended", namespace, 2)
    resumed = wait_trainjob(kube, "suspended", namespace,
                            lambda s: (condition(s, "Suspended") or {}).get("status") == "False")["status"]
    assert condition(resumed, "Suspended")["reason"] == "Resumed"  # type: ignore[index]
    # activeDeadlineSeconds: Failed, reason DeadlineExceeded, the pods deleted
    _create(kube, _trainjob("deadline", namespace, activeDeadlineSeconds=2), namespace)
    for p in node_pods(kube, "deadline", namespace, 2).values():
        set_pod(kube, p, "Running")
    status = wait_trainjob(kube, "deadline", namespace, lambda s: condition(s, "Failed") is not None)["status"]
    assert condition(status, "Failed")["reason"] == "DeadlineExceeded"  # type: ignore[index]
    node_pods(kube, "deadline", namespace, 0)
    # another manager's (MultiKueue's): left alone, no pod, no status
    _create(kube, _trainjob("elsewhere", namespace, managedBy=trainer_objects.MANAGED_BY_MULTIKUEUE), namespace)
    time.sleep(2)
    assert not trainjob(kube, "elsewhere", namespace).get("status")
    assert not [p for p in kube.list(Pod, namespace=namespace, labels={JOBSET_NAME: "elsewhere"})]


def test_the_crds_refuse_what_trainers_refuse(kube: Client, trainer_api: Client, namespace: str) -> None:
    for spec, says in ((
            {"trainer": {"numNodes": 0}}, "numNodes"), ({"managedBy": "someone"}, "managedBy"),
            ({"activeDeadlineSeconds": 0}, "activeDeadlineSeconds")):
        data = _trainjob("refused", namespace, **spec)
        data["spec"]["trainer"] = {**data["spec"]["trainer"], **spec.get("trainer", {})}
        with pytest.raises(ApiError) as err:
            _create(kube, data, namespace)
        assert err.value.status.code == 422 and says in str(err.value.status.message)
    # Trainer's bounds on what the SDK writes: a storageUri is a URI (or empty), numProcPerNode at least 1
    for spec, says in (({"initializer": {"dataset": {"storageUri": "tatsu-lab/alpaca"}}}, "valid URI"),
                       ({"trainer": {"numProcPerNode": 0}}, "numProcPerNode must be greater than or equal to 1")):
        data = _trainjob("refused", namespace, **spec)
        data["spec"]["trainer"] = {**_trainjob("x", namespace)["spec"]["trainer"], **spec.get("trainer", {})}
        with pytest.raises(ApiError) as err:
            _create(kube, data, namespace)
        assert err.value.status.code == 422 and says in str(err.value.status.message), err.value.status.message
    with pytest.raises(ApiError) as err:
        _create(kube, _trainjob("Upper", namespace), namespace)
    assert "RFC 1035" in str(err.value.status.message)
    # made, its trainer and initializer are immutable, as Trainer's
    _create(kube, _trainjob("kept", namespace, initializer={"dataset": {"storageUri": "hf://tj/tiny-data"}}),
            namespace)
    for change, says in (({"trainer": {"numNodes": 3}}, "trainer is immutable"),
                         ({"initializer": {"dataset": {"storageUri": "hf://tj/other"}}}, "initializer is immutable")):
        with pytest.raises(ApiError) as err:
            kube.patch(TrainJobRes, "kept", {"spec": change}, namespace=namespace, patch_type=PatchType.MERGE)
        assert err.value.status.code == 422 and says in str(err.value.status.message), err.value.status.message
    rt = kube.get(ClusterTrainingRuntimeRes, "torch-distributed")
    assert rt.metadata.labels["trainer.kubeflow.org/framework"] == "torch"


def test_the_docs_trainjob_runs_as_two_nodes(kube: Client, kubeconfig: str, namespace: str,
                                             trainer_operator: Operator, tmp_path: Path) -> None:
    from tests.docs.blocks import tested

    (text,) = tested("tutorials/coming-from/trainer-v2.md", "test_the_docs_trainjob_runs_as_two_nodes")
    (tmp_path / "trainjob.yaml").write_text(text)
    assert "trainjob.trainer.kubeflow.org/pytorch-ddp created" in kubectl(
        kubeconfig, "apply", "-n", namespace, "-f", str(tmp_path / "trainjob.yaml"))
    pods = node_pods(kube, "pytorch-ddp", namespace, 2)
    env = {e.name: e.value for e in pods[1].spec.containers[0].env if e.value is not None}
    assert env["PET_MASTER_ADDR"] == "pytorch-ddp-master-0.pytorch-ddp" and env["PET_NPROC_PER_NODE"] == "2"
    for p in pods.values():
        set_pod(kube, p, "Running")
    for p in pods.values():
        set_pod(kube, p, "Succeeded", 0)
    wait_trainjob(kube, "pytorch-ddp", namespace, lambda s: condition(s, "Complete") is not None)
    assert kubectl(kubeconfig, "get", "trainjobs", "-n", namespace).splitlines()[1].split()[1] == "Complete"


def test_the_sdks_progress_report_lands_in_trainer_status(kube: Client, kubeconfig: str, namespace: str,
                                                          trainer_operator: Operator, tmp_path: Path) -> None:
    import json

    from tests.kube.reporting import SERVICE_ACCOUNT, ca_file, make_service_account, pod_token, post
    from torchjob.progress.server import TRAINJOBS, audience, status_path

    make_service_account(kube, namespace)
    data = _trainjob("reporting", namespace)
    data["spec"]["runtimePatches"] = [{"manager": "trainer.kubeflow.org/kubeflow-sdk", "trainingRuntimeSpec": {
        "template": {"spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": {
            "serviceAccountName": SERVICE_ACCOUNT}}}}}]}}}}]
    _create(kube, data, namespace)
    pods = node_pods(kube, "reporting", namespace, 2)
    endpoint = trainer_operator.progress_url + status_path(namespace, "reporting", TRAINJOBS)
    assert endpoint.endswith(f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs/reporting/status")
    env = {e.name: e.value for e in pods[0].spec.containers[0].env}
    assert env["KUBEFLOW_TRAINER_SERVER_URL"] == endpoint
    for p in pods.values():
        set_pod(kube, p, "Running")
    ca = ca_file(kube, namespace, tmp_path)
    token = pod_token(kube, pods[0], "reporting", aud=audience(namespace, "reporting", TRAINJOBS))
    assert post(endpoint, b"{}", pod_token(kube, pods[0], "reporting", aud=audience(namespace, "reporting")),
                ca)[0] == 403  # a TorchJob's audience
    # what the SDK's update_trainjob_status() posts
    body = {"trainerStatus": {"progressPercentage": 40, "estimatedRemainingSeconds": 60,
                              "metrics": [{"name": "loss", "value": "0.5"}], "lastUpdatedTime": "2026-11-27T20:00:00Z"}}
    code, answer = post(endpoint, json.dumps(body).encode(), token, ca)
    assert code == 200, answer
    status = wait_trainjob(kube, "reporting", namespace, lambda s: "trainerStatus" in s)["status"]
    assert status["trainerStatus"]["progressPercentage"] == 40
    assert status["trainerStatus"]["metrics"] == [{"name": "loss", "value": "0.5"}]
    assert status["trainerStatus"]["lastUpdatedTime"] and status["conditions"] == []


def test_torchjob_install_trainer_api_applies_the_runtime_once_its_crd_is_served(kube: Client,
                                                                                 kubeconfig: str) -> None:
    import subprocess
    import sys

    from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
    from lightkube.resources.core_v1 import ConfigMap

    for crd in trainer_objects.crds():  # from scratch: the runtime's kind is not served yet
        try:
            kube.delete(CustomResourceDefinition, crd["metadata"]["name"])
        except ApiError:
            pass
    end = time.monotonic() + 60
    while time.monotonic() < end and any(
            c.metadata.name.endswith(".trainer.kubeflow.org") for c in kube.list(CustomResourceDefinition)):
        time.sleep(0.2)
    out = subprocess.run([sys.executable, "-m", "torchjob", "install", "--trainer-api", "--no-wait",
                          "--trainer-runtime-image", "img:9", "--namespace", "tj-install-test",
                          "--kubeconfig", kubeconfig], capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    assert "applied ClusterTrainingRuntime/torch-distributed" in out.stdout
    rt = kube.get(ClusterTrainingRuntimeRes, "torch-distributed").to_dict()
    node = rt["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert node["containers"][0]["image"] == "img:9"
    public = kube.get(ConfigMap, trainer_objects.PUBLIC_CONFIGMAP, namespace=trainer_objects.SYSTEM_NAMESPACE)
    assert public.data == {"kubeflow_trainer_version": trainer_objects.TRAINER_VERSION}
    # Trainer's torchtune runtimes, as its manifests make them: both initializers (Trainer's images, tagged
    # with the release served), then the node, all mounting the claim of the workspace template at /workspace
    tag = trainer_objects.TRAINER_VERSION
    for name, model in (("torchtune-llama3.2-1b", "hf://meta-llama/Llama-3.2-1B-Instruct"),
                        ("torchtune-llama3.2-3b", "hf://meta-llama/Llama-3.2-3B-Instruct"),
                        ("torchtune-qwen2.5-1.5b", "hf://Qwen/Qwen2.5-1.5B-Instruct")):
        assert f"applied ClusterTrainingRuntime/{name}" in out.stdout
        rt = kube.get(ClusterTrainingRuntimeRes, name).to_dict()
        assert rt["metadata"]["labels"]["trainer.kubeflow.org/framework"] == "torchtune"
        spec = rt["spec"]["template"]["spec"]
        assert [t["metadata"]["name"] for p in spec["volumeClaimPolicies"] for t in p["templates"]] == ["initializer"]
        jobs = {j["name"]: j for j in spec["replicatedJobs"]}
        assert list(jobs) == ["dataset-initializer", "model-initializer", "node"]
        assert jobs["node"]["dependsOn"] == [{"name": "dataset-initializer", "status": "Complete"},
                                             {"name": "model-initializer", "status": "Complete"}]
        pods = {n: j["template"]["spec"]["template"]["spec"]["containers"][0] for n, j in jobs.items()}
        assert [(c["image"], c.get("env")) for c in pods.values()][:2] == [
            (f"ghcr.io/kubeflow/trainer/dataset-initializer:{tag}", [{"name": "STORAGE_URI",
                                                                      "value": "hf://tatsu-lab/alpaca"}]),
            (f"ghcr.io/kubeflow/trainer/model-initializer:{tag}", [{"name": "STORAGE_URI", "value": model}])]
        assert pods["node"]["image"] == f"ghcr.io/kubeflow/trainer/torchtune-trainer:{tag}"
        assert all(c["volumeMounts"] == [{"mountPath": "/workspace", "name": "initializer"}] for c in pods.values())


def test_a_trainjob_under_a_kueue_queue_waits_for_admission_and_runs_where_kueue_placed_it(
        kube: Client, kubeconfig: str, namespace: str, scheduling_crds: list[str],
        trainer_operator: Operator) -> None:
    from tests.kube.conftest import kueue_condition, kueue_status
    from torchjob.kube.machinery.client import KueueResourceFlavor, KueueWorkload
    from torchjob.kube.objects.admission import kueue
    from torchjob.kube.served.trainjob import KUEUE_MANAGER

    flavor = f"{namespace}-spot"
    kube.create(KueueResourceFlavor.from_dict({
        "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ResourceFlavor", "metadata": {"name": flavor},
        "spec": {"nodeLabels": {"example.com/pool": "spot"}}}))
    data = _trainjob("queued", namespace)
    data["metadata"]["labels"] = {kueue.QUEUE_LABEL: "team-a"}
    sdk_patch = {"manager": "trainer.kubeflow.org/kubeflow-sdk", "trainingRuntimeSpec": {"template": {"spec": {
        "replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"metadata": {
            "labels": {"team": "a"}}}}}}]}}}}
    data["spec"]["runtimePatches"] = [sdk_patch]
    _create(kube, data, namespace)
    # held: spec.suspend set, the Suspended condition, a Workload for the whole job, no pod
    wait_trainjob(kube, "queued", namespace, lambda s: (condition(s, "Suspended") or {}).get("status") == "True")
    assert trainjob(kube, "queued", namespace)["spec"]["suspend"] is True
    end = time.monotonic() + 30
    while True:
        try:
            wl = kube.get(KueueWorkload, "torchjob-queued", namespace=namespace)
            break
        except ApiError:
            assert time.monotonic() < end, "no Workload"
            time.sleep(0.2)
    assert wl["spec"]["queueName"] == "team-a" and wl.metadata.ownerReferences[0].kind == "TrainJob"
    assert list(kube.list(Pod, namespace=namespace)) == []
    # admitted: resumed, Kueue's placement a runtimePatches entry of its own, the SDK's kept
    kueue_status(kube, "torchjob-queued", namespace, {
        "admission": {"clusterQueue": "cq", "podSetAssignments": [
            {"name": name, "count": 1, "flavors": {"cpu": flavor}} for name in ("master", "worker")]},
        "conditions": [kueue_condition("QuotaReserved", "True", "QuotaReserved"),
                       kueue_condition("Admitted", "True", "Admitted")]})
    pods = node_pods(kube, "queued", namespace, 2)
    assert all(p.spec.nodeSelector["example.com/pool"] == "spot" and p.metadata.labels["team"] == "a"
               for p in pods.values())
    spec = trainjob(kube, "queued", namespace)["spec"]
    assert spec["suspend"] is False
    assert [p["manager"] for p in spec["runtimePatches"]] == ["trainer.kubeflow.org/kubeflow-sdk", KUEUE_MANAGER]
    status = wait_trainjob(kube, "queued", namespace,
                           lambda s: (condition(s, "Suspended") or {}).get("status") == "False")["status"]
    assert condition(status, "Suspended")["reason"] == "Resumed"  # type: ignore[index]
