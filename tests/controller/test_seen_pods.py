"""A big job's round reads again only the pods that changed since its last round
(kube/controller/pods/seen_pods.py): a job of 4,096 pods paid every pod's unpack and observation on
every pod event (bench/operator_scale.py --job-pods; docs/explanation/performance.md). What a round
sees from what it kept is what it would see reading every pod afresh."""

from __future__ import annotations

import random
from typing import Any

import pytest

from tests.controller.fakeapi import FakeApi
from tests.controller.test_sequencing import KEY, NS, one_round, run, status_of, synced, torchjob
from torchjob.api.model import TorchJob
from torchjob.core.shape.topology import replicas
from torchjob.kube.controller.pods import pod_index
from torchjob.kube.controller.pods.pod_index import PodIndex
from torchjob.kube.controller.pods.seen_pods import KEEP_FROM
from torchjob.kube.controller.process.controller import cached_pod
from torchjob.kube.controller.round.memory import JobMemory
from torchjob.kube.controller.round.observe import observe, world
from torchjob.kube.machinery.informer import Packed
from torchjob.kube.objects.front.inplace import NO_SEAL
from torchjob.kube.objects.labels import pod_name
from torchjob.kube.objects.labels.ownership import owner_reference
from torchjob.kube.objects.workload import pods as pod_objects
from torchjob.kube.served.kinds import TORCHJOB


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The pods a round read again (unpacked and observed), by name, in all rounds."""
    names: list[str] = []
    see = pod_index.see

    def counting_see(job: TorchJob, pod: dict[str, Any], *args: Any) -> Any:
        names.append(pod["metadata"]["name"])
        return see(job, pod, *args)

    monkeypatch.setattr(pod_index, "see", counting_see)
    return names


def test_a_round_after_one_pod_event_of_a_big_job_reads_that_pod_alone(reads: list[str]) -> None:
    async def scenario() -> None:
        api = FakeApi()
        api.put(torchjob(workers=KEEP_FROM + 63))  # 128 pods
        async with synced(api) as c:
            await one_round(api, c)
            pods = api.named("Pod", NS)
            assert len(pods) == KEEP_FROM + 64
            for pod in pods:
                api.kubelet(pod, NS, "Running")
            await one_round(api, c)
            assert status_of(api)["replicaStatuses"]["Worker"]["active"] == KEEP_FROM + 63
            reads.clear()
            await one_round(api, c)  # nothing changed: nothing read
            assert reads == []
            await api.delete("Pod", "demo-worker-7", NS)  # someone's kubectl delete pod: made again
            await one_round(api, c)
            assert reads == [] and "demo-worker-7" not in c.index.kept[KEY].own  # a pod gone is dropped, not read
            assert "demo-worker-7" in api.named("Pod", NS)
            api.kubelet("demo-worker-5", NS, "Failed", exit_code=1)
            await one_round(api, c)
            assert sorted(reads) == ["demo-worker-5", "demo-worker-7"]  # the one failed, the one made again: 128 before
            assert status_of(api)["replicaStatuses"]["Worker"]["failed"] == 1

    run(scenario)


def test_a_small_job_is_read_whole_each_round_and_nothing_is_kept(reads: list[str]) -> None:
    async def scenario() -> None:
        api = FakeApi()
        api.put(torchjob(workers=3))
        async with synced(api) as c:
            await one_round(api, c)
            for pod in api.named("Pod", NS):
                api.kubelet(pod, NS, "Running")
            await one_round(api, c)
            reads.clear()
            await one_round(api, c)
            assert sorted(reads) == api.named("Pod", NS) and KEY not in c.index.kept

    run(scenario)


def test_what_a_round_kept_sees_what_reading_every_pod_afresh_sees() -> None:
    """60 random pod events (a phase, an exit, a deletion started, a pod gone or made again, another
    job's pod of its name, someone's pod labelled as its): after each, the kept view and a fresh read
    give core the same World and the round the same pods to act on."""
    raw = torchjob(workers=KEEP_FROM + 9, uid="demo-uid")
    job = TORCHJOB.read(raw, [])
    cache, rv, rng = Packed(), iter(range(1, 10**6)), random.Random(46)
    kept = PodIndex(cache)
    rids = {pod_name(job, r): r for r in replicas(job)}
    names = sorted(rids)

    def put(pod: dict[str, Any]) -> None:
        pod["metadata"]["resourceVersion"] = str(next(rv))
        cache[(NS, pod["metadata"]["name"])] = pod
        kept.live.setdefault(KEY, set()).add(pod["metadata"]["name"])
        kept.changed(KEY, pod["metadata"]["name"])

    def made(name: str) -> dict[str, Any]:
        return cached_pod(pod_objects.pod(job, rids[name], 0) | {"status": {"phase": "Pending"}})

    for name in names:
        put(made(name))
    for _ in range(60):
        name, what = rng.choice(names), rng.choice(["phase", "exit", "deleting", "gone", "stale", "foreign"])
        pod = cache.get((NS, name)) or made(name)
        if what == "phase":
            pod["status"] = {"phase": rng.choice(["Pending", "Running"])}
        elif what == "exit":
            pod["status"] = {"phase": "Failed", "containerStatuses": [{"name": "pytorch", "state": {"terminated": {
                "exitCode": rng.choice([1, 137]), "reason": "Error", "finishedAt": "2026-01-01T00:00:01Z"}}}]}
        elif what == "deleting":
            pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:02Z"
        elif what == "stale":  # an earlier job's, of the same name
            pod["metadata"]["ownerReferences"] = [{**owner_reference(job), "uid": "earlier-uid"}]
        elif what == "foreign":
            pod["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "x",
                                                   "uid": "x-uid", "controller": True}]
        if what == "gone":
            cache.pop((NS, name), None)
            kept.live[KEY].discard(name)
            kept.changed(KEY, name)
        else:
            put(pod)
        fresh = PodIndex(cache, live={KEY: set(kept.live[KEY])})
        ours, theirs = (i.split(raw, job, KEY, JobMemory(), NO_SEAL) for i in (kept, fresh))
        assert (KEY in kept.kept) == (len(kept.live[KEY]) >= KEEP_FROM)  # kept while it has 64 pods or more
        assert world(ours.observed(job, NO_SEAL)) == world(theirs.observed(job, NO_SEAL)) == observe(
            job, [cache[(NS, n)] for n in theirs.own])
        assert sorted(ours.own) == sorted(theirs.own)
        assert all(ours.pod(n) == theirs.pod(n) == cache[(NS, n)] for n in ours.own)
        for got, want in ((ours.going(), theirs.going()), (ours.stale, theirs.stale), (ours.foreign, theirs.foreign)):
            assert sorted(got, key=by_name) == sorted(want, key=by_name)


def by_name(pod: dict[str, Any]) -> str:
    return str(pod["metadata"]["name"])


def test_a_big_jobs_status_is_parsed_once_per_change_of_the_job(monkeypatch: pytest.MonkeyPatch) -> None:
    """A status of a state per replica, parsed each round, was a sixth of the operator's CPU through a 4,096-pod
    gang restart: a big job's is kept and read again only when the stored job changed (its resourceVersion)."""
    parsed: list[int] = []
    read = JobMemory.status

    def counting(self: JobMemory, raw: dict[str, Any], read_status: Any, keep_from: int) -> Any:
        return read(self, raw, lambda r: parsed.append(1) or read_status(r), keep_from)  # type: ignore[func-returns-value]

    monkeypatch.setattr(JobMemory, "status", counting)

    async def scenario() -> None:
        api = FakeApi()
        api.put(torchjob(workers=KEEP_FROM + 63))
        async with synced(api) as c:
            await one_round(api, c)
            for pod in api.named("Pod", NS):
                api.kubelet(pod, NS, "Running")
            await one_round(api, c)
            await one_round(api, c)
            parsed.clear()
            calls = len(api.calls)
            api.kubelet("demo-worker-3", NS, "Running")  # a pod event: the job itself unchanged
            await one_round(api, c)
            await one_round(api, c)
            assert parsed == []
            api.kubelet("demo-worker-3", NS, "Failed", exit_code=1)  # the rounds write the job's status
            await one_round(api, c)
            await one_round(api, c)
            writes = [x for x in api.calls[calls:] if x.verb == "patch_status"]
            await one_round(api, c)  # reads the job as the last write left it
            assert len(parsed) == len(writes) > 0  # read again once per change of the job

    run(scenario)
