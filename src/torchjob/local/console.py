"""Where a running job's output goes: prefixed replica lines and torchjob's own notes.

Replica output goes to stdout as `[worker-1] ...` (coloured on a terminal), torchjob's notes to
stderr, and both to the job's combined log, in the order they arrived.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import BinaryIO, TextIO

COLOURS = ("36", "33", "35", "32", "34", "91", "96", "93", "95", "92")


class Console:
    def __init__(
        self,
        combined_log: Path | None,
        out: TextIO | None = sys.stdout,
        err: TextIO | None = sys.stderr,
        colour: bool | None = None,
    ) -> None:
        self._lock = threading.Lock()
        self._out = out.buffer if out is not None and hasattr(out, "buffer") else None
        self._err = err
        self._colour = colour if colour is not None else bool(out is not None and out.isatty())
        self._err_colour = colour if colour is not None else bool(err is not None and err.isatty())
        self._log: BinaryIO | None = combined_log.open("ab") if combined_log else None
        self._prefixes: dict[str, bytes] = {}

    def _prefix(self, replica: str) -> bytes:
        p = self._prefixes.get(replica)
        if p is None:
            text = f"[{replica}] "
            if self._colour:
                colour = COLOURS[len(self._prefixes) % len(COLOURS)]
                text = f"\x1b[{colour}m[{replica}]\x1b[0m "
            p = self._prefixes[replica] = text.encode()
        return p

    def line(self, replica: str, data: bytes) -> None:
        if not data.endswith(b"\n"):
            data += b"\n"
        with self._lock:
            if self._out is not None:
                self._out.write(self._prefix(replica) + data)
                self._out.flush()
            if self._log is not None:
                self._log.write(f"[{replica}] ".encode() + data)
                self._log.flush()

    def note(self, message: str, warning: bool = False) -> None:
        """torchjob's own line (a state change, an event)."""
        stamp = time.strftime("%H:%M:%S")
        with self._lock:
            if self._err is not None:
                head = "torchjob"
                if self._err_colour:
                    head = f"\x1b[{'33' if warning else '2'}mtorchjob\x1b[0m"
                self._err.write(f"{head}: {message}\n")
                self._err.flush()
            if self._log is not None:
                self._log.write(f"torchjob {stamp}: {message}\n".encode())
                self._log.flush()

    def block(self, text: str) -> None:
        with self._lock:
            if self._err is not None:
                self._err.write(text + "\n")
                self._err.flush()
            if self._log is not None:
                self._log.write(text.encode() + b"\n")
                self._log.flush()

    def close(self) -> None:
        with self._lock:
            if self._log is not None:
                self._log.close()
                self._log = None
