"""api.spec_facts.processes: processes per replica and the world size, as the spec says them (the
dashboard's list and job page show them)."""

from __future__ import annotations

from tests.jobs import make_job
from torchjob.api.spec_facts import processes


def test_torchrun_mode_takes_nproc_per_node_plain_mode_is_one_a_replica() -> None:
    assert processes(make_job("a", workers=1, command=["torchrun", "train.py"], nproc_per_node=2)) == ("2", 4)
    assert processes(make_job("b", workers=0, command=["python", "-m", "torch.distributed.run", "t.py"],
                              nproc_per_node=8)) == ("8", 8)
    # plain mode: one process a replica, whatever nprocPerNode says
    assert processes(make_job("c", workers=3, command=["python", "train.py"], nproc_per_node=4)) == ("1", 4)


def test_a_word_leaves_the_world_size_to_the_node() -> None:
    assert processes(make_job("d", workers=1, command=["torchrun", "train.py"])) == ("auto", None)
    assert processes(make_job("e", workers=1, command=["torchrun", "train.py"], nproc_per_node="gpu")) == ("gpu", None)
    elastic = make_job("f", workers=2, master=False, command=["torchrun", "t.py"], restart_scope=None,
                       elastic={"minReplicas": 1, "maxReplicas": 4, "nProcPerNode": 3})
    assert processes(elastic) == ("3", 6)


def test_a_launcher_of_its_own_decides_and_an_unread_nproc_per_node_is_said() -> None:
    """Issue 47: `accelerate launch` starts its processes by its own flags; nprocPerNode is read by torchrun
    only, so a job whose replicas do not start it is told so (the field, why, the fix)."""
    from torchjob.api.spec_facts import ignored_nproc, own_launcher

    acc = make_job("g", workers=1, command=["accelerate", "launch", "t.py"], nproc_per_node=2)
    assert processes(acc) == ("accelerate launch", None)
    said = ignored_nproc(acc)
    assert said is not None and said.startswith("spec.nprocPerNode: 2 is ignored: no replica's command starts torchrun")
    assert "accelerate launch starts each replica's processes by its own flags" in said
    assert "fix: start the command with torchrun" in said
    plain = ignored_nproc(make_job("h", workers=1, command=["python", "t.py"], nproc_per_node=4))
    assert plain is not None and "each replica runs its command as one process" in plain
    assert ignored_nproc(make_job("i", workers=1, command=["torchrun", "t.py"], nproc_per_node=4)) is None
    assert ignored_nproc(make_job("j", workers=1, command=["python", "t.py"])) is None  # not set
    assert ignored_nproc(make_job("k", workers=1, command=["python", "t.py"], nproc_per_node=1)) is None
    commands = (["deepspeed", "t.py"], ["tune", "run", "r"], ["tune", "ls"], ["/v/bin/accelerate", "launch"],
                ["accelerate", "config"], [])
    assert [own_launcher(a) for a in commands] == ["deepspeed", "tune run", None, "accelerate launch", None, None]


def test_a_console_script_beside_torchjob_is_found_when_not_on_path() -> None:
    """Issue 47: `accelerate` installed beside torchjob (its environment's bin), not on PATH, starts."""
    from torchjob.local.inspect.render import environment_bin, resolve_argv

    assert (environment_bin() / "accelerate").is_file()  # the test extra installs it there
    assert resolve_argv(["accelerate", "launch", "t.py"], True, "/usr/bin:/bin") == [
        str(environment_bin() / "accelerate"), "launch", "t.py"]
    assert resolve_argv(["accelerate", "launch"], False, "/usr/bin:/bin") == ["accelerate", "launch"]  # asked not to
    assert resolve_argv(["no-such-launcher-here", "x"], True, "/usr/bin:/bin") == ["no-such-launcher-here", "x"]
    assert resolve_argv(["sh", "-c", "true"], True, "/usr/bin:/bin") == ["sh", "-c", "true"]  # on PATH: as it is
