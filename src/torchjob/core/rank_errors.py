"""Which rank of a replica failed, and its own words: a replica of several processes writes each
process's lines tagged with its rank (`[rank1]: ...`: torchjob.local.ranktag locally, torchrun's
`--tee` in a pod, torch's own excepthook), interleaved. When one rank raises, its peers fail too, a
moment later, with a collective's error (gloo's `Connection closed by peer`): the replica's last lines
are then a peer's follow-on error, not the failure. Pure: lines in, a choice out.

The failing rank is, in this order: a rank whose exception is its own (not a follow-on error of a
collective or of the store, not a stop signal), torchrun's root cause among those first, else the
earliest such traceback in the output; else the rank torchrun names (one that died without a
traceback: a signal, an abort); else the earliest rank with any traceback."""

from __future__ import annotations

import re
from dataclasses import dataclass

from torchjob.core import torch_errors

_TAG = re.compile(r"^\[rank(\d+)\]: ?")
_TRACEBACK = "Traceback (most recent call last):"
# What a rank raises when a peer, or the store's host, is gone: it follows another rank's failure.
_FOLLOW_ON = re.compile(
    r"Connection closed by peer|Connection reset by peer|Broken pipe|failed to recv, got 0 bytes"
    r"|Socket Timeout|NCCL communicator was aborted|[Ww]atchdog caught collective operation timeout"
    r"|ProcessGroupNCCL is aborted|SignalException|KeyboardInterrupt|Terminated by signal"
    r"|DistNetworkError|Connection refused|Timed out waiting for peer|recvBytes|sendBytes")
_NAMED = re.compile(r"^torchrun's root cause: rank (\d+)\b")


def untag(line: str) -> tuple[int | None, str]:
    """(the rank a line is tagged with, the line without its tags); a tag written twice (torch's
    excepthook's and torchjob's) counts once."""
    rank: int | None = None
    while m := _TAG.match(line):
        rank, line = int(m.group(1)), line[m.end():]
    return rank, line


def follow_on(error: str) -> bool:
    """Whether an exception's line is a peer's failure seen from this rank (a collective's or the
    store's connection gone, a stop signal), not a failure of its own."""
    return bool(_FOLLOW_ON.search(error))


@dataclass(frozen=True)
class RankError:
    rank: int | None  # None: the lines carry no tag (a replica of one process)
    start: int  # where its first traceback starts in the lines
    error: str  # its exception's line (its last traceback's)

    @property
    def follow_on(self) -> bool:
        return follow_on(self.error)


def errors(lines: list[str]) -> list[RankError]:
    """Each rank's exception in a replica's lines, in the order their tracebacks start."""
    tagged = [untag(line) for line in lines]
    starts: dict[int | None, int] = {}
    for i, (rank, bare) in enumerate(tagged):
        if bare.strip() == _TRACEBACK and rank not in starts:
            starts[rank] = i
    out = []
    for rank, start in starts.items():
        own = [bare for r, bare in tagged[start:] if r == rank]
        found = torch_errors.raised_at(own)
        if found is not None:
            out.append(RankError(rank, start, found[0]))
    return sorted(out, key=lambda e: e.start)


def named_rank(cause: str | None) -> int | None:
    """The rank of torchrun's root-cause line (torch_errors.torchrun_report's), if it names one."""
    m = _NAMED.match(cause or "")
    return int(m.group(1)) if m else None


def failing(lines: list[str], named: int | None = None) -> tuple[int | None, list[RankError]] | None:
    """(the failing rank, every rank's error) of a replica's lines; `named`: the rank torchrun's report
    names as its root cause. None when no rank can be told (no traceback, no report)."""
    found = errors(lines)
    own = [e for e in found if not e.follow_on]
    if own:
        return next((e.rank for e in own if e.rank == named), own[0].rank), found
    if named is not None:
        return named, found
    if found:
        return found[0].rank, found
    return None


@dataclass(frozen=True)
class Quote:
    """What a root cause quotes of a replica's output."""

    rank: int | None  # the failing rank (None: not told, or the lines carry no tag)
    lines: list[str]  # its own lines, from its traceback on (tags kept), or the output's last lines
    title: str  # the block's head line, e.g. "last 12 lines of rank 1's own output"
    followed: list[RankError]  # the other ranks' follow-on errors


def quote(lines: list[str], count: int, named: int | None = None, whole: str = "its output",
          traceback_lines: int = 60) -> Quote:
    """The failing rank's own lines of a replica's output: from its first traceback to its last line,
    at most `traceback_lines` (a longer traceback keeps its first line, so that it still reads as one);
    when no rank has a traceback, the output's last `count` lines (`whole` says what they are)."""
    told = failing(lines, named)
    rank, found = told if told is not None else (None, [])
    mine = next((e for e in found if e.rank == rank), None)
    followed = [e for e in found if e.rank != rank and e.follow_on]
    if mine is None:
        last = lines[-count:]
        return Quote(rank, last, f"last {len(last)} lines of {whole}", followed)
    own = [line for line in lines[mine.start:] if untag(line)[0] == rank]
    if len(own) > traceback_lines:
        own = [own[0], "    ...", *own[-(traceback_lines - 2):]]
    who = f"rank {rank}'s" if rank is not None else "its"
    return Quote(rank, own, f"last {len(own)} lines of {who} own output", followed)
