"""The entry point of a pod that restarts its replica in place (runPolicy.warmSpares on a cluster; objects/inplace.py
ships it and says how it is run, docs/explanation/faults.md what it does): standard library only. It runs ARGV as a
child (its own session; the pod's environment less the settings below) and, SPARE_AFTER_S after an attempt starts, a
warm spare (ARGV's interpreter and options, the launcher behind SPARE_BOOT, the rest of ARGV). While the attempt runs it
asks the operator whether to stop it (SIGTERM to its group, SIGKILL after GRACE_S). One that exits 0 ends the pod; one
that fails (128+N for signal N) or was stopped is reported with the last 4096 bytes of its TORCHELASTIC_ERROR_FILE
(again every REPORT_AGAIN_S) until the verdict: a newer attempt (the error file truncated; the spare becomes it, or ARGV
starts cold), or release (it exits with the attempt's code); an endpoint failing for PATIENCE_S, the same. SIGTERM or
SIGINT goes to the running attempt's group, or ends a waiting wrapper. As PID 1 it reaps every orphan.

Protocol (JSON, `Authorization: Bearer <token>`) at KUBEFLOW_TRAINER_SERVER_URL, `/status` -> `/inplace`: GET -> 200
{"attempt": A, "stop": S|null, "release": bool}; POST {"attempt", "exitCode", "message", "finishedAt"} -> 200 as GET;
409: not the pod's current attempt; 429/503: again after Retry-After. A GET `?wait=LONG_POLL_S&seen=A,S,0|1` (the
verdict held) is answered once that changes (a long poll; given up for a child's end), or at once (asked again after
POLL_S, 0.2 s once parked). Settings: TORCHJOB_INPLACE_OPTIONS (interpreter options after ARGV0; unset: no spare),
_ATTEMPT, _GRACE_S (3), _PATIENCE_S (120), _LAUNCHER_SHA256, TORCHJOB_SPARE_AFTER_S (5), the endpoint's URL, _TOKEN (a
file), _CA_CERT; for tests _POLL_S (1), _LAUNCHER, _WARM (torch), _REPORT_AGAIN_S (10). One unread or no URL: it says so
and execs ARGV.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import json
import os
import select
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.parse
from datetime import datetime, timezone
from typing import Any, NoReturn

PREFIX = "TORCHJOB_INPLACE_"
OWN_ENV = ("TORCHJOB_SPARE_AFTER_S",)
# what the kubelet keeps of a termination message; the polls (a long poll within the endpoint's limit, 4 s)
MESSAGE_BYTES, PARKED_POLL_S, LONG_POLL_S, REQUEST_TIMEOUT_S = 4096, 0.2, 3.0, 5.0
# A spare's `-c` before the launcher's path: the launcher read once, run only if its SHA-256 is the pod's, as by path
SPARE_BOOT = ("import sys\nh = sys.path.pop(0) if not sys.flags.safe_path and sys.path else None\nimport hashlib\n"
              "p = sys.argv[1]\ntry:\n    b = open(p, 'rb').read()\nexcept OSError:\n    b = b''\nif hashlib.sha256("
              "b).hexdigest() != SHA256:\n    sys.exit(f'torchjob-inplace: {p} is not the launcher this pod was made "
              "with: no spare')\nif h is not None:\n    sys.path.insert(0, h)\nk = len(sys.orig_argv) - len(sys.argv)"
              "\nsys.orig_argv = [*sys.orig_argv[:k - 1], *sys.orig_argv[k + 1:]]\ndel sys.argv[0]\nm = sys.modules["
              "'__main__'].__dict__\nm['__file__'] = p\nexec(compile(b, p, 'exec'), m)\n")


class _Stop(Exception):
    """SIGTERM or SIGINT while no attempt runs: the wrapper ends at once."""


def say(line: str) -> None:
    print(f"torchjob-inplace: {line}", file=sys.stderr, flush=True)


def _number(env: dict[str, str], name: str, default: float | None, kind: type = float) -> Any:
    raw = env.get(name, "")
    with contextlib.suppress(ValueError):
        if (value := default if raw == "" else kind(raw)) is not None and value >= 0:
            return value
    raise ValueError(f"{name}={raw!r} is not a number >= 0")


class Endpoint:
    """The operator's in-place endpoint, over one kept-alive connection."""

    def __init__(self, url: str, token_file: str | None, ca_file: str | None) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname or not parts.path.endswith("/status"):
            raise ValueError(f"KUBEFLOW_TRAINER_SERVER_URL={url!r} is not an http(s) URL ending in /status")
        self.https, self.host, self.port = parts.scheme == "https", parts.hostname, parts.port
        self.path = parts.path[: -len("/status")] + "/inplace" + (f"?{parts.query}" if parts.query else "")
        self.token_file, self.context = token_file, ssl.create_default_context(cafile=ca_file) if self.https else None
        self.conn: http.client.HTTPConnection | None = None

    def call(self, method: str, body: dict[str, Any] | None = None, seen: tuple[int, int | None, bool] | None = None,
             wait_s: float = 0.0, wake: int | None = None) -> tuple[int, Any, float]:
        """(status, JSON answer or None, Retry-After s); OSError: none. A GET with `seen` long-polls (0: wake first)."""
        query = f"wait={wait_s:.3f}&seen={seen[0]},{'' if seen[1] is None else seen[1]},{int(seen[2])}" if seen else ""
        path = self.path + ("&" if "?" in self.path else "?") + query if seen and wait_s > 0 else self.path
        data = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json", **({"Content-Type": "application/json"} if data else {})}
        if self.token_file:
            with open(self.token_file) as f:  # the kubelet renews it: read for each request
                headers["Authorization"] = f"Bearer {f.read().strip()}"
        for fresh in (self.conn is None, True):
            conn = self.conn = self.conn or (
                http.client.HTTPSConnection(self.host, self.port, timeout=REQUEST_TIMEOUT_S, context=self.context)
                if self.https else http.client.HTTPConnection(self.host, self.port, timeout=REQUEST_TIMEOUT_S))
            try:
                conn.request(method, path, body=data, headers=headers)
                if wake is not None and wake in select.select([conn.sock, wake], [], [], REQUEST_TIMEOUT_S)[0]:
                    conn.close()  # a signal came first (a child's end): the request is given up, and its connection
                    self.conn = None
                    return 0, None, 0.0
                resp = conn.getresponse()
                raw = resp.read()
                break
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                self.conn = None
                if fresh:  # a kept-alive connection the server had closed is tried once more
                    raise OSError(f"{method} {self.path}: {e or type(e).__name__}") from None
        answer, retry = None, 1.0
        with contextlib.suppress(ValueError):
            answer = json.loads(raw) if raw else None
        with contextlib.suppress(ValueError):
            retry = max(0.0, float(resp.getheader("Retry-After") or 1))
        return resp.status, answer, retry


def verdict_of(answer: Any) -> tuple[int, int | None, bool] | None:
    """(attempt, stop, release) of an answer, None where it is not one."""
    a, s, r = [answer.get(k) for k in ("attempt", "stop", "release")] if isinstance(answer, dict) else (None, 0, 0)
    return (a, s, r) if type(a) is int and (s is None or type(s) is int) and type(r) is bool else None


class Wrapper:
    def __init__(self, argv: list[str], environ: dict[str, str]) -> None:
        self.argv = argv
        self.env = {k: v for k, v in environ.items() if not k.startswith(PREFIX) and k not in OWN_ENV}
        options = environ.get(PREFIX + "OPTIONS", "")
        self.options: int | None = None if options == "" else _number(environ, PREFIX + "OPTIONS", None, int)
        self.attempt: int = _number(environ, PREFIX + "ATTEMPT", 0, int)
        self.grace_s: float = _number(environ, PREFIX + "GRACE_S", 3.0)
        self.spare_after_s: float = _number(environ, "TORCHJOB_SPARE_AFTER_S", 5.0)
        self.patience_s: float = _number(environ, PREFIX + "PATIENCE_S", 120.0)
        self.poll_s: float = _number(environ, PREFIX + "POLL_S", 1.0)
        self.report_again_s: float = _number(environ, PREFIX + "REPORT_AGAIN_S", 10.0)
        here = os.path.dirname(os.path.abspath(__file__))
        self.launcher = environ.get(PREFIX + "LAUNCHER") or os.path.join(here, "torchjob_spare.py")
        self.warm = environ.get(PREFIX + "WARM", "torch")
        url = environ.get("KUBEFLOW_TRAINER_SERVER_URL", "")
        if not url:
            raise ValueError("KUBEFLOW_TRAINER_SERVER_URL is not set")
        self.endpoint = Endpoint(url, environ.get("KUBEFLOW_TRAINER_SERVER_TOKEN"),
                                 environ.get("KUBEFLOW_TRAINER_SERVER_CA_CERT") or None)
        self.error_file = self.env.get("TORCHELASTIC_ERROR_FILE")
        if self.options is not None and not os.path.isfile(self.launcher):
            say(f"no spare launcher at {self.launcher}: every attempt starts cold")
            self.options = None
        self.sha256 = environ.get(PREFIX + "LAUNCHER_SHA256", "")
        if self.options is not None and self.sha256:  # whoever may write the ConfigMap is not to run code here
            with open(self.launcher, "rb") as f:
                if hashlib.sha256(f.read()).hexdigest() != self.sha256:
                    say(f"{self.launcher} is not the launcher this pod was made with: every attempt starts cold")
                    self.options = None
        self.phase = "starting"  # starting | running | parked | exiting
        self.child: subprocess.Popen[bytes] | None = None  # the attempt's process (a spare, or cold)
        self.spare: subprocess.Popen[bytes] | None = None
        self.code: int | None = None  # the running attempt's exit code, once it has ended
        self.start_error: str | None = None  # why it could not start
        self.spare_sock: socket.socket | None = None
        self.child_sock: socket.socket | None = None  # the socket of the spare that became the attempt
        self.signalled: int | None = None  # SIGTERM or SIGINT: the pod is going
        self.pending: int | None = None  # one that came while an attempt was starting
        self.started = 0.0  # when the running attempt started (monotonic)
        self.wake_r, self.wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)  # the signals' wakeup

    def on_signal(self, signum: int, _frame: Any) -> None:
        self.signalled = signum
        if self.phase == "parked":
            raise _Stop()
        if self.phase == "running":
            self.forward(signum)
        elif self.phase == "starting":
            self.pending = signum

    def forward(self, sig: int) -> None:
        if self.child is not None and self.code is None:
            self.kill_group(self.child.pid, sig)

    @staticmethod
    def kill_group(pid: int, sig: int) -> None:
        """Signal the group a child of ours leads; called only while that child is unreaped."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, sig)

    def reap(self) -> None:
        """Reap every child that ended: the attempt's (its exit code, and what is left of its group
        killed while its pid is still held), the spare's, and any orphan (as PID 1)."""
        while True:
            info: os.waitid_result | None = None
            with contextlib.suppress(ChildProcessError):
                info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            if info is None:
                return
            pid = info.si_pid
            code = info.si_status if info.si_code == os.CLD_EXITED else 128 + info.si_status
            if self.child is not None and pid == self.child.pid and self.code is None:
                self.kill_group(pid, signal.SIGKILL)  # the attempt's leftovers, as a container's end would
                self.code = code  # before the reaping: no signal goes to its group afterwards
                self.child.returncode = code
            elif self.spare is not None and pid == self.spare.pid and self.spare.returncode is None:
                self.spare.returncode = code
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)

    def wait(self, seconds: float) -> None:
        """Sleep until a signal (a child's end) or `seconds`."""
        select.select([self.wake_r], [], [], max(0.0, seconds))
        with contextlib.suppress(BlockingIOError):
            os.read(self.wake_r, 4096)  # drained (a byte left over only wakes it once more)

    def start(self, attempt: int) -> None:
        if self.signalled is not None:  # the pod is going: no new attempt
            raise _Stop()
        self.phase, self.code, self.start_error = "starting", None, None
        if self.child_sock is not None:  # the last attempt's, when a spare became it
            self.child_sock.close()
        self.child_sock = None
        self.attempt = attempt
        self.child = self.take_spare()
        if self.child is None:
            try:
                self.child = subprocess.Popen(self.argv, env=self.env, start_new_session=True)
            except OSError as e:  # reported as a shell reports a command it cannot run
                self.code, self.start_error = 127, f"cannot start {self.argv[0]}: {e.strerror or e}"
                say(self.start_error)
        self.started = time.monotonic()
        self.phase = "running"
        if self.pending is not None:
            sig, self.pending = self.pending, None
            self.forward(sig)

    def start_spare(self) -> None:
        if self.options is None or self.spare is not None:
            return
        n = 1 + self.options
        boot = ["-c", SPARE_BOOT.replace("SHA256", repr(self.sha256))] if self.sha256 else []  # not run by its path
        argv = [*self.argv[:n], *boot, os.path.abspath(self.launcher), *self.argv[n:]]
        ours, theirs = socket.socketpair()
        env = {**self.env, "TORCHJOB_SPARE_FD": str(theirs.fileno()), "TORCHJOB_SPARE_WARM": self.warm}
        try:
            self.spare = subprocess.Popen(argv, env=env, start_new_session=True, pass_fds=(theirs.fileno(),))
            self.spare_sock = ours
        except OSError as e:
            say(f"cannot start a spare: {e}")
            ours.close()
        finally:
            theirs.close()

    def take_spare(self) -> subprocess.Popen[bytes] | None:
        """The spare, made the attempt (the child's environment handed to it), or None."""
        self.reap()  # a spare that died is seen so
        spare, sock = self.spare, self.spare_sock
        if spare is not None and sock is not None and spare.returncode is None:
            try:
                sock.sendall(json.dumps({"env": self.env}).encode())
                sock.shutdown(socket.SHUT_WR)  # its end of file: the plan is whole
                self.spare, self.spare_sock, self.child_sock = None, None, sock  # open while it runs
                return spare
            except OSError:
                pass
        self.end_spare()
        return None

    def end_spare(self) -> None:
        """The spare is not needed: end of file on its socket, SIGKILL to its group."""
        if self.spare_sock is not None:
            self.spare_sock.close()
        if self.spare is not None:
            self.reap()
            if self.spare.returncode is None:
                self.kill_group(self.spare.pid, signal.SIGKILL)
        self.spare = self.spare_sock = None

    def run_attempt(self) -> tuple[int, bool]:
        """Watch the running attempt until it ends: (its exit code, whether the operator stopped it)."""
        spare_at = self.started + self.spare_after_s if self.options is not None else float("inf")
        next_poll, kill_at, stopped = self.started, None, False
        while True:
            self.reap()
            if self.code is not None:
                return self.code, stopped
            now = time.monotonic()
            if now >= spare_at:
                self.start_spare()
                spare_at = float("inf")
            if kill_at is not None and now >= kill_at:
                self.forward(signal.SIGKILL)
                kill_at = None
            if now >= next_poll:
                wait_s = min(LONG_POLL_S, spare_at - now) if not stopped and self.signalled is None else 0.0
                try:  # a long poll, given up for a signal (the wakeup pipe: a child's end is seen to first)
                    _, answer, _ = self.endpoint.call("GET", None, (self.attempt, None, False), wait_s, self.wake_r)
                except OSError:
                    answer = None  # while the attempt runs, the endpoint's trouble changes nothing
                next_poll = max(now + self.poll_s, time.monotonic())  # one that waited is asked again at once
                verdict = verdict_of(answer)
                if verdict is not None and verdict[1] == self.attempt and not stopped and self.signalled is None:
                    stopped = True
                    self.forward(signal.SIGTERM)
                    kill_at = time.monotonic() + self.grace_s
            self.wait(min(next_poll, spare_at, kill_at or float("inf")) - time.monotonic())

    def park(self, ended: int, code: int, message: str | None, finished: str) -> int | None:
        """Report the ended attempt and wait for the verdict: the next attempt, or None to exit."""
        self.phase = "parked"
        if self.signalled is not None:
            raise _Stop()
        report = {"attempt": ended, "exitCode": code, "message": message, "finishedAt": finished}
        reported, failing_since, failures, why, delay = False, None, 0, "", 0.0
        again, held = 0.0, None  # when the report is sent again (an end lost or removed since); the verdict held
        while True:
            if delay:
                time.sleep(delay)
            self.reap()
            asked = time.monotonic()  # a GET waits (a long poll) while no report is to be sent (again) meanwhile
            post = not reported or asked >= again
            again = asked + self.report_again_s if post else again
            try:
                status, answer, retry = self.endpoint.call("POST" if post else "GET", report if post else None,
                                                           held, 0.0 if post else min(LONG_POLL_S, again - asked))
                why = f"HTTP {status}"
            except OSError as e:
                status, answer, retry, why = 0, None, 0.0, str(e)
            verdict = verdict_of(answer) if status == 200 else None
            if verdict is not None:  # asked again at once after a poll that waited, or a report (a long poll next)
                reported, failing_since, failures, held = True, None, 0, verdict
                delay = 0.0 if post else max(0.0, PARKED_POLL_S - (time.monotonic() - asked))
                if verdict[0] > ended:
                    return verdict[0]
                if verdict[2]:
                    return None
                continue
            if status == 409 or (reported and post):  # the attempt moved on, or a report sent again not taken:
                reported, delay = True, 0.0 if status == 409 else PARKED_POLL_S  # the verdict decides
                continue
            now = time.monotonic()
            failing_since = now if failing_since is None else failing_since
            if now - failing_since >= self.patience_s:
                say(f"the operator's endpoint failed for {now - failing_since:.0f} s ({why}): "
                    f"exiting with attempt {ended}'s exit code {code}")
                return None
            failures += 1
            delay = retry if status in (429, 503) else min(2.0, 0.1 * 2 ** min(failures, 5))
            delay = min(delay, max(0.05, self.patience_s - (now - failing_since)))

    def message(self) -> str | None:
        with contextlib.suppress(OSError), open(self.error_file or "", "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - MESSAGE_BYTES))
            return f.read().decode("utf-8", "replace") or None
        return None

    def run(self) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self.on_signal)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.set_wakeup_fd(self.wake_w, warn_on_full_buffer=False)
        code = 0
        try:
            attempt = self.attempt
            while True:
                self.start(attempt)
                code, stopped = self.run_attempt()
                self.phase = "exiting"
                # to the microsecond: which of a gang's failures came first is told apart (a pod's own is in seconds)
                finished = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
                if self.signalled is not None or (code == 0 and not stopped):
                    return code
                message = self.start_error or self.message()
                nxt = self.park(attempt, code, message, finished)
                self.phase = "exiting"
                if nxt is None:
                    return code
                with contextlib.suppress(OSError):  # the next attempt's error file starts empty
                    os.truncate(self.error_file or "", 0)
                attempt = nxt
        except _Stop:  # while waiting for the verdict: the ended attempt's exit code
            return code
        finally:
            self.phase = "exiting"
            self.end_spare()


def main() -> NoReturn:
    argv = sys.argv[1:]
    if not argv:
        say("no command to run: usage: python torchjob_inplace.py COMMAND [ARGS...]")
        sys.exit(2)
    try:
        wrapper = Wrapper(argv, dict(os.environ))
    except (ValueError, OSError) as e:  # no operator to talk to: the command runs as it would without us
        say(f"{e}: running the command without restarts in place")
        env = {k: v for k, v in os.environ.items() if not k.startswith(PREFIX) and k not in OWN_ENV}
        try:
            os.execvpe(argv[0], argv, env)
        except OSError as err:
            say(f"cannot start {argv[0]}: {err.strerror or err}")
            sys.exit(127)
    sys.exit(wrapper.run())


if __name__ == "__main__":
    main()
