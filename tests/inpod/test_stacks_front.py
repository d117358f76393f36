"""The front of a pod whose job asked for its stacks (src/torchjob/kube/inpod/torchjob_stacks.py), run here as the
pod runs it (`python -I -c BOOT python -c PROGRAM`, kube/objects/front/stacks.boot(): the source from the ConfigMap's
file, kube/objects/front/stacks.source(), run only if it is the one the pod was made with) with its folders made
temporary: it becomes the command (same pid), puts torchjob's hook ahead of the command's own PYTHONPATH, and
answers a new request file with every rank process's stacks on its stderr (the container's log); the pod's side
of `torchjob stacks --kube` on real pods: tests/e2e/test_stacks_real.py. Real processes throughout."""

from __future__ import annotations

import http.server
import itertools
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from torchjob.core.diagnosis.stacks import answer_in
from torchjob.kube.objects.front import stacks as pod_stacks

PROGRAM = """
import os, sys, threading
print("ready", os.getpid(), os.environ["PYTHONPATH"], flush=True)
def idle():
    threading.Event().wait()  # IDLE
idle()
"""


def shipped(tmp_path: Path, source: str | None = None) -> str:
    """The ConfigMap's file as the kubelet projects it (`source`: someone changed it)."""
    path = tmp_path / "front" / pod_stacks.ENTRY
    path.parent.mkdir(exist_ok=True)
    path.write_text(pod_stacks.source() if source is None else source)
    return str(path)


def test_a_front_missing_or_changed_is_not_run_and_the_command_runs_alone(tmp_path: Path) -> None:
    """Whoever may write the ConfigMap does not run code in the pod; a pod that started without it (the volume is
    optional) still runs its command: without stacks, said once (`torchjob stacks --kube` reads it)."""
    show = "import os, sys; print(os.getpid(), os.environ.get('PYTHONPATH', ''))"
    env = {**os.environ, "TORCHJOB_STACKS_POD_DIR": str(tmp_path / "pod"), "PYTHONPATH": "/users/own"}
    for path in (str(tmp_path / "absent" / pod_stacks.ENTRY),
                 shipped(tmp_path, pod_stacks.source() + "\nimport os; os.system('echo planted')\n")):
        done = subprocess.run([sys.executable, "-I", "-c", pod_stacks.boot(path), sys.executable, "-c", show],
                              env=env, capture_output=True, text=True, timeout=30)
        assert done.returncode == 0 and done.stdout.split()[1:] == ["/users/own"], (done.stdout, done.stderr)
        assert done.stderr == (f"torchjob-stacks: {path} {pod_stacks.UNBOOTED}: running the command without "
                               "stacks\n"), done.stderr
        assert not (tmp_path / "pod").exists()


def test_the_front_becomes_the_command_and_answers_each_request(tmp_path: Path) -> None:
    request = tmp_path / "request"
    request.write_text("made-with")  # what the pod was made with is not a request
    env = {**os.environ, "TORCHJOB_STACKS_POD_DIR": str(tmp_path / "pod"), "TORCHJOB_STACKS_REQUEST": str(request),
           "TORCHJOB_STACKS_POLL_S": "0.05", "LOCAL_RANK": "0", "RANK": "5", "PYTHONPATH": "/users/own"}
    front = [sys.executable, "-I", "-c", pod_stacks.boot(shipped(tmp_path))]
    proc = subprocess.Popen([*front, sys.executable, "-c", PROGRAM], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stderr is not None
        ready = proc.stdout.readline().split()
        # exec: the command is the process the pod started; the hook first, the command's own path kept
        assert ready[:2] == ["ready", str(proc.pid)], ready
        assert ready[2] == f"{tmp_path / 'pod' / 'hook'}:/users/own"
        seen: list[str] = []  # the log, as it comes
        threading.Thread(target=lambda: seen.extend(proc.stderr), daemon=True).start()  # type: ignore[arg-type]
        for n in (1, 2):  # each new value is answered
            (tmp_path / "next").write_text(f"r{n}")
            (tmp_path / "next").rename(request)  # the kubelet swaps the downward API's file whole
            got, end = None, time.monotonic() + 30
            while got is None and time.monotonic() < end:
                time.sleep(0.05)
                got = answer_in(list(seen), f"r{n}")
            assert got is not None, seen
            assert not any("request=made-with" in line for line in seen)
            [(rank, pid, threads)] = got.processes
            assert (rank, pid, got.missing) == (5, proc.pid, [])
            program = [(f.func, f.line) for f in threads[0].frames if f.file == "<string>"]
            assert program == [("idle", 5), ("<module>", 6)]
            assert got.stdlib and threads[0].frames[0].file.startswith(got.stdlib)  # threading.py's wait
    finally:
        proc.kill()
        proc.wait(timeout=10)
    # the watcher ends with the command it was forked for
    end = time.monotonic() + 10
    while time.monotonic() < end and watchers(str(tmp_path)):
        time.sleep(0.1)
    assert watchers(str(tmp_path)) == []


def watchers(mark: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if mark.encode() in environ and state != "Z":
            found.append(int(pid))
    return found


def test_a_command_it_cannot_start_is_said_with_exit_127(tmp_path: Path) -> None:
    env = {**os.environ, "TORCHJOB_STACKS_POD_DIR": str(tmp_path / "pod"),
           "TORCHJOB_STACKS_REQUEST": str(tmp_path / "request")}
    done = subprocess.run([sys.executable, "-I", "-c", pod_stacks.boot(shipped(tmp_path)), "/no/such/python"], env=env,
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 127 and "torchjob-stacks: cannot start /no/such/python" in done.stderr, done.stderr


BUSY_THEN_STILL = """
import os, sys, threading
while not os.path.exists(sys.argv[1]):
    pass  # moving: CPU
print("still", flush=True)
threading.Event().wait()  # still: no CPU, not woken, the same stack
"""


class Endpoint(http.server.BaseHTTPRequestHandler):
    """The operator's progress endpoint as far as the front's hang watch sees it: each POST kept."""

    posts: list[tuple[float, str, dict[str, Any]]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Endpoint.posts.append((time.monotonic(), self.headers.get("Authorization", ""), body))
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args: Any) -> None:
        pass


def test_the_hang_watch_tells_the_endpoint_how_long_no_rank_moved(tmp_path: Path) -> None:
    """runPolicy.hangDeadlineSeconds on a cluster: the front samples its ranks every TORCHJOB_HANG_EVERY_S and posts
    `{"stillSeconds": S}` with the pod's token (not progress): 0 while a rank uses CPU, then growing while none
    moves (its stacks the same at each sample)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Endpoint)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    (tmp_path / "token").write_text("pod-token\n")
    env = {**os.environ, "TORCHJOB_STACKS_POD_DIR": str(tmp_path / "pod"),
           "TORCHJOB_STACKS_REQUEST": str(tmp_path / "r"), pod_stacks.HANG_EVERY_ENV: "0.5",
           "TORCHJOB_STACKS_POLL_S": "0.05", "RANK": "0", "LOCAL_RANK": "0",  # a rank: its hook registers it
           "KUBEFLOW_TRAINER_SERVER_URL": f"http://127.0.0.1:{server.server_port}/torchjobs/ns/job/status",
           "KUBEFLOW_TRAINER_SERVER_TOKEN": str(tmp_path / "token")}
    Endpoint.posts = []
    go = tmp_path / "go-still"
    proc = subprocess.Popen([sys.executable, "-I", "-c", pod_stacks.boot(shipped(tmp_path)), sys.executable, "-c",
                             BUSY_THEN_STILL, str(go)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)

    def wait(what: str, done: Any) -> None:
        end = time.monotonic() + 60
        while not done():
            assert time.monotonic() < end and proc.poll() is None, (what, Endpoint.posts)
            time.sleep(0.05)

    try:
        wait("three samples of a busy rank", lambda: len(Endpoint.posts) >= 3)
        busy = [body["stillSeconds"] for _, _, body in list(Endpoint.posts)]
        go.touch()
        assert proc.stdout is not None and proc.stdout.readline().strip() == "still"
        wait("a rank still for 2 s", lambda: Endpoint.posts[-1][2]["stillSeconds"] >= 2.0)
    finally:
        proc.kill()
        proc.wait(timeout=10)
        server.shutdown()
    posts = list(Endpoint.posts)
    assert all(auth == "Bearer pod-token" and set(body) == {"stillSeconds"} for _, auth, body in posts), posts
    assert max(busy) <= 0.6, posts  # a rank using CPU moved at each sample
    zero = max(i for i, (_, _, body) in enumerate(posts) if body["stillSeconds"] == 0)
    after = [(at, body["stillSeconds"]) for at, _, body in posts[zero:]]
    assert all(b[1] > a[1] for a, b in itertools.pairwise(after)), after


def test_the_front_tells_a_move_as_core_does() -> None:
    """The front runs in the user's image with the standard library alone, so it repeats core's thresholds for
    a rank that moved (core/policies/hangs.py): they must stay the same, or a cluster's hang would be judged
    differently from a local one."""
    from torchjob.core.policies import hangs
    from torchjob.kube.inpod import torchjob_stacks as front

    assert (front.CPU_SHARE, front.MIN_CPU_S, front.SIGNAL_WAKES) == \
        (hangs.CPU_SHARE, hangs.MIN_CPU_S, hangs.SIGNAL_WAKES)
