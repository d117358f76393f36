"""The informers' packed caches and the echoes of the operator's own writes
(kube/machinery/informer.py): what is cached reads back the same, and a write the operator made and
acted on is not a change when its watch event comes back, while anyone else's write still is; and a
job's memory (kube/controller/round/memory.py) is kept only while it holds something."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.controller.fakeapi import FakeApi
from tests.jobs import job_data
from torchjob.api.status import Reason
from torchjob.core.round.reconcile import Refusal
from torchjob.kube.controller.round.memory import JobMemory, Memories
from torchjob.kube.machinery.informer import Informer, Packed, only_status_changed, whole


def stored_job(name: str = "a") -> dict[str, Any]:
    data = job_data(name, workers=2, uid=f"{name}-uid")
    data["metadata"] |= {"namespace": "ns", "resourceVersion": "41", "generation": 1}
    data["status"] = {"conditions": [{"type": "Created", "status": "True", "message": "é ✓"}], "restartCount": 0}
    return data


def test_a_packed_object_reads_back_the_same_and_each_reader_gets_its_own_copy() -> None:
    cache = Packed()
    job = stored_job()
    cache[("ns", "a")] = job
    assert cache[("ns", "a")] == job and ("ns", "a") in cache and len(cache) == 1 and list(cache) == [("ns", "a")]
    assert cache.version(("ns", "a")) == 41 and cache.version(("ns", "b")) == 0
    mine = cache[("ns", "a")]
    mine["status"]["restartCount"] = 9
    assert cache[("ns", "a")]["status"]["restartCount"] == 0
    assert cache.get(("ns", "b")) is None and cache.pop(("ns", "a"))["metadata"]["name"] == "a" and not cache
    opaque = {**job, "metadata": {**job["metadata"], "resourceVersion": "not-a-number"}}
    cache[("ns", "a")] = opaque
    assert cache.version(("ns", "a")) == 0 and cache[("ns", "a")] == opaque
    small = {"metadata": {"name": "s", "namespace": "ns", "resourceVersion": "3"}}  # kept as JSON, not deflated
    cache[("ns", "s")] = small
    assert cache[("ns", "s")] == small and cache.version(("ns", "s")) == 3
    assert cache._blobs[("ns", "s")].startswith(b"3|{") and not cache._blobs[("ns", "a")].startswith(b"0|{")


def test_only_a_status_write_with_no_other_write_between_is_quiet() -> None:
    before = whole(stored_job())
    after = {**before, "status": {"state": "Running"},
             "metadata": {**before["metadata"], "resourceVersion": "42", "managedFields": [{"manager": "x"}]}}
    assert only_status_changed(before, after)
    relabelled = {**after, "metadata": {**after["metadata"], "labels": {"kueue.x-k8s.io/queue-name": "q"}}}
    respecced = {**after, "spec": {**after["spec"], "runPolicy": {"suspend": True}},
                 "metadata": {**after["metadata"], "generation": 2}}
    deleting = {**after, "metadata": {**after["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}}
    annotated = {**after, "metadata": {**after["metadata"], "annotations": {"someone/said": "so"}}}
    assert not any(only_status_changed(before, o) for o in (relabelled, respecced, deleting, annotated))


async def _settle(api: FakeApi) -> None:
    for _ in range(50):
        await asyncio.sleep(0)
        if not api.unseen():
            break
    await asyncio.sleep(0)


def test_the_echo_of_a_remembered_write_is_no_change_but_a_later_write_is() -> None:
    async def scenario() -> None:
        api = FakeApi()
        api.put(stored_job())
        seen: list[tuple[str, str]] = []
        informer = Informer(api, "TorchJob", "ns", lambda o: seen.append(
            (o["metadata"]["resourceVersion"], (o.get("status") or {}).get("state", ""))), transform=whole)
        task = asyncio.create_task(informer.run())
        await informer.synced.wait()
        await _settle(api)
        seen.clear()
        # A status write this process made and acts on: its echo calls nothing.
        quiet = await api.patch_status("a", "ns", {"state": "Created"})
        informer.remember(quiet, quiet=True)
        await _settle(api)
        assert seen == [] and informer.cache[("ns", "a")]["status"]["state"] == "Created"
        # One it did not act on (quiet=False, as the progress writer's): its echo is a change.
        loud = await api.patch_status("a", "ns", {"state": "Running"})
        informer.remember(loud)
        await _settle(api)
        # Someone else's write after a quiet one: a change.
        informer.remember(await api.patch_status("a", "ns", {"state": "Restarting"}), quiet=True)
        theirs = await api.patch_spec("a", "ns", {"runPolicy": {"suspend": True}})
        await _settle(api)
        task.cancel()
        assert seen == [(loud["metadata"]["resourceVersion"], "Running"),
                        (theirs["metadata"]["resourceVersion"], "Restarting")]

    asyncio.run(scenario())


def test_a_memory_that_holds_nothing_is_dropped_after_the_round_and_one_that_holds_a_fact_stays() -> None:
    memories = Memories()
    memories.of(("ns", "a"))
    memories.of(("ns", "b")).told.add("pod b-worker-0 is leaving")
    memories.of(("ns", "c")).learned = Refusal(Reason.INVALID_SPEC, "no")
    for key in [("ns", "a"), ("ns", "b"), ("ns", "c"), ("ns", "never")]:
        memories.settle(key)
    assert set(memories.jobs) == {("ns", "b"), ("ns", "c")}
    assert memories.of(("ns", "a")) == JobMemory()
