"""The layers import only downward: api <- (dialects, core: each needs the job model only) <- (progress,
the `runtime` interface, the `console`) <- runtimes (local, kube) <- cli. Lazy imports inside functions
count too: a cycle hidden in a function is still a cycle."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "torchjob"
# What each layer may import, besides itself (top-level modules such as report.py import nothing).
ALLOWED = {
    "api": set(),
    "dialects": {"api"},
    "core": {"api"},
    "progress": {"api"},
    "local": {"api", "dialects", "core", "progress", "runtime", "console"},
    "kube": {"api", "dialects", "core", "progress", "runtime", "console", "__init__"},
    "cli": {"api", "dialects", "core", "progress", "runtime", "console", "local", "kube", "__init__"},
    "runtime.py": {"api", "core"},  # the interface both runtimes implement
    "console.py": {"api", "progress"},  # the terminal both runtimes write a job's lines and progress to
}


def imports_of(path: Path) -> set[str]:
    """The torchjob layers a module imports (`__init__` for the package itself: its version)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = ([node.module] if isinstance(node, ast.ImportFrom) and node.module else
                 [a.name for a in node.names] if isinstance(node, ast.Import) else [])
        for name in names:
            parts = name.split(".")
            if parts[0] == "torchjob":
                found.add(parts[1] if len(parts) > 1 else "__init__")
    return found


def test_every_layer_imports_only_the_layers_below_it() -> None:
    upward = []
    for layer, allowed in ALLOWED.items():
        paths = [SRC / layer] if layer.endswith(".py") else sorted((SRC / layer).rglob("*.py"))
        for path in paths:
            for target in imports_of(path) - allowed - {layer, layer.removesuffix(".py")}:
                upward.append(f"{path.relative_to(SRC)} imports torchjob.{target}")
    assert upward == []


def test_every_layer_is_known() -> None:
    dirs = {p.name for p in SRC.iterdir() if p.is_dir() and not p.name.startswith("__")}
    assert dirs | {"runtime.py", "console.py"} == set(ALLOWED)



def test_no_module_is_over_400_lines() -> None:
    long = {str(p.relative_to(SRC)): n for p in SRC.rglob("*.py") if (n := len(p.read_text().splitlines())) > 400}
    assert long == {}
