"""Pods on their way out: what the job is told of them, and which are force-deleted. Pure.

A pod that Kubernetes deletes (its DisruptionTarget condition: a lost node's NoExecute taint, a
preemption, an eviction) is said on the job, once. The server sets deletionTimestamp to the
request's time plus the grace period: past it a kubelet would have killed the pod, so one still
there `force_after_s` later sits on a node that is gone, and is force-deleted (and said, once)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from torchjob.api.status import Reason
from torchjob.kube.machinery.client import parse_time
from torchjob.kube.objects.workload.pod_status import disruption

ONE_EACH_UP_TO = 3  # pods said in one round with one event each; more: one event naming this many and the count


@dataclass
class Leaving:
    said: list[tuple[str, Reason, str]] = field(default_factory=list)  # (said once per key, reason, message)
    force: list[dict[str, Any]] = field(default_factory=list)  # pods to force-delete now
    recheck_at: datetime | None = None  # when the next one is due
    # (key, reason, where, what it says of one pod, of several): `said` and `events` are made of these
    notes: list[tuple[str, Reason, str, str, str]] = field(default_factory=list)

    def events(self, told: set[str]) -> list[tuple[list[str], Reason, str]]:
        """What the job is told now, of the pods not `told` yet: (their keys, reason, message). Up to
        ONE_EACH_UP_TO pods of one reason and words, an event each; more, one event naming the first
        few and the count: a big job's 4,096 pods force-deleted were 4,096 events, which flooded
        `describe` (and the API server's events)."""
        groups: dict[tuple[Reason, str, str], list[tuple[str, str]]] = {}
        for key, reason, where, one, many in self.notes:
            if key not in told:
                groups.setdefault((reason, one, many), []).append((key, where))
        out: list[tuple[list[str], Reason, str]] = []
        for (reason, one, many), pods in groups.items():
            if len(pods) <= ONE_EACH_UP_TO:
                out += [([key], reason, f"{where} {one}") for key, where in pods]
                continue
            named = ", ".join(where.removeprefix("pod ") for _, where in pods[:ONE_EACH_UP_TO])
            out.append(([key for key, _ in pods], reason,
                        f"{len(pods)} pods ({named} and {len(pods) - ONE_EACH_UP_TO} more) {many}"))
        return out


def leaving(pods: list[dict[str, Any]], now: datetime, force_after_s: float) -> Leaving:
    out = Leaving()
    for p in pods:
        meta = p["metadata"]
        since = parse_time(meta.get("deletionTimestamp"))
        if since is None:
            continue
        where = f"pod {meta['name']} on node {(p.get('spec') or {}).get('nodeName') or '(none)'}"
        why = disruption(p)
        if why:
            out.notes.append((f"disrupted {meta.get('uid')}", Reason.POD_DISRUPTED, where,
                              f"is being deleted by Kubernetes: {why}", f"are being deleted by Kubernetes: {why}"))
        due = since + timedelta(seconds=force_after_s)
        if now >= due:
            out.force.append(p)
            out.notes.append((f"forced {meta.get('uid')}", Reason.FORCE_DELETED, where,
                              f"was still terminating {force_after_s:.0f} s past its grace period (no kubelet "
                              "confirmed its end: is the node lost?): force-deleted",
                              f"were still terminating {force_after_s:.0f} s past their grace period (no kubelet "
                              "confirmed their end: are their nodes lost?): force-deleted"))
        elif out.recheck_at is None or due < out.recheck_at:
            out.recheck_at = due
    out.said = [(key, reason, f"{where} {one}") for key, reason, where, one, _ in out.notes]
    return out


def again_if_failed(told: set[str], key: str) -> Callable[[asyncio.Future[Any]], None]:
    """A force delete's done-callback: `key` (its note in the job's memory) forgotten if it failed, so
    that the next round asks again."""
    def done(task: asyncio.Future[Any]) -> None:
        if not task.cancelled() and task.exception() is not None:
            told.discard(key)
    return done
