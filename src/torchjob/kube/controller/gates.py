"""The gates a job passes before its pods are made: Kueue's (a Workload admitted from its queue)
and the gang scheduler's (a Volcano or scheduler-plugins PodGroup, admitted by Volcano).

A gate only observes and asks; what a refusal means for the job (a PodGroup or Kueue kind missing
on this cluster) is core's decision: the gate hands back a `Refusal` fact. What a gate remembers of
a job lives in the job's memory (memory.py), and when the job should be looked at again is part of
its answer (`Gate.recheck_s`): a gate never calls the work queue."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import Enum
from typing import Any

from torchjob.api.model import JobStatus, TorchJob
from torchjob.api.status import EventType, Reason
from torchjob.core.reconcile import Refusal
from torchjob.kube.controller.memory import GangMemory, JobMemory
from torchjob.kube.machinery import client
from torchjob.kube.machinery.api_protocol import ApiProtocol
from torchjob.kube.machinery.client import status_code
from torchjob.kube.machinery.informer import Informer, Key, Namespaces, pod_summary
from torchjob.kube.objects import gang, kueue
from torchjob.kube.objects import pods as kr

log = logging.getLogger("torchjob.kube")
ADMISSION_POLL_S = 2.0  # how often a job waiting for Volcano's admission looks, until PodGroups are watched
NOT_OURS_POLL_S = 5.0  # how often a job looks again whether a Workload or PodGroup of its name not its own is gone


class Verdict(Enum):
    CREATE = "create"  # go on: the pods may be made
    WAIT = "wait"  # hold the pods back (the job comes back by a watch event, or after recheck_s)
    STOP = "stop"  # end this round: the job was just patched, and its watch event brings it back


@dataclass(frozen=True)
class Gate:
    """What a gate says, and, when the job cannot run as written, why (`refused`: a fact for core);
    `recheck_s`: look at the job again after this long (something the gate waits for is not watched)."""

    verdict: Verdict
    refused: Refusal | None = None
    recheck_s: float | None = None


CREATE, WAIT, STOP = Gate(Verdict.CREATE), Gate(Verdict.WAIT), Gate(Verdict.STOP)


class ThirdPartyWatches:
    """Informers on third-party kinds (Volcano PodGroups, Kueue Workloads), started from the first
    object of the kind this operator makes or finds: never without their CRD."""

    def __init__(self, api: ApiProtocol, namespace: Namespaces, on_change: Callable[[dict[str, Any]], None]) -> None:
        self.api, self.namespace, self.on_change = api, namespace, on_change
        self.informers: dict[str, Informer] = {}
        self.tasks: list[asyncio.Task[None]] = []

    def watch(self, kind: str) -> Informer:
        if kind not in self.informers:
            # A PodGroup is read for its status only; a Workload's spec holds the templates to restore.
            trim = None if kind == kueue.WORKLOAD else pod_summary
            informer = Informer(self.api, kind, self.namespace, self.on_change, labels={kr.LABEL_JOB: None},
                                transform=trim)
            self.informers[kind] = informer
            self.tasks.append(asyncio.get_running_loop().create_task(informer.run()))
        return self.informers[kind]

    async def look_up(self, kind: str, key: Key) -> tuple[dict[str, Any] | None, bool]:
        """An object by (namespace, name), from its watch when that has it (True), else asked for
        (False: one not seen yet, or made by an older operator without our label). The kind is
        watched from the first time one is found: its CRD exists then."""
        informer = self.informers.get(kind)
        if informer is not None and informer.synced.is_set() and key in informer.cache:
            return informer.cache[key], True
        found = await self.api.find(kind, key[1], key[0])
        if found is not None:
            self.watch(kind)
        return found, False

    def cancel(self) -> None:
        for t in self.tasks:
            t.cancel()


async def not_ours(api: ApiProtocol, raw: dict[str, Any], key: Key, found: dict[str, Any], what: str,
                   told: set[str]) -> float:
    """A Workload or PodGroup of the name a job's would have, which the job does not control (an
    earlier job's of that name, not yet collected; another kind's; anyone's): never trusted, never
    adopted; said once in an event (`told`: what the job was told); returns when to look again,
    until it is gone."""
    name = f"{found.get('kind')} {found['metadata']['name']}"
    if name not in told:
        told.add(name)
        message = (f"{name} {what}, but its controller is {kr.whose(found)}, not this job: it is not this job's "
                   "and is not used; this job waits until it is gone (an earlier job's is deleted by the garbage "
                   "collector)")
        log.warning("%s/%s: %s", key[0], key[1], message)
        await api.event(raw, EventType.WARNING, Reason.NOT_OURS, message)
    return NOT_OURS_POLL_S


class KueueGate:
    """Kueue admits a job by resuming it. A job under a Kueue queue starts suspended, before any
    pod; its Workload is made while it waits; its admission resumes it (with the flavors' node
    labels), a lost admission suspends it again, and its end marks the Workload Finished. Only a
    Workload the job controls (its uid) is read: an admitted one an earlier job of the name left
    never admits this one."""

    def __init__(self, api: ApiProtocol, jobs: Informer, watches: ThirdPartyWatches) -> None:
        self.api, self.jobs, self.watches = api, jobs, watches

    async def check(self, raw: dict[str, Any], job: TorchJob, key: Key, memory: JobMemory) -> Gate:
        if not kueue.queue_name(job):
            return CREATE
        status = job.status or JobStatus()
        if not status.conditions and not job.run_policy.suspend:
            await self._hold(raw, job)
            return STOP
        return await self._sync_workload(raw, job, key, status, memory)

    async def _hold(self, raw: dict[str, Any], job: TorchJob) -> None:
        meta = raw["metadata"]
        self.jobs.remember(await self.api.patch_spec(meta["name"], meta.get("namespace", "default"),
                                                     {"runPolicy": {"suspend": True}}))
        await self.api.event(raw, EventType.NORMAL, Reason.QUEUED, f"suspended until Kueue admits it from queue "
                                                      f"{kueue.queue_name(job)}")

    async def _sync_workload(self, raw: dict[str, Any], job: TorchJob, key: Key, status: JobStatus,
                             memory: JobMemory) -> Gate:
        wl_key = (key[0], kueue.workload_name(job.name))
        wl, _ = await self.watches.look_up(kueue.WORKLOAD, wl_key)
        if wl is not None and not kr.owned_by(wl, job):
            # Not read: the job stays as it is (a suspended one suspended) until the name is free.
            again = await not_ours(self.api, raw, key, wl, "is the name of this job's Kueue Workload", memory.told)
            return Gate(Verdict.CREATE, recheck_s=again)
        if status.finished:
            if wl is not None and not kueue.finished(wl):
                now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
                await self.api.apply_status(kueue.WORKLOAD, kueue.finished_status(wl_key[1], key[0], status, now))
            return CREATE
        if wl is None:
            return await self._create_workload(job)
        suspended, admitted = bool(job.run_policy.suspend), kueue.admitted(wl)
        if admitted and suspended:
            flavors = {}
            for name in sorted(kueue.flavor_names(wl)):
                found = await self._flavor(name)
                if found is not None:
                    flavors[name] = found
            self.jobs.remember(await self.api.patch_spec(job.name, key[0], kueue.admit_patch(job, wl, flavors)))
            where = f" on {', '.join(sorted(flavors))}" if flavors else ""
            await self.api.event(raw, EventType.NORMAL, Reason.ADMITTED,
                                 f"admitted by Kueue ClusterQueue {kueue.cluster_queue(wl)}{where}")
            return STOP
        if not admitted and not suspended:
            self.jobs.remember(await self.api.patch_spec(job.name, key[0], kueue.suspend_patch(job, wl)))
            await self.api.event(raw, EventType.NORMAL, Reason.QUEUED, f"suspended: {kueue.lost_admission(wl)}")
            return STOP
        return CREATE

    async def _create_workload(self, job: TorchJob) -> Gate:
        try:
            await self.api.create(kueue.workload(job, kr.owner_reference(job), kr.selector(job)))
        except Exception as e:
            code = status_code(e)
            if code == 409:
                return CREATE  # made in between (its watch event comes), or held by another (seen next round)
            if code != 404:
                raise
            message = (f"the job names the Kueue queue {kueue.queue_name(job)!r}, but Kueue's Workload CRD "
                       f"{kueue.WORKLOAD_CRD} is not installed on this cluster: install Kueue, or remove the "
                       f"label {kueue.QUEUE_LABEL}")
            return Gate(Verdict.STOP, Refusal(Reason.KUEUE_UNAVAILABLE, message))
        self.watches.watch(kueue.WORKLOAD)
        return CREATE

    async def _flavor(self, name: str) -> dict[str, Any] | None:
        found = await self.api.find(kueue.RESOURCE_FLAVOR, name, None)
        if found is None:
            log.warning("Kueue ResourceFlavor %s not found; admitting without its node labels", name)
        return found


class PodGroupGate:
    """The PodGroup exists while the job can run (created before its pods) and is deleted when it
    ends or is suspended, so that the scheduler stops holding room for it. Volcano's admission:
    pods are created once the PodGroup leaves Pending (a change of a watched PodGroup requeues its
    job; until PodGroups are watched, the job looks again every ADMISSION_POLL_S)."""

    def __init__(self, api: ApiProtocol, watches: ThirdPartyWatches) -> None:
        self.api, self.watches = api, watches

    async def check(self, raw: dict[str, Any], job: TorchJob, key: Key, memory: JobMemory, active: bool,
                    started: bool) -> Gate:
        """Without the PodGroup CRD a job that has no pod yet is refused; one already running goes on."""
        group = kr.podgroup(job)
        if group is None:
            return CREATE
        if not active:
            if memory.gang.made:
                memory.gang = GangMemory()  # made afresh (and admitted again) if the job runs again
                await self.api.delete(client.kind_of(group), job.name, key[0])
            return CREATE
        if not memory.gang.made:
            held = await self._create(raw, job, key, group, memory.gang, started)
            if held is not None:
                return held
        return await self._admission(raw, job, key, group, memory.gang)

    async def _admission(self, raw: dict[str, Any], job: TorchJob, key: Key, group: dict[str, Any],
                         gang_memory: GangMemory) -> Gate:
        if gang_memory.admitted or not gang.awaits_admission(job):
            return CREATE
        stored, watched = await self.watches.look_up(client.kind_of(group), key)
        if stored is None or not kr.owned_by(stored, job):
            gang_memory.made = False  # deleted by someone (made again on the next reconcile), or replaced
            return Gate(Verdict.WAIT, recheck_s=ADMISSION_POLL_S)
        if gang.admitted(stored):
            gang_memory.admitted = True
            return CREATE
        if not gang_memory.waiting_said:
            gang_memory.waiting_said = True
            await self.api.event(raw, EventType.NORMAL, Reason.POD_GROUP_PENDING, gang.admission_message(job))
        # a change of a watched PodGroup brings the job back; until the watch can tell, it looks again
        return WAIT if watched else Gate(Verdict.WAIT, recheck_s=ADMISSION_POLL_S)

    async def _create(self, raw: dict[str, Any], job: TorchJob, key: Key, group: dict[str, Any],
                      gang_memory: GangMemory, started: bool) -> Gate | None:
        """The PodGroup made (or the job's own found): None, go on to its admission; else the gate's
        answer (refused, or waiting for its name to be free)."""
        try:
            await self.api.create(group)
        except Exception as e:  # an unknown resource type is a plain 404, not an ApiError
            code = status_code(e)
            if code == 409:  # made before: adopted when it is the job's own (this operator's, before a restart)
                return await self._adopt(raw, job, key, group, gang_memory)
            if code != 404:
                raise
            kind = gang.podgroup_kind(job)
            assert kind is not None
            message = (f"the job asks for the {gang.scheduler_name(job)!r} scheduler, whose PodGroup CRD {kind.crd} "
                       f"is not installed on this cluster: install {kind.flavor}, or remove schedulerName from "
                       f"runPolicy.schedulingPolicy and the pod templates")
            if not started:
                return Gate(Verdict.STOP, Refusal(Reason.POD_GROUP_UNAVAILABLE, message))
            await self.api.event(raw, EventType.WARNING, Reason.POD_GROUP_UNAVAILABLE, message)
            gang_memory.admitted = True  # its pods run without one; nothing to wait for
        gang_memory.made = True
        return None

    async def _adopt(self, raw: dict[str, Any], job: TorchJob, key: Key, group: dict[str, Any],
                     gang_memory: GangMemory) -> Gate | None:
        """The PodGroup of the job's name that exists: the job's own is adopted (None: go on); one an
        earlier job of the name left is deleted (as the garbage collector would); any other is left
        alone. Until the name is free no pod joins its gang: the job waits (`not_ours`)."""
        found = await self.api.find(client.kind_of(group), job.name, key[0])
        if found is None:  # gone in between: made on the next round
            return Gate(Verdict.WAIT, recheck_s=ADMISSION_POLL_S)
        if kr.owned_by(found, job):
            gang_memory.made = True
            return None
        if kr.left_by_earlier(found, job) and not found["metadata"].get("deletionTimestamp"):
            await self.api.delete(client.kind_of(group), job.name, key[0])
        again = await not_ours(self.api, raw, key, found, "is the name of this job's PodGroup", gang_memory.told)
        return Gate(Verdict.WAIT, recheck_s=again)
