"""A restart in place (runPolicy.warmSpares on a cluster), sequenced against the recording fake API in
milliseconds: which pod is annotated, deleted or made in each round. The test plays the pods' entry
point by writing what the operator's endpoint writes for it (an attempt's end: inplace.exit_note), and
the kubelet. The whole path with the real entry point and a real API server: tests/kube/test_spares_kube.py."""

from __future__ import annotations

import copy
import hashlib
from datetime import UTC, datetime
from typing import Any

from tests.controller.fakeapi import FakeApi
from tests.controller.test_sequencing import NS, condition, one_round, run, status_of, torchjob
from tests.controller.test_tls_renewal import NOW, OPS, running_with
from torchjob.kube.controller.round.round_parts import ProgressLink
from torchjob.kube.objects.front import inplace
from torchjob.kube.objects.labels import ANNOTATION_ATTEMPT, LABEL_INDEX, LABEL_TYPE
from torchjob.kube.progress import tls
from torchjob.kube.progress.books import Books

MASTER, WORKER = "demo-master-0", "demo-worker-0"
SEAL = inplace.Seal(b"the operator's key, kept across its restarts")


def spared(backoff: int = 2) -> dict[str, Any]:
    return torchjob(workers=1, restart_policy="OnFailure", restart_scope=None,
                    run_policy={"warmSpares": True, "backoffLimit": backoff})


def link() -> ProgressLink:
    return ProgressLink(Books(), tls.Trust(tls.generate(tls.hosts_for("torchjob-operator", OPS), now=NOW).trusted),
                        SEAL)


def uid(api: FakeApi, pod: str) -> str:
    return str(api.objects[("Pod", NS, pod)]["metadata"]["uid"])


async def ended(api: FakeApi, pod: str, attempt: int, code: int) -> None:
    """What the endpoint records when the pod's entry point reports its attempt's end (sealed)."""
    end = inplace.Ended(attempt, code, None, datetime.now(UTC))
    await api.patch_annotations("Pod", pod, NS, SEAL.close(uid(api, pod), inplace.exit_note(end)))


def notes(api: FakeApi, pod: str) -> dict[str, str]:
    return dict(api.objects[("Pod", NS, pod)]["metadata"].get("annotations") or {})


def acts(api: FakeApi, since: int) -> list[tuple[str, str, Any]]:
    """The pod writes of the operator since call `since`: (verb, pod, what)."""
    return [(c.verb, c.name, c.body if c.verb == "patch_annotations" else None) for c in api.calls[since:]
            if c.kind == "Pod" and c.verb in ("create", "delete", "patch_annotations")]


def up(api: FakeApi) -> None:
    for pod in (MASTER, WORKER):
        api.kubelet(pod, NS, "Running")


async def master_failed(api: FakeApi, c: Any) -> None:
    """The job's pods made and running, then the master's attempt 0 failed (exit 3) and decided on."""
    await one_round(api, c)
    up(api)
    await one_round(api, c)
    await ended(api, MASTER, 0, 3)
    await one_round(api, c)


def test_a_failed_rank_stops_its_peer_and_the_gang_restarts_in_the_same_pods() -> None:
    async def scenario() -> None:
        api = FakeApi()
        api.put(spared())
        async with running_with(api, link()) as c:
            await one_round(api, c)
            cm = api.objects[("ConfigMap", NS, inplace.CONFIGMAP)]["data"]
            assert set(cm) == {inplace.ENTRY, inplace.LAUNCHER, "torchjob_stacks.py"}  # and the stacks' front
            assert "def main" in cm[inplace.ENTRY]
            pod = api.objects[("Pod", NS, MASTER)]
            assert notes(api, MASTER)[inplace.ANNOTATION_IN_PLACE] == "true"
            entry = hashlib.sha256(cm[inplace.ENTRY].encode()).hexdigest()  # run only if it is that file
            booted = inplace.boot(entry, f"{inplace.DIR}/{inplace.ENTRY}")
            assert pod["spec"]["containers"][0]["command"][:4] == ["python", "-I", "-c", booted]
            up(api)
            await one_round(api, c)
            assert condition(api, "Running") is not None
            # the master's attempt fails: its peer is asked to stop (no pod deleted), the master's pod kept
            await ended(api, MASTER, 0, 3)
            start = len(api.calls)
            await one_round(api, c)
            assert status_of(api)["restartCount"] == 1
            told = acts(api, start)
            assert [(verb, pod) for verb, pod, _ in told] == [("patch_annotations", WORKER)]
            assert told[0][2][inplace.ANNOTATION_STOP] == "0"  # by its grace (3 s) and STOP_PATIENCE_S
            by = datetime.fromisoformat(told[0][2][inplace.ANNOTATION_STOP_BY].replace("Z", "+00:00"))
            assert 30 <= (by - datetime.now(UTC)).total_seconds() <= 34
            # the peer's attempt ends as asked: both pods run attempt 1, the same pods
            await ended(api, WORKER, 0, 143)
            start = len(api.calls)
            await one_round(api, c)
            told = acts(api, start)
            assert sorted((verb, pod) for verb, pod, _ in told) == [("patch_annotations", MASTER),
                                                                   ("patch_annotations", WORKER)]
            for _, pod_, note in told:
                since = datetime.fromisoformat(note[inplace.ANNOTATION_SINCE].replace("Z", "+00:00"))
                assert note == SEAL.close(uid(api, pod_), inplace.restart_note(1, since))
            assert [notes(api, p)[ANNOTATION_ATTEMPT] for p in (MASTER, WORKER)] == ["1", "1"]
            assert all(inplace.ANNOTATION_EXIT not in notes(api, p) for p in (MASTER, WORKER))
            # and the job is Running again, counted once
            start = len(api.calls)
            await one_round(api, c)
            assert acts(api, start) == [] and condition(api, "Running") is not None
            assert status_of(api)["restartCount"] == 1

    run(scenario)


def test_a_job_that_fails_releases_its_parked_pods_with_their_exit_codes() -> None:
    async def scenario() -> None:
        api = FakeApi()
        api.put(spared(backoff=1))
        async with running_with(api, link()) as c:
            await one_round(api, c)
            up(api)
            await one_round(api, c)
            await ended(api, MASTER, 0, 3)
            await ended(api, WORKER, 0, 1)
            await one_round(api, c)  # one restart, in place
            await one_round(api, c)
            assert [notes(api, p)[ANNOTATION_ATTEMPT] for p in (MASTER, WORKER)] == ["1", "1"]
            # attempt 1 of the master fails too: backoffLimit 1 is spent, the job fails; the running
            # worker is stopped as a failed job's pods are (deleted), the master's pod released
            await ended(api, MASTER, 1, 4)
            start = len(api.calls)
            await one_round(api, c)
            assert condition(api, "Failed") is not None
            released = SEAL.close(uid(api, MASTER), inplace.release_note(1))
            assert sorted(acts(api, start), key=str) == sorted([
                ("delete", WORKER, None), ("patch_annotations", MASTER, released)], key=str), acts(api, start)

    run(scenario)


def test_a_parked_pod_whose_entry_point_ended_is_made_again_as_a_new_pod() -> None:
    async def scenario() -> None:
        api = FakeApi()
        api.put(spared())
        async with running_with(api, link()) as c:
            await master_failed(api, c)  # the restart: the worker asked to stop
            # the master's entry point gives up (its pod ends with the attempt's code) before the restart
            api.kubelet(MASTER, NS, "Failed", exit_code=3)
            await ended(api, WORKER, 0, 143)
            start = len(api.calls)
            await one_round(api, c)
            assert ("patch_annotations", WORKER) in [(verb, pod) for verb, pod, _ in acts(api, start)]
            assert ("delete", MASTER, None) in acts(api, start)
            assert not [a for a in acts(api, start) if a[0] == "create"]  # its name is free only once it is gone
            start = len(api.calls)
            await one_round(api, c)
            made = [a for a in acts(api, start) if a[0] == "create"]
            assert [n for _, n, _ in made] == [MASTER], acts(api, start)
            assert notes(api, MASTER)[ANNOTATION_ATTEMPT] == "1" and status_of(api)["restartCount"] == 1

    run(scenario)


def test_describe_shows_an_attempt_ended_in_its_waiting_pod_as_ended() -> None:
    from lightkube.resources.core_v1 import Pod

    from torchjob.kube.clientside.job_pods import attempt_of as view

    end = inplace.Ended(2, 137, "killed", datetime(2026, 11, 28, 6, 0, 5, tzinfo=UTC))
    pod = {"metadata": {"name": MASTER, "labels": {"torchjob.dev/replica-type": "master",
                                                   "torchjob.dev/replica-index": "0"},
                        "annotations": {inplace.ANNOTATION_IN_PLACE: "true", ANNOTATION_ATTEMPT: "2",
                                        **inplace.exit_note(end), inplace.ANNOTATION_SINCE: "2026-11-28T06:00:01Z"}},
           "spec": wrapped_spec(),
           "status": {"phase": "Running", "startTime": "2026-11-28T05:00:00Z"}}
    seen = view(Pod.from_dict(pod))
    assert (seen.attempt, seen.reason, seen.exit_code) == (2, "Failed", 137)
    since = datetime(2026, 11, 28, 6, 0, 1, tzinfo=UTC)
    assert (seen.started, seen.ended) == (since.timestamp(), end.finished_at.timestamp())
    pod["metadata"]["annotations"][ANNOTATION_ATTEMPT] = "3"  # its next attempt runs
    seen = view(Pod.from_dict(pod))
    assert (seen.reason, seen.exit_code) == ("Running", None)
    # a time that is none (anyone who may patch pods may write one) is not shown, and breaks nothing
    for garbage in ("yesterday", "2026-11-28T06:00:01", "2026-13-45T99:00:00Z"):
        pod["metadata"]["annotations"][inplace.ANNOTATION_SINCE] = garbage
        seen = view(Pod.from_dict(pod))
        assert seen.started == datetime(2026, 11, 28, 5, 0, tzinfo=UTC).timestamp()


def wrapped_spec(attempt: int = 0) -> dict[str, Any]:
    """A pod spec that runs the entry point, as objects/pods.py makes it."""
    container = {"name": "pytorch", "command": ["python", "train.py"]}
    inplace.wrap(container, ["python", "train.py"], 0, attempt, 3)
    return {"containers": [container], "volumes": [inplace.volume()]}


def test_a_peer_whose_entry_point_does_not_stop_it_in_time_loses_its_pod(monkeypatch: Any) -> None:
    from torchjob.kube.controller.round import reconciler as reconciler_module

    monkeypatch.setattr(reconciler_module, "STOP_PATIENCE_S", -3)  # overdue as soon as asked
    async def scenario() -> None:
        api = FakeApi()
        api.put(spared())
        async with running_with(api, link()) as c:
            await master_failed(api, c)  # the worker asked to stop, already overdue
            assert notes(api, WORKER)[inplace.ANNOTATION_STOP] == "0"
            start = len(api.calls)
            await one_round(api, c)
            assert ("delete", WORKER, None) in acts(api, start)
            assert ("Pod", NS, WORKER) not in api.objects

    run(scenario)


def test_a_gangs_peers_are_asked_to_stop_together_not_one_write_after_another() -> None:
    """A failed rank's peers are told to stop in one round's writes issued at once (issue 46: one after another,
    0.1 s each on a loaded node, they delayed the last peer's stop and so the gang's restart)."""
    import asyncio

    async def scenario() -> None:
        api = FakeApi()
        api.put(torchjob(workers=3, restart_policy="OnFailure", restart_scope=None,
                         run_policy={"warmSpares": True, "backoffLimit": 2}))
        async with running_with(api, link()) as c:
            await one_round(api, c)
            for pod in (MASTER, *(f"demo-worker-{i}" for i in range(3))):
                api.kubelet(pod, NS, "Running")
            await one_round(api, c)
            await ended(api, MASTER, 0, 3)
            patch, flight = api.patch_annotations, {"now": 0, "most": 0}

            async def slow(*args: Any, **kwargs: Any) -> dict[str, Any]:  # a write that takes a loaded server's time
                flight["now"] += 1
                flight["most"] = max(flight["most"], flight["now"])
                await asyncio.sleep(0.05)
                flight["now"] -= 1
                return await patch(*args, **kwargs)

            api.patch_annotations = slow  # type: ignore[method-assign]
            start = len(api.calls)
            await one_round(api, c)
            assert sorted(pod for _, pod, _ in acts(api, start)) == [f"demo-worker-{i}" for i in range(3)]
            assert flight["most"] == 3, flight

    run(scenario)


def test_an_operator_started_in_the_middle_of_a_restart_in_place_carries_it_on() -> None:
    """Everything the operator knows of a restart in place is in the pods' annotations: a new operator
    (a restart, a new leader: nothing in memory) finishes the one its predecessor began."""
    async def scenario() -> None:
        api = FakeApi()
        api.put(spared())
        async with running_with(api, link()) as c:
            await master_failed(api, c)  # the restart decided, the worker asked to stop
        await ended(api, WORKER, 0, 143)
        async with running_with(api, link()) as fresh:
            start = len(api.calls)
            await one_round(api, fresh)
            assert sorted((verb, pod) for verb, pod, _ in acts(api, start)) == [
                ("patch_annotations", MASTER), ("patch_annotations", WORKER)]
            assert [notes(api, p)[ANNOTATION_ATTEMPT] for p in (MASTER, WORKER)] == ["1", "1"]
            assert status_of(api)["restartCount"] == 1

    run(scenario)


# --- Whoever may patch pods decides nothing (issue 43, item 1) ---

def forged_end(attempt: int, code: int) -> dict[str, str | None]:
    return inplace.exit_note(inplace.Ended(attempt, code, "forged", datetime.now(UTC)))


def test_two_annotations_on_the_running_master_of_a_job_without_warm_spares_decide_nothing() -> None:
    """Its pods do not run the entry point (their spec says so, and nobody changes a pod's spec): what
    any annotation says of an attempt's end is not read."""
    async def scenario() -> None:
        api = FakeApi()
        api.put(torchjob(workers=1, run_policy={"backoffLimit": 3}))
        async with running_with(api, link()) as c:
            await one_round(api, c)
            up(api)
            await one_round(api, c)
            assert condition(api, "Running") is not None
            for code in (0, 3):
                await api.patch_annotations("Pod", MASTER, NS, {inplace.ANNOTATION_IN_PLACE: "true",
                                                                **forged_end(0, code)})
                start = len(api.calls)
                await one_round(api, c)
                assert condition(api, "Succeeded") is None and condition(api, "Failed") is None
                assert status_of(api)["restartCount"] == 0 and acts(api, start) == []

    run(scenario)


def test_a_succeeded_workers_pod_labelled_as_the_master_does_not_end_the_job() -> None:
    """Labels, like annotations, are anyone's who may patch pods: a worker's pod that succeeded, labelled
    as master-0 with a later attempt, is still the worker's (its name, which never changes, says so), so
    the job goes on running (before, the master counted as succeeded and the job ended Succeeded)."""
    async def scenario() -> None:
        api = FakeApi()
        api.put(torchjob(workers=1, run_policy={"backoffLimit": 3}))
        async with running_with(api, link()) as c:
            await one_round(api, c)
            up(api)
            await one_round(api, c)
            api.kubelet(WORKER, NS, "Succeeded", exit_code=0)
            await one_round(api, c)
            pod = copy.deepcopy(api.objects[("Pod", NS, WORKER)])  # a patch of its labels and attempt
            pod["metadata"]["labels"].update({LABEL_TYPE: "master", LABEL_INDEX: "0"})
            pod["metadata"].setdefault("annotations", {})[ANNOTATION_ATTEMPT] = "1"
            api._store(pod, "MODIFIED")
            await one_round(api, c)
            assert condition(api, "Succeeded") is None and condition(api, "Running") is not None
            assert status_of(api)["replicaStatuses"]["Master"].get("succeeded", 0) == 0

    run(scenario)


def test_what_the_operator_did_not_seal_on_a_pod_restarting_in_place_decides_nothing() -> None:
    """A pod that does restart in place: a made-up end (or one sealed for another pod), a made-up stop
    and a made-up attempt are not believed; the job runs on untouched."""
    async def scenario() -> None:
        api = FakeApi()
        api.put(spared())
        async with running_with(api, link()) as c:
            await one_round(api, c)
            up(api)
            await one_round(api, c)
            for forged in (forged_end(0, 0), forged_end(0, 3),
                           SEAL.close(uid(api, WORKER), forged_end(0, 3)),  # the worker's seal, on the master
                           {**forged_end(0, 3), inplace.seal_annotation("exit"): "0" * 64}):
                await api.patch_annotations("Pod", MASTER, NS, forged)
                await api.patch_annotations("Pod", WORKER, NS, {inplace.ANNOTATION_STOP: "0",
                                                                inplace.ANNOTATION_STOP_BY: "2026-01-01T00:00:00Z"})
                start = len(api.calls)
                await one_round(api, c)
                assert condition(api, "Succeeded") is None and condition(api, "Failed") is None, forged
                assert status_of(api)["restartCount"] == 0 and acts(api, start) == [], forged
            # a raised attempt: the pod is at its last sealed one (its spec's), nothing restarts
            await api.patch_annotations("Pod", MASTER, NS, {ANNOTATION_ATTEMPT: "5", inplace.ANNOTATION_EXIT: None,
                                                            inplace.seal_annotation("exit"): None})
            start = len(api.calls)
            await one_round(api, c)
            assert status_of(api)["replicas"]["master-0"]["attempt"] == 0 and acts(api, start) == []
            assert condition(api, "Running") is not None

    run(scenario)


def test_a_stop_by_without_a_time_zone_breaks_no_round() -> None:
    """A `torchjob.dev/in-place-stop-by` that is not a time with its zone (written by hand, by an older
    operator): the attempt asked to stop counts as overdue, its pod is deleted; the round goes on."""
    async def scenario() -> None:
        api = FakeApi()
        api.put(spared())
        async with running_with(api, link()) as c:
            await master_failed(api, c)  # the worker asked to stop
            await api.patch_annotations("Pod", WORKER, NS, SEAL.close(uid(api, WORKER), {
                inplace.ANNOTATION_STOP: "0", inplace.ANNOTATION_STOP_BY: "2026-11-28T06:00:00"}))
            start = len(api.calls)
            await one_round(api, c)
            assert ("delete", WORKER, None) in acts(api, start)

    run(scenario)


def test_a_configmap_someone_changed_is_replaced_whole_before_the_pods_and_only_its_programs_are_mounted() -> None:
    """Another key (a module planted beside the launcher), binaryData, immutable, a changed program:
    the operator deletes the ConfigMap and makes it again as its own before it makes the pods, whose
    volume names the two programs alone."""
    async def scenario() -> None:
        api = FakeApi()
        planted = inplace.configmap(NS)
        planted["data"] = {**planted["data"], "typing.py": "import os; os.system('id')",
                           inplace.ENTRY: "print('not torchjob')"}
        planted["binaryData"] = {"__future__.py": "cHJpbnQoKQ=="}
        planted["immutable"] = True
        api.put(planted)
        api.put(spared())
        async with running_with(api, link()) as c:
            await one_round(api, c)
            made = api.objects[("ConfigMap", NS, inplace.CONFIGMAP)]
            assert made["data"] == inplace.programs() and "binaryData" not in made and "immutable" not in made
            writes = [str(w) for w in api.writes(("ConfigMap", "Pod"))]
            assert writes.index(f"delete ConfigMap {inplace.CONFIGMAP}") < writes.index(
                f"create ConfigMap {inplace.CONFIGMAP}") < writes.index(f"create Pod {MASTER}")
            volume = next(v for v in api.objects[("Pod", NS, MASTER)]["spec"]["volumes"] if v["name"] == inplace.VOLUME)
            assert volume["configMap"]["items"] == [{"key": inplace.ENTRY, "path": inplace.ENTRY},
                                                    {"key": inplace.LAUNCHER, "path": inplace.LAUNCHER}]

    run(scenario)


def test_a_made_up_attempt_on_a_pod_that_restarted_in_place_costs_a_new_pod_never_a_restart() -> None:
    """Without the operator's seal the pod is at the attempt its spec names, older than its replica's:
    core retires it as stale; the replica's attempt is made again as a new pod, nothing counted."""
    async def scenario() -> None:
        api = FakeApi()
        api.put(spared())
        async with running_with(api, link()) as c:
            await master_failed(api, c)
            await ended(api, WORKER, 0, 143)
            await one_round(api, c)  # both pods run attempt 1, in place
            await api.patch_annotations("Pod", MASTER, NS, {ANNOTATION_ATTEMPT: "7"})
            start = len(api.calls)
            await one_round(api, c)
            await one_round(api, c)
            assert [(verb, pod) for verb, pod, _ in acts(api, start)] == [("delete", MASTER), ("create", MASTER)]
            assert notes(api, MASTER)[ANNOTATION_ATTEMPT] == "1" and status_of(api)["restartCount"] == 1
            assert condition(api, "Failed") is None and condition(api, "Succeeded") is None

    run(scenario)
