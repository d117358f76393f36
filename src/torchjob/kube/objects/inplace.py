"""A replica's restart in place, inside its pod (runPolicy.warmSpares on a cluster): the pieces of the
pod, the ConfigMap that carries its entry point, and what the pod's annotations say. Pure, but for
reading the two programs shipped from torchjob's own package.

The pod's training container runs `kube/inpod/torchjob_inplace.py` (standard library only: the user's
image has no torchjob) in front of the user's command: it runs the command, keeps a warm spare (the
local runtime's launcher, `local/spare_launcher/torchjob_spare.py`), reports an attempt that failed to
the operator's progress endpoint, and when the operator decides the restart, the spare becomes the next
attempt in the same pod: no pod deleted, scheduled, pulled or started again. Everything the operator
knows of it lives in the pod's annotations, so a restarted operator reads it back:

    torchjob.dev/in-place         "true": the pod runs the entry point (set at creation)
    torchjob.dev/attempt          the attempt the pod runs (as for every pod; raised for a restart in place)
    torchjob.dev/in-place-exit    {"attempt", "exitCode", "message", "finishedAt"}: that attempt ended
    torchjob.dev/in-place-stop    an attempt the operator asks to stop (its gang restarts)
    torchjob.dev/in-place-stop-by when its end should have been reported (then the pod is deleted)
    torchjob.dev/in-place-release an ended attempt whose pod may end now (the job is finished)
    torchjob.dev/in-place-since   when the pod's current attempt was started in it (none for its first)
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from torchjob.kube.objects.labels import ANNOTATION_ATTEMPT, attempt_of

ANNOTATION_IN_PLACE = "torchjob.dev/in-place"
ANNOTATION_EXIT = "torchjob.dev/in-place-exit"
ANNOTATION_STOP = "torchjob.dev/in-place-stop"
ANNOTATION_RELEASE = "torchjob.dev/in-place-release"
ANNOTATION_STOP_BY = "torchjob.dev/in-place-stop-by"  # when the attempt asked to stop should have ended
ANNOTATION_SINCE = "torchjob.dev/in-place-since"  # when the pod's current attempt was started in it
CONFIGMAP = "torchjob-inplace"  # the entry point and the spare launcher, in each job namespace that needs them
VOLUME = "torchjob-inplace"
DIR = "/var/run/torchjob/inplace"
ENTRY = "torchjob_inplace.py"
LAUNCHER = "torchjob_spare.py"
MESSAGE_BYTES = 4096  # what the kubelet keeps of a termination message
_PACKAGE = Path(__file__).resolve().parents[2]


@functools.cache
def programs() -> dict[str, str]:
    """The files the ConfigMap carries, read once from torchjob's package."""
    return {ENTRY: (_PACKAGE / "kube" / "inpod" / ENTRY).read_text(),
            LAUNCHER: (_PACKAGE / "local" / "spare_launcher" / LAUNCHER).read_text()}


def configmap(namespace: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": CONFIGMAP, "namespace": namespace,
                         "labels": {"app.kubernetes.io/managed-by": "torchjob"}},
            "data": programs()}


def wrap(container: dict[str, Any], argv: list[str], options: int, attempt: int, grace_s: int) -> None:
    """Put the entry point in front of the container's command (`argv`, whose first `options` words
    after the interpreter are its options): the same interpreter runs it; the kubelet still expands
    `$(VAR)` in every word. Its settings are variables it takes out of the command's environment."""
    container["command"] = [argv[0], "-I", f"{DIR}/{ENTRY}", *argv]  # -I: no PYTHONPATH of the user's shadows it
    container["args"] = []
    container["env"] = [*container.get("env", []),
                        {"name": "TORCHJOB_INPLACE_OPTIONS", "value": str(options)},
                        {"name": "TORCHJOB_INPLACE_ATTEMPT", "value": str(attempt)},
                        {"name": "TORCHJOB_INPLACE_GRACE_S", "value": str(grace_s)}]
    container["volumeMounts"] = [*[m for m in container.get("volumeMounts", []) if m.get("name") != VOLUME],
                                 {"name": VOLUME, "mountPath": DIR, "readOnly": True}]


def volume() -> dict[str, Any]:
    return {"name": VOLUME, "configMap": {"name": CONFIGMAP}}


@dataclass(frozen=True)
class Ended:
    """An attempt that ended in place, as its pod reported it."""

    attempt: int
    exit_code: int
    message: str | None
    finished_at: datetime


@dataclass(frozen=True)
class InPlace:
    """What a pod's annotations say of its restart in place."""

    attempt: int
    ended: Ended | None  # its current attempt's end, when it has ended
    stop: int | None
    release: bool

    def verdict(self) -> dict[str, Any]:
        """What the pod's entry point is told (the endpoint's answer)."""
        return {"attempt": self.attempt, "stop": self.stop, "release": self.release}


def in_place(pod: dict[str, Any]) -> InPlace | None:
    """The pod's state, when it restarts in place (None: it does not)."""
    notes = pod.get("metadata", {}).get("annotations") or {}
    if notes.get(ANNOTATION_IN_PLACE) != "true":
        return None
    attempt = attempt_of(pod)
    ended = None
    try:
        found = parse_exit(json.loads(notes[ANNOTATION_EXIT])) if ANNOTATION_EXIT in notes else None
        ended = found if found is not None and found.attempt == attempt else None
    except (ValueError, TypeError):
        pass  # anyone who may patch pods may write anything: not an end
    stop = notes.get(ANNOTATION_STOP, "")
    return InPlace(attempt, ended, int(stop) if stop.isascii() and stop.isdecimal() else None,
                   notes.get(ANNOTATION_RELEASE) == str(attempt))


def runs(pod: dict[str, Any], attempt: int) -> bool:
    """The pod restarts in place and runs `attempt` now (its entry point can be told to stop it)."""
    here = in_place(pod)
    return here is not None and here.attempt == attempt and here.ended is None and _up(pod)


def parked(pod: dict[str, Any], attempt: int, older: bool = False) -> bool:
    """The pod restarts in place, its attempt `attempt` (`older`: that one or an earlier one) has ended,
    and it waits for its next (not released, not going away, its entry point still running)."""
    here = in_place(pod)
    return (here is not None and here.ended is not None and not here.release and _up(pod)
            and (here.attempt <= attempt if older else here.attempt == attempt))


def _up(pod: dict[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") == "Running" and not pod["metadata"].get("deletionTimestamp")


def parse_exit(body: Any) -> Ended:
    """An exit report as the entry point sends it; ValueError naming what is wrong."""
    if not isinstance(body, dict):
        raise ValueError("the body must be a JSON object")
    attempt, code, message, at = body.get("attempt"), body.get("exitCode"), body.get("message"), body.get("finishedAt")
    if not isinstance(attempt, int) or isinstance(attempt, bool) or attempt < 0:
        raise ValueError("attempt must be a number >= 0")
    if not isinstance(code, int) or isinstance(code, bool) or not 0 <= code <= 255:
        raise ValueError("exitCode must be a number from 0 to 255")
    if message is not None and not isinstance(message, str):
        raise ValueError("message must be a string or null")
    if not isinstance(at, str):
        raise ValueError("finishedAt must be an RFC 3339 time")
    try:
        when = datetime.fromisoformat(at.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError("finishedAt must be an RFC 3339 time") from None
    if when.tzinfo is None:
        raise ValueError("finishedAt must name its time zone (Z)")
    return Ended(attempt, code, message[-MESSAGE_BYTES:] if message else None, when)


def exit_note(ended: Ended) -> dict[str, str | None]:
    return {ANNOTATION_EXIT: json.dumps({"attempt": ended.attempt, "exitCode": ended.exit_code,
                                         "message": ended.message, "finishedAt": ended.finished_at.isoformat()})}


def restart_note(attempt: int, at: datetime) -> dict[str, str | None]:
    """The annotations of a pod whose next attempt starts in it (`at`: when it was told to)."""
    return {ANNOTATION_ATTEMPT: str(attempt), ANNOTATION_EXIT: None, ANNOTATION_STOP: None, ANNOTATION_STOP_BY: None,
            ANNOTATION_SINCE: at.strftime("%Y-%m-%dT%H:%M:%SZ")}


def stop_note(attempt: int, by: datetime) -> dict[str, str | None]:
    """Ask the pod's entry point to stop `attempt`; `by`: when its end should have been reported."""
    return {ANNOTATION_STOP: str(attempt), ANNOTATION_STOP_BY: by.strftime("%Y-%m-%dT%H:%M:%SZ")}


def stop_overdue(pod: dict[str, Any], now: datetime) -> float | None:
    """Seconds until an attempt asked to stop is overdue (<= 0: it is: its entry point does not answer);
    None when no stop is pending."""
    here = in_place(pod)
    by = (pod["metadata"].get("annotations") or {}).get(ANNOTATION_STOP_BY)
    if here is None or here.stop is None or not by or not runs(pod, here.stop):
        return None
    try:
        return (datetime.fromisoformat(by.replace("Z", "+00:00")) - now).total_seconds()
    except ValueError:
        return 0.0


def release_note(attempt: int) -> dict[str, str | None]:
    return {ANNOTATION_RELEASE: str(attempt)}
