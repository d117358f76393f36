"""A job's pods as the client side reads them: which are the job's (those it controls), in which
order, why one waits, each as a replica attempt, and the job's events and its pods' logs (a tail
bounded in bytes). What `describe --kube`, `logs --kube`, the dashboard and a handle show of pods;
kube_runtime.py finds the job, this reads what it made."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import httpx2  # lightkube's HTTP client: a followed log's read timeout
from lightkube import Client
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Event, Pod, PodLog

from torchjob.api.errors import UserError
from torchjob.api.pod import training_index
from torchjob.api.status import ConditionType, JobStatus
from torchjob.core.round.kept import kept_tail, stacks_of
from torchjob.kube.machinery.client import parse_time, status_code, to_dict
from torchjob.kube.objects.front import inplace
from torchjob.kube.objects.labels import LABEL_INDEX, LABEL_JOB, LABEL_TYPE, replica_name
from torchjob.kube.objects.labels import attempt_of as pod_attempt
from torchjob.kube.objects.workload.pod_status import terminated
from torchjob.runtime import AttemptView, no_output

if TYPE_CHECKING:
    from torchjob.kube.served.kinds import ServedKind

# A log's tail asks the API server for at most this many bytes too: a reader's memory (the dashboard's,
# every second per open page) is bounded whatever the lines' length.
TAIL_BYTES = 4 * 1024 * 1024


def waiting(pod: Any) -> str | None:
    """Why a pod that should run does not, as the scheduler or the kubelet wrote it in its status:
    `Unschedulable: 0/1 nodes are available: 1 Insufficient nvidia.com/gpu.`, `ErrImagePull: ...`."""
    status = pod.status
    if status is None or status.phase not in (None, "Pending", "Running") or pod.metadata.deletionTimestamp:
        return None
    for cond in status.conditions or []:
        if cond.type == "PodScheduled" and cond.status == "False" and cond.reason:
            return f"{cond.reason}: {cond.message}" if cond.message else cond.reason
    for cs in [*(status.initContainerStatuses or []), *(status.containerStatuses or [])]:
        w = cs.state.waiting if cs.state else None
        if w and w.reason and w.reason not in ("PodInitializing", "ContainerCreating"):
            return f"{w.reason}: {w.message}" if w.message else w.reason
    return None


def events(kube: Client, data: dict[str, Any]) -> list[Any]:
    meta = data["metadata"]
    # By uid too: an earlier job of the same name (deleted, its events kept for an hour) is another job.
    fields = {"involvedObject.name": meta["name"], "involvedObject.kind": data.get("kind") or "TorchJob"}
    if meta.get("uid"):
        fields["involvedObject.uid"] = meta["uid"]
    evs = kube.list(Event, namespace=meta.get("namespace", "default"), fields=fields)
    # eventTime is to the microsecond and set when the operator decided; creationTimestamp only to the second.
    return sorted(evs, key=lambda e: e.eventTime or e.firstTimestamp or e.metadata.creationTimestamp)


def pods(kube: Client, data: dict[str, Any]) -> list[Any]:
    """The job's pods, the master first, then the workers by index (worker-2 before worker-10): those
    the job itself controls (its uid), as the operator counts them. Anyone who may create pods in the
    namespace can label one as the job's; describe, logs, the dashboard and a result never show it."""
    meta = data["metadata"]
    # This kind's pods only: those of a TorchJob and a PyTorchJob of one name carry the same job label.
    labels = {**served(data).pod_labels, LABEL_JOB: meta["name"]}
    found = kube.list(Pod, namespace=meta.get("namespace", "default"), labels=labels)
    uid = meta.get("uid")
    mine = [p for p in found if uid and p.metadata and controls(uid, p.metadata.ownerReferences)]
    return sorted(mine, key=_order)


def controls(uid: str, refs: list[Any] | None) -> bool:
    """Whether `uid` is the controller among a pod's owner references (lightkube's): read off the
    model, not its dict (thousands of pods)."""
    return any(r.controller and r.uid == uid for r in refs or [])


def _order(pod: Any) -> tuple[bool, str, int, str]:
    """The master first, then by type and index (a label that is not a number last), then by name."""
    labels = pod.metadata.labels or {}
    index = str(labels.get(LABEL_INDEX, ""))
    rtype = str(labels.get(LABEL_TYPE, ""))
    return (rtype != "master", rtype, int(index) if index.isdecimal() and index.isascii() else 1 << 62,
            pod.metadata.name or "")


def pod_logs(kube: Client, name: str, every: list[Any], replica: str | None = None, follow_: bool = False,
             attempt: int | None = None, tail: int | None = None, limit_bytes: int = TAIL_BYTES) -> Iterator[str]:
    """Each pod's lines (its last `tail`), prefixed with its replica; followed when there is one pod.
    With `tail`, the API server sends each pod's last `tail` lines and at most `limit_bytes` of them
    (a line may be of any length), read as they come: never a whole log in memory. `every`: the
    job's pods (`pods`), `name` the job's, for the refusals."""
    if not every:
        raise no_output(name, None, [])
    targets = every
    if replica:
        targets = [p for p in every if replica_name(p.metadata.labels) == replica]
        if not targets:
            raise no_output(name, replica, [str(replica_name(p.metadata.labels)) for p in every])
        if attempt is not None:
            there = sorted({pod_attempt(to_dict(p)) for p in targets})
            targets = [p for p in targets if pod_attempt(to_dict(p)) == attempt]
            if not targets:  # a pod is made again for each attempt (or runs the next in place): only the current one
                raise UserError(
                    f"{replica} has no attempt {attempt} on the cluster: its pod is gone, and its logs with it (a "
                    "restart, a suspend or the job's end deletes a replica's pod; the next attempt is a new pod)",
                    fix=f"its attempts there: {', '.join(map(str, there))} "
                        f"(torchjob logs --kube {name} --replica {replica} --attempt {there[-1]})")
    for p in targets:
        prefix = f"[{replica_name(p.metadata.labels)}] "
        follows = follow_ and len(targets) == 1
        try:
            lines = kube.log(p.metadata.name, namespace=p.metadata.namespace, follow=follows) if tail is None else \
                _tail(kube, p.metadata.name, p.metadata.namespace, tail, limit_bytes, follows)
            for line in lines:
                yield prefix + line.rstrip("\n")
        except ApiError as e:
            if status_code(e) != 404:
                raise
            # Deleted between the listing and the read (the job ended and stopped it): its logs
            # went with it; the others are still worth showing.
            yield f"{prefix}(no logs: the pod was deleted while they were read)"


def kept_logs(status: JobStatus, every: list[Any], replica: str | None, attempt: int | None) -> list[str] | None:
    """What the status kept of a replica attempt whose pod is gone (core/round/kept.py: the end of its
    log, from its termination message, and where every rank was when a stall stopped it), said to be only that;
    None where its pod is there to read, or nothing was kept (`pod_logs` says why). Without `attempt`, the
    replica's newest kept one, when no pod of it is left."""
    if replica is None:
        return None
    mine = [pod_attempt(to_dict(p)) for p in every if replica_name(p.metadata.labels) == replica]
    if attempt is None:
        known = [t.attempt for t in status.keptTails if t.replica == replica]
        known += [k.attempts[replica] for k in status.keptStacks if replica in k.attempts]
        attempt = max(known) if known and not mine else None
    if attempt is None or attempt in mine:
        return None
    tail, stacks = kept_tail(status, replica, attempt), stacks_of(status, replica, attempt)
    if tail is None and stacks is None:
        return None
    prefix, out = f"[{replica}] ", []
    if tail is not None:
        code = f", exit code {tail.exitCode}" if tail.exitCode is not None else ""
        out += [f"{prefix}(attempt {tail.attempt}: its pod is gone; the end of its log as the kubelet kept it{code}, "
                "not the whole log)", *(prefix + line for line in tail.tail.rstrip("\n").split("\n"))]
    if stacks is not None:
        out += [f"{prefix}(attempt {attempt}: where every rank was at {stacks.takenAt:%Y-%m-%d %H:%M:%S}, before the "
                f"stall of {', '.join(stacks.stalled)} stopped it; most recent call first, . marks a library frame)",
                *(prefix + line for line in stacks.stacks.rstrip("\n").split("\n"))]
    return out


def _tail(kube: Client, pod: str, namespace: str, lines: int, limit_bytes: int, follow: bool) -> Iterator[str]:
    """A pod's last `lines` lines, and at most `limit_bytes` of them unless followed (the API server's
    tailLines and limitBytes), streamed. `Client.log` asks for no limitBytes and reads a log whole:
    its request is built here as it builds it, with the limit added."""
    generic = kube._client
    params = {"tailLines": lines, "follow": follow, "limitBytes": None if follow else limit_bytes}
    request = generic.prepare_request("get", PodLog, name=pod, namespace=namespace, params=params)
    if follow:  # a followed log is open for as long as the pod runs: no read timeout
        request.timeout = httpx2.Timeout(kube._timeout)
        request.timeout.read = None
    response = generic.send(generic.build_adapter_request(request), stream=True)
    try:
        if response.is_error:
            response.read()
        generic.raise_for_status(response)  # type: ignore[no-untyped-call]  # ApiError, as Client.log raises
        yield from response.iter_lines()
    finally:
        response.close()


def last_lines(kube: Client, pod: str, namespace: str, lines: int, limit_bytes: int) -> list[str] | None:
    """A pod's last `lines` lines (at most `limit_bytes`), or None when they cannot be read (the pod
    or its container gone, its node not answering)."""
    try:
        return [line.rstrip("\n") for line in _tail(kube, pod, namespace, lines, limit_bytes, False)]
    except (ApiError, httpx2.HTTPError):
        return None


def attempt_of(pod: Any) -> AttemptView:
    """A pod as one replica attempt: its phase, times, and the training container's exit code."""
    data = to_dict(pod)
    containers = [c["name"] for c in (data.get("spec") or {}).get("containers") or []]
    ended = terminated(data, containers[training_index(containers)] if containers else None)
    status = data.get("status") or {}
    phase = status.get("phase") or "Pending"
    here = inplace.in_place(data, None)  # a view: what the annotations say (the operator checks their seal)
    if here is not None and here.ended is not None and phase == "Running":  # ended in its pod, which waits
        ended = {"finishedAt": here.ended.finished_at.isoformat(), "exitCode": here.ended.exit_code}
        phase = "Failed" if here.ended.exit_code else "Succeeded"
    # anyone who may patch pods may write anything there: a time that is none is not shown
    since = inplace.parse_time((data["metadata"].get("annotations") or {}).get(inplace.ANNOTATION_SINCE)
                               if here is not None else None)
    return AttemptView(
        replica=str(replica_name(data["metadata"].get("labels") or {})), attempt=pod_attempt(data),
        started=timestamp(since or status.get("startTime")), ended=timestamp(ended.get("finishedAt")),
        exit_code=ended.get("exitCode"), reason=phase, pod=data["metadata"]["name"], waiting=waiting(pod),
    )


def attempts(found: list[Any], status: Any, running: list[AttemptView] | None = None) -> list[AttemptView]:
    """The attempts table of a job on a cluster: each pod's attempt (one being deleted while it ran:
    Stopping, as the job's end or restart stops it), and a row for each replica whose pod is gone
    (deleted by the job's end, a restart or a suspend), at its attempt the status keeps: the root
    cause's replica with its exit code, the others Deleted. `running`: the rows of pods read as
    their metadata only (pod_listing.summary_pods), beside `found`."""
    rows = [attempt_of(p) for p in found]
    for i, p in enumerate(found):
        if p.metadata.deletionTimestamp and rows[i].reason in ("Pending", "Running"):
            rows[i] = replace(rows[i], reason="Stopping")
    rows += running or []
    have = {a.replica for a in rows}
    f = status.failure
    for name, state in status.replicas.items():
        if name in have:
            continue
        if f is not None and f.replica == name:
            rows.append(AttemptView(replica=name, attempt=f.attempt if f.attempt is not None else state.attempt,
                                    exit_code=f.exitCode, reason="Failed (its pod is gone)"))
        elif status.is_true(ConditionType.SUSPENDED):  # its next attempt, made when the job is resumed
            rows.append(AttemptView(replica=name, attempt=state.attempt, reason="Suspended (starts when resumed)"))
        else:
            rows.append(AttemptView(replica=name, attempt=state.attempt, reason="Deleted (its pod is gone)"))

    def order(a: AttemptView) -> tuple[bool, str, int]:
        rtype, _, index = a.replica.rpartition("-")
        return rtype != "master", rtype, int(index) if index.isdecimal() else 1 << 62

    return sorted(rows, key=order)


def timestamp(value: Any) -> float | None:
    """A time as the API serves it (a string in a dict, a datetime in a model) in seconds since the epoch."""
    when = parse_time(value) if isinstance(value, str) else value
    return when.timestamp() if when is not None else None


def served(data: dict[str, Any]) -> ServedKind:
    """The kind as the operator serves it: a TorchJob, Kubeflow's PyTorchJob, Trainer's TrainJob or
    T9k's PyTorchTrainingJob (by its apiVersion and kind; anything else reads as a TorchJob)."""
    from torchjob.kube.machinery.client import kind_of
    from torchjob.kube.served.kinds import PYTORCHJOB, T9K, TORCHJOB, TRAINJOB

    if not data.get("kind") or not data.get("apiVersion"):
        return TORCHJOB
    return {k.kind: k for k in (PYTORCHJOB, TRAINJOB, T9K)}.get(kind_of(data), TORCHJOB)
