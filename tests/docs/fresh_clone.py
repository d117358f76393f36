"""The README's first command, `bash scripts/quickstart.sh`, as a newcomer runs it: in a fresh `git clone`
of this repository, in a terminal (a pty: pip shows its progress bars as it does to a person), no
standard input, no virtual environment active, `python3` from PATH. Shared by the suite's test
(tests/docs/test_quickstart.py) and the whole run by hand (bench/quickstart_fresh_clone.py)."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.docs.blocks import REPO

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
STEP = re.compile(r"==> quickstart \[(\d)/3\] (.*)")


@dataclass
class Run:
    code: int
    output: str  # what the terminal showed, escapes removed, each carriage return a new line
    seconds: float
    steps: dict[int, float] = field(default_factory=dict)  # step -> seconds from the start when it was announced


def clone(dest: Path) -> Path:
    """A fresh clone of this repository's HEAD (what a newcomer gets: committed files only)."""
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(dest)], check=True, timeout=120,
                   stdin=subprocess.DEVNULL)
    return dest


def user_env(home: Path, **extra: str) -> dict[str, str]:
    """A newcomer's shell: no virtual environment active (this checkout's .venv off PATH), no PYTHONPATH,
    their own TORCHJOB_HOME."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "PIP_REQUIRE_VIRTUALENV")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "/usr/bin:/bin").split(os.pathsep)
                                  if p and not Path(p).resolve().is_relative_to(REPO))
    env["TORCHJOB_HOME"] = str(home)
    env.update(extra)
    return env


def run_in_pty(argv: list[str], cwd: Path, env: dict[str, str], timeout: float) -> Run:
    """`argv` with a pty as its terminal (stdout and stderr) and /dev/null as its standard input."""
    t0 = time.monotonic()
    leader, follower = pty.openpty()
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=follower, stderr=follower,
                            start_new_session=True)
    os.close(follower)
    chunks: list[bytes] = []
    steps: dict[int, float] = {}
    pending = ""
    try:
        while True:
            left = timeout - (time.monotonic() - t0)
            if left <= 0:
                proc.kill()
                raise AssertionError(f"{' '.join(argv)} ran past {timeout:g}s; it showed:\n"
                                     + _text(b"".join(chunks))[-4000:])
            ready, _, _ = select.select([leader], [], [], min(left, 1.0))
            if not ready:
                continue
            try:
                data = os.read(leader, 65536)
            except OSError:  # the last writer closed: it ended
                break
            if not data:
                break
            chunks.append(data)
            pending += _text(data)
            *lines, pending = pending.split("\n")
            for line in lines:
                if m := STEP.search(line):
                    steps[int(m[1])] = time.monotonic() - t0
        code = proc.wait(timeout=max(1.0, timeout - (time.monotonic() - t0)))
    finally:
        os.close(leader)
        if proc.poll() is None:
            proc.kill()
    return Run(code, _text(b"".join(chunks)), time.monotonic() - t0, steps)


def _text(data: bytes) -> str:
    return ANSI.sub("", data.decode("utf-8", "replace")).replace("\r\n", "\n").replace("\r", "\n")


def torch_links(dest: Path) -> list[str]:
    """A directory of links to what `.[examples]` needs beyond torchjob's own dependencies, as this
    checkout's .venv has it installed: torch and numpy, and what they require (for this platform),
    each distribution's files and metadata. On PYTHONPATH, pip finds them installed ("Requirement
    already satisfied") and the example imports torch from there: the 5.5 GB a first install
    unpacks (6-10 min here) is left out, nothing else. Returns the distributions linked."""
    from importlib.metadata import PackageNotFoundError, distribution

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    dest.mkdir(parents=True, exist_ok=True)
    todo: list[tuple[str, str]] = [("torch", ""), ("numpy", "")]  # (a distribution, one of its extras or "")
    seen, done = {}, set()
    while todo:
        name, extra = todo.pop()
        name = canonicalize_name(name)
        if (name, extra) in done:
            continue
        done.add((name, extra))
        try:
            dist = seen.get(name) or distribution(name)
        except PackageNotFoundError:
            continue
        seen[name] = dist
        for spec in dist.requires or []:
            req = Requirement(spec)
            if req.marker is None or req.marker.evaluate({"extra": extra}):
                todo += [(req.name, e) for e in ("", *req.extras)]
    if "torch" not in seen:
        raise AssertionError(f"{sys.executable} has no torch to link: run scripts/setup.sh")
    for dist in seen.values():
        site = Path(str(dist.locate_file("")))
        for top in {f.parts[0] for f in dist.files or [] if f.parts and f.parts[0] not in ("..", "__pycache__")}:
            if not (dest / top).exists() and (site / top).exists():
                (dest / top).symlink_to(site / top)
    return sorted(seen)


EDITABLES = "editables==0.5"  # what hatchling asks for to build an editable install (pip install -e)


def find_links() -> str:
    """Where pip finds every wheel the quickstart installs but torch's: the pinned wheels of torchjob's
    own dependencies and its build backend (scripts/release.sh wheelhouse, as tests/release uses them),
    and the one more an editable build needs (hatchling's `editables`); each downloaded once per
    machine and cached, so that pip needs no index (PIP_NO_INDEX=1, PIP_FIND_LINKS=these)."""
    out = subprocess.run(["bash", str(REPO / "scripts" / "release.sh"), "wheelhouse"], capture_output=True, text=True,
                         timeout=600, env={**os.environ, "PYTHON": sys.executable}, stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stderr[-4000:]
    house = Path(out.stdout.strip())
    extra = house.parent.parent / "editable-build" / EDITABLES.replace("==", "-")
    if not (extra / ".complete").exists():
        extra.mkdir(parents=True, exist_ok=True)
        got = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                              "-d", str(extra), EDITABLES], capture_output=True, text=True, timeout=300,
                             stdin=subprocess.DEVNULL)
        assert got.returncode == 0, got.stderr[-4000:]
        (extra / ".complete").touch()
    return f"{house} {extra}"
