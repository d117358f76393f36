"""`torchjob run|submit` without a document, as torchrun and TorchX users type it: real processes,
real torchrun, real torch.distributed (gloo over loopback)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
import yaml

from tests.local.conftest import PROGRAMS, Torchjob, job_processes, state_of

pytestmark = pytest.mark.e2e
STEP = str(PROGRAMS / "ddp_step.py")
# Prints its global rank, the world size and its arguments, after an all-reduce over every process.
SCRIPT = """\
import os, sys
import torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(1)
dist.all_reduce(t)
# one write per line: the processes of a replica share its output, and print's two writes interleave
sys.stdout.write(f"rank {dist.get_rank()} of {dist.get_world_size()} sum {int(t.item())} args {sys.argv[1:]}\\n")
sys.stdout.flush()
dist.destroy_process_group()
"""


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "train.py"
    path.write_text(SCRIPT)
    return path


def ranks(out: str) -> list[int]:
    return sorted(int(m) for m in re.findall(r"rank (\d+) of", out))


def test_run_j_1x2_runs_two_processes_through_torchrun(torchjob: Torchjob, script: Path) -> None:
    proc = torchjob("run", "-j", "1x2", "--name", "q12", str(script), "--", "--lr", "0.1", cwd=script.parent)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert ranks(proc.stdout) == [0, 1], proc.stdout
    assert "of 2 sum 2 args ['--lr', '0.1']" in proc.stdout
    assert "job q12 succeeded" in proc.stderr
    desc = torchjob.describe("q12")
    assert state_of(desc) == "Succeeded" and job_processes(desc["job"]["metadata"]["uid"]) == []


def test_two_replicas_of_two_processes_make_a_world_of_four(torchjob: Torchjob, script: Path) -> None:
    proc = torchjob("run", "--nnodes", "2", "--nproc-per-node", "2", "--name", "q22", "train.py", cwd=script.parent)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert ranks(proc.stdout) == [0, 1, 2, 3] and "sum 4" in proc.stdout
    assert "[worker-0] [rank2]: rank 2 of 4" in proc.stdout and "[worker-0] [rank3]: rank 3 of 4" in proc.stdout


def test_dry_run_prints_a_document_that_runs_the_same_job(torchjob: Torchjob, script: Path, tmp_path: Path) -> None:
    dry = torchjob("run", "-j", "2x1", "--name", "kept", "--env", "GREETING=hi", str(script), "--dry-run", "-o",
                   "yaml", "--", "x")
    assert dry.returncode == 0, dry.stderr
    doc = yaml.safe_load(dry.stdout)
    assert doc["kind"] == "TorchJob" and doc["metadata"]["name"] == "kept" and doc["spec"]["nprocPerNode"] == "1"
    assert torchjob("list", "-o", "json").stdout.strip() in ("[]", "")  # nothing started
    kept = tmp_path / "kept.yaml"
    kept.write_text(dry.stdout)
    proc = torchjob("run", str(kept))
    assert proc.returncode == 0, proc.stderr
    assert ranks(proc.stdout) == [0, 1] and "args ['x']" in proc.stdout


def test_a_kube_dry_run_prints_every_object_it_would_create(torchjob: Torchjob, script: Path,
                                                            tmp_path: Path) -> None:
    """The code's ConfigMap before the job: a kept file applies as it is (`kubectl apply -f`)."""
    torchjob.env["KUBECONFIG"] = str(tmp_path / "no-kubeconfig")  # offline: no cluster is asked
    dry = torchjob("run", "-j", "1x1", "--kube", "--image", "img", "--name", "kk", str(script), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    cm, job = yaml.safe_load_all(dry.stdout)
    assert cm["kind"] == "ConfigMap" and cm["metadata"]["name"] == "kk-code" and cm["data"] == {
        "train.py": script.read_text()}
    volume = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["volumes"][0]
    assert job["kind"] == "TorchJob" and volume["configMap"]["name"] == "kk-code"
    listed = json.loads(torchjob("run", "-j", "1x1", "--kube", "--image", "img", "--name", "kk", str(script),
                                 "--dry-run", "-o", "json").stdout)
    assert listed["kind"] == "List" and [o["kind"] for o in listed["items"]] == ["ConfigMap", "TorchJob"]
    assert "ConfigMap kk-code" in dry.stderr


def test_a_directory_ships_without_its_dotfiles_and_ignored_files_unless_included(torchjob: Torchjob,
                                                                                   tmp_path: Path) -> None:
    """`--include` ships what a directory leaves out; run says which files go before it asks a cluster."""
    project = tmp_path / "proj"
    project.mkdir()
    (project / "__main__.py").write_text("print('hi')\n")
    (project / ".env").write_text("TOKEN=x\n")
    (project / ".gitignore").write_text("*.ckpt\n")
    (project / "w.ckpt").write_text("w\n")
    torchjob.env["KUBECONFIG"] = str(tmp_path / "no-kubeconfig")  # offline: no cluster is asked
    dry = torchjob("run", "-j", "1x1", "--kube", "--image", "img", "--name", "kk", str(project), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    cm = next(yaml.safe_load_all(dry.stdout))
    assert set(cm["data"]) == {"__main__.py"}
    assert "left out: .env (a dotfile), .gitignore (a dotfile), w.ckpt (.gitignore)" in dry.stderr
    dry = torchjob("run", "-j", "1x1", "--kube", "--image", "img", "--name", "kk", "--include", ".env", str(project),
                   "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert set(next(yaml.safe_load_all(dry.stdout))["data"]) == {"__main__.py", ".env"}
    real = torchjob("run", "-j", "1x1", "--kube", "--image", "img", "--name", "kk", str(project))
    assert real.returncode == 2 and "no Kubernetes configuration" in real.stderr  # said before the cluster is asked
    assert "goes in ConfigMap kk-code: __main__.py; left out: .env (a dotfile)" in real.stderr
    (project / "creds").symlink_to(tmp_path / "secret")
    (tmp_path / "secret").write_text("password\n")
    refused = torchjob("run", "-j", "1x1", "--kube", "--image", "img", str(project), "--dry-run")
    assert refused.returncode == 2 and "creds is a link to" in refused.stderr and "Traceback" not in refused.stderr
    assert "password" not in refused.stdout


def test_a_module_and_a_command(torchjob: Torchjob, tmp_path: Path) -> None:
    (tmp_path / "steppkg").mkdir()
    (tmp_path / "steppkg" / "__init__.py").write_text("")
    (tmp_path / "steppkg" / "main.py").write_text(SCRIPT)
    mod = torchjob("run", "-j", "1x2", "-m", "steppkg.main", "--name", "mod", "--", "a", cwd=tmp_path)
    assert mod.returncode == 0, mod.stderr
    assert ranks(mod.stdout) == [0, 1] and "args ['a']" in mod.stdout
    cmd = torchjob("run", "-j", "1x2", "--name", "cmd", "--", "sh", "-c", 'echo "local rank $LOCAL_RANK"')
    assert cmd.returncode == 0, cmd.stderr
    assert sorted(re.findall(r"local rank (\d)", cmd.stdout)) == ["0", "1"]


def test_elastic_min_max_runs_its_workers(torchjob: Torchjob, script: Path) -> None:
    proc = torchjob("run", "-j", "1:2x1", "--name", "el", str(script))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert ranks(proc.stdout) == [0, 1] and "[worker-1]" in proc.stdout and "[master-0]" not in proc.stdout


def test_submit_builds_the_same_job_detached(torchjob: Torchjob, script: Path) -> None:
    sub = torchjob("submit", "-j", "1x2", "--name", "sub", str(script))
    assert sub.returncode == 0, sub.stderr
    desc = torchjob.wait_for("sub", lambda d: state_of(d) in ("Succeeded", "Failed"))
    assert state_of(desc) == "Succeeded"
    assert ranks(torchjob("logs", "sub").stdout) == [0, 1]


@pytest.mark.parametrize("args,words", [
    (["-j", "0x2", "S"], "-j '0x2' asks for 0 replica(s)"),
    (["-j", "2x", "S"], "-j '2x' is not NxM"),
    (["-j", "1x2", "missing.py"], "script 'missing.py' does not exist"),
    (["-j", "1x2", "--kube", "S"], "--kube needs --image"),
    (["-j", "1x2", "S", "extra"], "a script's arguments go after --"),
    (["-j", "1x2", "--env", "NOEQUALS", "S"], "--env 'NOEQUALS' is not K=V"),
    (["-j", "1x2", "examples/ddp/job.yaml"], "-j: these build a job from a script"),
    (["--name", "Not_A_Name", "S"], "metadata.name"),
    ([], "nothing to run"),
])
def test_bad_input_is_exit_2_with_a_fix_and_starts_nothing(torchjob: Torchjob, script: Path, args: list[str],
                                                           words: str) -> None:
    for verb in ("run", "submit"):
        proc = torchjob(verb, *[str(script) if a == "S" else a for a in args])
        assert proc.returncode == 2, (verb, args, proc.stdout, proc.stderr)
        assert words in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
        assert "fix:" in proc.stderr or "fix" in proc.stderr
    assert json.loads(torchjob("list", "-o", "json").stdout or "[]") == []
    assert not (torchjob.home / "jobs").exists() or os.listdir(torchjob.home / "jobs") == []


def test_run_job_yaml_is_unchanged(torchjob: Torchjob) -> None:
    proc = torchjob("run", "examples/ddp/job.yaml", "-q")
    assert proc.returncode == 0, proc.stderr
    assert "job ddp-example succeeded" in proc.stderr


def test_code_past_the_configmap_limit_is_refused_before_anything_is_made(torchjob: Torchjob, tmp_path: Path) -> None:
    project = tmp_path / "big"
    project.mkdir()
    (project / "__main__.py").write_text("print('hi')\n")
    (project / "weights.bin").write_bytes(os.urandom(1024 * 1024))
    # No cluster is reachable here (KUBECONFIG names no file): the refusal comes before any request.
    torchjob.env["KUBECONFIG"] = str(tmp_path / "no-kubeconfig")
    proc = torchjob("run", "-j", "1x1", "--kube", "--image", "img", str(project))
    assert proc.returncode == 2, proc.stderr
    assert "is 1,048,588 bytes; code shipped in a ConfigMap may be at most 1,032,192 bytes" in proc.stderr
    assert "Traceback" not in proc.stderr and "fix: put large files" in proc.stderr
