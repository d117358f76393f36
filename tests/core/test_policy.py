"""Exit classes, restart decisions, backoff, deadlines and TTL."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from torchjob.api.model import RestartPolicy
from torchjob.core.policies import policy
from torchjob.core.policies.policy import Exit

CODES = (0, 1, 2, 127, 128, 130, 137, 138, 143, 255)


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (0, Exit.SUCCESS),
        (1, Exit.PERMANENT),
        (2, Exit.PERMANENT),
        (127, Exit.PERMANENT),
        (128, Exit.RETRYABLE),
        (130, Exit.RETRYABLE),
        (137, Exit.RETRYABLE),
        (138, Exit.RETRYABLE),
        (143, Exit.RETRYABLE),
        (255, Exit.RETRYABLE),
    ],
)
def test_classify(code: int, expected: Exit) -> None:
    assert policy.classify(code) is expected


# policy -> the codes that are restarted (all others are not)
RESTARTED: dict[str, set[int]] = {
    "Never": set(),
    "Always": set(CODES),
    "OnFailure": set(CODES) - {0},
    "ExitCode": {128, 130, 137, 138, 143, 255},
}


@pytest.mark.parametrize("rpolicy", list(RESTARTED))
@pytest.mark.parametrize("code", CODES)
def test_should_restart(rpolicy: RestartPolicy, code: int) -> None:
    assert policy.should_restart(rpolicy, code) is (code in RESTARTED[rpolicy])


@pytest.mark.parametrize(
    ("restarts_so_far", "delay"),
    [(-1, 0.0), (0, 0.0), (1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (5, 16.0), (6, 30.0), (7, 30.0), (50, 30.0)],
)
def test_restart_delay(restarts_so_far: int, delay: float) -> None:
    assert policy.restart_delay(restarts_so_far) == delay


def test_restart_delay_stays_capped_for_huge_counts() -> None:
    assert policy.restart_delay(1100) == policy.BACKOFF_MAX_S


def test_restart_delay_is_monotonic_and_capped() -> None:
    delays = [policy.restart_delay(n) for n in range(0, 200)]
    assert delays == sorted(delays)
    assert max(delays) == policy.BACKOFF_MAX_S


@pytest.mark.parametrize(
    ("limit", "done", "exhausted"),
    [(None, 0, False), (None, 10_000, False), (0, 0, True), (1, 0, False), (1, 1, True), (2, 1, False),
     (2, 2, True), (2, 3, True)],
)
def test_backoff_exhausted(limit: int | None, done: int, exhausted: bool) -> None:
    assert policy.backoff_exhausted(limit, done) is exhausted


@pytest.mark.parametrize(("returncode", "code"), [(0, 0), (1, 1), (255, 255), (-9, 137), (-15, 143), (-2, 130)])
def test_exit_code_of(returncode: int, code: int) -> None:
    assert policy.exit_code_of(returncode) == code


@pytest.mark.parametrize(
    ("code", "name"),
    [(0, None), (1, None), (127, None), (128, None), (130, "SIGINT"), (137, "SIGKILL"), (138, "SIGUSR1"),
     (143, "SIGTERM"), (139, "SIGSEGV"), (134, "SIGABRT"), (255, None)],
)
def test_signal_name(code: int, name: str | None) -> None:
    assert policy.signal_name(code) == name


@pytest.mark.parametrize(
    ("code", "text"), [(1, "exit code 1"), (137, "exit code 137 (SIGKILL)"), (143, "exit code 143 (SIGTERM)")]
)
def test_describe_exit(code: int, text: str) -> None:
    assert policy.describe_exit(code) == text


START = datetime(2024, 1, 1, tzinfo=timezone.utc)


@pytest.mark.parametrize(
    ("start", "seconds", "expected"),
    [(None, 10, None), (START, None, None), (START, 10, START + timedelta(seconds=10))],
)
def test_deadline_at(start: datetime | None, seconds: int | None, expected: datetime | None) -> None:
    assert policy.deadline_at(start, seconds) == expected


@pytest.mark.parametrize(
    ("completion", "ttl", "expected"),
    [(None, 10, None), (START, None, None), (START, 0, START), (START, 60, START + timedelta(seconds=60))],
)
def test_ttl_expires_at(completion: datetime | None, ttl: int | None, expected: datetime | None) -> None:
    assert policy.ttl_expires_at(completion, ttl) == expected
