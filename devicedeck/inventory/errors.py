"""Domain errors. The web layer (web/errors.py) turns each into one status; an error whose
status depends on more than its kind (what the Kubernetes API server answered) carries it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the input: where, which rule, and a sentence for a person."""

    field: str
    rule: str
    message: str

    def as_dict(self) -> dict[str, str]:
        return {"field": self.field, "rule": self.rule, "message": self.message}


class DomainError(Exception):
    code = "error"
    # None: the web layer's mapping by kind decides.
    status: int | None = None

    def __init__(self, message: str, problems: list[Problem] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.problems: list[Problem] = problems or []


class InvalidInput(DomainError):
    code = "invalid_input"


class StaleSnapshot(DomainError):
    """A snapshot older than one already applied for the same stream and boot."""

    code = "stale_snapshot"


class ConflictingRepeat(DomainError):
    """The same sequence number again, but with different content."""

    code = "conflicting_repeat"


class NotFound(DomainError):
    code = "not_found"
