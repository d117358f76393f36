"""Pure tests of what the operator writes: pods, the headless Service, the CRD schema."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.jobs import job_data, make_job
from torchjob.api.load import job_from_data
from torchjob.core.round.reconcile import Phase
from torchjob.core.shape.topology import ReplicaId
from torchjob.kube.controller.round.observe import observe
from torchjob.kube.objects.install.crd import crd
from torchjob.kube.objects.labels import ANNOTATION_ATTEMPT, LABEL_INDEX, LABEL_JOB, LABEL_TYPE
from torchjob.kube.objects.workload import pods as pod_objects
from torchjob.kube.objects.workload.init_container import WAIT_CONTAINER


def env_of(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0]["env"]}


def test_pods_carry_names_labels_owner_and_the_env_contract() -> None:
    job = make_job("demo", workers=2, uid="u-1")
    pod = pod_objects.pod(job, ReplicaId("Worker", 1), attempt=3)
    meta, spec = pod["metadata"], pod["spec"]
    assert meta["name"] == "demo-worker-1"
    assert meta["labels"] == {LABEL_JOB: "demo", LABEL_TYPE: "worker", LABEL_INDEX: "1"}
    assert meta["annotations"][ANNOTATION_ATTEMPT] == "3"
    assert meta["ownerReferences"][0]["uid"] == "u-1" and meta["ownerReferences"][0]["controller"]
    assert spec["restartPolicy"] == "Never" and spec["hostname"] == "demo-worker-1" and spec["subdomain"] == "demo"
    env = env_of(pod)
    assert env["MASTER_ADDR"] == "demo-master-0.demo" and env["MASTER_PORT"] == "23456"
    assert env["RANK"] == "2" and env["WORLD_SIZE"] == "3"
    assert env["TORCHELASTIC_ERROR_FILE"] == pod_objects.TERMINATION_LOG
    assert [p["name"] for p in spec["containers"][0]["ports"]] == ["pytorchjob-port"]
    assert "initContainers" not in spec  # a restarted worker does not wait: torch's store client retries
    first = pod_objects.pod(job, ReplicaId("Worker", 1), attempt=0)["spec"]
    assert first["initContainers"][0]["name"] == WAIT_CONTAINER
    assert "nc -z" in first["initContainers"][0]["command"][2]
    data = job_data("demo", workers=2, uid="u-1")
    data["spec"]["waitForMaster"] = {"timeoutSeconds": 60}  # asked for: every attempt waits
    asked = job_from_data(data)
    made = pod_objects.pod(asked, ReplicaId("Worker", 1), attempt=3)
    assert made["spec"]["initContainers"][0]["name"] == WAIT_CONTAINER
    assert "initContainers" not in pod_objects.pod(job, ReplicaId("Master", 0), 0)["spec"]
    assert "initContainers" not in pod_objects.pod(job, ReplicaId("Worker", 0), 0, wait=False)["spec"]


def test_an_elastic_rendezvous_host_resolves_through_the_headless_service() -> None:
    # Found on the real node: the bare `<job>-worker-0` of Kubeflow is NXDOMAIN from worker-1,
    # since torchjob makes one headless Service `<job>`, not one per replica.
    job = make_job("el", master=False, workers=3, command=("torchrun", "train.py"),
                   elastic={"minReplicas": 1, "maxReplicas": 3, "rdzvBackend": "c10d"})
    pod = pod_objects.pod(job, ReplicaId("Worker", 2), 0)
    env = env_of(pod)
    assert env["PET_RDZV_ENDPOINT"] == "el-worker-0.el:23456"
    # A pod made again has the same hostname and pid as the one it replaces: the rendezvous tells
    # them apart by the pod's IP.
    local = [e for e in pod["spec"]["containers"][0]["env"] if e["name"] == "PET_LOCAL_ADDR"]
    assert local == [{"name": "PET_LOCAL_ADDR", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]
    assert "PET_LOCAL_ADDR" not in env_of(pod_objects.pod(make_job("plain", workers=1), ReplicaId("Worker", 0), 0))
    pinned = make_job("el", master=False, workers=2, command=("torchrun", "train.py"),
                      elastic={"rdzvHost": "etcd.infra", "rdzvPort": 2379, "rdzvBackend": "etcd"})
    assert env_of(pod_objects.pod(pinned, ReplicaId("Worker", 1), 0))["PET_RDZV_ENDPOINT"] == "etcd.infra:2379"


def test_user_env_is_upserted_never_duplicated() -> None:
    job = make_job("demo", workers=1)
    data = job.model_dump(mode="json", exclude_none=True)
    data["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "PYTHONUNBUFFERED", "value": "0"}, {"name": "NCCL_DEBUG", "value": "INFO"}]
    from torchjob.api.load import job_from_data

    pod = pod_objects.pod(job_from_data(data), ReplicaId("Worker", 0), 0)
    names = [e["name"] for e in pod["spec"]["containers"][0]["env"]]
    assert len(names) == len(set(names))
    assert names[:2] == ["PYTHONUNBUFFERED", "NCCL_DEBUG"] and env_of(pod)["PYTHONUNBUFFERED"] == "0"


def test_headless_service_publishes_not_ready_addresses() -> None:
    svc = pod_objects.service(make_job("demo", workers=1))
    assert svc["metadata"]["name"] == "demo"
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"]
    assert svc["spec"]["selector"] == {LABEL_JOB: "demo"}


def test_gang_scheduling_annotations() -> None:
    job = make_job("demo", workers=1, run_policy={"schedulingPolicy": {"schedulerName": "volcano", "queue": "q"}})
    pod = pod_objects.pod(job, ReplicaId("Worker", 0), 0)
    assert pod["spec"]["schedulerName"] == "volcano"
    assert pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == "demo"


def test_observe_reads_phase_exit_code_and_attempt() -> None:
    job = make_job("demo", workers=1)
    pod = pod_objects.pod(job, ReplicaId("Worker", 0), 2)
    pod["status"] = {"phase": "Failed", "containerStatuses": [
        {"name": "pytorch", "state": {"terminated": {"exitCode": 137, "finishedAt": "2026-01-01T00:00:00Z"}}}]}
    world = observe(job, [pod])
    obs = world.replicas["worker-0"]
    assert (obs.attempt, obs.phase, obs.exit_code) == (2, Phase.FAILED, 137)


def test_a_pod_on_a_node_that_stopped_reporting_stays_active() -> None:
    job = make_job("demo", workers=1)
    pod = pod_objects.pod(job, ReplicaId("Worker", 0), 0)
    pod["status"] = {"phase": "Unknown", "reason": "NodeLost"}
    assert observe(job, [pod]).replicas["worker-0"].phase is Phase.RUNNING


def test_pods_leave_a_lost_node_after_30_s_unless_the_template_says_otherwise() -> None:
    job = make_job("demo", workers=1)
    spec = pod_objects.pod(job, ReplicaId("Worker", 0), attempt=0)["spec"]
    assert spec["tolerations"] == [{"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}
                                   for key in pod_objects.NODE_LOST_TAINTS]
    own = {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
           "tolerationSeconds": 600}
    pool = {"key": "pool", "operator": "Equal", "value": "a", "effect": "NoSchedule"}
    assert pod_objects.node_lost_tolerations([pool, own]) == [
        pool, own, {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
                    "tolerationSeconds": 30}]
    everything = {"operator": "Exists"}  # tolerates every taint, for ever: the template's word
    assert pod_objects.node_lost_tolerations([everything]) == [everything]


def test_crd_is_structural_with_subresources_and_cel() -> None:
    c = crd()
    version = c["spec"]["versions"][0]
    schema = version["schema"]["openAPIV3Schema"]

    def walk(node: Any, path: str) -> None:
        if isinstance(node, dict):
            assert "$ref" not in node and "anyOf" not in node, path
            if "properties" in node:
                assert node.get("type") == "object", path
            for k, v in node.items():
                walk(v, f"{path}.{k}")
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{path}[{i}]")

    walk(schema, "schema")
    assert set(version["subresources"]) == {"status", "scale"}
    assert any("Master.replicas == 1" in r["rule"] for r in schema["x-kubernetes-validations"])
    assert c["spec"]["names"]["shortNames"] == ["tj"]


def test_render_kube_prints_what_the_operator_creates_without_a_cluster(tmp_path: Path) -> None:
    seed = Path(__file__).resolve().parents[1] / "dialects" / "seeds" / "000-volcano.yaml"
    out = subprocess.run([sys.executable, "-m", "torchjob", "render", "--kube", str(seed)], capture_output=True,
                         text=True, timeout=60, env={**os.environ, "KUBECONFIG": str(tmp_path / "none")})
    assert out.returncode == 0, out.stderr
    objs = list(yaml.safe_load_all(out.stdout))
    assert [(o["kind"], o["metadata"]["name"]) for o in objs] == [
        ("PodGroup", "pytorch-job"), ("Service", "pytorch-job"), ("Pod", "pytorch-job-master-0"),
        ("Pod", "pytorch-job-worker-0"), ("Pod", "pytorch-job-worker-1")]
