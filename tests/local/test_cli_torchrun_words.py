"""The command line as torchrun users type it (issue 31): --nproc-per-node auto|gpu|cpu, --max-restarts
N for a job built from flags, --local-ranks-filter for --ranks-filter, the warning before a job that
starts more processes than GPUs, the hint that keeps torchjob's own flags before `--`, and `run
--help`'s groups and examples. Real processes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from tests.local.conftest import Torchjob

FLAKY = """\
import os, pathlib
mark = pathlib.Path("tried")
if not mark.exists():
    mark.write_text("once")
    raise SystemExit("a transient failure")
print("second try ok")
"""


@pytest.mark.e2e
def test_max_restarts_restarts_a_job_built_from_flags(torchjob: Torchjob, tmp_path: Path) -> None:
    (tmp_path / "flaky.py").write_text(FLAKY)
    proc = torchjob("run", "-j", "1x1", "--max-restarts", "1", "--name", "flaky", "flaky.py", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "second try ok" in proc.stdout
    desc = torchjob.describe("flaky")
    assert desc["status"]["restartCount"] == 1
    (tmp_path / "tried").unlink()
    proc = torchjob("run", "-j", "1x1", "--name", "once", "flaky.py", cwd=tmp_path)
    assert proc.returncode == 1  # without it a -j job is not restarted, as torchrun's default


def test_torchrun_words_land_in_the_document(torchjob: Torchjob, tmp_path: Path) -> None:
    (tmp_path / "t.py").write_text("print(1)\n")
    for word in ("auto", "gpu", "cpu"):
        dry = torchjob("run", "--nproc-per-node", word, "--max-restarts", "2", "--name", "w", "t.py", "--dry-run",
                       "-o", "json", cwd=tmp_path)
        assert dry.returncode == 0, dry.stderr
        spec = json.loads(dry.stdout)["spec"]
        assert spec["nprocPerNode"] == word and spec["runPolicy"]["backoffLimit"] == 2
        assert {r["restartPolicy"] for r in spec["pytorchReplicaSpecs"].values()} == {"OnFailure"}
    elastic = torchjob("run", "-j", "1:2x1", "--max-restarts", "5", "t.py", "--dry-run", cwd=tmp_path)
    assert yaml.safe_load(elastic.stdout)["spec"]["elasticPolicy"]["maxRestarts"] == 5
    bad = torchjob("run", "--nproc-per-node", "lots", "t.py", cwd=tmp_path)
    assert bad.returncode == 2 and "'lots' is not a number of processes, auto, gpu or cpu" in bad.stderr


def test_the_hint_keeps_torchjobs_flags_before_dashdash(torchjob: Torchjob, tmp_path: Path) -> None:
    (tmp_path / "t.py").write_text("print(1)\n")
    proc = torchjob("run", "-j", "1x1", "t.py", "--lr", "0.1", "--name", "x", "-e", "A=1", "--seed=3", cwd=tmp_path)
    assert proc.returncode == 2
    assert "torchjob run -j 1x1 --name x -e A=1 t.py -- --lr 0.1 --seed=3\n" in proc.stderr, proc.stderr
    # an unknown option before the script is a mistake of torchjob's flags, not the script's: no move
    proc = torchjob("run", "--max-restart", "1", "t.py", cwd=tmp_path)
    assert proc.returncode == 2 and "fix:" not in proc.stderr and "Did you mean '--max-restarts'" in proc.stderr


def test_a_job_of_more_processes_than_gpus_is_warned_about() -> None:
    from torchjob.api.build import Entry, JobSpec, build, parse_shape
    from torchjob.cli.quick import gpu_advice

    job = build(JobSpec(Entry(script=__file__), parse_shape("1x2"), "g", working_dir=os.getcwd())).job
    advice = gpu_advice(job, 1)
    assert advice is not None and "2 processes" in advice and "1 GPU" in advice and "--nproc-per-node gpu" in advice
    assert gpu_advice(job, 0) is None and gpu_advice(job, 2) is None  # no GPUs: a CPU job; enough: fine


def test_run_help_groups_its_flags_and_shows_examples(torchjob: Torchjob) -> None:
    out = torchjob("run", "--help", check=True).stdout
    sections = [line for line in out.splitlines() if line and not line.startswith(" ") and line.endswith(":")]
    assert sections == ["The job (torchrun's and TorchX's flags):", "What is shown:", "On this machine:",
                        "On a cluster (with --kube):", "Other options:"], sections
    cluster = out.split("On a cluster (with --kube):")[1].split("Other options:")[0]
    for flag in ("--kube", "--image", "--namespace", "--context", "--kubeconfig", "--include"):
        assert flag in cluster
    assert "Examples:" in out and "torchjob run -j 1x4 train.py -- --lr 0.1" in out
    top = torchjob("--help", check=True).stdout
    assert "or with --kube on a Kubernetes cluster" in top
    commands = top.split("Commands:")[1]
    assert "..." not in commands, commands  # every summary whole, not cut at the terminal's width


@pytest.mark.e2e
def test_local_ranks_filter_is_torchruns_word_for_ranks_filter(torchjob: Torchjob, tmp_path: Path) -> None:
    (tmp_path / "r.py").write_text("import os\nprint('rank', os.environ['RANK'])\n")
    proc = torchjob("run", "-j", "1x2", "--local-ranks-filter", "1", "--name", "lrf", "r.py", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "[master-0] [rank1]: rank 1" in proc.stdout and "[rank0]" not in proc.stdout, proc.stdout
    logged = torchjob("logs", "lrf", "--local-ranks-filter", "0", check=True).stdout
    assert "[master-0] [rank0]: rank 0" in logged and "[rank1]" not in logged, logged
    moved = torchjob("run", "-j", "1x2", "r.py", "--lr", "0.1", "--local-ranks-filter", "0", cwd=tmp_path)
    assert moved.returncode == 2, moved.stderr  # the hint knows it as torchjob's own
    assert "torchjob run -j 1x2 --local-ranks-filter 0 r.py -- --lr 0.1\n" in moved.stderr, moved.stderr
