"""The one place the service reads the time, so every timestamp is aware UTC."""

from datetime import UTC, datetime


def utcnow() -> datetime:
    return datetime.now(UTC)


def iso(value: datetime | None) -> str | None:
    """A stored time as the API and pages write it (ISO 8601 with its offset), or None."""
    return value.isoformat() if value is not None else None
