"""Pure tests of gang scheduling objects (Volcano and scheduler-plugins PodGroups, Kueue) and of
the TensorBoard a T9k job asks for."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.jobs import job_data
from torchjob.api.load import job_from_data
from torchjob.core.shape.topology import ReplicaId
from torchjob.dialects.load import load
from torchjob.kube.objects.admission import gang
from torchjob.kube.objects.labels import LABEL_JOB
from torchjob.kube.objects.workload import pods as pod_objects
from torchjob.kube.objects.workload import tensorboard

SEEDS = Path(__file__).resolve().parents[1] / "dialects" / "seeds"
OWNER = {"apiVersion": "torchjob.dev/v1", "kind": "TorchJob", "name": "demo", "uid": "u"}


def with_resources(data: dict[str, Any], rtype: str, resources: dict[str, Any]) -> dict[str, Any]:
    data["spec"]["pytorchReplicaSpecs"][rtype]["template"]["spec"]["containers"][0]["resources"] = resources
    return data


def test_volcano_seed_gets_a_volcano_podgroup_with_its_min_available() -> None:
    job = load(SEEDS / "000-volcano.yaml").job
    pg = gang.podgroup(job, OWNER)
    assert pg is not None
    assert (pg["apiVersion"], pg["kind"], pg["metadata"]["name"]) == ("scheduling.volcano.sh/v1beta1", "PodGroup",
                                                                        "pytorch-job")
    assert pg["spec"] == {"minMember": 1, "queue": "default"}  # the seed's minAvailable; no requests to add up
    assert pg["metadata"]["ownerReferences"] == [OWNER]
    pod = pod_objects.pod(job, ReplicaId("Worker", 1), 0)
    assert pod["spec"]["schedulerName"] == "volcano"
    assert pod["metadata"]["annotations"][gang.VOLCANO_GROUP_ANNOTATION] == "pytorch-job"
    assert pod["metadata"]["annotations"][gang.VOLCANO_TASK_ANNOTATION] == "worker"


def test_only_volcano_podgroups_hold_the_pods_until_admitted() -> None:
    volcano = load(SEEDS / "000-volcano.yaml").job
    assert gang.awaits_admission(volcano)
    policy = {"schedulingPolicy": {"schedulerName": "coscheduler"}}
    plugins = job_from_data(job_data("sp", workers=1, run_policy=policy))
    assert not gang.awaits_admission(plugins) and not gang.awaits_admission(job_from_data(job_data("d", workers=1)))
    assert not gang.admitted({"spec": {}})  # the scheduler has not looked at it yet
    assert not gang.admitted({"status": {"phase": "Pending"}})
    assert all(gang.admitted({"status": {"phase": p}}) for p in ("Inqueue", "Running", "Unknown"))
    assert "queue 'default'" in gang.admission_message(volcano)


def test_min_resources_add_up_the_first_min_member_pods_master_first() -> None:
    data = job_data("demo", workers=3, run_policy={"schedulingPolicy": {"schedulerName": "volcano", "queue": "gpu",
                                                                         "minAvailable": 3, "priorityClass": "high"}})
    with_resources(data, "Master", {"requests": {"cpu": "500m", "memory": "1Gi"}})
    with_resources(data, "Worker", {"limits": {"cpu": 2, "nvidia.com/gpu": 1}})  # no requests: limits count
    pg = gang.podgroup(job_from_data(data), OWNER)
    assert pg is not None
    assert pg["spec"] == {"minMember": 3, "queue": "gpu", "priorityClassName": "high",
                          "minResources": {"cpu": "4.5", "memory": "1073741824", "nvidia.com/gpu": "2"}}


def test_explicit_min_resources_win() -> None:
    data = job_data("demo", workers=1, run_policy={"schedulingPolicy": {"schedulerName": "volcano",
                                                                         "minResources": {"cpu": "8"}}})
    with_resources(data, "Worker", {"requests": {"cpu": "1"}})
    pg = gang.podgroup(job_from_data(data), OWNER)
    assert pg is not None and pg["spec"]["minResources"] == {"cpu": "8"} and pg["spec"]["minMember"] == 2


def test_another_scheduler_named_in_the_policy_gets_a_scheduler_plugins_podgroup() -> None:
    job = job_from_data(job_data("demo", workers=2, run_policy={"schedulingPolicy": {
        "schedulerName": "scheduler-plugins-scheduler", "scheduleTimeoutSeconds": 120}}))
    pg = gang.podgroup(job, OWNER)
    assert pg is not None and pg["apiVersion"] == "scheduling.x-k8s.io/v1alpha1"
    assert pg["spec"] == {"minMember": 3, "scheduleTimeoutSeconds": 120}
    pod = pod_objects.pod(job, ReplicaId("Master", 0), 0)
    assert pod["metadata"]["labels"][gang.PLUGINS_POD_GROUP_LABEL] == "demo"
    assert pod["spec"]["schedulerName"] == "scheduler-plugins-scheduler"
    assert gang.VOLCANO_GROUP_ANNOTATION not in pod["metadata"]["annotations"]


def test_volcano_in_every_pod_template_is_enough() -> None:
    data = job_data("demo", workers=1)
    for rspec in data["spec"]["pytorchReplicaSpecs"].values():
        rspec["template"]["spec"]["schedulerName"] = "volcano"
    assert gang.podgroup_kind(job_from_data(data)) is gang.VOLCANO_PG


@pytest.mark.parametrize("policy", [
    None,
    {"schedulingPolicy": {"queue": "q"}},  # a queue but no scheduler: nothing to gang with
    {"schedulingPolicy": {"schedulerName": "t9k-scheduler", "queue": "q"}},
    {"schedulingPolicy": {"schedulerName": "default-scheduler"}},
])
def test_no_podgroup_without_a_gang_scheduler(policy: dict[str, Any] | None) -> None:
    job = job_from_data(job_data("demo", workers=1, run_policy=policy))
    assert gang.podgroup(job, OWNER) is None
    pod = pod_objects.pod(job, ReplicaId("Worker", 0), 0)
    assert gang.PLUGINS_POD_GROUP_LABEL not in pod["metadata"]["labels"]
    assert gang.VOLCANO_GROUP_ANNOTATION not in pod["metadata"]["annotations"]


def test_a_scheduler_only_in_the_templates_is_not_a_gang() -> None:
    data = job_data("demo", workers=1)
    for rspec in data["spec"]["pytorchReplicaSpecs"].values():
        rspec["template"]["spec"]["schedulerName"] = "my-scheduler"
    job = job_from_data(data)
    assert gang.podgroup(job, OWNER) is None
    assert pod_objects.pod(job, ReplicaId("Master", 0), 0)["spec"]["schedulerName"] == "my-scheduler"


def test_t9k_tensorboard_becomes_a_deployment_and_service_on_the_claim() -> None:
    data = job_data("demo", workers=1)
    data["spec"]["tensorboard"] = {"logDirs": ["t9k://pvc/runs/exp1", "t9k://pvc/runs/exp2", "s3://bucket/logs"]}
    job = job_from_data(data)
    service, deployment = tensorboard.objects(job, OWNER)
    assert deployment["metadata"]["name"] == service["metadata"]["name"] == "demo-tensorboard"
    pod = deployment["spec"]["template"]["spec"]
    c = pod["containers"][0]
    assert c["image"] == tensorboard.DEFAULT_IMAGE
    assert c["command"][:3] == ["tensorboard", "--logdir_spec",
                                "0:/tensorboard/runs/exp1,1:/tensorboard/runs/exp2,2:s3://bucket/logs"]
    # the claim, and /tmp for a read-only root (docs/operator/restricted.md)
    assert pod["volumes"] == [{"name": "logs-0", "persistentVolumeClaim": {"claimName": "runs", "readOnly": True}},
                              {"name": "tmp", "emptyDir": {"sizeLimit": "256Mi"}}]
    assert c["volumeMounts"] == [{"name": "logs-0", "mountPath": "/tensorboard/runs", "readOnly": True},
                                 {"name": "tmp", "mountPath": "/tmp"}]
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert LABEL_JOB not in deployment["spec"]["template"]["metadata"]["labels"]  # not counted as a replica
    assert tensorboard.objects(job_from_data(job_data("demo", workers=1)), OWNER) == []


def test_the_operators_gang_scheduler_applies_to_jobs_that_name_none() -> None:
    plain = job_from_data(job_data("demo", workers=1, run_policy={"schedulingPolicy": {"minAvailable": 2}}))
    defaulted = gang.with_default_scheduler(plain, "volcano")
    pg = gang.podgroup(defaulted, OWNER)
    assert pg is not None and pg["apiVersion"] == gang.VOLCANO_PG.api_version and pg["spec"]["minMember"] == 2
    unnamed = job_from_data(job_data("demo", workers=1))
    assert gang.podgroup_kind(gang.with_default_scheduler(unnamed, "coscheduler")) is gang.PLUGINS_PG
    own = job_from_data(job_data("demo", workers=1, run_policy={"schedulingPolicy": {"schedulerName": "x"}}))
    assert gang.scheduler_name(gang.with_default_scheduler(own, "volcano")) == "x"
    assert gang.with_default_scheduler(plain, None) is plain
