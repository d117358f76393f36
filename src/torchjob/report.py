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
a rank stuck in a collective stops reporting. It never raises and never blocks the loop; the last
values are sent when the process exits.

The endpoint is found through Kubeflow Trainer's variables, KUBEFLOW_TRAINER_SERVER_URL,
KUBEFLOW_TRAINER_SERVER_CA_CERT and KUBEFLOW_TRAINER_SERVER_TOKEN (a file, read again for every
request: it rotates), and each body carries both torchjob's fields (step, total, metrics) and
Trainer's `trainerStatus`, so the same script reports to a Kubeflow Trainer (v2.2+, TrainJobStatus
gate) as well. This file needs nothing but the standard library: copy it into an image that does
not have torchjob.
"""

from __future__ import annotations

import atexit
import json
import os
import ssl
import sys
import threading
import time
import urllib.error
import urllib.request
from datetime import datetime, timezone
from typing import Any

__all__ = ["Reporter", "report"]

URL_ENV = "KUBEFLOW_TRAINER_SERVER_URL"
CA_ENV = "KUBEFLOW_TRAINER_SERVER_CA_CERT"
TOKEN_ENV = "KUBEFLOW_TRAINER_SERVER_TOKEN"
INTERVAL_ENV = "TORCHJOB_PROGRESS_INTERVAL"


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
        self._pending: dict[str, Any] | None = None
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._told: set[int] = set()
        self._context: ssl.SSLContext | None = None

    @property
    def enabled(self) -> bool:
        return bool(self.url)

    def report(self, step: int | None = None, total: int | None = None, **metrics: Any) -> None:
        if not self.url:
            return
        body: dict[str, Any] = {"metrics": {k: _value(v) for k, v in metrics.items()}}
        if step is not None:
            body["step"] = int(step)
        if total is not None:
            body["total"] = int(total)
        with self._lock:
            self._pending = body
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="torchjob-report", daemon=True)
                self._thread.start()
                atexit.register(self.flush)
        self._wake.set()

    def flush(self, timeout: float = 2.0) -> None:
        """Send what is pending now (at exit: the last step makes it)."""
        with self._lock:
            body, self._pending = self._pending, None
        if body is not None:
            self._send(body, timeout)

    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            with self._lock:
                body, self._pending = self._pending, None
            if body is None:
                continue
            delay = self._send(body, 5.0)
            time.sleep(max(self.interval, delay))

    def _trainer_status(self, body: dict[str, Any]) -> dict[str, Any]:
        status: dict[str, Any] = {"lastUpdatedTime": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
        if body.get("total") and body.get("step") is not None:
            status["progressPercentage"] = max(0, min(100, int(100 * body["step"] / body["total"])))
        status["metrics"] = [{"name": k[:64], "value": (f"{v:.6g}" if isinstance(v, float) else str(v))[:64]}
                             for k, v in body["metrics"].items()]
        return status

    def _send(self, body: dict[str, Any], timeout: float) -> float:
        """Post one report; returns how long the server asked to wait before the next."""
        data = json.dumps({**body, "trainerStatus": self._trainer_status(body)}).encode()
        headers = {"Content-Type": "application/json"}
        try:
            if self.token_file:
                with open(self.token_file) as f:
                    headers["Authorization"] = f"Bearer {f.read().strip()}"
            if self.url.startswith("https:") and self._context is None:
                self._context = ssl.create_default_context(cafile=self.ca_file or None)
            req = urllib.request.Request(self.url, data=data, headers=headers, method="POST")
            with urllib.request.urlopen(req, timeout=timeout, context=self._context) as resp:
                resp.read()
            self.sent += 1
            return 0.0
        except urllib.error.HTTPError as e:
            self.refused += 1
            if e.code == 429:
                return float(e.headers.get("Retry-After") or 1)
            self._tell(e.code, f"{e.code} {e.read()[:300].decode('utf-8', 'replace')}")
        except Exception as e:  # never the training loop's problem
            self.refused += 1
            self._tell(0, f"{type(e).__name__}: {e}")
        return 0.0

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
