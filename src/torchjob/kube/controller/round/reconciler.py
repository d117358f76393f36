"""One round of one job: observe, decide once, write, act.

    world  = observe(job, its pods, the pods gone since, progress, what was learned)   (observe.py)
    plan   = core.reconcile(job, world, now)                                            (once)
    write the status and events, then act: the PodGroup gate, the Service, the pods

Never a duplicate pod: pod names are deterministic (`{job}-{type}-{i}`), so a create that races
a stale cache gets 409 and changes nothing; after a restart the operator adopts what exists. The
decision is written to the job's status *before* it is acted on, so a crash between the two
repeats the action instead of losing or double-counting it (Kubeflow's #3419 marked the job
Failed only after deleting its pods). What the round learns while acting and cannot act on (a pod
the API server refuses, a PodGroup or Kueue kind missing) is recorded as a fact of the job (its
memory: memory.py) and the round asks to be run again at once: the next round's World carries it
and core decides the ending. Admission too is observed (the gates' `observe`: what Kueue's Workload and
the PodGroup say) and decided by core (core/policies/admission.py); the gates only carry the steps out. Kueue's
hold, resume and suspend change the job's spec and end the round there, before any status write.

A round returns its outcome (`Result`: look again at once, after a while, or forget the job); the
controller alone acts on it with the work queue.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime, timedelta
from typing import Any, assert_never

from lightkube.core.exceptions import ApiError

from torchjob.api.model import JobStatus, TorchJob
from torchjob.api.status import ConditionType, EventType, Reason
from torchjob.core.policies import hangs, spares
from torchjob.core.round.initializers import is_step
from torchjob.core.round.reconcile import (
    Abandon,
    Admission,
    Admit,
    Create,
    DeleteJob,
    Event,
    Forget,
    Plan,
    Purge,
    Refusal,
    Seen,
    Stop,
    reconcile,
)
from torchjob.core.round.reconcile import refuse as refuse_unreadable
from torchjob.kube.controller.pods.configmaps import ConfigMaps
from torchjob.kube.controller.pods.deletes import Delete, delete_once, forget_gone
from torchjob.kube.controller.pods.leaving import again_if_failed, leaving
from torchjob.kube.controller.pods.seen_pods import KEEP_FROM, JobPods
from torchjob.kube.controller.pods.stall_stacks import StallStacks
from torchjob.kube.controller.process.config import OperatorConfig
from torchjob.kube.controller.round import observe
from torchjob.kube.controller.round.gates import KueueGate, Look, PodGroupGate
from torchjob.kube.controller.round.memory import JobMemory
from torchjob.kube.controller.round.names import check_taken
from torchjob.kube.controller.round.outcome import DONE, GONE, Result
from torchjob.kube.controller.round.refused import PodRefused, raise_first, refusal_of
from torchjob.kube.controller.round.round_parts import Decision, JobCaches, ProgressLink
from torchjob.kube.machinery.api_protocol import ApiProtocol
from torchjob.kube.machinery.client import status_code
from torchjob.kube.machinery.informer import Key, only_status_changed
from torchjob.kube.objects.admission import gang
from torchjob.kube.objects.front import inplace, stacks
from torchjob.kube.objects.labels import LABEL_JOB, ownership, pod_name
from torchjob.kube.objects.workload import claims, tensorboard
from torchjob.kube.objects.workload import pods as pod_objects
from torchjob.kube.objects.workload.pods import RESTART_GRACE_S
from torchjob.kube.objects.workload.reporting import ca_configmap
from torchjob.kube.objects.workload.steps import step_pod
from torchjob.kube.served.kinds import ServedKind
from torchjob.kube.served.reading import Unreadable

log = logging.getLogger("torchjob.kube")
STOP_PATIENCE_S = 30  # how long past its grace an attempt asked to stop in place may go unreported (then deleted)
STALE_RECHECK_S = 1.0  # how soon a job looks again whether an earlier job's pods have freed its names


class Reconciler:
    """One round of one job (`reconcile`), returning what the work queue should do with it. What it
    keeps of each job between rounds is in `caches.memories` (the controller's, which forgets)."""

    def __init__(self, *, api: ApiProtocol, kind: ServedKind, caches: JobCaches,
                 kueue_gate: KueueGate, podgroup_gate: PodGroupGate, config: OperatorConfig,
                 progress: ProgressLink | None, spawn: Callable[[Coroutine[Any, Any, None]], Any]) -> None:
        self.api, self.kind, self.memories, self.config = api, kind, caches.memories, config
        self.progress, self.spawn = progress, spawn
        self.jobs, self.pods, self.services, self.index = caches.jobs, caches.pods, caches.services, caches.index
        self.kueue_gate, self.podgroup_gate = kueue_gate, podgroup_gate
        self.pod_options, self.stall_stacks = config.pods, StallStacks(api, spawn)
        self.configmaps = ConfigMaps(api, self._create)
        self.seal = progress.seal if progress is not None else inplace.NO_SEAL

    async def reconcile(self, key: Key) -> Result:
        raw = self.jobs.cache.get(key)
        if raw is None or raw["metadata"].get("deletionTimestamp"):
            return GONE
        if not self.kind.serves(raw):  # another manager's (Kueue's MultiKueue): nothing made, nothing written
            return DONE
        memory = self.memories.of(key)
        status = memory.status(raw, self.kind.status_of, KEEP_FROM)  # a big job's: read once per change
        now = datetime.now(UTC)
        found = await self.kind.needs(self.api, raw) if self.kind.needs is not None else []
        try:
            job = self.kind.read(raw, found)
        except Unreadable as e:
            await self._write(raw, None, status, refuse_unreadable(status, Refusal(Reason.INVALID_SPEC, str(e)), now))
            return DONE
        job = gang.with_default_scheduler(job, self.config.gang_scheduler).model_copy(update={"status": status})
        queue = await self.kueue_gate.observe(raw, job, key, memory) if self.kind.own_kueue else Look()
        group = await self.podgroup_gate.observe(job, key, memory)
        result = DONE.after(queue.recheck_s).after(group.recheck_s)
        pods = self.index.split(raw, job, key, memory, self.seal)  # only those changed since read again
        gone, admission = pods.gone, Admission(queue.seen, queue.finished, group.seen, group.awaited)
        world = observe.world(pods.observed(job, self.seal), refused=memory.learned, admission=admission,
                              **self._book(key, job))
        world, soon = self.stall_stacks.fact(job, world, lambda: map(pods.pod, list(pods.own)), memory, now)
        plan = reconcile(job, world, now)
        plan.status = observe.kept_tails(plan.status, job, gone)  # the gone pods' ends of logs (logs --kube --attempt)
        self.stall_stacks.keep(plan, memory)  # a stall's stacks (stall_stacks.py): status.keptStacks, an event
        self._say_not_in_place(job, plan)
        if plan.admission and plan.admission[0].ends_round:
            # Kueue's say changes the job's spec first: nothing else is written or done; its watch
            # event brings it back, and the pods deleted since are shown to core then.
            memory.gone = {**{p["metadata"]["name"]: p for p in gone}, **memory.gone}
            await self.kueue_gate.carry_out(plan.admission[0], raw, job, key, queue, plan.status)
            return result
        self.index.keep_undecided(job.model_copy(update={"status": plan.status}), memory, gone, self.seal)
        await self._write(raw, job, status, plan)
        if plan.status.finished:
            memory.learned = None  # decided on: a finished job ignores it
        decision = Decision(raw, job, key, memory, plan, now)
        creates, result = await self._admit(decision, queue, group, bool(pods.own), result.after(soon))
        result = await self._act(decision, pods, result, creates)
        self._tell_foreign(raw, key, memory, pods.foreign)
        return result

    def _say_not_in_place(self, job: TorchJob, plan: Plan) -> None:
        """The replicas of a job with warm spares that restart as new pods, not in place (core.spares.
        on_a_cluster: why), said in one Warning event beside the job's Created one: once per job, an
        operator restart included (Created is said once, from its status)."""
        note = spares.on_a_cluster(job, endpoint=self.progress is not None)
        if note is not None and any(ev.reason == Reason.CREATED for ev in plan.events):
            plan.event(EventType.WARNING, Reason.WARM_SPARES_NOT_IN_PLACE, note)

    def _book(self, key: Key, job: TorchJob) -> dict[str, Callable[[str, int], Any]]:
        """What the job's progress book says of a replica attempt, as observe.world reads it (none: no endpoint;
        no stillness for a job whose hangs are not watched)."""
        if self.progress is None:
            return {}
        books, plural = self.progress.books, self.kind.plural
        kept = ("last_report", "reported_done", "still") if hangs.deadline(job) is not None else \
            ("last_report", "reported_done")
        return {what: functools.partial(getattr(books, what), plural, key) for what in kept}

    async def _admit(self, d: Decision, queue: Look, group: Look, started: bool, result: Result) -> tuple[bool, Result]:
        """The admission steps core decided, carried out before the Service and the pods; returns
        whether the pods may be made (not when the PodGroup could not be), and `result` with what
        carrying them out adds (a refusal learned: look again at once; a recheck)."""
        raw, job, key, memory, plan = d.raw, d.job, d.key, d.memory, d.plan
        creates = True
        for step in plan.admission:
            if step in (Admit.MAKE_PODGROUP, Admit.DELETE_PODGROUP):
                done = await self.podgroup_gate.carry_out(step, raw, job, key, memory, started)
            else:
                done = await self.kueue_gate.carry_out(step, raw, job, key, queue, plan.status)
            creates, result = creates and done.pods, result.after(done.recheck_s)
            if done.refused is not None:
                memory.learned = memory.learned or done.refused
                creates, result = False, result.now()
        active = not plan.status.finished and not plan.status.is_true(ConditionType.SUSPENDED)
        if active and group.seen is Seen.PENDING:  # core holds the pods back until Volcano admits the gang
            await self.podgroup_gate.wait(raw, job, memory)
        return creates, result

    async def _act(self, d: Decision, pods: JobPods, result: Result, creates: bool) -> Result:
        """Carry the plan out; returns `result` with what acting adds: a fact learned (look again at
        once), the earlier job's pods to wait for, the plan's deadline, a stuck pod's."""
        raw, job, key, memory, plan, now = d.raw, d.job, d.key, d.memory, d.plan, d.now
        if not plan.status.finished and (key[0], job.name) not in self.services.cache:
            await self._create(pod_objects.service(job))  # before the pods: their names resolve as they start
        if job.spec.volumeClaims and not plan.status.finished and not memory.claims:
            for claim in claims.claims(job):  # before the pods, which mount them
                await self._create(claim)
            memory.claims = True
        if creates and any(isinstance(a, Create) for a in plan.actions):  # before the pods, which project them
            if self.progress is not None:
                await self.configmaps.publish(ca_configmap(key[0], self.progress.trust.pem))
            if (spares := bool(job.run_policy.warmSpares and self.progress)) or stacks.wanted(job.metadata.annotations):
                await self.configmaps.publish(inplace.configmap(key[0]), optional=not spares)
        blocked = await self._clear_stale(job, pods.stale)
        result = result.after(STALE_RECHECK_S) if blocked else result
        try:
            await self._apply(job, plan, blocked, pods, memory, creates)
        except PodRefused as e:
            # The API server refuses a pod for a reason retrying cannot cure (invalid, Pod Security,
            # a webhook's denial: core.refusals): a fact of the job, which fails in the next round
            # with the server's words, instead of being retried forever.
            log.warning("%s/%s: %s", key[0], key[1], e.refusal.message)
            memory.learned = memory.learned or e.refusal
            return result.now()
        if job.spec.tensorboard is not None and not plan.status.finished and not memory.board:
            await self._create_tensorboard(raw, job, memory)
        if plan.requeue_at is not None:
            result = result.after((plan.requeue_at - now).total_seconds())
        for pod in pods.stop_pending():  # an attempt asked to stop in place, its entry point not answering: it goes
            due = inplace.stop_overdue(pod, now, self.seal)
            if due is not None and due <= 0:
                log.warning("%s: its attempt asked to stop has not ended; deleting the pod", pod["metadata"]["name"])
                await self.api.delete("Pod", pod["metadata"]["name"], key[0], grace_s=0)
            result = result.after(due) if due is not None and due > 0 else result
        return result.after(self._force_delete_stuck(raw, memory, pods.going(), now))

    async def _write(self, raw: dict[str, Any], job: TorchJob | None, status: JobStatus, plan: Plan) -> None:
        """The decision, before it is acted on: the status (when it or the generation it was decided on
        changed), then the events, in order, best effort and not in the way of the pods."""
        generation = raw["metadata"].get("generation")
        if plan.status != status or (raw.get("status") or {}).get("observedGeneration") != generation:
            meta = raw["metadata"]
            # The generation it was decided on: a client that changed the spec knows the operator
            # has acted once observedGeneration reaches the generation its change made.
            stored_status = {**self.kind.status_patch(job, plan.status, datetime.now(UTC)),
                             "observedGeneration": generation}
            stored = await self.api.patch_status(meta["name"], meta.get("namespace", "default"), stored_status,
                                                 kind=self.kind.kind, seen=raw)
            # Our own write is newer than what the informer has seen (it skips older events): the
            # next reconcile starts from it and does not act twice. This round acts on it, so its
            # echo is no change, unless someone else wrote the job in between.
            self.jobs.remember(stored, quiet=only_status_changed(raw, stored))
        if plan.events:
            self.spawn(self._record(raw, plan.events, datetime.now(UTC)))

    async def _record(self, raw: dict[str, Any], events: list[Event], at: datetime) -> None:
        for i, ev in enumerate(events):  # stamped when decided, in the plan's order
            await self.api.event(raw, ev.type, ev.reason, ev.message, at + timedelta(microseconds=i))

    def _tell_foreign(self, raw: dict[str, Any], key: Key, memory: JobMemory, foreign: list[dict[str, Any]]) -> None:
        """Pods labelled as this job's that neither it nor an earlier job of its name and kind made
        (someone's, anyone's): never observed, never deleted; said once each in an event."""
        told = memory.told
        for p in foreign:
            meta = p["metadata"]
            if meta["name"] in told:
                continue
            told.add(meta["name"])
            whose = ownership.whose(p)
            log.warning("%s/%s: pod %s is labelled as this job's but its controller is %s: left alone", key[0],
                        key[1], meta["name"], whose)
            self.spawn(self.api.event(raw, EventType.WARNING, Reason.NOT_OURS,
                                      f"pod {meta['name']} is labelled {LABEL_JOB}={key[1]} but its controller "
                                      f"is {whose}, not this job: left alone (not counted, not deleted)"))

    async def _clear_stale(self, job: TorchJob, stale: list[dict[str, Any]]) -> set[str]:
        """Pods named as this job's and controlled by an earlier job of the same name and kind
        (deleted, its pods not yet collected) are not ours to observe; they are deleted, as the
        garbage collector would, and their names are not created again until they are gone. Returns
        those names. (Any other pod labelled as the job's is left alone: `_tell_foreign`.)"""
        names = set()
        for p in stale:
            meta = p["metadata"]
            names.add(meta["name"])
            if not meta.get("deletionTimestamp"):
                log.info("deleting %s/%s, left by an earlier job %s", meta.get("namespace"), meta["name"], job.name)
                await self.api.delete("Pod", meta["name"], meta.get("namespace", "default"), 0)
        return names

    async def _create_tensorboard(self, raw: dict[str, Any], job: TorchJob, memory: JobMemory) -> None:
        created = [await self._create(obj) for obj in tensorboard.objects(job, ownership.owner_reference(job))]
        memory.board = True
        if any(created):
            await self.api.event(raw, EventType.NORMAL, Reason.TENSORBOARD_CREATED,
                                 f"TensorBoard at {tensorboard.address(job)}")

    async def _create(self, obj: dict[str, Any]) -> bool:
        """Create; False when it already exists (adopted, after a restart or a stale cache)."""
        try:
            created = await self.api.create(obj)
        except Exception as e:
            if status_code(e) == 409:
                await check_taken(self.api, obj)
                return False
            raise
        # Cached at once (its ADDED event, the same version, is then no change: not a round more).
        if obj["kind"] == "Pod":
            self.pods.on_change(self.pods.remember(created, quiet=True))
        elif obj["kind"] == "Service" and LABEL_JOB in created["metadata"].get("labels", {}):
            self.services.remember(created, quiet=True)  # not created twice before its watch event
        return True

    async def _apply(self, job: TorchJob, plan: Plan, blocked: set[str], pods: JobPods, memory: JobMemory,
                     creates: bool) -> None:
        ns = job.metadata.namespace or "default"
        forget_gone(memory.deletes, pods.own)
        forgotten: set[str] = set()  # pods deleted as finished: no attempt starts in them
        # A pod restarting in place (objects/inplace.py) is kept through its replica's restart: its
        # attempt is stopped, and its next one started, in it. Not once the job ends or is suspended.
        ending = plan.status.finished or plan.status.is_true(ConditionType.SUSPENDED)
        made: list[Create] = []
        deletes: list[Delete] = []  # asked together (a gang restart's every pod), once (pods/deletes.py)
        stops: list[tuple[dict[str, Any], dict[str, str | None]]] = []  # in place: with the deletes (0.1 s each)
        for a in plan.actions:
            match a:
                case Stop():
                    pod = pods.pod(pod_name(job, a.replica))
                    rspec = job.spec.pytorchReplicaSpecs.get(a.replica.rtype)  # None: an initializer's
                    grace = rspec.template.spec.terminationGracePeriodSeconds if rspec is not None else None
                    # not the pod's 30 s: a peer hung in a collective of the failed rank (its PID 1 ignores
                    # SIGTERM) held the replacement of its name that long (bench/recovery.py)
                    grace = RESTART_GRACE_S if grace is None and a.restarting else grace
                    if a.restarting and not ending and pod is not None and inplace.runs(pod, a.attempt, self.seal):
                        by = datetime.now(UTC) + timedelta(seconds=(grace or 0) + STOP_PATIENCE_S)
                        stops.append((pod, inplace.stop_note(a.attempt, by)))
                        continue
                    deletes.append((pod_name(job, a.replica), pod, grace))
                case Forget() | Purge():  # a finished pod: nothing runs in it
                    pod = pods.pod(pod_name(job, a.replica))
                    if (isinstance(a, Forget) and not ending and pod is not None
                            and inplace.parked(pod, a.attempt, self.seal)):
                        continue  # its replica's next attempt starts in it
                    forgotten.add(pod_name(job, a.replica))
                    deletes.append((pod_name(job, a.replica), pod, 0))
                case DeleteJob():  # after its pods' deletes
                    await delete_once(self.api, ns, deletes, memory.deletes)
                    deletes = []
                    await self.api.delete(self.kind.kind, job.name, ns)
                case Create():
                    made.append(a)
                case Abandon():  # planned only for a lost runner (World.runner_lost), which a pod never is
                    log.error("%s/%s: %s planned on Kubernetes, where no runner is lost", ns, job.name, a)
                case _:
                    assert_never(a)
        raise_first(await asyncio.gather(*(self._note(pod, notes) for pod, notes in stops),  # bounded: Api.writes
                                         delete_once(self.api, ns, deletes, memory.deletes), return_exceptions=True))
        if plan.status.finished:  # what ended in place ends its pod now, with that attempt's exit code
            for pod in pods.in_place(but=forgotten):
                here = inplace.in_place(pod, self.seal)
                if here is not None and inplace.parked(pod, here.attempt, self.seal):
                    await self._note(pod, inplace.release_note(here.attempt))
        # Not created: pods whose name an earlier job's pod still holds, or all while the PodGroup
        # waits (both requeued). The others at once: a job's pods are independent requests.
        starts = [(a, pod_name(job, a.replica)) for a in made if creates]
        done = await asyncio.gather(*(self._start(job, a, None if n in forgotten else pods.pod(n))
                                      for a, n in starts if n not in blocked), return_exceptions=True)
        raise_first(done)

    async def _start(self, job: TorchJob, a: Create, pod: dict[str, Any] | None) -> None:
        """An attempt: in its replica's pod, where that pod waits for it (in place), else in a new pod."""
        if pod is None or not inplace.parked(pod, a.attempt - 1, self.seal, older=True):
            return await self._create_pod(job, a)
        try:  # only the pod as it was observed: one whose entry point gave up since (and ended) is not told
            await self._note(pod, inplace.restart_note(a.attempt, datetime.now(UTC)), guarded=True)
        except ApiError as e:
            if status_code(e) not in (404, 409):
                raise
            log.info("%s: changed since it was observed; looked at again", pod["metadata"]["name"])

    async def _note(self, pod: dict[str, Any], notes: dict[str, str | None], guarded: bool = False) -> None:
        """Annotate a pod restarting in place, under the operator's seal; the cache keeps what was
        written, and its job looks at it again (a new attempt runs in it: the job is Running again, as
        when a new pod starts)."""
        meta = pod["metadata"]
        self.pods.on_change(self.pods.remember(await self.api.patch_annotations(
            "Pod", meta["name"], meta.get("namespace", "default"), self.seal.close(meta["uid"], notes),
            uid=meta.get("uid"),
            resource_version=meta.get("resourceVersion") if guarded else None), quiet=True))

    async def _create_pod(self, job: TorchJob, a: Create) -> None:
        o = self.pod_options
        obj = step_pod(job, a.replica, a.attempt) if is_step(job, a.replica) else pod_objects.pod(
            job, a.replica, a.attempt, init_image=o.init_image, wait=o.wait_for_master, progress_url=o.progress_url)
        try:
            await self._create(obj)
        except ApiError as e:
            raise refusal_of(e, job, a.replica.rtype, obj["metadata"]["name"]) from e

    def _force_delete_stuck(self, raw: dict[str, Any], memory: JobMemory, pods: list[dict[str, Any]],
                            now: datetime) -> float | None:
        """Pods on their way out (controller/leaving.py): said on the job once, force-deleted when stuck.
        Returns when the next one is due (seconds), if one is."""
        out, told = leaving(pods, now, self.config.force_delete_after_s), memory.told
        for keys, reason, message in out.events(told):  # many pods of one reason: one event
            told.update(keys)
            self.spawn(self.api.event(raw, EventType.WARNING, reason, message))
        for p in (p for p in out.force if f"forcing {p['metadata'].get('uid')}" not in told):
            meta, once = p["metadata"], f"forcing {p['metadata'].get('uid')}"
            told.add(once)  # once each, again if that failed: a big job's rounds came while thousands were in flight
            log.warning("force-deleting %s, stuck terminating since %s", meta["name"], meta["deletionTimestamp"])
            task = self.spawn(self.api.delete("Pod", meta["name"], meta.get("namespace", "default"), 0))
            task.add_done_callback(again_if_failed(told, once))
        return (out.recheck_at - now).total_seconds() if out.recheck_at is not None else None

