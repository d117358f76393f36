"""The controller's sequencing against a recording fake API (tests/controller/fakeapi.py), in
milliseconds: the status is written before anything is acted on, the Service before the pods, one
`core.reconcile` per round, and what a 409, 422, 403 or a missing CRD leads to. Each test runs the
controller's informers with no worker and calls one round at a time (`one_round`), asserting on the
`Result` it returns and the writes it made. The same behaviour on a real API server is tested in
tests/kube."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any

import pytest
from lightkube.core.exceptions import ApiError

from tests.controller.fakeapi import Call, FakeApi
from tests.jobs import job_data
from torchjob.api.status import Reason
from torchjob.kube.controller.process.config import OperatorConfig
from torchjob.kube.controller.process.controller import Controller
from torchjob.kube.controller.round import reconciler as reconciler_module
from torchjob.kube.controller.round.names import NameTaken
from torchjob.kube.controller.round.outcome import Result
from torchjob.kube.machinery.client import VolcanoPodGroup  # noqa: F401 (the PodGroup kind is known)
from torchjob.kube.machinery.informer import Key

NS = "team"
PODS = ["demo-master-0", "demo-worker-0", "demo-worker-1"]


def torchjob(name: str = "demo", **kwargs: Any) -> dict[str, Any]:
    data = job_data(name, **kwargs)
    data["metadata"]["namespace"] = NS
    for spec in data["spec"]["pytorchReplicaSpecs"].values():
        spec["template"]["spec"]["containers"][0]["image"] = "trainer:1"
    return data


KEY: Key = (NS, "demo")


async def settled(api: FakeApi, controller: Controller) -> None:
    """Let the loop run until the informers have taken every change the fake published and the
    writes a round left behind (its events) are done: a bounded number of turns, not a clock."""
    for _ in range(1000):
        if not api.unseen() and not controller.background:
            await asyncio.sleep(0)  # the watcher that took the last change has handled it
            return
        await asyncio.sleep(0)
    raise AssertionError("the informers did not settle")


@asynccontextmanager
async def synced(api: FakeApi, **config: Any) -> AsyncIterator[Controller]:
    """A controller whose informers have listed the fake and watch it, with no worker: the test runs
    each round itself."""
    controller = Controller(api, OperatorConfig(**{"workers": 0, **config}))
    task = asyncio.create_task(controller.run())
    await asyncio.wait_for(controller.ready.wait(), 3)
    try:
        yield controller
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await controller.drain(1.0)


async def one_round(api: FakeApi, controller: Controller, key: Key = KEY) -> Result:
    """One round of the job, on what the informers have seen so far; its writes are done on return."""
    await settled(api, controller)
    result = await controller.reconciler.reconcile(key)
    await settled(api, controller)
    return result


def run(scenario: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(asyncio.wait_for(scenario(), 20))


def status_of(api: FakeApi, name: str = "demo") -> dict[str, Any]:
    return dict(api.objects[("TorchJob", NS, name)].get("status") or {})


def condition(api: FakeApi, ctype: str, name: str = "demo") -> dict[str, Any] | None:
    return next((c for c in status_of(api, name).get("conditions", []) if c["type"] == ctype
                 and c["status"] == "True"), None)


def events(api: FakeApi, reason: str | None = None) -> list[Call]:
    return [c for c in api.calls if c.verb == "event" and (reason is None or c.body[1] == reason)]


def creates(api: FakeApi, kind: str = "Pod") -> list[Call]:
    return [c for c in api.calls if c.verb == "create" and c.kind == kind]


@pytest.fixture
def decisions(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times `core.reconcile` was called, in all (a test compares it round by round)."""
    count = [0]
    decide = reconciler_module.reconcile

    def counting_decide(*args: Any) -> Any:
        count[0] += 1
        return decide(*args)

    monkeypatch.setattr(reconciler_module, "reconcile", counting_decide)
    return count


def test_a_new_job_is_written_before_it_is_acted_on_and_its_service_comes_before_its_pods(
        decisions: list[int]) -> None:
    async def scenario() -> None:
        api = FakeApi()
        api.put(torchjob())
        async with synced(api) as c:
            assert await one_round(api, c) == Result()  # nothing to look at again until a pod changes
            assert decisions == [1]  # one decision per round
            writes = [str(c) for c in api.writes(("TorchJob", "Service", "Pod"))]
            assert writes[0] == "patch_status TorchJob demo"  # the decision first (Created)
            assert writes[1] == "create Service demo"  # then the names the pods resolve
            assert sorted(writes[2:]) == [f"create Pod {p}" for p in PODS]
            assert condition(api, "Created") is not None
            for pod in PODS:
                api.kubelet(pod, NS, "Running")
            assert await one_round(api, c) == Result()
            assert condition(api, "Running") and decisions == [2]
            for pod in PODS:
                api.kubelet(pod, NS, "Succeeded", exit_code=0)
            await one_round(api, c)
            assert condition(api, "Succeeded") and decisions == [3]
            assert len(creates(api)) == 3  # never a pod twice
            said = [c.body[1] for c in events(api)]
            assert said[0] == "Created" and "Succeeded" in said[-2:]

    run(scenario)


def test_a_pod_the_api_server_refuses_with_422_fails_the_job_in_the_next_round(decisions: list[int]) -> None:
    async def scenario() -> None:
        api = FakeApi()
        api.fail(lambda c: c.verb == "create" and c.kind == "Pod", 422,
                 'Pod "demo-worker-0" is invalid: spec.containers[0].image: Required value')
        api.put(torchjob())
        async with synced(api) as c:
            learned = await one_round(api, c)
            assert learned.requeue  # a fact learned while acting: the next round at once, not a second decision
            assert decisions == [1] and condition(api, "Failed") is None
            assert len(creates(api)) == 3
            await one_round(api, c)
            assert decisions == [2]
            failed = condition(api, "Failed")
            assert failed is not None and failed["reason"] == Reason.INVALID_SPEC
            assert "spec.containers[0].image: Required value" in failed["message"]
            assert not (await one_round(api, c)).requeue
            assert api.named("Pod", NS) == [] and len(creates(api)) == 3  # nothing made, or tried again, after

    run(scenario)


def test_a_pod_refused_with_403_is_retried_with_backoff_and_said_in_an_event() -> None:
    async def scenario() -> None:
        api = FakeApi()
        api.fail(lambda c: c.verb == "create" and c.kind == "Pod", 403, "pods is forbidden: exceeded quota")
        api.put(torchjob())
        async with synced(api) as c:
            with pytest.raises(ApiError, match="exceeded quota"):  # not the job's fact: the round fails
                await one_round(api, c)
            await c.process(KEY)  # as a worker runs it: a backoff, said where `kubectl describe` shows it
            await settled(api, c)
            assert c.queue.failures(KEY) == 1
            warning = events(api, Reason.RECONCILE_ERROR)[0]
            assert "exceeded quota" in warning.body[2] and "next try in" in warning.body[2]
            assert condition(api, "Failed") is None  # a quota can pass: not the job's end
            api.heal()  # the quota is raised
            await one_round(api, c)
            assert len(api.named("Pod", NS)) == 3

    run(scenario)


POD_SECURITY = ('pods "{pod}" is forbidden: violates PodSecurity "restricted:latest": allowPrivilegeEscalation != '
                'false (container "pytorch" must set securityContext.allowPrivilegeEscalation=false)')
WEBHOOK = 'admission webhook "validate.kyverno.svc-fail" denied the request: the label team is required'


@pytest.mark.parametrize("message", [POD_SECURITY, WEBHOOK], ids=["pod-security", "webhook"])
def test_a_pod_refused_for_good_fails_the_job_at_once_with_the_servers_words_and_is_not_retried(
        decisions: list[int], message: str) -> None:
    async def scenario() -> None:
        api = FakeApi()
        for pod in PODS:  # each pod refused in its own words, as the API server does
            api.fail(lambda c, pod=pod: c.verb == "create" and c.kind == "Pod" and c.name == pod, 403,
                     message.format(pod=pod))
        api.put(torchjob())
        async with synced(api) as c:
            assert (await one_round(api, c)).requeue
            await one_round(api, c)
            assert decisions == [2]
            failed = condition(api, "Failed")
            assert failed is not None and failed["reason"] == Reason.POD_REFUSED == "PodRefused"
            assert "the API server refused pod demo-master-0," in failed["message"]
            assert "refused too: demo-worker-0, demo-worker-1" in failed["message"]
            if message == POD_SECURITY:
                assert "violates PodSecurity" in failed["message"]
                field = "Master.template.spec.containers[pytorch].securityContext.allowPrivilegeEscalation"
                assert field in failed["message"]  # the master's: first in the plan
            else:
                assert "denied the request: the label team is required" in failed["message"]
            assert status_of(api)["failure"]["reason"] == "PodRefused"
            event = events(api, Reason.POD_REFUSED)[0]
            assert event.body[0] == "Warning" and event.body[2] == failed["message"]
            assert await one_round(api, c) == Result()  # finished: nothing to retry, nothing to look at again
            assert len(creates(api)) == len(PODS)  # each pod asked for once: no retry storm
            assert not events(api, Reason.RECONCILE_ERROR)

    run(scenario)


def test_a_pod_that_exists_and_is_the_jobs_own_is_adopted_on_409() -> None:
    async def scenario() -> None:
        api = FakeApi()
        job = api.put(torchjob())
        owner = {"apiVersion": "torchjob.dev/v1", "kind": "TorchJob", "name": "demo",
                 "uid": job["metadata"]["uid"], "controller": True}
        # Made by an operator before a restart without the label the informer selects by: never in
        # this one's cache, so it is created, and the 409 finds the job's own pod.
        api.put({"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": "demo-master-0", "namespace": NS, "ownerReferences": [owner],
            "labels": {"unrelated": "x"}, "annotations": {"torchjob.dev/attempt": "0"}}})
        async with synced(api) as c:
            assert await one_round(api, c) == Result()  # no error: adopted
            assert len(api.named("Pod", NS)) == 3
            assert not any(c.verb == "delete" for c in api.calls)

    run(scenario)


def test_a_name_held_by_another_kinds_object_is_an_error_that_says_whose() -> None:
    async def scenario() -> None:
        api = FakeApi()
        api.put(torchjob())
        other = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "demo", "uid": "someone-else",
                 "controller": True}
        api.put({"apiVersion": "v1", "kind": "Service", "metadata": {
            "name": "demo", "namespace": NS, "ownerReferences": [other]}})
        async with synced(api) as c:
            with pytest.raises(NameTaken, match="belongs to PyTorchJob demo"):
                await one_round(api, c)
            await c.process(KEY)
            await settled(api, c)
            assert "belongs to PyTorchJob demo" in events(api, Reason.RECONCILE_ERROR)[0].body[2]
            assert api.named("Pod", NS) == []  # no pod while its Service name is someone else's

    run(scenario)


def test_a_job_asking_for_volcano_without_its_crd_fails_in_the_next_round_and_makes_no_pod(
        decisions: list[int]) -> None:
    async def scenario() -> None:
        api = FakeApi()
        api.missing_kinds.add("scheduling.volcano.sh/v1beta1/PodGroup")
        api.put(torchjob(run_policy={"schedulingPolicy": {"schedulerName": "volcano"}}))
        async with synced(api) as c:
            assert (await one_round(api, c)).requeue
            await one_round(api, c)
            assert decisions == [2]
            failed = condition(api, "Failed")
            assert failed is not None and failed["reason"] == Reason.POD_GROUP_UNAVAILABLE
            assert "install volcano" in failed["message"]
            assert api.named("Pod", NS) == []

    run(scenario)


def test_a_pod_deleted_by_someone_is_made_again_as_a_new_pod() -> None:
    async def scenario() -> None:
        api = FakeApi()
        api.put(torchjob(restart_policy="OnFailure"))
        async with synced(api) as c:
            await one_round(api, c)
            for pod in PODS:
                api.kubelet(pod, NS, "Running")
            await one_round(api, c)
            assert condition(api, "Running")
            before = len(creates(api))
            await api.delete("Pod", "demo-worker-1", NS, 0)  # a `kubectl delete pod`, as the API sees it
            await one_round(api, c)
            after = creates(api)
            assert len(after) == before + 1 and after[-1].name == "demo-worker-1"
            assert "demo-worker-1" in api.named("Pod", NS)

    run(scenario)


def test_a_kueue_job_is_held_suspended_by_cores_first_decision_before_any_status_or_pod(
        decisions: list[int]) -> None:
    async def scenario() -> None:
        api = FakeApi()
        data = torchjob()
        data["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "team-queue"}
        api.put(data)
        async with synced(api) as c:
            assert await one_round(api, c) == Result()  # held: its watch event brings it back
            assert decisions == [1]  # core decided the hold (the Workload's absence a fact of its World)
            first = next(c for c in api.calls if c.kind == "TorchJob" and c.verb.startswith("patch"))
            assert first == Call("patch_spec", "TorchJob", "demo", NS, {"runPolicy": {"suspend": True}})
            assert status_of(api) == {}  # the hold ended the round: nothing written before the spec changed
            await one_round(api, c)
            assert condition(api, "Suspended") and decisions == [2]
            made = creates(api, "kueue.x-k8s.io/v1beta1/Workload")  # while it waits: Kueue admits that
            assert [c.name for c in made] == ["torchjob-demo"]
            assert api.named("Pod", NS) == []

    run(scenario)


def test_the_view_progress_reads_sees_what_the_informers_list_and_watch() -> None:
    async def scenario() -> None:
        api = FakeApi()
        api.put(torchjob())
        controller = Controller(api, OperatorConfig(workers=0))
        view = controller.caches()  # taken before the first list, as the operator wires progress
        task = asyncio.create_task(controller.run())
        try:
            await asyncio.wait_for(controller.ready.wait(), 3)
            assert (NS, "demo") in view.jobs
            await one_round(api, controller)
            assert len(view.pods) == 3
            await api.delete("TorchJob", "demo", NS)
            await settled(api, controller)
            assert (NS, "demo") not in view.jobs
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    run(scenario)


def test_a_deleted_jobs_round_forgets_it_and_the_controller_drops_all_it_kept() -> None:
    async def scenario() -> None:
        api = FakeApi()
        api.fail(lambda c: c.verb == "create" and c.kind == "Pod" and c.name == "demo-master-0", 422,
                 'Pod "demo-master-0" is invalid: spec.containers[0].image: Required value')
        api.put(torchjob())
        async with synced(api) as c:
            await one_round(api, c)
            assert c.memories.jobs[KEY].learned is not None  # the refusal, kept for the next round
            await api.delete("TorchJob", "demo", NS)
            assert await one_round(api, c) == Result(forget=True)
            await c.process(KEY)  # as a worker runs it: the controller follows the result
            assert KEY not in c.memories.jobs

    run(scenario)


def test_a_gang_restart_deletes_the_running_peers_with_a_short_grace_unless_the_job_sets_one() -> None:
    # A peer of a failed rank hangs in its collective; its container's PID 1 ignores SIGTERM, so the
    # pod's default 30 s grace would hold its name (and the replacement) that long.
    async def scenario(grace: int | None) -> list[Any]:
        api = FakeApi()
        data = torchjob(restart_policy="OnFailure", restart_scope=None)
        if grace is not None:
            for spec in data["spec"]["pytorchReplicaSpecs"].values():
                spec["template"]["spec"]["terminationGracePeriodSeconds"] = grace
        api.put(data)
        async with synced(api) as c:
            await one_round(api, c)
            for pod in PODS:
                api.kubelet(pod, NS, "Running")
            await one_round(api, c)
            assert condition(api, "Running")
            api.kubelet("demo-worker-1", NS, "Failed", exit_code=137)
            await one_round(api, c)
            return [c.body for c in api.calls if c.verb == "delete" and c.kind == "Pod"
                    and c.name in ("demo-master-0", "demo-worker-0")]

    async def both() -> None:
        assert await scenario(None) == [reconciler_module.RESTART_GRACE_S] * 2
        assert await scenario(20) == [20, 20]  # the job's own grace holds

    run(both)
