"""A replica's restart in place, inside its pod (runPolicy.warmSpares on a cluster): the pieces of the
pod, the ConfigMap that carries its entry point, and what the pod's annotations say. Pure, but for
reading the two programs shipped from torchjob's own package.

The pod's training container runs `kube/inpod/torchjob_inplace.py` (standard library only: the user's
image has no torchjob; behind `boot`, which runs it only if it is the file the pod was made with) in
front of the user's command: it runs the command, keeps a warm spare (the
local runtime's launcher, `local/spares/launcher/torchjob_spare.py`), reports an attempt that failed to
the operator's progress endpoint, and when the operator decides the restart, the spare becomes the next
attempt in the same pod: no pod deleted, scheduled, pulled or started again. Everything the operator
knows of it lives in the pod's annotations, so a restarted operator reads it back:

    torchjob.dev/in-place         "true": the pod runs the entry point (set at creation; for people only)
    torchjob.dev/attempt          the attempt the pod runs (as for every pod; raised for a restart in place)
    torchjob.dev/in-place-exit    {"attempt", "exitCode", "message", "finishedAt"}: that attempt ended
    torchjob.dev/in-place-stop    an attempt the operator asks to stop (its gang restarts)
    torchjob.dev/in-place-stop-by when its end should have been reported (then the pod is deleted)
    torchjob.dev/in-place-release an ended attempt whose pod may end now (the job is finished)
    torchjob.dev/in-place-since   when the pod's current attempt was started in it (none for its first)
    torchjob.dev/in-place-*-seal  the operator's seal of what it wrote together (`SEALS`)

Whoever may patch pods may write any annotation, so none decides anything by itself: a pod restarts in
place when its spec (which nobody can change after it is made) runs the entry point, its first attempt is
the one its spec names, and the rest is believed only under the operator's seal (`Seal`: HMAC-SHA256 with
a key kept in the operator's own namespace, over the pod's uid and the values written together). The
operator writes an attempt's end only as the pod's entry point reported it through the authenticated
endpoint (progress/receiver.py). A value without a good seal is as if absent: a forged end, stop or
release changes nothing; under a forged attempt the pod is at the one its spec names (core: stale, so
it is replaced; a disruption, as deleting the pod would be, never an outcome).
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from torchjob.kube.objects.front import stacks
from torchjob.kube.objects.front.shipped import BOOT_HEAD, CONFIGMAP, boot
from torchjob.kube.objects.labels import ANNOTATION_ATTEMPT, attempt_of

__all__ = ["BOOT_HEAD", "CONFIGMAP", "boot"]  # with the names defined here: shipped.py's, where they were

ANNOTATION_IN_PLACE = "torchjob.dev/in-place"
ANNOTATION_EXIT = "torchjob.dev/in-place-exit"
ANNOTATION_STOP = "torchjob.dev/in-place-stop"
ANNOTATION_RELEASE = "torchjob.dev/in-place-release"
ANNOTATION_STOP_BY = "torchjob.dev/in-place-stop-by"  # when the attempt asked to stop should have ended
ANNOTATION_SINCE = "torchjob.dev/in-place-since"  # when the pod's current attempt was started in it
VOLUME = "torchjob-inplace"
DIR = "/var/run/torchjob/inplace"
ENTRY = "torchjob_inplace.py"
LAUNCHER = "torchjob_spare.py"
MESSAGE_BYTES = 4096  # what the kubelet keeps of a termination message
ATTEMPT_ENV = "TORCHJOB_INPLACE_ATTEMPT"  # the pod's first attempt, in its spec
LAUNCHER_SHA256_ENV = "TORCHJOB_INPLACE_LAUNCHER_SHA256"  # the spare launcher the pod was made for
_PACKAGE = Path(__file__).resolve().parents[3]  # src/torchjob
# What the operator writes together, each group under one seal (`Seal`), named torchjob.dev/in-place-GROUP-seal.
SEALS: dict[str, tuple[str, ...]] = {
    "attempt": (ANNOTATION_ATTEMPT, ANNOTATION_SINCE),
    "exit": (ANNOTATION_EXIT,),
    "stop": (ANNOTATION_STOP, ANNOTATION_STOP_BY),
    "release": (ANNOTATION_RELEASE,),
}


def seal_annotation(group: str) -> str:
    return f"torchjob.dev/in-place-{group}-seal"


class Seal:
    """The operator's key for what it writes of a restart in place (kept in its namespace's Secret:
    progress/tls.py; swapped in place if that Secret gets another). Empty: nothing holds."""

    def __init__(self, key: bytes) -> None:
        self.key = key

    def _mac(self, uid: str, group: str, values: list[str | None]) -> str:
        message = json.dumps([group, uid, *values], separators=(",", ":")).encode()
        return hmac.new(self.key, message, hashlib.sha256).hexdigest()

    def close(self, uid: str, notes: dict[str, str | None]) -> dict[str, str | None]:
        """`notes` (a patch of a pod's annotations) with the seal of each group it writes whole (a group
        it removes loses its seal too)."""
        out = dict(notes)
        for group, keys in SEALS.items():
            if all(k in notes for k in keys):
                values = [notes[k] for k in keys]
                out[seal_annotation(group)] = None if all(v is None for v in values) else self._mac(uid, group, values)
        return out

    def holds(self, pod: dict[str, Any], group: str) -> bool:
        """Whether the pod's annotations of `group` are as the operator sealed them for this very pod."""
        meta = pod.get("metadata") or {}
        notes, uid = meta.get("annotations") or {}, meta.get("uid")
        got = notes.get(seal_annotation(group))
        if not self.key or not isinstance(uid, str) or not uid or not isinstance(got, str):
            return False
        return hmac.compare_digest(got, self._mac(uid, group, [notes.get(k) for k in SEALS[group]]))


NO_SEAL = Seal(b"")  # an operator without the progress endpoint: nothing it did not write holds


@functools.cache
def programs() -> dict[str, str]:
    """The files the ConfigMap carries, read once from torchjob's package: the entry point and the spare launcher,
    and the stacks' front of every other pod whose command Python runs (kube/objects/front/stacks.py: one ConfigMap, so
    the operator needs no right on another)."""
    return {ENTRY: (_PACKAGE / "kube" / "inpod" / ENTRY).read_text(),
            LAUNCHER: (_PACKAGE / "local" / "spares" / "launcher" / LAUNCHER).read_text(),
            stacks.ENTRY: stacks.source()}


def configmap(namespace: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": CONFIGMAP, "namespace": namespace,
                         "labels": {"app.kubernetes.io/managed-by": "torchjob"}},
            "data": programs()}


def wrap(container: dict[str, Any], argv: list[str], options: int, attempt: int, grace_s: int) -> None:
    """Put the entry point in front of the container's command (`argv`, whose first `options` words
    after the interpreter are its options): the same interpreter runs it, behind `boot` (its hash);
    the kubelet still expands `$(VAR)` in every word. Its settings are variables it takes out of the
    command's environment; the launcher's hash among them (a launcher that does not match it is not
    run: no spare)."""
    entry = hashlib.sha256(programs()[ENTRY].encode()).hexdigest()
    # -I: no PYTHONPATH of the user's (nor the working directory) shadows what it imports
    container["command"] = [argv[0], "-I", "-c", boot(entry, f"{DIR}/{ENTRY}"), *argv]
    container["args"] = []
    launcher = hashlib.sha256(programs()[LAUNCHER].encode()).hexdigest()
    container["env"] = [*container.get("env", []),
                        {"name": "TORCHJOB_INPLACE_OPTIONS", "value": str(options)},
                        {"name": ATTEMPT_ENV, "value": str(attempt)},
                        {"name": "TORCHJOB_INPLACE_GRACE_S", "value": str(grace_s)},
                        {"name": LAUNCHER_SHA256_ENV, "value": launcher}]
    container["volumeMounts"] = [*[m for m in container.get("volumeMounts", []) if m.get("name") != VOLUME],
                                 {"name": VOLUME, "mountPath": DIR, "readOnly": True}]


def volume() -> dict[str, Any]:
    """The ConfigMap's two programs, and nothing else that may be in it (no module planted beside them)."""
    return {"name": VOLUME,
            "configMap": {"name": CONFIGMAP, "items": [{"key": k, "path": k} for k in (ENTRY, LAUNCHER)]}}


def kept_spec(pod: dict[str, Any]) -> dict[str, Any]:
    """What the operator's cache keeps of a pod's spec (it keeps little of it) for `first_attempt`: the
    in-place volume, and each container's first four words and attempt; nothing of any other pod."""
    spec = pod.get("spec") or {}
    volumes = [v for v in spec.get("volumes") or [] if isinstance(v, dict) and v.get("name") == VOLUME]
    if not volumes:
        return {}
    return {"volumes": volumes,
            "containers": [{"command": (c.get("command") or [])[:4],
                            "env": [e for e in c.get("env") or [] if e.get("name") == ATTEMPT_ENV]}
                           for c in spec.get("containers") or [] if isinstance(c, dict)]}


def first_attempt(pod: dict[str, Any]) -> int | None:
    """The attempt the pod was made for, when its spec runs the entry point (None: it does not)."""
    spec = pod.get("spec") or {}
    if not any(v.get("name") == VOLUME and (v.get("configMap") or {}).get("name") == CONFIGMAP
               for v in spec.get("volumes") or [] if isinstance(v, dict)):
        return None
    for c in spec.get("containers") or []:
        command = (c.get("command") or []) if isinstance(c, dict) else []
        if command[1:3] == ["-I", "-c"] and len(command) > 3 and str(command[3]).startswith(BOOT_HEAD):
            value = next((e.get("value") for e in c.get("env") or [] if e.get("name") == ATTEMPT_ENV), None)
            return int(value) if isinstance(value, str) and value.isascii() and value.isdecimal() else None
    return None


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


def in_place(pod: dict[str, Any], seal: Seal | None) -> InPlace | None:
    """The pod's state, when its spec runs the entry point (None: it does not restart in place). Its
    annotations count only where `seal` sealed them; `seal` None: not checked, what they say (for a
    view such as `describe`; never for a decision)."""
    first = first_attempt(pod)
    if first is None:
        return None
    notes = pod.get("metadata", {}).get("annotations") or {}

    def sealed(group: str) -> bool:
        return seal is None or seal.holds(pod, group)

    attempt = attempt_of(pod) if sealed("attempt") else first
    ended = None
    try:
        found = parse_exit(json.loads(notes[ANNOTATION_EXIT])) if ANNOTATION_EXIT in notes and sealed("exit") else None
        ended = found if found is not None and found.attempt == attempt else None
    except (ValueError, TypeError, RecursionError):
        pass  # anyone who may patch pods may write anything: not an end
    stop = str(notes.get(ANNOTATION_STOP, "")) if sealed("stop") else ""
    return InPlace(attempt, ended, int(stop) if stop.isascii() and stop.isdecimal() else None,
                   notes.get(ANNOTATION_RELEASE) == str(attempt) and sealed("release"))


def runs(pod: dict[str, Any], attempt: int, seal: Seal) -> bool:
    """The pod restarts in place and runs `attempt` now (its entry point can be told to stop it)."""
    here = in_place(pod, seal)
    return here is not None and here.attempt == attempt and here.ended is None and _up(pod)


def parked(pod: dict[str, Any], attempt: int, seal: Seal, older: bool = False) -> bool:
    """The pod restarts in place, its attempt `attempt` (`older`: that one or an earlier one) has ended,
    and it waits for its next (not released, not going away, its entry point still running)."""
    here = in_place(pod, seal)
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


def stop_overdue(pod: dict[str, Any], now: datetime, seal: Seal) -> float | None:
    """Seconds until an attempt asked to stop is overdue (<= 0: it is: its entry point does not answer);
    None when no stop is pending."""
    here = in_place(pod, seal)
    by = (pod["metadata"].get("annotations") or {}).get(ANNOTATION_STOP_BY)
    if here is None or here.stop is None or not by or not runs(pod, here.stop, seal):
        return None
    when = parse_time(by)
    return 0.0 if when is None else (when - now).total_seconds()  # unreadable: overdue


def parse_time(value: Any) -> datetime | None:
    """An RFC 3339 time with its zone (an annotation's); None where it is not one (anyone may write one)."""
    if not isinstance(value, str):
        return None
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo is not None else None


def release_note(attempt: int) -> dict[str, str | None]:
    return {ANNOTATION_RELEASE: str(attempt)}
