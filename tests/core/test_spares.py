"""Warm spares' pure decisions (core/policies/spares.py): what command a spare can stand in for, which
replica gets one, and the document's field checked with its fix."""

from __future__ import annotations

import pytest

from tests.jobs import make_job
from torchjob.api.errors import InvalidJob
from torchjob.core.policies.spares import PythonEntry, no_spare_reason, python_entry, spare_still_useful

PY = "/venv/bin/python"


@pytest.mark.parametrize(("argv", "entry"), [
    ([PY, "train.py", "--lr", "1"], PythonEntry((), "train.py", None, ("--lr", "1"))),
    ([PY, "-u", "-W", "ignore", "-X", "dev", "t.py"],
     PythonEntry(("-u", "-W", "ignore", "-X", "dev"), "t.py", None, ())),
    ([PY, "-Wignore", "-O", "-m", "pkg.mod", "-m", "x"], PythonEntry(("-Wignore", "-O"), None, "pkg.mod", ("-m", "x"))),
    ([PY, "-mpkg", "a"], PythonEntry((), None, "pkg", ("a",))),
    ([PY, "-m", "torchjob.local.start.loopback_torchrun", "--nnodes", "2", "t.py"],
     PythonEntry((), None, "torchjob.local.start.loopback_torchrun", ("--nnodes", "2", "t.py"))),
])
def test_a_command_python_runs_itself_is_taken_apart(argv: list[str], entry: PythonEntry) -> None:
    assert python_entry(argv, PY) == entry
    assert python_entry([PY, *entry.options, *entry.target], PY) == entry  # a spare's own command line says it


@pytest.mark.parametrize("argv", [
    [PY],  # an interactive interpreter
    [PY, "-c", "print(1)"],  # -c: no file or module to stand in for
    [PY, "-I", "t.py"], [PY, "-E", "t.py"], [PY, "-s", "t.py"], [PY, "-S", "t.py"], [PY, "-P", "t.py"],
    [PY, "-i", "t.py"], [PY, "-uB", "t.py"], [PY, "-", "t.py"], [PY, "-m"], [PY, "-W"],
    [PY, "t.pyc"],
    ["/other/python", "t.py"],  # not the interpreter spares run under
    ["bash", "-c", "python t.py"],  # a shell
    ["./train.sh"],
])
def test_what_a_spare_cannot_stand_in_for(argv: list[str]) -> None:
    assert python_entry(argv, PY) is None


def entry() -> PythonEntry:
    return PythonEntry((), "t.py", None, ())


def test_which_replica_gets_a_spare() -> None:
    on = {"warmSpares": True}
    assert no_spare_reason(make_job(restart_policy="OnFailure", run_policy=on), "Worker", entry()) is None
    assert no_spare_reason(make_job(restart_policy="ExitCode", run_policy=on), "Master", entry()) is None
    off = make_job(restart_policy="OnFailure")
    assert "runPolicy.warmSpares is not set" in str(no_spare_reason(off, "Worker", entry()))
    never = make_job(restart_policy="OnFailure", run_policy=on)
    never.spec.pytorchReplicaSpecs["Worker"].restartPolicy = "Never"
    assert "restartPolicy is Never" in str(no_spare_reason(never, "Worker", entry()))
    assert no_spare_reason(never, "Master", entry()) is None
    assert "not `python SCRIPT`" in str(no_spare_reason(make_job(restart_policy="OnFailure", run_policy=on),
                                                         "Worker", None))


def test_spares_are_kept_only_while_the_job_may_restart_again() -> None:
    job = make_job(restart_policy="OnFailure", run_policy={"warmSpares": True, "backoffLimit": 2})
    assert spare_still_useful(job)
    from torchjob.api.model import JobStatus

    spent = job.model_copy(update={"status": JobStatus(restartCount=2)})
    assert not spare_still_useful(spent)
    assert spare_still_useful(spent, restarting=True)  # the last restart's replicas are still to start
    unlimited = make_job(restart_policy="OnFailure", run_policy={"warmSpares": True})
    assert spare_still_useful(unlimited.model_copy(update={"status": JobStatus(restartCount=50)}))


@pytest.mark.parametrize(("kwargs", "why"), [
    ({"restart_policy": "Never", "run_policy": {"warmSpares": True}}, "every replica's restartPolicy is Never"),
    ({"restart_policy": "OnFailure", "run_policy": {"warmSpares": True, "backoffLimit": 0}}, "backoffLimit is 0"),
])
def test_spares_no_replica_would_ever_use_are_refused_with_the_field_and_the_fix(kwargs: dict[str, object],
                                                                                  why: str) -> None:
    with pytest.raises(InvalidJob) as info:
        make_job(**kwargs)  # type: ignore[arg-type]
    text = info.value.render()
    assert "spec.runPolicy.warmSpares" in text and why in text and "remove warmSpares" in text, text


def test_a_torchrun_job_whose_workers_torchrun_restarts_may_have_spares_without_replica_restarts() -> None:
    job = make_job(restart_policy="Never", master=False, command=["torchrun", "t.py"],
                   elastic={"minReplicas": 1, "maxReplicas": 2, "maxRestarts": 3}, run_policy={"warmSpares": True})
    assert job.run_policy.warmSpares
    with pytest.raises(InvalidJob, match="warmSpares"):
        make_job(restart_policy="Never", master=False, command=["torchrun", "t.py"],
                 elastic={"minReplicas": 1, "maxReplicas": 2}, run_policy={"warmSpares": True})


def test_a_document_turns_spares_on_with_a_boolean() -> None:
    assert make_job(restart_policy="OnFailure", run_policy={"warmSpares": True}).run_policy.warmSpares is True
    with pytest.raises(InvalidJob) as info:
        make_job(restart_policy="OnFailure", run_policy={"warmSpares": "often"})
    assert "warmSpares" in info.value.render()


def test_a_cluster_restarts_python_replicas_in_place_and_says_which_cannot() -> None:
    """On a cluster a replica whose command Python runs restarts in place, in its pod, with a spare
    (in_place_reason: None); what cannot (torchrun, `python -c`, no progress endpoint) is said, one
    line naming each replica type and why, never refused (the same document runs locally with its
    spares); a job without warmSpares, or whose replicas are never restarted, hears nothing."""
    from torchjob.core.policies.spares import NO_ENDPOINT, in_place_reason, in_pod_entry, on_a_cluster
    from torchjob.kube.clientside.plan import KubePlan

    job = make_job(restart_policy="OnFailure", run_policy={"warmSpares": True}, command=["python", "-u", "train.py"])
    assert on_a_cluster(job) is None and KubePlan(job).warnings == []
    assert in_place_reason(job, "Worker", ["python", "-u", "train.py"], torchrun=False) is None
    assert in_pod_entry(["/usr/bin/python3.11", "-m", "pkg.train", "--lr", "1"]) == PythonEntry(
        (), None, "pkg.train", ("--lr", "1"))
    assert in_pod_entry(["pythonista", "train.py"]) is None and in_pod_entry(["bash", "-c", "python x.py"]) is None
    said = on_a_cluster(job, endpoint=False)
    assert said is not None and said.count(NO_ENDPOINT) == 2 and "Master: " in said and "Worker: " in said
    torchrun = make_job(restart_policy="OnFailure", run_policy={"warmSpares": True},
                        command=["torchrun", "--nproc-per-node", "2", "train.py"])
    said = on_a_cluster(torchrun)
    assert said is not None and said.startswith("runPolicy.warmSpares: on a cluster these replicas restart as new pods")
    assert "Worker runs torchrun" in said and "docs/explanation/faults.md" in said
    assert KubePlan(torchrun).warnings == [said]
    inline = make_job(restart_policy="OnFailure", run_policy={"warmSpares": True}, command=["python", "-c", "pass"])
    assert "is not `python SCRIPT`" in (on_a_cluster(inline) or "")
    assert on_a_cluster(make_job(restart_policy="OnFailure")) is None
    assert on_a_cluster(make_job(restart_policy="OnFailure", run_policy={"warmSpares": False})) is None
    assert KubePlan(make_job(restart_policy="OnFailure")).warnings == []
