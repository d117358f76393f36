"""The gates a job passes before its pods are made: Kueue's (a Workload admitted from its queue)
and the gang scheduler's (a Volcano or scheduler-plugins PodGroup, admitted by Volcano).

A gate observes (`observe`: a `Look`, which goes into the round's World) and carries out what core
decided (`carry_out`: core/policies/admission.py decides hold, resume, suspend, make and delete); it decides
nothing. What a refusal means for the job (a PodGroup or Kueue kind missing on this cluster) is
core's decision too: the gate hands back a `Refusal` fact. What a gate remembers of a job lives in
the job's memory (memory.py), and when the job should be looked at again is part of its answer
(`recheck_s`): a gate never calls the work queue."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from torchjob.api.model import JobStatus, TorchJob
from torchjob.api.status import EventType, Reason
from torchjob.core.round.reconcile import Admit, Refusal, Seen
from torchjob.kube.controller.round.memory import GangMemory, JobMemory
from torchjob.kube.machinery import client
from torchjob.kube.machinery.api_protocol import ApiProtocol
from torchjob.kube.machinery.client import status_code
from torchjob.kube.machinery.informer import Informer, Key, Namespaces, pod_summary
from torchjob.kube.objects.admission import gang, kueue
from torchjob.kube.objects.labels import LABEL_JOB, ownership, selector
from torchjob.kube.objects.labels.ownership import left_by_earlier, owned_by, owner_reference
from torchjob.kube.objects.workload import pods as pod_objects
from torchjob.kube.served.kinds import TORCHJOB, ServedKind

log = logging.getLogger("torchjob.kube")
ADMISSION_POLL_S = 2.0  # how often a job waiting for Volcano's admission looks, until PodGroups are watched
NOT_OURS_POLL_S = 5.0  # how often a job looks again whether a Workload or PodGroup of its name not its own is gone


@dataclass(frozen=True)
class Look:
    """What a gate observed of the job's admitter (for the World: core decides on it), with what
    carrying out a decision needs of it."""

    seen: Seen | None = None  # None: the job has no such admitter
    finished: bool = False  # a Workload marked Finished
    awaited: bool = False  # a PodGroup whose admission the pods wait for
    found: dict[str, Any] | None = None  # the Workload as read: the job is resumed or suspended from it
    recheck_s: float | None = None  # look again after this long (what is waited for is not watched)


@dataclass(frozen=True)
class Done:
    """What carrying a step out came to: `refused` (the job cannot run as written: a fact for core's
    next round), whether the job's pods may be made now (`pods`), when to look again."""

    refused: Refusal | None = None
    pods: bool = True
    recheck_s: float | None = None


CARRIED_OUT = Done()


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
            informer = Informer(self.api, kind, self.namespace, self.on_change, labels={LABEL_JOB: None},
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
        message = (f"{name} {what}, but its controller is {ownership.whose(found)}, not this job: it is not this job's "
                   "and is not used; this job waits until it is gone (an earlier job's is deleted by the garbage "
                   "collector)")
        log.warning("%s/%s: %s", key[0], key[1], message)
        await api.event(raw, EventType.WARNING, Reason.NOT_OURS, message)
    return NOT_OURS_POLL_S


class KueueGate:
    """Kueue admits a job by resuming it (core/policies/admission.py decides; this observes the job's
    Workload and carries the steps out). Only a Workload the job controls (its uid) is read: an
    admitted one an earlier job of the name left never admits this one."""

    def __init__(self, api: ApiProtocol, jobs: Informer, watches: ThirdPartyWatches,
                 kind: ServedKind = TORCHJOB) -> None:
        self.api, self.jobs, self.watches, self.kind = api, jobs, watches, kind

    async def observe(self, raw: dict[str, Any], job: TorchJob, key: Key, memory: JobMemory) -> Look:
        if not kueue.queue_name(job):
            return Look()
        wl, _ = await self.watches.look_up(kueue.WORKLOAD, (key[0], kueue.workload_name(job.name)))
        if wl is None:
            return Look(Seen.NONE)
        if not owned_by(wl, job):
            # Not read: the job stays as it is (a suspended one suspended) until the name is free.
            again = await not_ours(self.api, raw, key, wl, "is the name of this job's Kueue Workload", memory.told)
            return Look(Seen.NOT_OURS, recheck_s=again)
        return Look(Seen.ADMITTED if kueue.admitted(wl) else Seen.PENDING, finished=kueue.finished(wl), found=wl)

    async def carry_out(self, step: Admit, raw: dict[str, Any], job: TorchJob, key: Key, look: Look,
                        status: JobStatus) -> Done:
        match step:
            case Admit.HOLD:
                await self._patch(raw, job, key, {"runPolicy": {"suspend": True}}, Reason.QUEUED,
                                  f"suspended until Kueue admits it from queue {kueue.queue_name(job)}")
            case Admit.RESUME:
                assert look.found is not None
                flavors = {}
                for name in sorted(kueue.flavor_names(look.found)):
                    found = await self._flavor(name)
                    if found is not None:
                        flavors[name] = found
                where = f" on {', '.join(sorted(flavors))}" if flavors else ""
                await self._patch(raw, job, key, kueue.admit_patch(job, look.found, flavors), Reason.ADMITTED,
                                  f"admitted by Kueue ClusterQueue {kueue.cluster_queue(look.found)}{where}")
            case Admit.REQUEUE:
                assert look.found is not None
                await self._patch(raw, job, key, kueue.suspend_patch(job, look.found), Reason.QUEUED,
                                  f"suspended: {kueue.lost_admission(look.found)}")
            case Admit.MAKE_WORKLOAD:
                return await self._create_workload(job)
            case Admit.FINISH_WORKLOAD:
                now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
                name = kueue.workload_name(job.name)
                await self.api.apply_status(kueue.WORKLOAD, kueue.finished_status(name, key[0], status, now))
        return CARRIED_OUT

    async def _patch(self, raw: dict[str, Any], job: TorchJob, key: Key, spec: dict[str, Any], reason: Reason,
                     message: str) -> None:
        # the TorchJob-shaped patch, in the kind's own shape (a TrainJob's spec.suspend and runtimePatches)
        shaped = self.kind.spec_patch(raw, spec) if self.kind.spec_patch is not None else spec
        self.jobs.remember(await self.api.patch_spec(job.name, key[0], shaped, kind=self.kind.kind, seen=raw))
        await self.api.event(raw, EventType.NORMAL, reason, message)

    async def _create_workload(self, job: TorchJob) -> Done:
        try:
            await self.api.create(kueue.workload(job, owner_reference(job), selector(job)))
        except Exception as e:
            code = status_code(e)
            if code == 409:
                return CARRIED_OUT  # made in between (its watch event comes), or held by another (seen next round)
            if code != 404:
                raise
            message = (f"the job names the Kueue queue {kueue.queue_name(job)!r}, but Kueue's Workload CRD "
                       f"{kueue.WORKLOAD_CRD} is not installed on this cluster: install Kueue, or remove the "
                       f"label {kueue.QUEUE_LABEL}")
            return Done(Refusal(Reason.KUEUE_UNAVAILABLE, message))
        self.watches.watch(kueue.WORKLOAD)
        return CARRIED_OUT

    async def _flavor(self, name: str) -> dict[str, Any] | None:
        found = await self.api.find(kueue.RESOURCE_FLAVOR, name, None)
        if found is None:
            log.warning("Kueue ResourceFlavor %s not found; admitting without its node labels", name)
        return found


class PodGroupGate:
    """The job's PodGroup (core/policies/admission.py decides when it is made and deleted, and holds the pods
    until it is there, or admitted; this observes it and carries the steps out). Volcano's admission:
    a change of a watched PodGroup brings its job back; until PodGroups are watched, the job looks
    again every ADMISSION_POLL_S."""

    def __init__(self, api: ApiProtocol, watches: ThirdPartyWatches) -> None:
        self.api, self.watches = api, watches

    async def observe(self, job: TorchJob, key: Key, memory: JobMemory) -> Look:
        group = pod_objects.podgroup(job)
        if group is None:
            return Look()
        awaited, known = gang.awaits_admission(job), memory.gang
        if not known.made:
            return Look(Seen.NONE, awaited=awaited)
        if known.admitted or not awaited:
            return Look(Seen.ADMITTED, awaited=awaited)
        stored, watched = await self.watches.look_up(client.kind_of(group), key)
        if stored is None or not owned_by(stored, job):
            known.made = False  # deleted by someone (made again), or replaced
            return Look(Seen.NONE, awaited=awaited)
        if gang.admitted(stored):
            known.admitted = True
            return Look(Seen.ADMITTED, awaited=awaited)
        return Look(Seen.PENDING, awaited=awaited, recheck_s=None if watched else ADMISSION_POLL_S)

    async def carry_out(self, step: Admit, raw: dict[str, Any], job: TorchJob, key: Key, memory: JobMemory,
                        started: bool) -> Done:
        group = pod_objects.podgroup(job)
        assert group is not None
        if step is Admit.DELETE_PODGROUP:
            memory.gang = GangMemory()  # made afresh (and admitted again) if the job runs again
            await self.api.delete(client.kind_of(group), job.name, key[0])
            return CARRIED_OUT
        assert step is Admit.MAKE_PODGROUP
        done = await self._create(raw, job, key, group, memory.gang, started)
        if memory.gang.made and not memory.gang.admitted and gang.awaits_admission(job):
            self.watches.watch(client.kind_of(group))  # its admission brings the job back
            return Done(pods=False, recheck_s=ADMISSION_POLL_S)  # until the watch can tell
        return done

    async def wait(self, raw: dict[str, Any], job: TorchJob, memory: JobMemory) -> None:
        """The pods wait for the PodGroup's admission: said once."""
        if not memory.gang.waiting_said:
            memory.gang.waiting_said = True
            await self.api.event(raw, EventType.NORMAL, Reason.POD_GROUP_PENDING, gang.admission_message(job))

    async def _create(self, raw: dict[str, Any], job: TorchJob, key: Key, group: dict[str, Any],
                      gang_memory: GangMemory, started: bool) -> Done:
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
                return Done(Refusal(Reason.POD_GROUP_UNAVAILABLE, message), pods=False)
            await self.api.event(raw, EventType.WARNING, Reason.POD_GROUP_UNAVAILABLE, message)
            gang_memory.admitted = True  # its pods run without one; nothing to wait for
        gang_memory.made = True
        return CARRIED_OUT

    async def _adopt(self, raw: dict[str, Any], job: TorchJob, key: Key, group: dict[str, Any],
                     gang_memory: GangMemory) -> Done:
        """The PodGroup of the job's name that exists: the job's own is adopted; one an earlier job of
        the name left is deleted (as the garbage collector would); any other is left alone. Until the
        name is free no pod joins its gang: the job waits (`not_ours`)."""
        found = await self.api.find(client.kind_of(group), job.name, key[0])
        if found is None:  # gone in between: made on the next round
            return Done(pods=False, recheck_s=ADMISSION_POLL_S)
        if owned_by(found, job):
            gang_memory.made = True
            return CARRIED_OUT
        if left_by_earlier(found, job) and not found["metadata"].get("deletionTimestamp"):
            await self.api.delete(client.kind_of(group), job.name, key[0])
        again = await not_ours(self.api, raw, key, found, "is the name of this job's PodGroup", gang_memory.told)
        return Done(pods=False, recheck_s=again)
