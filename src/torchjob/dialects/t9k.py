"""T9k `batch.tensorstack.dev/v1beta1` `PyTorchTrainingJob` -> `TorchJob`.

- `replicaSpecs[]` with `type` master/worker; with one type only, its first replica is the
  master (T9k's rule): `worker x 4` becomes Master 1 + Worker 3 with the same template.
- `torchrunConfig.enable`: the training container (the one named `python`, else the first: T9k's
  rule) runs `torchrun <torchrun args> <its args>`; its `command` gives way, so `command: [python]`
  with `args: [train.py]` or `args: [-m, pkg.module]` works in both modes. `procPerNode` (a number
  or `gpu`) -> nprocPerNode; `minNodes`, `maxRestarts`, `rdzvBackend` -> elasticPolicy.
- `runPolicy.backoffLimit` (shared by all replicas, as natively), `activeDeadlineSeconds`,
  `cleanUpPolicy` (None/All/Unfinished) -> runPolicy; `scheduler.t9kScheduler` queue and priority
  -> schedulingPolicy; `runMode.debug` -> runMode; `tensorboardSpec` -> tensorboard.
"""

from __future__ import annotations

import copy
from typing import Any

from torchjob.api.load import job_from_data
from torchjob.api.model import API_VERSION as NATIVE_API
from torchjob.api.model import KIND as NATIVE_KIND
from torchjob.api.model import MASTER, WORKER
from torchjob.api.source import Document
from torchjob.dialects import Converted, Notes

API_VERSION = "batch.tensorstack.dev/v1beta1"
KIND = "PyTorchTrainingJob"
SPEC_FIELDS = {"replicaSpecs", "torchrunConfig", "runPolicy", "scheduler", "runMode", "tensorboardSpec"}
TORCHRUN_FIELDS = {"enable", "minNodes", "maxRestarts", "procPerNode", "rdzvBackend", "extraOptions"}
TRAINING_CONTAINER = "python"  # T9k's rule for which container torchrun replaces


def _training_container(containers: list[dict[str, Any]]) -> int:
    for i, c in enumerate(containers):
        if c.get("name") == TRAINING_CONTAINER:
            return i
    return 0


def read(doc: Document) -> Converted:
    notes = Notes(doc)
    data = doc.data
    notes.unknown(data, {"apiVersion", "kind", "metadata", "spec", "status"}, [])
    if "status" in data:
        notes.warn(["status"], "a status is output, not input; ignored")
    spec = notes.section(data, "spec", [])
    notes.unknown(spec, SPEC_FIELDS, ["spec"])
    tr = notes.section(spec, "torchrunConfig", ["spec"])
    notes.unknown(tr, TORCHRUN_FIELDS, ["spec", "torchrunConfig"])
    torchrun = bool(tr.get("enable"))

    by_type: dict[str, tuple[int, dict[str, Any]]] = {}
    for i, rs in notes.items(spec, "replicaSpecs", ["spec"]):
        notes.unknown(rs, {"type", "replicas", "restartPolicy", "template"}, ["spec", "replicaSpecs", i])
        rtype = str(rs.get("type", "")).lower()
        if rtype not in ("master", "worker"):
            notes.error(["spec", "replicaSpecs", i, "type"], f"replica type {rs.get('type')!r} is not master or worker",
                        "use type: master or type: worker")
        elif rtype in by_type:
            notes.error(["spec", "replicaSpecs", i, "type"], f"type {rtype!r} appears twice", "merge them")
        else:
            by_type[rtype] = (i, rs)
    if not by_type and not notes.errors:
        notes.error(["spec", "replicaSpecs"], "no replicas are defined", "add a replica spec of type worker")
    if "master" in by_type and by_type["master"][1].get("replicas", 1) != 1:
        i = by_type["master"][0]
        notes.error(["spec", "replicaSpecs", i, "replicas"], "a job has exactly one master",
                    "set replicas: 1 and put the others in a worker replica spec")
    notes.raise_if_any()

    def replica(i: int, rs: dict[str, Any], count: int, rtype: str) -> dict[str, Any]:
        template = copy.deepcopy(rs.get("template") or {})
        containers = template.get("spec", {}).get("containers") or []
        native: tuple[str | int, ...] = ("spec", "pytorchReplicaSpecs", rtype)
        doc.aliases.append((native, ("spec", "replicaSpecs", i)))
        if containers:
            ci = _training_container(containers)
            if ci:  # torchjob's training container is the first one not named otherwise
                containers.insert(0, containers.pop(ci))
                order = [ci, *[k for k in range(len(containers)) if k != ci]]
                for new_index, old_index in enumerate(order):
                    doc.aliases.append(((*native, "template", "spec", "containers", new_index),
                                        ("spec", "replicaSpecs", i, "template", "spec", "containers", old_index)))
            if torchrun:
                c = containers[0]
                command = [str(a) for a in c.get("command") or []]
                if len(command) > 1:
                    # T9k replaces the whole command; a script written there would be lost silently.
                    notes.warn(["spec", "replicaSpecs", i, "template", "spec", "containers", ci, "command"],
                               f"torchrun replaces the command; its arguments {command[1:]} are kept as the "
                               "script's (put them under args to silence this)")
                    c["args"] = [*command[1:], *[str(a) for a in c.get("args") or []]]
                c["command"] = ["torchrun", *[str(o) for o in tr.get("extraOptions") or []]]
        out: dict[str, Any] = {"replicas": count, "template": template}
        if "restartPolicy" in rs:
            out["restartPolicy"] = rs["restartPolicy"]
        return out

    replicas: dict[str, Any] = {}
    if "master" in by_type:
        i, rs = by_type["master"]
        replicas[MASTER] = replica(i, rs, 1, MASTER)
        if "worker" in by_type:
            i, rs = by_type["worker"]
            replicas[WORKER] = replica(i, rs, int(rs.get("replicas", 1)), WORKER)
    else:  # one type: its first replica is the master
        i, rs = by_type["worker"]
        count = int(rs.get("replicas", 1))
        replicas[MASTER] = replica(i, rs, 1, MASTER)
        if count > 1:
            replicas[WORKER] = replica(i, rs, count - 1, WORKER)

    native_spec: dict[str, Any] = {"pytorchReplicaSpecs": replicas}
    total = sum(int(r["replicas"]) for r in replicas.values())
    if torchrun:
        native_spec["nprocPerNode"] = str(tr.get("procPerNode", "1"))
        doc.aliases += [
            (("spec", "nprocPerNode"), ("spec", "torchrunConfig", "procPerNode")),
            (("spec", "elasticPolicy", "minReplicas"), ("spec", "torchrunConfig", "minNodes")),
            (("spec", "elasticPolicy", "maxRestarts"), ("spec", "torchrunConfig", "maxRestarts")),
            (("spec", "elasticPolicy", "rdzvBackend"), ("spec", "torchrunConfig", "rdzvBackend")),
        ]
        if WORKER in replicas:
            native_spec["elasticPolicy"] = {
                k: v for k, v in (("minReplicas", tr.get("minNodes", total)), ("maxReplicas", total),
                                  ("maxRestarts", tr.get("maxRestarts")), ("rdzvBackend", tr.get("rdzvBackend")))
                if v is not None
            }
    rp_in = notes.section(spec, "runPolicy", ["spec"])
    notes.unknown(rp_in, {"backoffLimit", "activeDeadlineSeconds", "cleanUpPolicy"}, ["spec", "runPolicy"])
    rp: dict[str, Any] = {k: rp_in[k] for k in ("backoffLimit", "activeDeadlineSeconds") if k in rp_in}
    if "cleanUpPolicy" in rp_in:
        rp["cleanPodPolicy"] = rp_in["cleanUpPolicy"]
        doc.aliases.append((("spec", "runPolicy", "cleanPodPolicy"), ("spec", "runPolicy", "cleanUpPolicy")))
    sched = (spec.get("scheduler") or {}).get("t9kScheduler")
    if sched:
        rp["schedulingPolicy"] = {"schedulerName": "t9k-scheduler",
                                  **{k: sched[k] for k in ("queue", "priority") if k in sched}}
    if rp:
        native_spec["runPolicy"] = rp
    debug = (spec.get("runMode") or {}).get("debug")
    if debug:
        native_spec["runMode"] = {"debug": {"enabled": bool(debug.get("enable")),
                                            **({"replicaSpecs": debug["replicaSpecs"]}
                                               if debug.get("replicaSpecs") else {})}}
        for i, d in enumerate(debug.get("replicaSpecs") or []):
            if d.get("skipInitContainer") is False:
                continue
            if d.get("skipInitContainer"):
                notes.warn(["spec", "runMode", "debug", "replicaSpecs", i, "skipInitContainer"],
                           "init containers are never run locally")
    tb = spec.get("tensorboardSpec")
    if tb:
        native_spec["tensorboard"] = {"logDirs": list(tb.get("trainingLogFilesets") or []),
                                      **({"image": tb["image"]} if "image" in tb else {})}
    notes.raise_if_any()
    native = {"apiVersion": NATIVE_API, "kind": NATIVE_KIND, "metadata": copy.deepcopy(data.get("metadata")),
              "spec": native_spec}
    return Converted(job_from_data(native, doc), notes.warnings)
