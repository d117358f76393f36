"""Where a running job's output goes: prefixed replica lines and torchjob's own notes.

Replica output goes to stdout as `[worker-1] ...` (coloured on a terminal), torchjob's notes to
stderr, and both to the job's combined log, in the order they arrived.

Lines the user never needs are not shown or kept here: the line that carries a function's returned
value back (`hidden`; it stays in the replica's own log, where `torchjob.sdk` reads it). A `show`
filter (`--ranks-filter`) keeps the terminal to some ranks; the combined log keeps every line.

Once the job reports progress, a terminal (stdout and stderr both one) shows a live bar (rich)
kept in view below the streamed lines: percent, step, rate, ETA and the latest metrics. Elsewhere
(a pipe, a file) the progress is a note at most every PROGRESS_NOTE_S.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, TextIO

from torchjob.api.model import Progress as JobProgress
from torchjob.api.output import hidden
from torchjob.progress import show

if TYPE_CHECKING:  # rich is loaded only for a live bar: a job's start does not pay for it (bench/launch.py)
    from rich.live import Live
    from rich.progress import Progress, TaskID

PROGRESS_NOTE_S = 30.0
COLOURS = ("36", "33", "35", "32", "34", "91", "96", "93", "95", "92")
# The lines a shipped function's runner prints to carry its value back: read by the Python API,
# never shown (torchjob.api.output).
LineFilter = Callable[[str, str], bool]  # (replica, its line) -> whether the terminal shows it


class Console:
    def __init__(
        self,
        combined_log: Path | None,
        out: TextIO | None = sys.stdout,
        err: TextIO | None = sys.stderr,
        colour: bool | None = None,
        show: LineFilter | None = None,
    ) -> None:
        self._show = show
        self._lock = threading.Lock()
        self._out = out.buffer if out is not None and hasattr(out, "buffer") else None
        self._err = err
        self._colour = colour if colour is not None else bool(out is not None and out.isatty())
        self._err_colour = colour if colour is not None else bool(err is not None and err.isatty())
        self._log: BinaryIO | None = combined_log.open("ab") if combined_log else None
        self._prefixes: dict[str, bytes] = {}
        self._live_ok = bool(out is not None and err is not None and out.isatty() and err.isatty())
        self._live: Live | None = None
        self._bar: Progress | None = None
        self._task: TaskID | None = None
        self._noted_at = 0.0

    def progress(self, p: JobProgress, job: str = "") -> None:
        """The job's latest progress: the live bar on a terminal, else a note now and then."""
        with self._lock:
            if self._live_ok and self._err is not None:
                self._show_bar(p, job)
                return
        if time.monotonic() - self._noted_at >= PROGRESS_NOTE_S:
            self._noted_at = time.monotonic()
            self.note(f"progress: {show.summary(p)}")

    def _show_bar(self, p: JobProgress, job: str) -> None:
        from rich.console import Console as RichConsole
        from rich.live import Live
        from rich.progress import BarColumn, Progress, TextColumn

        fields = " · ".join(x for x in (show.steps(p), show.rate(p)) if x)
        eta = f"ETA {show.duration(p.etaSeconds)}" if p.etaSeconds is not None else ""
        if self._bar is None:
            self._bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(), TextColumn("{task.fields[pct]}"),
                                 TextColumn("{task.fields[fields]}"), TextColumn("{task.fields[eta]}"),
                                 TextColumn("{task.fields[metrics]}"), expand=False)
            self._task = self._bar.add_task(job or "progress", total=100.0, pct="", fields="", eta="", metrics="")
            self._live = Live(self._bar, console=RichConsole(file=self._err), refresh_per_second=4, transient=False)
            self._live.start()
        assert self._task is not None
        self._bar.update(self._task, completed=p.percent or 0.0, pct=show.percent(p), fields=fields, eta=eta,
                         metrics=show.metrics(p), total=100.0 if p.percent is not None else None)

    def _write_out(self, data: bytes) -> None:
        if self._live is not None:  # above the bar
            from rich.text import Text

            self._live.console.print(Text.from_ansi(data.decode("utf-8", "replace").rstrip("\n")), soft_wrap=True,
                                     highlight=False, markup=False)
        elif self._out is not None:
            self._out.write(data)
            self._out.flush()

    def _prefix(self, replica: str) -> bytes:
        p = self._prefixes.get(replica)
        if p is None:
            text = f"[{replica}] "
            if self._colour:
                colour = COLOURS[len(self._prefixes) % len(COLOURS)]
                text = f"\x1b[{colour}m[{replica}]\x1b[0m "
            p = self._prefixes[replica] = text.encode()
        return p

    def _to_log(self, data: bytes) -> None:
        """Into the job's combined log, unless it cannot be written (a full disk): then it is given up
        and said once on stderr; the console goes on (the caller holds the lock)."""
        if self._log is None:
            return
        try:
            self._log.write(data)
            self._log.flush()
        except OSError as e:
            log, self._log = self._log, None
            with contextlib.suppress(OSError):
                log.close()
            if self._err is not None:
                self._err.write(f"torchjob: the job's log could not be written ({e.strerror or e}): "
                                "what follows is shown here but not kept\n")
                self._err.flush()

    def kept(self, replica: str, data: bytes) -> tuple[bool, bool]:
        """(kept in the log, shown on the terminal) for a replica's line."""
        text = data.decode("utf-8", "replace")
        if hidden(text):
            return False, False
        return True, self._show is None or self._show(replica, text)

    def line(self, replica: str, data: bytes) -> None:
        if not data.endswith(b"\n"):
            data += b"\n"
        log, shown = self.kept(replica, data)
        with self._lock:
            if shown:
                self._write_out(self._prefix(replica) + data)
            if log:
                self._to_log(f"[{replica}] ".encode() + data)

    def note(self, message: str, warning: bool = False) -> None:
        """torchjob's own line (a state change, an event)."""
        stamp = time.strftime("%H:%M:%S")
        with self._lock:
            if self._err is not None:
                head = "torchjob"
                if self._err_colour:
                    head = f"\x1b[{'33' if warning else '2'}mtorchjob\x1b[0m"
                if self._live is not None:
                    self._write_out(f"{head}: {message}\n".encode())
                else:
                    self._err.write(f"{head}: {message}\n")
                    self._err.flush()
            self._to_log(f"torchjob {stamp}: {message}\n".encode())

    def block(self, text: str) -> None:
        with self._lock:
            if self._live is not None:
                self._write_out(text.encode() + b"\n")
            elif self._err is not None:
                self._err.write(text + "\n")
                self._err.flush()
            self._to_log(text.encode() + b"\n")

    def close(self) -> None:
        with self._lock:
            if self._live is not None:
                self._live.stop()  # the bar's last state stays on the screen
                self._live = None
            if self._log is not None:
                with contextlib.suppress(OSError):  # a full disk: said when it was met
                    self._log.close()
                self._log = None
