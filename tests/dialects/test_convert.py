"""`convert`: a native job written as torchjob, Kubeflow or Volcano, what each target loses, and round trips.

The round trips are properties: for random native jobs within what a dialect can express,
`read(write(explicit(job)))` is `explicit(job)` again, through YAML text and the dialect's reader.
"""

from __future__ import annotations

import copy
import os
from typing import Any, Literal

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.dialects.util import read_data
from tests.jobs import job_data, make_job
from torchjob.api.errors import UserError
from torchjob.api.load import job_from_data
from torchjob.api.model import DEFAULT_PORT, MASTER, PORT_NAME, WORKER, TorchJob
from torchjob.api.validate import RESERVED_ENV
from torchjob.dialects.convert import TARGETS, convert, explicit

Dialect = Literal["torchjob", "kubeflow", "volcano"]


# --- the exact output for a typical job ------------------------------------------------------------------

TYPICAL = job_data("demo", workers=2, restart_policy="OnFailure", master_port=29500, run_policy={"backoffLimit": 3},
                   restart_scope=None)
CONTAINER = {"name": "pytorch", "command": ["python", "train.py"]}
MASTER_CONTAINER = {**CONTAINER, "ports": [{"name": PORT_NAME, "containerPort": 29500}]}


def test_targets() -> None:
    assert TARGETS == ("torchjob", "kubeflow", "volcano", "trainjob")
    with pytest.raises(ValueError, match="unknown target 'tfjob'"):
        convert(make_job(), "tfjob")


def test_typical_job_as_torchjob() -> None:
    data, lost = convert(job_from_data(TYPICAL), "torchjob")
    assert lost == []
    assert data == {
        "apiVersion": "torchjob.dev/v1",
        "kind": "TorchJob",
        "metadata": {"name": "demo"},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "restartPolicy": "OnFailure",
                           "template": {"spec": {"containers": [MASTER_CONTAINER]}}},
                "Worker": {"replicas": 2, "restartPolicy": "OnFailure",
                           "template": {"spec": {"containers": [CONTAINER]}}},
            },
            "runPolicy": {"backoffLimit": 3},
        },
    }


def test_typical_job_as_kubeflow() -> None:
    data, lost = convert(job_from_data(TYPICAL), "kubeflow")
    assert lost == []
    assert data == {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "demo"},
        "spec": {
            "runPolicy": {"backoffLimit": 3},
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "restartPolicy": "OnFailure",
                           "template": {"spec": {"containers": [MASTER_CONTAINER]}}},
                "Worker": {"replicas": 2, "restartPolicy": "OnFailure",
                           "template": {"spec": {"containers": [CONTAINER]}}},
            },
        },
    }


def test_typical_job_as_volcano() -> None:
    data, lost = convert(job_from_data(TYPICAL), "volcano")
    assert lost == []
    assert data == {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "demo"},
        "spec": {
            "tasks": [
                # the port moves to the plugin's --port; the pod's restartPolicy carries the replica's
                {"name": "master", "replicas": 1,
                 "template": {"spec": {"containers": [CONTAINER], "restartPolicy": "OnFailure"}}},
                {"name": "worker", "replicas": 2,
                 "template": {"spec": {"containers": [CONTAINER], "restartPolicy": "OnFailure"}}},
            ],
            "plugins": {
                "pytorch": ["--master=master", "--worker=worker", "--port=29500"],
                "svc": ["--inject-hosts-env=false"],  # the native job asked for no VC_*_HOSTS env
            },
            "maxRetry": 3,
        },
    }


def test_volcano_writes_policies_retries_dependencies_and_env_plugins() -> None:
    data = job_data("vj", workers=3, restart_policy="Never", run_policy={
        "backoffLimit": 2, "ttlSecondsAfterFinished": 60,
        "schedulingPolicy": {"minAvailable": 4, "queue": "q", "priorityClass": "high", "schedulerName": "volcano"}})
    spec = data["spec"]
    spec["pytorchReplicaSpecs"]["Master"]["policies"] = [{"event": "TaskCompleted", "action": "CompleteJob"}]
    spec["pytorchReplicaSpecs"]["Worker"]["maxRestarts"] = 2
    spec["pytorchReplicaSpecs"]["Worker"]["dependsOn"] = {"name": ["Master"], "iteration": "all"}
    spec["policies"] = [{"exitCode": 3, "action": "AbortJob", "timeout": "30s"}]
    spec["minSuccess"] = 2
    spec["volcano"] = {"taskNames": {"Master": "chief", "Worker": "trainers"}, "taskIndex": True, "hosts": True}
    out, lost = convert(job_from_data(data), "volcano")
    assert lost == []
    assert out["spec"] == {
        "tasks": [
            {"name": "chief", "replicas": 1,
             "template": {"spec": {"containers": [CONTAINER], "restartPolicy": "Never"}},
             "policies": [{"event": "TaskCompleted", "action": "CompleteJob"}]},
            {"name": "trainers", "replicas": 3,
             "template": {"spec": {"containers": [CONTAINER], "restartPolicy": "Never"}},
             "maxRetry": 2, "dependsOn": {"name": ["chief"], "iteration": "all"}},
        ],
        "plugins": {"pytorch": ["--master=chief", "--worker=trainers", f"--port={DEFAULT_PORT}"], "svc": [],
                    "env": []},
        "maxRetry": 2,
        "minAvailable": 4, "queue": "q", "priorityClassName": "high", "schedulerName": "volcano",
        "ttlSecondsAfterFinished": 60,
        "policies": [{"exitCode": 3, "action": "AbortJob", "timeout": "30s"}],
        "minSuccess": 2,
    }


def test_the_master_port_keeps_other_ports() -> None:
    data = copy.deepcopy(TYPICAL)
    master = data["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    master["ports"] = [{"name": "metrics", "containerPort": 9090}, *master["ports"]]
    out, _ = convert(job_from_data(data), "volcano")
    (container,) = out["spec"]["tasks"][0]["template"]["spec"]["containers"]
    assert container["ports"] == [{"name": "metrics", "containerPort": 9090}]
    assert out["spec"]["plugins"]["pytorch"][-1] == "--port=29500"


# --- what a target cannot express ----------------------------------------------------------------------------


def everything() -> TorchJob:
    """A native job using every field that has no Kubeflow or no Volcano equivalent."""
    data = job_data("rich", workers=2, restart_policy="OnFailure", run_policy={
        "cleanPodPolicy": "Unfinished", "activeDeadlineSeconds": 600, "suspend": False, "managedBy": "me",
        "schedulingPolicy": {"priority": 5, "schedulerName": "volcano", "minResources": {"cpu": "2"},
                             "scheduleTimeoutSeconds": 30}})
    spec = data["spec"]
    spec["pytorchReplicaSpecs"]["Worker"]["restartPolicy"] = "ExitCode"
    spec["pytorchReplicaSpecs"]["Worker"]["policies"] = [{"event": "PodEvicted", "action": "RestartPod"}]
    spec["pytorchReplicaSpecs"]["Worker"]["maxRestarts"] = 3
    spec["pytorchReplicaSpecs"]["Worker"]["dependsOn"] = {"name": ["Master"]}
    spec["policies"] = [{"event": "PodFailed", "action": "RestartJob"}]
    spec["minSuccess"] = 1
    spec["elasticPolicy"] = {"minReplicas": 1, "maxReplicas": 2}
    spec["nprocPerNode"] = "2"
    spec["runMode"] = {"debug": {"enabled": True}}
    spec["tensorboard"] = {"logDirs": ["/logs"]}
    spec["volcano"] = {"taskIndex": True}
    pod = spec["pytorchReplicaSpecs"]["Master"]["template"]
    spec["initializers"] = [{"name": "dataset-initializer", "template": pod}]
    spec["volumeClaims"] = [{"name": "initializer-rich", "spec": {"accessModes": ["ReadWriteOnce"]}}]
    return job_from_data(data)


def test_what_kubeflow_loses() -> None:
    data, lost = convert(everything(), "kubeflow")
    assert lost == [
        "runPolicy.cleanPodPolicy Unfinished is written as Running (Kubeflow's nearest)",
        "runPolicy.schedulingPolicy.priority has no Kubeflow field (Kubeflow sets the scheduler per operator: "
        "--gang-scheduler-name)",
        "runPolicy.schedulingPolicy.schedulerName has no Kubeflow field (Kubeflow sets the scheduler per operator: "
        "--gang-scheduler-name)",
        "spec.policies has no Kubeflow equivalent",
        "spec.minSuccess has no Kubeflow equivalent",
        "spec.runMode has no Kubeflow equivalent",
        "spec.tensorboard has no Kubeflow equivalent",
        "spec.volcano has no Kubeflow equivalent",
        "spec.initializers has no Kubeflow equivalent",
        "spec.volumeClaims has no Kubeflow equivalent",
        "pytorchReplicaSpecs.Worker.policies has no Kubeflow equivalent",
        "pytorchReplicaSpecs.Worker.maxRestarts has no Kubeflow equivalent",
        "pytorchReplicaSpecs.Worker.dependsOn has no Kubeflow equivalent",
    ]
    spec = data["spec"]
    # restartScope is torchjob's, as progressDeadlineSeconds: its PyTorchJob CRD keeps it, Kubeflow ignores it
    assert spec["runPolicy"] == {"cleanPodPolicy": "Running", "activeDeadlineSeconds": 600, "suspend": False,
                                 "managedBy": "me", "restartScope": "Replica",
                                 "schedulingPolicy": {"minResources": {"cpu": "2"}, "scheduleTimeoutSeconds": 30}}
    assert set(spec) == {"runPolicy", "elasticPolicy", "nprocPerNode", "pytorchReplicaSpecs"}
    assert set(spec["pytorchReplicaSpecs"]["Worker"]) == {"replicas", "restartPolicy", "template"}
    assert spec["pytorchReplicaSpecs"]["Worker"]["restartPolicy"] == "ExitCode"  # Kubeflow has ExitCode
    # what is written reads back as a Kubeflow job
    again = read_data(data)
    assert again.dialect == "kubeflow.org/v1 PyTorchJob"
    assert [n.split(": ", 2)[1] for n in again.notes] == ["spec.runPolicy.managedBy"]  # 'me': not acted on


def test_what_volcano_loses() -> None:
    data, lost = convert(everything(), "volcano")
    assert lost == [
        "Worker: restartPolicy ExitCode has no Volcano equivalent; written as Never (add exitCode policies to "
        "restart on chosen codes)",
        "runPolicy.backoffLimit unset (no limit) has no Volcano equivalent; Volcano's default maxRetry is 3",
        "runPolicy.schedulingPolicy.minResources has no Volcano Job field",
        "runPolicy.schedulingPolicy.scheduleTimeoutSeconds has no Volcano Job field",
        "runPolicy.schedulingPolicy.priority has no Volcano Job field",
        "runPolicy.activeDeadlineSeconds has no Volcano Job field",
        "runPolicy.cleanPodPolicy has no Volcano Job field",
        "runPolicy.suspend has no Volcano Job field",
        "runPolicy.managedBy has no Volcano Job field",
        "spec.elasticPolicy has no Volcano equivalent",
        "spec.nprocPerNode has no Volcano equivalent",
        "spec.runMode has no Volcano equivalent",
        "spec.tensorboard has no Volcano equivalent",
        "spec.initializers has no Volcano equivalent",
        "spec.volumeClaims has no Volcano equivalent",
    ]
    spec = data["spec"]
    assert spec["tasks"][1]["template"]["spec"]["restartPolicy"] == "Never"
    assert spec["tasks"][1]["policies"] == [{"event": "PodEvicted", "action": "RestartPod"}]
    assert spec["tasks"][1]["maxRetry"] == 3 and spec["tasks"][1]["dependsOn"] == {"name": ["master"]}
    assert spec["schedulerName"] == "volcano"
    assert "maxRetry" not in spec
    assert spec["plugins"] == {"pytorch": ["--master=master", "--worker=worker", "--port=23456"],
                               "svc": ["--inject-hosts-env=false"], "env": []}
    again = read_data(data)
    assert again.dialect == "batch.volcano.sh/v1alpha1 Job"


def test_kubeflow_renames_the_training_container() -> None:
    data = job_data("demo", workers=1)
    for rspec in data["spec"]["pytorchReplicaSpecs"].values():
        rspec["template"]["spec"]["containers"][0]["name"] = "main"
    out, lost = convert(job_from_data(data), "kubeflow")
    assert lost == [
        "pytorchReplicaSpecs.Master: container 'main' renamed 'pytorch' (Kubeflow requires it)",
        "pytorchReplicaSpecs.Worker: container 'main' renamed 'pytorch' (Kubeflow requires it)",
    ]
    assert [c["name"] for r in out["spec"]["pytorchReplicaSpecs"].values() for c in r["template"]["spec"]["containers"]
            ] == ["pytorch", "pytorch"]


def test_explicit_writes_defaults_and_drops_generated_metadata() -> None:
    data = job_data("demo", workers=1, restart_policy=None, uid="u-1")
    del data["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"]
    data["metadata"].update(resourceVersion="7", generation=2, creationTimestamp="2024-01-01T00:00:00Z")
    out = explicit(job_from_data(data))
    assert out["metadata"] == {"name": "demo"}
    assert out["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] == 1
    assert {r["restartPolicy"] for r in out["spec"]["pytorchReplicaSpecs"].values()} == {"OnFailure"}
    assert "status" not in out


def test_worker_only_job_to_volcano_is_refused() -> None:
    # Volcano's pytorch plugin needs a master task: torchjob will not write a document that would run
    # without any distributed env.
    job = make_job(master=False, workers=2, run_policy={"backoffLimit": 1})
    with pytest.raises(UserError, match="without a Master"):
        convert(job, "volcano")


# --- round trips (hypothesis) ------------------------------------------------------------------------------

NAME = st.from_regex(r"[a-z]([a-z0-9-]{0,8}[a-z0-9])?", fullmatch=True)
# Any text, so that YAML quoting is exercised (numbers, booleans, null, '0755', ':', '#', newlines, unicode).
TEXT = st.one_of(
    st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12),
    st.sampled_from(["1", "0755", "true", "no", "null", "~", "1e3", "0x1F", "- a", "a: b", "#x", "'", '"', "", " "]),
)
ENV_NAME = st.from_regex(r"[A-Z][A-Z0-9_]{0,8}", fullmatch=True).filter(
    lambda n: n not in RESERVED_ENV and not n.startswith(("TORCHJOB_", "VC_", "VK_")))
PORT = st.integers(1, 65535)
EVENTS = ("PodFailed", "PodEvicted", "TaskCompleted", "TaskFailed", "Unknown")
ACTIONS = ("RestartJob", "RestartTask", "RestartPod", "AbortJob", "TerminateJob", "CompleteJob")


def maybe(draw: st.DrawFn, strategy: st.SearchStrategy[Any]) -> Any:
    return draw(strategy) if draw(st.booleans()) else None


def put(d: dict[str, Any], key: str, value: Any) -> None:
    if value is not None:
        d[key] = value


@st.composite
def env_vars(draw: st.DrawFn) -> list[dict[str, Any]]:
    names = draw(st.lists(ENV_NAME, min_size=1, max_size=3, unique=True))
    out = []
    for n in names:
        if draw(st.booleans()):
            out.append({"name": n, "value": draw(TEXT)})
        else:
            out.append({"name": n, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}})
    return out


@st.composite
def containers(draw: st.DrawFn, *, training: str | None, volumes: list[str],
               master_port: int | None) -> list[dict[str, Any]]:
    """Containers of one pod; the training container is named `training` (None: any names) and carries
    the master's port when one is given."""
    names = draw(st.lists(NAME.filter(lambda n: n != "pytorch"), min_size=1, max_size=3, unique=True))
    if training is not None:
        names[draw(st.integers(0, len(names) - 1))] = training
    out = []
    for name in names:
        c: dict[str, Any] = {"name": name}
        put(c, "image", maybe(draw, st.sampled_from(["train:1", "pytorch/pytorch:2.3", "localhost:5000/x"])))
        put(c, "command", maybe(draw, st.lists(TEXT, min_size=1, max_size=3)))
        put(c, "args", maybe(draw, st.lists(TEXT, max_size=3)))
        put(c, "env", maybe(draw, env_vars()))
        put(c, "workingDir", maybe(draw, st.sampled_from(["/work", "/home/user", "."])))
        port_names = draw(st.lists(NAME.filter(lambda n: n != PORT_NAME), max_size=2, unique=True))
        if port_names:
            c["ports"] = [{"name": n, "containerPort": draw(PORT)} for n in port_names]
        put(c, "resources", maybe(draw, st.sampled_from([{"limits": {"cpu": "1", "memory": "2Gi"}},
                                                         {"requests": {"nvidia.com/gpu": 1}}])))
        if volumes and draw(st.booleans()):
            c["volumeMounts"] = [{"name": v, "mountPath": f"/mnt/{v}"} for v in volumes]
        put(c, "imagePullPolicy", maybe(draw, st.sampled_from(["Always", "IfNotPresent"])))
        out.append(c)
    if master_port is not None:
        # the port goes last: a Volcano reader appends it after the container's other ports
        first_pytorch = next((c for c in out if c["name"] == "pytorch"), out[0])
        first_pytorch.setdefault("ports", []).append({"name": PORT_NAME, "containerPort": master_port})
    return out


@st.composite
def pod_templates(draw: st.DrawFn, *, training: str | None, master_port: int | None) -> dict[str, Any]:
    volumes = draw(st.lists(NAME, max_size=2, unique=True))
    pod: dict[str, Any] = {}
    pod["containers"] = draw(containers(training=training, volumes=volumes, master_port=master_port))
    if volumes:
        sources = [{"emptyDir": {}}, {"hostPath": {"path": "/data"}}, {"configMap": {"name": "cm"}},
                   {"emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}}]
        pod["volumes"] = [{"name": v, **draw(st.sampled_from(sources))} for v in volumes]
    put(pod, "nodeSelector", maybe(draw, st.just({"gpu": "a100"})))
    put(pod, "terminationGracePeriodSeconds", maybe(draw, st.integers(0, 60)))
    template: dict[str, Any] = {"spec": pod}
    if draw(st.booleans()):
        template["metadata"] = {"labels": {"team": draw(TEXT)}, "annotations": {"note": draw(TEXT)}}
    return template


@st.composite
def lifecycle_policies(draw: st.DrawFn) -> list[dict[str, Any]] | None:
    """Valid policies: each reacts to events or to one exit code; no event or code twice; '*' alone."""
    n = draw(st.integers(0, 3))
    if n == 0:
        return None
    used: set[str] = set()
    out = []
    for _ in range(n):
        pol: dict[str, Any] = {"action": draw(st.sampled_from(ACTIONS))}
        kind = draw(st.sampled_from(["event", "events", "exitCode", "*"]))
        free = [e for e in EVENTS if e not in used]
        if kind == "exitCode":
            code = draw(st.integers(1, 255).filter(lambda c: f"exit:{c}" not in used))
            used.add(f"exit:{code}")
            pol["exitCode"] = code
        elif kind == "*" and "*" not in used:
            used.add("*")
            pol["event"] = "*"
        elif kind == "events" and len(free) >= 2:
            events = draw(st.lists(st.sampled_from(free), min_size=2, max_size=2, unique=True))
            used.update(events)
            pol["events"] = events
        elif free:
            event = draw(st.sampled_from(free))
            used.add(event)
            pol["event"] = event
        else:
            continue
        put(pol, "timeout", maybe(draw, st.sampled_from(["30s", "2m", "1h30m", "500ms"])))
        out.append(pol)
    return out


@st.composite
def native_jobs(draw: st.DrawFn, dialect: Dialect) -> TorchJob:
    """A random valid native job within what `dialect` can express."""
    volcano, kubeflow = dialect == "volcano", dialect == "kubeflow"
    has_master = True if volcano else draw(st.booleans())
    workers = draw(st.integers(0 if has_master else 1, 4))
    restart_policies = ["Never", "OnFailure", "Always"] + ([] if volcano else ["ExitCode"])
    # Volcano: the port is the plugin's --port, so the default one cannot be written down (it is implied).
    port = draw(st.one_of(st.none(), PORT.filter(lambda p: p != DEFAULT_PORT) if volcano else PORT))
    training = "pytorch" if kubeflow else draw(st.sampled_from(["pytorch", None]))

    specs: dict[str, Any] = {}
    for rtype, count in ((MASTER, 1 if has_master else 0), (WORKER, workers)):
        if not count:
            continue
        carries_port = port if rtype == (MASTER if has_master else WORKER) else None
        r: dict[str, Any] = {"template": draw(pod_templates(training=training, master_port=carries_port))}
        if rtype == WORKER or (not volcano and draw(st.booleans())):
            r["replicas"] = count
        put(r, "restartPolicy", maybe(draw, st.sampled_from(restart_policies)))
        if not kubeflow:
            put(r, "policies", draw(lifecycle_policies()))
            put(r, "maxRestarts", maybe(draw, st.integers(0, 5)))
        specs[rtype] = r
    if not kubeflow and has_master and workers and draw(st.booleans()):
        dependent, on = draw(st.sampled_from([(WORKER, MASTER), (MASTER, WORKER)]))
        specs[dependent]["dependsOn"] = {"name": [on]}
        put(specs[dependent]["dependsOn"], "iteration", maybe(draw, st.sampled_from(["any", "all"])))

    spec: dict[str, Any] = {"pytorchReplicaSpecs": specs}
    rp: dict[str, Any] = {}
    if volcano:
        rp["backoffLimit"] = draw(st.integers(0, 10))  # unset (no limit) cannot be written: Volcano's default is 3
    else:
        put(rp, "backoffLimit", maybe(draw, st.integers(0, 10)))
        put(rp, "activeDeadlineSeconds", maybe(draw, st.integers(1, 10**6)))
        cleans = ["None", "Running", "All"] + ([] if kubeflow else ["Unfinished"])
        put(rp, "cleanPodPolicy", maybe(draw, st.sampled_from(cleans)))
        put(rp, "suspend", maybe(draw, st.booleans()))
        put(rp, "managedBy", maybe(draw, st.just("kubeflow.org/training-operator")))
    put(rp, "ttlSecondsAfterFinished", maybe(draw, st.integers(0, 10**5)))
    sched: dict[str, Any] = {}
    put(sched, "minAvailable", maybe(draw, st.integers(1, 5)))
    put(sched, "queue", maybe(draw, NAME))
    put(sched, "priorityClass", maybe(draw, NAME))
    if not kubeflow:
        put(sched, "schedulerName", maybe(draw, st.sampled_from(["volcano", "default-scheduler"])))
    if not volcano:
        put(sched, "minResources", maybe(draw, st.just({"cpu": "4", "nvidia.com/gpu": 2})))
        put(sched, "scheduleTimeoutSeconds", maybe(draw, st.integers(1, 600)))
    if dialect == "torchjob":
        put(sched, "priority", maybe(draw, st.integers(0, 100)))
    if sched:  # an empty schedulingPolicy is written as none: it reads back absent
        rp["schedulingPolicy"] = sched
    if rp:
        spec["runPolicy"] = rp

    if not volcano:
        if workers and draw(st.booleans()):
            lo = draw(st.integers(1, 4))
            ep: dict[str, Any] = {"minReplicas": lo, "maxReplicas": draw(st.integers(lo, 6))}
            put(ep, "rdzvBackend", maybe(draw, st.sampled_from(["c10d", "etcd", "etcd-v2"])))
            put(ep, "rdzvPort", maybe(draw, PORT))
            put(ep, "rdzvHost", maybe(draw, NAME))
            put(ep, "rdzvId", maybe(draw, TEXT))
            put(ep, "maxRestarts", maybe(draw, st.integers(0, 5)))
            put(ep, "standalone", maybe(draw, st.booleans()))
            if draw(st.booleans()):
                ep["rdzvConf"] = [{"key": "timeout", "value": draw(TEXT)}]
            spec["elasticPolicy"] = ep
        put(spec, "nprocPerNode", maybe(draw, st.sampled_from(["auto", "cpu", "gpu", "1", "8"])))
    if not kubeflow:
        put(spec, "policies", draw(lifecycle_policies()))
        total = (1 if has_master else 0) + workers
        put(spec, "minSuccess", maybe(draw, st.integers(1, total)))
        vc: dict[str, Any] = {}
        if draw(st.booleans()):
            # both names or none: the writer fills a missing one with the default, which reads back explicit
            names = draw(st.lists(NAME, min_size=2, max_size=2, unique=True))
            if not workers:
                # no worker task carries the Worker name: the writer writes --worker=worker
                names[1] = "worker" if names[0] != "worker" else "master"
            if names != ["master", "worker"]:  # the default names read back as no taskNames
                vc["taskNames"] = {MASTER: names[0], WORKER: names[1]}
        vc["taskIndex"] = draw(st.booleans())
        vc["hosts"] = draw(st.booleans())
        # {hosts: false, taskIndex: false} means no Volcano env, as no spec.volcano does, and reads back as that
        if vc.get("taskNames") or vc["taskIndex"] or vc["hosts"]:
            spec["volcano"] = vc
    if dialect == "torchjob":
        if draw(st.booleans()):
            types = [t.lower() for t in specs]
            spec["runMode"] = {"debug": {"enabled": draw(st.booleans()),
                                         "replicaSpecs": [{"type": draw(st.sampled_from(types)),
                                                           "command": ["sleep", "inf"]}]}}
        if draw(st.booleans()):
            spec["tensorboard"] = {"logDirs": ["t9k://pvc/p/logs", "/tmp/tb"], "image": "tensorboard:2"}

    metadata: dict[str, Any] = {"name": draw(NAME)}
    put(metadata, "namespace", maybe(draw, NAME))
    put(metadata, "labels", maybe(draw, st.dictionaries(NAME, TEXT, max_size=2)))
    put(metadata, "annotations", maybe(draw, st.dictionaries(NAME, TEXT, max_size=2)))
    return job_from_data({"apiVersion": "torchjob.dev/v1", "kind": "TorchJob", "metadata": metadata, "spec": spec})


# A few dozen examples keep the suite fast; TORCHJOB_ROUND_TRIPS=2000 searches harder.
ROUND_TRIP = settings(max_examples=int(os.environ.get("TORCHJOB_ROUND_TRIPS", "40")), deadline=None,
                      suppress_health_check=[HealthCheck.too_slow])


def round_trip(job: TorchJob, target: Dialect) -> None:
    data, lost = convert(job, target)
    assert lost == []
    text = yaml.safe_dump(data, sort_keys=False)
    again = read_data(data)
    assert again.notes == [], text
    assert explicit(again.job) == explicit(job), text
    # and once more: a written job is a fixed point
    data2, _ = convert(again.job, target)
    assert data2 == data


@ROUND_TRIP
@given(native_jobs("torchjob"))
def test_torchjob_round_trip(job: TorchJob) -> None:
    round_trip(job, "torchjob")


@ROUND_TRIP
@given(native_jobs("kubeflow"))
def test_kubeflow_round_trip(job: TorchJob) -> None:
    round_trip(job, "kubeflow")


@ROUND_TRIP
@given(native_jobs("volcano"))
def test_volcano_round_trip(job: TorchJob) -> None:
    round_trip(job, "volcano")


@settings(max_examples=30, deadline=None)
@given(native_jobs("torchjob"))
def test_explicit_is_a_fixed_point(job: TorchJob) -> None:
    data = explicit(job)
    assert explicit(job_from_data(copy.deepcopy(data))) == data
