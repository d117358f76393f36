"""A stalled job's stacks on a cluster (issue 42), taken before core stops its replicas, without holding the round.

When replicas of a job went quiet (runPolicy.progressDeadlineSeconds: core.policies.stalls.quiet_replicas; or no rank
of it moved for runPolicy.hangDeadlineSeconds, as its pods' samples say: core.policies.hangs), every
running pod of the job made with the stacks front (kube/objects/front/stacks.py: by default) is asked, once per set
of quiet attempts, through its annotation torchjob.dev/stacks-request, as `torchjob stacks --kube` asks; its watcher
writes the dumps of its ranks to the container's log, which a task of the operator reads back (patch on pods, get on
pods/log; no pods/exec). The round goes on meanwhile: its World says until when the stacks are awaited
(`stacks_due`, at most BOUND_S after the request) and core waits for them until then, the job looked at again every
POLL_S; once taken (or the bound passed), the World carries their short form, which the stall's message (the root
cause, the Stalled event) ends with, and the status keeps them with those attempts (core/round/kept.py:
status.keptStacks, bounded), said once in a StacksTaken event."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Coroutine, Iterable, Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from torchjob.api.model import TorchJob
from torchjob.api.status import EventType, Reason
from torchjob.core.diagnosis.stacks import PodAnswer, ProcessStacks, Stacks, answer_in, short
from torchjob.core.policies import hangs
from torchjob.core.policies.stalls import quiet_replicas
from torchjob.core.round import kept
from torchjob.core.round.reconcile import Plan, World
from torchjob.core.round.world import Observed, Phase
from torchjob.kube.controller.round.memory import JobMemory, StallStacksMemory
from torchjob.kube.machinery.api_protocol import ApiProtocol
from torchjob.kube.machinery.client import status_code
from torchjob.kube.objects.front import stacks as pod_stacks
from torchjob.kube.objects.labels import attempt_of, replica_of

log = logging.getLogger("torchjob.kube")
BOUND_S = 25.0  # how long core waits for the stacks before it acts on the stall without them
# How long the pods get to answer: the kubelet writes the request within ~1 s and the watcher takes <= 3 s on a
# quiet node; a clean-clone run's busy node (the whole suite beside it) left a pod's answer past 8 s.
ANSWER_S = 20.0
POLL_S = 0.5  # how often the logs are read, and the job looked at again, meanwhile
TAIL_LINES = 5000  # of each pod's log since the request: the answer, and what the training printed since
READS_AT_ONCE = 16  # log reads in flight for one job (a job of thousands of pods)


def fronted(pods: Iterable[Mapping[str, Any] | None], current: Mapping[str, Observed]
            ) -> list[tuple[str, str, str, int, str]]:
    """The running pods on a node of the replicas' current attempts made with the front: (pod, uid, replica,
    attempt, container)."""
    out = []
    for pod in pods:
        if pod is None:
            continue
        meta, rid = pod["metadata"], replica_of(pod)
        container = (meta.get("annotations") or {}).get(pod_stacks.ANNOTATION_CONTAINER)
        obs = current.get(rid.name) if rid is not None else None
        if (rid is None or obs is None or not container or meta.get("deletionTimestamp")
                or not (pod.get("spec") or {}).get("nodeName")  # no kubelet to write the request or serve a log
                or (pod.get("status") or {}).get("phase") != "Running" or attempt_of(pod) != obs.attempt):
            continue
        out.append((meta["name"], str(meta.get("uid") or ""), rid.name, obs.attempt, container))
    return sorted(out, key=lambda p: p[2])


class StallStacks:
    """The operator's side: `fact` before core decides, `keep` after (reconciler.py calls both)."""

    def __init__(self, api: ApiProtocol, spawn: Callable[[Coroutine[Any, Any, None]], Any]) -> None:
        self.api, self.spawn = api, spawn

    def fact(self, job: TorchJob, world: World, pods: Callable[[], Iterable[Mapping[str, Any] | None]],
             memory: JobMemory, now: datetime) -> tuple[World, float | None]:
        """The World with the stacks of the quiet replicas' job (their short form), or the time core waits for
        them until (`stacks_due`); and how soon the round should look again (None: no sooner than it would).
        `pods`: the job's own pods as cached, read only when a replica is quiet."""
        quiet, _ = quiet_replicas(job, world.replicas, now)
        if not quiet and hangs.hung(job, world.still):  # no rank moved (hangDeadlineSeconds): every running one
            quiet = [o for o in world.replicas.values() if o.phase is Phase.RUNNING and not o.stopping]
        taking = memory.stacks
        if not quiet:  # kept in the status if core acted on them; else they moved again: the next stall takes its own
            memory.stacks = None
            return world, None
        key = tuple(sorted((o.replica.name, o.attempt) for o in quiet))
        if taking is None or taking.quiet != key:
            asked = fronted(pods(), world.replicas)
            if not asked:  # opted out, or no command the front runs: core acts at once
                return world, None
            taking = memory.stacks = StallStacksMemory(key, now, now + timedelta(seconds=BOUND_S),
                                                       {replica: attempt for _, _, replica, attempt, _ in asked})
            self.spawn(self._take(taking, asked, job.metadata.namespace or "default"))
        if taking.taken is not None:
            return replace(world, stacks=short(taking.taken) or "no rank answered"), None
        if now < taking.due:
            return replace(world, stacks_due=taking.due), min(POLL_S, (taking.due - now).total_seconds())
        return replace(world, stacks=f"no pod gave its stacks within {BOUND_S:g} s"), None

    @staticmethod
    def keep(plan: Plan, memory: JobMemory) -> None:
        """The stacks taken, kept in the plan's status with their attempts, and said once in a StacksTaken event:
        when core acted on the stall (its Stalled event), not when the quiet replicas reported again meanwhile."""
        taking = memory.stacks
        if taking is None or taking.taken is None or not any(e.reason == Reason.STALLED for e in plan.events):
            return
        plan.status = kept.keep_stacks(plan.status, kept.stacks_kept(
            taking.taken, taking.attempts, [r for r, _ in taking.quiet], taking.asked_at))
        if not taking.said:
            taking.said = True
            t = taking.taken
            plan.event(EventType.WARNING, Reason.STACKS_TAKEN,
                       f"stacks taken in {t.seconds:.2f} s before stopping the stalled job ({len(t.processes)} "
                       f"process(es)): {short(t) or 'no rank answered'}; in full: status.keptStacks, and logs --kube "
                       "--replica R --attempt N")
            # said before the Stalled event whose message it ends (as it happened: taken, then stopped)
            said = plan.events.pop()
            at = next((i for i, e in enumerate(plan.events) if e.reason == Reason.STALLED), len(plan.events))
            plan.events.insert(at, said)

    async def _take(self, taking: StallStacksMemory, asked: list[tuple[str, str, str, int, str]], ns: str) -> None:
        t0 = time.monotonic()
        answers: dict[str, PodAnswer] = {}
        missing: list[str] = []
        try:
            request = f"stall-{int(time.time())}-{uuid.uuid4().hex[:8]}"
            note: dict[str, str | None] = {pod_stacks.ANNOTATION_REQUEST: request}
            done = await asyncio.gather(*(self.api.patch_annotations("Pod", pod, ns, note, uid=uid or None)
                                          for pod, uid, *_ in asked), return_exceptions=True)
            waiting = [a for a, d in zip(asked, done, strict=True) if not isinstance(d, BaseException)]
            missing += [f"{a[2]} (its pod could not be asked)" for a, d in zip(asked, done, strict=True)
                        if isinstance(d, BaseException)]
            reads = asyncio.Semaphore(READS_AT_ONCE)

            unreadable: set[str] = set()

            async def read(pod: str, replica: str, container: str) -> None:
                async with reads:
                    try:
                        lines = await self.api.log(pod, ns, container, int(time.monotonic() - t0) + 10, TAIL_LINES)
                    except Exception as e:  # gone, its node not answering: asked again at the next poll
                        # (a kubelet answers 400 to any failed log read, a passing one too: read again)
                        if status_code(e) == 403:  # no right to read logs: it never will be
                            unreadable.add(pod)
                            missing.append(f"{replica} (its log cannot be read: {status_code(e)})")
                        return
                got = answer_in(lines, request)
                if got is not None:
                    answers[pod] = got

            while len(answers) + len(unreadable) < len(waiting) and time.monotonic() - t0 < ANSWER_S:
                await asyncio.sleep(POLL_S)
                await asyncio.gather(*(read(pod, replica, c) for pod, _, replica, _, c in waiting
                                       if pod not in answers and pod not in unreadable))
        except Exception as e:  # whatever happened, core is not kept waiting past the bound for nothing
            log.warning("taking a stalled job's stacks: %r", e)
        taking.taken = gathered(asked, answers, missing, time.monotonic() - t0)


def gathered(asked: list[tuple[str, str, str, int, str]], answers: Mapping[str, PodAnswer], missing: list[str],
             seconds: float) -> Stacks:
    """The pods' answers as one Stacks (core.diagnosis.stacks groups them)."""
    processes: list[ProcessStacks] = []
    said = set(missing)
    for pod, _, replica, _, _ in asked:
        got = answers.get(pod)
        if got is None:
            if not any(m.startswith(f"{replica} ") for m in said):
                missing.append(f"{replica} (its pod did not answer within {ANSWER_S:g} s)")
            continue
        processes += [ProcessStacks(replica, rank, pid or 0, tuple(threads)) for rank, pid, threads in got.processes]
        missing += [f"{replica} pid {pid}" for pid in got.missing]
    dirs = tuple(sorted({a.stdlib for a in answers.values() if a.stdlib}))
    return Stacks(processes, missing, dirs, seconds)
