"""Which ends of gone pods' logs a job's status keeps (`keep`): a gang restart, a suspend or the
job's end deletes its pods, and their logs with them; the last lines the kubelet kept in each pod's
termination message (FallbackToLogsOnError) are the only trace left. Bounded in number and size, so
that a job of thousands of pods keeps a status of the same size: the newest attempts first, the
failing replica, then the master, then by index. And which stacks of a stalled job it keeps (`keep_stacks`): the
operator's, taken before the stall's replicas were stopped (issue 42), a few, each bounded."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime

from torchjob.api.status import JobStatus, KeptStacks, KeptTail
from torchjob.core.diagnosis.stacks import Stacks, full, short

KEPT_AT_MOST = 16  # tails in a job's status: 32 KiB at most
TAIL_BYTES = 2048  # of each: what the kubelet keeps of a log (FallbackToLogsOnError); a longer message is cut
STACKS_AT_MOST = 4  # a stalled job's stacks in its status, newest first: 33 KiB at most
STACKS_BYTES = 8192  # of each full form: its first groups (the main threads' first), cut at a line


def cut(text: str, limit: int = TAIL_BYTES) -> str:
    """The end of `text` in at most `limit` bytes of UTF-8, from a whole line where one fits."""
    raw = text.encode()
    if len(raw) <= limit:
        return text
    end = raw[-limit:].decode(errors="ignore")
    return end.split("\n", 1)[1] if "\n" in end[:-1] else end


def keep(status: JobStatus, gone: Iterable[KeptTail]) -> JobStatus:
    """`status` with the tails of `gone` (pods deleted since) kept beside those it has: one per replica
    attempt (a newer read of the same attempt replaces it), at most KEPT_AT_MOST. Unchanged (the same
    object) when there is nothing new."""
    have = {(t.replica, t.attempt): t for t in status.keptTails}
    new = {(t.replica, t.attempt): t.model_copy(update={"tail": cut(t.tail)}) for t in gone if t.tail.strip()}
    if all(have.get(k) == t for k, t in new.items()):
        return status
    failing = status.failure.replica if status.failure is not None else None

    def order(t: KeptTail) -> tuple[int, bool, bool, str, int]:
        rtype, _, index = t.replica.rpartition("-")
        return (-t.attempt, t.replica != failing, rtype != "master", rtype,
                int(index) if index.isdecimal() and index.isascii() else 1 << 62)

    kept = sorted({**have, **new}.values(), key=order)[:KEPT_AT_MOST]
    return status.model_copy(update={"keptTails": kept})


def kept_tail(status: JobStatus, replica: str, attempt: int) -> KeptTail | None:
    """The tail kept of `replica`'s `attempt`, if any."""
    return next((t for t in status.keptTails if t.replica == replica and t.attempt == attempt), None)


def head(text: str, limit: int = STACKS_BYTES) -> str:
    """The start of `text` in at most `limit` bytes of UTF-8, to a whole line where one fits, saying it was cut."""
    raw = text.encode()
    if len(raw) <= limit:
        return text
    mark = "... (cut: the pods' logs had it whole)\n"
    start = raw[:limit - len(mark)].decode(errors="ignore")
    return (start.rsplit("\n", 1)[0] + "\n" if "\n" in start else start) + mark


def stacks_kept(taken: Stacks, attempts: Mapping[str, int], stalled: Iterable[str], at: datetime) -> KeptStacks:
    """What a stalled job's status keeps of the stacks taken of `attempts` (replica -> attempt) before `stalled`
    were stopped: the short form (the root cause's) and the full form, cut to STACKS_BYTES."""
    return KeptStacks(attempts=dict(sorted(attempts.items())), stalled=sorted(stalled), takenAt=at,
                      short=short(taken) or "no rank answered", stacks=head(full(taken)))


def keep_stacks(status: JobStatus, kept: KeptStacks) -> JobStatus:
    """`status` keeping `kept` first (one per set of attempts asked: a newer take of the same replaces it), at most
    STACKS_AT_MOST. Unchanged (the same object) when it has it already."""
    if kept in status.keptStacks:
        return status
    others = [k for k in status.keptStacks if k.attempts != kept.attempts]
    return status.model_copy(update={"keptStacks": [kept, *others][:STACKS_AT_MOST]})


def stacks_of(status: JobStatus, replica: str, attempt: int) -> KeptStacks | None:
    """The stacks kept with `replica`'s `attempt` (the newest), if any."""
    return next((k for k in status.keptStacks if k.attempts.get(replica) == attempt), None)
