"""NCCL's flight recorder (core/diagnosis/flight_recorder.py): the settings a replica gets, never one
the user set under either of torch's names, and the root cause's lines naming the dumps."""

from __future__ import annotations

from torchjob.core.diagnosis import flight_recorder


def test_a_replica_dumps_into_its_attempts_folder_on_a_timeout() -> None:
    assert flight_recorder.env("/jobs/j/replicas/worker-0/attempt-1", {}) == {
        "TORCH_FR_BUFFER_SIZE": "2000",
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
        "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": "/jobs/j/replicas/worker-0/attempt-1/nccl_trace_rank_",
    }


def test_what_the_user_set_under_either_name_is_kept() -> None:
    given = {"TORCH_NCCL_TRACE_BUFFER_SIZE": "0", "TORCH_NCCL_DUMP_ON_TIMEOUT": "0", "PATH": "/bin"}
    assert flight_recorder.env("/a", given) == {"TORCH_NCCL_DEBUG_INFO_TEMP_FILE": "/a/nccl_trace_rank_"}
    assert flight_recorder.env("/a", {"TORCH_FR_DUMP_TEMP_FILE": "/mine/fr_"}) == {
        "TORCH_FR_BUFFER_SIZE": "2000", "TORCH_NCCL_DUMP_ON_TIMEOUT": "1"}


def test_the_root_cause_names_the_dumps_and_how_to_read_them() -> None:
    assert flight_recorder.said([]) == []
    lines = flight_recorder.said(["/a/nccl_trace_rank_0", "/b/nccl_trace_rank_1"])
    assert lines[0].startswith("  NCCL flight recorder: 2 dump(s)")
    assert lines[1:3] == ["    /a/nccl_trace_rank_0", "    /b/nccl_trace_rank_1"]
    assert "torchfrtrace FOLDER -p nccl_trace_rank_" in lines[3]
