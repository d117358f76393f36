"""Issue 43, item 6: a flood of made-up tokens and slow sockets from loopback against a local job's
progress endpoint must not make a healthy job fail as stalled. Real sockets, a real `torchjob run`
of a job with `progressDeadlineSeconds: 6` whose replica reports through `torchjob.report`."""

from __future__ import annotations

import http.client
import socket
import threading
import time
import urllib.parse
from pathlib import Path

import pytest

from tests.jobs import job_data
from tests.local.conftest import PROGRAMS, Torchjob, state_of, write_job

pytestmark = pytest.mark.e2e
FLOOD_S = 15.0
SLOW_SOCKETS = 300
BOGUS_REQUESTS = 1200


def _slow_sockets(port: int, path: str, stop: threading.Event) -> None:
    """SLOW_SOCKETS connections opened over the flood, kept open as long as the server lets them:
    half trickle their headers a byte at a time, half send whole headers with a made-up token and a
    large Content-Length and then trickle the body."""
    held: list[socket.socket] = []
    gap = FLOOD_S / 2 / SLOW_SOCKETS
    for i in range(SLOW_SOCKETS):
        if stop.is_set():
            break
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=1)
            s.setblocking(False)
            head = f"POST {path} HTTP/1.1\r\nHost: x\r\n"
            if i % 2:
                head += f"Authorization: Bearer tj1.master-0.0.{i:064x}\r\nContent-Length: 60000\r\n\r\n"
            s.send(head.encode())
            held.append(s)
        except OSError:
            pass
        time.sleep(gap)
    while not stop.wait(0.5):
        for s in list(held):
            try:
                s.send(b"X")
            except OSError:
                held.remove(s)
                s.close()
                try:  # cut: open another, as a flood does
                    n = socket.create_connection(("127.0.0.1", port), timeout=1)
                    n.setblocking(False)
                    n.send(f"POST {path} HTTP/1.1\r\n".encode())
                    held.append(n)
                except OSError:
                    pass
    for s in held:
        s.close()


def _bogus_requests(port: int, path: str, stop: threading.Event, count: int, answers: list[int]) -> None:
    gap = FLOOD_S / count
    for i in range(count):
        if stop.is_set():
            return
        start = time.monotonic()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        try:
            conn.request("POST", path, b'{"step": 1}', {"Authorization": f"Bearer tj1.master-0.0.{i:064x}"})
            answers.append(conn.getresponse().status)
        except (OSError, http.client.HTTPException):
            answers.append(0)
        finally:
            conn.close()
        time.sleep(max(0.0, gap - (time.monotonic() - start)))


def test_a_flood_of_made_up_tokens_and_slow_sockets_does_not_stall_a_healthy_local_job(
        torchjob: Torchjob, tmp_path: Path) -> None:
    url_file = tmp_path / "url"
    data = job_data("flooded", workers=0, command=["python", str(PROGRAMS / "report_slowly.py"), "--seconds",
                                                   str(FLOOD_S + 2), "--url-file", str(url_file)],
                    run_policy={"progressDeadlineSeconds": 6})
    proc = torchjob.popen("run", str(write_job(tmp_path / "job.yaml", data)))
    stop = threading.Event()
    threads: list[threading.Thread] = []
    answers: list[int] = []
    try:
        end = time.monotonic() + 60
        while not url_file.exists():
            assert proc.poll() is None and time.monotonic() < end, proc.communicate()
            time.sleep(0.1)
        url = urllib.parse.urlsplit(url_file.read_text())
        port, path = url.port or 80, url.path
        threads = [threading.Thread(target=_slow_sockets, args=(port, path, stop), daemon=True)]
        threads += [threading.Thread(target=_bogus_requests, args=(port, path, stop, BOGUS_REQUESTS // 4, answers),
                                     daemon=True) for _ in range(4)]
        for t in threads:
            t.start()
        _, err = proc.communicate(timeout=FLOOD_S + 60)
    finally:
        stop.set()
        if proc.poll() is None:
            proc.kill()
        for t in threads:
            t.join(5)
    assert proc.returncode == 0, err
    assert len(answers) > BOGUS_REQUESTS // 2 and 403 in answers, answers[:20]  # the flood did reach it
    desc = torchjob.describe("flooded")
    assert state_of(desc) == "Succeeded" and not any(e["reason"] == "Stalled" for e in desc["events"]), desc["events"]
    assert desc["status"]["progress"]["percent"] == 100.0
