"""A stalled job's stacks on a cluster (kube/controller/pods/stall_stacks.py), sequenced against the recording fake API:
before core stops the stalled job, each running pod made with the stacks front is asked once (its annotation
torchjob.dev/stacks-request), the round does not wait for the answers (core waits, the job looked at again), and
once they are read from the pods' logs the root cause, the Stalled and StacksTaken events and status.keptStacks say
where each rank was. A job that opted out fails at once, nobody asked. Real pods: tests/e2e/test_progress_real.py."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.controller.fakeapi import FakeApi
from tests.controller.test_inplace_sequencing import link
from tests.controller.test_sequencing import KEY, NS, events, one_round, run, settled, status_of, torchjob
from tests.controller.test_tls_renewal import running_with
from torchjob.kube.controller.pods import stall_stacks
from torchjob.kube.objects.front import inplace
from torchjob.kube.objects.front import stacks as pod_stacks
from torchjob.progress.protocol import Report
from torchjob.progress.server import Reporter

MASTER, WORKER = "demo-master-0", "demo-worker-0"
SITE = "/opt/venv/lib/python3.11/site-packages"


def answer(rank: int, line: int) -> list[str]:
    """What a pod's stacks watcher writes to its log for a request (kube/inpod/torchjob_stacks.py)."""
    return ["step 5", "torchjob-stacks: begin request={request}",
            f"# torchjob stacks: rank={rank} pid=1 main=0x00007f0000000001",
            "Current thread 0x00007f0000000001 (most recent call first):",
            f'  File "{SITE}/torch/distributed/distributed_c10d.py", line 4181 in all_reduce',
            f'  File "{SITE}/torch/distributed/c10d_logger.py", line 83 in wrapper',
            f'  File "/opt/tests/ddp_progress.py", line {line} in <module>',
            "torchjob-stacks: end request={request}",
            "torchjob-stacks: answered request={request} processes=1 missing= stdlib=/usr/lib/python3.11"]


def stalled_job(**annotations: str) -> dict[str, Any]:
    data = torchjob(workers=1, command=["python", "/opt/tests/ddp_progress.py"],
                    run_policy={"progressDeadlineSeconds": 5})
    data["metadata"]["annotations"] = annotations
    return data


async def running_and_quiet(api: FakeApi, c: Any, books: Any) -> None:
    """The job's pods made and running; the master reported 10 s ago, and nothing since."""
    await one_round(api, c)
    for pod in (MASTER, WORKER):
        api.kubelet(pod, NS, "Running")
    book = books.open(Reporter(NS, "demo", "master-0", 0), {"torchjobs": c.caches()})
    book.record("master-0", 0, Report(step=5, total=30), datetime.now(UTC) - timedelta(seconds=10))


@asynccontextmanager
async def quiet_and_answering() -> AsyncIterator[tuple[FakeApi, Any, Any]]:
    """A stalled job's pods running, its master quiet, each pod's log with its answer: (api, controller, link)."""
    api = FakeApi()
    api.put(stalled_job())
    api.logs[(NS, MASTER, "pytorch")] = answer(0, 51)
    api.logs[(NS, WORKER, "pytorch")] = answer(1, 50)
    progress = link()
    async with running_with(api, progress) as c:
        await running_and_quiet(api, c, progress.books)
        await settled(api, c)
        yield api, c, progress


def test_a_stalled_jobs_stacks_are_taken_before_it_is_stopped_without_holding_the_round() -> None:
    async def scenario() -> None:
        async with quiet_and_answering() as (api, c, _):
            result = await c.reconciler.reconcile(KEY)  # not one_round: the stacks are taken in the background
            for _ in range(100):
                await asyncio.sleep(0)
            # asked, and not yet answered: not failed, looked at again soon
            asked = [call for call in api.calls if call.verb == "patch_annotations"]
            assert sorted(call.name for call in asked) == [MASTER, WORKER]
            requests = {call.body[pod_stacks.ANNOTATION_REQUEST] for call in asked}
            assert len(requests) == 1 and requests.pop().startswith("stall-")
            assert "failure" not in status_of(api) and not events(api, "Stalled")
            assert result.requeue_after is not None and result.requeue_after <= stall_stacks.POLL_S
            await asyncio.sleep(stall_stacks.POLL_S + 0.3)  # the logs read back, in the background
            await one_round(api, c)
            status = status_of(api)
            where = "rank 0 in <module> (ddp_progress.py:51); rank 1 in <module> (ddp_progress.py:50)"
            assert status["failure"]["message"] == (
                "master-0 sent no progress report for 5s (runPolicy.progressDeadlineSeconds); where the ranks "
                f"were: {where}: the job is stalled"), status["failure"]
            assert where in events(api, "Stalled")[0].body[2]
            assert [e.body[1] for e in events(api)][-3:] == ["StacksTaken", "Stalled", "ProgressDeadlineExceeded"]
            taken = events(api, "StacksTaken")
            assert len(taken) == 1 and where in taken[0].body[2] and "(2 process(es))" in taken[0].body[2]
            kept = status["keptStacks"]
            assert len(kept) == 1 and kept[0]["attempts"] == {"master-0": 0, "worker-0": 0}
            assert kept[0]["stalled"] == ["master-0"] and kept[0]["short"] == where
            assert "<module> (/opt/tests/ddp_progress.py:50)" in kept[0]["stacks"]
            await one_round(api, c)  # asked once: not again, said once
            assert len([call for call in api.calls if call.verb == "patch_annotations"]) == 2
            assert len(events(api, "StacksTaken")) == 1

    run(scenario)


def test_stacks_of_replicas_that_reported_again_before_core_acted_are_neither_said_nor_kept() -> None:
    """Taken, but the quiet replica reported again before a round acted on the stall (a restarted attempt slow to
    start, then going): no StacksTaken, no keptStacks; the next stall is asked again, for its own stacks."""
    async def scenario() -> None:
        async with quiet_and_answering() as (api, c, progress):
            await c.reconciler.reconcile(KEY)
            await asyncio.sleep(stall_stacks.POLL_S + 0.3)  # taken, in the background
            book = progress.books.open(Reporter(NS, "demo", "master-0", 0), {"torchjobs": c.caches()})
            book.record("master-0", 0, Report(step=6, total=30), datetime.now(UTC))
            await one_round(api, c)
            status = status_of(api)
            assert "failure" not in status and not status.get("keptStacks"), status
            assert not events(api, "StacksTaken") and not events(api, "Stalled")
            book.record("master-0", 0, Report(step=7, total=30), datetime.now(UTC) - timedelta(seconds=10))
            await settled(api, c)
            await c.reconciler.reconcile(KEY)  # quiet again: asked again
            for _ in range(100):
                await asyncio.sleep(0)
            assert len([call for call in api.calls if call.verb == "patch_annotations"]) == 4

    run(scenario)


def test_a_job_that_opted_out_is_stopped_at_once_and_no_pod_is_asked() -> None:
    async def scenario() -> None:
        api = FakeApi()
        api.put(stalled_job(**{pod_stacks.ANNOTATION: "false"}))
        progress = link()
        async with running_with(api, progress) as c:
            await running_and_quiet(api, c, progress.books)
            await one_round(api, c)
            assert status_of(api)["failure"]["reason"] == "ProgressDeadlineExceeded"
            assert not [call for call in api.calls if call.verb in ("patch_annotations", "log")]
            assert not status_of(api).get("keptStacks") and not events(api, "StacksTaken")

    run(scenario)


def test_the_fronts_source_is_in_the_namespace_before_the_pods_that_boot_it_and_not_for_a_job_that_opted_out() -> None:
    """The pods' command carries the front's hash (kube/objects/front/stacks.boot), the ConfigMap its source: made
    before the pods; a job that opted out has no front, and needs no ConfigMap of torchjob's programs."""
    async def scenario(annotations: dict[str, str], made: bool) -> None:
        api = FakeApi()
        api.put(stalled_job(**annotations))
        async with running_with(api, link()) as c:
            await one_round(api, c)
            writes = [str(w) for w in api.writes(("ConfigMap", "Pod"))]
            assert f"create Pod {MASTER}" in writes
            if made:
                data = api.objects[("ConfigMap", NS, inplace.CONFIGMAP)]["data"]
                assert data[pod_stacks.ENTRY] == pod_stacks.source()
                assert writes.index(f"create ConfigMap {inplace.CONFIGMAP}") < writes.index(f"create Pod {MASTER}")
                assert pod_stacks.container_of(api.objects[("Pod", NS, MASTER)]) == "pytorch"
            else:
                assert ("ConfigMap", NS, inplace.CONFIGMAP) not in api.objects

    run(lambda: scenario({}, True))
    run(lambda: scenario({pod_stacks.ANNOTATION: "false"}, False))


def test_a_configmap_the_operator_may_not_write_does_not_hold_the_pods_back() -> None:
    """The pods mount it optionally: without it they run their command alone (no stacks); they are made."""
    async def scenario() -> None:
        api = FakeApi()
        api.fail(lambda call: call.kind == "ConfigMap" and call.name == inplace.CONFIGMAP, 403, "forbidden")
        api.put(stalled_job())
        async with running_with(api, link()) as c:
            await one_round(api, c)
            assert ("Pod", NS, MASTER) in api.objects and ("ConfigMap", NS, inplace.CONFIGMAP) not in api.objects

    run(scenario)


def test_the_operator_may_read_its_pods_logs_and_never_exec_into_them() -> None:
    """Least privilege: taking a stall's stacks needs patch on pods (granted for restarts in place) and get on
    pods/log, nothing that runs code in a pod or attaches to it."""
    from torchjob.kube.objects import install

    granted = {(r, v) for rules in (install.RULES, install.LEASE_RULES, install.KUBEFLOW_RULES) for rule in rules
               if "" in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    assert {v for r, v in granted if r == "pods/log"} == {"get"}
    running_code = ("pods/exec", "pods/attach", "pods/portforward", "pods/ephemeralcontainers")
    assert not {r for r, _ in granted if r in running_code}


def test_a_pod_whose_log_cannot_be_read_is_not_waited_for() -> None:
    """A pod the API server will not give the log of (400: no node; 403: an install without get on pods/log) is
    named and not waited for: the stall is acted on at the first read, not after the bound."""
    async def scenario() -> None:
        api = FakeApi()
        api.put(stalled_job())
        api.logs[(NS, MASTER, "pytorch")] = answer(0, 51)
        api.fail(lambda call: call.verb == "log" and call.name == WORKER, 403, "forbidden")
        progress = link()
        async with running_with(api, progress) as c:
            await running_and_quiet(api, c, progress.books)
            await settled(api, c)
            await c.reconciler.reconcile(KEY)
            await asyncio.sleep(stall_stacks.POLL_S + 0.3)  # one read of each
            await one_round(api, c)
            message = status_of(api)["failure"]["message"]
            assert message.endswith("where the ranks were: rank 0 in <module> (ddp_progress.py:51); worker-0 (its log "
                                    "cannot be read: 403): no answer: the job is stalled"), message
            assert len([call for call in api.calls if call.verb == "log" and call.name == WORKER]) == 1

    run(scenario)


def test_a_job_whose_pods_say_no_rank_moved_is_hung_with_its_stacks() -> None:
    """runPolicy.hangDeadlineSeconds on a cluster: each running replica's pod samples its ranks and tells the endpoint
    how long none moved (kube/inpod/torchjob_stacks.py); once every replica's say the deadline passed, the
    operator takes their stacks and the job is hung, as locally. A replica that has not said is not judged."""
    async def scenario() -> None:
        api = FakeApi()
        data = torchjob(workers=1, command=["python", "/opt/tests/ddp_progress.py"],
                        run_policy={"hangDeadlineSeconds": 5})
        api.put(data)
        api.logs[(NS, MASTER, "pytorch")] = answer(0, 51)
        api.logs[(NS, WORKER, "pytorch")] = answer(1, 50)
        progress = link()
        async with running_with(api, progress) as c:
            await one_round(api, c)
            for pod in (MASTER, WORKER):
                api.kubelet(pod, NS, "Running")
            book = progress.books.open(Reporter(NS, "demo", "master-0", 0), {"torchjobs": c.caches()})
            book.note_still("master-0", 0, 10, datetime.now(UTC))  # the worker's pod has said nothing yet
            await one_round(api, c)
            assert "failure" not in status_of(api) and not [x for x in api.calls if x.verb == "patch_annotations"]
            book.note_still("worker-0", 0, 8, datetime.now(UTC))
            await settled(api, c)
            await c.reconciler.reconcile(KEY)
            await asyncio.sleep(stall_stacks.POLL_S + 0.3)  # the logs read back, in the background
            await one_round(api, c)
            failure = status_of(api)["failure"]
            where = "rank 0 in <module> (ddp_progress.py:51); rank 1 in <module> (ddp_progress.py:50)"
            assert failure["reason"] == "HangDeadlineExceeded", failure
            assert failure["message"].startswith("no rank moved for 5s") and where in failure["message"], failure
            assert len(events(api, "StacksTaken")) == 1 and where in events(api, "StacksTaken")[0].body[2]

    run(scenario)


def test_a_job_whose_hangs_are_not_watched_reads_no_samples() -> None:
    """hangDeadlineSeconds 0: a round looks up no replica's stillness (a lookup per running replica, every round,
    would be O(pods) for nothing on a big job), while a watched job's round looks each running replica up."""
    async def rounds(deadline: int) -> int:
        api = FakeApi()
        api.put(torchjob(workers=3, command=["python", "/opt/tests/ddp_progress.py"],
                         run_policy={"hangDeadlineSeconds": deadline}))
        progress = link()
        asked: list[tuple[str, int]] = []
        still = progress.books.still
        progress.books.still = lambda *a: asked.append(a[2:]) or still(*a)  # type: ignore[method-assign]
        async with running_with(api, progress) as c:
            await one_round(api, c)
            for pod in (MASTER, "demo-worker-0", "demo-worker-1", "demo-worker-2"):
                api.kubelet(pod, NS, "Running")
            await settled(api, c)
            await one_round(api, c)
        return len(asked)

    async def scenario() -> None:
        assert await rounds(0) == 0
        assert await rounds(60) >= 4

    run(scenario)
