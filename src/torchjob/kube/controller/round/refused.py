"""A pod the API server refuses: for good (core.refusals.judge_create decides), a fact of the job
for its next round (PodRefused); else the error as it came, retried with a backoff."""

from __future__ import annotations

from collections.abc import Sequence

from lightkube.core.exceptions import ApiError

from torchjob.api.model import TorchJob
from torchjob.core.policies.refusals import judge_create
from torchjob.core.round.world import Refusal
from torchjob.kube.machinery.client import api_message, status_code


class PodRefused(Exception):
    """The API server refused one of the job's pods for good."""

    def __init__(self, refusal: Refusal, pod: str = "") -> None:
        super().__init__(refusal.message)
        self.refusal, self.pod = refusal, pod


def refusal_of(e: ApiError, job: TorchJob, rtype: str, pod: str) -> Exception:
    """What a failed create of pod `pod` raises: PodRefused when retrying cannot cure it; else `e`
    (a quota can pass: retried with a backoff)."""
    refused = judge_create(status_code(e), api_message(e), job, rtype, pod)
    return e if refused is None else PodRefused(refused, pod)


def raise_first(done: Sequence[object]) -> None:
    """After the job's pods were asked for at once: a refusal for good first, the first in the plan's
    order (the master's before a worker's) whichever answer came first, so that the job says the same
    thing every time, naming the other pods refused; else the first error; else nothing."""
    refused = [e for e in done if isinstance(e, PodRefused)]
    if refused:
        first, others = refused[0].refusal, [e.pod for e in refused[1:]]
        if others:
            first = Refusal(first.reason, f"{first.message} (refused too: {', '.join(others)}; their templates "
                                          "may need the same)")
        raise PodRefused(first, refused[0].pod)
    for error in done:
        if isinstance(error, BaseException):
            raise error
