"""Where a job's ranks are: Python's `faulthandler` dumps of every process, read, grouped by identical
stack and told in a line per group (`ranks 0-2: all_reduce (torch/...) <- step (train.py:41)`).

Pure: the runtime reads the dump files and hands their text here. A dump is what
`faulthandler.dump_traceback(all_threads=True)` writes, after the header line torchjob's start-up hook
writes once per process (`# torchjob stacks: rank=3 pid=4242 main=0x00007f...`), which names the main
thread (faulthandler's own `Current thread` is whichever thread the signal reached)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

HEADER = re.compile(r"^# torchjob stacks: rank=(?P<rank>-?\d+) pid=(?P<pid>\d+) main=(?P<main>0x[0-9a-f]+)\s*$")
THREAD = re.compile(r"^(?P<current>Current thread|Thread) (?P<ident>0x[0-9a-f]+) \(most recent call first\):\s*$")
FRAME = re.compile(r'^\s+File "(?P<file>.*)", line (?P<line>\d+|\?\?\?) in (?P<func>.*?)\s*$')
# Where a frame is library code rather than the user's own: an installed package, the standard library
# (the runtime names its folder), an interpreter-internal module, torchjob's own hook and warm spare's launcher.
_LIBRARY = ("/site-packages/", "/dist-packages/", "<frozen ", "/torchjob/local/ranktag/hook/", "/torchjob_spare.py")


@dataclass(frozen=True)
class Frame:
    file: str
    line: int | None
    func: str

    def user(self, library_dirs: Sequence[str] = ()) -> bool:
        """The user's own code: not an installed package, the standard library or an internal module."""
        return not (any(m in self.file for m in _LIBRARY) or self.file.startswith("<")
                    or any(self.file.startswith(d) for d in library_dirs))

    def short_file(self) -> str:
        """A library file from its package on (`torch/distributed/distributed_c10d.py`), the user's by name."""
        for m in ("/site-packages/", "/dist-packages/"):
            if m in self.file:
                return self.file.split(m, 1)[1]
        return self.file.rsplit("/", 1)[-1]

    def text(self) -> str:
        return f"{self.func} ({self.short_file()}:{self.line if self.line is not None else '?'})"


@dataclass(frozen=True)
class Thread:
    ident: str
    main: bool
    frames: tuple[Frame, ...]  # innermost first, as faulthandler writes them


@dataclass(frozen=True)
class ProcessStacks:
    """One process's dump: the replica it belongs to, its rank (None: not known), pid, threads."""

    replica: str
    rank: int | None
    pid: int
    threads: tuple[Thread, ...]

    def main(self) -> Thread | None:
        return next((t for t in self.threads if t.main), self.threads[0] if self.threads else None)


@dataclass(frozen=True)
class Group:
    """Processes (ranks) whose stacks are the same; `thread` says which thread (main, or another's ident)."""

    ranks: tuple[int, ...]
    processes: tuple[tuple[str, int], ...]  # (replica, pid) of each
    frames: tuple[Frame, ...]
    main: bool = True
    threads: int = 1  # how many threads of these processes have this stack

    def who(self) -> str:
        if self.ranks:
            return f"rank {self.ranks[0]}" if len(self.ranks) == 1 else f"ranks {ranges(self.ranks)}"
        return ", ".join(f"{r} (pid {p})" for r, p in self.processes)


@dataclass
class Stacks:
    """Every process's stacks, grouped; `missing` are the processes that were signalled and did not answer."""

    processes: list[ProcessStacks]
    missing: list[str] = field(default_factory=list)
    library_dirs: tuple[str, ...] = ()
    seconds: float = 0.0


def parse(text: str) -> tuple[int | None, int | None, list[Thread]]:
    """(rank, pid, threads) of one process's dump: the last dump in `text` where it holds several."""
    rank: int | None = None
    pid: int | None = None
    main = ""
    threads: list[Thread] = []
    ident: str | None = None
    frames: list[Frame] = []

    def close() -> None:
        nonlocal ident, frames
        if ident is not None:
            threads.append(Thread(ident, ident == main, tuple(frames)))
        ident, frames = None, []

    for line in text.splitlines():
        if m := HEADER.match(line):
            rank, pid, main = int(m["rank"]), int(m["pid"]), m["main"]
            continue
        if m := THREAD.match(line):
            close()
            if m["ident"] in (t.ident for t in threads):
                threads.clear()  # a later dump of the same process (its threads again): it replaces the earlier
            ident = m["ident"]
            continue
        if ident is not None and (m := FRAME.match(line)):
            lineno = m["line"]
            frames.append(Frame(m["file"], int(lineno) if lineno.isdigit() else None, m["func"]))
    close()
    if main and not any(t.main for t in threads):
        main = ""
    return rank, pid, threads


def ranges(ranks: Iterable[int]) -> str:
    """`0-2,5`: runs of consecutive ranks shortened."""
    out: list[str] = []
    rs = sorted(set(ranks))
    i = 0
    while i < len(rs):
        j = i
        while j + 1 < len(rs) and rs[j + 1] == rs[j] + 1:
            j += 1
        out.append(str(rs[i]) if i == j else f"{rs[i]}-{rs[j]}")
        i = j + 1
    return ",".join(out)


def group(stacks: Stacks, all_threads: bool = False) -> list[Group]:
    """Identical stacks together, the main threads' first (by lowest rank), then, with `all_threads`,
    the other threads' (a thread with no Python frame is left out)."""
    def key_rank(p: ProcessStacks) -> tuple[int, str, int]:
        return (p.rank if p.rank is not None else 1 << 30, p.replica, p.pid)

    def build(pairs: list[tuple[ProcessStacks, Thread]], main: bool) -> list[Group]:
        by: dict[tuple[Frame, ...], list[tuple[ProcessStacks, Thread]]] = {}
        for p, t in pairs:
            by.setdefault(t.frames, []).append((p, t))
        groups = []
        for frames, members in by.items():
            procs = sorted({p for p, _ in members}, key=key_rank)
            groups.append(Group(tuple(p.rank for p in procs if p.rank is not None),
                                tuple((p.replica, p.pid) for p in procs), frames, main, len(members)))
        return sorted(groups, key=lambda g: (min((key_rank(p) for p, _ in by[g.frames]), default=(0, "", 0))))

    procs = sorted(stacks.processes, key=key_rank)
    mains = [(p, t) for p in procs if (t := p.main()) is not None]
    out = build(mains, True)
    if all_threads:
        others = [(p, t) for p in procs for t in p.threads if t is not p.main() and t.frames]
        out += build(others, False)
    return out


def innermost_user(g: Group, library_dirs: Sequence[str] = ()) -> Frame | None:
    return next((f for f in g.frames if f.user(library_dirs)), None)


def line(g: Group, library_dirs: Sequence[str] = (), depth: int = 8) -> str:
    """`ranks 0-2: all_reduce (torch/distributed/distributed_c10d.py:2806) <- step (train.py:41) <- ...`:
    innermost first; the library frames the user's innermost one called are told by the innermost of
    them (where the process waits) and how many there are."""
    frames = g.frames
    if not frames:
        return f"{g.who()}: <no Python frame>"
    cut = next((i for i, f in enumerate(frames) if f.user(library_dirs)), None)
    shown: list[str] = []
    if cut is None or cut == 0:
        shown = [f.text() for f in frames[:depth]]
    else:
        lib = frames[:cut]
        shown.append(lib[0].text() if len(lib) == 1 else f"{lib[0].text()} [{len(lib)} library frames]")
        shown += [f.text() for f in frames[cut:cut + depth - 1]]
    more = len(frames) - (cut or 0) - (len(shown) - (1 if cut else 0))
    tail = f" <- ... {more} more" if more > 0 else ""
    thread = "" if g.main else f" [thread, {g.threads}x]"
    return f"{g.who()}{thread}: " + " <- ".join(shown) + tail


def odd_ones(groups: Sequence[Group]) -> tuple[list[Group], Group | None]:
    """The groups of main threads whose stack differs from the rest's, and the rest's group: where more than half
    of the processes (two at least) share one stack, every other group. A collective waits for its slowest member:
    the rank in `recv` while all the others wait in `all_reduce` is the one to look at first."""
    mains = [g for g in groups if g.main]
    if len(mains) < 2:
        return [], None
    most = max(mains, key=lambda g: len(g.processes))
    if len(most.processes) < 2 or 2 * len(most.processes) <= sum(len(g.processes) for g in mains):
        return [], None
    return [g for g in mains if g is not most], most


def differs(groups: Sequence[Group]) -> str | None:
    """`rank 7 differs from the rest (ranks 0-6)`, or None when no rank stands out."""
    odd, most = odd_ones(groups)
    if most is None:
        return None
    verb = "differs" if len(odd) == 1 else "differ"
    return f"{' and '.join(g.who() for g in odd)} {verb} from the rest ({most.who()})"


def text(stacks: Stacks, all_threads: bool = False) -> str:
    """The lines `torchjob stacks` prints: one per group, who differs from the rest, then the processes that did
    not answer."""
    groups = group(stacks, all_threads)
    lines = [line(g, stacks.library_dirs) for g in groups]
    if not groups:
        lines.append("no process answered (is the job running?)")
    if (odd := differs(groups)) is not None:
        lines.append(f"{odd}: look there first")
    others = sum(1 for p in stacks.processes for t in p.threads if t is not p.main() and t.frames)
    if others and not all_threads:
        lines.append(f"({others} other thread(s) not shown: --all-threads)")
    lines += [f"{m}: no stacks (it did not answer)" for m in stacks.missing]
    lines.append(f"({len(stacks.processes)} process(es) answered in {stacks.seconds:.2f} s)")
    return "\n".join(lines)


def full(stacks: Stacks) -> str:
    """Every frame of every thread, grouped: the long form kept with a stalled attempt."""
    out: list[str] = []
    for g in group(stacks, all_threads=True):
        thread = "main thread" if g.main else f"other thread ({g.threads}x)"
        out.append(f"{g.who()} ({thread}), most recent call first:")
        for f in g.frames:
            mark = " " if f.user(stacks.library_dirs) else "."
            out.append(f"  {mark} {f.func} ({f.file}:{f.line if f.line is not None else '?'})")
        out.append("")
    out += [f"{m}: no stacks (it did not answer)" for m in stacks.missing]
    return "\n".join(out).rstrip() + "\n"


def short(stacks: Stacks) -> str:
    """The form a root cause and an event carry: for each group of main threads, the innermost frame of
    the user's own code (else the innermost frame), and who differs from the rest: `ranks 0-2 in step
    (train.py:41); rank 3 in recv (train.py:33); rank 3 differs from the rest (ranks 0-2)`."""
    parts = []
    for g in group(stacks):
        f = innermost_user(g, stacks.library_dirs) or (g.frames[0] if g.frames else None)
        parts.append(f"{g.who()} in {f.text()}" if f is not None else f"{g.who()}: no Python frame")
    if (odd := differs(group(stacks))) is not None:
        parts.append(odd)
    parts += [f"{m}: no answer" for m in stacks.missing]
    return "; ".join(parts)


def as_data(stacks: Stacks, all_threads: bool = True) -> dict[str, Any]:
    """What `-o json` prints and `handle.stacks()` returns (`differs`: the ranks whose stack differs from the rest's,
    each group's as in its `ranks`)."""
    groups = group(stacks, all_threads)
    return {
        "seconds": round(stacks.seconds, 3),
        "groups": [{
            "ranks": list(g.ranks),
            "processes": [{"replica": r, "pid": p} for r, p in g.processes],
            "mainThread": g.main,
            "threads": g.threads,
            "frames": [{"file": f.file, "line": f.line, "function": f.func, "user": f.user(stacks.library_dirs)}
                       for f in g.frames],
            "summary": line(g, stacks.library_dirs),
        } for g in groups],
        "differs": [list(g.ranks) for g in odd_ones(groups)[0]],
        "missing": list(stacks.missing),
        "short": short(stacks),
    }


# A pod's answer to a request for its stacks, as kube/inpod/torchjob_stacks.py writes it to the container's log:
# each process's dump between a begin and an end line, then one line that says the pod answered.
BEGIN = "torchjob-stacks: begin request="
END = "torchjob-stacks: end request="
ANSWERED = re.compile(r"^torchjob-stacks: answered request=(?P<request>\S+) processes=\d+ "
                      r"missing=(?P<missing>[\d,]*) stdlib=(?P<stdlib>.*)$")


@dataclass(frozen=True)
class PodAnswer:
    """What a pod's log says of a request: each process's (rank, pid, threads), the pids that did not answer,
    and the pod's standard library's folder (its frames are not the user's own)."""

    processes: list[tuple[int | None, int | None, list[Thread]]]
    missing: list[int]
    stdlib: str


def answer_in(lines: Iterable[str], request: str) -> PodAnswer | None:
    """A pod's answer to `request`, read from its log's lines; None until it has answered whole."""
    block: list[str] | None = None
    found: list[tuple[int | None, int | None, list[Thread]]] = []
    for raw in lines:
        line = raw.rstrip("\r\n")
        if line == BEGIN + request:
            block = []
        elif line == END + request and block is not None:
            found.append(parse("\n".join(block)))
            block = None
        elif block is not None:
            block.append(line)
        elif (m := ANSWERED.match(line)) and m["request"] == request:
            return PodAnswer(found, [int(p) for p in m["missing"].split(",") if p], m["stdlib"])
    return None
