"""Running a docs block's commands as a user types them, and comparing what they print with what
the page shows: the parts that are the same on every run (pids, ports, times, dates, uids and the
state directory are not)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from tests.docs.blocks import REPO

GAP = "..."
VOLATILE = [
    (re.compile(r"\s+"), " "),
    (re.compile(r"\b\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(\.\d+)?"), "<time>"),
    (re.compile(r"\bpid :? ?\d+"), "pid <pid>"),
    (re.compile(r"^ ?(\S+ \d+) \d+ (?=<time>)"), r"\1 <pid> "),  # describe's attempts: REPLICA ATTEMPT PID
    (re.compile(r"127\.0\.0\.1:\d+"), "127.0.0.1:<port>"),
    # uids before durations: a uid's group such as 416d would read as a duration
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"), "<uid>"),
    (re.compile(r"\b\d+(\.\d+)?(ms|s|m|h|d)\b"), "<duration>"),  # list's AGE is 8s, 1m, 2h...
]


def normalize(text: str, home: Path | None = None) -> list[str]:
    """The lines of `text` with what changes from run to run replaced, blank lines dropped."""
    if home is not None:
        text = text.replace(str(home), "~/.torchjob")
    text = text.replace("/root/.torchjob", "~/.torchjob")
    out = []
    for line in text.splitlines():
        for pattern, repl in VOLATILE:
            line = pattern.sub(repl, line)
        line = line.strip()
        if line:
            out.append(line)
    return out


def sessions(text: str) -> list[tuple[str, str]]:
    """A console block as (command, the output shown after it); `$ ` starts a command."""
    out: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith("$ "):
            out.append((line[2:], []))
        elif out:
            out[-1][1].append(line)
        else:
            raise AssertionError(f"a console block must start with a `$ ` command: {line!r}")
    return [(cmd, "\n".join(lines)) for cmd, lines in out]


def commands(text: str) -> list[str]:
    """A bash block's commands, one a line, as written (a trailing `  # comment` dropped)."""
    out = []
    for line in text.splitlines():
        line = re.sub(r"(^|\s+)#\s.*$", "", line).strip()
        if line:
            out.append(line)
    return out


def shim(directory: Path) -> Path:
    """A `torchjob` on PATH that is this interpreter's (the tree under test), so that a page's
    command runs as the user types it, through bash (pipes, `>`, `&&` as written)."""
    directory.mkdir(parents=True, exist_ok=True)
    exe = directory / "torchjob"
    # argv[0] `torchjob`, as an installed command's: click names the program by it in its messages
    exe.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -c "import sys; sys.argv[0] = \'torchjob\'; '
                   f'from torchjob.cli.main import main; main()" "$@"\n')
    exe.chmod(0o755)
    return directory


def run(command: str, home: Path, cwd: Path = REPO, timeout: float = 180) -> tuple[int, str]:
    """Runs a command as a user would (stdin closed), stdout and stderr in one stream as a terminal shows."""
    bin_dir = shim(home.parent / f"{home.name}-bin")
    env = {**os.environ, "TORCHJOB_HOME": str(home), "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}"}
    proc = subprocess.run(["bash", "-c", command], cwd=cwd, env=env, text=True, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=timeout)
    return proc.returncode, proc.stdout


def assert_shown(shown: str, real: str, home: Path | None = None, ordered: bool = True) -> None:
    """Every line the page shows is in the real output: in order (a `...` line stands for any lines
    between; without one, the lines must follow each other), or anywhere when the lines come from
    several processes at once (`ordered=False`)."""
    want, got = normalize(shown, home), normalize(real, home)
    if not ordered:
        missing = [w for w in want if w != GAP and w not in got]
        assert not missing, "shown but not printed:\n  " + "\n  ".join(missing) + "\nprinted:\n  " + "\n  ".join(got)
        return
    pos = 0
    free = True  # the first shown line may be anywhere
    for w in want:
        if w == GAP:
            free = True
            continue
        if free:
            try:
                pos = got.index(w, pos) + 1
            except ValueError:
                raise AssertionError(f"shown but not printed (after line {pos}): {w!r}\nprinted:\n  "
                                     + "\n  ".join(got)) from None
        else:
            printed = got[pos] if pos < len(got) else "nothing"
            assert printed == w, f"shown {w!r}, printed {printed!r}\nprinted:\n  " + "\n  ".join(got)
            pos += 1
        free = False


def shell_env(tmp_path: Path) -> dict[str, str]:
    """The environment of a shell in which `torchjob` is this tree's command (as a user's install is),
    with its own TORCHJOB_HOME."""
    bin_dir = shim(tmp_path / "bin")
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(REPO / "src"),
            "TORCHJOB_HOME": str(tmp_path / "home")}
