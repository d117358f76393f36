"""NCCL's flight recorder, locally (issue 42): each replica's attempt is told to dump into its own
folder on a collective's timeout, and a failed job's root cause names the dumps. No GPU here: the
program writes a dump where torch's NCCL process group would (the file torch names
TORCH_NCCL_DEBUG_INFO_TEMP_FILE + rank), then fails, as a rank does after NCCL's watchdog timed out.
A replica whose env sets the newer name keeps its own setting."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.jobs import job_data
from tests.local.conftest import Torchjob, write_job

pytestmark = pytest.mark.e2e

DUMP = """
import os, sys, time
prefix = os.environ.get("TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
print("prefix", prefix, os.environ.get("TORCH_NCCL_DUMP_ON_TIMEOUT"), os.environ.get("TORCH_FR_BUFFER_SIZE"))
if os.environ["RANK"] == "0":
    with open(prefix + os.environ["RANK"], "wb") as f:
        f.write(b"a pickled flight record")
    time.sleep(2)  # the worker says its settings first
    sys.exit(1)
"""


def test_a_failed_jobs_root_cause_names_its_ranks_flight_recorder_dumps(torchjob: Torchjob, tmp_path: Path) -> None:
    data = job_data("fr", workers=1, command=["python", "-c", DUMP])
    worker = data["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    worker["env"] = [{"name": "TORCH_FR_DUMP_TEMP_FILE", "value": str(tmp_path / "mine_")}]
    proc = torchjob("run", str(write_job(tmp_path / "fr.yaml", data)), timeout=120)
    assert proc.returncode == 1, proc.stderr
    master = next(torchjob.home.rglob("master-0/attempt-0"))
    dump = master / "nccl_trace_rank_0"
    assert dump.read_bytes() == b"a pickled flight record"
    assert f"[master-0] prefix {master}/nccl_trace_rank_ 1 2000" in proc.stdout + proc.stderr
    assert "[worker-0] prefix None 1 2000" in proc.stdout + proc.stderr  # its own TORCH_FR_DUMP_TEMP_FILE kept
    assert ("  NCCL flight recorder: 1 dump(s) of the ranks' last collectives, written when one timed out:\n"
            f"    {dump}\n") in proc.stderr, proc.stderr
    assert "torchfrtrace FOLDER -p nccl_trace_rank_" in proc.stderr
