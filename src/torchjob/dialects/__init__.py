"""Readers for foreign job documents (Kubeflow, Volcano, T9k) -> `TorchJob`.

Each reader takes a parsed `Document` and returns a validated native job. None are registered
yet; `reader_for` answers None and the loader says which kinds are supported.
"""

from __future__ import annotations

from collections.abc import Callable

from torchjob.api.model import TorchJob
from torchjob.api.source import Document

Reader = Callable[[Document], TorchJob]

READERS: dict[tuple[str, str], Reader] = {}


def reader_for(api_version: object, kind: object) -> Reader | None:
    return READERS.get((str(api_version), str(kind)))
