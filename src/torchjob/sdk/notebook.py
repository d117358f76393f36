"""A job's output in a Jupyter notebook: the replicas' lines and torchjob's notes as plain text in the
cell (terminal escape codes stripped: a cell is not a terminal), and the progress as one HTML bar
(`<progress>`, percent, step, rate, ETA, metrics) that updates in place (an IPython display with an id)."""

from __future__ import annotations

import html
import re
import threading
from pathlib import Path
from typing import Any, TextIO

from torchjob.api.model import Progress as JobProgress
from torchjob.console import Console
from torchjob.progress import show

ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")


class ProgressView:
    """The progress as a notebook shows it (HTML) and as text (`repr`, for a plain front end)."""

    def __init__(self, job: str, p: JobProgress) -> None:
        self.job, self.p = job, p

    def __repr__(self) -> str:
        return f"{self.job}: {show.summary(self.p)}"

    def _repr_html_(self) -> str:
        pct = self.p.percent
        bar = f'<progress value="{pct:.1f}" max="100" style="width:20em"></progress>' if pct is not None else \
            '<progress style="width:20em"></progress>'
        parts = [show.percent(self.p), show.steps(self.p), show.rate(self.p),
                 f"ETA {show.duration(self.p.etaSeconds)}" if self.p.etaSeconds is not None else "",
                 show.metrics(self.p)]
        text = " · ".join(html.escape(x) for x in parts if x)
        return f"<div><b>{html.escape(self.job)}</b> {bar} {text}</div>"


class NotebookConsole(Console):
    """The console of a job run from a notebook cell."""

    def __init__(self, combined_log: Path | None, out: TextIO | None, err: TextIO | None) -> None:
        super().__init__(combined_log, out=None, err=None, colour=False)  # the log only; the cell below
        self._cell_out, self._cell_err = out, err
        self._display: Any = None
        self._cell_lock = threading.Lock()

    def _cell(self, text: str, err: bool = False) -> None:
        stream = self._cell_err if err else self._cell_out
        if stream is not None:
            with self._cell_lock:
                stream.write(ANSI.sub("", text))
                stream.flush()

    def line(self, replica: str, data: bytes) -> None:
        super().line(replica, data)
        if not self.kept(replica, data)[1]:
            return
        text = data.decode("utf-8", "replace")
        self._cell(f"[{replica}] {text}" + ("" if text.endswith("\n") else "\n"))

    def note(self, message: str, warning: bool = False) -> None:
        super().note(message, warning)
        self._cell(f"torchjob: {message}\n", err=True)

    def block(self, text: str) -> None:
        super().block(text)
        self._cell(text + "\n", err=True)

    def progress(self, p: JobProgress, job: str = "") -> None:
        from IPython.display import display

        view = ProgressView(job, p)
        with self._cell_lock:
            if self._display is None:
                self._display = display(view, display_id=True)  # type: ignore[no-untyped-call]
            else:
                self._display.update(view)
