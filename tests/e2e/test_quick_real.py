"""A job built without a document, on the real node: `torchjob run -j 1x2 --kube --image ... script.py`
and `Job.from_function(...).submit(kube=True)`. The code reaches the pods in a ConfigMap made for the
job and owned by it: Kubernetes' garbage collector deletes it with the job."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from lightkube import Client
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import ConfigMap

import torchjob
from tests.docs.blocks import tested as blocks
from tests.docs.console import sessions as console
from tests.docs.console import shell_env
from tests.e2e.conftest import INIT_IMAGE, wait_for
from tests.kube.conftest import REPO
from torchjob.kube.machinery.client import TorchJobRes

pytestmark = pytest.mark.kube
IMAGE = INIT_IMAGE  # Debian with python, torchrun and torch (the node's virtualenv), no test code in it
SCRIPT = """\
import sys
import torch, torch.distributed as dist
from helper import greeting
dist.init_process_group("gloo")
t = torch.ones(1)
dist.all_reduce(t)
rank, world = dist.get_rank(), dist.get_world_size()
sys.stdout.write(f"{greeting()} rank {rank} of {world} sum {int(t.item())} {sys.argv[1:]}\\n")
sys.stdout.flush()  # one write per line: the processes of a pod share its output
dist.destroy_process_group()
"""


def cli(kubeconfig: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    return subprocess.run([sys.executable, "-m", "torchjob", *args], capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL, cwd=cwd, env={**env, "KUBECONFIG": kubeconfig})


def configmap(node: Client, name: str, ns: str) -> Any:
    try:
        return node.get(ConfigMap, name, namespace=ns)
    except ApiError as e:
        if e.status.code == 404:
            return None
        raise


def test_run_j_1x2_kube_ships_the_script_and_its_directory(node_kubeconfig: str, node: Client, ns: str,
                                                          tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text(SCRIPT)
    (project / "helper.py").write_text("def greeting():\n    return 'hello from a sibling module'\n")
    (project / "__main__.py").write_text(SCRIPT)
    # A file: only it travels (its sibling is not there).
    alone = cli(node_kubeconfig, "run", "-j", "1x2", "--kube", "--image", IMAGE, "--name", "alone", "-n", ns,
                "train.py", cwd=project)
    assert alone.returncode == 1, alone.stdout + alone.stderr
    assert "No module named 'helper'" in cli(node_kubeconfig, "logs", "--kube", "-n", ns, "alone",
                                             cwd=project).stdout
    # The directory (run as `python DIR` runs it): the script with its module, as real pods.
    run = cli(node_kubeconfig, "run", "-j", "1x2", "--kube", "--image", IMAGE, "--name", "proj", "-n", ns,
              str(project), "--", "--lr", "0.1", cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "torchjob: job proj succeeded" in run.stderr
    logs = cli(node_kubeconfig, "logs", "--kube", "-n", ns, "proj", cwd=tmp_path).stdout
    found = sorted(int(r) for r in re.findall(r"hello from a sibling module rank (\d) of 2 sum 2 \['--lr', '0.1'\]",
                                              logs))
    assert found == [0, 1], logs
    # each process's lines behind its rank, as locally (torchrun's tee in the pod), and one rank followed
    for rank in (0, 1):
        assert re.search(rf"^\[master-0\] \[rank{rank}\]: hello from a sibling module rank {rank} of 2", logs,
                         re.M), logs
    one = cli(node_kubeconfig, "logs", "--kube", "-n", ns, "proj", "--ranks-filter", "1", cwd=tmp_path).stdout
    assert "rank 1 of 2" in one and "rank 0 of 2" not in one, one
    # The ConfigMap is the job's, and goes with it.
    cm = configmap(node, "proj-code", ns)
    uid = node.get(TorchJobRes, "proj", namespace=ns).metadata.uid
    assert cm is not None and [(o.kind, o.uid) for o in cm.metadata.ownerReferences] == [("TorchJob", uid)]
    assert set(cm.data) >= {"train.py", "helper.py", "__main__.py"}
    assert cli(node_kubeconfig, "delete", "--kube", "-n", ns, "proj", cwd=tmp_path).returncode == 0
    wait_for("the job's ConfigMap to be collected", lambda: configmap(node, "proj-code", ns) is None, timeout=120)


def train(steps: int) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    t = torch.ones(1) * (dist.get_rank() + 1)
    dist.all_reduce(t)
    import sys

    sys.stdout.write(f"rank {dist.get_rank()} sum {int(t.item())}\n")  # one write: the processes share the output
    sys.stdout.flush()
    out = {"world": dist.get_world_size(), "sum": int(t.item()), "steps": steps}
    dist.destroy_process_group()
    return out


def test_a_function_submitted_to_the_cluster_returns_its_value(node_kubeconfig: str, node: Client, ns: str) -> None:
    job = torchjob.Job.from_function(train, args=(7,), nnodes=2, nproc_per_node=2, image=IMAGE, name="fn")
    handle = job.submit(kube=True, namespace=ns, kubeconfig=node_kubeconfig)
    assert handle.kube and handle.namespace == ns
    result = handle.wait(timeout=300)
    assert result.ok, (result.state, result.root_cause, handle.logs())
    assert result.value == {"world": 4, "sum": 10, "steps": 7}  # ranks 1..4 over 2 pods of 2 processes
    assert "[worker-0] [rank3]: rank 3 sum 10" in handle.logs() and "[worker-0] [rank2]: rank 2 sum 10" in handle.logs()
    assert configmap(node, "fn-code", ns) is not None
    handle.delete()
    wait_for("the function's ConfigMap to be collected", lambda: configmap(node, "fn-code", ns) is None, timeout=120)


def test_the_kube_example_of_the_docs_runs(node_kubeconfig: str, ns: str, tmp_path: Path) -> None:
    (block,) = blocks("guide/command-line.md", "tests/e2e/test_quick_real.py::test_the_kube_example_of_the_docs_runs")
    shutil.copy(REPO / "examples" / "ddp" / "train.py", tmp_path / "train.py")
    env = {**shell_env(tmp_path), "IMAGE": IMAGE, "NAMESPACE": ns, "KUBECONFIG": node_kubeconfig}
    for cmd, _ in console(block):
        proc = subprocess.run(["bash", "-c", cmd], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=400)
        assert proc.returncode == 0, (cmd, proc.stdout, proc.stderr)
        assert re.search(r"torchjob: job train-\w+ succeeded", proc.stderr), proc.stderr


def test_the_python_kube_example_of_the_docs_runs(node_kubeconfig: str, ns: str, tmp_path: Path) -> None:
    (code,) = blocks("guide/python.md", "tests/e2e/test_quick_real.py::test_the_python_kube_example_of_the_docs_runs")
    (tmp_path / "example.py").write_text(code)
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "IMAGE": IMAGE, "NAMESPACE": ns,
           "KUBECONFIG": node_kubeconfig}
    proc = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "configMap:" in proc.stdout and "/opt/torchjob/code" in proc.stdout
    assert proc.stdout.rstrip().endswith("[]")  # deleted: the namespace has no job left
