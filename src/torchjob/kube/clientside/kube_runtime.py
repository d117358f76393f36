"""The Kubernetes runtime behind the runtime interface (`torchjob.runtime.Runtime`), as the CLI
drives it with `--kube`: the operator runs the job; this side submits it, reads it (its object,
pods and events) and asks for suspend, resume and delete. Same words and output as the local
runtime: both fill one `JobView` and refuse with one message."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx2  # lightkube's HTTP client: what it raises for calls that fail below the Kubernetes API
from lightkube import Client, KubeConfig
from lightkube.core.exceptions import ApiError
from lightkube.types import PatchType

from torchjob.api.errors import UserError
from torchjob.api.model import JobStatus, Progress, TorchJob
from torchjob.api.status import ConditionType, EventType
from torchjob.core.diagnosis.stacks import Stacks
from torchjob.dialects.convert import explicit
from torchjob.kube.clientside import root_cause, served_jobs
from torchjob.kube.clientside.code import with_code
from torchjob.kube.clientside.following import (
    PULL_BOUND_S,
    STREAM_DRAIN_S,
    Interrupted,
    Stream,
    Streams,
    pull_refusal,
    recording,
    unpullable,
)
from torchjob.kube.clientside.job_pods import (
    TAIL_BYTES,
    attempt_of,  # noqa: F401  (re-exported: a pod as one attempt, as describe shows it)
    attempts,
    events,
    kept_logs,
    last_lines,
    pod_logs,
    pods,
    served,
    timestamp,
    waiting,
)
from torchjob.kube.clientside.plan import KubePlan, refuse_without_image
from torchjob.kube.clientside.pod_listing import job_pods_for
from torchjob.kube.machinery.client import KueueWorkload, TorchJobRes, status_code, to_dict
from torchjob.kube.objects.admission import kueue
from torchjob.kube.objects.labels import replica_name
from torchjob.runtime import (
    SUMMARY_OVER,
    Code,
    EventView,
    JobView,
    Say,
    Show,
    name_taken,
    no_such_job,
    refuse_resume,
    refuse_suspend,
)


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
            there = [*list_jobs(kube, ns), *served_jobs.list_all(kube, ns)]
            raise no_such_job(name, [o["metadata"]["name"] for o in there], f" in {ns}")
        raise
    return to_dict(obj)


def status_of(data: dict[str, Any]) -> JobStatus:
    return served(data).status_of(data)


def find(kube: Client, ref: str, namespace: str | None) -> dict[str, Any]:
    """The job `ref` names: `KIND/NAME` (kubectl's `trainjob/foo`: served_jobs.parse_ref), or a NAME
    that one kind holds: a TorchJob, or one of a kind the operator serves beside it (a Kubeflow
    PyTorchJob, Trainer's TrainJob, T9k's PyTorchTrainingJob). None there: no_such_job naming every
    one there; a NAME several kinds hold: an error naming them and the KIND/NAME to write."""
    kind, name = served_jobs.parse_ref(ref)
    ns = _ns(kube, namespace)
    if kind is None:
        found = served_jobs.named(kube, name, ns)
    else:
        found = [d for d in (served_jobs.get(kube, kind, name, ns),) if d is not None]
    if len(found) > 1:
        raise served_jobs.ambiguous(name, found, ns)
    if not found:
        there = [*list_jobs(kube, ns), *served_jobs.list_all(kube, ns)]
        raise no_such_job(ref, [o["metadata"]["name"] for o in there], f" in {ns}")
    return found[0]


FINAL_EVENT_WAIT_S = 10.0  # at most this long for the end's event after the status says it ended
def follow(kube: Client, name: str, namespace: str | None, say: Say, poll_s: float = 1.0,
           on_progress: Callable[[Progress], None] | None = None, stream: Stream | None = None,
           pull_bound_s: float = PULL_BOUND_S) -> JobStatus:
    """Print each new event of the job, and why a pod waits, until it finishes, and tell
    `on_progress` of each new status.progress; returns its final status. With `stream`, the
    replicas' lines as they come. A pod whose image cannot be pulled for `pull_bound_s` ends it
    (pull_refusal)."""
    seen: set[object] = set()
    said: set[tuple[str, str]] = set()  # (reason, message) of the events said
    last_report: object = None
    pulls: dict[str, float] = {}  # pod -> since when its image cannot be pulled
    streams = Streams(kube, stream) if stream is not None else None

    def new_events(data: dict[str, Any]) -> None:
        for ev in events(kube, data):
            uid = ev.metadata.uid if ev.metadata else None
            if uid and uid not in seen:
                seen.add(uid)
                said.add((ev.reason or "", ev.message or ""))
                say(ev.message or "")
        found = pods(kube, data)
        for p in found:
            why = waiting(p)
            if why and (p.metadata.name, why) not in seen:
                seen.add((p.metadata.name, why))
                say(f"{replica_name(p.metadata.labels)} waits: {why}")
            bad = unpullable(p)
            if bad is None:
                pulls.pop(p.metadata.name, None)
                continue
            since = pulls.setdefault(p.metadata.name, time.monotonic())
            if time.monotonic() - since >= pull_bound_s:
                raise pull_refusal(name, str(replica_name(p.metadata.labels)), bad, time.monotonic() - since)
        if streams is not None:
            streams.watch(found)

    while True:
        data = get(kube, name, namespace)
        new_events(data)
        st = status_of(data)
        if on_progress is not None and st.progress is not None and st.progress.lastReportTime != last_report:
            last_report = st.progress.lastReportTime
            on_progress(st.progress)
        if st.finished:
            if streams is not None:  # the last lines before the end's words
                streams.drain(STREAM_DRAIN_S)
            # The operator records the job's last event (its end's reason and words) just after the
            # status, on a task of its own: wait for it, bounded, so the end is said here too.
            end = next(((c.reason or "", c.message or "") for c in st.conditions
                        if c.type in (ConditionType.SUCCEEDED, ConditionType.FAILED) and c.status == "True"), None)
            deadline = time.monotonic() + (FINAL_EVENT_WAIT_S if end is not None else 0.0)
            while True:
                time.sleep(min(poll_s, 0.25))
                new_events(data)
                if end in said or time.monotonic() >= deadline:
                    return st
        time.sleep(poll_s)


def delete(kube: Client, name: str, namespace: str | None) -> None:
    kube.delete(TorchJobRes, name, namespace=_ns(kube, namespace))


# A served kind's own switch, patched as its API says (a JSON merge patch of its spec); T9k's
# PyTorchTrainingJob pauses (runMode.pause), which is not a suspend: its patch is only shown.
SUSPEND_FIELD: dict[str, tuple[str, ...]] = {"TorchJob": ("runPolicy", "suspend"),
                                              "PyTorchJob": ("runPolicy", "suspend"), "TrainJob": ("suspend",)}


def _suspend_patch(kind: str, value: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"suspend": value}
    for key in reversed(SUSPEND_FIELD[kind][:-1]):
        out = {key: out}
    return {"spec": out}


def set_suspend(kube: Client, ref: str, namespace: str | None, value: bool) -> None:
    """Suspend or resume a TorchJob, a Kubeflow PyTorchJob (`spec.runPolicy.suspend`) or a Trainer
    TrainJob (`spec.suspend`). Under a Kueue queue, Kueue decides when a job runs, so its Workload is
    deactivated (Kueue frees the quota) or activated again (Kueue admits it when there is room)."""
    import json

    data = find(kube, ref, namespace)
    kind = str(data.get("kind") or "TorchJob")
    name, ns = data["metadata"]["name"], data["metadata"].get("namespace") or _ns(kube, namespace)
    if kind not in SUSPEND_FIELD:  # the operator serves it, but its own API says how it stops
        pause = json.dumps({"spec": {"runMode": {"pause": {"enabled": value}}}}, separators=(",", ":"))
        how = f"kubectl patch {kind.lower()} {name} --type merge -p '{pause}'" if kind == "PyTorchTrainingJob" \
            else "use its own client"
        raise UserError(f"job {name!r} is a {kind}: torchjob {'suspends' if value else 'resumes'} TorchJobs, "
                        "PyTorchJobs and TrainJobs", fix=how)
    job = served_jobs.Reader(kube).read(data)
    (refuse_suspend if value else refuse_resume)(ref, job, status_of(data))
    if (data["metadata"].get("labels") or {}).get(kueue.QUEUE_LABEL):
        try:
            kube.patch(KueueWorkload, kueue.workload_name(name), {"spec": {"active": not value}}, namespace=ns,
                       patch_type=PatchType.MERGE)
        except Exception as e:  # ApiError, or a plain 404 where Kueue is not installed
            if status_code(e) != 404:  # none yet: the operator makes it when it first sees the job
                raise
    res = served_jobs.resource_of(data) or TorchJobRes
    kube.patch(res, name, _suspend_patch(kind, value), namespace=ns, patch_type=PatchType.MERGE)


def list_jobs(kube: Client, namespace: str | None) -> list[dict[str, Any]]:
    """In one namespace, or every one (`*`)."""
    return [to_dict(o) for o in kube.list(TorchJobRes, namespace=_ns(kube, namespace))]


def logs(kube: Client, name: str, namespace: str | None, replica: str | None = None, follow_: bool = False,
         attempt: int | None = None, tail: int | None = None, limit_bytes: int = TAIL_BYTES) -> Iterator[str]:
    """The job's pods' lines (job_pods.pod_logs): each pod's last `tail`, prefixed with its replica."""
    data = find(kube, name, namespace)
    found = pods(kube, data)
    kept = kept_logs(status_of(data), found, replica, attempt)  # a gone pod's end of log, kept in the status
    return iter(kept) if kept is not None else pod_logs(kube, data["metadata"]["name"], found, replica, follow_,
                                                        attempt, tail, limit_bytes)


def view_of(data: dict[str, Any], kube: Client | None = None, reader: served_jobs.Reader | None = None,
            summary: bool = False) -> JobView:
    """What list (without `kube`) and describe (with it: pods and events) show of a job of any served
    kind (`reader` reads it: a listing's one, its runtimes fetched once). `summary`: its replicas will
    be shown summarised (Runtime.describe): a job of more than SUMMARY_OVER has its running pods read
    as their metadata only (pod_listing), and no `raw`."""
    meta = data["metadata"]
    created = meta.get("creationTimestamp")
    job = (reader or served_jobs.Reader(kube)).read(data)
    out = JobView(name=meta["name"], job=job, status=status_of(data), namespace=meta.get("namespace"),
                  uid=meta.get("uid"), created=timestamp(created), kind=served_jobs.kind_name(data))
    if kube is not None:
        light = summary and sum(out.replicas.values()) > SUMMARY_OVER
        found, running = job_pods_for(kube, data, light)
        evs = events(kube, data)
        out.attempts = attempts(found, out.status, running)
        out.events = [EventView(e.type or EventType.NORMAL, e.reason or "", e.message or "",
                                timestamp(e.eventTime or e.firstTimestamp or e.metadata.creationTimestamp))
                      for e in evs]
        ns = meta.get("namespace") or "default"
        out.root_cause = root_cause.text(
            out.name, job, out.status, found,
            lambda pod: last_lines(kube, pod, ns, root_cause.READ_LINES, root_cause.READ_BYTES))
        if out.root_cause is None and out.status.failure is not None:  # ended otherwise (a refusal...)
            f = out.status.failure
            out.root_cause = f"{f.reason}: {f.message}"
        if not light:
            out.raw = {"job": data, "pods": [p.to_dict() for p in found],
                       "events": [{"type": e.type, "reason": e.reason, "message": e.message} for e in evs]}
    return out


class KubeRuntime:
    """The runtime interface against a cluster; contacts it only when a verb needs it."""

    flags = " --kube"

    def __init__(self, kubeconfig: str | None = None, context: str | None = None, namespace: str | None = None,
                 ) -> None:
        self.kubeconfig, self.context, self.namespace = kubeconfig, context, namespace
        self._client: Client | None = None
        self.streamed: dict[str, Any] = {}  # run's: each replica's last lines streamed (following.recording)

    @property
    def kube(self) -> Client:
        if self._client is None:
            self._client = client(self.kubeconfig, self.context)
        return self._client

    def dryrun(self, job: TorchJob, lenient: bool = False, code: Code | None = None) -> KubePlan:
        return KubePlan(job, code)

    def schedule(self, plan: KubePlan) -> str:
        refuse_without_image(plan.job)
        ns = submit(self.kube, plan.job, self.namespace, plan.configmap)
        return (f"job {plan.job.name} submitted to {ns}; follow its output: torchjob logs --kube {plan.job.name} -f; "
                f"its state: torchjob describe --kube {plan.job.name}")

    def run(self, plan: KubePlan, quiet: bool = False, console: Show | None = None) -> JobView:
        """Submit, then show the job's events (its failure's among them) as they come and its
        progress as a live bar, until it ends."""
        import sys

        from torchjob.console import Console

        name = plan.job.name
        refuse_without_image(plan.job)
        ns = submit(self.kube, plan.job, self.namespace, plan.configmap)
        print(f"torchjob: job {name} created in {ns}", file=sys.stderr, flush=True)
        shown = console(None) if console is not None else Console(None)
        stream = None if quiet else recording(lambda replica, line: shown.line(replica, line.encode()), self.streamed)
        try:
            follow(self.kube, name, ns, shown.note, on_progress=lambda p: shown.progress(p, name), stream=stream)
        except KeyboardInterrupt:
            raise Interrupted(f"interrupted: job {name} still runs on the cluster (in {ns})",
                              fix=f"follow it again: torchjob logs --kube {name} -f; "
                                  f"delete it: torchjob delete --kube {name}") from None
        finally:
            shown.close()
        return view_of(get(self.kube, name, ns), self.kube)

    def describe(self, name: str, summary: bool = False) -> JobView:
        return view_of(find(self.kube, name, self.namespace), self.kube, summary=summary)

    def list(self) -> list[JobView]:
        """TorchJobs and the jobs of the kinds served beside them, by namespace and name."""
        ns = _ns(self.kube, self.namespace)
        reader = served_jobs.Reader(self.kube)
        every = [*list_jobs(self.kube, ns), *served_jobs.list_all(self.kube, ns)]
        every.sort(key=lambda o: (o["metadata"].get("namespace") or "", o["metadata"]["name"], o.get("kind") or ""))
        return [view_of(data, reader=reader) for data in every]

    def logs(self, name: str, replica: str | None = None, attempt: int | None = None, *, follow: bool = False,
             tail: int | None = None) -> Iterator[str]:
        return logs(self.kube, name, self.namespace, replica, follow, attempt, tail)

    def stacks(self, name: str, wait_s: float | None = None) -> Stacks:
        """Every rank's Python stacks, from the job's running pods (kube/clientside/stacks.py)."""
        from torchjob.kube.clientside import stacks

        data = find(self.kube, name, self.namespace)
        st = status_of(data)
        if st.finished:
            raise UserError(f"job {name} has ended ({st.state}): it has no process to take stacks from",
                            fix=f"its pods' logs keep what they wrote: torchjob logs --kube {name}")
        return stacks.take(self.kube, data, stacks.WAIT_S if wait_s is None else wait_s)

    def suspend(self, name: str) -> None:
        set_suspend(self.kube, name, self.namespace, True)

    def resume(self, name: str) -> None:
        set_suspend(self.kube, name, self.namespace, False)

    def delete(self, name: str) -> None:
        data = find(self.kube, name, self.namespace)
        res, meta = served_jobs.resource_of(data), data["metadata"]
        if res is None:
            delete(self.kube, meta["name"], self.namespace)
        else:  # its pods go with it (they are owned by it)
            self.kube.delete(res, meta["name"], namespace=meta.get("namespace") or _ns(self.kube, self.namespace))
