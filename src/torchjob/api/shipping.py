"""What a script shipped to a cluster takes with it: the file itself, or a directory's files but its
caches, dotfiles, what its `.gitignore` files ignore (by git's rules, with `pathspec`) and what is not
a regular file, unless an `include` pattern names them; a link out of the directory is refused. Sizes
come from `stat`, checked against what a ConfigMap holds before any file is read."""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from torchjob.api.errors import UserError

if TYPE_CHECKING:
    from pathspec import GitIgnoreSpec

# The API server's limit on a ConfigMap's data (the sum of its values; Kubernetes' MaxSecretSize,
# which ConfigMaps share: 1 MiB). Keys and metadata are extra; the margin leaves room for them.
CODE_LIMIT = 1024 * 1024
CODE_MARGIN = 16 * 1024
# Not shipped from a directory: caches and version-control or tool directories.
SKIPPED_DIRS = ("__pycache__", ".git", ".hg", ".svn", ".venv", ".mypy_cache", ".pytest_cache", ".ruff_cache")


def _spec() -> type[GitIgnoreSpec]:
    """pathspec's gitignore rules, loaded once a script is shipped (a local job's start does not pay for them)."""
    from pathspec import GitIgnoreSpec

    return GitIgnoreSpec


def _ignores(root: Path) -> list[tuple[str, GitIgnoreSpec]]:
    """The .gitignore files that apply to `root`'s files: its parents' up to the repository's root
    (the first with `.git`), as (root's path from that directory, its patterns)."""
    out: list[tuple[str, GitIgnoreSpec]] = []
    here = root.resolve()
    if (here / ".git").exists():
        return out
    for up in here.parents:
        spec = _gitignore(up)
        if spec is not None:
            prefix = here.relative_to(up).as_posix() + "/"
            out.append((prefix, _below(spec, prefix)))
        if (up / ".git").exists():
            break
    else:  # not in a repository: a parent's .gitignore says nothing of it
        out = []
    return out[::-1]


def _patterns(include: Sequence[str]) -> GitIgnoreSpec:
    """The `include` patterns (gitignore syntax), each refused in words where it is not one."""
    for pattern in include:
        if not _valid(pattern):
            raise UserError(f"--include {pattern!r} is not a gitignore pattern",
                            fix="e.g. --include .env, --include 'data/*.json' (include=[...] in Python)")
    return _spec().from_lines(include)


def _below(spec: GitIgnoreSpec, prefix: str) -> GitIgnoreSpec:
    """A parent's .gitignore without the patterns that ignore the shipped directory itself or one above
    it (`scratch/` when `scratch/exp` is shipped): a directory named to ship is meant to go; the others
    (`*.ckpt`) still apply inside it."""
    parts = prefix.rstrip("/").split("/")
    above = ["/".join(parts[:i]) + "/" for i in range(1, len(parts) + 1)]
    return _spec()([p for p in spec.patterns if not (p.include and any(p.match_file(d) for d in above))])


def _gitignore(d: Path) -> GitIgnoreSpec | None:
    f = d / ".gitignore"
    if not f.is_file() or f.is_symlink():
        return None
    try:
        lines = f.read_text(errors="replace").splitlines()
    except OSError:
        return None
    return _spec().from_lines([line for line in lines if _valid(line)])


def _valid(line: str) -> bool:
    """Whether a .gitignore line is a pattern pathspec reads (git skips one that is not, as here)."""
    try:
        _spec().from_lines([line])
    except ValueError:
        return False
    return True


def _ignored(rel: str, specs: Sequence[tuple[str, GitIgnoreSpec]]) -> bool:
    """Whether .gitignore files (shallowest first, each with the path of `rel`'s root from its
    directory) ignore `rel`: the deepest one that says anything decides, as in git."""
    decision = False
    for prefix, spec in specs:
        said = spec.check_file(prefix + rel).include
        if said is not None:
            decision = said
    return decision


@dataclass(frozen=True)
class Selection:
    """The files a directory ships (relative paths, with their sizes as `stat` gave them) and what it
    leaves out, with why (`proj/.env (a dotfile)`)."""

    files: tuple[tuple[str, int], ...]
    left_out: tuple[str, ...] = ()

    @property
    def size(self) -> int:
        return sum(n for _, n in self.files)


def select(root: Path, include: Sequence[str] = (), what: str = "script") -> Selection:
    """The files of a directory that ship: every regular file under it, but caches and tool
    directories (SKIPPED_DIRS, `*.pyc`), dotfiles and what its `.gitignore` files (and its parents'
    up to the repository's root) ignore, unless a pattern of `include` (gitignore syntax, relative
    to the directory) names it. A link whose target is outside the directory is refused (a link
    inside it ships the file it names); a directory link is not followed. Read nothing: sizes by stat."""
    real = root.resolve()
    wanted = _patterns(include) if include else None
    inherited = _ignores(root)
    files: list[tuple[str, int]] = []
    left: list[str] = []
    specs_of: dict[str, list[tuple[str, GitIgnoreSpec]]] = {"": [*inherited]}
    excluded: dict[str, str] = {}  # a directory left out (and why), walked only for what `include` names
    for dirpath, dirnames, filenames in os.walk(root):  # links are not followed
        here = Path(dirpath)
        rel_dir = here.relative_to(root).as_posix()
        rel_dir = "" if rel_dir == "." else rel_dir + "/"
        specs = specs_of.pop(rel_dir, [])
        own = _gitignore(here)
        if own is not None:
            specs = [*specs, ("", own)]
        why_dir = excluded.get(rel_dir)
        for d in sorted(dirnames):
            rel = rel_dir + d
            link = (here / d).is_symlink()
            if d in SKIPPED_DIRS and not link:
                continue
            why = why_dir or _why_left_out(rel + "/", d, specs, rel_dir)
            if link:
                if why is not None and not (wanted is not None and wanted.match_file(rel)):
                    if why_dir is None:
                        left.append(f"{rel}/ ({why})")
                    continue
                _refuse_outside(root, real, here / d, rel, what)
                left.append(f"{rel}/ (a link to a directory: not followed)")
                continue
            if why is not None and why_dir is None:
                left.append(f"{rel}/ ({why})")
            if why is not None and wanted is None:
                continue
            if why is not None:
                excluded[rel + "/"] = why
            specs_of[rel + "/"] = [(f"{p}{d}/", s) for p, s in specs]
        dirnames[:] = [d for d in sorted(dirnames) if rel_dir + d + "/" in specs_of]
        for name in sorted(filenames):
            rel = rel_dir + name
            path = here / name
            if name.endswith(".pyc"):
                continue
            why = why_dir or _why_left_out(rel, name, specs, rel_dir)
            if rel == "__main__.py":  # what runs always goes
                why = None
            if why is not None and not (wanted is not None and wanted.match_file(rel)):
                if why_dir is None:
                    left.append(f"{rel} ({why})")
                continue
            if path.is_symlink():
                _refuse_outside(root, real, path, rel, what)
            try:
                st = path.stat()
            except FileNotFoundError:  # a link to nothing (its target inside, checked above)
                left.append(f"{rel} (a link to nothing)")
                continue
            except OSError as e:
                raise UserError(f"{what} {str(root)!r}: {rel} cannot be read: {e.strerror}",
                                fix="fix or remove it, or leave it out (.gitignore)")
            if not stat.S_ISREG(st.st_mode):  # a fifo, a socket, a device: never read
                left.append(f"{rel} (not a regular file)")
                continue
            files.append((rel, st.st_size))
    return Selection(tuple(files), tuple(left))


def _why_left_out(rel: str, name: str, specs: Sequence[tuple[str, GitIgnoreSpec]], rel_dir: str) -> str | None:
    if name.startswith("."):
        return "a dot directory" if rel.endswith("/") else "a dotfile"
    if _ignored(rel.removeprefix(rel_dir), specs):
        return ".gitignore"
    return None


def _refuse_outside(root: Path, real: Path, path: Path, rel: str, what: str) -> None:
    target = path.resolve()
    if target != real and not target.is_relative_to(real):
        raise UserError(f"{what} {str(root)!r}: {rel} is a link to {target}, outside the directory (it would "
                        "ship a file from elsewhere)",
                        fix="copy what the job needs into the directory, or remove the link (or list it in .gitignore)")


def collect(path: str | Path, what: str = "script", include: Sequence[str] = ()) -> dict[str, bytes]:
    """The files of a script (a file) or a directory (those `select` picks), as relative path -> bytes,
    refused past the ConfigMap's limit before any is read."""
    return read(Path(path), select_code(path, what, include), what)


def select_code(path: str | Path, what: str = "script", include: Sequence[str] = ()) -> Selection:
    """What a script ships: the file itself (named, so it goes whatever it is), or a directory's `select`."""
    p = Path(path)
    if not p.exists():
        raise UserError(f"{what} {str(path)!r} does not exist", fix="check the path (it is relative to this directory)")
    if p.is_file():
        return Selection(((p.name, p.stat().st_size),))
    return select(p, include, what)


def read(root: Path, chosen: Selection, what: str) -> dict[str, bytes]:
    """The chosen files' content: their sizes (by stat) checked first, then what was read."""
    where = str(root)
    check_size({}, where, chosen.size)
    files = {rel: (root.parent / rel if root.is_file() else root / rel).read_bytes() for rel, _ in chosen.files}
    check_size(files, where)
    return files


def check_size(files: Mapping[str, bytes], what: str, size: int | None = None) -> None:
    total = sum(len(v) for v in files.values()) if size is None else size
    if total > CODE_LIMIT - CODE_MARGIN:
        raise UserError(f"{what} is {total:,} bytes; code shipped in a ConfigMap may be at most "
                        f"{CODE_LIMIT - CODE_MARGIN:,} bytes (a ConfigMap holds 1 MiB)",
                        fix="put large files (data, weights) in the image or a volume, and ship only the code "
                            "(.gitignore leaves files out)")
