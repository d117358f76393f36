"""The frameworks people train with, run as their users run them (issue 47): PyTorch Lightning,
transformers' Trainer and accelerate (`accelerate launch` as the command), real packages, tiny models
built from configs, random data, no download. Each: a failure on rank 1 whose root cause quotes rank
1's own exception (not rank 0's follow-on gloo error), in 1x2 (two ranks in one replica, their lines
interleaved) and 2x1 (one rank a replica) shapes; a Lightning document of Master and Worker in plain
mode (`python train.py`, each replica its own rank); the cores shared by one-process replicas; the
progress bars' lines whole and tagged. Importing these packages is slow (seconds of CPU each): few
runs, several checks each."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.jobs import job_data
from tests.local.conftest import PROGRAMS, Torchjob, write_job
from torchjob.local import ranktag

pytestmark = pytest.mark.e2e
FRAMEWORKS = PROGRAMS / "frameworks"
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false"}


def offline(torchjob: Torchjob) -> Torchjob:
    torchjob.env.update(OFFLINE)
    return torchjob


PAGE = "guide/frameworks.md"


def from_the_page(test: str, tmp_path: Path, *programs: str) -> list[str]:
    """The page's blocks this test claims: its scripts are the tests' own programs (copied to `tmp_path`,
    where the page's commands run them), the rest returned, in page order."""
    from tests.docs.blocks import tested

    blocks = tested(PAGE, test)
    scripts = [b for b in blocks if b.startswith('"""')]  # the page's python blocks of this test: whole programs
    for name in programs:
        text = (FRAMEWORKS / name).read_text()
        assert not scripts or text.rstrip("\n") in scripts, f"{PAGE}'s {name} is not the test's"
        (tmp_path / name).write_text(text)
    return [b for b in blocks if b not in scripts]


def shown_as_run(block: str, printed: str) -> None:
    """Each line of a page's output block is in what the run printed (numbers aside; `...` elides)."""
    numbered = re.sub(r"\d+", "N", printed)
    for line in block.splitlines()[1:]:  # the command's line aside
        if "..." not in line:
            assert re.sub(r"\d+", "N", line) in numbered, (line, printed)


def cause_of(stderr: str) -> str:
    return stderr[stderr.index("Root cause"):]


def quoted_block(described: str) -> str:
    """describe's root cause from its quote of the failing rank's own lines to the end."""
    return described[described.index("Root cause"):]


def test_the_rank_tag_keeps_a_progress_bar_whole_and_tags_once() -> None:
    """A process of a replica of several (the hook, as torchrun's workers load it): tqdm's redrawn bar is
    a tagged line of its own, never glued to another line; torch's own `[rank1]: ` is not doubled."""
    script = ("import sys, time\nfrom tqdm import tqdm\nprint('before', flush=True)\n"
              "for _ in tqdm(range(3), file=sys.stderr, mininterval=0): time.sleep(0.01)\n"
              "print('[rank1]: Traceback (most recent call last):')\nprint('after')\n")
    env = {**os.environ, **ranktag.env(None), "LOCAL_RANK": "1", "RANK": "1"}
    ran = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, timeout=60)
    out, err = ran.stdout, ran.stderr
    assert b"\r" not in err and all(line.startswith(b"[rank1]: ") for line in err.splitlines()), err
    assert err.splitlines()[-1].startswith(b"[rank1]: 100%|"), err  # the bar's end, tagged
    assert out.splitlines() == [b"[rank1]: before", b"[rank1]: Traceback (most recent call last):",
                                b"[rank1]: after"], out
    # a replica of one process (no hook): its bar's last state is the line, as a terminal leaves it
    assert ranktag.as_shown(b"\r 10%|#|\r 50%|##|\r    \r{'loss': 1.2}\n") == b"{'loss': 1.2}\n"
    assert ranktag.as_shown(b"plain\r\n") == b"plain\r\n"


def test_lightning_1x2_rank_1_fails_and_the_root_cause_is_its_own(torchjob: Torchjob, tmp_path: Path) -> None:
    (shown,) = from_the_page("test_lightning_1x2_rank_1_fails_and_the_root_cause_is_its_own", tmp_path,
                             "lightning_train.py")
    command = shown.splitlines()[0].removeprefix("$ torchjob ").split()
    assert command == ["run", "-j", "1x2", "--name", "lit", "lightning_train.py", "--", "--fail-rank", "1"]
    proc = torchjob(*command, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    if "rank 0 failed after it" in proc.stderr:  # the page's run; under load rank 0 may be stopped instead
        shown_as_run(shown, proc.stderr)
    error = "RuntimeError: lightning: injected failure on global rank 1 at step 5"
    cause = cause_of(proc.stderr)
    assert f"  error     : {error}" in cause, cause
    assert re.search(r"  raised at : \S+lightning_train\.py, line \d+, in training_step", cause), cause
    described = quoted_block(torchjob("describe", "lit", check=True).stdout)
    quote = described[described.index("lines of rank 1's own output:"):]
    assert quote.splitlines()[1].endswith("[rank1]: Traceback (most recent call last):"), described
    assert f"[rank1]: {error}" in quote and "[rank0]" not in quote and "Connection closed" not in quote, quote
    logged = torchjob("logs", "lit", check=True).stdout
    assert "[rank1]: [rank1]:" not in logged and "\r" not in logged  # torch's tag and torchjob's: once
    one = torchjob("logs", "lit", "--ranks-filter", "1", check=True).stdout
    assert error in one and "[rank0]" not in one, one


def test_lightning_document_of_master_and_worker_in_plain_mode(torchjob: Torchjob, tmp_path: Path) -> None:
    """`python train.py` in each replica, Lightning's defaults: each replica is its own global rank
    (Lightning reads torchrun's variables torchjob gives a one-process node); nprocPerNode is said to be
    ignored, and each of the 2 processes gets half the cores."""
    (document,) = from_the_page("test_lightning_document_of_master_and_worker_in_plain_mode", tmp_path,
                                "lightning_train.py")
    data = yaml.safe_load(document)
    path = write_job(tmp_path / "litdoc.yaml", data)
    assert "warning" not in torchjob("validate", str(path), check=True).stderr
    data["spec"]["nprocPerNode"] = "2"
    checked = torchjob("validate", str(write_job(tmp_path / "nproc.yaml", data)), check=True)
    assert "warning: spec.nprocPerNode: 2 is ignored: no replica's command starts torchrun" in checked.stderr
    assert "fix: start the command with torchrun" in checked.stderr
    proc = torchjob("run", str(path), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "[master-0] lightning done: global rank 0 of 2, 8 steps" in proc.stdout, proc.stdout
    assert "[worker-0] lightning done: global rank 1 of 2, 8 steps" in proc.stdout, proc.stdout
    assert "\r" not in proc.stdout  # its progress bar: the last state of each, a line
    described = torchjob("describe", "lightning", check=True).stdout
    assert "World size:  2 (2 replica(s) x 1 process(es) each)" in described, described
    rendered = torchjob("render", str(path), "-o", "json", check=True).stdout
    assert f'"OMP_NUM_THREADS": "{max(1, (os.cpu_count() or 1) // 2)}"' in rendered


def test_transformers_2x1_rank_1_fails_with_the_cores_shared(torchjob: Torchjob, tmp_path: Path) -> None:
    (shown,) = from_the_page("test_transformers_2x1_rank_1_fails_with_the_cores_shared", tmp_path, "hf_train.py")
    command = shown.splitlines()[0].removeprefix("$ torchjob ").split()
    assert command == ["run", "-j", "2x1", "--name", "hf", "hf_train.py", "--", "--fail-rank", "1"]
    proc = offline(torchjob)(*command, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    if "replica   : worker-0" in proc.stderr:  # the page's run; master-0 may end first (its gloo error named too)
        shown_as_run(shown, proc.stderr)
    error = "RuntimeError: transformers: injected failure on global rank 1 at step 5"
    cause = cause_of(proc.stderr)
    assert error in cause and "Connection closed" not in cause, cause  # worker-0's, or named under master-0's
    assert re.search(r"raised at : \S+hf_train\.py, line \d+, in on_step_end", cause), cause
    # one process a replica, two on this machine: each gets half its cores (13 s of training against 0.6 s)
    assert f"[master-0] threads {max(1, (os.cpu_count() or 1) // 2)}" in proc.stdout, proc.stdout
    assert "\r" not in proc.stdout and "\r" not in torchjob("logs", "hf", check=True).stdout
    assert "torchjob: progress: 0%" in proc.stderr  # transformers' own Kubeflow callback, unchanged, reports
    # and describe shows it (on real pods: tests/e2e/test_frameworks_real.py, to the last step)
    assert re.search(r"(?m)^Progress:\s+\d+%", torchjob("describe", "hf", check=True).stdout)


def test_accelerate_launch_is_found_and_its_rank_1_failure_is_the_root_cause(torchjob: Torchjob,
                                                                              tmp_path: Path) -> None:
    """`accelerate launch` from torchjob's environment (not on PATH), one process a replica, 2x1."""
    env_path = {"PATH": "/usr/bin:/bin"}  # accelerate is only beside torchjob's interpreter
    torchjob.env.update(env_path)
    (document,) = from_the_page("test_accelerate_launch_is_found_and_its_rank_1_failure_is_the_root_cause",
                                tmp_path, "accelerate_train.py")
    data = yaml.safe_load(document)
    for spec in data["spec"]["pytorchReplicaSpecs"].values():
        spec["template"]["spec"]["containers"][0]["command"] += ["--fail-rank", "1"]
    path = write_job(tmp_path / "acc.yaml", data)
    proc = torchjob("run", str(path), cwd=tmp_path)
    assert "cannot start" not in proc.stderr, proc.stderr
    assert proc.returncode == 1, proc.stdout + proc.stderr
    cause = cause_of(proc.stderr)
    assert "RuntimeError: accelerate: injected failure on process 1 at step 5" in cause, cause
    described = torchjob("describe", "accelerate", check=True).stdout
    assert "World size:  decided by accelerate launch in each replica" in described, described


FIRST_OWN = """\
import sys, time, traceback
import torch, torch.distributed as dist
dist.init_process_group("gloo")
if dist.get_rank() == 1:
    try:
        raise RuntimeError("rank 1 ran out of data")
    except RuntimeError:
        traceback.print_exc()
        sys.stderr.flush()
    dist.destroy_process_group()  # its peer's all-reduce fails at once; this replica ends later
    time.sleep(60)
    sys.exit(1)
dist.all_reduce(torch.zeros(1))
"""


def test_a_replica_that_failed_after_another_names_the_other_s_own_error(torchjob: Torchjob, tmp_path: Path) -> None:
    """2x1, plain: rank 1 raises; rank 0's replica (master-0) ends first, with gloo's follow-on error, and
    ends the job; the root cause quotes worker-0's own exception, not only master-0's."""
    (tmp_path / "first.py").write_text(FIRST_OWN)
    path = write_job(tmp_path / "first.yaml", job_data("first", workers=1, command=["python", "first.py"]))
    proc = torchjob("run", "--grace-period", "2", str(path), cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    described = torchjob("describe", "first", check=True).stdout
    cause = described[described.index("Root cause"):]
    assert "  replica   : master-0" in cause, cause  # the replica that ended the job
    assert "  own error : worker-0 raised it; master-0 failed after it, in a collective:" in cause, cause
    assert cause.rstrip("=\n").endswith("RuntimeError: rank 1 ran out of data"), cause
