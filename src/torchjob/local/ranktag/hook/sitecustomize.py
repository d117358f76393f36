"""torchjob's rank tag (torchjob.local.ranktag): in a process torchrun started for a local job
(TORCHJOB_RANK_TAG=1, LOCAL_RANK set), every line written to sys.stdout and sys.stderr starts with
`[rankN]: `, N the process's RANK, and is written whole. Then the user's own sitecustomize, if there
is one further on the path, runs as it would have. Standard library only; any Python 3."""

from __future__ import annotations

import os
import sys
import threading
from typing import Any, TextIO


class _Tagged:
    """A text stream that writes whole lines, each tagged, to the stream it wraps."""

    def __init__(self, inner: TextIO, tag: str) -> None:
        self._inner = inner
        self._tag = tag
        self._pending = ""
        self._at_start = True
        self._lock = threading.Lock()

    def _emit(self, text: str) -> str:
        out = (self._tag if self._at_start else "") + text
        self._at_start = text.endswith("\n")
        return out

    def write(self, s: str) -> int:
        with self._lock:
            self._pending += s
            if "\n" not in self._pending:
                return len(s)
            head, _, self._pending = self._pending.rpartition("\n")
            out = "".join(self._emit(line + "\n") for line in head.split("\n"))
            self._inner.write(out)
            self._inner.flush()
        return len(s)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        with self._lock:
            if self._pending:
                self._inner.write(self._emit(self._pending))
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
_chain()
