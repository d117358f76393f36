"""A pod of a replica of several torchrun processes tags each process's lines with its rank, as a
local replica does (core.topology.tags_ranks decides for both): torchrun's own tee with a
`[rank${rank}]: ` prefix, its files in an emptyDir of torchjob's. The tee itself runs in a real pod in
tests/e2e/test_quick_real.py; here, what the pod is made of, and a real torchrun with that env."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.jobs import make_job
from torchjob.core.shape.topology import ReplicaId
from torchjob.kube.objects.workload.pods import RANK_TAG_DIR, RANK_TAG_ENV, RANK_TAG_VOLUME, pod

TORCHRUN = ["torchrun", "train.py"]


def env_of(p: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in p["spec"]["containers"][0]["env"]}


def test_a_replica_of_several_processes_tees_its_ranks_lines_into_torchjobs_empty_dir() -> None:
    p = pod(make_job(workers=1, command=TORCHRUN, nproc_per_node=2), ReplicaId("Worker", 0), 0)
    env = env_of(p)
    assert {k: env[k] for k in RANK_TAG_ENV} == {"PET_TEE": "3", "PET_LOG_LINE_PREFIX_TEMPLATE": "[rank${rank}]: ",
                                                 "PET_LOG_DIR": RANK_TAG_DIR}
    assert {"name": RANK_TAG_VOLUME, "emptyDir": {}} in p["spec"]["volumes"]
    assert {"name": RANK_TAG_VOLUME, "mountPath": RANK_TAG_DIR} in p["spec"]["containers"][0]["volumeMounts"]


def test_one_process_or_a_plain_command_is_not_tagged_and_a_users_pet_tee_wins() -> None:
    for job in (make_job(workers=1, command=TORCHRUN, nproc_per_node=1),
                make_job(workers=1, command=["python", "train.py"], nproc_per_node=2)):
        p = pod(job, ReplicaId("Master", 0), 0)
        assert "PET_TEE" not in env_of(p)
        assert RANK_TAG_VOLUME not in [v["name"] for v in p["spec"].get("volumes", [])]
    job = make_job(workers=0, command=TORCHRUN, nproc_per_node=2)
    data = job.model_dump(mode="json", exclude_none=True)
    data["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "PET_TEE", "value": "0"}]
    own = pod(type(job).model_validate(data), ReplicaId("Master", 0), 0)
    assert env_of(own)["PET_TEE"] == "0"


def test_torchrun_with_the_pods_env_tags_every_line_of_each_rank_once(tmp_path: Path) -> None:
    """The env a pod gets, given to this machine's torchrun: each of two processes' 2,000 lines, on
    stdout and stderr alike, comes out once, whole, behind its rank's tag."""
    script = tmp_path / "many.py"
    script.write_text("import os, sys\nr = os.environ['RANK']\n"
                      "for i in range(2000):\n    print(f'line {i} of {r}')\n"
                      "print(f'last words of {r}', file=sys.stderr)\n")
    env = {**os.environ, **RANK_TAG_ENV, "PET_LOG_DIR": str(tmp_path / "logs"), "PET_NPROC_PER_NODE": "2",
           "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", str(script)], env=env,
                         capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stderr[-2000:]
    lines = run.stdout.splitlines()
    for rank in (0, 1):
        mine = [line for line in lines if line.startswith(f"[rank{rank}]: ")]
        assert [m.removeprefix(f"[rank{rank}]: ") for m in mine] == [f"line {i} of {rank}" for i in range(2000)]
        assert re.search(rf"^\[rank{rank}\]: last words of {rank}$", run.stderr, re.M), run.stderr[-2000:]
    assert len(lines) == 4000, [line for line in lines if not line.startswith("[rank")][:5]
