"""What a replica prints because torchjob stopped it, kept from the console (its own log keeps it).

torchrun's agent, sent SIGTERM (a suspend, a delete, the gang torn down), logs that it got the
signal and is stopping its workers, then dies with a `SignalException` traceback of some 30 lines.
None of it is the user's: torchjob already says the replica stopped. Once a replica is stopping,
its agent's own log lines and that traceback are dropped from the stream; everything else (the
user's processes' lines, any other traceback) still shows."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

# torchrun's agent's lines: glog-style, from torch.distributed's own modules
AGENT_LINE = re.compile(rb"^[IWE]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ \S*torch/distributed/")
TRACEBACK = b"Traceback (most recent call last):"
SIGNAL_EXCEPTION = b"SignalException: Process "
MAX_HELD = 200  # a traceback longer than this is shown as it is


class QuietStop:
    """A filter of one replica's lines for the console: `feed` each line, `end` at EOF."""

    def __init__(self, stopping: Callable[[], bool]) -> None:
        self._stopping = stopping
        self._held: list[bytes] = []

    def feed(self, line: bytes) -> Iterator[bytes]:
        if self._held:
            self._held.append(line)
            if line[:1] in (b" ", b"\t") and len(self._held) < MAX_HELD:
                return  # still inside the traceback
            held, self._held = self._held, []
            if SIGNAL_EXCEPTION not in line:
                yield from held  # another traceback: the user's to read
            return
        if not self._stopping():
            yield line
        elif line.startswith(TRACEBACK):
            self._held = [line]
        elif not AGENT_LINE.match(line):
            yield line

    def end(self) -> Iterator[bytes]:
        held, self._held = self._held, []
        yield from held
