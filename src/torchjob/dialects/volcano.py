"""Volcano `batch.volcano.sh/v1alpha1` `Job` with the `pytorch` plugin <-> `TorchJob`.

The plugin's `--master`/`--worker` name the tasks that become the master and the workers, and
`--port` the master's port. Volcano silently runs a job without env when the master task is
missing, and gives every master replica RANK 0 (research/volcano.md §1.4); here both are errors.
`maxRetry` is read as a count of retries (Volcano counts runs: its #2012), into `backoffLimit`.
"""

from __future__ import annotations

import copy
from typing import Any

from torchjob.api.errors import UserError
from torchjob.api.load import job_from_data
from torchjob.api.model import API_VERSION as NATIVE_API
from torchjob.api.model import DEFAULT_PORT, MASTER, PORT_NAME, WORKER
from torchjob.api.model import KIND as NATIVE_KIND
from torchjob.api.pod import training_container, training_container_of_data
from torchjob.api.source import Document
from torchjob.api.validate import digits
from torchjob.dialects import Converted, Notes

API_VERSION = "batch.volcano.sh/v1alpha1"
KIND = "Job"
VOLCANO_DEFAULT_MAX_RETRY = 3
JOB_FIELDS = {
    "schedulerName", "minAvailable", "volumes", "tasks", "policies", "plugins", "runningEstimate", "queue",
    "maxRetry", "ttlSecondsAfterFinished", "priorityClassName", "minSuccess", "networkTopology",
}
TASK_FIELDS = {
    "name", "replicas", "minAvailable", "template", "policies", "topologyPolicy", "maxRetry", "dependsOn",
    "partitionPolicy",
}
WARN_ONLY_JOB = {"runningEstimate": "no consumer in Volcano either", "networkTopology": "a scheduler placement hint"}
WARN_ONLY_TASK = {"minAvailable": "a per-task gang size", "topologyPolicy": "a NUMA placement hint",
                  "partitionPolicy": "a scheduler partitioning hint"}


PYTORCH_FLAGS = {"master": "master", "worker": "worker", "port": str(DEFAULT_PORT), "wait-master-enabled": "false",
                 "wait-master-timeout": "300", "wait-master-image": "busybox:1.36.1"}  # Volcano's defaults
SVC_FLAGS = {"publish-not-ready-addresses", "disable-network-policy", "inject-hosts-env"}
BOOL_FLAGS = {"wait-master-enabled", "publish-not-ready-addresses", "disable-network-policy", "inject-hosts-env"}
GO_TRUE, GO_FALSE = ("1", "t", "T", "TRUE", "true", "True"), ("0", "f", "F", "FALSE", "false", "False")


def _flags(notes: Notes, args: list[Any], path: list[str | int], known: set[str]) -> dict[str, str]:
    """Plugin arguments as Go's `flag` package reads them (`-name`, `--name`, `=value` or the next
    argument, a bare boolean flag is true). Volcano only logs a bad flag and silently stops parsing
    there (research/volcano.md §1.1); here each is an error."""
    out: dict[str, str] = {}
    items = [str(a) for a in args]
    i = 0
    while i < len(items):
        arg, i = items[i], i + 1
        if arg == "--":
            break
        if not arg.startswith("-") or arg == "-":
            notes.error(path, f"{arg!r} is not a flag (Volcano would ignore it and every argument after it)",
                        "write each as --name=value")
            break
        key, eq, value = arg.lstrip("-").partition("=")
        if key not in known:
            notes.error(path, f"unknown flag --{key}", "use " + ", ".join(f"--{k}" for k in sorted(known)))
            continue
        if key in BOOL_FLAGS:
            if not eq:
                value = "true"
            elif value not in GO_TRUE + GO_FALSE:
                notes.error(path, f"--{key}={value} is not a boolean", f"use --{key}=true or --{key}=false")
                continue
            value = "true" if value in GO_TRUE else "false"
        elif not eq:
            if i == len(items):
                notes.error(path, f"--{key} needs a value", f"write --{key}=VALUE")
                continue
            value, i = items[i], i + 1
        out[key] = value
    return out


def _wait_for_master(notes: Notes, flags: dict[str, str], path: list[str | int]) -> dict[str, Any] | None:
    """Volcano's wait-for-master init container (worker pods): its image and timeout; None leaves
    torchjob's default (the workers wait, with the operator's image, without a limit)."""
    if "wait-master-enabled" not in flags:
        for key in ("wait-master-timeout", "wait-master-image"):
            if key in flags:
                notes.warn(path, f"--{key} is ignored without --wait-master-enabled (as Volcano ignores it)")
        return None
    if flags["wait-master-enabled"] == "false":
        return {"enabled": False}
    timeout = flags.get("wait-master-timeout", PYTORCH_FLAGS["wait-master-timeout"])
    if not digits(timeout) or int(timeout) < 1:
        notes.error(path, f"--wait-master-timeout={timeout} is not a positive number of seconds", "e.g. 300")
        timeout = PYTORCH_FLAGS["wait-master-timeout"]
    return {"enabled": True, "timeoutSeconds": int(timeout),
            "image": flags.get("wait-master-image") or PYTORCH_FLAGS["wait-master-image"]}


def read(doc: Document) -> Converted:
    notes = Notes(doc)
    data = doc.data
    notes.top_level()
    spec = notes.section(data, "spec", [])
    notes.unknown(spec, JOB_FIELDS, ["spec"])
    for key, why in WARN_ONLY_JOB.items():
        if key in spec:
            notes.warn(["spec", key], f"ignored by torchjob ({why})")
    if spec.get("volumes"):
        notes.error(["spec", "volumes"], "job-level volumes (PVCs Volcano creates) are not supported",
                    "declare the volumes in the task templates instead")

    plugins = notes.section(spec, "plugins", ["spec"])
    if "pytorch" not in plugins:
        notes.error(["spec", "plugins"], "a Volcano Job runs on torchjob through its pytorch plugin",
                    'add plugins: {pytorch: ["--master=master", "--worker=worker", "--port=23456"]}')
        notes.raise_if_any()
    for name in plugins:
        if name == "ssh":
            notes.warn(["spec", "plugins", "ssh"], "torchjob does not set up ssh between replicas; ignored")
        elif name not in ("pytorch", "svc", "env"):
            notes.error(["spec", "plugins", name], f"plugin {name!r} is not supported",
                        "torchjob supports the pytorch, svc and env plugins")
    for name in ("pytorch", "svc", "env"):
        if plugins.get(name) is not None and not isinstance(plugins[name], list):
            notes.error(["spec", "plugins", name], "plugin arguments must be a list", f'e.g. {name}: ["--flag=value"]')
            plugins[name] = []
    ppath: list[str | int] = ["spec", "plugins", "pytorch"]
    flags = _flags(notes, plugins.get("pytorch") or [], ppath, set(PYTORCH_FLAGS))
    master_name, worker_name = flags.get("master") or "master", flags.get("worker") or "worker"
    if master_name == worker_name:
        notes.error(ppath, f"--master and --worker both name task {master_name!r}",
                    "give the master and the workers tasks of their own")
    port_text = flags.get("port") or str(DEFAULT_PORT)
    if not digits(port_text) or not 1 <= int(port_text) <= 65535:
        notes.error(ppath, f"--port={port_text} is not a port", "use 1-65535")
        port_text = str(DEFAULT_PORT)
    wait = _wait_for_master(notes, flags, ppath)
    svc = _flags(notes, plugins.get("svc") or [], ["spec", "plugins", "svc"], SVC_FLAGS)
    hosts = svc.get("inject-hosts-env", "true") != "false"  # svc is forced by the pytorch plugin
    for key in ("publish-not-ready-addresses", "disable-network-policy"):
        if key in svc:
            notes.warn(["spec", "plugins", "svc"], f"--{key} is ignored: torchjob's headless Service always "
                       "publishes not-ready addresses and makes no NetworkPolicy")

    by_name: dict[str, tuple[int, dict[str, Any]]] = {}
    for i, task in notes.items(spec, "tasks", ["spec"]):
        notes.unknown(task, TASK_FIELDS, ["spec", "tasks", i])
        for key, why in WARN_ONLY_TASK.items():
            if key in task:
                notes.warn(["spec", "tasks", i, key], f"ignored by torchjob ({why})")
        name = str(task.get("name", f"default{i}"))
        if name in by_name:
            notes.error(["spec", "tasks", i, "name"], f"a second task is named {name!r}",
                        "give every task its own name")
            continue
        if not isinstance(task.get("replicas", 1), int) or isinstance(task.get("replicas"), bool):
            notes.error(["spec", "tasks", i, "replicas"], f"must be an integer, got {task.get('replicas')!r}")
            by_name[name] = (i, {**task, "replicas": 1})
            continue
        if name not in (master_name, worker_name):
            notes.error(["spec", "tasks", i, "name"],
                        f"task {name!r} is neither the master task ({master_name!r}) nor the worker task "
                        f"({worker_name!r}) of the pytorch plugin",
                        "name it after --master/--worker, or run it as a separate job")
        by_name[name] = (i, task)
    if master_name not in by_name:
        notes.error(["spec", "tasks"], f"no task is named {master_name!r}, the pytorch plugin's master task "
                    "(Volcano would run the job without any distributed env)",
                    f"name the master task {master_name!r} or set --master=NAME")
    else:
        i, task = by_name[master_name]
        if task.get("replicas", 1) != 1:
            notes.error(["spec", "tasks", i, "replicas"],
                        f"the master task has {task.get('replicas')} replicas; a job has exactly one master "
                        "(Volcano would give each of them RANK 0)",
                        "set replicas: 1 and put the others in the worker task")
    notes.raise_if_any()

    native_types = {master_name: MASTER, worker_name: WORKER}
    replicas: dict[str, Any] = {}
    for name, (i, task) in by_name.items():
        rtype = native_types[name]
        given = task.get("template")
        template: dict[str, Any] = copy.deepcopy(given) if isinstance(given, dict) else {}
        pod = template.setdefault("spec", {})
        restart = pod.pop("restartPolicy", None) if isinstance(pod, dict) else "OnFailure"  # (the model says why)
        if restart is None:
            notes.warn(["spec", "tasks", i, "template", "spec"],
                       "no restartPolicy: Kubernetes would use Always; torchjob uses OnFailure")
            restart = "OnFailure"
        r: dict[str, Any] = {"replicas": task.get("replicas", 1), "restartPolicy": restart, "template": template}
        if task.get("policies"):
            r["policies"] = copy.deepcopy(task["policies"])
        if "maxRetry" in task:
            r["maxRestarts"] = task["maxRetry"]
        dep = notes.section(task, "dependsOn", ["spec", "tasks", i])
        if dep:
            names = dep.get("name")
            r["dependsOn"] = {**dep, "name": [native_types.get(str(n), str(n)) for n in names]
                              if isinstance(names, list) else names}
        containers = pod.get("containers") if isinstance(pod, dict) else None
        if rtype == MASTER and int(port_text) != DEFAULT_PORT and isinstance(containers, list) and containers:
            c = containers[training_container_of_data(containers)]
            ports = c.setdefault("ports", []) if isinstance(c, dict) else None
            if isinstance(ports, list) and not any(isinstance(p, dict) and p.get("name") == PORT_NAME
                                                   for p in ports):
                ports.append({"name": PORT_NAME, "containerPort": int(port_text)})
        replicas[rtype] = r
        prefix: tuple[str | int, ...] = ("spec", "pytorchReplicaSpecs", rtype)
        doc.aliases += [
            (prefix, ("spec", "tasks", i)),
            ((*prefix, "restartPolicy"), ("spec", "tasks", i, "template", "spec", "restartPolicy")),
            ((*prefix, "maxRestarts"), ("spec", "tasks", i, "maxRetry")),
        ]

    run_policy: dict[str, Any] = {"backoffLimit": spec.get("maxRetry", VOLCANO_DEFAULT_MAX_RETRY)}
    doc.aliases.append((("spec", "runPolicy", "backoffLimit"), ("spec", "maxRetry")))
    if "ttlSecondsAfterFinished" in spec:
        run_policy["ttlSecondsAfterFinished"] = spec["ttlSecondsAfterFinished"]
    scheduling = {k: spec[src] for k, src in (("minAvailable", "minAvailable"), ("queue", "queue"),
                  ("priorityClass", "priorityClassName"), ("schedulerName", "schedulerName")) if src in spec}
    if scheduling:
        run_policy["schedulingPolicy"] = scheduling
    native_spec: dict[str, Any] = {"pytorchReplicaSpecs": replicas, "runPolicy": run_policy}
    if spec.get("policies"):
        native_spec["policies"] = copy.deepcopy(spec["policies"])
        doc.aliases.append((("spec", "policies"), ("spec", "policies")))
    if "minSuccess" in spec:
        native_spec["minSuccess"] = spec["minSuccess"]
    volcano: dict[str, Any] = {"hosts": hosts, "taskIndex": "env" in plugins}
    if (master_name, worker_name) != ("master", "worker"):
        volcano["taskNames"] = {MASTER: master_name, WORKER: worker_name}
    if hosts or volcano["taskIndex"] or "taskNames" in volcano:
        native_spec["volcano"] = volcano
    if wait is not None:
        native_spec["waitForMaster"] = wait
        doc.aliases.append((("spec", "waitForMaster"), ("spec", "plugins", "pytorch")))
    notes.raise_if_any()
    native = {"apiVersion": NATIVE_API, "kind": NATIVE_KIND, "metadata": copy.deepcopy(data.get("metadata")),
              "spec": native_spec}
    return Converted(job_from_data(native, doc), notes.warnings)


def write(job_data: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Native job data (explicit) -> a Volcano Job with the pytorch plugin, and what was lost."""
    from torchjob.api.model import TorchJob
    from torchjob.api.spec_facts import master_port, volcano_task

    lost: list[str] = []
    job = TorchJob.model_validate(job_data)
    spec = job_data["spec"]
    if MASTER not in spec["pytorchReplicaSpecs"]:
        raise UserError("a job without a Master cannot be written as a Volcano Job: the pytorch plugin needs a "
                        "master task", fix="add a Master replica spec, or keep the job as a TorchJob or PyTorchJob")
    rp = spec.get("runPolicy") or {}
    names = {rtype: volcano_task(job, rtype) for rtype in spec["pytorchReplicaSpecs"]}
    tasks = []
    for rtype, rspec in spec["pytorchReplicaSpecs"].items():
        template = copy.deepcopy(rspec["template"])
        restart = rspec.get("restartPolicy", "OnFailure")
        if restart == "ExitCode":
            lost.append(f"{rtype}: restartPolicy ExitCode has no Volcano equivalent; written as Never "
                        "(add exitCode policies to restart on chosen codes)")
            restart = "Never"
        template.setdefault("spec", {})["restartPolicy"] = restart
        if rtype == MASTER:
            c = template["spec"]["containers"][training_container(job.spec.pytorchReplicaSpecs[MASTER]
                                                                  .template.spec.containers)]
            c["ports"] = [p for p in c.get("ports", []) if p.get("name") != PORT_NAME] or None
            if c["ports"] is None:
                del c["ports"]
        task: dict[str, Any] = {"name": names[rtype], "replicas": rspec.get("replicas", 1), "template": template}
        if rspec.get("policies"):
            task["policies"] = copy.deepcopy(rspec["policies"])
        if "maxRestarts" in rspec:
            task["maxRetry"] = rspec["maxRestarts"]
        if rspec.get("dependsOn"):
            dep = rspec["dependsOn"]
            task["dependsOn"] = {**dep, "name": [names.get(n, n) for n in dep["name"]]}
        tasks.append(task)
    vc = spec.get("volcano") or {}
    plugins: dict[str, list[str]] = {
        "pytorch": [f"--master={names.get(MASTER, 'master')}", f"--worker={names.get(WORKER, 'worker')}",
                    f"--port={master_port(job)}"],
        "svc": [] if vc.get("hosts") else ["--inject-hosts-env=false"],
    }
    if vc.get("taskIndex"):
        plugins["env"] = []
    wait = spec.get("waitForMaster")
    if wait is not None:
        plugins["pytorch"].append(f"--wait-master-enabled={'true' if wait.get('enabled', True) else 'false'}")
        if wait.get("enabled", True):
            if "timeoutSeconds" in wait:
                plugins["pytorch"].append(f"--wait-master-timeout={wait['timeoutSeconds']}")
            else:
                lost.append("waitForMaster without timeoutSeconds (no limit) is written as Volcano's default, "
                            "--wait-master-timeout=300")
            if "image" in wait:
                plugins["pytorch"].append(f"--wait-master-image={wait['image']}")
    out_spec: dict[str, Any] = {"tasks": tasks, "plugins": plugins}
    if "backoffLimit" in rp:
        out_spec["maxRetry"] = rp["backoffLimit"]
    else:
        lost.append("runPolicy.backoffLimit unset (no limit) has no Volcano equivalent; Volcano's default "
                    f"maxRetry is {VOLCANO_DEFAULT_MAX_RETRY}")
    sp = rp.get("schedulingPolicy") or {}
    for key, dest in (("minAvailable", "minAvailable"), ("queue", "queue"), ("priorityClass", "priorityClassName"),
                      ("schedulerName", "schedulerName")):
        if key in sp:
            out_spec[dest] = sp[key]
    for key in ("minResources", "scheduleTimeoutSeconds", "priority"):
        if key in sp:
            lost.append(f"runPolicy.schedulingPolicy.{key} has no Volcano Job field")
    if "ttlSecondsAfterFinished" in rp:
        out_spec["ttlSecondsAfterFinished"] = rp["ttlSecondsAfterFinished"]
    for key in ("activeDeadlineSeconds", "cleanPodPolicy", "suspend", "managedBy"):
        if key in rp:
            lost.append(f"runPolicy.{key} has no Volcano Job field")
    if spec.get("policies"):
        out_spec["policies"] = copy.deepcopy(spec["policies"])
    if "minSuccess" in spec:
        out_spec["minSuccess"] = spec["minSuccess"]
    for key in ("elasticPolicy", "nprocPerNode", "runMode", "tensorboard", "initializers", "volumeClaims"):
        if key in spec:
            lost.append(f"spec.{key} has no Volcano equivalent")
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": copy.deepcopy(job_data["metadata"]),
            "spec": out_spec}, lost
