"""The controller's sequencing against a recording fake API (tests/controller/fakeapi.py), in
milliseconds: the status is written before anything is acted on, the Service before the pods, one
`core.reconcile` per round, and what a 409, 422, 403 or a missing CRD leads to. The same behaviour
on a real API server is tested in tests/kube."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any

import pytest

from tests.controller.fakeapi import Call, FakeApi
from tests.jobs import job_data
from torchjob.api.status import Reason
from torchjob.kube.controller import reconciler as reconciler_module
from torchjob.kube.controller.config import OperatorConfig
from torchjob.kube.controller.controller import Controller
from torchjob.kube.machinery.client import VolcanoPodGroup  # noqa: F401 (the PodGroup kind is known)

NS = "team"
PODS = ["demo-master-0", "demo-worker-0", "demo-worker-1"]


def torchjob(name: str = "demo", **kwargs: Any) -> dict[str, Any]:
    data = job_data(name, **kwargs)
    data["metadata"]["namespace"] = NS
    for spec in data["spec"]["pytorchReplicaSpecs"].values():
        spec["template"]["spec"]["containers"][0]["image"] = "trainer:1"
    return data


async def until(check: Callable[[], Any], timeout_s: float = 3.0) -> Any:
    """Wait for `check()` to be truthy (the controller runs on the same loop)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not (found := check()):
        if loop.time() > deadline:
            raise AssertionError(f"not within {timeout_s}s")
        await asyncio.sleep(0.002)
    return found


@asynccontextmanager
async def running(api: FakeApi, **config: Any) -> AsyncIterator[Controller]:
    controller = Controller(api, OperatorConfig(**config))
    task = asyncio.create_task(controller.run())
    await asyncio.wait_for(controller.ready.wait(), 3)
    try:
        yield controller
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await controller.drain(1.0)


def run(scenario: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(asyncio.wait_for(scenario(), 20))


def status_of(api: FakeApi, name: str = "demo") -> dict[str, Any]:
    return dict(api.objects[("TorchJob", NS, name)].get("status") or {})


def condition(api: FakeApi, ctype: str, name: str = "demo") -> dict[str, Any] | None:
    return next((c for c in status_of(api, name).get("conditions", []) if c["type"] == ctype
                 and c["status"] == "True"), None)


@pytest.fixture
def rounds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times each round called `core.reconcile` (one entry per round)."""
    counts: list[int] = []
    decide, round_ = reconciler_module.reconcile, reconciler_module.Reconciler.reconcile

    def counting_decide(*args: Any) -> Any:
        counts[-1] += 1
        return decide(*args)

    async def counting_round(self: Any, key: Any) -> None:
        counts.append(0)
        await round_(self, key)

    monkeypatch.setattr(reconciler_module, "reconcile", counting_decide)
    monkeypatch.setattr(reconciler_module.Reconciler, "reconcile", counting_round)
    return counts


def test_a_new_job_is_written_before_it_is_acted_on_and_its_service_comes_before_its_pods(
        rounds: list[int]) -> None:
    async def scenario() -> None:
        api = FakeApi()
        api.put(torchjob())
        async with running(api):
            await until(lambda: len(api.named("Pod", NS)) == 3)
            writes = [str(c) for c in api.writes(("TorchJob", "Service", "Pod"))]
            assert writes[0] == "patch_status TorchJob demo"  # the decision first (Created)
            assert writes[1] == "create Service demo"  # then the names the pods resolve
            assert sorted(writes[2:5]) == [f"create Pod {p}" for p in PODS]
            assert condition(api, "Created") is not None
            for pod in PODS:
                api.kubelet(pod, NS, "Running")
            await until(lambda: condition(api, "Running"))
            for pod in PODS:
                api.kubelet(pod, NS, "Succeeded", exit_code=0)
            await until(lambda: condition(api, "Succeeded"))
            created = [c for c in api.calls if c.verb == "create" and c.kind == "Pod"]
            assert len(created) == 3  # never a pod twice
            events = [c.body[1] for c in api.calls if c.verb == "event"]
            assert events[0] == "Created" and "Succeeded" in events[-2:]

    run(scenario)
    assert rounds and max(rounds) == 1


def test_a_pod_the_api_server_refuses_with_422_fails_the_job_in_the_next_round(rounds: list[int]) -> None:
    async def scenario() -> None:
        api = FakeApi()
        api.fail(lambda c: c.verb == "create" and c.kind == "Pod", 422,
                 'Pod "demo-worker-0" is invalid: spec.containers[0].image: Required value')
        api.put(torchjob())
        async with running(api):
            failed = await until(lambda: condition(api, "Failed"))
            assert failed["reason"] == Reason.INVALID_SPEC
            assert "spec.containers[0].image: Required value" in failed["message"]
            refused = [i for i, c in enumerate(api.calls) if c.verb == "create" and c.kind == "Pod"]
            failing = [i for i, c in enumerate(api.calls) if c.verb == "patch_status" and "Failed" in str(c.body)]
            assert refused and failing and max(refused) < failing[0]  # learned while acting, decided next round
            await asyncio.sleep(0.05)
            assert api.named("Pod", NS) == []  # and nothing was made, or tried again, after it failed
            assert len(refused) <= 3

    run(scenario)
    assert max(rounds) == 1


def test_a_pod_refused_with_403_is_retried_with_backoff_and_said_in_an_event() -> None:
    async def scenario() -> None:
        api = FakeApi()
        api.fail(lambda c: c.verb == "create" and c.kind == "Pod", 403, "pods is forbidden: exceeded quota")
        api.put(torchjob())
        async with running(api):
            await until(lambda: any(c.verb == "event" and c.body[1] == Reason.RECONCILE_ERROR for c in api.calls))
            warning = next(c for c in api.calls if c.verb == "event" and c.body[1] == Reason.RECONCILE_ERROR)
            assert "exceeded quota" in warning.body[2] and "next try in" in warning.body[2]
            assert condition(api, "Failed") is None  # a quota can pass: not the job's end
            api.heal()  # the quota is raised
            await until(lambda: len(api.named("Pod", NS)) == 3, timeout_s=5)

    run(scenario)


POD_SECURITY = ('pods "{pod}" is forbidden: violates PodSecurity "restricted:latest": allowPrivilegeEscalation != '
                'false (container "pytorch" must set securityContext.allowPrivilegeEscalation=false)')
WEBHOOK = 'admission webhook "validate.kyverno.svc-fail" denied the request: the label team is required'


@pytest.mark.parametrize("message", [POD_SECURITY, WEBHOOK], ids=["pod-security", "webhook"])
def test_a_pod_refused_for_good_fails_the_job_at_once_with_the_servers_words_and_is_not_retried(
        rounds: list[int], message: str) -> None:
    async def scenario() -> None:
        api = FakeApi()
        for pod in PODS:  # each pod refused in its own words, as the API server does
            api.fail(lambda c, pod=pod: c.verb == "create" and c.kind == "Pod" and c.name == pod, 403,
                     message.format(pod=pod))
        api.put(torchjob())
        async with running(api):
            failed = await until(lambda: condition(api, "Failed"))
            assert failed["reason"] == Reason.POD_REFUSED == "PodRefused"
            assert "the API server refused pod demo-master-0," in failed["message"]
            assert "refused too: demo-worker-0, demo-worker-1" in failed["message"]
            if message == POD_SECURITY:
                assert "violates PodSecurity" in failed["message"]
                field = "Master.template.spec.containers[pytorch].securityContext.allowPrivilegeEscalation"
                assert field in failed["message"]  # the master's: first in the plan
            else:
                assert "denied the request: the label team is required" in failed["message"]
            assert status_of(api)["failure"]["reason"] == "PodRefused"
            event = await until(lambda: next((c for c in api.calls if c.verb == "event"
                                              and c.body[1] == Reason.POD_REFUSED), None))
            assert event.body[0] == "Warning" and event.body[2] == failed["message"]
            await asyncio.sleep(0.3)  # the backoff's first retries would have come by now
            creates = [c for c in api.calls if c.verb == "create" and c.kind == "Pod"]
            assert len(creates) <= len(PODS)  # each pod asked for once at most: no retry storm
            assert not any(c.verb == "event" and c.body[1] == Reason.RECONCILE_ERROR for c in api.calls)

    run(scenario)
    assert max(rounds) == 1


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
        async with running(api):
            await until(lambda: len(api.named("Pod", NS)) == 3)
            await asyncio.sleep(0.05)
            assert not any(c.verb == "event" and c.body[1] == Reason.RECONCILE_ERROR for c in api.calls)
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
        async with running(api):
            warning = await until(lambda: next((c for c in api.calls if c.verb == "event"
                                                and c.body[1] == Reason.RECONCILE_ERROR), None))
            assert "belongs to PyTorchJob demo" in warning.body[2]
            assert api.named("Pod", NS) == []  # no pod while its Service name is someone else's

    run(scenario)


def test_a_job_asking_for_volcano_without_its_crd_fails_in_the_next_round_and_makes_no_pod(
        rounds: list[int]) -> None:
    async def scenario() -> None:
        api = FakeApi()
        api.missing_kinds.add("scheduling.volcano.sh/v1beta1/PodGroup")
        api.put(torchjob(run_policy={"schedulingPolicy": {"schedulerName": "volcano"}}))
        async with running(api):
            failed = await until(lambda: condition(api, "Failed"))
            assert failed["reason"] == Reason.POD_GROUP_UNAVAILABLE
            assert "install volcano" in failed["message"]
            assert api.named("Pod", NS) == []

    run(scenario)
    assert max(rounds) == 1


def test_a_pod_deleted_by_someone_is_made_again_as_a_new_pod() -> None:
    async def scenario() -> None:
        api = FakeApi()
        api.put(torchjob(restart_policy="OnFailure"))
        async with running(api):
            await until(lambda: len(api.named("Pod", NS)) == 3)
            for pod in PODS:
                api.kubelet(pod, NS, "Running")
            await until(lambda: condition(api, "Running"))
            before = len([c for c in api.calls if c.verb == "create" and c.kind == "Pod"])
            await api.delete("Pod", "demo-worker-1", NS, 0)  # a `kubectl delete pod`, as the API sees it
            await until(lambda: "demo-worker-1" in api.named("Pod", NS))
            after = [c for c in api.calls if c.verb == "create" and c.kind == "Pod"]
            assert len(after) == before + 1 and after[-1].name == "demo-worker-1"

    run(scenario)


def test_a_kueue_job_is_held_suspended_before_any_decision_or_pod() -> None:
    async def scenario() -> None:
        api = FakeApi()
        data = torchjob()
        data["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "team-queue"}
        api.put(data)
        async with running(api):
            await until(lambda: api.objects[("TorchJob", NS, "demo")]["spec"].get("runPolicy", {}).get("suspend"))
            await until(lambda: condition(api, "Suspended"))
            first = next(c for c in api.calls if c.kind == "TorchJob" and c.verb.startswith("patch"))
            assert first == Call("patch_spec", "TorchJob", "demo", NS, {"runPolicy": {"suspend": True}})
            assert api.named("Pod", NS) == []

    run(scenario)


def test_the_view_progress_reads_sees_what_the_informers_list_and_watch() -> None:
    async def scenario() -> None:
        api = FakeApi()
        api.put(torchjob())
        controller = Controller(api, OperatorConfig())
        view = controller.caches()  # taken before the first list, as the operator wires progress
        task = asyncio.create_task(controller.run())
        try:
            await until(lambda: len(view.pods) == 3)
            assert (NS, "demo") in view.jobs
            await api.delete("TorchJob", "demo", NS)
            await until(lambda: (NS, "demo") not in view.jobs)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

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
        async with running(api):
            await until(lambda: len(api.named("Pod", NS)) == 3)
            for pod in PODS:
                api.kubelet(pod, NS, "Running")
            await until(lambda: condition(api, "Running"))
            api.kubelet("demo-worker-1", NS, "Failed", exit_code=137)
            def peers() -> list[Any]:
                return [c.body for c in api.calls if c.verb == "delete" and c.kind == "Pod"
                        and c.name in ("demo-master-0", "demo-worker-0")]

            await until(lambda: len(peers()) == 2)
            return peers()

    async def both() -> None:
        assert await scenario(None) == [reconciler_module.RESTART_GRACE_S] * 2
        assert await scenario(20) == [20, 20]  # the job's own grace holds

    run(both)
