"""The layers import only downward: api <- (dialects, core: each needs the job model only) <- (progress,
the `runtime` interface, the `console`) <- runtimes (local, kube) <- cli. Inside kube/, the rooms import
only the rooms their rule names. No module imports itself back through others (no cycle anywhere in
src/). Lazy imports inside functions count too: a cycle hidden in a function is still a cycle."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "torchjob"
# Below every layer: modules that import nothing of torchjob, which any layer may import.
BOTTOM = {"version"}
# What each layer may import, besides itself and BOTTOM (top-level modules such as report.py import nothing).
ALLOWED = {
    "api": set(),
    "dialects": {"api"},
    "core": {"api"},
    "progress": {"api"},
    "local": {"api", "dialects", "core", "progress", "runtime", "console"},
    "kube": {"api", "dialects", "core", "progress", "runtime", "console"},
    "cli": {"api", "dialects", "core", "progress", "runtime", "console", "local", "kube", "connect", "ui", "mcp"},
    "ui": {"api", "progress", "runtime", "connect"},  # the dashboard: a face over connect(), as cli/ is
    # the agents' face (`torchjob mcp`): tools over connect(), as cli/ is; the command line's shape (`-j NxM
    # SCRIPT`) read by cli/quick.py's own parser, and --http bound and guarded as the dashboard's (ui/serve.py)
    "mcp": {"api", "dialects", "core", "progress", "runtime", "connect", "local", "kube", "cli", "ui"},
    # the Python API (`import torchjob`): a face beside cli/, over the same runtimes
    "sdk": {"api", "dialects", "core", "progress", "runtime", "console", "local", "kube", "connect"},
    "runtime.py": {"api", "core", "console"},  # the interface both runtimes implement
    "connect.py": {"api", "runtime", "local", "kube"},  # Target -> connect(target): the one place a runtime is built
    "console.py": {"api", "progress"},  # the terminal both runtimes write a job's lines and progress to
}
# The rooms of kube/ (each package's docstring says what it holds) and what each may import of
# torchjob, besides itself. The pure object builders never touch the machinery; progress never
# sees a controller; the CLI's side of the cluster never runs one.
ROOMS = {
    "machinery": {"progress"},  # progress/guard.py: the HTTP guard of the progress endpoint, the probes and /metrics
    "objects": {"api", "core", "progress"},
    "served": {"api", "core", "dialects", "kube.machinery", "kube.objects"},
    "progress": {"api", "core", "progress", "kube.machinery", "kube.objects", "kube.served"},
    "controller": {"api", "core", "dialects", "progress", "kube.machinery", "kube.objects", "kube.served",
                   "kube.progress"},
    "clientside": {"api", "core", "dialects", "runtime", "console", "kube.machinery", "kube.objects",
                   "kube.served"},
    "inpod": set(),  # programs that run inside a job's pods (shipped as files, not imported): standard library only
}


def imported_modules(path: Path) -> set[str]:
    """Every torchjob module a file imports (`from torchjob.x import y`: torchjob.x.y when y is a
    module, else torchjob.x), at the top or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "torchjob"}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "torchjob":
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                found.add(sub if module_path(sub) is not None else node.module)
    return found


def module_path(module: str) -> Path | None:
    base = SRC.parent.joinpath(*module.split("."))
    for p in (base.with_suffix(".py"), base / "__init__.py"):
        if p.exists():
            return p
    return None


def module_of(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def room_of(module: str) -> str:
    """A module's place for the room rules: `kube.<room>` inside kube/, else its layer."""
    parts = module.split(".")
    return f"kube.{parts[2]}" if len(parts) > 2 and parts[1] == "kube" else layer_of(module)


def test_every_layer_imports_only_the_layers_below_it() -> None:
    upward = []
    for layer, allowed in ALLOWED.items():
        paths = [SRC / layer] if layer.endswith(".py") else sorted((SRC / layer).rglob("*.py"))
        for path in paths:
            found = {layer_of(m) for m in imported_modules(path)}
            for target in found - allowed - BOTTOM - {layer, layer.removesuffix(".py")}:
                upward.append(f"{path.relative_to(SRC)} imports torchjob.{target}")
    assert upward == []


def test_every_layer_is_known() -> None:
    dirs = {p.name for p in SRC.iterdir() if p.is_dir() and not p.name.startswith("__")}
    assert dirs | {"runtime.py", "console.py", "connect.py"} == set(ALLOWED)


def test_every_room_of_kube_imports_only_what_its_rule_allows() -> None:
    rooms = {p.name for p in (SRC / "kube").iterdir() if p.is_dir() and not p.name.startswith("__")}
    assert rooms == set(ROOMS), "a new room of kube/ needs its rule here"
    loose = [p.name for p in (SRC / "kube").glob("*.py") if p.name != "__init__.py"]
    assert loose == [], "every module of kube/ lives in a room"
    broken = []
    for room, allowed in ROOMS.items():
        for path in sorted((SRC / "kube" / room).rglob("*.py")):
            for target in {room_of(m) for m in imported_modules(path)} - allowed - BOTTOM - {f"kube.{room}"}:
                broken.append(f"{path.relative_to(SRC)} imports torchjob.{target}")
    assert broken == []


# core/, local/, and kube's objects/ and controller/ are rooms by role too (each package's docstring says what it
# holds); a runtime's entry module (local/local_runtime.py) stays at the top of its layer.
TOP_OF_LAYER = {"core": set(), "local": {"local_runtime.py"}, "kube/objects": set(), "kube/controller": set()}
# core's rooms that stand alone: what a replica is started with, and reading what a rank said, need no
# round and no policy (the rounds and policies use them, not the other way).
CORE_LEAVES = {"shape": {"api"}, "diagnosis": set()}


@pytest.mark.parametrize("layer", sorted(TOP_OF_LAYER))
def test_every_module_of_core_local_and_kube_s_builders_and_controller_lives_in_a_room_that_says_what_it_holds(
        layer: str) -> None:
    loose = {p.name for p in (SRC / layer).glob("*.py")} - {"__init__.py"} - TOP_OF_LAYER[layer]
    assert loose == set(), f"every module of {layer}/ lives in a room"
    for room in (p for p in (SRC / layer).iterdir() if p.is_dir() and not p.name.startswith("__")):
        init = room / "__init__.py"
        assert init.exists() and ast.get_docstring(ast.parse(init.read_text())), \
            f"{layer}/{room.name}/__init__.py needs a docstring: what the room holds"


def test_cores_leaf_rooms_import_no_other_room() -> None:
    broken = []
    for room, allowed in CORE_LEAVES.items():
        for path in sorted((SRC / "core" / room).rglob("*.py")):
            for m in imported_modules(path):
                target = ".".join(m.split(".")[1:3]) if m.startswith("torchjob.core.") else layer_of(m)
                if target not in allowed | BOTTOM | {f"core.{room}"}:
                    broken.append(f"{path.relative_to(SRC)} imports {m}")
    assert broken == []


def test_the_bottom_imports_nothing_of_torchjob() -> None:
    assert {name: imported_modules(SRC / f"{name}.py") for name in BOTTOM} == {name: set() for name in BOTTOM}


def test_every_room_says_what_it_holds() -> None:
    for room in ROOMS:
        init = SRC / "kube" / room / "__init__.py"
        for path in [init] if init.exists() else sorted((SRC / "kube" / room).glob("*.py")):  # inpod: no package
            doc = ast.get_docstring(ast.parse(path.read_text()))
            assert doc, f"kube/{room}/{path.name} needs a docstring: what it holds and what it may import"


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles of a module graph (one path per cycle found by depth-first search)."""
    found, state = [], dict.fromkeys(graph, 0)  # 0 new, 1 on the path, 2 done
    path: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        path.append(m)
        for n in sorted(graph.get(m, ())):
            if state.get(n) == 1:
                found.append([*path[path.index(n):], n])
            elif state.get(n) == 0:
                visit(n)
        path.pop()
        state[m] = 2

    for m in sorted(graph):
        if state[m] == 0:
            visit(m)
    return found


def import_graph() -> dict[str, set[str]]:
    graph = {}
    for path in SRC.rglob("*.py"):
        me = module_of(path)
        # A package's own __init__ is imported with any of its modules: not an edge worth a cycle.
        graph[me] = {m for m in imported_modules(path) if m != me and not me.startswith(m + ".")}
    return graph


def test_no_import_cycle_in_src() -> None:
    assert cycles(import_graph()) == []


@pytest.mark.parametrize("graph,cyclic", [({"a": {"b"}, "b": {"a"}}, True), ({"a": {"b"}, "b": set()}, False),
                                          ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, True)])
def test_the_cycle_finder_finds_cycles(graph: dict[str, set[str]], cyclic: bool) -> None:
    assert bool(cycles(graph)) is cyclic


def test_no_module_is_over_400_lines() -> None:
    long = {str(p.relative_to(SRC)): n for p in SRC.rglob("*.py") if (n := len(p.read_text().splitlines())) > 400}
    assert long == {}


def test_no_two_modules_share_a_name_with_different_meanings() -> None:
    """`runtime.py` is the interface; the runtimes and Trainer's runtimes are named for what they are."""
    assert sorted(str(p.relative_to(SRC)) for p in SRC.rglob("runtime.py")) == ["runtime.py"]


# The runtimes' classes, and the one module that may build them (besides where they are defined).
RUNTIMES = {"torchjob.local.local_runtime": "LocalRuntime", "torchjob.kube.clientside.kube_runtime": "KubeRuntime"}
BUILDER = "torchjob.connect"


def runtime_builds(source: str) -> list[str]:
    """Where a module's source imports or names a runtime class (to construct it), as `line: what`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module in RUNTIMES:
            found += [f"{node.lineno}: imports {a.name}" for a in node.names if a.name in (RUNTIMES[node.module], "*")]
        elif isinstance(node, ast.Name | ast.Attribute):
            name = node.id if isinstance(node, ast.Name) else node.attr
            if name in RUNTIMES.values():
                found.append(f"{node.lineno}: names {name}")
    return found


def test_only_connect_builds_a_runtime() -> None:
    """Every face (cli/, sdk/, ui/) gets its runtime from `torchjob.connect`, so that it asks only
    what the interface offers."""
    builds = {}
    for path in sorted(SRC.rglob("*.py")):
        me = module_of(path)
        if me == BUILDER or me in RUNTIMES:
            continue
        if found := runtime_builds(path.read_text()):
            builds[str(path.relative_to(SRC))] = found
    assert builds == {}


@pytest.mark.parametrize("source", [
    "from torchjob.local.local_runtime import LocalRuntime\n",
    "from torchjob.kube.clientside import kube_runtime\nrt = kube_runtime.KubeRuntime(None)\n",
    "def pick():\n    from torchjob.local import local_runtime as m\n    return m.LocalRuntime()\n",
])
def test_the_runtime_check_finds_a_runtime_built_outside_connect(source: str) -> None:
    assert runtime_builds(source)
