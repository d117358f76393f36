"""The docs' commands and examples, run: each test reads the blocks that name it
(`<!-- tested by: tests/docs/test_docs_run.py::NAME -->`) out of the pages and runs them as a
user would, comparing what the page shows with what they print. The bundled DDP example runs
once for all the pages that show it."""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.docs.blocks import REPO, Block, claimed_by
from tests.docs.console import assert_shown, commands, run, sessions

pytestmark = pytest.mark.e2e
HERE = "tests/docs/test_docs_run.py"


@dataclass(frozen=True)
class Ran:
    home: Path
    code: int
    output: str


@pytest.fixture(scope="module")
def ddp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ran]:
    """`torchjob run examples/ddp/job.yaml` (the quickstart's own command), once, in a store of its own."""
    home = tmp_path_factory.mktemp("ddp-home")
    code, out = run("torchjob run examples/ddp/job.yaml", home)
    yield Ran(home, code, out)


def _of(test: str, lang: str | None = None) -> list[Block]:
    found = claimed_by(f"{HERE}::{test}")
    return [b for b in found if lang is None or b.lang == lang]


def _console(block: Block, home: Path, cwd: Path = REPO, ordered: bool | None = None,
             fix: tuple[tuple[str, str], ...] = ()) -> None:
    """Runs each `$ ` command of a console block and checks the page's lines are in what it printed:
    in order, except for `torchjob run` (its replicas print at once, interleaved differently each run)."""
    for command, shown in sessions(block.text):
        code, out = run(command, home, cwd)
        in_order = not command.startswith("torchjob run") if ordered is None else ordered
        for pattern, repl in fix:
            out, shown = re.sub(pattern, repl, out), re.sub(pattern, repl, shown)
        try:
            assert_shown(shown, out, home, in_order)
        except AssertionError as e:
            raise AssertionError(f"{block.where}: $ {command} (exit {code}):\n{e}") from None


def test_the_two_commands(ddp: Ran) -> None:
    blocks = _of("test_the_two_commands")
    for b in (b for b in blocks if b.lang == "bash"):
        assert commands(b.text) == ["bash scripts/quickstart.sh", "bash scripts/test.sh"], b.where
    # the first runs the bundled example (its last line); the second is the test command CI runs,
    # which builds these docs strictly and runs this very test (it cannot run itself here)
    quickstart = (REPO / "scripts" / "quickstart.sh").read_text().strip().splitlines()
    assert quickstart[-1] == "exec .venv/bin/torchjob run examples/ddp/job.yaml"
    # the quickstart installs what the example needs, and nothing outside .venv; the test command the rest
    installs = [line for line in quickstart if line.startswith(".venv/bin/python -m pip install")]
    assert installs == ['.venv/bin/python -m pip install --progress-bar on -e ".[examples]"'], installs
    code = [line for line in quickstart if not line.lstrip().startswith("#")]
    assert not [line for line in code if "apt-get" in line or "setup.sh" in line], code
    assert "bash scripts/setup.sh" in (REPO / "scripts" / "test.sh").read_text()
    assert '-e ".[test,audit,docs]"' in (REPO / "scripts" / "setup.sh").read_text()
    assert "bash scripts/test.sh" in (REPO / ".ci" / "run").read_text()
    assert "mkdocs build --strict" in (REPO / "scripts" / "test.sh").read_text()
    assert ddp.code == 0, ddp.output
    outputs = [b for b in blocks if b.lang == "text"]
    assert outputs
    for b in outputs:  # three processes print at once: their lines interleave differently each run
        assert_shown(b.text, ddp.output, ddp.home, ordered=False)


def test_the_ddp_tutorial(ddp: Ran) -> None:
    assert ddp.code == 0, ddp.output
    for b in _of("test_the_ddp_tutorial"):
        if b.lang == "yaml":
            assert b.text.strip() == (REPO / "examples" / "ddp" / "job.yaml").read_text().strip(), b.where
        elif b.lang == "console":
            for command, shown in sessions(b.text):
                if command == "torchjob run examples/ddp/job.yaml":  # the run the fixture made
                    assert_shown(shown, ddp.output, ddp.home, ordered=False)
                else:
                    _console(Block(b.page, b.line, b.lang, f"$ {command}\n{shown}", b.claim), ddp.home)
        elif b.lang == "text":
            assert_shown(b.text, ddp.output, ddp.home, ordered=False)
        else:
            raise AssertionError(f"{b.where}: a {b.lang!r} block this test does not know how to run")


def test_a_job_that_fails(tmp_path: Path) -> None:
    (tmp_path / "examples").symlink_to(REPO / "examples")
    blocks = _of("test_a_job_that_fails")
    for b in (b for b in blocks if b.lang == "yaml"):
        name = "ddp-broken.yaml" if "name: ddp-broken" in b.text else "job.yaml"
        (tmp_path / name).write_text(b.text + "\n")
    home = tmp_path / "home"
    # which worker fails first, and so which one the root cause names, changes from run to run
    which = ((r"worker-[01]", "worker-<i>"), (r"node rank [12]", "node rank <n>"))
    for b in (b for b in blocks if b.lang == "console"):
        _console(b, home, tmp_path, ordered=False, fix=which)


def test_the_layout_names_what_exists() -> None:
    for b in _of("test_the_layout_names_what_exists"):
        top = REPO
        for line in b.text.splitlines():
            m = re.match(r"^(\s*)(\S+/|\S+\.py)\s", line + " ")
            if not m:
                continue
            word = m[2].rstrip("/")
            if not m[1]:  # a top-level directory of the repository: what follows is in it
                top = REPO / word
                assert top.is_dir(), f"{b.where}: {word}/ does not exist"
            else:  # a package or module in it, at any depth
                assert any(top.rglob(word)), f"{b.where}: {word} is named but is nowhere under {top}"


def test_the_bench_tables_are_what_the_benches_print() -> None:
    """The tables' row labels are the ones the benches print (their numbers are a day's measure)."""
    sources = "\n".join(p.read_text() for p in (REPO / "bench").glob("*.py"))
    rows = 0
    for b in _of("test_the_bench_tables_are_what_the_benches_print"):
        for line in b.text.splitlines()[1:]:
            m = re.match(r"^\s*([A-Za-z][^:]*?)\s*(?::\s|\s{2,})[\d.-]", line)
            if not m or "/" in m[1] or m[1].startswith("targets"):
                continue  # a ratio row (its label is made of the peers' names) or the targets line
            assert m[1] in sources, f"{b.where}: {m[1]!r} is printed by no bench in bench/"
            rows += 1
    assert rows > 40

def _examples(tmp_path: Path) -> Path:
    """A directory to run a page's commands in, with the repository's examples/ (what they name)."""
    (tmp_path / "examples").symlink_to(REPO / "examples")
    return tmp_path


def _file_blocks(blocks: list[Block]) -> None:
    """A yaml block is a file of examples/, as it is there; a diff block is the diff of two of them."""
    files = {p.read_text().strip(): p for p in (REPO / "examples").rglob("*.yaml")}
    for b in blocks:
        if b.lang == "yaml":
            assert b.text.strip() in files, f"{b.where}: this document is not a file of examples/ (as it is there)"
        elif b.lang == "diff":
            old, new = re.findall(r"^--- (\S+)\n\+\+\+ (\S+)", b.text, re.M)[0]
            a, c = (REPO / old).read_text().splitlines(True), (REPO / new).read_text().splitlines(True)
            assert b.text.strip() == "".join(difflib.unified_diff(a, c, old, new)).strip(), f"{b.where}: stale diff"


def _run_page(test: str, tmp_path: Path) -> None:
    blocks = _of(test)
    _file_blocks(blocks)
    cwd, home = _examples(tmp_path), tmp_path / "home"
    for b in blocks:
        if b.lang == "console":
            _console(b, home, cwd)
        elif b.lang not in ("yaml", "diff"):
            raise AssertionError(f"{b.where}: a {b.lang!r} block this test does not know how to run")


@pytest.mark.skipif(os.geteuid() != 0, reason="the PVC's stand-in is mounted at /t9k/mnt: root (or user namespaces)")
def test_coming_from_t9k(tmp_path: Path) -> None:
    _run_page("test_coming_from_t9k", tmp_path)
    assert (tmp_path / "mnist-pvc" / "model_state_dict.pt").is_file()
    assert (tmp_path / "mnist-pvc" / "log" / "loss.txt").is_file()


def test_coming_from_volcano(tmp_path: Path) -> None:
    _run_page("test_coming_from_volcano", tmp_path)


def test_coming_from_kubeflow(tmp_path: Path) -> None:
    _run_page("test_coming_from_kubeflow", tmp_path)


def test_coming_from_torchrun(tmp_path: Path) -> None:
    _run_page("test_coming_from_torchrun", tmp_path)


def test_coming_from_torchx(tmp_path: Path) -> None:
    _run_page("test_coming_from_torchx", tmp_path)


def test_the_torchjob_document(tmp_path: Path) -> None:
    """The reference's document is a valid TorchJob whose every field reaches the plan."""
    (block,) = _of("test_the_torchjob_document")
    (tmp_path / "job.yaml").write_text(block.text + "\n")
    code, out = run("torchjob validate job.yaml", tmp_path / "home", tmp_path)
    assert code == 0 and "job.yaml: valid TorchJob 'my-job'" in out, out
    code, out = run("torchjob render job.yaml -o json", tmp_path / "home", tmp_path)
    assert code == 0, out
    assert '"NCCL_DEBUG": "INFO"' in out and '"workingDir": "/path"' in out and '"WORLD_SIZE": "3"' in out
    assert "--configmap my-scripts=PATH" in out  # the configMap volume needs its files: said, not dropped


def test_reporting_progress(tmp_path: Path) -> None:
    """The page's loop, with a made-up step, reports from a real replica to torchjob's endpoint."""
    (block,) = _of("test_reporting_progress")
    script = "import time\nsteps = 20\n\nclass _Loss:\n    def item(self) -> float:\n        return 0.5\n\n" \
             "def train_one_step() -> _Loss:\n    time.sleep(0.05)\n    return _Loss()\n\n" + block.text + "\n"
    (tmp_path / "train.py").write_text(script)
    (tmp_path / "job.yaml").write_text(
        "apiVersion: torchjob.dev/v1\nkind: TorchJob\nmetadata: {name: reports}\nspec:\n  pytorchReplicaSpecs:\n"
        "    Master:\n      template:\n        spec:\n          containers:\n"
        "            - {name: pytorch, command: [python, train.py]}\n")
    home = tmp_path / "home"
    code, out = run("torchjob run job.yaml", home, tmp_path)
    assert code == 0, out
    code, out = run("torchjob describe reports", home, tmp_path)
    assert "step 20/20" in out and "loss=0.5" in out and "lr=0.01" in out, out


def test_the_operator_offline(tmp_path: Path) -> None:
    (block,) = _of("test_the_operator_offline")
    cwd, home = _examples(tmp_path), tmp_path / "home"
    outputs = {}
    for command in commands(block.text):
        code, out = run(command, home, cwd)
        assert code == 0, f"{block.where}: {command}: {out}"
        outputs[command] = out
    import yaml

    plain = list(yaml.safe_load_all((tmp_path / "torchjob.yaml").read_text()))
    kinds = [o["kind"] for o in plain]
    assert "CustomResourceDefinition" in kinds and "Deployment" in kinds and "ClusterRole" in kinds
    more = list(yaml.safe_load_all((tmp_path / "with-kubeflow.yaml").read_text()))
    crds = [o["metadata"]["name"] for o in more if o["kind"] == "CustomResourceDefinition"]
    assert crds == ["torchjobs.torchjob.dev", "pytorchjobs.kubeflow.org"] or set(crds) == {
        "torchjobs.torchjob.dev", "pytorchjobs.kubeflow.org"}
    deployment = next(o for o in more if o["kind"] == "Deployment")
    assert "--gang-scheduler-name=volcano" in deployment["spec"]["template"]["spec"]["containers"][0]["command"]
    rendered = outputs["torchjob render --kube examples/ddp/job.yaml"]
    assert "name: ddp-example-master-0" in rendered and "name: ddp-example-worker-1" in rendered


def test_moving_to_a_cluster(tmp_path: Path) -> None:
    _run_page("test_moving_to_a_cluster", tmp_path)
