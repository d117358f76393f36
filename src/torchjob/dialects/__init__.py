"""Foreign job documents <-> `TorchJob`.

Readers take a parsed `Document` (Kubeflow `PyTorchJob`, Volcano `Job` with the pytorch plugin,
T9k `PyTorchTrainingJob`) and return a validated native job plus the notes a user must see:
nothing they wrote is silently dropped. A field with no native meaning is a warning that names it,
or an error where ignoring it would change what the job does. Writers go the other way
(`torchjob convert`), listing what the target cannot express.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from torchjob.api.errors import InvalidJob
from torchjob.api.model import TorchJob
from torchjob.api.source import Document, problem_at


@dataclass
class Converted:
    job: TorchJob
    notes: list[str] = field(default_factory=list)  # warnings: what was ignored or decided


Reader = Callable[[Document], Converted]


class Notes:
    """Collects warnings and errors while reading one document."""

    def __init__(self, doc: Document) -> None:
        self.doc = doc
        self.warnings: list[str] = []
        self.errors: list[Any] = []

    def warn(self, path: list[str | int], message: str) -> None:
        where = ".".join(str(p) for p in path)
        line = self.doc.line_of(path)
        self.warnings.append(f"{self.doc.source}:{line}: {where}: {message}" if line else f"{where}: {message}")

    def error(self, path: list[str | int], message: str, fix: str | None = None) -> None:
        self.errors.append(problem_at(self.doc, path, message, fix))

    def top_level(self) -> None:
        """What every reader says of a document's top level: unknown keys, and a status given as input."""
        data = self.doc.data
        self.unknown(data, {"apiVersion", "kind", "metadata", "spec", "status"}, [])
        if "status" in data:
            self.warn(["status"], "a status is output, not input; ignored")

    def raise_if_any(self) -> None:
        if self.errors:
            raise InvalidJob(self.errors, self.doc.source)

    def section(self, data: dict[str, Any], key: str, path: list[str | int]) -> dict[str, Any]:
        """data[key] as a mapping ({} when absent; an error when it is something else)."""
        value = data.get(key)
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.error([*path, key], f"must be a mapping, got {type(value).__name__}")
            return {}
        return value

    def items(self, data: dict[str, Any], key: str, path: list[str | int]) -> list[tuple[int, dict[str, Any]]]:
        """data[key] as a list of mappings, with their indexes; errors for other shapes."""
        value = data.get(key)
        if value is None:
            return []
        if not isinstance(value, list):
            self.error([*path, key], f"must be a list, got {type(value).__name__}")
            return []
        out = []
        for i, item in enumerate(value):
            if isinstance(item, dict):
                out.append((i, item))
            else:
                self.error([*path, key, i], f"must be a mapping, got {type(item).__name__}")
        return out

    def typed(self, data: dict[str, Any], key: str, path: list[str | int], kind: type | tuple[type, ...],
              what: str) -> Any:
        """data[key] when it has the type a reader needs (None when absent or wrong: an error then)."""
        value = data.get(key)
        if value is None:
            return None
        ok = isinstance(value, kind) and not (isinstance(value, bool) and kind is int)
        if not ok:
            self.error([*path, key], f"must be {what}, got {value!r}")
            return None
        return value

    def integer(self, data: dict[str, Any], key: str, path: list[str | int], minimum: int | None = None) -> int | None:
        value: int | None = self.typed(data, key, path, int, "an integer")
        if value is not None and minimum is not None and value < minimum:
            self.error([*path, key], f"must be at least {minimum}, got {value}")
            return None
        return value

    def boolean(self, data: dict[str, Any], key: str, path: list[str | int]) -> bool | None:
        value: bool | None = self.typed(data, key, path, bool, "true or false")
        return value

    def strings(self, data: dict[str, Any], key: str, path: list[str | int]) -> list[str]:
        """data[key] as a list of strings (numbers are written as strings, as in YAML argv)."""
        value = self.typed(data, key, path, list, "a list")
        out: list[str] = []
        for i, item in enumerate(value or []):
            if isinstance(item, str | int | float) and not isinstance(item, bool):
                out.append(str(item))
            else:
                self.error([*path, key, i], f"must be a string, got {item!r}")
        return out

    def unknown(self, data: dict[str, Any], known: set[str], path: list[str | int], *, fatal: bool = True) -> None:
        for key in data:
            if key not in known:
                if fatal:
                    self.error([*path, key], f"unknown field {key!r}", "remove it, or check its spelling")
                else:
                    self.warn([*path, key], "not supported by torchjob; ignored")


def reader_for(api_version: object, kind: object) -> Reader | None:
    from torchjob.dialects import kubeflow, t9k, trainjob, volcano

    readers: dict[tuple[str, str], Reader] = {
        (kubeflow.API_VERSION, kubeflow.KIND): kubeflow.read,
        (volcano.API_VERSION, volcano.KIND): volcano.read,
        (t9k.API_VERSION, t9k.KIND): t9k.read,
        (trainjob.API_VERSION, trainjob.KIND): trainjob.read,
    }
    return readers.get((str(api_version), str(kind)))


SUPPORTED = (
    "torchjob.dev/v1 TorchJob",
    "kubeflow.org/v1 PyTorchJob",
    "batch.volcano.sh/v1alpha1 Job (pytorch plugin)",
    "batch.tensorstack.dev/v1beta1 PyTorchTrainingJob",
    "trainer.kubeflow.org/v1alpha1 TrainJob (torch runtimes)",
)
