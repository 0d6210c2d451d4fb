"""Reading filter forms from the query string, with problems named by field and rule.

Pages take their state from the URL, so every value is optional and an empty value means
"any". A value that breaks a rule is reported on the page (422), never as a server error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from starlette.datastructures import QueryParams

from devicedeck.inventory.errors import InvalidInput, Problem
from devicedeck.inventory.fields import CURSOR_MAX, NAME_MAX

TEXT_MAX = NAME_MAX
PAGE_SIZES = (25, 50, 100, 200)
AGE = re.compile(r"(\d{1,6})\s*([smhd])")
AGE_UNITS = {
    "s": timedelta(seconds=1),
    "m": timedelta(minutes=1),
    "h": timedelta(hours=1),
    "d": timedelta(days=1),
}


@dataclass
class Form:
    """Values read so far, the problems found, and the values to echo back into inputs."""

    params: QueryParams
    values: dict[str, Any] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)

    def text(self, name: str, max_length: int = TEXT_MAX) -> str | None:
        raw = self.params.get(name, "").strip()
        self.values[name] = raw
        if not raw:
            return None
        if len(raw) > max_length:
            self.problems.append(
                Problem(name, "max_length", f"must be at most {max_length} characters")
            )
            return None
        if any(ord(ch) < 32 for ch in raw):
            self.problems.append(Problem(name, "printable", "must not contain control characters"))
            return None
        return raw

    def choice(self, name: str, choices: dict[str, Any], default: str = "") -> Any:
        raw = self.params.get(name, default).strip() or default
        # Values match whatever their letter case: ?health=unhealthy is Unhealthy.
        raw = next((key for key in choices if key.lower() == raw.lower()), raw)
        if raw not in choices:
            self.values[name] = default
            allowed = ", ".join(repr(c) for c in choices if c) or "nothing"
            self.problems.append(Problem(name, "enum", f"must be one of {allowed}"))
            return choices.get(default)
        # The default is left out of URLs, so one view has one address.
        self.values[name] = "" if choices[raw] == choices.get(default) else raw
        return choices[raw]

    def integer(self, name: str, *, minimum: int = 0, maximum: int = 2**62) -> int | None:
        raw = self.params.get(name, "").strip()
        self.values[name] = raw
        if not raw:
            return None
        if not raw.isdigit() or not minimum <= int(raw) <= maximum:
            self.problems.append(
                Problem(name, "integer", f"must be a whole number from {minimum} to {maximum}")
            )
            return None
        return int(raw)

    def moment(self, name: str, now: datetime) -> datetime | None:
        """A time in UTC ("2026-12-03 10:00", any ISO 8601 form, an offset allowed) or an age
        before now ("15m", "2h", "3d")."""
        raw = self.params.get(name, "").strip()
        self.values[name] = raw
        if not raw:
            return None
        age = AGE.fullmatch(raw.lower())
        if age:
            return now - int(age[1]) * AGE_UNITS[age[2]]
        try:
            moment = datetime.fromisoformat(raw)
        except ValueError:
            self.problems.append(
                Problem(
                    name,
                    "datetime",
                    "must be a time such as 2026-12-03 10:00 (UTC) or an age such as 2h",
                )
            )
            return None
        return moment if moment.tzinfo else moment.replace(tzinfo=UTC)

    def cursor(self) -> str | None:
        return self.text("cursor", CURSOR_MAX)

    def page_size(self) -> int:
        size: int = self.choice("limit", {str(n): n for n in PAGE_SIZES} | {"": 50}, default="")
        return size

    def problem_dicts(self) -> list[dict[str, str]]:
        return [p.as_dict() for p in self.problems]

    @property
    def ok(self) -> bool:
        return not self.problems

    def state(self, *names: str) -> dict[str, Any]:
        """The values that make up the page's URL, in a stable order, empty ones included."""
        return {name: self.values.get(name, "") for name in names}


def problems_of(error: InvalidInput) -> list[dict[str, str]]:
    if error.problems:
        return [p.as_dict() for p in error.problems]
    return [{"field": "query", "rule": "invalid", "message": error.message}]
