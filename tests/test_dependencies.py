"""What torchjob depends on (issue 19, finding 13): every third-party module src/ imports is a
declared dependency; the installed versions meet the declared floors; the floors are past the
advisories known for them; the operator image installs every package pinned. The audit of the
installed set against an advisory source is scripts/audit.py (in scripts/test.sh): it can only run
where a source answers, so these checks stand whether or not it does."""

from __future__ import annotations

import ast
import importlib.metadata as md
import re
import sys
from pathlib import Path

import tomllib
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
RUNTIME = [Requirement(r) for r in PYPROJECT["project"]["dependencies"]]
# Advisories known for a dependency, and the first version that fixes each: the declared floor must
# be past them all (add one here when it is published, then raise the floor).
ADVISORIES: dict[str, list[tuple[str, str]]] = {
    "cryptography": [("CVE-2024-26130", "42.0.4"), ("GHSA-537c-gmf6-5ccf", "48.0.1")],
}
# certifi: imported under `except ImportError` (a CA bundle when there is one); torch: by the runner of a
# shipped function, under `except ImportError` (torch's error file when the image has torch); IPython: by the
# notebook console, only inside a Jupyter kernel, where IPython is; mcp: by `torchjob mcp` only, the
# [mcp] extra (the command says to install it where it is missing; the operator image never has it).
OPTIONAL_IMPORTS = {"certifi", "torch", "IPython", "mcp"}


def floor(spec: SpecifierSet) -> Version | None:
    lows = [Version(s.version) for s in spec if s.operator in (">=", "==", "~=")]
    return max(lows) if lows else None


def third_party_imports() -> set[str]:
    found: set[str] = set()
    for path in (REPO / "src" / "torchjob").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.add(node.module.split(".")[0])
    return {m for m in found if m not in sys.stdlib_module_names and m not in {"torchjob", "__future__"}}


def test_every_third_party_module_src_imports_is_a_declared_dependency() -> None:
    declared = {canonicalize_name(r.name) for r in RUNTIME}
    providers = md.packages_distributions()
    missing = {}
    for module in sorted(third_party_imports() - OPTIONAL_IMPORTS):
        dists = {canonicalize_name(d) for d in providers.get(module, [])}
        if not dists & declared:
            missing[module] = sorted(dists)
    assert missing == {}, f"imported by src/ but not declared in [project].dependencies: {missing}"


def test_the_installed_versions_meet_the_declared_floors() -> None:
    below = {r.name: md.version(r.name) for r in RUNTIME if md.version(r.name) not in r.specifier}
    assert below == {}, f"installed below what pyproject.toml declares: {below}"


def test_every_floor_is_past_the_advisories_known_for_it() -> None:
    by_name = {canonicalize_name(r.name): r for r in RUNTIME}
    stale = []
    for name, advisories in ADVISORIES.items():
        low = floor(by_name[name].specifier)
        for advisory, fixed in advisories:
            if low is None or low < Version(fixed):
                stale.append(f"{name}{by_name[name].specifier} admits versions with {advisory} (fixed in {fixed})")
    assert stale == []


def test_the_operator_image_installs_every_runtime_package_pinned() -> None:
    lines = (REPO / "constraints" / "operator.txt").read_text().splitlines()
    pins = {}
    for line in lines:
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, f"not a pin: {line!r}"
            assert canonicalize_name(name) not in pins, f"pinned twice: {name}"
            pins[canonicalize_name(name)] = version
    for r in RUNTIME:  # each declared dependency pinned, at a version its specifier allows
        assert canonicalize_name(r.name) in pins, f"{r.name} is not pinned in constraints/operator.txt"
        assert pins[canonicalize_name(r.name)] in r.specifier, (r.name, pins[canonicalize_name(r.name)])
    for r in RUNTIME:  # and what each needs, as installed here
        for need in md.requires(r.name) or []:
            req = Requirement(need)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                assert canonicalize_name(req.name) in pins, f"{req.name} ({r.name} needs it) is not pinned"
    dockerfile = (REPO / "Dockerfile").read_text()
    assert re.search(r"PIP_CONSTRAINT=/src/constraints/operator\.txt pip install", dockerfile)
    assert "COPY constraints/operator.txt" in dockerfile
