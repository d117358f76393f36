"""Shipping a Python function to a job's replicas, as the Kubeflow SDK's CustomTrainer ships its
function: its source (not its bytecode, nor a pickle), the arguments as JSON, and a small runner that
calls it in each process and prints rank 0's return value as one JSON line that `JobResult.value`
reads back from the output.

Why source and JSON: the replicas may be pods on a cluster, in an image with another Python, where
nothing of this process (its memory, its modules, a notebook's state) exists. Source runs on any
Python 3; JSON is read without running code (a pickle from a pod's output could run anything when
loaded). The same shipment serves a local run, so that what works here moves to a cluster unchanged;
pickle is not used between local processes either, for that reason.

What the function uses from its module travels with it where that can be done faithfully: modules it
refers to (`import torch` at the top of a notebook) are imported again; functions and classes of an
installed module are imported from it; constants (numbers, strings, lists, dicts of them) are copied.
Anything else (a closure's variables, a helper defined in the notebook, a model object) is an
`UnshippableFunction` naming it.
"""

from __future__ import annotations

import ast
import builtins
import dis
import inspect
import json
import re
import secrets
import sys
import textwrap
import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from importlib import resources
from typing import Any

from torchjob.api.output import RESULT_MARK, UNRETURNABLE_MARK
from torchjob.sdk.errors import UnshippableFunction, UserError

RUNNER = "_torchjob_call.py"  # the script each process runs
FUNCTION = "function.py"
CALL = "call.json"
# rank 0's value: one line `RESULT_MARK NONCE JSON` in its replica's output (UNRETURNABLE_MARK NONCE WHY
# when it cannot travel); the nonce is the job's own, drawn when it is built (`call.json`)
REPLICA_TAG = re.compile(r"^\[[\w.-]+\] ")  # a cluster's logs: each line prefixed with its pod's replica
RANK0_TAG = re.compile(r"^\[rank0\]: ")  # a replica of several processes tags its lines (torchjob.local.ranktag)
_FIX = "define it at the top level of a module or a notebook cell with def, and import what it needs inside it"


def _refuse(fn: object, why: str, fix: str = _FIX) -> UnshippableFunction:
    name = getattr(fn, "__qualname__", None) or repr(fn)
    return UnshippableFunction(f"cannot ship {name} to the replicas: {why}", fix=fix)


def _global_names(code: types.CodeType) -> Iterator[str]:
    """The globals a function's code (and the code nested in it) reads."""
    for ins in dis.get_instructions(code):
        if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME") and isinstance(ins.argval, str):
            yield ins.argval
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _global_names(const)


def _is_literal(value: object) -> bool:
    if isinstance(value, bool | int | float | str | type(None)):
        return True
    if isinstance(value, list | tuple):
        return all(_is_literal(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str | int) and _is_literal(v) for k, v in value.items())
    return False


def _preamble(fn: types.FunctionType) -> list[str]:
    """Lines that give the shipped function the globals it reads, or the error naming those it cannot."""
    lines: list[str] = []
    missing: list[str] = []
    for name in sorted(set(_global_names(fn.__code__))):
        if name == fn.__name__ or (name not in fn.__globals__ and hasattr(builtins, name)):
            continue
        if name not in fn.__globals__:
            continue  # a NameError where it runs, as it would be here
        value = fn.__globals__[name]
        module = getattr(value, "__module__", None)
        qual = getattr(value, "__qualname__", "")
        if isinstance(value, types.ModuleType):
            lines.append(f"import {value.__name__}" if value.__name__ == name else f"import {value.__name__} as {name}")
        elif (isinstance(value, type | types.FunctionType | types.BuiltinFunctionType) and module
              and module not in ("__main__", fn.__module__) and "<" not in qual and "." not in qual):
            lines.append(f"from {module} import {qual}" + (f" as {name}" if qual != name else ""))
        elif _is_literal(value):
            lines.append(f"{name} = {value!r}")
        else:
            missing.append(f"{name} ({type(value).__name__})")
    if missing:
        raise _refuse(fn, f"it uses {', '.join(missing)} from its module, which cannot travel to another machine",
                      "define or import them inside the function, or pass them as arguments (JSON values)")
    return lines


def function_source(fn: Callable[..., Any]) -> str:
    """The module a replica executes to define `fn`: what it needs from its globals, then its source
    (decorators dropped). Raises UnshippableFunction naming why it cannot be shipped."""
    if not isinstance(fn, types.FunctionType):
        kind = "a builtin" if isinstance(fn, types.BuiltinFunctionType) else f"a {type(fn).__name__}, not a function"
        raise _refuse(fn, f"it is {kind}; only a function defined with def carries its source")
    if fn.__name__ == "<lambda>":
        raise _refuse(fn, "it is a lambda", "define it with def at the top level of a module or notebook cell")
    if fn.__code__.co_freevars:
        raise _refuse(fn, f"it is a closure: it uses {', '.join(fn.__code__.co_freevars)} of the function around it, "
                          "which cannot travel",
                      "pass those values as arguments, and define the function at the top level")
    if "<locals>" in fn.__qualname__:
        raise _refuse(fn, "it is defined inside another function")
    if inspect.iscoroutinefunction(fn) or inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
        raise _refuse(fn, "it is a coroutine or a generator; a job calls a plain function")
    try:
        source = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError) as e:
        raise _refuse(fn, f"its source cannot be read ({e}); it was made by exec or typed at a prompt",
                      "define it in a file or a notebook cell")
    tree = ast.parse(source)
    node = tree.body[0] if tree.body else None
    if not isinstance(node, ast.FunctionDef) or node.name != fn.__name__:
        raise _refuse(fn, "its source does not define it with def (it was assigned another name?)")
    # The function's own text (its comments too), decorators blanked, at the line it has in its file
    # where the preamble leaves room: a traceback from a replica points at the user's line numbers.
    lines = source.splitlines()
    body = [""] * (node.lineno - 1) + lines[node.lineno - 1:]
    # Annotations stay unevaluated (they may name types that live only where it was defined).
    head = ["from __future__ import annotations", *_preamble(fn)]
    pad = max(1, fn.__code__.co_firstlineno - 1 - len(head))
    return "\n".join([*head, *[""] * pad, *body, ""])


def where_defined(fn: Callable[..., Any]) -> str:
    """The name a replica's traceback gives the function's file: the user's own (the shipped source
    keeps its line numbers), or a notebook cell's as IPython names it (`Cell In[3]`), not the generated
    function.py."""
    filename = getattr(getattr(fn, "__code__", None), "co_filename", "") or FUNCTION
    ipython = sys.modules.get("IPython")
    get = getattr(ipython, "get_ipython", None) if ipython is not None else None
    shell = get() if get is not None else None
    fmt = getattr(getattr(shell, "compile", None), "format_code_name", None)
    if fmt is not None:
        try:
            named = fmt(filename)
        except Exception:  # an older IPython's compiler: its file name stands
            named = None
        if isinstance(named, tuple) and len(named) == 2:
            return f"{named[0]} {named[1]}"
    return str(filename)


def _json(what: str, value: object) -> str:
    try:
        return json.dumps(value)
    except (TypeError, ValueError) as e:
        raise UserError(f"{what} cannot travel to the replicas as JSON: {e}",
                        fix="pass numbers, strings, booleans, None, lists and dicts of them (a path instead of "
                            "an object: the replicas may be pods on another machine)")


def shipment(fn: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any] | None) -> dict[str, bytes]:
    """The files a function job carries: the runner (its entry), the function, the call, and torchjob's
    progress reporter (standard library only) so that `from torchjob.report import report` works in it."""
    source = function_source(fn)
    if not isinstance(args, list | tuple):
        raise UserError(f"args {args!r} is not a tuple or list of arguments", fix="e.g. args=(10,) or args=[10]")
    for i, a in enumerate(args):
        _json(f"args[{i}] ({type(a).__name__})", a)
    for k, v in (kwargs or {}).items():
        _json(f"kwargs[{k!r}] ({type(v).__name__})", v)
    call = {"function": fn.__name__, "args": list(args), "kwargs": dict(kwargs or {}), "nonce": secrets.token_hex(16),
            "filename": where_defined(fn)}
    runner = resources.files("torchjob.sdk").joinpath("runner.py").read_bytes()
    report = resources.files("torchjob").joinpath("report.py").read_bytes()
    return {RUNNER: runner, FUNCTION: source.encode(), CALL: json.dumps(call).encode(), "torchjob/report.py": report}


def nonce_of(files: Mapping[str, bytes]) -> str | None:
    """The job's nonce, from its shipment's call.json."""
    try:
        nonce = json.loads(files[CALL]).get("nonce")
    except (KeyError, ValueError, AttributeError):
        return None
    return nonce if isinstance(nonce, str) else None


def value_in(lines: Sequence[str], nonce: str) -> tuple[bool, Any, str | None]:
    """(found, value, why it could not return) from the lines of the replica that holds rank 0: the last
    line that starts with the marker and this job's nonce (after rank 0's own tag, where its replica has
    several processes). A marker anywhere else (another rank's line, the middle of a line, another job's
    nonce) is output, not the value; a value that is not JSON, or nested past what JSON is read to, is a
    reason it could not return, never an exception."""
    found, value, why = False, None, None
    result, unreturnable = f"{RESULT_MARK} {nonce} ", f"{UNRETURNABLE_MARK} {nonce} "
    for line in lines:
        line = RANK0_TAG.sub("", REPLICA_TAG.sub("", line, count=1), count=1)
        if line.startswith(result):
            try:
                found, value, why = True, json.loads(line[len(result):]), None
            except (ValueError, RecursionError) as e:
                found, value = False, None
                why = f"rank 0's value could not be read back as JSON: {str(e)[:200] or type(e).__name__}"
        elif line.startswith(unreturnable):
            why = line[len(unreturnable):].strip()
    return found, value, why
