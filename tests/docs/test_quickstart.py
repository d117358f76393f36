"""The README's first command on a fresh clone, in a terminal: `bash scripts/quickstart.sh` makes .venv,
installs torchjob with pip (its dependencies, the editable build through its backend, pip's own
progress) and runs the bundled example, which trains and prints what the README shows.

One thing is left out, and said: torch itself. Its first install is a 3.0 GB download that unpacks
to 5.5 GB, 7-18 min on this 2-core machine, far past what one test may take; here torch (and numpy,
and what they require) are the ones this checkout's .venv installed, offered on PYTHONPATH as links,
so pip finds them "already satisfied" and the example imports them. torchjob's own dependencies and
its build backend come from the pinned wheelhouse tests/release uses, with hatchling's `editables`
(no index). The whole first run,
torch's download included, is bench/quickstart_fresh_clone.py (its figures are in the README)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.blocks import claimed_by
from tests.docs.console import assert_shown
from tests.docs.fresh_clone import clone, find_links, run_in_pty, torch_links, user_env
from torchjob.version import __version__

pytestmark = pytest.mark.e2e


@pytest.mark.timeout(600)  # about 2 min; more on a first run (the wheelhouse downloaded) or a busy machine
def test_the_quickstart_in_a_fresh_clone(tmp_path: Path) -> None:
    repo = clone(tmp_path / "torchjob")
    assert not (repo / ".venv").exists()
    linked = torch_links(tmp_path / "torch-site")
    assert {"torch", "numpy"} <= set(linked)
    env = user_env(tmp_path / "home", PYTHONPATH=str(tmp_path / "torch-site"), PIP_NO_INDEX="1",
                   PIP_FIND_LINKS=find_links())
    # the linked torch is built for this interpreter's version: python3 on PATH must be of it (as it is when
    # scripts/setup.sh made .venv with it); else the quickstart's own PYTHON names this one's base
    ver = subprocess.run(["python3", "-c", "import sys; print(sys.version_info[:2])"], env=env, capture_output=True,
                         text=True, timeout=60).stdout.strip()
    if ver != str(sys.version_info[:2]):
        env["PYTHON"] = str(Path(sys.base_prefix) / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}")
    ran = run_in_pty(["bash", "scripts/quickstart.sh"], repo, env, timeout=420)
    out = ran.output
    print(f"quickstart in a fresh clone: {ran.seconds:.0f} s (steps announced at "
          f"{', '.join(f'{s:.0f} s' for s in ran.steps.values())})")
    assert ran.code == 0, out[-6000:]
    # its three steps, said in order, the first making the virtual environment
    assert sorted(ran.steps) == [1, 2, 3] and list(ran.steps.values()) == sorted(ran.steps.values()), out[-6000:]
    assert f"==> quickstart [1/3] a virtual environment in .venv ({env.get('PYTHON', 'python3')} -m venv .venv)" in out
    assert (repo / ".venv" / "bin" / "torchjob").exists()
    # pip's own words: torch found, torchjob built from the clone and installed
    assert re.search(r"Requirement already satisfied: torch>=2\.2 in .*torch-site", out), out[-6000:]
    assert "Successfully built torchjob" in out
    installed = re.search(r"Successfully installed (.*)", out)
    assert installed and f"torchjob-{__version__}" in installed[1].split(), out[-6000:]
    # the example trained and printed what the README shows
    assert re.search(r"torchjob: job ddp-example succeeded in [\d.]+s", out), out[-6000:]
    readme = [b for b in claimed_by("tests/docs/test_docs_run.py::test_the_two_commands")
              if b.page == "README.md" and b.lang == "text"]
    assert readme
    for block in readme:  # three processes print at once: their lines interleave differently each run
        assert_shown(block.text, out, tmp_path / "home", ordered=False)
    # the clone's .venv runs the clone's torchjob (an editable install of its src/)
    where = subprocess.run([str(repo / ".venv/bin/python"), "-c", "import torchjob; print(torchjob.__file__)"],
                           env=env, capture_output=True, text=True, timeout=60)
    assert Path(where.stdout.strip()).is_relative_to(repo / "src"), (where.stdout, where.stderr)
