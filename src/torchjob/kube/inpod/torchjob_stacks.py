"""The front of a pod whose ranks give their stacks (by default; not a job annotated torchjob.dev/stacks: "false"): a
program run inside the pod, not a module of torchjob. kube/objects/front/stacks.py puts it in front of the training
container's command (`ARGV0 -I -c BOOT ARGV...`, the same interpreter: BOOT runs this source, from the operator's
ConfigMap, only if its SHA-256 is the one in the pod's spec, which nobody can change once the pod is made) with
HOOK, torchjob's start-up hook (local/ranktag/hook/sitecustomize.py), defined ahead of it.

It writes HOOK as sitecustomize.py into the pod's own folder (an emptyDir), puts that folder first on the command's
PYTHONPATH (as the image set it: the kubelet could not have read the image's own), forks the watcher and becomes
ARGV (exec: the command keeps its pid, its output and its signals). Every rank's process then registers faulthandler
on SIGUSR2 with a file of its own in the folder (as locally). The watcher reads the pod's annotation
torchjob.dev/stacks-request through a downward API file; a new value is a request: it signals every process that
holds its file open, waits for each dump to settle, and writes them to the container's log between lines
`torchjob-stacks: begin request=R` and `torchjob-stacks: end request=R`, then `torchjob-stacks: answered
request=R processes=N missing=PIDS stdlib=DIR`, where `torchjob stacks --kube` reads them. No exec into the pod, no
ptrace: whoever may patch the pod and read its log takes its stacks. Standard library only, of Python 3.7 or later
(an image's own interpreter runs it).

Environment: TORCHJOB_STACKS_POD_DIR (the emptyDir), TORCHJOB_STACKS_REQUEST (the downward API file). Test knob:
TORCHJOB_STACKS_POLL_S (0.2)."""

from __future__ import annotations

import _signal as signal  # type: ignore[import-not-found]  # the signal module's C half: no enum imported at the pod's start (its constants are ints)
import errno
import os
import sys
import time

HOOK = ""  # torchjob's start-up hook: kube/objects/front/stacks.py puts its source here
SIGNAL = signal.SIGUSR2
WAIT_S = 3.0  # how long the processes get to answer, all together
SETTLE_S = 0.05  # a dump is whole once its file stopped growing this long
# core/policies/hangs.py's, which this standard-library-only front cannot import (tests/inpod hold them equal)
CPU_SHARE, MIN_CPU_S, SIGNAL_WAKES = 0.01, 0.02, 2


def say(line: str) -> None:
    os.write(2, f"torchjob-stacks: {line}\n".encode())


def read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def holds(pid: int, path: str) -> bool:
    """The process has this very file open: the one that registered it, not another that got its pid since
    (`path` as the kernel names it: /var/run is a link to /run in many images)."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") == path:
                return True
        except OSError:
            continue
    return False


def send(pid: int, path: str) -> bool:
    """SIGUSR2 to the process that holds `path` open (its own stacks file). Through a pidfd opened before the check
    where this Python has one (3.9 or later), so that a pid another process took since is never signalled; else
    (an older Python, or a kernel or seccomp profile without pidfd_open) by its pid, right after the check."""
    fd = None
    opener = getattr(os, "pidfd_open", None)
    if opener is not None:
        try:
            fd = opener(pid)
        except OSError as e:
            if e.errno not in (errno.ENOSYS, errno.EPERM):
                return False  # gone
    try:
        if not holds(pid, path):
            return False
        if fd is not None:
            signal.pidfd_send_signal(fd, SIGNAL)
        else:
            os.kill(pid, SIGNAL)
        return True
    except OSError:
        return False
    finally:
        if fd is not None:
            os.close(fd)


def dumps(procs: str, wait_s: float = WAIT_S) -> tuple[dict[str, tuple[int, int]], dict[str, bytes]]:
    """Signal every registered process and wait for its dump: (file -> (pid, its size before), file -> dump)."""
    sent: dict[str, tuple[int, int]] = {}
    for path, pid in registered(procs):
        try:
            size = os.stat(path).st_size
            if send(pid, os.path.realpath(path)):
                sent[path] = (pid, size)
        except OSError:
            continue
    end = time.monotonic() + wait_s
    done: dict[str, bytes] = {}
    last: dict[str, tuple[int, float]] = {}
    while len(done) < len(sent) and time.monotonic() < end:
        for path, (_, before) in sent.items():
            if path in done:
                continue
            try:
                size = os.stat(path).st_size
            except OSError:
                continue
            now = time.monotonic()
            seen = last.get(path)
            if size > before and seen is not None and seen[0] == size and now - seen[1] >= SETTLE_S:
                with open(path, "rb") as f:
                    head = f.readline()  # the hook's header: the rank, the pid, the main thread
                    f.seek(before)
                    done[path] = head + f.read()
            elif seen is None or seen[0] != size:
                last[path] = (size, now)
        time.sleep(0.01)
    return sent, done


def registered(procs: str) -> list[tuple[str, int]]:
    """Each rank process's stacks file (its hook registered it) and its pid."""
    try:
        names = sorted(os.listdir(procs))
    except OSError:
        return []
    out = []
    for name in names:
        stem = name[:-4] if name.endswith(".txt") else name  # not removesuffix: an image's Python may be 3.8
        _, sep, pid_text = stem.rpartition("-pid-")
        if sep and pid_text.isdigit():
            out.append((os.path.join(procs, name), int(pid_text)))
    return out


def answer(request: str, procs: str, wait_s: float = WAIT_S) -> None:
    """Signal every registered process, wait for its dump, and write each to the log."""
    sent, done = dumps(procs, wait_s)
    for dump in done.values():
        os.write(2, f"torchjob-stacks: begin request={request}\n".encode() + dump.rstrip(b"\n")
                 + f"\ntorchjob-stacks: end request={request}\n".encode())
    missing = ",".join(str(pid) for path, (pid, _) in sent.items() if path not in done)
    import sysconfig  # here, in the watcher: not on the way to the command

    stdlib = sysconfig.get_paths().get("stdlib", "")
    say(f"answered request={request} processes={len(done)} missing={missing} stdlib={stdlib}")


def counters(pid: int) -> tuple[float, int] | None:
    """A process's CPU seconds (every thread's) and its main thread's voluntary context switches (None: gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        with open(f"/proc/{pid}/task/{pid}/status", "rb") as f:
            wakes = next(int(line.split()[1]) for line in f if line.startswith(b"voluntary_ctxt_switches:"))
    except (OSError, IndexError, ValueError, StopIteration):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"), wakes


class Stillness:
    """Since when none of the pod's ranks moved, as core/policies/hangs.py tells a move (its CPU_SHARE, MIN_CPU_S,
    SIGNAL_WAKES): CPU used, its main thread woken, or (taken only while the counters say no rank moved, so that a
    training rank is never signalled) its stacks changed. A rank that came or went is a move."""

    def __init__(self) -> None:
        self.last: dict[str, tuple[float, int, bytes | None, float]] = {}  # file -> (cpu, wakes, stacks, when)
        self.moved_at: float | None = None

    def sample(self, procs: str, now: float) -> float | None:
        """Sample every rank; the seconds since one last moved (None: no rank to sample, nothing said)."""
        ranks = {path: counters(pid) for path, pid in registered(procs)}
        seen = {path: c for path, c in ranks.items() if c is not None}
        if not seen:
            self.last, self.moved_at = {}, None
            return None
        moved = set(seen) != set(self.last)
        for path, (cpu, wakes) in seen.items():
            before = self.last.get(path)
            if before is not None and (cpu - before[0] >= max(CPU_SHARE * (now - before[3]), MIN_CPU_S)
                                       or wakes - before[1] > SIGNAL_WAKES):
                moved = True
        stacks: dict[str, bytes] = {}
        if not moved:
            stacks = {path: dump.split(b"\n", 1)[-1] for path, dump in dumps(procs)[1].items()}
            moved = any(path in stacks and self.last[path][2] not in (None, stacks[path]) for path in seen)
        self.last = {path: (cpu, wakes, stacks.get(path), now) for path, (cpu, wakes) in seen.items()}
        if moved or self.moved_at is None:
            self.moved_at = now
        return now - self.moved_at


def tell_still(seconds: float, said: list[str]) -> None:
    """POST the pod's stillness to the progress endpoint, as torchjob.report does (Trainer's variables): not
    progress; its replica and attempt are its token's. Never fails the watch; a failure is said once (`said`)."""
    import json
    import ssl
    import urllib.request

    url = os.environ.get("KUBEFLOW_TRAINER_SERVER_URL", "")
    if not url:
        return
    headers = {"Content-Type": "application/json"}
    try:
        token = os.environ.get("KUBEFLOW_TRAINER_SERVER_TOKEN", "")
        if token:
            headers["Authorization"] = "Bearer " + read(token)
        ca = os.environ.get("KUBEFLOW_TRAINER_SERVER_CA_CERT") or None
        context = ssl.create_default_context(cafile=ca) if url.startswith("https:") else None
        body = json.dumps({"stillSeconds": round(seconds, 1)}).encode()
        request = urllib.request.Request(url, data=body, headers=headers, method="POST")
        with urllib.request.urlopen(request, timeout=5, context=context) as resp:
            resp.read()
    except Exception as e:  # the endpoint away, a 429: the next sample tells again
        if not said:
            said.append(repr(e))
            say(f"hang watch: could not tell the operator (said once; it tries at each sample): {e!r}")


def watch(procs: str, request_file: str, parent: int) -> None:
    """Answer each new value of the request file, for as long as the command runs; with TORCHJOB_HANG_EVERY_S,
    sample the ranks that often and tell the operator how long none moved (runPolicy.hangDeadlineSeconds)."""
    poll_s = float(os.environ.get("TORCHJOB_STACKS_POLL_S", "0.2"))
    every = float(os.environ.get("TORCHJOB_HANG_EVERY_S", "0") or 0)
    still, next_sample = Stillness(), time.monotonic() + every
    said: list[str] = []
    last = read(request_file)  # what the pod was made with is not a request
    while os.getppid() == parent:
        time.sleep(poll_s)
        now = read(request_file)
        if now and now != last:
            last = now
            answer(now, procs)
        if every > 0 and time.monotonic() >= next_sample:
            next_sample = time.monotonic() + every
            seconds = still.sample(procs, time.monotonic())
            if seconds is not None:
                tell_still(seconds, said)


def main() -> None:
    argv = sys.argv[1:]
    if not argv:
        say("no command to run")
        sys.exit(127)
    env = dict(os.environ)
    base = env.pop("TORCHJOB_STACKS_POD_DIR", "/var/run/torchjob/stacks")
    request_file = env.pop("TORCHJOB_STACKS_REQUEST", "/var/run/torchjob/stacks-request/request")
    env.pop("TORCHJOB_HANG_EVERY_S", None)  # the watcher's (os.environ keeps it), not the command's
    hook, procs = os.path.join(base, "hook"), os.path.join(base, "procs")
    try:
        os.makedirs(hook, mode=0o700, exist_ok=True)
        os.makedirs(procs, mode=0o700, exist_ok=True)
        with open(os.path.join(hook, "sitecustomize.py"), "w") as f:
            f.write(HOOK)
    except OSError as e:
        say(f"no stacks for this pod: cannot write to {base}: {e.strerror or e}")
    else:
        env["PYTHONPATH"] = os.pathsep.join([hook, *(p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p)])
        env["TORCHJOB_STACKS_DIR"] = procs
        parent = os.getpid()
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            child = os.fork()
        except OSError as e:
            say(f"no stacks for this pod: cannot start its watcher: {e.strerror or e}")
            child = -1
        if child == 0:
            code = 0
            try:
                os.close(0)
                watch(procs, request_file, parent)
            except BaseException as e:  # the command runs on without it: said once
                say(f"the stacks' watcher stopped: {e!r}")
                code = 1
            finally:
                os._exit(code)
    try:
        os.execvpe(argv[0], argv, env)
    except OSError as e:
        say(f"cannot start {argv[0]}: {e.strerror or e}")
        sys.exit(127)


if __name__ == "__main__":
    main()
