"""What a replica prints that torchjob already says, kept from the console (its own log keeps all).

torchrun's agent, sent SIGTERM (a suspend, a delete, the gang torn down), logs that it got the
signal and is stopping its workers, then dies with a `SignalException` traceback of some 30 lines;
when a worker fails it dies with a `ChildFailedError` traceback followed by its failure report, which
repeats the rank's own traceback. torchjob already says the replica stopped, and its root cause is
the failure report, once: these are dropped from the stream. Everything else (the user's processes'
lines, their tracebacks) still shows."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

# torchrun's agent's lines: glog-style, from torch.distributed's own modules
AGENT_LINE = re.compile(rb"^[IWE]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ \S*torch/distributed/")
TRACEBACK = b"Traceback (most recent call last):"
SIGNAL_EXCEPTION = b"SignalException: Process "
CHILD_FAILED = b"ChildFailedError:"
# what the agent logs about stopping its workers or their failure: torchjob says it in its own words
AGENT_NOISE = (b"closing signal", b"death signal", b"failed (exitcode:")
REPORT_RULE = b"=" * 20  # torchrun's failure report is framed by lines of '='
MAX_HELD = 400  # a traceback longer than this is shown as it is


class QuietStop:
    """A filter of one replica's lines for the console: `feed` each line, `end` at EOF."""

    def __init__(self, stopping: Callable[[], bool]) -> None:
        self._stopping = stopping
        self._held: list[bytes] = []
        self._report = 0  # inside torchrun's failure report: the rules seen (it ends at the second)

    def feed(self, line: bytes) -> Iterator[bytes]:
        if self._report:
            if line.startswith(REPORT_RULE):
                self._report += 1
                if self._report > 2:
                    self._report = 0
            return
        if self._held:
            self._held.append(line)
            if line[:1] in (b" ", b"\t", b"\n") and len(self._held) < MAX_HELD:
                return  # still inside the traceback
            held, self._held = self._held, []
            if CHILD_FAILED in line:
                self._report = 1  # the report follows: its opening rule, then up to its closing one
            elif SIGNAL_EXCEPTION not in line:
                yield from held  # another traceback: the user's to read
            return
        if line.startswith(TRACEBACK):
            self._held = [line]
        elif not (AGENT_LINE.match(line) and (self._stopping() or any(n in line for n in AGENT_NOISE))):
            yield line

    def end(self) -> Iterator[bytes]:
        held, self._held = self._held, []
        yield from held
