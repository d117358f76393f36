"""Reading a job document: YAML or JSON text -> plain data plus the line of every field.

Refused fast, as the Kubernetes API server's YAML reader refuses them: a document nested deeper
than MAX_DEPTH (found from the parser's events, before anything recursive runs), and one whose
aliases expand it past MAX_VALUES values (an alias bomb: nine lines of aliases, each nine times
the one before, are 9^9 values).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from torchjob.api.errors import Problem, UserError

PathKey = tuple[str | int, ...]
MAX_DEPTH = 100  # mappings and lists inside each other (a pod template's deepest field is about 15)
MAX_VALUES = 100_000  # values a document may expand to, an alias's counted each time it is used


@dataclass
class Document:
    data: dict[str, Any]
    source: str
    lines: dict[PathKey, int] = field(default_factory=dict)
    # A foreign document read as a native job: native path prefix -> the document's own, so that
    # problems name the field and line the user wrote.
    aliases: list[tuple[PathKey, PathKey]] = field(default_factory=list)
    # Other documents given with this one (a TrainJob's runtimes: --runtime FILE, or the same file).
    companions: list[Document] = field(default_factory=list)

    def translate(self, path: list[str | int]) -> list[str | int]:
        """The document's own path for a native one (the longest matching alias wins)."""
        best: tuple[PathKey, PathKey] | None = None
        for native, own in self.aliases:
            if tuple(path[: len(native)]) == native and (best is None or len(native) > len(best[0])):
                best = (native, own)
        if best is None:
            return path
        return [*best[1], *path[len(best[0]):]]

    def line_of(self, path: Iterable[str | int]) -> int | None:
        """The line of the deepest known field on `path` (keys compared case-insensitively)."""
        want = list(path)
        while want:
            key = tuple(str(p).lower() if isinstance(p, str) else p for p in want)
            if key in self._folded:
                return self._folded[key]
            want.pop()
        return None

    @property
    def _folded(self) -> dict[PathKey, int]:
        cache: dict[PathKey, int] | None = getattr(self, "_folded_cache", None)
        if cache is None:
            cache = {tuple(p.lower() if isinstance(p, str) else p for p in k): v for k, v in self.lines.items()}
            self._folded_cache = cache
        return cache


class _TooLarge(Exception):
    pass


def _construct(node: yaml.Node, path: PathKey, lines: dict[PathKey, int], budget: list[int]) -> Any:
    budget[0] -= 1
    if budget[0] < 0:
        raise _TooLarge
    lines[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):  # `? [a, b]: x`: YAML allows it, no job field is one
                raise UserError(f"line {key_node.start_mark.line + 1}: a mapping's key must be a plain value, not a "
                                f"{'list' if isinstance(key_node, yaml.SequenceNode) else 'mapping'}",
                                fix="check the indentation there (a '?' starts a complex key)")
            key = _key(_scalar(key_node))
            if key in out:
                raise UserError(
                    f"line {key_node.start_mark.line + 1}: the key {key!r} appears twice in one mapping",
                    fix="keep one of them",
                )
            out[key] = _construct(value_node, (*path, str(key)), lines, budget)
            lines[(*path, str(key))] = key_node.start_mark.line + 1
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_construct(item, (*path, i), lines, budget) for i, item in enumerate(node.value)]
    if _kept_as_written(path):
        return node.value if node.tag != "tag:yaml.org,2002:null" else None
    return _scalar(node)


def _key(value: Any) -> str:
    """A mapping's key as JSON (and so the API server, through its YAML reader) has it: a string."""
    if isinstance(value, str):
        return value
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    return str(value)


def _kept_as_written(path: PathKey) -> bool:
    """Env values and command/args items are strings on Kubernetes: `value: 0755` means "0755",
    not YAML 1.1's octal 493."""
    if len(path) >= 3 and path[-1] == "value" and path[-3] == "env":
        return True
    return len(path) >= 2 and isinstance(path[-1], int) and path[-2] in ("command", "args")


def _scalar(node: yaml.Node) -> Any:
    if node.tag == "tag:yaml.org,2002:str":
        return node.value
    try:
        return yaml.constructor.SafeConstructor().construct_object(node, deep=True)
    except yaml.YAMLError:  # a tag no safe loader makes: said, with the line
        raise
    except Exception:  # `2020-13-45` looks like a date and is none, `!!timestamp name` is none: its text
        return node.value


def _check_depth(text: str, source: str) -> None:
    """Refuse a document nested deeper than MAX_DEPTH, from the parser's events (not recursive)."""
    depth = 0
    try:
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, yaml.MappingStartEvent | yaml.SequenceStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    where = f"{source}:{event.start_mark.line + 1}" if event.start_mark else source
                    raise UserError(f"{where}: nested more than {MAX_DEPTH} deep: not a job document",
                                    fix="check the file: a job's deepest field is about 15 deep")
            elif isinstance(event, yaml.MappingEndEvent | yaml.SequenceEndEvent):
                depth -= 1
    except yaml.YAMLError:
        return  # composing the document says what is wrong, where


def parse_documents(text: str, source: str) -> list[Document]:
    """Every YAML document in `text` (JSON is YAML too), with line numbers."""
    _check_depth(text, source)
    try:
        nodes = list(yaml.compose_all(text, Loader=yaml.SafeLoader))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark is not None else source
        problem = getattr(e, "problem", None) or str(e)
        raise UserError(f"{where}: not valid YAML: {problem}", fix="check the indentation and quoting there")
    docs: list[Document] = []
    for node in nodes:
        if node is None:
            continue
        lines: dict[PathKey, int] = {}
        try:
            data = _construct(node, (), lines, [MAX_VALUES])
        except yaml.YAMLError as e:  # a value no safe loader makes (a !!python/object tag, a bad timestamp)
            mark = getattr(e, "problem_mark", None)
            where = f"{source}:{mark.line + 1}" if mark is not None else source
            raise UserError(f"{where}: not a job document's YAML: {getattr(e, 'problem', None) or e}",
                            fix="remove the tag (a job document holds plain mappings, lists, strings and numbers)")
        except _TooLarge:
            raise UserError(f"{source}:{node.start_mark.line + 1}: the document's aliases expand it past {MAX_VALUES} "
                            "values: not a job document (the Kubernetes API server refuses such aliasing too)",
                            fix="write the values out, with fewer aliases") from None
        if not isinstance(data, dict):
            raise UserError(
                f"{source}:{node.start_mark.line + 1}: a job document must be a mapping "
                f"(apiVersion, kind, metadata, spec), got a {type(data).__name__}"
            )
        docs.append(Document(data=data, source=source, lines=lines))
    if not docs:
        raise UserError(f"{source}: the file holds no document", fix="write a TorchJob in it")
    return docs


def read_documents(path: str | Path) -> list[Document]:
    """Every document in a file (`-` reads standard input)."""
    import sys

    if str(path) == "-":
        text, source = sys.stdin.read(), "<stdin>"
    else:
        p = Path(path)
        if not p.is_file():
            raise UserError(f"{path}: no such file", fix="check the path")
        try:
            text = p.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise UserError(f"{path}: cannot read it: {e}")
        source = str(path)
    return parse_documents(text, source)


def problem_at(doc: Document | None, path: Iterable[str | int], message: str, fix: str | None = None) -> Problem:
    parts = doc.translate(list(path)) if doc else list(path)
    dotted = ".".join(f"[{p}]" if isinstance(p, int) else str(p) for p in parts).replace(".[", "[")
    return Problem(path=dotted, message=message, fix=fix, line=doc.line_of(parts) if doc else None)
