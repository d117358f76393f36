"""What a pod's status says of how it ended: a container's termination, a disruption."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def terminated(pod: Mapping[str, Any], container: str | None) -> dict[str, Any]:
    """`state.terminated` of one container of a pod (as the API serves it); empty while it has not ended."""
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        if cs.get("name") == container:
            return (cs.get("state") or {}).get("terminated") or {}
    return {}


def disruption(pod: Mapping[str, Any]) -> str | None:
    """Why Kubernetes deletes the pod (its DisruptionTarget condition: a lost node's NoExecute taint,
    a preemption, an eviction), or None."""
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "DisruptionTarget" and c.get("status") == "True":
            return ": ".join(x for x in (c.get("reason"), c.get("message")) if x) or "DisruptionTarget"
    return None


def unschedulable(pod: Mapping[str, Any]) -> str | None:
    """The scheduler's words when it found no node for the pod (its PodScheduled condition False,
    reason Unschedulable: "0/2 nodes are available: ..."), or None: not tried yet, or on a node."""
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable":
            return c.get("message") or "the scheduler found no node for it"
    return None
