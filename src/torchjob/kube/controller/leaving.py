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
from torchjob.kube.objects.pod_status import disruption


@dataclass
class Leaving:
    said: list[tuple[str, Reason, str]] = field(default_factory=list)  # (said once per key, reason, message)
    force: list[dict[str, Any]] = field(default_factory=list)  # pods to force-delete now
    recheck_at: datetime | None = None  # when the next one is due


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
            out.said.append((f"disrupted {meta.get('uid')}", Reason.POD_DISRUPTED,
                             f"{where} is being deleted by Kubernetes: {why}"))
        due = since + timedelta(seconds=force_after_s)
        if now >= due:
            out.force.append(p)
            out.said.append((f"forced {meta.get('uid')}", Reason.FORCE_DELETED,
                             f"{where} was still terminating {force_after_s:.0f} s past its grace period (no kubelet "
                             "confirmed its end: is the node lost?): force-deleted"))
        elif out.recheck_at is None or due < out.recheck_at:
            out.recheck_at = due
    return out


def again_if_failed(told: set[str], key: str) -> Callable[[asyncio.Future[Any]], None]:
    """A force delete's done-callback: `key` (its note in the job's memory) forgotten if it failed, so
    that the next round asks again."""
    def done(task: asyncio.Future[Any]) -> None:
        if not task.cancelled() and task.exception() is not None:
            told.discard(key)
    return done
