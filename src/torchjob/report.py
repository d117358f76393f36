"""Report a replica's training progress: one line in the training loop, standard library only.

    from torchjob.report import report

    for step in range(steps):
        loss = train_one_step()
        report(step=step + 1, total=steps, loss=loss.item(), lr=0.01)

Under torchjob (`torchjob run`, or the operator on Kubernetes) this shows as the job's progress
bar, percent, ETA and metrics, and with `runPolicy.progressDeadlineSeconds` a replica that stops
reporting is a stall. Anywhere else (no endpoint in the environment) `report` does nothing.

It is safe to call on every step: it only notes the latest values, and a background thread sends
them at most once a second (TORCHJOB_PROGRESS_INTERVAL) and only when there is something new, so
a rank stuck in a collective stops reporting. The first FAST_REPORTS go at up to 20 a second (the
job's sustained rate), so that a job of a few seconds still has a curve of many points. It never
raises and never blocks the loop; the last values are sent when the process exits.

The endpoint is found through Kubeflow Trainer's variables, KUBEFLOW_TRAINER_SERVER_URL,
KUBEFLOW_TRAINER_SERVER_CA_CERT and KUBEFLOW_TRAINER_SERVER_TOKEN (a file, read again for every
request: it rotates), and each body carries both torchjob's fields (step, total, metrics) and
Trainer's `trainerStatus`, so the same script reports to a Kubeflow Trainer (v2.2+, TrainJobStatus
gate) as well. This file needs nothing but the standard library: copy it into an image that does
not have torchjob.

`stopping()` tells the loop that the replica is about to be stopped with a grace period (its pod
deleted or evicted, a node drained, `torchjob suspend`): the notice is SIGTERM, and the loop saves a
checkpoint and exits with 143 before the grace ends:

    from torchjob.report import stopping

    for step in range(start, steps):
        train_one_step()
        if stopping():
            save(step + 1)
            sys.exit(143)
"""

from __future__ import annotations

import atexit
import http.client
import json
import os
import signal
import ssl
import sys
import threading
import time
import urllib.parse
from collections import deque
from datetime import datetime, timezone
from typing import Any

__all__ = ["Reporter", "report", "stopping"]

URL_ENV = "KUBEFLOW_TRAINER_SERVER_URL"
CA_ENV = "KUBEFLOW_TRAINER_SERVER_CA_CERT"
TOKEN_ENV = "KUBEFLOW_TRAINER_SERVER_TOKEN"
INTERVAL_ENV = "TORCHJOB_PROGRESS_INTERVAL"


def _rank() -> int | None:
    """This process's rank where its replica has several (torchrun's workers: LOCAL_WORLD_SIZE > 1), so that
    a straggler is named by rank, not by the node's workers together; None where the replica is one rank."""
    try:
        return int(os.environ["RANK"]) if int(os.environ.get("LOCAL_WORLD_SIZE", "1")) > 1 else None
    except (KeyError, ValueError):
        return None
FAST_REPORTS, FAST_INTERVAL = 100, 0.05  # a process's first reports, and the least time between them


def _value(v: Any) -> Any:
    if isinstance(v, (bool, int, str)):
        return v
    try:
        return float(v)  # a torch or numpy scalar
    except (TypeError, ValueError):
        return str(v)[:64]


class Reporter:
    """Sends the latest report to the endpoint from a background thread."""

    def __init__(self, url: str | None = None, token_file: str | None = None, ca_file: str | None = None,
                 interval: float | None = None) -> None:
        self.url = url if url is not None else os.environ.get(URL_ENV, "")
        self.token_file = token_file if token_file is not None else os.environ.get(TOKEN_ENV, "")
        self.ca_file = ca_file if ca_file is not None else os.environ.get(CA_ENV, "")
        self.interval = interval if interval is not None else float(os.environ.get(INTERVAL_ENV, "") or 1.0)
        self.sent = 0
        self.refused = 0
        # The latest values: a deque of one, whose append and popleft are atomic (no lock in report()).
        self._pending: deque[tuple[int | None, int | None, dict[str, Any]]] = deque(maxlen=1)
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._told: set[int] = set()
        self._retry: tuple[int | None, int | None, dict[str, Any]] | None = None  # refused for now (429)
        self._conn: http.client.HTTPConnection | None = None
        self._path = ""

    @property
    def enabled(self) -> bool:
        return bool(self.url)

    def report(self, step: int | None = None, total: int | None = None, **metrics: Any) -> None:
        # As little as possible here, on the training loop's time: keep the values (converted, a
        # tensor's .item() included, by the sender thread), wake it if it sleeps.
        if not self.url:
            return
        self._pending.append((step, total, metrics))
        if self._thread is None:
            self._start()
        if not self._wake.is_set():
            self._wake.set()

    def _start(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="torchjob-report", daemon=True)
                self._thread.start()
                atexit.register(self.flush)

    def _pop(self) -> tuple[int | None, int | None, dict[str, Any]] | None:
        """The latest values, else those refused for now (newer values make them moot). Under the lock."""
        values, self._retry = self._retry, None
        try:
            return self._pending.popleft()
        except IndexError:
            return values

    @staticmethod
    def _body(values: tuple[int | None, int | None, dict[str, Any]]) -> dict[str, Any]:
        step, total, metrics = values
        body: dict[str, Any] = {"metrics": {k: _value(v) for k, v in metrics.items()}}
        if step is not None:
            body["step"] = int(step)
        if total is not None:
            body["total"] = int(total)
        rank = _rank()
        if rank is not None:
            body["rank"] = rank
        return body

    def flush(self, timeout: float = 2.0) -> None:
        """Send what is pending now (at exit: the last step makes it, after one wait if the job's rate
        limit asks for one that fits in `timeout`)."""
        with self._lock:
            values = self._pop()
            if values is None:
                return
            delay = self._send(self._body(values), timeout)
            if 0 < delay <= timeout:
                time.sleep(delay)
                self._send(self._body(values), timeout)

    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            with self._lock:  # not at once with flush (one connection)
                values = self._pop()
                delay = self._send(self._body(values), 5.0) if values is not None else 0.0
                if delay > 0:  # refused for now: sent again after the wait, unless newer values come
                    self._retry = values
            if values is not None:
                gap = min(self.interval, FAST_INTERVAL) if self.sent < FAST_REPORTS else self.interval
                time.sleep(max(gap, delay))
                if self._retry is not None:
                    self._wake.set()

    def _trainer_status(self, body: dict[str, Any]) -> dict[str, Any]:
        status: dict[str, Any] = {"lastUpdatedTime": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
        if body.get("total") and body.get("step") is not None:
            status["progressPercentage"] = max(0, min(100, int(100 * body["step"] / body["total"])))
        status["metrics"] = [{"name": k[:64], "value": (f"{v:.6g}" if isinstance(v, float) else str(v))[:64]}
                             for k, v in body["metrics"].items()]
        return status

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        """One kept-alive connection (far less work than a new one per report, on the GIL too)."""
        if self._conn is None:
            parts = urllib.parse.urlsplit(self.url)
            if parts.scheme == "https":
                ctx = ssl.create_default_context(cafile=self.ca_file or None)
                self._conn = http.client.HTTPSConnection(parts.hostname or "", parts.port, timeout=timeout,
                                                         context=ctx)
            else:
                self._conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=timeout)
            self._path = parts.path + (f"?{parts.query}" if parts.query else "")
        return self._conn

    def _send(self, body: dict[str, Any], timeout: float) -> float:
        """Post one report; returns how long the server asked to wait before the next."""
        data = json.dumps({**body, "trainerStatus": self._trainer_status(body)}).encode()
        headers = {"Content-Type": "application/json"}
        try:
            if self.token_file:
                with open(self.token_file) as f:
                    headers["Authorization"] = f"Bearer {f.read().strip()}"
            fresh = self._conn is None
            conn = self._connection(timeout)
            conn.timeout = timeout
            try:
                conn.request("POST", self._path, body=data, headers=headers)
                resp = conn.getresponse()
            except (http.client.HTTPException, ConnectionError):
                if fresh:
                    raise
                self._close()  # the server closed the kept-alive connection meanwhile: once more, anew
                conn = self._connection(timeout)
                conn.request("POST", self._path, body=data, headers=headers)
                resp = conn.getresponse()
            text = resp.read()
            if resp.getheader("Connection", "").lower() == "close":
                self._close()
            if resp.status == 200:
                self.sent += 1
                return 0.0
            self.refused += 1
            if resp.status == 429:
                return float(resp.getheader("Retry-After") or 1)
            self._tell(resp.status, f"{resp.status} {text[:300].decode('utf-8', 'replace')}")
        except Exception as e:  # never the training loop's problem
            self._close()
            self.refused += 1
            self._tell(0, f"{type(e).__name__}: {e}")
        return 0.0

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _tell(self, code: int, text: str) -> None:
        if code not in self._told:  # once per kind of failure, not once per step
            self._told.add(code)
            print(f"torchjob.report: a progress report was not taken ({text})", file=sys.stderr, flush=True)


_default: Reporter | None = None


def report(step: int | None = None, total: int | None = None, **metrics: Any) -> None:
    """Report this replica's progress: the step it finished, the total (if known) and named metrics
    (numbers or short strings). Cheap enough for every step; does nothing outside torchjob."""
    global _default
    if _default is None:
        _default = Reporter()
    _default.report(step, total, **metrics)


# --- the notice to stop ---
# SIGTERM is the notice everywhere: the kubelet sends it to a container's PID 1 when its pod is
# deleted or evicted, torchrun's agent passes it on to its workers, and the local runtime sends it to
# the replica's process group. The handler is installed by the first call of stopping(), not at
# import: a script that imports report() but never asks whether it is stopping keeps SIGTERM's
# default (it ends at once, 143) instead of running on, deaf, until the grace's SIGKILL.
_notice = threading.Event()
_previous: Any = None
_installed = False


def _on_sigterm(signum: int, frame: Any) -> None:
    _notice.set()
    if callable(_previous):  # the script's own handler still runs
        _previous(signum, frame)


def stopping() -> bool:
    """True once this process has been told to stop (SIGTERM): save a checkpoint and exit (143)
    before the grace period ends. The first call takes SIGTERM over (a handler the script had set
    runs too); before it, SIGTERM ends the process as usual. Make the first call from the main
    thread (the training loop), where Python lets a signal handler be set."""
    global _installed, _previous
    if not _installed:
        _installed = True
        try:
            previous = signal.getsignal(signal.SIGTERM)
            signal.signal(signal.SIGTERM, _on_sigterm)
            _previous = previous
        except ValueError:  # not the main thread: the default stays, the process ends at the notice
            print("torchjob.report: stopping() was first called outside the main thread; SIGTERM keeps its "
                  "default (the process ends at once)", file=sys.stderr, flush=True)
    return _notice.is_set()
