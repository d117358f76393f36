"""The world as `core` sees one job, built in one function (`observe`): the current attempt of
each replica from its pods (phase, exit code, reason), the pods deleted since (their last state),
when each running attempt last reported progress, what the job's admitters say (Kueue's Workload,
the PodGroup: observed by the gates), and what the operator learned while acting."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import datetime
from typing import Any

from torchjob.api.model import TorchJob
from torchjob.api.status import JobStatus, KeptTail
from torchjob.api.validate import training_container
from torchjob.core.diagnosis import torch_errors
from torchjob.core.policies import hangs
from torchjob.core.round import kept
from torchjob.core.round.reconcile import Admission, Observed, Phase, Refusal, World
from torchjob.kube.machinery.client import parse_time
from torchjob.kube.objects.front import inplace
from torchjob.kube.objects.labels import attempt_of, replica_of
from torchjob.kube.objects.workload import pod_status
from torchjob.kube.objects.workload.steps import observe_step

# Unknown: the pod's node stopped reporting after the pod was scheduled there; its container most likely
# still runs, so it stays active (not Pending, which would flip a Running job back) until the node
# controller evicts it, which the operator sees as a deletion.
PHASES = {"Pending": Phase.PENDING, "Running": Phase.RUNNING, "Unknown": Phase.RUNNING,
          "Succeeded": Phase.SUCCEEDED, "Failed": Phase.FAILED}
UNKNOWN_EXIT = 0xBEEF  # like Kubeflow: a pod that failed before its container ran (>= 128: retryable)
LastReport = Callable[[str, int], datetime | None]  # (replica, attempt) -> when it last reported
Seen = tuple[Observed | None, Observed | None]  # a pod as observed: its replica's attempt, its step's


def observe_pod(job: TorchJob, pod: dict[str, Any], seal: inplace.Seal = inplace.NO_SEAL) -> Observed | None:
    """One pod as core sees it; an attempt ended in place only as the operator sealed it (`seal`)."""
    rid = replica_of(pod)
    if rid is None or rid.rtype not in job.spec.pytorchReplicaSpecs:
        return None
    meta, status = pod.get("metadata", {}), pod.get("status") or {}
    phase = PHASES.get(status.get("phase", "Pending"), Phase.PENDING)
    containers = job.spec.pytorchReplicaSpecs[rid.rtype].template.spec.containers
    name = containers[training_container(containers)].name
    terminated = pod_status.terminated(pod, name)
    exit_code: int | None = terminated.get("exitCode")
    reason = status.get("reason") or terminated.get("reason")
    # torch's error file is the termination message (TORCHELASTIC_ERROR_FILE=/dev/termination-log),
    # else the end of its log (FallbackToLogsOnError): the line that says why
    message = torch_errors.said(terminated["message"]) if terminated.get("message") else status.get("message")
    if phase is Phase.FAILED and exit_code is None:
        exit_code = UNKNOWN_EXIT
    if phase is Phase.SUCCEEDED and exit_code is None:
        exit_code = 0
    finished = parse_time(terminated.get("finishedAt")) if phase in (Phase.SUCCEEDED, Phase.FAILED) else None
    if finished is None and phase in (Phase.SUCCEEDED, Phase.FAILED):
        finished = parse_time(meta.get("creationTimestamp"))
    stopping = meta.get("deletionTimestamp") is not None
    here = inplace.in_place(pod, seal)
    if here is not None and phase is Phase.RUNNING and not stopping:
        # restarting in place (objects/inplace.py): its entry point runs while the attempts come and go
        if here.ended is not None:  # ended, its pod kept for the next attempt (unless released: it ends)
            e = here.ended
            message = torch_errors.headline(e.message) if e.message else None
            ended = (Phase.SUCCEEDED, "Completed") if e.exit_code == 0 else (Phase.FAILED, "Error")  # 0: stopped
            return Observed(rid, here.attempt, ended[0], e.exit_code, ended[1], message, e.finished_at,
                            in_place=not here.release)
        stopping = here.stop == here.attempt
    attempt = here.attempt if here is not None else attempt_of(pod)  # in place: the sealed one
    waits = pod_status.unschedulable(pod) if phase is Phase.PENDING else None  # no node fits it
    return Observed(rid, attempt, phase, exit_code, reason, message, finished, stopping=stopping,
                    unschedulable=waits)


def observe_one(job: TorchJob, p: dict[str, Any], seal: inplace.Seal = inplace.NO_SEAL,
                was_deleted: bool = False) -> Seen:
    """One pod as `observe` counts it: its replica's attempt (None: not a replica's), with its
    deletion folded in, else an initializer step's attempt (None: not a step's). Depends on the pod
    and the job's spec only: kept between rounds while neither changes (controller/seen_pods.py)."""
    obs = observe_pod(job, p, seal)
    step = observe_step(job, p) if obs is None and not was_deleted else None
    if obs is not None and (was_deleted or obs.stopping):
        since = parse_time(p["metadata"].get("deletionTimestamp"))
        obs = replace(obs, deleted=True, stopping=not was_deleted, finished_at=obs.finished_at or since)
    return obs, step


def observe(job: TorchJob, pods: Iterable[dict[str, Any]], *, gone: Iterable[dict[str, Any]] = (),
            last_report: LastReport | None = None, refused: Refusal | None = None,
            admission: Admission | None = None, seal: inplace.Seal = inplace.NO_SEAL,
            reported_done: Callable[[str, int], bool] | None = None) -> World:
    """The one place a round's `World` is built: the replicas from the job's pods and those deleted
    since, each running attempt's last progress report, and a refusal the operator learned. A pod
    being deleted that torchjob did not stop, or one of `gone` (deleted since; its last state), is
    `deleted`: core decides whether that is an eviction. `seal`: the operator's (inplace.Seal)."""
    seen = [*(observe_one(job, p, seal) for p in pods), *(observe_one(job, p, seal, True) for p in gone)]
    return world(seen, last_report=last_report, refused=refused, admission=admission, reported_done=reported_done)


def world(observed: Iterable[Seen], *, last_report: LastReport | None = None, refused: Refusal | None = None,
          admission: Admission | None = None, reported_done: Callable[[str, int], bool] | None = None,
          still: Callable[[str, int], tuple[datetime, datetime] | None] | None = None) -> World:
    """`observe`'s World from pods already observed (`observe_one`, the job's pods then those gone):
    each replica's latest attempt, each step's; `still`: since when a replica attempt's ranks did not move, as
    its pod samples them (runPolicy.hangDeadlineSeconds: the job's World.still)."""
    seen: dict[str, Observed] = {}
    steps: dict[str, Observed] = {}  # the initializers' pods (objects/steps.py): none of them is a replica
    for obs, step in observed:
        if step is not None and (step.replica.rtype not in steps or steps[step.replica.rtype].attempt < step.attempt):
            steps[step.replica.rtype] = step
        if obs is None:
            continue
        old = seen.get(obs.replica.name)
        if old is None or obs.attempt > old.attempt:
            seen[obs.replica.name] = obs
    if last_report is not None:  # replaced only where there is a report (4,096 replicas, most never report)
        for name, o in seen.items():
            at = last_report(name, o.attempt) if o.phase is Phase.RUNNING else None
            if at is not None:
                seen[name] = replace(o, last_report=at)
    if reported_done is not None:  # (replica, attempt) -> its latest report said 100 %: core/round/reconcile.py
        for name, o in seen.items():
            if reported_done(name, o.attempt):
                seen[name] = replace(o, reported_done=True)
    running = [(name, o.attempt) for name, o in seen.items() if o.phase is Phase.RUNNING and not o.stopping]
    return World(replicas=seen, refused=refused, admission=admission or Admission(), steps=steps,
                 still=hangs.job_still([still(*r) for r in running]) if still is not None else None)


def tails(job: TorchJob, gone: Iterable[dict[str, Any]]) -> list[KeptTail]:
    """What the pods deleted since kept of their logs (core/round/kept.py keeps a few in the status):
    the training container's termination message, the end of its log when it failed (FallbackToLogsOnError)."""
    out = []
    for pod in gone:
        rid = replica_of(pod)
        if rid is None or rid.rtype not in job.spec.pytorchReplicaSpecs:
            continue
        containers = job.spec.pytorchReplicaSpecs[rid.rtype].template.spec.containers
        ended = pod_status.terminated(pod, containers[training_container(containers)].name)
        if ended.get("message"):
            out.append(KeptTail(replica=rid.name, attempt=attempt_of(pod), exitCode=ended.get("exitCode"),
                                tail=ended["message"]))
    return out


def kept_tails(status: JobStatus, job: TorchJob, gone: list[dict[str, Any]]) -> JobStatus:
    """`status` keeping a few of the gone pods' ends of logs (core/round/kept.py); itself when none went."""
    return kept.keep(status, tails(job, gone)) if gone else status
