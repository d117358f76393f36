"""A function defined in a notebook cell runs as a job from the notebook: the cells of
docs/tutorials/notebook.md, executed by a real Jupyter kernel (ipykernel, driven by nbclient)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbclient import NotebookClient

from tests.docs.blocks import tested as blocks
from tests.local.conftest import REPO

pytestmark = pytest.mark.e2e
PAGE = "tutorials/notebook.md"
TEST = "tests/sdk/test_notebook.py::test_a_function_from_a_notebook_cell_runs_in_a_real_kernel"


def outputs(nb: Any, kind: str) -> list[dict[str, Any]]:
    return [o for cell in nb.cells for o in cell.get("outputs", []) if o["output_type"] == kind]


def test_a_function_from_a_notebook_cell_runs_in_a_real_kernel(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHJOB_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PYTHONPATH", str(REPO / "src"))  # the kernel imports this tree's torchjob
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(code) for code in blocks(PAGE, TEST, "python")]
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    (tmp_path / "ran.ipynb").write_text(nbformat.writes(nb))  # to look at when it fails

    assert outputs(nb, "error") == []
    streamed = "".join(o["text"] for o in outputs(nb, "stream"))
    assert "torchjob: the master replica succeeded" in streamed, streamed
    for rank in (0, 1):  # each process's lines tagged with its rank; the value's own line not shown
        assert f"[master-0] [rank{rank}]: rank {rank} of 2 done" in streamed, streamed
    assert "@@torchjob" not in streamed
    # the value rank 0 returned, as the cell's result
    (value,) = [o["data"]["text/plain"] for o in outputs(nb, "execute_result")]
    assert value == "{'world': 2, 'weight': -0.225}"
    # one progress display, updated in place: HTML with a <progress> bar, and a text form
    shown = outputs(nb, "display_data")
    assert len(shown) == 1, shown
    html, text = shown[0]["data"]["text/html"], shown[0]["data"]["text/plain"]
    assert "<progress" in html and "15/15" in html and "loss" in html, html
    assert "15/15" in text
    # a cell is not a terminal: no escape codes anywhere in what the notebook keeps
    assert "\x1b" not in json.dumps(nb.cells[1]["outputs"])


FAILING = [
    "import torchjob\n\n\ndef boom():\n    import os\n\n    if os.environ['RANK'] == '1':\n"
    "        raise RuntimeError('the loss went to nan at step 3')\n",
    "torchjob.Job.from_function(boom, nproc_per_node=2).run()",
]


def test_a_failing_cell_shows_its_traceback_once_at_the_users_lines(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHJOB_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PYTHONPATH", str(REPO / "src"))
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(code) for code in FAILING]
    NotebookClient(nb, timeout=300, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    (tmp_path / "ran.ipynb").write_text(nbformat.writes(nb))
    (error,) = outputs(nb, "error")
    assert error["ename"] == "JobFailed" and "in the job's output above" in error["evalue"], error
    streamed = "".join(o["text"] for o in outputs(nb, "stream"))
    shown = streamed + "\n".join(error["traceback"])  # what the cell shows
    # the rank's traceback once (streamed, tagged with its rank), not again in torchrun's report or the
    # error (which says the error in one line); from the user's frame on, not the runner's
    assert shown.count("Traceback (most recent call last)") == 2, shown  # the rank's, and IPython's of JobFailed
    assert shown.count("line 8, in boom") == 2, shown  # the traceback's frame, and the error's where it was raised
    assert "  raised at : Cell In[1], line 8, in boom" in error["evalue"], error
    assert shown.count("RuntimeError: the loss went to nan at step 3") == 2, shown  # the traceback, the headline
    for word in ("ChildFailedError", "function.py", "_torchjob_call.py", "closing signal", "exitcode"):
        assert word not in shown, (word, shown)
    # the traceback points at the cell and its line, as IPython names it
    assert re.search(r'\[rank1\]:   File "Cell In\[1\]", line 8, in boom', streamed), streamed
    assert "line 8, in boom" in streamed
