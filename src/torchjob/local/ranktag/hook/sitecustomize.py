"""torchjob's rank tag (torchjob.local.ranktag): in a process torchrun started for a local job
(TORCHJOB_RANK_TAG=1, LOCAL_RANK set), every line written to sys.stdout and sys.stderr starts with
`[rankN]: `, N the process's RANK, and is written whole. Then the user's own sitecustomize, if there
is one further on the path, runs as it would have. Standard library only; any Python 3.

Every rank's interpreter runs it at start-up (locally, and in pods through the stacks front), before the
user's code: it imports no more than it needs (no typing, threading or signal, whose enum alone cost a loaded
machine 30 ms of CPU for a script that would not import them; bench/stacks_front.py)."""

from __future__ import annotations

import _thread
import os
import sys
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, TextIO


class _Tagged:
    """A text stream that writes whole lines, each tagged, to the stream it wraps.

    A progress bar (tqdm) redraws its line by writing `\r` and the new state, with no newline until it
    ends: what a terminal would show of such a line (its text after the last `\r`) is written as a
    whole tagged line, at most once per BAR_EVERY seconds and when the bar ends, so that no bar loses
    its tag and no other rank's line is glued onto it."""

    BAR_EVERY = 5.0

    def __init__(self, inner: TextIO, tag: str) -> None:
        self._inner = inner
        self._tag = tag
        self._pending = ""
        self._at_start = True
        self._bar_shown = float("-inf")  # when a bar's state was last written (time.monotonic)
        self._bar_ended = False  # a bar's state was just written as a line: its own newline is not another
        self._lock = _thread.allocate_lock()

    def _emit(self, text: str) -> str:
        # torch's excepthook tags a traceback's lines itself (`[rank1]: Traceback ...`): once is enough
        tagged = self._at_start and not text.startswith(self._tag)
        out = (self._tag if tagged else "") + text
        self._at_start = text.endswith("\n")
        return out

    @staticmethod
    def _state(text: str) -> str:
        """What a terminal shows of a line redrawn with `\r`: its last part that is not empty."""
        return next((part for part in reversed(text.split("\r")) if part), "")

    def _line(self, line: str) -> str:
        """A whole line, tagged; a redrawn one as a terminal would leave it, on a line of its own."""
        bar_ended, self._bar_ended = self._bar_ended, False
        if "\r" not in line:
            return "" if bar_ended and not line else self._emit(line + "\n")
        ended = "" if self._at_start else "\n"  # a partial line written before the bar: ended first
        self._at_start = True
        return ended + self._emit(self._state(line) + "\n")

    def write(self, s: str) -> int:
        with self._lock:
            self._pending += s
            if "\n" not in self._pending:
                if "\r" in self._pending:  # a bar redrawn: only its last state is kept
                    self._pending = "\r" + self._state(self._pending)
                return len(s)
            head, _, self._pending = self._pending.rpartition("\n")
            out = "".join(self._line(line) for line in head.split("\n"))
            self._inner.write(out)
            self._inner.flush()
        return len(s)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        with self._lock:
            pending = self._pending
            if "\r" in pending:  # a bar's state: a line of its own, now and then
                now = time.monotonic()
                if self._state(pending).strip() and now - self._bar_shown >= self.BAR_EVERY:
                    self._bar_shown = now
                    self._inner.write(self._line(pending))
                    self._pending = ""
                    self._bar_ended = True
            elif pending:
                self._inner.write(self._emit(pending))
                self._pending = ""
            self._inner.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _install() -> None:
    if os.environ.get("TORCHJOB_RANK_TAG") != "1" or "LOCAL_RANK" not in os.environ:
        return  # torchrun's agent itself, or a process of another kind
    tag = "[rank" + os.environ.get("RANK", os.environ["LOCAL_RANK"]) + "]: "
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, _Tagged):
            setattr(sys, name, _Tagged(stream, tag))


_stacks_file: Any = None  # kept open: faulthandler writes to its descriptor when the signal comes


def _register_stacks() -> None:
    """`torchjob stacks` and a stall's stacks (torchjob.local.inspect.stacks): on SIGUSR2 faulthandler writes
    every thread's Python stack to a file of this process under the attempt's folder, from its C signal
    handler, so a rank blocked in a collective answers too. Only a rank's process (LOCAL_RANK set; not
    torchrun's agent). SIGUSR2: neither torch nor torchrun uses it (torchrun only with
    --signals-to-handle); a script that registers it itself takes it over, and then it has no stacks."""
    global _stacks_file
    where = os.environ.get("TORCHJOB_STACKS_DIR")
    if not where or "LOCAL_RANK" not in os.environ:
        return
    try:
        import _signal  # type: ignore[import-not-found]  # signal's C half: its constants without enum's import
        import faulthandler

        rank = os.environ.get("RANK", os.environ["LOCAL_RANK"])
        os.makedirs(where, mode=0o700, exist_ok=True)
        pid = str(os.getpid())
        # the user's alone, as every file under TORCHJOB_HOME (a stack names the user's paths)
        fd = os.open(os.path.join(where, "rank-" + rank + "-pid-" + pid + ".txt"),
                     os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        f = os.fdopen(fd, "a")
        # as faulthandler writes a thread's id; at start-up this is the main thread (a warm spare registers later,
        # once threading is imported)
        threading = sys.modules.get("threading")
        ident = threading.main_thread().ident if threading is not None else _thread.get_ident()
        main = format(ident or 0, "016x")
        f.write("# torchjob stacks: rank=" + rank + " pid=" + pid + " main=0x" + main + "\n")
        f.flush()
        faulthandler.register(_signal.SIGUSR2, file=f, all_threads=True, chain=False)
        old, _stacks_file = _stacks_file, f
        if old is not None:  # a warm spare's, registered before it took its attempt: that one answers now
            os.unlink(old.name)
            old.close()
    except (OSError, ValueError, RuntimeError, AttributeError):
        pass  # no stacks for this process; the run goes on as it would have


def _chain() -> None:
    """The next sitecustomize on the path (a user's own, or the environment's), as if this one were not."""
    here = os.path.dirname(os.path.abspath(__file__))
    import importlib.machinery
    import importlib.util

    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None or spec.origin == os.path.abspath(__file__):
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


sys.modules["_torchjob_rank_tag"] = sys.modules[__name__]  # a warm spare tags once its rank is known
_install()
_register_stacks()
_chain()
