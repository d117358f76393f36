"""The local runtime's own files are the user's alone: directories 0700, files 0600 (the store holds
whole specs, env values that may be secrets, and the logs what the jobs print). Never through the
process umask, which the jobs' processes inherit (their own files keep the user's umask)."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

DIR_MODE = 0o700
FILE_MODE = 0o600


def private_dir(path: Path, tighten: bool = True) -> Path:
    """Make `path` (and each missing parent) 0700; an existing one of ours is made 0700 too, unless
    not `tighten` (a directory the user named, which may be shared: only what is made is private)."""
    missing = []
    p = path
    while not p.exists() and p != p.parent:
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        try:
            d.mkdir(mode=DIR_MODE)
        except FileExistsError:
            pass
    if tighten:
        _tighten(path, DIR_MODE)
    return path


def private_file(path: Path) -> BinaryIO:
    """`path` opened to append, made 0600 (an existing one of ours too)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, FILE_MODE)
    try:
        st = os.fstat(fd)
        if st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) & ~FILE_MODE:
            os.fchmod(fd, FILE_MODE)
    except OSError:
        os.close(fd)
        raise
    return os.fdopen(fd, "ab")


def tighten_file(path: Path) -> None:
    """An existing file of ours made 0600, without opening it (see Store: a close drops locks)."""
    _tighten(path, FILE_MODE)


def _tighten(path: Path, mode: int) -> None:
    try:
        st = path.stat()
        if st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) & ~mode:
            path.chmod(stat.S_IMODE(st.st_mode) & mode)
    except OSError:
        pass
