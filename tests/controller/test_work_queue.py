"""The operator's work queue (kube/machinery/queue.py): a key rested after its round is queued again only once
its rest is over, however often its pods' events add it meanwhile (a big job's rounds paced by its size:
controller.REST_PER_POD_S); a key not rested is queued at once, and a forgotten one keeps no rest."""

from __future__ import annotations

import asyncio
import time

from tests.controller.test_sequencing import run
from torchjob.kube.controller.process.controller import REST_PER_POD_S
from torchjob.kube.machinery.queue import WorkQueue

KEY = ("team", "big")


def test_a_rested_key_added_again_is_queued_once_its_rest_is_over() -> None:
    async def scenario() -> None:
        queue = WorkQueue("test")
        queue.add(KEY)
        assert await queue.get() == KEY
        queue.rest(KEY, 0.3)
        queue.done(KEY)
        rested = time.monotonic()
        for _ in range(5):  # its pods' events
            queue.add(KEY)
        assert len(queue) == 0
        assert await asyncio.wait_for(queue.get(), 2) == KEY
        assert time.monotonic() - rested >= 0.29
        queue.done(KEY)
        queue.add(KEY)  # the rest is over: at once
        assert len(queue) == 1

    run(scenario)


def test_a_key_added_while_processing_comes_back_after_its_rest_and_a_forgotten_key_keeps_none() -> None:
    async def scenario() -> None:
        queue = WorkQueue("test")
        queue.add(KEY)
        await queue.get()
        queue.add(KEY)  # an event during the round
        queue.rest(KEY, 0.2)
        queue.done(KEY)
        assert len(queue) == 0
        t = time.monotonic()
        assert await asyncio.wait_for(queue.get(), 2) == KEY and time.monotonic() - t >= 0.15
        queue.rest(KEY, 60)
        queue.done(KEY)
        queue.forget(KEY)  # its job deleted
        queue.add(KEY)
        assert len(queue) == 1

    run(scenario)


def test_a_big_job_rests_a_fifth_of_a_second_at_4096_pods() -> None:
    assert 0.1 <= REST_PER_POD_S * 4096 <= 0.3 and REST_PER_POD_S * 4 < 0.001  # a small job: no rest to notice
