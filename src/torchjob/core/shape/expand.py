"""`$(VAR)` in env values, command and args, expanded exactly as the kubelet does it. Pure.

The kubelet's rules (k8s.io/kubernetes third_party/forked/golang/expansion): `$(NAME)` becomes the
value of NAME when the mapping defines it and stays as written when it does not; `$$` is an
escaped `$`; a `$` followed by anything else is kept. An env entry's `value` sees only the entries
defined before it in the same container; command and args see the whole env. `valueFrom` values
are never expanded.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping


def _scan(text: str) -> Iterator[tuple[str, bool]]:
    """`text` as pieces: (literal text, False) or (a referenced name, True)."""
    i, n, literal = 0, len(text), 0
    while i < n:
        if text[i] != "$" or i + 1 == n:
            i += 1
            continue
        yield text[literal:i], False
        nxt = text[i + 1]
        end = text.find(")", i + 2) if nxt == "(" else -1
        if nxt == "$":  # `$$` is an escaped `$`: `$$(VAR)` is the literal `$(VAR)`
            yield "$", False
            i += 2
        elif end != -1:
            yield text[i + 2:end], True
            i = end + 1
        else:  # `$` before anything else, or an unclosed `$(`, stays as written
            yield text[i:i + 2], False
            i += 2
        literal = i
    yield text[literal:], False


def expand(text: str, mapping: Mapping[str, str]) -> str:
    return "".join(
        mapping.get(piece, f"$({piece})") if is_name else piece
        for piece, is_name in _scan(text)
    )


def references(text: str) -> list[str]:
    """The names `text` refers to with `$(NAME)` (escaped `$$(NAME)` is not a reference)."""
    return [piece for piece, is_name in _scan(text) if is_name]


def expand_env(entries: Iterable[tuple[str, str, bool]]) -> dict[str, str]:
    """Ordered env entries (name, value, expandable) -> their final values: each expandable value
    sees the entries before it (a later entry of the same name replaces an earlier one)."""
    env: dict[str, str] = {}
    for name, value, expandable in entries:
        env[name] = expand(value, env) if expandable else value
    return env


def expand_argv(argv: list[str], env: Mapping[str, str]) -> list[str]:
    return [expand(a, env) for a in argv]
