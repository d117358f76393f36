"""User-facing errors: each names the field, the reason and the fix, never a traceback."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Problem:
    path: str  # dotted field path, e.g. spec.pytorchReplicaSpecs.Worker.replicas
    message: str
    fix: str | None = None
    line: int | None = None  # 1-based line in the source file, where known

    def render(self, source: str | None = None) -> str:
        where = f"{source}:{self.line}: " if source and self.line else (f"{source}: " if source else "")
        text = f"{where}{self.path}: {self.message}" if self.path else f"{where}{self.message}"
        if self.fix:
            text += f"\n    fix: {self.fix}"
        return text


class UserError(Exception):
    """A mistake of the user's: shown as a message, exit code 2, nothing started."""

    exit_code = 2

    def __init__(self, message: str, fix: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix

    def render(self) -> str:
        return self.message + (f"\n    fix: {self.fix}" if self.fix else "")


@dataclass
class InvalidJob(UserError):
    problems: list[Problem]
    source: str | None = None
    exit_code: int = field(default=2)

    def __post_init__(self) -> None:
        # Two native fields read from one foreign field report the same problem once.
        unique: dict[tuple[str, int | None, str], Problem] = {}
        for p in self.problems:
            unique.setdefault((p.path, p.line, p.message), p)
        self.problems = list(unique.values())
        UserError.__init__(self, self.render())

    def render(self) -> str:
        head = f"{self.source or 'job'} is not a valid job ({len(self.problems)} problem"
        head += "s):" if len(self.problems) != 1 else "):"
        return "\n".join([head, *("  " + p.render(self.source) for p in self.problems)])
