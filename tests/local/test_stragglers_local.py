"""A straggler on the local runtime: a real 3-replica torch job (gloo) whose worker-1 works twice as
long per step as the others, who wait for it in each step's all-reduce; and a real torchrun job of
one replica and three workers whose rank 2 does, named by its replica and rank."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.jobs import job_data
from tests.local.conftest import PROGRAMS, Torchjob, write_job

pytestmark = pytest.mark.e2e


def test_a_rank_twice_as_slow_is_named_once_and_the_job_is_not_stalled(torchjob: Torchjob, tmp_path: Path) -> None:
    # 60 steps of 0.2 s (the slow rank's pace, which the others wait for): 12 s, past the 10 s of reports
    # a step time needs; progressDeadlineSeconds would catch a rank that stopped reporting, not a slow one
    data = job_data("straggle", workers=2, run_policy={"progressDeadlineSeconds": 8},
                    command=["python", str(PROGRAMS / "ddp_progress.py"), "--steps", "60", "--step-time", "0.1",
                             "--slow-replica", "worker-1"])
    proc = torchjob("run", str(write_job(tmp_path / "straggle.yaml", data)), timeout=120)
    assert proc.returncode == 0, proc.stderr
    desc = torchjob.describe("straggle")
    events = [e for e in desc["events"] if e["reason"].startswith("Straggler")]
    assert [(e["type"], e["reason"]) for e in events] == [("Warning", "Straggler")], desc["events"]
    assert events[0]["message"].startswith("worker-1: ") and events[0]["message"].endswith(
        "x the median step time over the last minute"), events[0]
    factor = float(events[0]["message"].split(": ")[1].split("x")[0])
    assert 1.5 <= factor <= 2.5, events[0]
    # named while it ran, within two minutes of its first report
    started = datetime.fromisoformat(desc["status"]["startTime"])
    named = events[0]["time"]
    named = datetime.fromtimestamp(named, UTC) if isinstance(named, float | int) else datetime.fromisoformat(named)
    assert (named - started).total_seconds() < 120, (named, started)
    assert not any(e["reason"] == "Stalled" for e in desc["events"])
    stragglers = desc["status"]["progress"]["stragglers"]
    assert [s["replica"] for s in stragglers] == ["worker-1"] and stragglers[0]["stepSeconds"] >= 0.15
    text = torchjob("describe", "straggle", check=True).stdout
    assert "Stragglers:  worker-1: " in text, text
    assert "(straggler worker-1)" in torchjob("list", check=True).stdout


def test_a_torchrun_worker_twice_as_slow_is_named_by_its_replica_and_rank(torchjob: Torchjob, tmp_path: Path) -> None:
    """Under torchrun each worker's report carries its RANK (LOCAL_WORLD_SIZE > 1): the slow one is timed on its
    own, among its replica's other workers."""
    data = job_data("ranks", workers=0, nproc_per_node=3, run_policy={"progressDeadlineSeconds": 8},
                    command=["torchrun", str(PROGRAMS / "ddp_progress.py"), "--steps", "60", "--step-time", "0.1",
                             "--slow-replica", "rank-2"])
    proc = torchjob("run", str(write_job(tmp_path / "ranks.yaml", data)), timeout=180)
    assert proc.returncode == 0, proc.stderr
    desc = torchjob.describe("ranks")
    events = [e for e in desc["events"] if e["reason"].startswith("Straggler")]
    assert [(e["type"], e["reason"]) for e in events] == [("Warning", "Straggler")], desc["events"]
    assert events[0]["message"].startswith("master-0 rank 2: "), events[0]
    assert not any(e["reason"] == "Stalled" for e in desc["events"])
    stragglers = desc["status"]["progress"]["stragglers"]
    assert [(s["replica"], s.get("rank")) for s in stragglers] == [("master-0", 2)], stragglers
    assert "(straggler master-0 rank 2)" in torchjob("list", check=True).stdout
