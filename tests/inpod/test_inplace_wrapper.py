"""The in-pod entry point of a restart in place (src/torchjob/kube/inpod/torchjob_inplace.py), run as the
pod runs it (`python torchjob_inplace.py python SCRIPT ARGS...`) against a small HTTP endpoint that plays
the operator and records what it is told (the wrapper against the real operator: tests/kube). Real
processes throughout: the probe script writes down, per attempt, what it saw (its pid and start time,
environment, argv, __file__, the error file as it found it), and the spare is the real launcher."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import pytest

from torchjob.local.supervisor import pids

REPO = Path(__file__).resolve().parents[2]
WRAPPER = REPO / "src" / "torchjob" / "kube" / "inpod" / "torchjob_inplace.py"
LAUNCHER = REPO / "src" / "torchjob" / "local" / "spares" / "launcher" / "torchjob_spare.py"

# The probe: attempt N (its order among the runs written to PROBE_OUT) does what word N of PROBE_PLAN
# says: ok (exit 0), fail (write the error file, exit 3), fail4 (exit 4), sleep, ignore (SIGTERM
# ignored), term7 (SIGTERM: exit 7), sigkill (SIGKILLs itself). With PROBE_WAIT_SPARE it first waits
# until its wrapper has a spare (a child running the launcher), or, with PROBE_WAIT_DEAD, until the
# spare that PROBE_WAIT_DEAD's file names has died.
PROBE = r'''
import json, os, signal, sys, time

def started():
    with open(f"/proc/{os.getpid()}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[19])

def spares():
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if int(fields[1]) == os.getppid() and b"torchjob_spare.py" in cmdline and fields[0] != "Z":
            found.append(int(pid))
    return found

def pid_in(path):
    """The pid a file's first line names once that line is whole (its writer may be mid-write), else None."""
    try:
        with open(path) as f:
            line = f.readline()
    except OSError:
        return None
    return int(line) if line.endswith("\n") else None

def gone(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True

out = os.environ["PROBE_OUT"]
n = len([f for f in os.listdir(out) if f.startswith("run-")])
err = os.environ.get("TORCHELASTIC_ERROR_FILE")
seen = {"pid": os.getpid(), "pgid": os.getpgid(0), "started": started(), "env": dict(os.environ),
        "argv": sys.argv, "orig_argv": sys.orig_argv, "B": sys.flags.dont_write_bytecode,
        "file": __file__, "torch": "torch" in sys.modules, "ppid": os.getppid(), "path": sys.path,
        "error_file": open(err).read() if err and os.path.exists(err) else None}
with open(os.path.join(out, f"run-{n}.json.tmp"), "w") as f:
    json.dump(seen, f)
os.rename(os.path.join(out, f"run-{n}.json.tmp"), os.path.join(out, f"run-{n}.json"))
print(f"attempt {n} says hello", flush=True)
plan = os.environ["PROBE_PLAN"].split(",")[n]
end = time.monotonic() + 30
if os.environ.get("PROBE_WAIT_SPARE") and n == 0:
    while not spares() and time.monotonic() < end:
        time.sleep(0.02)
if os.environ.get("PROBE_WAIT_DEAD") and n == 0:
    marker = os.environ["PROBE_WAIT_DEAD"]
    while not (pid_in(marker) is not None and gone(pid_in(marker))) and time.monotonic() < end:
        time.sleep(0.02)
if plan == "ok":
    sys.exit(0)
if plan in ("fail", "fail4"):
    with open(err, "w") as f:
        f.write(f"boom {n}")
    sys.exit(3 if plan == "fail" else 4)
if plan == "orphan":  # a process that outlives its parent and its group, and ends before the attempt
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            with open(os.path.join(out, "orphan.tmp"), "w") as f:  # whole once it is there: renamed
                f.write(f"{os.getpid()}\n")
            os.rename(os.path.join(out, "orphan.tmp"), os.path.join(out, "orphan"))
            time.sleep(0.2)
            os._exit(5)
        os._exit(0)
    os.wait()
    while not os.path.exists(os.path.join(out, "orphan")):
        time.sleep(0.01)
    orphan = pid_in(os.path.join(out, "orphan"))
    while not (gone(orphan) and not os.path.exists(f"/proc/{orphan}")) and time.monotonic() < end:
        time.sleep(0.01)  # its parent now is the wrapper, which reaps it
    with open(os.path.join(out, "orphan-reaped"), "w") as f:
        f.write("yes" if gone(orphan) and not os.path.exists(f"/proc/{orphan}") else "no")
    sys.exit(3)
if plan == "sigkill":
    signal.raise_signal(signal.SIGKILL)
if plan == "ignore":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if plan == "term7":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(7))
while True:
    time.sleep(0.05)
'''

RFC3339_Z = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


class Operator:
    """A recording endpoint that answers as the operator does. `answers`: what each POST gets, in
    order: "next" (the next attempt), "release", "hold" (no change), or a status (409: the attempt
    moved on, so the next attempt; 503: try again later, nothing changed). With `long_poll`, a GET that
    asks to wait (`?wait=S&seen=A,S,R`) is answered once the verdict differs from what it holds (`tell`
    changes it), as the operator's endpoint does; without, at once, as an endpoint that does not wait."""

    def __init__(self, tmp_path: Path, answers: list[Any], tls: Any = None, long_poll: bool = False) -> None:
        self.https = tls is not None
        self.long_poll = long_poll
        self.waited: list[float] = []  # how long each GET that asked to wait waited
        self.attempt, self.stop, self.release = 0, None, False
        self.answers = list(answers)
        self.posts: list[dict[str, Any]] = []
        self.post_statuses: list[int] = []
        self.gets = 0
        self.asked: list[tuple[str, float]] = []  # each request's verb and when it came (monotonic)
        self.bad: list[str] = []
        self.peers: set[int] = set()  # the client ports it was asked from: its connections
        self.spares_at_post: list[list[int]] = []
        self.wrapper_pid = 0
        self.scan = True  # for the spares at each POST (/proc read: 0.1 s loaded)
        self.token_file = tmp_path / "token"
        self.token = "token-1"
        self.token_file.write_text(self.token)
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        op = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # kept alive, as the wrapper keeps it

            def log_message(self, *_: Any) -> None:
                pass

            def answer(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    if status == 503:
                        self.send_header("Retry-After", "0.1")
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True  # a long poll the wrapper gave up (its attempt ended)

            def checked(self) -> bool:
                op.peers.add(self.client_address[1])
                op.asked.append((self.command, time.monotonic()))
                if self.path.split("?")[0] != "/apis/v1/namespaces/ns/jobs/j/inplace":
                    op.bad.append(f"path {self.path}")
                elif self.headers.get("Authorization") != f"Bearer {op.token}":
                    op.bad.append(f"auth {self.headers.get('Authorization')}")
                else:
                    return True
                self.answer(401, {"error": "no"})
                return False

            def do_GET(self) -> None:
                if self.checked():
                    with op.lock:
                        op.gets += 1
                        query = parse_qs(self.path.partition("?")[2])
                        if op.long_poll and "wait" in query:
                            a, s, r = query["seen"][0].split(",")
                            seen = {"attempt": int(a), "stop": int(s) if s else None, "release": r == "1"}
                            began = time.monotonic()
                            op.changed.wait_for(lambda: op.verdict() != seen, float(query["wait"][0]))
                            op.waited.append(time.monotonic() - began)
                        self.answer(200, op.verdict())

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if not self.checked():
                    return
                with op.lock:
                    op.posts.append(body)
                    op.spares_at_post.append(children(op.wrapper_pid, b"torchjob_spare.py") if op.scan else [])
                    what = op.answers.pop(0) if op.answers else "hold"
                    op.token = f"token-{len(op.posts) + 1}"  # renewed: the next request must read it again
                    op.token_file.write_text(op.token)
                    if what in ("next", 409):
                        op.attempt += 1
                    elif what == "release":
                        op.release = True
                    status = what if isinstance(what, int) else 200
                    op.post_statuses.append(status)
                    self.answer(status, op.verdict() if status == 200 else {"error": "see status"})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        if tls is not None:
            self.server.socket = tls.context().wrap_socket(self.server.socket, server_side=True)
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        where = f"https://localhost:{self.server.server_address[1]}" if self.https else \
            f"http://127.0.0.1:{self.server.server_address[1]}"
        return f"{where}/apis/v1/namespaces/ns/jobs/j/status"

    def verdict(self) -> dict[str, Any]:
        return {"attempt": self.attempt, "stop": self.stop, "release": self.release}

    def tell(self, **verdict: Any) -> None:
        """Change the verdict as the operator would, waking the GETs that wait for it."""
        with self.lock:
            for k, v in verdict.items():
                setattr(self, k, v)
            self.changed.notify_all()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def children(parent: int, mark: bytes) -> list[int]:
    """Live processes whose parent is `parent` and whose command line holds `mark`."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if int(fields[1]) == parent and mark in cmdline and fields[0] != "Z":
            found.append(int(pid))
    return found


def anywhere(mark: bytes) -> list[int]:
    """Live processes whose command line holds `mark`."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if mark in Path(f"/proc/{pid}/cmdline").read_bytes() and \
                    Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                found.append(int(pid))
        except OSError:
            continue
    return found


class Pod:
    """The wrapper in front of `python probe.py --flag value`, as the operator sets it up."""

    def __init__(self, tmp_path: Path, op: Operator | None, plan: str, url: str | None = None,
                 options: tuple[str, ...] = (), prefix: tuple[str, ...] = (), front: tuple[str, ...] = (),
                 **env: str) -> None:
        self.out = tmp_path / "out"
        self.out.mkdir()
        self.script = tmp_path / "probe.py"
        self.script.write_text(PROBE)
        self.error_file = tmp_path / "termination-log"
        self.error_file.write_text("")
        self.op = op
        base = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHJOB_", "PYTEST", "KUBEFLOW_"))}
        self.pod_env = {**base, "LC_CTYPE": "C.UTF-8", "PROBE_OUT": str(self.out), "PROBE_PLAN": plan,
                        "TORCHELASTIC_ERROR_FILE": str(self.error_file),
                        "KUBEFLOW_TRAINER_SERVER_URL": url or (op.url if op else ""),
                        "KUBEFLOW_TRAINER_SERVER_TOKEN": str(op.token_file if op else tmp_path / "token")}
        self.pod_env.update({k: v for k, v in env.items() if k.startswith("PROBE_")})
        wrapper_env = {"TORCHJOB_INPLACE_OPTIONS": str(len(options)), "TORCHJOB_INPLACE_ATTEMPT": "0",
                       "TORCHJOB_INPLACE_GRACE_S": "3", "TORCHJOB_SPARE_AFTER_S": "0",
                       "TORCHJOB_INPLACE_POLL_S": "0.1", "TORCHJOB_INPLACE_LAUNCHER": str(LAUNCHER),
                       "TORCHJOB_INPLACE_WARM": "",
                       **{k: v for k, v in env.items() if not k.startswith("PROBE_")}}
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            [*prefix, *(front or (sys.executable, str(WRAPPER))), sys.executable, *options, str(self.script), "--flag",
             "value"],
            env={**self.pod_env, **wrapper_env}, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True)
        if op is not None:
            op.wrapper_pid = self.proc.pid

    def finish(self, timeout: float = 30) -> tuple[int, str, str]:
        try:
            stdout, stderr = self.proc.communicate(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.communicate()
        self.elapsed = time.monotonic() - self.started
        return self.proc.returncode, stdout, stderr

    def run(self, n: int) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.out / f"run-{n}.json").read_text())
        return data

    def runs(self) -> int:
        return len([p for p in self.out.iterdir() if p.name.startswith("run-") and p.suffix == ".json"])

    def wait_for(self, what: str, probe: Any, timeout: float = 20) -> None:
        end = time.monotonic() + timeout
        while not probe():
            assert self.proc.poll() is None, f"the wrapper ended ({self.proc.returncode}) before {what}"
            assert time.monotonic() < end, f"timed out waiting for {what}"
            time.sleep(0.02)

    def expected_env(self) -> dict[str, str]:
        return dict(self.pod_env)  # the pod's environment; nothing of the wrapper's own


@pytest.fixture
def operator(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    op = Operator(tmp_path, getattr(request, "param", []))
    yield op
    op.close()


def no_leftovers(pod: Pod) -> None:
    assert anywhere(str(pod.script).encode()) == [], "a process of the pod outlived its wrapper"


@pytest.mark.parametrize("operator", [[]], indirect=True)
def test_an_attempt_that_succeeds_ends_the_pod_with_nothing_reported(tmp_path: Path, operator: Operator) -> None:
    pod = Pod(tmp_path, operator, "ok")
    code, stdout, stderr = pod.finish()
    assert (code, stdout, stderr) == (0, "attempt 0 says hello\n", "")
    assert operator.posts == [] and operator.bad == []
    run = pod.run(0)
    assert run["env"] == pod.expected_env()  # no TORCHJOB_INPLACE_*, no spare's variables
    assert run["argv"] == [str(pod.script), "--flag", "value"] and run["ppid"] == pod.proc.pid
    assert run["pid"] == run["pgid"]  # a session of its own
    no_leftovers(pod)


@pytest.mark.parametrize("operator", [["next", "release"]], indirect=True)
def test_a_failed_attempt_is_reported_and_its_warm_spare_becomes_the_next(tmp_path: Path, operator: Operator) -> None:
    pod = Pod(tmp_path, operator, "fail,fail4", PROBE_WAIT_SPARE="1", TORCHJOB_INPLACE_WARM="torch")
    code, stdout, stderr = pod.finish(timeout=60)
    assert code == 4, stderr  # the last attempt's code, once the operator released the pod
    assert stdout == "attempt 0 says hello\nattempt 1 says hello\n" and stderr == ""
    assert [{k: v for k, v in p.items() if k != "finishedAt"} for p in operator.posts] == [
        {"attempt": 0, "exitCode": 3, "message": "boom 0"}, {"attempt": 1, "exitCode": 4, "message": "boom 1"}]
    assert all(RFC3339_Z.match(p["finishedAt"]) for p in operator.posts)
    assert operator.bad == []  # every request read the token file again (it changed after each report)
    assert operator.gets > 5 and len(operator.peers) == 1  # one connection, kept alive
    first, second = pod.run(0), pod.run(1)
    # the second attempt IS the spare: a process the wrapper ran before the first attempt was reported
    assert second["pid"] in operator.spares_at_post[0] and second["pid"] != first["pid"]
    assert second["torch"] and not first["torch"]  # warm: torch imported ahead
    assert second["pid"] == second["pgid"] and second["ppid"] == pod.proc.pid
    # ... and it saw what a cold process sees: the pod's environment, argv, __file__
    assert first["env"] == second["env"] == pod.expected_env()
    assert first["argv"] == second["argv"] == [str(pod.script), "--flag", "value"]
    assert first["file"] == second["file"] == str(pod.script)
    # the error file: truncated before the second attempt; its message kept when the pod ends
    assert first["error_file"] == "" and second["error_file"] == ""
    assert pod.error_file.read_text() == "boom 1"
    no_leftovers(pod)


@pytest.mark.parametrize(("plan", "code"), [("sleep", 143), ("ignore", 137)])
@pytest.mark.parametrize("operator", [["release"]], indirect=True)
def test_a_stop_ask_ends_the_running_attempt(tmp_path: Path, operator: Operator, plan: str, code: int) -> None:
    pod = Pod(tmp_path, operator, plan, TORCHJOB_INPLACE_GRACE_S="1")
    pod.wait_for("the attempt", lambda: pod.runs() == 1)
    time.sleep(0.2)  # its SIGTERM handler is set
    asked = time.monotonic()
    operator.stop = 0
    rc, _, stderr = pod.finish()
    took = time.monotonic() - asked
    assert rc == code and [p["exitCode"] for p in operator.posts] == [code], stderr
    assert took >= 1.0 or plan == "sleep", took  # SIGTERM first (143 above); SIGKILL only after the grace
    no_leftovers(pod)


@pytest.mark.parametrize(("plan", "sig", "code"), [("sleep", signal.SIGTERM, 143), ("term7", signal.SIGTERM, 7),
                                                   ("sleep", signal.SIGINT, 130)])
def test_sigterm_to_the_wrapper_reaches_the_running_attempt(tmp_path: Path, operator: Operator, plan: str,
                                                            sig: int, code: int) -> None:
    pod = Pod(tmp_path, operator, plan)
    pod.wait_for("the attempt", lambda: pod.runs() == 1)
    time.sleep(0.2)
    pod.proc.send_signal(sig)
    rc, _, stderr = pod.finish()
    assert rc == code and "torchjob-inplace" not in stderr, stderr
    assert operator.posts == []  # the pod is going: nothing to report
    no_leftovers(pod)


@pytest.mark.parametrize("operator", [["hold"]], indirect=True)
def test_sigterm_to_a_parked_wrapper_ends_it_at_once(tmp_path: Path, operator: Operator) -> None:
    pod = Pod(tmp_path, operator, "fail,ok")
    pod.wait_for("the report", lambda: operator.posts and operator.gets > 0)
    time.sleep(0.3)
    sent = time.monotonic()
    pod.proc.send_signal(signal.SIGTERM)
    rc, _, stderr = pod.finish()
    assert (rc, stderr) == (3, "") and time.monotonic() - sent < 5  # not waiting for a verdict
    assert pod.runs() == 1 and len(operator.posts) == 1
    no_leftovers(pod)


def test_an_endpoint_that_stays_down_is_given_up_after_the_patience(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}/apis/v1/namespaces/ns/jobs/j/status"
        (tmp_path / "token").write_text("t")
        pod = Pod(tmp_path, None, "fail", url=url, TORCHJOB_INPLACE_PATIENCE_S="1.5")
        rc, stdout, stderr = pod.finish()
    assert rc == 3 and stdout == "attempt 0 says hello\n"
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("torchjob-inplace: ") and "exit code 3" in lines[0], stderr
    assert 1.5 <= pod.elapsed < 10, pod.elapsed
    assert pod.error_file.read_text() == "boom 0"  # the pod's termination message, as without the wrapper
    no_leftovers(pod)


@pytest.mark.parametrize("operator", [[503, 409, "release"]], indirect=True)
def test_a_report_answered_409_follows_the_verdict_it_then_gets(tmp_path: Path, operator: Operator) -> None:
    pod = Pod(tmp_path, operator, "fail,fail4")
    rc, stdout, stderr = pod.finish()
    assert (rc, stderr) == (4, "")
    assert operator.post_statuses == [503, 409, 200]  # 503: again; 409: GET said attempt 1, which ran
    assert [(p["attempt"], p["exitCode"]) for p in operator.posts] == [(0, 3), (0, 3), (1, 4)]
    assert stdout == "attempt 0 says hello\nattempt 1 says hello\n"
    no_leftovers(pod)


@pytest.mark.parametrize("operator", [["next", "release"]], indirect=True)
def test_a_spare_that_died_leaves_the_next_attempt_to_start_cold(tmp_path: Path, operator: Operator) -> None:
    marker = tmp_path / "spare-died"
    dead = tmp_path / "launcher" / "torchjob_spare.py"
    dead.parent.mkdir()
    dead.write_text(f"import os, sys\nopen({str(marker)!r}, 'a').write(f'{{os.getpid()}}\\n')\nsys.exit(1)\n")
    pod = Pod(tmp_path, operator, "fail,fail4", PROBE_WAIT_DEAD=str(marker), TORCHJOB_INPLACE_LAUNCHER=str(dead),
              TORCHJOB_SPARE_AFTER_S="0.2")
    rc, stdout, stderr = pod.finish()
    assert (rc, stderr) == (4, "") and stdout == "attempt 0 says hello\nattempt 1 says hello\n"
    spare_pid = int(marker.read_text().split()[0])  # the first attempt's spare
    second = pod.run(1)
    assert second["pid"] != spare_pid and second["ppid"] == pod.proc.pid  # a new process, started cold
    assert second["env"] == pod.run(0)["env"] == pod.expected_env() and second["error_file"] == ""
    no_leftovers(pod)


@pytest.mark.parametrize("operator", [["release"]], indirect=True)
def test_an_attempt_killed_by_a_signal_is_reported_as_128_plus_it(tmp_path: Path, operator: Operator) -> None:
    pod = Pod(tmp_path, operator, "sigkill")
    rc, _, stderr = pod.finish()
    assert (rc, stderr) == (137, "")
    assert [(p["attempt"], p["exitCode"], p["message"]) for p in operator.posts] == [(0, 137, None)]
    no_leftovers(pod)


def test_without_an_endpoint_the_command_runs_in_the_wrappers_place(tmp_path: Path) -> None:
    pod = Pod(tmp_path, None, "fail", url="")
    rc, stdout, stderr = pod.finish()
    assert rc == 3 and stdout == "attempt 0 says hello\n"
    assert stderr.startswith("torchjob-inplace: KUBEFLOW_TRAINER_SERVER_URL is not set") and stderr.count("\n") == 1
    run = pod.run(0)
    assert run["pid"] == pod.proc.pid and run["env"] == pod.expected_env()  # exec: the same process


def test_over_https_with_interpreter_options(tmp_path: Path) -> None:
    import hashlib

    from torchjob.kube.progress.tls import generate

    tls = generate(["localhost"])
    ca = tmp_path / "ca.crt"
    ca.write_text(tls.ca_pem)
    op = Operator(tmp_path, ["next"], tls=tls)
    try:
        pod = Pod(tmp_path, op, "fail,ok", options=("-B",), PROBE_WAIT_SPARE="1",  # the spare behind SPARE_BOOT
                  KUBEFLOW_TRAINER_SERVER_CA_CERT=str(ca),
                  TORCHJOB_INPLACE_LAUNCHER_SHA256=hashlib.sha256(LAUNCHER.read_bytes()).hexdigest())
        rc, _, stderr = pod.finish()
    finally:
        op.close()
    assert (rc, stderr) == (0, "") and [p["attempt"] for p in op.posts] == [0] and op.bad == []
    first, second = pod.run(0), pod.run(1)
    assert second["pid"] in op.spares_at_post[0]  # the spare, started with the interpreter's options
    assert first["orig_argv"] == second["orig_argv"] == [sys.executable, "-B", str(pod.script), "--flag", "value"]
    assert first["B"] == second["B"] == 1 and first["argv"] == second["argv"] and first["path"] == second["path"]


@pytest.mark.parametrize("operator", [["release"]], indirect=True)
def test_as_a_subreaper_it_reaps_orphans_and_keeps_the_attempts_exit_code(tmp_path: Path, operator: Operator) -> None:
    # PID 1 of a container gets every orphan of the pod; a subreaper gets those of its descendants (the
    # attribute outlives the exec into the wrapper)
    subreaper = ("-c", "import ctypes, os, sys; ctypes.CDLL(None).prctl(36, 1, 0, 0, 0); "
                 "os.execv(sys.executable, sys.argv[1:])")
    pod = Pod(tmp_path, operator, "orphan", prefix=(sys.executable, *subreaper))
    rc, _, stderr = pod.finish()
    assert (rc, stderr) == (3, "")
    assert [p["exitCode"] for p in operator.posts] == [3]
    assert (pod.out / "orphan-reaped").read_text() == "yes"


@pytest.mark.parametrize("operator", [["next", "release"]], indirect=True)
def test_a_launcher_that_is_not_the_one_the_pod_was_made_with_is_never_run(tmp_path: Path, operator: Operator) -> None:
    """Whoever may write the namespace's ConfigMap changes the launcher: its hash is not the one in the
    pod's spec (TORCHJOB_INPLACE_LAUNCHER_SHA256), so no spare runs it; every attempt starts cold."""
    import hashlib

    marker = tmp_path / "planted-ran"
    planted = tmp_path / "launcher" / "torchjob_spare.py"
    planted.parent.mkdir()
    planted.write_text(f"open({str(marker)!r}, 'w').write('yes')\n" + LAUNCHER.read_text())
    pod = Pod(tmp_path, operator, "fail,fail4", TORCHJOB_INPLACE_LAUNCHER=str(planted), TORCHJOB_SPARE_AFTER_S="0",
              TORCHJOB_INPLACE_LAUNCHER_SHA256=hashlib.sha256(LAUNCHER.read_bytes()).hexdigest())
    rc, stdout, stderr = pod.finish()
    assert rc == 4 and stdout == "attempt 0 says hello\nattempt 1 says hello\n"
    assert stderr == (f"torchjob-inplace: {planted} is not the launcher this pod was made with: every attempt "
                      "starts cold\n")
    assert not marker.exists() and operator.spares_at_post == [[], []]
    assert pod.run(1)["ppid"] == pod.proc.pid and pod.run(1)["env"] == pod.expected_env()
    no_leftovers(pod)


@pytest.mark.parametrize("operator", [["next", "release"]], indirect=True)
def test_a_launcher_changed_after_the_check_is_never_run(tmp_path: Path, operator: Operator) -> None:
    """The kubelet updates a running pod's ConfigMap files: whoever may write the ConfigMap changes the launcher
    after the entry point checked it, before its spare starts. The spare runs the bytes its boot read and
    checked (SPARE_BOOT), never the file by its path: the changed launcher does not run, the next attempt
    starts cold (before, the spare ran whatever the file held then)."""
    import hashlib
    import select

    marker = tmp_path / "planted-ran"
    launcher = tmp_path / "launcher" / "torchjob_spare.py"
    launcher.parent.mkdir()
    launcher.write_text(LAUNCHER.read_text())
    pod = Pod(tmp_path, operator, "sleep,fail4", TORCHJOB_INPLACE_LAUNCHER=str(launcher), TORCHJOB_SPARE_AFTER_S="1",
              TORCHJOB_INPLACE_LAUNCHER_SHA256=hashlib.sha256(LAUNCHER.read_bytes()).hexdigest())
    pod.wait_for("the attempt", lambda: pod.runs() == 1)  # the launcher was checked before it started
    (tmp_path / "new").write_text(f"open({str(marker)!r}, 'w').write('yes')\n" + LAUNCHER.read_text())
    os.replace(tmp_path / "new", launcher)  # as the kubelet swaps a ConfigMap's files
    said, fd, end = b"", pod.proc.stderr.fileno(), time.monotonic() + 20  # type: ignore[union-attr]
    while not marker.exists() and b"no spare" not in said and time.monotonic() < end:  # the spare has started
        if select.select([fd], [], [], 0.1)[0]:
            said += os.read(fd, 4096)
    operator.stop = 0
    rc, stdout, stderr = pod.finish()
    assert not marker.exists()
    assert rc == 4 and stdout == "attempt 0 says hello\nattempt 1 says hello\n"
    lines = (said.decode() + stderr).splitlines()
    assert lines and set(lines) == {f"torchjob-inplace: {launcher} is not the launcher this pod was made with: "
                                    "no spare"}
    assert [p["exitCode"] for p in operator.posts] == [143, 4] and pod.run(1)["ppid"] == pod.proc.pid  # cold
    no_leftovers(pod)


@pytest.mark.parametrize("operator", [["next", "release"]], indirect=True)
def test_nothing_beside_the_launcher_is_imported_and_the_spare_sees_the_scripts_path(tmp_path: Path,
                                                                                    operator: Operator) -> None:
    """Modules planted beside the launcher (its directory is a ConfigMap's in a pod) never run: it is
    taken off sys.path before the first import; the attempt the spare becomes has the script's
    directory first on its path, as a cold one does."""
    import hashlib

    here = tmp_path / "launcher"
    here.mkdir()
    (here / "torchjob_spare.py").write_text(LAUNCHER.read_text())
    for name in ("__future__", "typing", "json", "importlib"):
        (here / f"{name}.py").write_text(f"open({str(tmp_path / ('planted-' + name))!r}, 'w').write('ran')\n")
    pod = Pod(tmp_path, operator, "fail,fail4", PROBE_WAIT_SPARE="1",
              TORCHJOB_INPLACE_LAUNCHER=str(here / LAUNCHER.name),
              TORCHJOB_INPLACE_LAUNCHER_SHA256=hashlib.sha256(LAUNCHER.read_bytes()).hexdigest())
    rc, stdout, stderr = pod.finish(timeout=60)
    assert (rc, stderr) == (4, "") and stdout == "attempt 0 says hello\nattempt 1 says hello\n"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("planted-")) == []
    first, second = pod.run(0), pod.run(1)
    assert second["pid"] in operator.spares_at_post[0]  # the spare became the attempt
    assert first["path"][0] == second["path"][0] == str(tmp_path) and str(here) not in second["path"]
    assert first["path"] == second["path"]
    no_leftovers(pod)


@pytest.mark.parametrize("operator", [["hold", 422, "release"]], indirect=True)
def test_a_waiting_entry_point_sends_its_report_again_until_the_verdict(tmp_path: Path, operator: Operator) -> None:
    """The operator records an attempt's end once (on the pod); one its record lost, or that someone removed
    from the pod, is recorded again: the entry point sends the same report again while it waits (a report
    sent again that is refused changes nothing: it goes on waiting)."""
    pod = Pod(tmp_path, operator, "fail", TORCHJOB_INPLACE_REPORT_AGAIN_S="0.3")
    rc, stdout, stderr = pod.finish(timeout=20)
    assert (rc, stdout, stderr) == (3, "attempt 0 says hello\n", "")
    assert operator.post_statuses == [200, 422, 200] and len(operator.posts) == 3
    assert operator.posts[0] == operator.posts[1] == operator.posts[2] and operator.posts[0]["exitCode"] == 3
    assert operator.gets >= 2  # the verdict asked in between
    no_leftovers(pod)


@pytest.mark.parametrize("changed", [False, True])
@pytest.mark.parametrize("operator", [["release"]], indirect=True)
def test_the_pod_runs_the_entry_point_only_if_it_is_the_one_its_spec_names(tmp_path: Path, operator: Operator,
                                                                            changed: bool) -> None:
    """The container's command as the operator writes it (`python -I -c BOOT COMMAND...`, objects/inplace.
    boot): the entry point from the ConfigMap's directory runs only if its SHA-256 is the one in the
    command; one someone changed is not run at all: the command runs in its place, as without it."""
    import hashlib

    from torchjob.kube.objects.front import inplace

    entry = tmp_path / "inplace" / inplace.ENTRY
    entry.parent.mkdir()
    entry.write_bytes(WRAPPER.read_bytes() + (b"\nimport os; os.system('echo planted')\n" if changed else b""))
    front = (sys.executable, "-I", "-c", inplace.boot(hashlib.sha256(WRAPPER.read_bytes()).hexdigest(), str(entry)))
    pod = Pod(tmp_path, operator, "fail", front=front, TORCHJOB_INPLACE_LAUNCHER=str(LAUNCHER))
    rc, stdout, stderr = pod.finish()
    assert rc == 3 and stdout == "attempt 0 says hello\n"
    if changed:
        assert stderr == (f"torchjob-inplace: {entry} is not the entry point this pod was made with: running the "
                          "command without restarts in place\n")
        assert operator.posts == [] and operator.gets == 0 and pod.run(0)["pid"] == pod.proc.pid  # exec'd
    else:
        assert stderr == "" and [p["exitCode"] for p in operator.posts] == [3] and pod.run(0)["ppid"] == pod.proc.pid
    assert pod.run(0)["env"] == pod.expected_env()
    no_leftovers(pod)


def test_a_stop_is_heard_the_moment_the_operator_says_it(tmp_path: Path) -> None:
    """The running attempt's verdict is a long poll: a stop is heard when it is said, not at the next poll
    (every 5 s here)."""
    op = Operator(tmp_path, ["release"], long_poll=True)
    try:
        pod = Pod(tmp_path, op, "sleep", TORCHJOB_INPLACE_POLL_S="5")
        pod.wait_for("the attempt in a long poll", lambda: pod.runs() == 1 and op.gets >= 1)
        time.sleep(0.5)  # its SIGTERM handler is set, the wrapper waits in its GET
        said = time.monotonic()
        op.tell(stop=0)
        pod.wait_for("the report", lambda: op.posts)
        heard = time.monotonic() - said
        rc, _, stderr = pod.finish()
        assert rc == 143 and [p["exitCode"] for p in op.posts] == [143], stderr
        assert op.waited and heard < 2.0 and op.gets <= 3, (op.waited, heard, op.gets)  # no long poll: up to 5 s
    finally:
        op.close()
    no_leftovers(pod)


def test_an_attempts_end_is_reported_at_once_while_its_verdict_is_asked(tmp_path: Path) -> None:
    """A long poll of the running attempt's verdict is given up when the attempt ends (the wakeup pipe):
    its end is reported at once, not when the poll (3 s) would have ended; and once parked, the wrapper
    waits for its verdict in long polls too (a GET or two a second's hold, not one every 0.2 s)."""
    op = Operator(tmp_path, ["hold"], long_poll=True)
    try:
        pod = Pod(tmp_path, op, "sleep,ok", TORCHJOB_INPLACE_POLL_S="5")
        pod.wait_for("the attempt in a long poll", lambda: pod.runs() == 1 and op.gets >= 1)
        time.sleep(0.3)
        killed = time.monotonic()
        assert pids.send(pod.run(0)["pid"], signal.SIGKILL, lambda p: str(pod.script) in pids.cmdline(p))
        pod.wait_for("the report", lambda: op.posts)
        reported = time.monotonic() - killed
        gets = op.gets
        time.sleep(1.0)  # parked, held
        held_gets = op.gets - gets
        op.tell(attempt=1)
        rc, _, stderr = pod.finish()
        assert rc == 0 and pod.runs() == 2 and [p["exitCode"] for p in op.posts] == [137], stderr
        assert reported < 1.5, reported
        assert held_gets <= 2, held_gets
    finally:
        op.close()
    no_leftovers(pod)


def test_a_reported_end_is_followed_at_once_by_a_long_poll_of_its_verdict(tmp_path: Path) -> None:
    """Once its report is taken, the parked entry point waits for the verdict in a long poll at once: it slept
    PARKED_POLL_S (0.2 s) first, which held the last peer of a gang's restart in place that long (issue 46)."""
    op = Operator(tmp_path, ["hold", "hold", "hold", "release"], long_poll=True)
    op.scan = False  # a POST answered at once: what follows it is the wrapper's doing
    try:
        pod = Pod(tmp_path, op, "fail", TORCHJOB_INPLACE_REPORT_AGAIN_S="0.5")
        rc, _, stderr = pod.finish(timeout=20)
        assert rc == 3 and len(op.posts) == 4, stderr
        after = [next(t for verb, t in op.asked[i + 1:] if verb == "GET") - at
                 for i, (verb, at) in enumerate(op.asked[:-1]) if verb == "POST" and "GET" in dict(op.asked[i + 1:])]
        assert len(after) >= 3 and min(after) < 0.1, after  # each was >= 0.2 s, less the report's own time
    finally:
        op.close()
    no_leftovers(pod)
