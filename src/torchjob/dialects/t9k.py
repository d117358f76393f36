"""T9k `batch.tensorstack.dev/v1beta1` `PyTorchTrainingJob` -> `TorchJob`.

As T9k's API reference (t9k/user-manuals, references/api-reference/pytorchtrainingjob.md) and its
user guide (modules/jobs/pytorchtrainingjob.md) write it:
- `replicaSpecs[].type` is a free string (`worker`, `node`, `ps`, `master`, ...): the replicas in
  document order, the first is the master and the rest are workers (T9k: "the first training
  replica is the master"). torchjob's workers share one template, so the replica specs after the
  first replica must agree (or the job is refused, naming them).
- `torchrunConfig.enabled` (the seed's `enable` too): the training container (the one named
  `python`, else the first) runs `torchrun <extraOptions> <its args>`; its `command` gives way.
  `procPerNode` -> nprocPerNode; `minNodes` (the seed's), `maxRestarts`, `rdzvBackend` and
  `elastic` (`minReplicas`, `maxReplicas`, `expectedReplicas`) -> elastic c10d rendezvous.
- `runPolicy` (`backoffLimit`, `activeDeadlineSeconds`, `cleanUpPolicy`), `scheduler.t9kScheduler`,
  `runMode.debug` (a debug spec's `type` is the T9k type: it reaches every replica of that type,
  the master included), `runMode.pause` (-> suspend) and `tensorboardSpec` (`trainingLogFilesets`,
  `logDir.pvc`/`.s3`, `resources`) map to native fields.
"""

from __future__ import annotations

import copy
from typing import Any

from torchjob.api.load import job_from_data
from torchjob.api.model import API_VERSION as NATIVE_API
from torchjob.api.model import KIND as NATIVE_KIND
from torchjob.api.model import MASTER, T9K_PVC, WORKER
from torchjob.api.pod import training_container_of_data
from torchjob.api.source import Document
from torchjob.dialects import Converted, Notes

API_VERSION = "batch.tensorstack.dev/v1beta1"
KIND = "PyTorchTrainingJob"
SPEC_FIELDS = {"replicaSpecs", "elastic", "torchrunConfig", "runPolicy", "scheduler", "runMode", "tensorboardSpec"}
TORCHRUN_FIELDS = {"enabled", "enable", "minNodes", "maxRestarts", "procPerNode", "rdzvBackend", "extraOptions"}
REPLICA_FIELDS = {"type", "replicas", "restartPolicy", "template", "scalingWeight"}
TRAINING_CONTAINER = "python"  # T9k's rule for which container torchrun replaces
Path = list[str | int]


def _enabled(notes: Notes, data: dict[str, Any], path: Path) -> bool:
    """`enabled` as the reference writes it, or `enable` as the seed does; never silently off."""
    values = {k: notes.boolean(data, k, path) for k in ("enabled", "enable") if data.get(k) is not None}
    if len(set(values.values())) > 1:
        notes.error(path, "enabled and enable disagree", "keep one: enabled (the API reference's spelling)")
    on = any(values.values())
    empty = [k for k in ("enabled", "enable") if k in data and data[k] is None]
    if not values and empty:  # `enabled:` with no value is YAML's null: off, as Kubernetes reads it
        notes.warn([*path, empty[0]], "has no value, so it is off (write enabled: true to turn it on)")
    elif not values and set(data) - {"enabled", "enable"}:
        notes.warn(path, "has no enabled: true, so it is off and its other fields are unused")
    return on


def _replica_specs(notes: Notes, spec: dict[str, Any]) -> list[tuple[int, dict[str, Any], str, int]]:
    """(index, replica spec, its type, its replica count) in document order."""
    out: list[tuple[int, dict[str, Any], str, int]] = []
    seen: set[str] = set()
    for i, rs in notes.items(spec, "replicaSpecs", ["spec"]):
        path: Path = ["spec", "replicaSpecs", i]
        notes.unknown(rs, REPLICA_FIELDS, path)
        if "scalingWeight" in rs:
            notes.warn([*path, "scalingWeight"], "ignored: torchjob does not scale a running job")
        rtype = rs.get("type")
        if not isinstance(rtype, str) or not rtype:
            notes.error([*path, "type"], f"replica type {rtype!r} is not a name", "e.g. type: worker")
            continue
        if rtype.lower() in seen:
            notes.error([*path, "type"], f"type {rtype!r} appears twice", "merge them")
            continue
        seen.add(rtype.lower())
        count = notes.integer(rs, "replicas", path, minimum=1)
        out.append((i, rs, rtype, 1 if count is None else count))
    if not out and not notes.errors:
        notes.error(["spec", "replicaSpecs"], "no replicas are defined", "add a replica spec, e.g. type: worker")
    return out


def _same_replicas(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return all(a.get(k) == b.get(k) for k in ("template", "restartPolicy"))


def _roles(notes: Notes, specs: list[tuple[int, dict[str, Any], str, int]],
           expected: int | None) -> tuple[dict[str, tuple[int, dict[str, Any], int]], dict[str, set[str]]]:
    """Native replica type -> (T9k index, replica spec, count), and T9k type -> native types."""
    if expected is not None:
        if len(specs) != 1:
            notes.error(["spec", "elastic", "expectedReplicas"], "names one count for several replica specs",
                        "use one replica spec with an elastic job, or drop expectedReplicas")
        else:
            specs = [(*specs[0][:3], expected)]
    i0, first, type0, count0 = specs[0]
    roles = {MASTER: (i0, first, 1)}
    natives: dict[str, set[str]] = {type0.lower(): {"master"}}
    rest = [(i0, first, type0, count0 - 1)] if count0 > 1 else []
    rest += specs[1:]
    for i, _, rtype, _ in specs[1:]:
        if rtype.lower() == "master":
            notes.warn(["spec", "replicaSpecs", i, "type"], f"type {rtype!r} is not the first replica spec; T9k "
                       f"makes the first replica (type {type0!r}) the master, so these replicas are workers")
    if rest:
        iw, worker, _, _ = rest[0]
        for i, rs, rtype, _ in rest[1:]:
            if not _same_replicas(worker, rs):
                notes.error(["spec", "replicaSpecs", i],
                            f"type {rtype!r} differs from replica spec {iw}: after the master, torchjob's workers "
                            "share one template and restart policy",
                            "give these replicas the same template, or run them as a separate job")
        roles[WORKER] = (iw, worker, sum(c for *_, c in rest))
        for _, _, rtype, _ in rest:
            natives.setdefault(rtype.lower(), set()).add("worker")
    return roles, natives


def _replica(doc: Document, notes: Notes, i: int, rs: dict[str, Any], count: int, rtype: str,
             torchrun: list[str] | None) -> dict[str, Any]:
    given = rs.get("template")
    template: dict[str, Any] = copy.deepcopy(given) if isinstance(given, dict) else {}
    pod = template.get("spec")
    containers = pod.get("containers") if isinstance(pod, dict) else None
    native: tuple[str | int, ...] = ("spec", "pytorchReplicaSpecs", rtype)
    doc.aliases.append((native, ("spec", "replicaSpecs", i)))
    if isinstance(containers, list) and containers:
        ci = training_container_of_data(containers, TRAINING_CONTAINER)
        if ci:  # torchjob's training container is the first one not named otherwise
            containers.insert(0, containers.pop(ci))
            order = [ci, *[k for k in range(len(containers)) if k != ci]]
            for new_index, old_index in enumerate(order):
                doc.aliases.append(((*native, "template", "spec", "containers", new_index),
                                    ("spec", "replicaSpecs", i, "template", "spec", "containers", old_index)))
        c = containers[0]
        if torchrun is not None and isinstance(c, dict):
            cpath: Path = ["spec", "replicaSpecs", i, "template", "spec", "containers", ci]
            command = notes.strings(c, "command", cpath)
            if len(command) > 1:
                # T9k replaces the whole command; a script written there would be lost silently.
                notes.warn([*cpath, "command"], f"torchrun replaces the command; its arguments {command[1:]} are "
                           "kept as the script's (put them under args to silence this)")
                c["args"] = [*command[1:], *notes.strings(c, "args", cpath)]
            c["command"] = ["torchrun", *torchrun]
    out: dict[str, Any] = {"replicas": count, "template": template}
    if "restartPolicy" in rs:
        out["restartPolicy"] = rs["restartPolicy"]
    return out


def _torchrun(notes: Notes, spec: dict[str, Any], roles: dict[str, Any], native_spec: dict[str, Any],
              doc: Document) -> None:
    tr = notes.section(spec, "torchrunConfig", ["spec"])
    el = notes.section(spec, "elastic", ["spec"])
    notes.unknown(el, {"enabled", "minReplicas", "maxReplicas", "expectedReplicas"}, ["spec", "elastic"])
    elastic = _enabled(notes, el, ["spec", "elastic"]) if el else False
    total = sum(count for _, _, count in roles.values())
    native_spec["nprocPerNode"] = str(tr.get("procPerNode", "1"))
    doc.aliases += [
        (("spec", "nprocPerNode"), ("spec", "torchrunConfig", "procPerNode")),
        (("spec", "elasticPolicy", "maxRestarts"), ("spec", "torchrunConfig", "maxRestarts")),
        (("spec", "elasticPolicy", "rdzvBackend"), ("spec", "torchrunConfig", "rdzvBackend")),
    ]
    if elastic:
        lo = notes.integer(el, "minReplicas", ["spec", "elastic"], minimum=1)
        hi = notes.integer(el, "maxReplicas", ["spec", "elastic"], minimum=1)
        bounds = (lo if lo is not None else total, hi if hi is not None else total)
        doc.aliases.append((("spec", "elasticPolicy"), ("spec", "elastic")))
        if not bounds[0] <= total <= bounds[1]:
            notes.error(["spec", "elastic"], f"the job starts {total} replicas, outside minReplicas..maxReplicas "
                        f"{bounds[0]}..{bounds[1]}", "set expectedReplicas (or replicas) within them")
    else:
        lo = notes.integer(tr, "minNodes", ["spec", "torchrunConfig"], minimum=1)
        bounds = (lo if lo is not None else total, total)
        doc.aliases.append((("spec", "elasticPolicy", "minReplicas"), ("spec", "torchrunConfig", "minNodes")))
    if WORKER in roles:
        native_spec["elasticPolicy"] = {
            k: v for k, v in (("minReplicas", bounds[0]), ("maxReplicas", bounds[1]),
                              ("maxRestarts", tr.get("maxRestarts")), ("rdzvBackend", tr.get("rdzvBackend")))
            if v is not None
        }


def _run_mode(notes: Notes, spec: dict[str, Any], natives: dict[str, set[str]], native_spec: dict[str, Any],
              run_policy: dict[str, Any]) -> None:
    mode = notes.section(spec, "runMode", ["spec"])
    notes.unknown(mode, {"debug", "pause"}, ["spec", "runMode"])
    path: Path = ["spec", "runMode", "pause"]
    pause = notes.section(mode, "pause", ["spec", "runMode"])
    notes.unknown(pause, {"enabled", "resumeSpecs"}, path)
    if pause and _enabled(notes, pause, path):
        run_policy["suspend"] = True  # T9k's pause deletes the replicas until it is turned off: a suspend
    if pause.get("resumeSpecs"):
        notes.error([*path, "resumeSpecs"], "replicas that resume with other commands are not supported",
                    "put the command to resume with in the replica's template")
    path = ["spec", "runMode", "debug"]
    debug = notes.section(mode, "debug", ["spec", "runMode"])
    notes.unknown(debug, {"enabled", "enable", "replicaSpecs"}, path)
    if not debug:
        return
    specs: list[dict[str, Any]] = []
    for i, d in notes.items(debug, "replicaSpecs", path):
        notes.unknown(d, {"type", "skipInitContainer", "command"}, [*path, "replicaSpecs", i])
        rtype = d.get("type")
        targets = natives.get(str(rtype).lower()) if isinstance(rtype, str) else None
        if targets is None:
            notes.error([*path, "replicaSpecs", i, "type"], f"{rtype!r} is not a replica type of this job",
                        f"use one of {sorted(natives)}")
            continue
        if d.get("skipInitContainer"):
            notes.warn([*path, "replicaSpecs", i, "skipInitContainer"], "init containers are never run locally")
        # The T9k type reaches every replica it made, the master too when the first spec's type is named.
        specs += [{**d, "type": t} for t in sorted(targets)]
    native_spec["runMode"] = {"debug": {"enabled": _enabled(notes, debug, path),
                                        **({"replicaSpecs": specs} if specs else {})}}


def _sub_path(notes: Notes, sub: str, path: Path) -> str:
    """A path inside a claim, normalized (`./log/` -> `log`); one that leaves the claim is refused,
    as Kubernetes refuses `..` in a volume's subPath."""
    parts = [p for p in sub.split("/") if p not in ("", ".")]
    if ".." in parts:
        notes.error([*path, "subPath"], f"{sub!r} leaves the claim ('..')", "give a path inside the claim")
    return "/".join(parts)


def _tensorboard(doc: Document, notes: Notes, spec: dict[str, Any], native_spec: dict[str, Any]) -> None:
    path: Path = ["spec", "tensorboardSpec"]
    tb = notes.section(spec, "tensorboardSpec", ["spec"])
    if not tb:
        return
    # T9k's API reference (TensorBoardSpec): trainingLogFilesets, logDir, image, suspend, scheduler, resources.
    notes.unknown(tb, {"trainingLogFilesets", "logDir", "image", "suspend", "scheduler", "resources"}, path)
    dirs = notes.strings(tb, "trainingLogFilesets", path)
    log_dir = notes.section(tb, "logDir", path)
    notes.unknown(log_dir, {"pvc", "s3", "http"}, [*path, "logDir"])
    for i, claim in notes.items(log_dir, "pvc", [*path, "logDir"]):
        cpath: Path = [*path, "logDir", "pvc", i]
        notes.unknown(claim, {"name", "subPath", "subpath"}, cpath)
        name = notes.typed(claim, "name", cpath, str, "a claim name")
        if "subpath" in claim:
            # T9k's own getting-started job (parallel training) writes `subpath`; its API spells it
            # subPath, and an API server that prunes unknown fields would drop it.
            if "subPath" in claim:
                notes.error([*cpath, "subpath"], "is given beside subPath", "keep subPath (the API's spelling)")
            else:
                notes.warn([*cpath, "subpath"], "read as subPath, the spelling of T9k's API (write subPath: an "
                           "API server that prunes unknown fields would drop subpath)")
                claim = {**claim, "subPath": claim["subpath"]}
        sub = claim.get("subPath")
        subs = [sub] if isinstance(sub, str) else notes.strings(claim, "subPath", cpath) or [""]
        dirs += [f"{T9K_PVC}{name}/{_sub_path(notes, s, cpath)}".rstrip("/") for s in subs] if name else []
    s3 = notes.section(log_dir, "s3", [*path, "logDir"])
    notes.unknown(s3, {"secretRef", "uri"}, [*path, "logDir", "s3"])
    dirs += notes.strings(s3, "uri", [*path, "logDir", "s3"])
    if "secretRef" in s3:
        notes.warn([*path, "logDir", "s3", "secretRef"], "not passed to TensorBoard: give it S3 credentials "
                   "(AWS_* in its environment) yourself")
    if "http" in log_dir:
        notes.warn([*path, "logDir", "http"], "ignored: TensorBoard reads no log directory over HTTP")
    if notes.boolean(tb, "suspend", path):
        notes.warn([*path, "suspend"], "true: no TensorBoard is started")
        return
    image = notes.typed(tb, "image", path, str, "an image name")
    sched = notes.section(tb, "scheduler", path)
    notes.unknown(sched, {"t9kScheduler"}, [*path, "scheduler"])
    if sched:
        notes.warn([*path, "scheduler"], "ignored: the TensorBoard Deployment gets the cluster's default scheduler")
    resources = notes.section(tb, "resources", path)  # a ResourceRequirements: the model checks its fields
    doc.aliases.append((("spec", "tensorboard", "resources"), ("spec", "tensorboardSpec", "resources")))
    native_spec["tensorboard"] = {"logDirs": dirs, **({"image": image} if image else {}),
                                  **({"resources": copy.deepcopy(resources)} if resources else {})}


def read(doc: Document) -> Converted:
    notes = Notes(doc)
    data = doc.data
    notes.top_level()
    spec = notes.section(data, "spec", [])
    notes.unknown(spec, SPEC_FIELDS, ["spec"])
    tr = notes.section(spec, "torchrunConfig", ["spec"])
    notes.unknown(tr, TORCHRUN_FIELDS, ["spec", "torchrunConfig"])
    torchrun = _enabled(notes, tr, ["spec", "torchrunConfig"]) if tr else False
    el = notes.section(spec, "elastic", ["spec"])
    expected = notes.integer(el, "expectedReplicas", ["spec", "elastic"], minimum=1) if torchrun else None
    if el and not torchrun:
        notes.warn(["spec", "elastic"], "ignored: T9k's elastic training is effective only in torchrun mode")
    options = notes.strings(tr, "extraOptions", ["spec", "torchrunConfig"]) if torchrun else None
    specs = _replica_specs(notes, spec)
    notes.raise_if_any()
    roles, natives = _roles(notes, specs, expected)
    notes.raise_if_any()

    replicas = {rtype: _replica(doc, notes, i, rs, count, rtype, options) for rtype, (i, rs, count) in roles.items()}
    native_spec: dict[str, Any] = {"pytorchReplicaSpecs": replicas}
    if torchrun:
        _torchrun(notes, spec, roles, native_spec, doc)
    rp_in = notes.section(spec, "runPolicy", ["spec"])
    notes.unknown(rp_in, {"backoffLimit", "activeDeadlineSeconds", "cleanUpPolicy"}, ["spec", "runPolicy"])
    rp: dict[str, Any] = {k: rp_in[k] for k in ("backoffLimit", "activeDeadlineSeconds") if k in rp_in}
    if "cleanUpPolicy" in rp_in:
        rp["cleanPodPolicy"] = rp_in["cleanUpPolicy"]
        doc.aliases.append((("spec", "runPolicy", "cleanPodPolicy"), ("spec", "runPolicy", "cleanUpPolicy")))
    scheduler = notes.section(spec, "scheduler", ["spec"])
    notes.unknown(scheduler, {"t9kScheduler"}, ["spec", "scheduler"])
    sched = notes.section(scheduler, "t9kScheduler", ["spec", "scheduler"])
    notes.unknown(sched, {"queue", "priority"}, ["spec", "scheduler", "t9kScheduler"])
    if sched:
        rp["schedulingPolicy"] = {"schedulerName": "t9k-scheduler",
                                  **{k: sched[k] for k in ("queue", "priority") if k in sched}}
        doc.aliases.append((("spec", "runPolicy", "schedulingPolicy"), ("spec", "scheduler", "t9kScheduler")))
    _run_mode(notes, spec, natives, native_spec, rp)
    if rp:
        native_spec["runPolicy"] = rp
    _tensorboard(doc, notes, spec, native_spec)
    notes.raise_if_any()
    native = {"apiVersion": NATIVE_API, "kind": NATIVE_KIND, "metadata": copy.deepcopy(data.get("metadata")),
              "spec": native_spec}
    return Converted(job_from_data(native, doc), notes.warnings)
