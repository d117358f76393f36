"""NCCL's flight recorder for local replicas (core/diagnosis/flight_recorder.py): each attempt's ranks
dump into the attempt's folder, and a failed job's root cause names the dumps of its attempts."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from torchjob.core.diagnosis import flight_recorder


def env(attempt_dir: Path, given: Mapping[str, str]) -> dict[str, str]:
    """The settings an attempt gets that neither `given` (the replica's env) nor this process's set."""
    return flight_recorder.env(str(attempt_dir), {**os.environ, **given})


def dumps(attempt_dirs: Iterable[Path]) -> list[str]:
    """The flight recorder's files in these attempts' folders."""
    found: list[str] = []
    for d in attempt_dirs:
        try:
            found += sorted(str(p) for p in d.glob(f"{flight_recorder.PREFIX}*") if p.is_file())
        except OSError:
            continue
    return found
