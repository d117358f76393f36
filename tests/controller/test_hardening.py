"""What a job document, or a pod, may not make the operator do (issue 19): count a job's pods as
another job's (reserved labels and annotations), delete pods that are not its own, trust a
Workload or PodGroup it did not make. Pure builders and the recording fake API, in milliseconds;
the same on a real API server is in tests/kube."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.controller.fakeapi import Call, FakeApi
from tests.controller.test_sequencing import KEY, NS, condition, events, one_round, run, status_of, synced, torchjob
from tests.dialects.cli import torchjob as cli
from torchjob.core.shape.topology import ReplicaId
from torchjob.kube.controller.round import gates
from torchjob.kube.controller.round.outcome import Result
from torchjob.kube.controller.round.reconciler import STALE_RECHECK_S
from torchjob.kube.objects.front import stacks as pod_stacks
from torchjob.kube.objects.labels import ANNOTATION_ATTEMPT, LABEL_INDEX, LABEL_JOB, LABEL_TYPE
from torchjob.kube.objects.labels import kubeflow as kfl
from torchjob.kube.objects.labels.ownership import ANNOTATION_SERVED_AS
from torchjob.kube.objects.workload import pods as pod_objects
from torchjob.kube.objects.workload.init_container import ANNOTATION_WAIT
from torchjob.kube.served.kinds import PYTORCHJOB, TORCHJOB

RESERVED_LABELS = {kfl.LABEL_OPERATOR: kfl.OPERATOR_NAME, kfl.LABEL_JOB_NAME: "victim",
                   LABEL_JOB: "victim", LABEL_TYPE: "master", "team": "a"}
RESERVED_ANNOTATIONS = {ANNOTATION_SERVED_AS: "kubeflow.org/v1/PyTorchJob", ANNOTATION_ATTEMPT: "7",
                        ANNOTATION_WAIT: "false", pod_stacks.ANNOTATION_CONTAINER: "sidecar", "note": "b"}


def impostor(name: str = "demo") -> dict[str, Any]:
    """A TorchJob whose document says its pods are a PyTorchJob's (or another job's)."""
    data = torchjob(name)
    data["metadata"]["annotations"] = {ANNOTATION_SERVED_AS: "kubeflow.org/v1/PyTorchJob"}
    for spec in data["spec"]["pytorchReplicaSpecs"].values():
        spec["template"]["metadata"] = {"labels": dict(RESERVED_LABELS), "annotations": dict(RESERVED_ANNOTATIONS)}
    return data


# --- finding 3: reserved labels and annotations -------------------------------------------------


def test_a_templates_reserved_labels_and_annotations_never_reach_its_pods() -> None:
    raw = impostor()
    raw["metadata"]["uid"] = "u-1"
    job = TORCHJOB.read(raw)
    pod = pod_objects.pod(job, ReplicaId("Worker", 1), attempt=0)
    meta = pod["metadata"]
    assert meta["labels"] == {LABEL_JOB: "demo", LABEL_TYPE: "worker", LABEL_INDEX: "1", "team": "a"}
    # the stacks front's container is the one torchjob wrapped, not what the template said
    assert meta["annotations"] == {ANNOTATION_ATTEMPT: "0", ANNOTATION_WAIT: "false",
                                   pod_stacks.ANNOTATION_CONTAINER: "pytorch", "note": "b"}
    assert meta["ownerReferences"][0]["kind"] == "TorchJob" and meta["ownerReferences"][0]["uid"] == "u-1"
    assert "initContainers" not in pod["spec"]  # the one annotation a template may set still works
    # the PyTorchJob controller's pod informer does not select it; the TorchJob controller's does
    assert meta["labels"].get(kfl.LABEL_OPERATOR) is None
    service = pod_objects.service(job)
    assert kfl.LABEL_OPERATOR not in service["metadata"]["labels"]


def test_a_pytorchjob_keeps_its_kubeflow_labels_and_a_templates_own_are_overridden() -> None:
    raw = impostor()
    raw.update(apiVersion="kubeflow.org/v1", kind="PyTorchJob")
    raw["metadata"]["uid"] = "k-1"
    job = PYTORCHJOB.read(raw)
    meta = pod_objects.pod(job, ReplicaId("Worker", 0), attempt=0)["metadata"]
    assert meta["labels"][kfl.LABEL_JOB_NAME] == "demo" and meta["labels"][LABEL_JOB] == "demo"
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
        async with synced(api) as c:
            assert await one_round(api, c) == Result()
            assert len(api.named("Pod", NS)) == 3
            for name in api.named("Pod", NS):
                pod = api.objects[("Pod", NS, name)]
                assert pod["metadata"]["ownerReferences"][0]["kind"] == "TorchJob"
                assert kfl.LABEL_OPERATOR not in pod["metadata"]["labels"]
            await one_round(api, c)  # its pods seen by the TorchJob's pod informer: its own, not lost
            assert condition(api, "Failed") is None and condition(api, "Created") is not None

    run(scenario)


# --- finding 6: only an earlier job's pods, by its names, are deleted ----------------------------


def labelled_pod(name: str, owner: dict[str, Any] | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NS, "labels": {LABEL_JOB: "demo"},
                            "annotations": {ANNOTATION_ATTEMPT: "0"}}
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
        async with synced(api) as c:
            # its name held by the earlier job's pod (deleted now): made once that is gone
            assert await one_round(api, c) == Result(requeue_after=STALE_RECHECK_S)
            creates = [c.name for c in api.calls if c.verb == "create" and c.kind == "Pod"]
            assert sorted(creates) == ["demo-master-0", "demo-worker-1"]
            deletes = [c.name for c in api.calls if c.verb == "delete" and c.kind == "Pod"]
            assert deletes == ["demo-worker-0"]
            assert {"intruder", "demo-extra-0", "notebook"} <= set(api.named("Pod", NS))
            assert await one_round(api, c) == Result()
            assert [c.name for c in api.calls if c.verb == "create" and c.kind == "Pod"][2:] == ["demo-worker-0"]
            await one_round(api, c)
            told = [c.body[2] for c in events(api, "NotOurs")]
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
            "metadata": {"name": "torchjob-demo", "namespace": NS, "labels": {LABEL_JOB: "demo"},
                         "ownerReferences": [owner]},
            "spec": {"queueName": "team-queue", "podSets": [], "active": True},
            "status": {"conditions": [{"type": "Admitted", "status": "True"}],
                       "admission": {"clusterQueue": "cq", "podSetAssignments": []}}}


def test_an_admitted_workload_left_by_an_earlier_job_of_the_name_never_admits_the_new_one() -> None:
    async def scenario() -> None:
        api = FakeApi()
        api.put(admitted_workload(EARLIER_OWNER))
        data = torchjob()
        data["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "team-queue"}
        api.put(data)
        async with synced(api) as c:
            # the Workload of its name is not its own: not read, said, and looked at again until it is gone;
            # the job is held suspended all the same
            assert await one_round(api, c) == Result(requeue_after=gates.NOT_OURS_POLL_S)
            held = [c for c in api.writes(("TorchJob",))]
            assert held == [Call("patch_spec", "TorchJob", "demo", NS, {"runPolicy": {"suspend": True}})]
            assert await one_round(api, c) == Result(requeue_after=gates.NOT_OURS_POLL_S)
            await one_round(api, c)
            resumed = [c for c in api.calls if c.verb == "patch_spec" and c.body["runPolicy"]["suspend"] is False]
            assert resumed == []  # never admitted by another's Workload
            assert condition(api, "Suspended")
            spec = api.objects[("TorchJob", NS, "demo")]["spec"]
            assert spec["runPolicy"]["suspend"] is True and api.named("Pod", NS) == []  # not admitted by it
            told = [c.body[2] for c in events(api, "NotOurs")]
            assert len(told) == 1 and "Workload torchjob-demo" in told[0] and "u-earlier" in told[0]
            # the garbage collector takes it: the job makes its own, which Kueue has yet to admit
            await api.delete("kueue.x-k8s.io/v1beta1/Workload", "torchjob-demo", NS)
            await one_round(api, c, KEY)
            made = api.objects[("kueue.x-k8s.io/v1beta1/Workload", NS, "torchjob-demo")]
            job_uid = api.objects[("TorchJob", NS, "demo")]["metadata"]["uid"]
            assert made["metadata"]["ownerReferences"][0]["uid"] == job_uid
            assert api.objects[("TorchJob", NS, "demo")]["spec"]["runPolicy"]["suspend"] is True

    run(scenario)


def podgroup(owner: dict[str, Any], phase: str = "Running") -> dict[str, Any]:
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
            "metadata": {"name": "demo", "namespace": NS, "labels": {LABEL_JOB: "demo"},
                         "ownerReferences": [owner]},
            "spec": {"minMember": 3}, "status": {"phase": phase}}


def test_a_podgroup_of_the_jobs_name_that_is_not_its_own_is_never_joined() -> None:
    volcano_job = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": "demo", "uid": "v-1",
                   "controller": True}
    kind = "scheduling.volcano.sh/v1beta1/PodGroup"

    async def scenario() -> None:
        api = FakeApi()
        api.put(podgroup(volcano_job))  # another kind's gang, admitted
        api.put(torchjob(run_policy={"schedulingPolicy": {"schedulerName": "volcano"}}))
        async with synced(api) as c:
            # another's PodGroup holds the name: no pod joins its gang; looked at again until it is gone
            assert await one_round(api, c) == Result(requeue_after=gates.NOT_OURS_POLL_S)
            assert status_of(api).get("conditions")  # the decision was written all the same
            assert api.named("Pod", NS) == [] and api.named("PodGroup", NS) == []  # (kind named in full)
            assert len(events(api, "NotOurs")) == 1
            assert api.objects[(kind, NS, "demo")]["metadata"]["ownerReferences"][0]["uid"] == "v-1"
            assert not [c for c in api.calls if c.verb == "delete" and c.kind == kind]  # and left alone
            # it goes; then an earlier TorchJob of the name left one: deleted, and the job's own made
            await api.delete(kind, "demo", NS)
            api.put(podgroup(EARLIER_OWNER))
            assert await one_round(api, c) == Result(requeue_after=gates.NOT_OURS_POLL_S)
            assert len([c for c in api.calls if c.verb == "delete" and c.kind == kind]) == 2
            # the job's own, Pending: Volcano has not admitted it, and until its kind is watched the job looks
            assert await one_round(api, c) == Result(requeue_after=gates.ADMISSION_POLL_S)
            mine = api.objects[(kind, NS, "demo")]
            assert mine["metadata"]["ownerReferences"][0]["uid"] != "u-earlier"
            assert mine["metadata"]["ownerReferences"][0]["kind"] == "TorchJob"
            assert api.named("Pod", NS) == []  # the job's own PodGroup is Pending: Volcano has not admitted it

    run(scenario)
