"""NCCL's flight recorder: torch keeps a ring of each rank's last collectives and, when a collective
times out, can write it to a file per rank (`torchfrtrace` reads them and names the collective where
the ranks parted ways). torchjob turns the dump on for every replica, into the attempt's own folder,
and names the files in a failed job's root cause. gloo keeps no such record: only NCCL jobs have dumps.

Pure: the settings a replica gets (never one the user set, under either of torch's names) and the
root cause's lines from the files the runtime found."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

PREFIX = "nccl_trace_rank_"  # torch's default file name, then the rank: /tmp/nccl_trace_rank_0
BUFFER_SIZE = "2000"  # entries kept per rank (torch 2.15's default where neither name is set; older torch: 0, off)
# (the name torchjob sets, the other name torch reads): the buffer's under its newer name, since torch 2.15
# warns on every process group (gloo's too) that TORCH_NCCL_TRACE_BUFFER_SIZE is deprecated; the dump's
# under the older, which older torch reads too and 2.15 does not warn about
BUFFER = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")
DUMP_ON_TIMEOUT = ("TORCH_NCCL_DUMP_ON_TIMEOUT", "TORCH_FR_DUMP_ON_TIMEOUT")
DUMP_FILE = ("TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "TORCH_FR_DUMP_TEMP_FILE")
SET = (BUFFER[0], DUMP_ON_TIMEOUT[0], DUMP_FILE[0])  # what `env` may set


def env(folder: str, given: Mapping[str, str]) -> dict[str, str]:
    """What a replica's attempt gets so that a timed-out NCCL collective leaves each rank's record in
    `folder` (FOLDER/nccl_trace_rank_RANK): each setting the user left unset under both names."""
    out: dict[str, str] = {}
    for (name, newer), value in ((BUFFER, BUFFER_SIZE), (DUMP_ON_TIMEOUT, "1"), (DUMP_FILE, f"{folder}/{PREFIX}")):
        if name not in given and newer not in given:
            out[name] = value
    return out


def said(files: Sequence[str]) -> list[str]:
    """The root cause's lines naming the dumps found (none: no line), and how to read them."""
    if not files:
        return []
    return [f"  NCCL flight recorder: {len(files)} dump(s) of the ranks' last collectives, written when one "
            "timed out:", *(f"    {f}" for f in files),
            f"    read them: copy them into one folder, then `torchfrtrace FOLDER -p {PREFIX}`"]
