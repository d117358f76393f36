"""Stacks in pods (issue 42): what a pod is made with so that its ranks give their stacks (by default; a job
annotated torchjob.dev/stacks: "false" opts out), and the request `torchjob stacks --kube` (and the operator, before
it stops a stalled job: kube/controller/pods/stall_stacks.py) writes on it. Pure, but for reading the two
programs shipped from torchjob's own package.

The training container runs kube/inpod/torchjob_stacks.py in front of its command (`ARGV0 -I -c BOOT ARGV...`): its
source, with torchjob's start-up hook ahead of it, is a key of the ConfigMap the operator keeps in each job namespace
(kube/objects/front/shipped.py's CONFIGMAP), mounted `optional`; BOOT (shipped.boot) runs it only if its SHA-256 is the
one in the pod's spec, which nobody can change once the pod is made, else the command alone (the job runs, without
stacks). The spec carries the hash, not the 16 KB of source: what etcd and every watch event hold of a pod. It
puts the hook on the command's PYTHONPATH (every rank's process registers faulthandler on SIGUSR2), then watches
the pod's annotation `torchjob.dev/stacks-request` through a downward API file and answers each new value in the
container's log. Taking stacks needs no exec into the pod (the operator has no pods/exec right) and
no ptrace (Pod Security `restricted`): patch on pods and get on pods/log, which a namespace's users have."""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path
from typing import Any

from torchjob.kube.objects.front import shipped

ANNOTATION = "torchjob.dev/stacks"  # on the job: "false" makes its pods without the watcher (default: with it)
# on a pod made with the watcher: the container that runs it (the operator's cache keeps torchjob's annotations,
# not the pod's spec): where the operator reads a stalled job's answer
ANNOTATION_CONTAINER = "torchjob.dev/stacks-container"
ANNOTATION_REQUEST = "torchjob.dev/stacks-request"  # on a pod: each new value asks for its stacks
VOLUME = "torchjob-stacks"  # an emptyDir: the hook and each process's stacks file
REQUEST_VOLUME = "torchjob-stacks-request"  # the downward API file of the request
PROGRAM_VOLUME = "torchjob-stacks-front"  # the front's source, from the ConfigMap (optional: a pod never waits for it)
DIR = "/var/run/torchjob/stacks"
REQUEST_DIR = "/var/run/torchjob/stacks-request"
PROGRAM_DIR = "/var/run/torchjob/stacks-front"
ENTRY = "torchjob_stacks.py"
HANG_EVERY_ENV = "TORCHJOB_HANG_EVERY_S"  # the front samples its ranks that often for a hang, and tells the endpoint
# how the command's program begins (BOOT's, and the source's before pods booted it): how a pod made with the watcher
# is known, and its front process (its /proc cmdline)
HEAD = "# torchjob-stacks\n"
UNBOOTED = "is not the front this pod was made with"  # what BOOT says when it runs the command without the front
HOOK_LINE = 'HOOK = ""  # torchjob\'s start-up hook: kube/objects/front/stacks.py puts its source here\n'
_PACKAGE = Path(__file__).resolve().parents[3]  # src/torchjob


def wanted(annotations: dict[str, str] | None) -> bool:
    """Whether a job's pods are made to give their stacks: by default, unless its annotation says "false"."""
    return (annotations or {}).get(ANNOTATION, "").strip().lower() != "false"


@functools.cache
def source() -> str:
    """The program the container's interpreter runs first, torchjob's start-up hook defined ahead of it."""
    hook = (_PACKAGE / "local" / "ranktag" / "hook" / "sitecustomize.py").read_text()
    entry = (_PACKAGE / "kube" / "inpod" / ENTRY).read_text()
    assert HOOK_LINE in entry
    return HEAD + entry.replace(HOOK_LINE, f"HOOK = {hook!r}\n", 1)


@functools.cache
def boot(path: str = f"{PROGRAM_DIR}/{ENTRY}") -> str:
    """What the container's interpreter runs: the front from the ConfigMap, if it is the one this torchjob ships."""
    sha256 = hashlib.sha256(source().encode()).hexdigest()
    return shipped.boot(sha256, path, head=HEAD, who="torchjob-stacks",
                        what="the front", without="stacks", drop=(HANG_EVERY_ENV,))


def wrap(spec: dict[str, Any], container: dict[str, Any], argv: list[str], hang_every_s: float | None = None) -> None:
    """Put the watcher in front of the container's command (`argv`, headed by a Python interpreter), with its
    two volumes; `hang_every_s`: how often it samples the ranks for a hang and tells the progress endpoint
    (runPolicy.hangDeadlineSeconds; None: not watched)."""
    container["command"] = [argv[0], "-I", "-c", boot(), *argv]
    if hang_every_s is not None:
        container["env"] = [*[e for e in container.get("env", []) if e.get("name") != HANG_EVERY_ENV],
                            {"name": HANG_EVERY_ENV, "value": f"{hang_every_s:g}"}]
    container.pop("args", None)  # in the command now (an empty list: the API server stores none)
    mine = (VOLUME, REQUEST_VOLUME, PROGRAM_VOLUME)
    container["volumeMounts"] = [*[m for m in container.get("volumeMounts", []) if m.get("name") not in mine],
                                 {"name": VOLUME, "mountPath": DIR},
                                 {"name": REQUEST_VOLUME, "mountPath": REQUEST_DIR, "readOnly": True},
                                 {"name": PROGRAM_VOLUME, "mountPath": PROGRAM_DIR, "readOnly": True}]
    spec["volumes"] = [*[v for v in spec.get("volumes", []) if v.get("name") not in mine],
                       {"name": VOLUME, "emptyDir": {}},
                       {"name": PROGRAM_VOLUME, "configMap": {"name": shipped.CONFIGMAP, "optional": True,
                                                              "items": [{"key": ENTRY, "path": ENTRY}]}},
                       {"name": REQUEST_VOLUME, "downwardAPI": {"items": [{
                           "path": "request",
                           "fieldRef": {"fieldPath": f"metadata.annotations['{ANNOTATION_REQUEST}']"}}]}}]


def container_of(pod: dict[str, Any]) -> str | None:
    """The name of the pod's container that runs the watcher (None: the pod was not made with it)."""
    for c in (pod.get("spec") or {}).get("containers") or []:
        command = c.get("command") or [] if isinstance(c, dict) else []
        if command[1:3] == ["-I", "-c"] and len(command) > 3 and str(command[3]).startswith(HEAD):
            return str(c.get("name"))
    return None


def request_note(request: str) -> dict[str, Any]:
    return {"metadata": {"annotations": {ANNOTATION_REQUEST: request}}}
