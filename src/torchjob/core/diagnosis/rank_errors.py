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

from torchjob.core.diagnosis.tracebacks import raised_at

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


# A launcher's own error about the process it ran (accelerate's simple launcher, torchrun's agent): the
# process's own traceback, printed before it, says why.
_WRAPPER = re.compile(r"CalledProcessError: Command .* returned non-zero exit status|ChildFailedError")


@dataclass(frozen=True)
class RankError:
    rank: int | None  # None: the lines carry no tag (a replica of one process)
    start: int  # where its first traceback starts in the lines
    error: str  # its exception's line (its last traceback's, a launcher's report of it aside)
    end: int | None = None  # where the traceback of that exception ends (None: at the lines' end)

    @property
    def follow_on(self) -> bool:
        """Not the failure itself: a peer's error seen from this rank, or a launcher's report of its child's."""
        return follow_on(self.error) or bool(_WRAPPER.search(self.error))


def errors(lines: list[str]) -> list[RankError]:
    """Each rank's exception in a replica's lines, in the order their tracebacks start."""
    tagged = [untag(line) for line in lines]
    starts: dict[int | None, list[int]] = {}
    for i, (rank, bare) in enumerate(tagged):
        if bare.strip() == _TRACEBACK:
            starts.setdefault(rank, []).append(i)
    out = []
    for rank, at in starts.items():
        found: list[tuple[str, int | None]] = []  # each traceback's exception, and where the next one starts
        for k, start in enumerate(at):
            end = at[k + 1] if k + 1 < len(at) else None
            raised = raised_at([bare for r, bare in tagged[start:end] if r == rank])
            if raised is not None:
                found.append((raised[0], end))
        if found:
            error, end = next((e for e in reversed(found) if not _WRAPPER.search(e[0])), found[-1])
            out.append(RankError(rank, at[0], error, end))
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
    followed = [e for e in found if e.rank != rank and e.rank is not None and e.follow_on]
    if mine is None:  # it died without a traceback (a signal, an abort): the output's end, less its peers' errors
        theirs = {i for e in followed for i in range(e.start, e.end or len(lines)) if untag(lines[i])[0] == e.rank}
        last = [line for i, line in enumerate(lines) if i not in theirs][-count:]
        return Quote(rank, last, f"last {len(last)} lines of {whole}", followed)
    own = [line for line in lines[mine.start:mine.end] if untag(line)[0] == rank]
    if len(own) > traceback_lines:
        own = [own[0], "    ...", *own[-(traceback_lines - 2):]]
    who = f"rank {rank}'s" if rank is not None else "its"
    return Quote(rank, own, f"last {len(own)} lines of {who} own output", followed)


def own_error(lines: list[str]) -> RankError | None:
    """The first error of its own in a replica's lines (torchrun's report left out by the caller), None
    when every rank's is a follow-on one or none raised."""
    return next((e for e in errors(lines) if not e.follow_on), None)


def first_own(failed: list[str], others: list[tuple[str, list[str]]]) -> tuple[str, RankError] | None:
    """Which replica's error was the failure when the replica that ended the job (`failed`: its lines)
    only failed after it: its own error is a peer's follow-on one (or it has none), and another replica
    that failed in the same moment (`others`: (name, lines), in the order they ended) raised one of its
    own. None when the replica that ended the job said its own error, or no other did. Each replica's
    lines without torchrun's report (torch_errors.torchrun_report)."""
    if own_error(failed) is not None:
        return None
    for name, lines in others:
        found = own_error(lines)
        if found is not None:
            return name, found
    return None
