"""A TrainJob whose runtime has dataset and model initializers, run locally (`torchjob run`): the
initializers run as processes before the nodes, the workspace a directory (hostPath) mounted at
/workspace as the runtime says; a failing initializer is the job's root cause and no node starts.
The initializers are a stand-in that copies from a local directory (no model hub can be reached
here): tests/trainjob_initializers.py."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.local.conftest import Torchjob
from tests.trainjob_initializers import runtime, trainjob


def document(tmp_path: Path, name: str, dataset: str) -> Path:
    rt = runtime("torch-with-initializers", str(tmp_path / "workspace"), node_image="train:1", local=True)
    job = trainjob(name, "torch-with-initializers", dataset, "hf://tj/tiny-model")
    path = tmp_path / "trainjob.yaml"
    path.write_text(yaml.safe_dump_all([job, rt], sort_keys=False))
    return path


def test_the_initializers_fill_the_workspace_before_the_nodes_start(torchjob: Torchjob, tmp_path: Path) -> None:
    proc = torchjob("run", str(document(tmp_path, "init-ok", "hf://tj/tiny-data")), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    first_node = next(i for i, line in enumerate(lines) if line.startswith("[master-0]"))
    done = [i for i, line in enumerate(lines) if "has been downloaded" in line]
    assert len(done) == 2 and max(done) < first_node, proc.stdout  # both initializers, then the nodes
    assert "[dataset-initializer-0] Downloading dataset: tj/tiny-data" in proc.stdout
    # each node sees what both wrote; the model's *.bin skipped as the SDK's IGNORE_PATTERNS say
    seen = "workspace: ['dataset/train.jsonl', 'model/config.json']"
    assert proc.stdout.count(seen) == 2, proc.stdout
    assert (tmp_path / "workspace" / "dataset" / "train.jsonl").read_text().startswith('{"text"')


def test_a_failing_initializer_is_the_root_cause_and_no_node_starts(torchjob: Torchjob, tmp_path: Path) -> None:
    proc = torchjob("run", str(document(tmp_path, "init-bad", "hf://tj/missing")), cwd=tmp_path)
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert "RepositoryNotFoundError: dataset tj/missing is not on the hub" in out, out
    assert "initializer dataset-initializer failed (exit code 1)" in out, out
    assert "[master-0]" not in out and "master-0 started" not in out
    shown = torchjob("describe", "init-bad").stdout
    assert "State:       Failed (InitializerFailed)" in shown, shown
    assert "replica   : dataset-initializer-0 (attempt 0)" in shown  # the root cause: no rank
    assert "  dataset-initializer-0  0        " in shown  # its attempts, in a column as wide as their names


def test_the_workspace_claimed_by_volume_claim_policies_is_a_directory_of_the_job(
        torchjob: Torchjob, tmp_path: Path) -> None:
    """Trainer's torchtune runtimes' shape: no pod volume, a volumeClaimPolicies template `initializer`
    mounted at /workspace by the initializers and the node; locally the claim `initializer-NAME` is a
    directory of the job's, shared by its processes (before: 'exists only on a cluster')."""
    rt = runtime("torch-with-claim", None, node_image="train:1", local=True)
    path = tmp_path / "trainjob.yaml"
    path.write_text(yaml.safe_dump_all([trainjob("claim-ok", "torch-with-claim", "hf://tj/tiny-data",
                                                 "hf://tj/tiny-model"), rt], sort_keys=False))
    proc = torchjob("run", str(path), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    seen = "workspace: ['dataset/train.jsonl', 'model/config.json']"
    assert proc.stdout.count(seen) == 2, proc.stdout  # each node reads what both initializers wrote
