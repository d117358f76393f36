"""A warm spare of a local replica (torchjob.local.spares.spare): started as

    python [the replica's interpreter options] torchjob_spare.py SCRIPT ARGS...      (or -m MODULE ARGS...)

with the replica's environment (less what only an attempt knows), it imports what is safe to import
ahead (TORCHJOB_SPARE_WARM: torch, torchrun's agent; the script's own module-level imports of the
standard library and installed packages, never a module of the script's directory or the working
directory, nor one those would shadow), says so on its socket (TORCHJOB_SPARE_FD), and waits. The
supervisor sends the new attempt's environment; the spare takes it and runs the script or module as
`python` would have: `__main__`, `sys.argv`, `sys.path[0]`, `__file__`, its exit code, its uncaught
exception's traceback (less this file's frames). End of file instead: the spare is not needed, it
exits quietly. Standard library only, and as little of it as it can: the replica's process is this one.

Nothing is imported from its own directory (in a pod, a ConfigMap's that others may write to): it is
taken off `sys.path` before the first import that is not built in, as `python -P` would (the replica's
own `sys.path[0]` is set when it runs, as `python` would have). No `from __future__` for that reason.
"""

import sys

if not sys.flags.safe_path and sys.path:  # its own directory (with -P or -I there is none)
    del sys.path[0]

import os
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from types import ModuleType, TracebackType

_STARTED = time.monotonic()
_HERE = os.path.abspath(__file__)


def _module_level_imports(path: str) -> list[str]:
    """The absolute imports of a source file's module level (also inside its top-level if/try/with
    blocks, not in functions or classes): what it imports first, in order."""
    import ast

    try:
        with open(path, "rb") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return []
    names: list[str] = []
    todo: list[ast.stmt] = list(tree.body)
    while todo:
        node = todo.pop(0)
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            inner: list[ast.stmt] = [*node.body, *getattr(node, "orelse", []), *getattr(node, "finalbody", [])]
            for h in getattr(node, "handlers", []):
                inner += h.body
            todo = inner + todo
    return names


def _installed_dirs() -> list[str]:
    import sysconfig

    paths = sysconfig.get_paths()
    dirs = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    import site

    dirs.update(site.getsitepackages() if hasattr(site, "getsitepackages") else [])
    return [os.path.realpath(d) for d in dirs if d]


def _safe(top: str, own_dirs: list[str], installed: list[str]) -> bool:
    """Whether top-level module `top` may be imported ahead: found in the standard library or among
    the installed packages, and not in a directory of the user's that comes first at run time."""
    import importlib.machinery
    import importlib.util

    if top in sys.builtin_module_names:
        return True
    if importlib.machinery.PathFinder.find_spec(top, own_dirs) is not None:
        return False  # the script's own (or the working directory's): it may read what only the attempt knows
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return False
    if spec is None or (spec.origin is None and not spec.submodule_search_locations):
        return False
    where = spec.origin if spec.origin not in (None, "frozen", "built-in") else None
    if where is None:
        return spec.origin in ("frozen", "built-in")
    real = os.path.realpath(where)
    return any(real.startswith(d.rstrip(os.sep) + os.sep) for d in installed)


def _module_source(name: str) -> str | None:
    """The source file of module `name`, found without importing anything."""
    import importlib.machinery
    import importlib.util

    parts = name.split(".")
    try:
        spec = importlib.util.find_spec(parts[0])
        for i in range(1, len(parts)):
            if spec is None or not spec.submodule_search_locations:
                return None
            spec = importlib.machinery.PathFinder.find_spec(".".join(parts[:i + 1]),
                                                           list(spec.submodule_search_locations))
    except (ImportError, ValueError):
        return None
    return spec.origin if spec is not None and spec.origin and spec.origin.endswith(".py") else None


def _warm(target: list[str]) -> int:
    """Import ahead what is safe to; returns how many modules were imported."""
    import importlib

    wanted = [m for m in os.environ.get("TORCHJOB_SPARE_WARM", "").split(",") if m]
    if target[0] == "-m":
        own_dirs = [os.getcwd()]
        source = _module_source(target[1])
    else:
        script = os.path.join(os.getcwd(), target[0])
        own_dirs = [os.path.dirname(os.path.realpath(script)), os.getcwd()]
        source = script if os.path.isfile(script) else None
    if source is not None:
        wanted += _module_level_imports(source)
    installed = _installed_dirs()
    before = len(sys.modules)
    verdict: dict[str, bool] = {}
    saved_argv = sys.argv
    sys.argv = list(target)  # what the replica's command line says, for a module that reads it at import
    try:
        for name in wanted:
            top = name.partition(".")[0]
            if top not in verdict:
                verdict[top] = _safe(top, own_dirs, installed)
            if not verdict[top] or name in sys.modules:
                continue
            try:
                importlib.import_module(name)
            except Exception:
                pass
    finally:
        sys.argv = saved_argv
    return len(sys.modules) - before


def _recv_all(fd: int) -> bytes:
    chunks: list[bytes] = []
    while True:
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def _trimmed(tb: "TracebackType | None") -> "TracebackType | None":
    """The traceback without this file's frames: what `python` itself would print."""
    while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename) == _HERE:
        tb = tb.tb_next
    return tb


def _run_script(script: str) -> None:
    import builtins
    import importlib.machinery
    import types

    path = script if os.path.isabs(script) else os.path.join(os.getcwd(), script)
    if os.path.isdir(path) or _is_zip(path):  # `python DIR|ZIP` runs its __main__.py
        import runpy

        if not sys.flags.safe_path:
            sys.path.insert(0, script)
        sys.modules["__main__"] = _fresh_main(types, builtins)
        runpy._run_module_as_main("__main__", False)  # type: ignore[attr-defined]  # what python calls for them
        return
    try:
        with open(path, "rb") as f:
            source = f.read()
    except OSError as e:
        sys.stderr.write(f"{sys.orig_argv[0]}: can't open file {path!r}: [Errno {e.errno}] {e.strerror}\n")
        sys.exit(2)
    if not sys.flags.safe_path:
        sys.path.insert(0, os.path.dirname(os.path.realpath(path)))
    main = _fresh_main(types, builtins)
    main.__file__ = path
    main.__cached__ = None  # type: ignore[attr-defined]
    main.__loader__ = importlib.machinery.SourceFileLoader("__main__", path)
    sys.modules["__main__"] = main
    code = compile(source, path, "exec", dont_inherit=True,
                   optimize=-1)
    exec(code, main.__dict__)


def _is_zip(path: str) -> bool:
    import zipfile

    try:
        return os.path.isfile(path) and zipfile.is_zipfile(path)
    except OSError:
        return False


def _fresh_main(types: Any, builtins: "ModuleType") -> "ModuleType":
    main: ModuleType = types.ModuleType("__main__")
    main.__builtins__ = builtins  # type: ignore[attr-defined]
    main.__annotations__ = {}
    return main


def _run_module(module: str) -> None:
    import builtins
    import runpy
    import types

    if not sys.flags.safe_path:
        sys.path.insert(0, os.getcwd())
    sys.modules["__main__"] = _fresh_main(types, builtins)
    runpy._run_module_as_main(module, True)  # type: ignore[attr-defined]  # what `python -m` itself calls


def _hold_output() -> list[tuple[int, int, int]]:
    """What the spare writes while it warms (an import's warning) is held in memory, and written when
    it becomes the attempt (as a new process would have written it then); dropped if it never does."""
    held: list[tuple[int, int, int]] = []
    try:
        for fd in (1, 2):
            mem = os.memfd_create(f"torchjob-spare-{fd}")
            held.append((fd, os.dup(fd), mem))
            os.dup2(mem, fd)
    except (AttributeError, OSError):
        pass
    return held


def _release_output(held: list[tuple[int, int, int]]) -> None:
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            stream.flush()
    for fd, saved, mem in held:
        os.dup2(saved, fd)
        os.close(saved)
        os.lseek(mem, 0, os.SEEK_SET)
        while True:
            chunk = os.read(mem, 1 << 16)
            if not chunk:
                break
            while chunk:
                chunk = chunk[os.write(fd, chunk):]
        os.close(mem)


def main() -> None:
    fd = int(os.environ["TORCHJOB_SPARE_FD"])
    os.set_inheritable(fd, False)
    argv = sys.argv[1:]
    target = argv if argv else ["-c"]
    held = _hold_output()
    try:
        n = _warm(target)
    except Exception:
        n = 0
    try:
        os.write(fd, f"warm {time.monotonic() - _STARTED:.3f} {n}\n".encode())
    except OSError:
        os._exit(0)
    import json

    plan = _recv_all(fd)
    os.close(fd)
    if not plan:  # not needed (the job ended, the supervisor is gone): nothing to say
        os._exit(0)
    env = json.loads(plan)["env"]
    os.environ.clear()
    os.environ.update(env)
    _release_output(held)
    tag = sys.modules.get("_torchjob_rank_tag")  # torchjob's rank tag (local/ranktag), now that RANK is known
    if tag is not None:
        tag._install()
        getattr(tag, "_register_stacks", lambda: None)()  # its stacks on SIGUSR2, now that its folder is known
    head = sys.orig_argv[:len(sys.orig_argv) - len(argv) - 1]  # the interpreter and its options
    sys.orig_argv = [*head, *argv]
    try:
        if target[0] == "-m":
            sys.argv = ["-m", *target[2:]]
            _run_module(target[1])
        else:
            sys.argv = list(target)
            _run_script(target[0])
    except SystemExit:
        raise
    except BaseException as e:
        tb = _trimmed(e.__traceback__)
        sys.last_type, sys.last_value, sys.last_traceback = type(e), e, tb
        sys.excepthook(type(e), e.with_traceback(tb), tb)
        if isinstance(e, KeyboardInterrupt):  # python ends by SIGINT itself then (exit code 130)
            import signal

            sys.stdout.flush()
            sys.stderr.flush()
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        sys.exit(1)


main()
