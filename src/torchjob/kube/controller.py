"""The TorchJob controller: informers on TorchJobs and the Pods and Services they own, a work
queue keyed by job, and a reconcile that asks `core.reconcile` and applies the plan.

Never a duplicate pod: pod names are deterministic (`{job}-{type}-{i}`), so a create that races
a stale cache gets 409 and changes nothing; after a restart the operator adopts what exists. The
decision is written to the job's status *before* it is acted on, so a crash between the two
repeats the action instead of losing or double-counting it (Kubeflow's #3419 marked the job
Failed only after deleting its pods).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from lightkube.core.exceptions import ApiError
from pydantic import ValidationError

from torchjob.api.model import WORKER, FailureInfo, JobStatus, TorchJob
from torchjob.core.reconcile import Create, DeleteJob, Event, Forget, Plan, Purge, Stop, reconcile
from torchjob.kube import client, gang, kueue, metrics, tensorboard
from torchjob.kube import render as kr
from torchjob.kube.client import Api, status_code
from torchjob.kube.informer import Informer, Key, WorkQueue, key_of, metadata_only
from torchjob.kube.observe import observe, parse_time, pod_summary
from torchjob.kube.progress import ProgressHub

log = logging.getLogger("torchjob.kube")
FORCE_DELETE_AFTER_S = 60.0  # past its deletionTimestamp, a pod stuck terminating (lost node) is force-deleted
ADMISSION_POLL_S = 2.0  # how often a job waiting for Volcano's admission looks, until PodGroups are watched
VOLCANO_PODGROUP = "scheduling.volcano.sh/v1beta1/PodGroup"


META_FIELDS = ("name", "namespace", "labels", "annotations", "uid", "generation", "resourceVersion")


def job_gone(e: Exception, key: Key) -> bool:
    """The API server answered that this very TorchJob does not exist (any more)."""
    details = e.status.details if isinstance(e, ApiError) and e.status is not None else None
    return status_code(e) == 404 and details is not None and details.kind == "torchjobs" and details.name == key[1]


def job_of(raw: dict[str, Any]) -> TorchJob:
    """The stored object as a TorchJob (server-managed metadata such as managedFields left out)."""
    meta = {k: raw["metadata"][k] for k in META_FIELDS if k in raw["metadata"]}
    return TorchJob.model_validate({"apiVersion": raw.get("apiVersion"), "kind": raw.get("kind"), "metadata": meta,
                                    "spec": raw.get("spec")})


def controller_uid(obj: dict[str, Any]) -> str | None:
    return next((r.get("uid") for r in obj["metadata"].get("ownerReferences") or [] if r.get("controller")), None)


def status_dict(job: TorchJob, status: JobStatus) -> dict[str, Any]:
    data = status.model_dump(mode="json")
    del data["progress"]  # the progress writer's (kube/progress.py): a reconcile neither writes nor clears it
    data["state"] = status.state  # for `kubectl get tj`
    if WORKER in job.spec.pytorchReplicaSpecs:
        data["workerSelector"] = f"{kr.LABEL_JOB}={job.name},{kr.LABEL_TYPE}=worker"
    return data


class Controller:
    def __init__(self, api: Api, namespace: str | None = None, workers: int = 4, init_image: str = "busybox:1.36",
                 wait_for_master: bool = True, gang_scheduler: str | None = None,
                 force_delete_after_s: float = FORCE_DELETE_AFTER_S, progress_url: str | None = None) -> None:
        self.api = api
        # The progress endpoint pods report to (None: no endpoint, no progress env in the pods); its
        # hub and CA are set by the operator once it serves.
        self.progress_url = progress_url
        self.progress: ProgressHub | None = None
        self.progress_ca: str | None = None
        self.ca_namespaces: set[str] = set()  # where the CA ConfigMap is known to be current
        self.namespace = namespace
        self.force_delete_after_s = force_delete_after_s
        self.gang_scheduler = gang_scheduler
        self.workers = workers
        self.init_image = init_image
        self.wait_for_master = wait_for_master
        self.queue = WorkQueue()
        owned = {kr.LABEL_JOB: None}  # has the label (lightkube: None means "exists")
        self.jobs = Informer(api, "TorchJob", namespace, self._on_job)
        self.pods = Informer(api, "Pod", namespace, self._on_pod, labels=owned, transform=pod_summary)
        self.services = Informer(api, "Service", namespace, self._on_service, labels=owned, transform=metadata_only)
        self.pods_by_job: dict[Key, dict[str, dict[str, Any]]] = {}
        self.gone: dict[Key, dict[str, dict[str, Any]]] = {}  # pods deleted since, by job, until decided on
        self.groups: set[Key] = set()  # jobs whose PodGroup this process created or found
        self.admitted: set[Key] = set()  # jobs whose PodGroup lets their pods be created
        self.waiting: set[Key] = set()  # jobs told (by an event) that they wait for admission
        self.boards: set[Key] = set()  # jobs whose TensorBoard this process created or found
        # Third-party kinds (Volcano PodGroups, Kueue Workloads), watched from the first object of
        # the kind this operator makes: never without their CRD.
        self.watches: dict[str, Informer] = {}
        self.watch_tasks: list[asyncio.Task[None]] = []
        self.background: set[asyncio.Task[None]] = set()  # held so they are not collected mid-flight
        self.ready = asyncio.Event()

    # --- events from the informers ---

    def _on_job(self, obj: dict[str, Any]) -> None:
        self.queue.add(key_of(obj))

    @staticmethod
    def _owner(obj: dict[str, Any]) -> Key | None:
        job = obj["metadata"].get("labels", {}).get(kr.LABEL_JOB)
        return (obj["metadata"].get("namespace") or "default", job) if job else None

    def _on_pod(self, obj: dict[str, Any]) -> None:
        key = self._owner(obj)
        if key is None:
            return
        pods = self.pods_by_job.setdefault(key, {})
        name = obj["metadata"]["name"]
        if key_of(obj) in self.pods.cache:
            pods[name] = self.pods.cache[key_of(obj)]
        elif pods.pop(name, None) is not None:
            self.gone.setdefault(key, {})[name] = obj  # its last state: an eviction, maybe
        if not pods:
            del self.pods_by_job[key]
        self.queue.add(key)

    def _on_service(self, obj: dict[str, Any]) -> None:
        key = self._owner(obj)
        if key is not None:
            self.queue.add(key)

    # --- running ---

    async def run(self) -> None:
        informers = (self.jobs, self.pods, self.services)
        tasks = [asyncio.create_task(i.run()) for i in informers]
        synced = asyncio.create_task(self._synced(informers))
        try:
            # An informer that dies before its first list (it only returns by raising) must stop
            # the operator, not leave it waiting forever, never ready.
            first: list[asyncio.Future[Any]] = [synced, *tasks]
            await asyncio.wait(first, return_when=asyncio.FIRST_COMPLETED)
            for t in tasks:
                if t.done():
                    t.result()
                    raise RuntimeError("an informer stopped before its caches synced")
            self.ready.set()
            log.info("caches synced: %d jobs, %d pods", len(self.jobs.cache), len(self.pods.cache))
            tasks += [asyncio.create_task(self._worker()) for _ in range(self.workers)]
            await asyncio.gather(*tasks)
        finally:
            synced.cancel()
            for t in [*tasks, *self.watch_tasks]:
                t.cancel()

    @staticmethod
    async def _synced(informers: tuple[Informer, ...]) -> None:
        for i in informers:
            await i.synced.wait()

    async def _worker(self) -> None:
        while True:
            key = await self.queue.get()
            # Shielded: a stopping operator cancels its workers, but lets what they started finish (drain).
            await asyncio.shield(self._spawn(self._process(key)))

    async def _process(self, key: Key) -> None:
        metrics.ACTIVE_WORKERS.labels(metrics.CONTROLLER).inc()
        start = time.monotonic()
        try:
            await self.reconcile(key)
            metrics.RECONCILE_TOTAL.labels(metrics.CONTROLLER, "success").inc()
        except asyncio.CancelledError:
            raise
        except Exception as e:
            if job_gone(e, key):
                # Deleted while this reconcile wrote for it: not an error. Its delete event comes
                # through the watch; one more look then finds nothing left to do.
                log.debug("reconcile %s/%s: the job is gone", key[0], key[1])
                self.queue.add_after(key, 1.0)
                return
            metrics.RECONCILE_TOTAL.labels(metrics.CONTROLLER, "error").inc()
            metrics.RECONCILE_ERRORS.labels(metrics.CONTROLLER).inc()
            log.warning("reconcile %s/%s failed: %s", key[0], key[1], e)
            self.queue.add_after(key, 1.0)
        finally:
            metrics.RECONCILE_TIME.labels(metrics.CONTROLLER).observe(time.monotonic() - start)
            metrics.ACTIVE_WORKERS.labels(metrics.CONTROLLER).dec()
            self.queue.done(key)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(work)
        self.background.add(task)
        task.add_done_callback(self.background.discard)
        return task

    async def drain(self, timeout_s: float) -> int:
        """After `run` is cancelled: let reconciles in flight and the writes they left behind (events,
        force deletes) finish, up to timeout_s; returns how many were cut short."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self.background and (left := deadline - loop.time()) > 0:
            await asyncio.wait(set(self.background), timeout=left)
        cut = len(self.background)
        for t in list(self.background):
            t.cancel()
        return cut

    async def _record(self, raw: dict[str, Any], events: list[Event], at: datetime) -> None:
        for i, ev in enumerate(events):  # stamped when decided, in the plan's order
            await self.api.event(raw, ev.type, ev.reason, ev.message, at + timedelta(microseconds=i))

    # --- the reconcile ---

    async def reconcile(self, key: Key) -> None:
        raw = self.jobs.cache.get(key)
        if raw is None or raw["metadata"].get("deletionTimestamp"):
            self.queue.forget(key)  # its pods stay indexed until they go: a new job of that name must see them
            self.gone.pop(key, None)
            self._forget_podgroup(key)
            self.boards.discard(key)
            if self.progress is not None:
                self.progress.forget(key)
            return
        try:
            job = job_of(raw)
        except ValidationError as e:
            problems = "; ".join(f"{'.'.join(map(str, err['loc']))}: {err['msg']}" for err in e.errors())
            await self._fail(raw, "InvalidSpec", problems)
            return
        status = JobStatus.model_validate(raw.get("status") or {})
        job = gang.with_default_scheduler(job, self.gang_scheduler).model_copy(update={"status": status})
        if kueue.queue_name(job):
            if not status.conditions and not job.run_policy.suspend:
                await self._hold_for_kueue(raw, job)
                return
            if not await self._sync_workload(raw, job, key):
                return
        pods, stale, gone = self._pods(job, key)
        now = datetime.now(UTC)
        world = observe(job, pods, gone=gone)
        if self.progress is not None:
            world = self.progress.with_reports(key, world)
        plan = reconcile(job, world, now)
        self._keep_undecided_evictions(job.model_copy(update={"status": plan.status}), key, gone)
        if plan.status != status:
            await self._write_status(raw, job, plan.status)
        if plan.events:  # in order, but not in the way of the pods: events are best effort
            self._spawn(self._record(raw, plan.events, now))
        active = not plan.status.finished and not plan.status.is_true("Suspended")
        gate = await self._sync_podgroup(raw, job, key, active, started=bool(pods))
        if gate == "failed":
            return
        if not plan.status.finished and (key[0], job.name) not in self.services.cache:
            await self._create(kr.service(job))  # before the pods: their names resolve as they start
        if self.progress_ca is not None and key[0] not in self.ca_namespaces and any(
                isinstance(a, Create) for a in plan.actions):
            await self._publish_ca(key[0])  # before the pods, which project it
        blocked = await self._clear_stale(job, stale)
        try:
            await self._apply(job, plan, blocked, create=gate == "create")
        except ApiError as e:
            if status_code(e) != 422:
                raise
            # The API server refuses the pod we rendered from the user's template: a mistake of
            # theirs, so the job fails with the server's words instead of retrying forever.
            await self._fail(self.jobs.cache.get(key, raw), "InvalidSpec", f"a pod of this job is invalid: {e}")
            return
        if job.spec.tensorboard is not None and not plan.status.finished and key not in self.boards:
            await self._create_tensorboard(raw, job, key)
        if plan.requeue_at is not None:
            self.queue.add_after(key, (plan.requeue_at - now).total_seconds())
        self._force_delete_stuck(job, pods, now)

    def _pods(self, job: TorchJob, key: Key) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
        """The job's pods; pods of an earlier job of the same name; the job's pods deleted since."""
        pods: list[dict[str, Any]] = []
        stale: list[dict[str, Any]] = []
        here = self.pods_by_job.get(key, {})
        for p in here.values():
            (pods if controller_uid(p) == job.metadata.uid else stale).append(p)
        gone = [p for name, p in self.gone.pop(key, {}).items()
                if name not in here and controller_uid(p) == job.metadata.uid]
        return pods, stale, gone

    def _keep_undecided_evictions(self, decided: TorchJob, key: Key, gone: list[dict[str, Any]]) -> None:
        """A deleted pod is decided on once (the decision moves its attempt on or ends the job); one
        a policy's timeout still holds back is kept for the next reconcile."""
        kept = {p["metadata"]["name"]: p for p in gone
                if any(o.reason == "Evicted" for o in observe(decided, [], gone=[p]).replicas.values())}
        if kept:
            self.gone[key] = kept

    async def _clear_stale(self, job: TorchJob, stale: list[dict[str, Any]]) -> set[str]:
        """Pods named like this job's but owned by an earlier job of the same name (deleted, its pods
        not yet collected) are not ours to observe; they are deleted, as the garbage collector would,
        and their names are not created again until they are gone. Returns those names."""
        names = set()
        for p in stale:
            meta = p["metadata"]
            names.add(meta["name"])
            if not meta.get("deletionTimestamp"):
                log.info("deleting %s/%s, left by an earlier job %s", meta.get("namespace"), meta["name"], job.name)
                await self.api.delete("Pod", meta["name"], meta.get("namespace", "default"), 0)
        if names:
            self.queue.add_after((job.metadata.namespace or "default", job.name), 1.0)
        return names

    async def _hold_for_kueue(self, raw: dict[str, Any], job: TorchJob) -> None:
        """Kueue admits a job by resuming it: one under a Kueue queue starts suspended, before any pod."""
        meta = raw["metadata"]
        self.jobs.remember(await self.api.patch_spec(meta["name"], meta.get("namespace", "default"),
                                                     {"runPolicy": {"suspend": True}}))
        await self.api.event(raw, "Normal", "Queued", f"suspended until Kueue admits it from queue "
                                                      f"{kueue.queue_name(job)}")

    async def _sync_workload(self, raw: dict[str, Any], job: TorchJob, key: Key) -> bool:
        """The job's Kueue Workload: made while it waits, its admission turned into a resumed (or
        suspended) job, marked Finished when the job ends. False: the reconcile stops here (the job
        was just patched or failed; its watch event brings it back)."""
        status = job.status or JobStatus()
        wl_key = (key[0], kueue.workload_name(job.name))
        wl, _ = await self._look_up(kueue.WORKLOAD, wl_key)
        if status.finished:
            if wl is not None and not kueue.finished(wl):
                now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
                await self.api.apply_status(kueue.WORKLOAD, kueue.finished_status(wl_key[1], key[0], status, now))
            return True
        if wl is None:
            return await self._create_workload(raw, job, key)
        suspended, admitted = bool(job.run_policy.suspend), kueue.admitted(wl)
        if admitted and suspended:
            flavors = {}
            for name in sorted(kueue.flavor_names(wl)):
                found = await self._flavor(name)
                if found is not None:
                    flavors[name] = found
            self.jobs.remember(await self.api.patch_spec(job.name, key[0], kueue.admit_patch(job, wl, flavors)))
            where = f" on {', '.join(sorted(flavors))}" if flavors else ""
            await self.api.event(raw, "Normal", "Admitted",
                                 f"admitted by Kueue ClusterQueue {kueue.cluster_queue(wl)}{where}")
            return False
        if not admitted and not suspended:
            self.jobs.remember(await self.api.patch_spec(job.name, key[0], kueue.suspend_patch(job, wl)))
            await self.api.event(raw, "Normal", "Queued", f"suspended: {kueue.lost_admission(wl)}")
            return False
        return True

    async def _create_workload(self, raw: dict[str, Any], job: TorchJob, key: Key) -> bool:
        try:
            await self.api.create(kueue.workload(job, kr.owner_reference(job), kr.selector(job)))
        except Exception as e:
            code = status_code(e)
            if code == 409:
                return True  # made in between; its watch event comes
            if code != 404:
                raise
            message = (f"the job names the Kueue queue {kueue.queue_name(job)!r}, but Kueue's Workload CRD "
                       f"{kueue.WORKLOAD_CRD} is not installed on this cluster: install Kueue, or remove the "
                       f"label {kueue.QUEUE_LABEL}")
            await self._fail(self.jobs.cache.get(key, raw), "KueueUnavailable", message)
            return False
        self._watch(kueue.WORKLOAD)
        return True

    async def _flavor(self, name: str) -> dict[str, Any] | None:
        found = await self.api.find(kueue.RESOURCE_FLAVOR, name, None)
        if found is None:
            log.warning("Kueue ResourceFlavor %s not found; admitting without its node labels", name)
        return found

    def _forget_podgroup(self, key: Key) -> None:
        self.groups.discard(key)
        self.admitted.discard(key)
        self.waiting.discard(key)

    async def _sync_podgroup(self, raw: dict[str, Any], job: TorchJob, key: Key, active: bool, started: bool
                             ) -> Literal["create", "wait", "failed"]:
        """The PodGroup exists while the job can run (created before its pods) and is deleted when it
        ends or is suspended, so that the scheduler stops holding room for it. Without the PodGroup
        CRD a job that has no pod yet fails; one already running goes on. Returns whether pods may
        be created now, must wait for the scheduler's admission, or the job failed."""
        group = kr.podgroup(job)
        if group is None:
            return "create"
        if not active:
            if key in self.groups:
                self._forget_podgroup(key)
                await self.api.delete(client.kind_of(group), job.name, key[0])
            return "create"
        if key not in self.groups and not await self._create_podgroup(raw, job, key, group, started):
            return "failed"
        return await self._admission(raw, job, key, group)

    async def _admission(self, raw: dict[str, Any], job: TorchJob, key: Key, group: dict[str, Any]
                         ) -> Literal["create", "wait"]:
        """Volcano's gate: pods are created once the PodGroup leaves Pending. PodGroups are watched
        from the first one this operator makes (the CRD exists then); a change requeues its job."""
        if key in self.admitted or not gang.awaits_admission(job):
            return "create"
        stored, watched = await self._look_up(client.kind_of(group), key)
        if stored is None:
            self.groups.discard(key)  # deleted by someone: made again on the next reconcile
            self.queue.add_after(key, ADMISSION_POLL_S)
            return "wait"
        if gang.admitted(stored):
            self.admitted.add(key)
            return "create"
        if key not in self.waiting:
            self.waiting.add(key)
            await self.api.event(raw, "Normal", "PodGroupPending", gang.admission_message(job))
        if not watched:
            self.queue.add_after(key, ADMISSION_POLL_S)  # until the watch can tell
        return "wait"

    def _watch(self, kind: str) -> Informer:
        if kind not in self.watches:
            # A PodGroup is read for its status only; a Workload's spec holds the templates to restore.
            trim = None if kind == kueue.WORKLOAD else pod_summary
            informer = Informer(self.api, kind, self.namespace, self._on_owned, labels={kr.LABEL_JOB: None},
                                transform=trim)
            self.watches[kind] = informer
            self.watch_tasks.append(asyncio.get_running_loop().create_task(informer.run()))
        return self.watches[kind]

    def _on_owned(self, obj: dict[str, Any]) -> None:
        key = self._owner(obj)
        if key is not None:
            self.queue.add(key)

    async def _look_up(self, kind: str, key: Key) -> tuple[dict[str, Any] | None, bool]:
        """A third-party object by (namespace, name), from its watch when that has it (True), else
        asked for (False: one not seen yet, or made by an older operator without our label). The
        kind is watched from the first time one is found: its CRD exists then."""
        watch = self.watches.get(kind)
        if watch is not None and watch.synced.is_set() and key in watch.cache:
            return watch.cache[key], True
        found = await self.api.find(kind, key[1], key[0])
        if found is not None:
            self._watch(kind)
        return found, False

    async def _create_podgroup(self, raw: dict[str, Any], job: TorchJob, key: Key, group: dict[str, Any],
                               started: bool) -> bool:
        """False: the job failed, as the PodGroup CRD is missing and no pod of it runs yet."""
        try:
            await self._create(group)
        except Exception as e:  # an unknown resource type is a plain 404, not an ApiError
            if status_code(e) != 404:
                raise
            kind = gang.podgroup_kind(job)
            assert kind is not None
            message = (f"the job asks for the {gang.scheduler_name(job)!r} scheduler, whose PodGroup CRD {kind.crd} "
                       f"is not installed on this cluster: install {kind.flavor}, or remove schedulerName from "
                       f"runPolicy.schedulingPolicy and the pod templates")
            if not started:
                await self._fail(self.jobs.cache.get(key, raw), "PodGroupUnavailable", message)
                return False
            await self.api.event(raw, "Warning", "PodGroupUnavailable", message)
            self.admitted.add(key)  # its pods run without one; nothing to wait for
        self.groups.add(key)
        return True

    async def _publish_ca(self, namespace: str) -> None:
        """The progress endpoint's CA in the namespace's ConfigMap (made, or brought up to date)."""
        from torchjob.kube.progress_tls import CA_CONFIGMAP, CA_KEY, ca_configmap

        assert self.progress_ca is not None
        found = await self.api.find("ConfigMap", CA_CONFIGMAP, namespace)
        if found is None:
            await self._create(ca_configmap(namespace, self.progress_ca))
        elif (found.get("data") or {}).get(CA_KEY) != self.progress_ca:
            await self.api.patch_data("ConfigMap", CA_CONFIGMAP, namespace, {CA_KEY: self.progress_ca})
        self.ca_namespaces.add(namespace)

    async def _create_tensorboard(self, raw: dict[str, Any], job: TorchJob, key: Key) -> None:
        created = [await self._create(obj) for obj in tensorboard.objects(job, kr.owner_reference(job))]
        self.boards.add(key)
        if any(created):
            await self.api.event(raw, "Normal", "TensorBoardCreated", f"TensorBoard at {tensorboard.address(job)}")

    async def _write_status(self, raw: dict[str, Any], job: TorchJob, status: JobStatus) -> None:
        meta = raw["metadata"]
        stored = await self.api.patch_status(meta["name"], meta.get("namespace", "default"), status_dict(job, status))
        # Our own write is newer than what the informer has seen (it skips older events): the next
        # reconcile starts from it and does not act twice.
        self.jobs.remember(stored)

    async def _fail(self, raw: dict[str, Any], reason: str, message: str) -> None:
        status = JobStatus.model_validate(raw.get("status") or {})
        if status.finished:
            return
        from torchjob.core.reconcile import set_condition

        now = datetime.now(UTC)
        set_condition(status, "Failed", True, reason, message, now)
        status.completionTime = now
        status.failure = FailureInfo(reason=reason, message=message)
        meta = raw["metadata"]
        self.jobs.remember(await self.api.patch_status(meta["name"], meta.get("namespace", "default"),
                                                       status.model_dump(mode="json")))
        await self.api.event(raw, "Warning", reason, message)

    async def _create(self, obj: dict[str, Any]) -> bool:
        """Create; False when it already exists (adopted, after a restart or a stale cache)."""
        try:
            created = await self.api.create(obj)
        except Exception as e:
            if status_code(e) == 409:
                return False
            raise
        if obj["kind"] == "Pod":
            self._on_pod(self.pods.remember(created))
        elif obj["kind"] == "Service" and kr.LABEL_JOB in created["metadata"].get("labels", {}):
            self.services.remember(created)  # not created twice before its watch event
        return True

    async def _apply(self, job: TorchJob, plan: Plan, blocked: set[str], create: bool = True) -> None:
        ns = job.metadata.namespace or "default"
        for a in plan.actions:
            if isinstance(a, Stop | Forget | Purge):
                grace = job.spec.pytorchReplicaSpecs[a.replica.rtype].template.spec.terminationGracePeriodSeconds
                await self.api.delete("Pod", kr.pod_name(job, a.replica), ns,
                                      grace_s=grace if isinstance(a, Stop) else 0)
            elif isinstance(a, DeleteJob):
                await self.api.delete("TorchJob", job.name, ns)
        # Not created: pods whose name an earlier job's pod still holds, or all while the PodGroup
        # waits (both requeued). The others at once: a job's pods are independent requests.
        creates = [a for a in plan.actions if isinstance(a, Create) and create]
        await asyncio.gather(*(self._create(kr.pod(job, a.replica, a.attempt, init_image=self.init_image,
                                                   wait=self.wait_for_master, progress_url=self.progress_url))
                               for a in creates if kr.pod_name(job, a.replica) not in blocked))

    def _force_delete_stuck(self, job: TorchJob, pods: list[dict[str, Any]], now: datetime) -> None:
        for p in pods:
            deleting = p["metadata"].get("deletionTimestamp")
            since = parse_time(deleting)
            if since is None:
                continue
            # The server sets deletionTimestamp to the request's time plus the grace period: past it,
            # a kubelet would have killed the pod; one that is still there sits on a node that is gone.
            due = since + timedelta(seconds=self.force_delete_after_s)
            if now >= due:
                log.warning("force-deleting %s, stuck terminating since %s", p["metadata"]["name"], deleting)
                self._spawn(self.api.delete("Pod", p["metadata"]["name"], p["metadata"].get("namespace", "default"), 0))
            else:
                self.queue.add_after((job.metadata.namespace or "default", job.name), (due - now).total_seconds())
