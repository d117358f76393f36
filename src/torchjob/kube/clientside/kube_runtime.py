"""The Kubernetes runtime behind the runtime interface (`torchjob.runtime.Runtime`), as the CLI
drives it with `--kube`: the operator runs the job; this side submits it, reads it (its object,
pods and events) and asks for suspend, resume and delete. Same words and output as the local
runtime: both fill one `JobView` and refuse with one message."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import httpx2  # lightkube's HTTP client: what it raises for calls that fail below the Kubernetes API
from lightkube import Client, KubeConfig
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Event, Pod, PodLog
from lightkube.types import PatchType

from torchjob.api.errors import UserError
from torchjob.api.model import JobStatus, Progress, TorchJob
from torchjob.api.pod import training_index
from torchjob.api.status import EventType
from torchjob.dialects.convert import explicit
from torchjob.kube.clientside.code import with_code
from torchjob.kube.clientside.plan import KubePlan
from torchjob.kube.machinery.client import KueueWorkload, TorchJobRes, parse_time, status_code, to_dict
from torchjob.kube.objects import kueue
from torchjob.kube.objects.labels import LABEL_INDEX, LABEL_JOB, LABEL_TYPE, replica_name
from torchjob.kube.objects.labels import attempt_of as pod_attempt
from torchjob.kube.objects.ownership import controller_of
from torchjob.kube.objects.pod_status import terminated
from torchjob.runtime import (
    AttemptView,
    Code,
    EventView,
    JobView,
    Say,
    Show,
    name_taken,
    no_output,
    no_such_job,
    refuse_resume,
    refuse_suspend,
)

if TYPE_CHECKING:
    from torchjob.kube.served.kinds import ServedKind

# A log's tail asks the API server for at most this many bytes too: a reader's memory (the dashboard's,
# every second per open page) is bounded whatever the lines' length.
TAIL_BYTES = 4 * 1024 * 1024


def client(kubeconfig: str | None, context: str | None) -> Client:
    try:
        config = KubeConfig.from_file(kubeconfig) if kubeconfig else KubeConfig.from_env()
    except Exception as e:  # no kubeconfig at all: a user's set-up, not a bug
        raise UserError(f"no Kubernetes configuration: {e}", fix="set KUBECONFIG or pass --kubeconfig")
    return Client(config=config.get(context_name=context) if context else config, field_manager="torchjob-cli")


def explain(e: Exception) -> UserError | None:
    """A failed call to the cluster in words a user can act on; None for what is not one (a bug of ours)."""
    if isinstance(e, httpx2.TransportError):
        try:
            url = str(e.request.url)
        except RuntimeError:  # raised before a request was made
            url = "the API server"
        return UserError(f"cannot reach the Kubernetes API server ({url}): {e or type(e).__name__}",
                         fix="is the cluster up? check --kubeconfig / KUBECONFIG and --context")
    if not isinstance(e, httpx2.HTTPStatusError):
        return None
    code, url = status_code(e), str(e.request.url)
    message = e.status.message if isinstance(e, ApiError) and e.status else f"{code} {e.response.reason_phrase}"
    if code == 404 and "/torchjobs" in url and not isinstance(e, ApiError):  # the type itself is unknown
        return UserError("the cluster has no TorchJob resource (its CRD is not installed)",
                         fix="install it: torchjob install (or the Helm chart in charts/torchjob)")
    if code == 401:
        return UserError(f"the API server did not accept your credentials: {message}",
                         fix="check the user of your kubeconfig context (an expired token?)")
    if code == 403:
        return UserError(f"the API server forbids it: {message}",
                         fix="ask for RBAC on torchjobs.torchjob.dev, pods, pods/log and events in the namespace")
    return UserError(f"the API server refused: {message}")


def _ns(kube: Client, namespace: str | None) -> str:
    return namespace or kube.namespace or "default"


def submit(kube: Client, job: TorchJob, namespace: str | None, configmap: dict[str, Any] | None = None) -> str:
    data = explicit(job)  # created after its code's ConfigMap, when it ships code
    ns = data["metadata"]["namespace"] = _ns(kube, namespace)
    if configmap is not None:
        with_code(kube, configmap, ns, lambda: _create(kube, job, data, ns))
    else:
        _create(kube, job, data, ns)
    return ns


def _create(kube: Client, job: TorchJob, data: dict[str, Any], ns: str) -> str:
    try:
        return str(kube.create(TorchJobRes.from_dict(data)).metadata.uid)
    except ApiError as e:
        if status_code(e) == 409:
            there = status_of(get(kube, job.name, ns))
            if not there.finished:
                raise name_taken(job.name, there, " --kube", f" in {ns}")
            raise UserError(f"a job named {job.name!r} in {ns} has already {there.state.lower()}",
                            fix=f"delete it first (torchjob delete --kube {job.name}), or change metadata.name")
        raise UserError(f"the API server refused the job: {e}")


def get(kube: Client, name: str, namespace: str | None) -> dict[str, Any]:
    ns = _ns(kube, namespace)
    try:
        obj = kube.get(TorchJobRes, name, namespace=ns)
    except ApiError as e:
        if status_code(e) == 404:
            raise no_such_job(name, [o["metadata"]["name"] for o in list_jobs(kube, ns)], f" in {ns}")
        raise
    return to_dict(obj)


def status_of(data: dict[str, Any]) -> JobStatus:
    return _served(data).status_of(data)


def find_pytorchjob(kube: Client, name: str, namespace: str | None) -> dict[str, Any] | None:
    """A Kubeflow PyTorchJob of that name (torchjob's operator may serve it), or None (none, or no CRD)."""
    from torchjob.kube.machinery.client import PyTorchJobRes

    try:
        return to_dict(kube.get(PyTorchJobRes, name, namespace=_ns(kube, namespace)))
    except Exception as e:
        if status_code(e) == 404:  # none, or no such kind at all (the CRD is not installed)
            return None
        raise


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


def follow(kube: Client, name: str, namespace: str | None, say: Say, poll_s: float = 1.0,
           on_progress: Callable[[Progress], None] | None = None) -> JobStatus:
    """Print each new event of the job, and why a pod waits, until it finishes, and tell
    `on_progress` of each new status.progress; returns its final status."""
    seen: set[object] = set()
    last_report: object = None

    def new_events(data: dict[str, Any]) -> None:
        for ev in events(kube, data):
            uid = ev.metadata.uid if ev.metadata else None
            if uid and uid not in seen:
                seen.add(uid)
                say(ev.message or "")
        for p in pods(kube, data):
            why = waiting(p)
            if why and (p.metadata.name, why) not in seen:
                seen.add((p.metadata.name, why))
                say(f"{replica_name(p.metadata.labels)} waits: {why}")

    while True:
        data = get(kube, name, namespace)
        new_events(data)
        st = status_of(data)
        if on_progress is not None and st.progress is not None and st.progress.lastReportTime != last_report:
            last_report = st.progress.lastReportTime
            on_progress(st.progress)
        if st.finished:
            time.sleep(min(poll_s, 0.5))  # the operator records the last events just after the status
            new_events(data)
            return st
        time.sleep(poll_s)


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
    labels = {**_served(data).pod_labels, LABEL_JOB: meta["name"]}
    found = kube.list(Pod, namespace=meta.get("namespace", "default"), labels=labels)
    uid = meta.get("uid")
    mine = [p for p in found if uid and (controller_of(to_dict(p)) or {}).get("uid") == uid]
    return sorted(mine, key=_order)


def _order(pod: Any) -> tuple[bool, str, int, str]:
    """The master first, then by type and index (a label that is not a number last), then by name."""
    labels = pod.metadata.labels or {}
    index = str(labels.get(LABEL_INDEX, ""))
    rtype = str(labels.get(LABEL_TYPE, ""))
    return (rtype != "master", rtype, int(index) if index.isdecimal() and index.isascii() else 1 << 62,
            pod.metadata.name or "")


def delete(kube: Client, name: str, namespace: str | None) -> None:
    kube.delete(TorchJobRes, name, namespace=_ns(kube, namespace))


def set_suspend(kube: Client, name: str, namespace: str | None, value: bool) -> None:
    """Suspend or resume. Under a Kueue queue, Kueue decides when a job runs, so its Workload is
    deactivated (Kueue frees the quota) or activated again (Kueue admits it when there is room)."""
    data = get(kube, name, namespace)
    (refuse_suspend if value else refuse_resume)(name, _job_of(data), status_of(data))
    ns = _ns(kube, namespace)
    if (data["metadata"].get("labels") or {}).get(kueue.QUEUE_LABEL):
        try:
            kube.patch(KueueWorkload, kueue.workload_name(name), {"spec": {"active": not value}}, namespace=ns,
                       patch_type=PatchType.MERGE)
        except Exception as e:  # ApiError, or a plain 404 where Kueue is not installed
            if status_code(e) != 404:  # none yet: the operator makes it when it first sees the job
                raise
    kube.patch(TorchJobRes, name, {"spec": {"runPolicy": {"suspend": value}}}, namespace=ns,
               patch_type=PatchType.MERGE)


def list_jobs(kube: Client, namespace: str | None) -> list[dict[str, Any]]:
    """In one namespace, or every one (`*`)."""
    return [to_dict(o) for o in kube.list(TorchJobRes, namespace=_ns(kube, namespace))]


def logs(kube: Client, name: str, namespace: str | None, replica: str | None = None, follow_: bool = False,
         attempt: int | None = None, tail: int | None = None, limit_bytes: int = TAIL_BYTES) -> Iterator[str]:
    """Each pod's lines (its last `tail`), prefixed with its replica; followed when there is one pod.
    With `tail`, the API server sends each pod's last `tail` lines and at most `limit_bytes` of them
    (a line may be of any length), read as they come: never a whole log in memory."""
    data = get(kube, name, namespace)
    every = pods(kube, data)
    if not every:
        raise no_output(name, None, [])
    targets = every
    if replica:
        targets = [p for p in every if replica_name(p.metadata.labels) == replica]
        if not targets:
            raise no_output(name, replica, [str(replica_name(p.metadata.labels)) for p in every])
        if attempt is not None:
            targets = [p for p in targets if pod_attempt(to_dict(p)) == attempt]
            if not targets:  # a pod is made again for each attempt: only the current one is left
                raise UserError(f"{replica} has no attempt {attempt}")
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


def _served(data: dict[str, Any]) -> ServedKind:
    """The kind as the operator serves it: a TorchJob, or a Kubeflow PyTorchJob."""
    from torchjob.kube.served.kinds import PYTORCHJOB, TORCHJOB

    return PYTORCHJOB if data.get("kind") == "PyTorchJob" else TORCHJOB


def _job_of(data: dict[str, Any]) -> TorchJob:
    return _served(data).read(data, [])


def attempt_of(pod: Any) -> AttemptView:
    """A pod as one replica attempt: its phase, times, and the training container's exit code."""
    data = to_dict(pod)
    containers = [c["name"] for c in (data.get("spec") or {}).get("containers") or []]
    ended = terminated(data, containers[training_index(containers)] if containers else None)
    status = data.get("status") or {}
    return AttemptView(
        replica=str(replica_name(data["metadata"].get("labels") or {})), attempt=pod_attempt(data),
        started=_timestamp(status.get("startTime")), ended=_timestamp(ended.get("finishedAt")),
        exit_code=ended.get("exitCode"), reason=status.get("phase") or "Pending", pod=data["metadata"]["name"],
        waiting=waiting(pod),
    )


def view_of(data: dict[str, Any], kube: Client | None = None) -> JobView:
    """What list (without `kube`) and describe (with it: pods and events) show of a TorchJob."""
    meta = data["metadata"]
    created = meta.get("creationTimestamp")
    out = JobView(name=meta["name"], job=_job_of(data), status=status_of(data), namespace=meta.get("namespace"),
                  uid=meta.get("uid"), created=_timestamp(created))
    if kube is not None:
        found = pods(kube, data)
        evs = events(kube, data)
        out.attempts = [attempt_of(p) for p in found]
        out.events = [EventView(e.type or EventType.NORMAL, e.reason or "", e.message or "",
                                _timestamp(e.eventTime or e.firstTimestamp or e.metadata.creationTimestamp))
                      for e in evs]
        f = out.status.failure
        out.root_cause = f"{f.reason}: {f.message}" if f else None
        out.raw = {"job": data, "pods": [p.to_dict() for p in found],
                   "events": [{"type": e.type, "reason": e.reason, "message": e.message} for e in evs]}
    return out


def _timestamp(value: Any) -> float | None:
    """A time as the API serves it (a string in a dict, a datetime in a model) in seconds since the epoch."""
    when = parse_time(value) if isinstance(value, str) else value
    return when.timestamp() if when is not None else None


class KubeRuntime:
    """The runtime interface against a cluster; contacts it only when a verb needs it."""

    flags = " --kube"

    def __init__(self, kubeconfig: str | None = None, context: str | None = None, namespace: str | None = None,
                 ) -> None:
        self.kubeconfig, self.context, self.namespace = kubeconfig, context, namespace
        self._client: Client | None = None

    @property
    def kube(self) -> Client:
        if self._client is None:
            self._client = client(self.kubeconfig, self.context)
        return self._client

    def dryrun(self, job: TorchJob, lenient: bool = False, code: Code | None = None) -> KubePlan:
        return KubePlan(job, code)

    def schedule(self, plan: KubePlan) -> str:
        ns = submit(self.kube, plan.job, self.namespace, plan.configmap)
        return f"job {plan.job.name} submitted to {ns}; follow it with: torchjob describe --kube {plan.job.name}"

    def run(self, plan: KubePlan, quiet: bool = False, console: Show | None = None) -> JobView:
        """Submit, then show the job's events (its failure's among them) as they come and its
        progress as a live bar, until it ends."""
        import sys

        from torchjob.console import Console

        name = plan.job.name
        ns = submit(self.kube, plan.job, self.namespace, plan.configmap)
        print(f"torchjob: job {name} created in {ns}", file=sys.stderr, flush=True)
        shown = console(None) if console is not None else Console(None)
        try:
            follow(self.kube, name, ns, shown.note, on_progress=lambda p: shown.progress(p, name))
        finally:
            shown.close()
        return view_of(get(self.kube, name, ns))

    def describe(self, name: str) -> JobView:
        try:
            data = get(self.kube, name, self.namespace)
        except UserError:  # no TorchJob of that name: a PyTorchJob (torchjob serves Kubeflow's API too)?
            found = find_pytorchjob(self.kube, name, self.namespace)
            if found is None:
                raise
            data = found
        return view_of(data, self.kube)

    def list(self) -> list[JobView]:
        return [view_of(data) for data in list_jobs(self.kube, self.namespace)]

    def logs(self, name: str, replica: str | None = None, attempt: int | None = None, *, follow: bool = False,
             tail: int | None = None) -> Iterator[str]:
        return logs(self.kube, name, self.namespace, replica, follow, attempt, tail)

    def suspend(self, name: str) -> None:
        set_suspend(self.kube, name, self.namespace, True)

    def resume(self, name: str) -> None:
        set_suspend(self.kube, name, self.namespace, False)

    def delete(self, name: str) -> None:
        get(self.kube, name, self.namespace)
        delete(self.kube, name, self.namespace)
