"""The workflows that run when the repository is public (.github/workflows): they cannot run here, so
they are linted by actionlint (built from the Go module proxy by hack/actionlint/build.sh, cached), and
what they run is held to what the test command runs: the quick suite is `scripts/test.sh --quick`, and
every `scripts/release.sh` step of the release is one the tests run too (this file, test_dist.py, and
the docs' blocks tests/incluster/test_registry.py runs). The steps only the release takes (check-tag,
notes) are run here against the real changelog."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.docs.blocks import every_block
from torchjob.version import __version__

REPO = Path(__file__).resolve().parents[2]
WORKFLOWS = REPO / ".github" / "workflows"
RELEASE = ["bash", str(REPO / "scripts" / "release.sh")]


def runs(workflow: str) -> list[str]:
    """Every `run:` script of a workflow's jobs, in order."""
    data = yaml.safe_load((WORKFLOWS / workflow).read_text())
    return [step["run"] for job in data["jobs"].values() for step in job["steps"] if "run" in step]


def triggers(workflow: str) -> Any:
    data = yaml.safe_load((WORKFLOWS / workflow).read_text())
    return data.get("on", data.get(True))  # YAML 1.1 reads a bare `on` key as True


@pytest.mark.timeout(900)  # a first build of actionlint (about a minute with an empty Go cache)
def test_the_workflows_pass_actionlint() -> None:
    built = subprocess.run(["bash", str(REPO / "hack" / "actionlint" / "build.sh")], capture_output=True, text=True,
                           timeout=880)
    assert built.returncode == 0, built.stderr[-3000:]
    lint = [built.stdout.strip().splitlines()[-1], "-no-color", "-oneline"]
    if shutil.which("shellcheck") is None:
        lint.append("-shellcheck=")  # the run: scripts are checked by shellcheck where it is installed
    out = subprocess.run([*lint, *sorted(str(p) for p in WORKFLOWS.glob("*.yml"))], capture_output=True, text=True,
                         cwd=REPO, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert sorted(p.name for p in WORKFLOWS.iterdir()) == ["ci.yml", "release.yml"]


def test_ci_runs_the_quick_suite_on_pull_requests() -> None:
    assert "pull_request" in triggers("ci.yml")
    assert any(re.search(r"(^|\s)bash scripts/test\.sh --quick\s*$", run, re.M) for run in runs("ci.yml"))
    assert "--quick" in (REPO / "scripts" / "test.sh").read_text()


def test_the_release_runs_on_a_version_tag_and_its_steps_are_the_tests_steps() -> None:
    assert triggers("release.yml") == {"push": {"tags": ["v*"]}}
    steps = [m.group(1) for run in runs("release.yml") for m in re.finditer(r"scripts/release\.sh (\w[\w-]*)", run)]
    assert {"check-tag", "dist", "chart", "notes", "version"} <= set(steps), steps
    # what the test command runs: tests (their source) and the docs' blocks that a test claims and runs
    tests = "\n".join(p.read_text() for p in (REPO / "tests").rglob("*.py") if p != Path(__file__))
    claimed = "\n".join(b.text for b in every_block() if b.claim)
    here = Path(__file__).read_text()
    for step in set(steps):
        called = re.search(rf"(release\.sh|\*RELEASE|\*copy)\W+{re.escape(step)}\b",
                           tests + "\n" + claimed + "\n" + here)  # (here: RELEASE and copy are release.sh)
        assert called, f"release.yml runs `scripts/release.sh {step}`, which no test runs"
    # the image from the one recipe the tests keep (tests/kube/test_operator_image.py: Dockerfile == build.py)
    assert any("docker build -t" in run and run.rstrip().endswith("docker push \"$IMAGE_REPOSITORY:$version\"")
               for run in runs("release.yml"))


def changelog_copy(tmp_path: Path, text: str) -> list[str]:
    (tmp_path / "scripts").mkdir()
    (tmp_path / "src" / "torchjob").mkdir(parents=True)
    shutil.copy(REPO / "scripts" / "release.sh", tmp_path / "scripts")
    shutil.copy(REPO / "src" / "torchjob" / "version.py", tmp_path / "src" / "torchjob")
    (tmp_path / "CHANGELOG.md").write_text(text)
    return ["bash", str(tmp_path / "scripts" / "release.sh")]


def test_a_tag_releases_only_the_version_it_names_with_a_dated_section(tmp_path: Path) -> None:
    text = (REPO / "CHANGELOG.md").read_text()
    dated = re.search(rf"^## \[{re.escape(__version__)}\] - \d{{4}}-\d{{2}}-\d{{2}}$", text, re.M)
    out = subprocess.run([*RELEASE, "check-tag", f"v{__version__}"], capture_output=True, text=True)
    assert (out.returncode == 0) == bool(dated), out.stderr
    if not dated:
        assert f"no dated section '## [{__version__}] - YYYY-MM-DD'" in out.stderr
    wrong = subprocess.run([*RELEASE, "check-tag", "v99.0.0"], capture_output=True, text=True)
    assert wrong.returncode == 1 and f"is not v{__version__}" in wrong.stderr
    copy = changelog_copy(tmp_path, re.sub(rf"^## \[{re.escape(__version__)}\] - .*$",
                                           f"## [{__version__}] - 2026-12-01", text, flags=re.M))
    ok = subprocess.run([*copy, "check-tag", f"v{__version__}"], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr


def test_the_release_note_is_the_changelog_s_section() -> None:
    out = subprocess.run([*RELEASE, "notes"], capture_output=True, text=True, env={**os.environ})
    assert out.returncode == 0, out.stderr
    text = (REPO / "CHANGELOG.md").read_text()
    section = text.split(f"\n## [{__version__}]", 1)[1].split("\n", 1)[1]
    section = re.split(r"\n## |\n\[[^\]]+\]: ", section, maxsplit=1)[0]
    assert out.stdout.strip() == section.strip()
    assert "### Added" in out.stdout and "## [" not in out.stdout and "]: https://" not in out.stdout
    missing = subprocess.run([*RELEASE, "notes", "99.0.0"], capture_output=True, text=True)
    assert missing.returncode == 1 and "no section '## [99.0.0]'" in missing.stderr


def test_the_changelog_keeps_a_changelog() -> None:
    text = (REPO / "CHANGELOG.md").read_text()
    assert text.startswith("# Changelog\n") and "Keep a Changelog" in text
    headings = re.findall(r"^## \[([^\]]+)\](?: - (.+))?$", text, re.M)
    assert headings[0] == ("Unreleased", "")
    for version, date in headings[1:]:
        assert re.fullmatch(r"\d+\.\d+\.\d+", version) and re.fullmatch(r"\d{4}-\d{2}-\d{2}|Unreleased", date)
        assert re.search(rf"^\[{re.escape(version)}\]: https://", text, re.M), f"{version}: its link"
    kinds = set(re.findall(r"^### (\w+)$", text, re.M))
    assert kinds <= {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}, kinds
