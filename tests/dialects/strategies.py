"""Hypothesis strategies: job documents of every dialect, of the shapes their users write (master or
not, worker counts, plain, torchrun, launcher and shell commands, elastic rendezvous, ports, custom
task and replica type names), built as plain data."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

NAMES = st.sampled_from(["job", "mnist-ddp", "a", "train-7", "resnet50-imagenet"])
COMMANDS = st.sampled_from([
    ["python", "train.py"],
    ["torchrun", "train.py"],
    ["python", "-m", "torch.distributed.run", "train.py"],
    ["python", "-m", "torch.distributed.launch", "--use_env", "train.py"],
    ["sh", "-c", "torchrun --rdzv_endpoint=$(MASTER_ADDR):$(MASTER_PORT) train.py"],
    ["bash", "-c", "python train.py"],
])
PORTS = st.sampled_from([None, 23456, 29500, 40000])


def _container(name: str, command: list[str], port: int | None) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": "train:1", "command": command}
    if port is not None:
        c["ports"] = [{"name": "pytorchjob-port", "containerPort": port}]
    return c


@st.composite
def kubeflow(draw: st.DrawFn) -> dict[str, Any]:
    name = draw(NAMES)
    master = draw(st.booleans())
    workers = draw(st.integers(0 if master else 1, 4))
    command = draw(COMMANDS)
    port = draw(PORTS)
    specs: dict[str, Any] = {}
    if master:
        specs["Master"] = {"replicas": 1, "template": {"spec": {"containers": [_container("pytorch", command, port)]}}}
    if workers:
        specs["Worker"] = {"replicas": workers,
                           "template": {"spec": {"containers": [_container("pytorch", command, port)]}}}
    spec: dict[str, Any] = {"pytorchReplicaSpecs": specs}
    if workers and draw(st.booleans()):
        ep: dict[str, Any] = {"rdzvBackend": "c10d"}
        host = draw(st.sampled_from([None, "bare", "dns"]))
        if host == "bare":  # Kubeflow's default spelled out: resolvable there through a per-pod Service
            ep["rdzvHost"] = f"{name}-worker-0"
        elif host == "dns":
            ep["rdzvHost"] = f"{name}-worker-{workers - 1}.{name}"
        if draw(st.booleans()):
            ep["rdzvPort"] = 29400
        lo = draw(st.integers(1, workers))
        ep.update(minReplicas=lo, maxReplicas=draw(st.integers(lo, workers + 2)))
        spec["elasticPolicy"] = ep
    if draw(st.booleans()):
        spec["nprocPerNode"] = draw(st.sampled_from(["auto", "1", "2", "gpu"]))
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": name}, "spec": spec}


@st.composite
def volcano(draw: st.DrawFn) -> dict[str, Any]:
    name = draw(NAMES)
    master, worker = draw(st.sampled_from([("master", "worker"), ("chief", "trainer-pool"), ("m", "w")]))
    flags = [f"--master={master}", f"--worker={worker}"]
    port = draw(PORTS)
    if port is not None:
        flags += ["--port", str(port)]
    if draw(st.booleans()):
        flags.append(draw(st.sampled_from(["--wait-master-enabled", "--wait-master-enabled=false"])))
    plugins: dict[str, Any] = {"pytorch": flags}
    if draw(st.booleans()):
        plugins["svc"] = []
    if draw(st.booleans()):
        plugins["env"] = []
    command = draw(COMMANDS)

    def task(tname: str, n: int) -> dict[str, Any]:
        return {"name": tname, "replicas": n, "template": {"spec": {
            "restartPolicy": "OnFailure", "containers": [_container("main", command, None)]}}}

    tasks = [task(master, 1)]
    workers = draw(st.integers(0, 3))
    if workers:
        tasks.append(task(worker, workers))
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": name},
            "spec": {"minAvailable": 1 + workers, "schedulerName": "volcano", "plugins": plugins, "tasks": tasks}}


@st.composite
def t9k(draw: st.DrawFn) -> dict[str, Any]:
    name = draw(NAMES)
    types = draw(st.sampled_from([["worker"], ["master", "worker"], ["node"], ["launcher", "node"]]))
    pod = {"spec": {"containers": [{"name": "python", "image": "pytorch:2", "command": ["python"],
                                    "args": ["train.py"]}]}}
    counts = [1] * (len(types) - 1) + [draw(st.integers(1, 4))]
    specs = [{"type": t, "replicas": n, "restartPolicy": "OnFailure", "template": pod}
             for t, n in zip(types, counts, strict=True)]
    spec: dict[str, Any] = {"replicaSpecs": specs}
    if draw(st.booleans()):
        spec["torchrunConfig"] = {draw(st.sampled_from(["enabled", "enable"])): True, "maxRestarts": 3,
                                  "procPerNode": draw(st.sampled_from(["1", "2", "gpu"])), "rdzvBackend": "c10d"}
    if draw(st.booleans()):
        spec["runMode"] = {"debug": {draw(st.sampled_from(["enabled", "enable"])): True,
                                     "replicaSpecs": [{"type": types[0], "command": ["sleep", "inf"]}]}}
    if draw(st.booleans()):
        spec["tensorboardSpec"] = {"logDir": {"pvc": [{"name": "logs", "subPath": ["runs/a"]}]}}
    return {"apiVersion": "batch.tensorstack.dev/v1beta1", "kind": "PyTorchTrainingJob", "metadata": {"name": name},
            "spec": spec}


@st.composite
def trainjob(draw: st.DrawFn) -> dict[str, Any]:
    trainer: dict[str, Any] = {"numNodes": draw(st.integers(1, 4)), "command": draw(COMMANDS)}
    if draw(st.booleans()):
        trainer["numProcPerNode"] = draw(st.integers(1, 4))
    if draw(st.booleans()):
        trainer["env"] = [{"name": "LR", "value": "0.1"}, {"name": "OUT", "value": "/out/$(LR)"}]
    if draw(st.booleans()):
        trainer["resourcesPerNode"] = {"limits": draw(st.sampled_from([{"cpu": "2"}, {"nvidia.com/gpu": 1}]))}
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": draw(NAMES)},
            "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": trainer}}


@st.composite
def runtime(draw: st.DrawFn) -> dict[str, Any]:
    """A platform team's TrainingRuntime `team-rt`, Trainer v2.3's or v2.0/v2.1's (numProcPerNode,
    elasticPolicy), with a gang policy, a side container and a volume."""
    torch: dict[str, Any] = {}
    if draw(st.booleans()):
        torch["numProcPerNode"] = draw(st.sampled_from(["auto", "cpu", "gpu", 2]))
    ml: dict[str, Any] = {"torch": torch}
    if draw(st.booleans()):
        torch["elasticPolicy"] = {"minNodes": 1, "maxNodes": 4, "maxRestarts": 2}
    else:
        ml["numNodes"] = draw(st.integers(1, 3))
    node: dict[str, Any] = {"name": "node", "image": "train:1", "env": [{"name": "HF_HOME", "value": "/data/hf"}],
                            "volumeMounts": [{"name": "data", "mountPath": "/data"}]}
    pod = {"spec": {"containers": [{"name": "sidecar", "image": "exporter:1"}, node],
                    "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "team-data"}}]}}
    job = {"name": "trainer", "template": {"metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step":
                                                                    "trainer"}},
                                           "spec": {"backoffLimit": draw(st.integers(0, 6)), "template": pod}}}
    spec: dict[str, Any] = {"mlPolicy": ml, "template": {"spec": {"replicatedJobs": [job]}}}
    if draw(st.booleans()):
        spec["podGroupPolicy"] = draw(st.sampled_from([{"coscheduling": {"scheduleTimeoutSeconds": 30}},
                                                       {"volcano": {}}]))
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainingRuntime",
            "metadata": {"name": "team-rt"}, "spec": spec}


def on_team_runtime(data: dict[str, Any]) -> dict[str, Any]:
    """A TrainJob that names the `team-rt` runtime."""
    return {**data, "spec": {**data["spec"], "runtimeRef": {"name": "team-rt", "kind": "TrainingRuntime"}}}


# A TrainJob and the runtime it names: two documents (in one file, or the runtime in a --runtime FILE).
WITH_RUNTIME = st.tuples(trainjob().map(on_team_runtime), runtime()).map(list)


def native(data: dict[str, Any]) -> dict[str, Any]:
    """A Kubeflow document as a native TorchJob (the same spec)."""
    return {**data, "apiVersion": "torchjob.dev/v1", "kind": "TorchJob"}


DOCUMENTS = st.one_of(kubeflow(), kubeflow().map(native), volcano(), t9k(), trainjob())
