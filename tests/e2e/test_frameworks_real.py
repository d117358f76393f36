"""The frameworks people train with, on real pods (issue 47; tests/local/test_frameworks.py runs the same
scripts locally): shipped by `torchjob run -j NxM --kube SCRIPT`, each replica a pod of the node's
Debian image whose python has the packages (the node's virtualenv: lightning, transformers). Tiny models
built from configs, random data, no download.

- transformers' Trainer in 2x1: its own Kubeflow progress callback, unchanged, reports through the
  operator's endpoint; the trainer's steps reach `describe --kube`, `list --kube` and the dashboard's
  job (the same view its page draws).
- Lightning in 2x2 (two pods of two ranks each), rank 3 raising at its first step: the root cause on the cluster quotes
  rank 3's own exception, not a peer's follow-on gloo error."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from lightkube import Client

from tests.e2e.conftest import INIT_IMAGE
from tests.e2e.test_quick_real import cli
from tests.local.conftest import PROGRAMS
from torchjob.connect import Target
from torchjob.ui.source import Source

pytestmark = pytest.mark.kube
FRAMEWORKS = PROGRAMS / "frameworks"
OFFLINE = ["--env", "HF_HUB_OFFLINE=1", "--env", "TRANSFORMERS_OFFLINE=1", "--env", "TOKENIZERS_PARALLELISM=false"]


def project(tmp_path: Path, name: str) -> Path:
    where = tmp_path / name.removesuffix(".py")
    where.mkdir()
    shutil.copy(FRAMEWORKS / name, where / name)
    return where


def test_transformers_progress_reaches_describe_list_and_the_dashboard_on_real_pods(
        node_kubeconfig: str, node: Client, ns: str, tmp_path: Path) -> None:
    where = project(tmp_path, "hf_train.py")
    run = cli(node_kubeconfig, "run", "-j", "2x1", "--kube", "--image", INIT_IMAGE, "--name", "hf", "-n", ns,
              *OFFLINE, "hf_train.py", "--", "--steps", "10", cwd=where)
    assert run.returncode == 0, run.stdout + run.stderr
    assert re.search(r"\[master-0\] transformers done: rank 0 of 2, 10 steps", run.stdout), run.stdout
    described = cli(node_kubeconfig, "describe", "--kube", "-n", ns, "hf", cwd=where).stdout
    # the callback's current_step/total_steps are the report's step and total: its last report, at the end
    assert re.search(r"Progress:\s+100% · step 10/10", described), described
    listed = cli(node_kubeconfig, "list", "--kube", "-n", ns, cwd=where).stdout
    assert re.search(r"(?m)^hf\b.*\bSucceeded\b.*\b100%", listed), listed
    shown = Source(Target(kube=True, kubeconfig=node_kubeconfig, namespace=ns)).job(ns, "hf")
    assert shown["progress"]["step"] == 10 and shown["progress"]["total"] == 10, shown["progress"]


def test_lightning_2x2_rank_3_fails_and_the_root_cause_on_the_cluster_is_its_own(
        node_kubeconfig: str, node: Client, ns: str, tmp_path: Path) -> None:
    where = project(tmp_path, "lightning_train.py")
    run = cli(node_kubeconfig, "run", "-j", "2x2", "--kube", "--image", INIT_IMAGE, "--name", "lit", "-n", ns,
              "lightning_train.py", "--", "--fail-rank", "3", "--fail-step", "1", cwd=where)
    assert run.returncode == 1, run.stdout + run.stderr
    error = "RuntimeError: lightning: injected failure on global rank 3 at step 1"
    cause = run.stderr[run.stderr.index("Root cause"):]
    assert "worker-0" in cause and error in cause and "Connection closed" not in cause, cause
    described = cli(node_kubeconfig, "describe", "--kube", "-n", ns, "lit", cwd=where).stdout
    root = described[described.index("Root cause"):]
    assert error in root and "Connection closed" not in root, root
