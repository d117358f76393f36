"""Restart policies, exit-code classes, restart backoff, deadlines and TTL. Pure.

Exit codes follow the container convention: a process killed by signal N exits 128+N
(130 = SIGINT, 137 = SIGKILL, 143 = SIGTERM). Under `ExitCode` every code >= 128 is retryable
(a signal, or 138, which a program can use to ask for a restart), every other non-zero code
fails the job at once, as in Kubeflow (`IsRetryableExitCode`) and T9k.
"""

from __future__ import annotations

import enum
import signal
from datetime import datetime, timedelta

from torchjob.api.duration import parse_duration as parse_duration  # re-exported for core
from torchjob.api.model import RestartPolicy

RETRYABLE_MIN = 128
BACKOFF_BASE_S = 1.0
BACKOFF_MAX_S = 30.0


class Exit(enum.Enum):
    SUCCESS = "success"
    RETRYABLE = "retryable"
    PERMANENT = "permanent"


def classify(exit_code: int) -> Exit:
    if exit_code == 0:
        return Exit.SUCCESS
    return Exit.RETRYABLE if exit_code >= RETRYABLE_MIN else Exit.PERMANENT


def exit_code_of(returncode: int) -> int:
    """A process return code (negative = killed by that signal) as a container exit code."""
    return 128 - returncode if returncode < 0 else returncode


def signal_name(exit_code: int) -> str | None:
    """SIGKILL for 137, None for codes that are not 128+signal."""
    if exit_code <= RETRYABLE_MIN or exit_code >= RETRYABLE_MIN + 65:
        return None
    try:
        return signal.Signals(exit_code - RETRYABLE_MIN).name
    except ValueError:
        return None


def describe_exit(exit_code: int) -> str:
    sig = signal_name(exit_code)
    return f"exit code {exit_code} ({sig})" if sig else f"exit code {exit_code}"


def should_restart(policy: RestartPolicy, exit_code: int) -> bool:
    """Whether a replica that exited with `exit_code` is started again (backoff aside)."""
    if policy == "Always":
        return True
    if exit_code == 0:
        return False
    if policy == "OnFailure":
        return True
    if policy == "ExitCode":
        return classify(exit_code) is Exit.RETRYABLE
    return False


def restart_delay(restarts_so_far: int) -> float:
    """Seconds before restart number `restarts_so_far + 1` of one replica: the first is
    immediate, then 1, 2, 4, ... capped at 30 s, like the kubelet's crash-loop backoff but
    shorter, so that a crash loop cannot spin the machine."""
    if restarts_so_far <= 0:
        return 0.0
    return float(min(BACKOFF_BASE_S * 2 ** min(restarts_so_far - 1, 16), BACKOFF_MAX_S))


def backoff_exhausted(backoff_limit: int | None, restarts_done: int) -> bool:
    """`backoffLimit` counts every restart the runtime performs (unset: no limit)."""
    return backoff_limit is not None and restarts_done >= backoff_limit


def deadline_at(start: datetime | None, active_deadline_s: int | None) -> datetime | None:
    if start is None or active_deadline_s is None:
        return None
    return start + timedelta(seconds=active_deadline_s)


def ttl_expires_at(completion: datetime | None, ttl_s: int | None) -> datetime | None:
    if completion is None or ttl_s is None:
        return None
    return completion + timedelta(seconds=ttl_s)


