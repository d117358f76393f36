"""The local progress endpoint: the supervisor serves it on loopback for its one job.

Each replica attempt gets its own token, `tj1.<replica>.<attempt>.<hmac>`, signed with a secret
the supervisor draws per job: it authorizes only this job (another job's token, or a forged one,
is refused) and says which replica attempt reports, as a pod-bound service-account token does on
Kubernetes. The token is a file readable only by the user (KUBEFLOW_TRAINER_SERVER_TOKEN names it,
as Trainer's variable does). The endpoint is plain HTTP on 127.0.0.1; KUBEFLOW_TRAINER_SERVER_CA_CERT
names a CA bundle only because Trainer's clients load one (certifi's, or the system's).
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import importlib.util
import os
import secrets
import ssl
from collections.abc import Callable
from pathlib import Path

from torchjob.api.status import MetricHistory, Progress
from torchjob.api.validate import digits
from torchjob.local.store.files import private_dir
from torchjob.progress.book import Book
from torchjob.progress.server import TORCHJOBS, ProgressServer, Reporter, status_path
from torchjob.progress.stragglers import said

LOCAL_NAMESPACE = "default"
TOKEN_PREFIX = "tj1"


@functools.cache
def ca_bundle() -> str:
    """certifi's bundle, found without importing certifi where it is a file (its `where()` loads
    importlib.resources: 0.02-0.2 s on the way to a local job's first replica), else the system's."""
    spec = importlib.util.find_spec("certifi")
    if spec is None or not spec.origin:  # none, or a directory without its module (no `where()` either)
        return ssl.get_default_verify_paths().cafile or ""
    pem = Path(spec.origin).with_name("cacert.pem")
    if pem.is_file():
        return str(pem)
    import certifi  # type: ignore[import-not-found, unused-ignore]

    return str(certifi.where())


class LocalEndpoint:
    """Receives one job's reports; `on_report(replica, attempt, first)` runs in the server's thread."""

    def __init__(self, job: str, on_report: Callable[[str, int, bool], None],
                 history: MetricHistory | None = None) -> None:
        self.job = job
        self.on_report = on_report
        self.secret = secrets.token_bytes(32)
        self.reports = Book(saved=history)
        self.server = ProgressServer(("127.0.0.1", 0), self)
        self.server.max_per_source = None  # every replica reports from loopback

    def start(self) -> LocalEndpoint:
        self.server.start()
        return self

    def stop(self) -> None:
        self.server.stop()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.port}{status_path(LOCAL_NAMESPACE, self.job)}"

    def _sign(self, replica: str, attempt: int) -> str:
        msg = f"{LOCAL_NAMESPACE}/{self.job}/{replica}/{attempt}".encode()
        return hmac.new(self.secret, msg, hashlib.sha256).hexdigest()

    def token(self, replica: str, attempt: int) -> str:
        return f"{TOKEN_PREFIX}.{replica}.{attempt}.{self._sign(replica, attempt)}"

    def env(self, replica: str, attempt: int, attempt_dir: Path) -> dict[str, str]:
        """The variables a replica attempt reports with (Kubeflow Trainer's names)."""
        private_dir(attempt_dir)
        path = attempt_dir / "progress.token"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(self.token(replica, attempt))
        return {**self.shared_env(), "KUBEFLOW_TRAINER_SERVER_TOKEN": str(path)}

    def shared_env(self) -> dict[str, str]:
        """Those of the variables that are the same for every attempt (a warm spare starts with them)."""
        return {"KUBEFLOW_TRAINER_SERVER_URL": self.url, "KUBEFLOW_TRAINER_SERVER_CA_CERT": ca_bundle()}

    def progress(self, say: Callable[[str, str, str], None]) -> Progress | None:
        """The job's progress; each straggler named, or caught up, is said once by `say(type, reason, message)`."""
        for change in self.reports.news():
            say(*said(change))
        return self.reports.progress()

    # --- Receiver ---

    def authorize(self, namespace: str, job: str, credentials: str, plural: str = TORCHJOBS) -> Reporter | None:
        if namespace != LOCAL_NAMESPACE or job != self.job or plural != TORCHJOBS:  # a local job is a TorchJob
            return None
        parts = credentials.split(".")
        if len(parts) != 4 or parts[0] != TOKEN_PREFIX or not digits(parts[2]):
            return None
        replica, attempt = parts[1], int(parts[2])
        if not hmac.compare_digest(parts[3], self._sign(replica, attempt)):
            return None
        return Reporter(namespace, job, replica, attempt)

    def review_key(self, namespace: str, job: str, credentials: str, plural: str = TORCHJOBS) -> str | None:
        return None  # an HMAC: every token is checked at no cost, none is held back by another's refusals

    def book(self, reporter: Reporter) -> Book | None:
        return self.reports

    def received(self, reporter: Reporter, first: bool) -> None:
        self.on_report(reporter.replica, reporter.attempt, first)
