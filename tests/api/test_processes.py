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
