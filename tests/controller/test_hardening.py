"""What a job document, or a pod, may not make the operator do (issue 19): count a job's pods as
another job's (reserved labels and annotations), delete pods that are not its own, trust a
Workload or PodGroup it did not make. Pure builders and the recording fake API, in milliseconds;
the same on a real API server is in tests/kube."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from tests.controller.fakeapi import FakeApi
from tests.controller.test_sequencing import NS, condition, run, running, status_of, torchjob, until
from tests.dialects.cli import torchjob as cli
from torchjob.core.topology import ReplicaId
from torchjob.kube.objects import kubeflow_labels as kfl
from torchjob.kube.objects import pods as kr
from torchjob.kube.served.kinds import PYTORCHJOB, TORCHJOB

RESERVED_LABELS = {kfl.LABEL_OPERATOR: kfl.OPERATOR_NAME, kfl.LABEL_JOB_NAME: "victim",
                   kr.LABEL_JOB: "victim", kr.LABEL_TYPE: "master", "team": "a"}
RESERVED_ANNOTATIONS = {kr.ANNOTATION_SERVED_AS: "kubeflow.org/v1/PyTorchJob", kr.ANNOTATION_ATTEMPT: "7",
                        kr.ANNOTATION_WAIT: "false", "note": "b"}


def impostor(name: str = "demo") -> dict[str, Any]:
    """A TorchJob whose document says its pods are a PyTorchJob's (or another job's)."""
    data = torchjob(name)
    data["metadata"]["annotations"] = {kr.ANNOTATION_SERVED_AS: "kubeflow.org/v1/PyTorchJob"}
    for spec in data["spec"]["pytorchReplicaSpecs"].values():
        spec["template"]["metadata"] = {"labels": dict(RESERVED_LABELS), "annotations": dict(RESERVED_ANNOTATIONS)}
    return data


# --- finding 3: reserved labels and annotations -------------------------------------------------


def test_a_templates_reserved_labels_and_annotations_never_reach_its_pods() -> None:
    raw = impostor()
    raw["metadata"]["uid"] = "u-1"
    job = TORCHJOB.read(raw)
    pod = kr.pod(job, ReplicaId("Worker", 1), attempt=0)
    meta = pod["metadata"]
    assert meta["labels"] == {kr.LABEL_JOB: "demo", kr.LABEL_TYPE: "worker", kr.LABEL_INDEX: "1", "team": "a"}
    assert meta["annotations"] == {kr.ANNOTATION_ATTEMPT: "0", kr.ANNOTATION_WAIT: "false", "note": "b"}
    assert meta["ownerReferences"][0]["kind"] == "TorchJob" and meta["ownerReferences"][0]["uid"] == "u-1"
    assert "initContainers" not in pod["spec"]  # the one annotation a template may set still works
    # the PyTorchJob controller's pod informer does not select it; the TorchJob controller's does
    assert meta["labels"].get(kfl.LABEL_OPERATOR) is None
    service = kr.service(job)
    assert kfl.LABEL_OPERATOR not in service["metadata"]["labels"]


def test_a_pytorchjob_keeps_its_kubeflow_labels_and_a_templates_own_are_overridden() -> None:
    raw = impostor()
    raw.update(apiVersion="kubeflow.org/v1", kind="PyTorchJob")
    raw["metadata"]["uid"] = "k-1"
    job = PYTORCHJOB.read(raw)
    meta = kr.pod(job, ReplicaId("Worker", 0), attempt=0)["metadata"]
    assert meta["labels"][kfl.LABEL_JOB_NAME] == "demo" and meta["labels"][kr.LABEL_JOB] == "demo"
    assert meta["labels"][kfl.LABEL_REPLICA_TYPE] == "worker" and kfl.LABEL_JOB_ROLE not in meta["labels"]
    assert meta["ownerReferences"][0]["kind"] == "PyTorchJob"


def test_validate_warns_that_reserved_labels_and_annotations_are_dropped_naming_the_field(tmp_path: Path) -> None:
    import yaml

    data = impostor()
    del data["metadata"]["namespace"]
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    result = cli("validate", str(tmp_path / "job.yaml"))
    assert result.code == 0, result.err
    assert "metadata.annotations.torchjob.dev/served-as: ignored" in result.err
    assert ("spec.pytorchReplicaSpecs.Worker.template.metadata.labels.training.kubeflow.org/operator-name: dropped "
            "from the pods") in result.err
    assert "torchjob.dev/wait-for-master" not in result.err  # a setting a template may give
    rendered = cli("render", "--kube", str(tmp_path / "job.yaml"))
    pods = [o for o in yaml.safe_load_all(rendered.out) if o and o.get("kind") == "Pod"]
    assert pods and all(kfl.LABEL_OPERATOR not in p["metadata"]["labels"] for p in pods)


def test_an_impostor_torchjobs_pods_are_the_torchjobs_own_and_not_a_pytorchjobs() -> None:
    async def scenario() -> None:
        api = FakeApi()
        api.put(impostor())
        async with running(api):
            await until(lambda: len(api.named("Pod", NS)) == 3)
            for name in api.named("Pod", NS):
                pod = api.objects[("Pod", NS, name)]
                assert pod["metadata"]["ownerReferences"][0]["kind"] == "TorchJob"
                assert kfl.LABEL_OPERATOR not in pod["metadata"]["labels"]
            await asyncio.sleep(0.05)
            assert condition(api, "Failed") is None

    run(scenario)


# --- finding 6: only an earlier job's pods, by its names, are deleted ----------------------------


def labelled_pod(name: str, owner: dict[str, Any] | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NS, "labels": {kr.LABEL_JOB: "demo"},
                            "annotations": {kr.ANNOTATION_ATTEMPT: "0"}}
    if owner is not None:
        meta["ownerReferences"] = [{"controller": True, "blockOwnerDeletion": True, **owner}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": [{"name": "x"}]}}


def test_only_pods_an_earlier_job_of_the_name_and_kind_left_under_its_names_are_deleted() -> None:
    earlier = {"apiVersion": "torchjob.dev/v1", "kind": "TorchJob", "name": "demo", "uid": "u-earlier"}

    async def scenario() -> None:
        api = FakeApi()
        api.put(torchjob())
        api.put(labelled_pod("demo-worker-0", earlier))  # the earlier job's: deleted, then made anew
        api.put(labelled_pod("intruder", None))  # anyone's, labelled as the job's
        api.put(labelled_pod("demo-extra-0", earlier))  # the earlier job's, but not one of this job's names
        api.put(labelled_pod("notebook", {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "nb", "uid": "r"}))
        async with running(api):
            await until(lambda: len([c for c in api.calls if c.verb == "create" and c.kind == "Pod"]) == 3)
            deletes = [c.name for c in api.calls if c.verb == "delete" and c.kind == "Pod"]
            assert deletes == ["demo-worker-0"]
            assert {"intruder", "demo-extra-0", "notebook"} <= set(api.named("Pod", NS))
            await until(lambda: [c for c in api.calls if c.verb == "event" and c.body[1] == "NotOurs"])
            await asyncio.sleep(0.05)
            told = [c.body[2] for c in api.calls if c.verb == "event" and c.body[1] == "NotOurs"]
            assert len(told) == 3  # once each, however many rounds
            assert any("pod intruder" in m and "no controller" in m and "left alone" in m for m in told)
            assert any("pod notebook" in m and "ReplicaSet nb" in m for m in told)
            for pod in ("demo-master-0", "demo-worker-0", "demo-worker-1"):
                assert api.objects[("Pod", NS, pod)]["metadata"]["ownerReferences"][0]["uid"] != "u-earlier"

    run(scenario)


# --- finding 7: a Workload or PodGroup of the job's name is trusted only when the job controls it ----

EARLIER_OWNER = {"apiVersion": "torchjob.dev/v1", "kind": "TorchJob", "name": "demo", "uid": "u-earlier",
                 "controller": True}


def admitted_workload(owner: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload",
            "metadata": {"name": "torchjob-demo", "namespace": NS, "labels": {kr.LABEL_JOB: "demo"},
                         "ownerReferences": [owner]},
            "spec": {"queueName": "team-queue", "podSets": [], "active": True},
            "status": {"conditions": [{"type": "Admitted", "status": "True"}],
                       "admission": {"clusterQueue": "cq", "podSetAssignments": []}}}


def test_an_admitted_workload_left_by_an_earlier_job_of_the_name_never_admits_the_new_one(
        monkeypatch: Any) -> None:
    from torchjob.kube.controller import gates

    monkeypatch.setattr(gates, "NOT_OURS_POLL_S", 0.05, raising=False)

    async def scenario() -> None:
        api = FakeApi()
        api.put(admitted_workload(EARLIER_OWNER))
        data = torchjob()
        data["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "team-queue"}
        api.put(data)
        async with running(api):
            await asyncio.sleep(0.3)
            resumed = [c for c in api.calls if c.verb == "patch_spec" and c.body["runPolicy"]["suspend"] is False]
            assert resumed == []  # never admitted by another's Workload
            await until(lambda: condition(api, "Suspended"))
            spec = api.objects[("TorchJob", NS, "demo")]["spec"]
            assert spec["runPolicy"]["suspend"] is True and api.named("Pod", NS) == []  # not admitted by it
            await until(lambda: [c for c in api.calls if c.verb == "event" and c.body[1] == "NotOurs"])
            told = [c.body[2] for c in api.calls if c.verb == "event" and c.body[1] == "NotOurs"]
            assert len(told) == 1 and "Workload torchjob-demo" in told[0] and "u-earlier" in told[0]
            # the garbage collector takes it: the job makes its own, which Kueue has yet to admit
            await api.delete("kueue.x-k8s.io/v1beta1/Workload", "torchjob-demo", NS)
            made = await until(lambda: api.objects.get(("kueue.x-k8s.io/v1beta1/Workload", NS, "torchjob-demo")))
            job_uid = api.objects[("TorchJob", NS, "demo")]["metadata"]["uid"]
            assert made["metadata"]["ownerReferences"][0]["uid"] == job_uid
            assert api.objects[("TorchJob", NS, "demo")]["spec"]["runPolicy"]["suspend"] is True

    run(scenario)


def podgroup(owner: dict[str, Any], phase: str = "Running") -> dict[str, Any]:
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
            "metadata": {"name": "demo", "namespace": NS, "labels": {kr.LABEL_JOB: "demo"},
                         "ownerReferences": [owner]},
            "spec": {"minMember": 3}, "status": {"phase": phase}}


def test_a_podgroup_of_the_jobs_name_that_is_not_its_own_is_never_joined(monkeypatch: Any) -> None:
    from torchjob.kube.controller import gates

    monkeypatch.setattr(gates, "NOT_OURS_POLL_S", 0.05, raising=False)
    volcano_job = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": "demo", "uid": "v-1",
                   "controller": True}
    kind = "scheduling.volcano.sh/v1beta1/PodGroup"

    async def scenario() -> None:
        api = FakeApi()
        api.put(podgroup(volcano_job))  # another kind's gang, admitted
        api.put(torchjob(run_policy={"schedulingPolicy": {"schedulerName": "volcano"}}))
        async with running(api):
            await until(lambda: status_of(api).get("conditions"))
            await asyncio.sleep(0.2)
            assert api.named("Pod", NS) == [] and api.named("PodGroup", NS) == []  # (kind named in full)
            await until(lambda: [c for c in api.calls if c.verb == "event" and c.body[1] == "NotOurs"])
            assert api.objects[(kind, NS, "demo")]["metadata"]["ownerReferences"][0]["uid"] == "v-1"
            assert not [c for c in api.calls if c.verb == "delete" and c.kind == kind]  # and left alone
            # it goes; then an earlier TorchJob of the name left one: deleted, and the job's own made
            await api.delete(kind, "demo", NS)
            api.put(podgroup(EARLIER_OWNER))
            await until(lambda: len([c for c in api.calls if c.verb == "delete" and c.kind == kind]) == 2)
            mine = await until(lambda: (g := api.objects.get((kind, NS, "demo"))) and
                               g["metadata"]["ownerReferences"][0]["uid"] != "u-earlier" and g)
            assert mine["metadata"]["ownerReferences"][0]["kind"] == "TorchJob"
            assert api.named("Pod", NS) == []  # the job's own PodGroup is Pending: Volcano has not admitted it

    run(scenario)
