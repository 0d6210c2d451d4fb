"""README's configuration table and devicedeck/config.py's Settings say the same thing."""

from __future__ import annotations

import re
from enum import Enum
from pathlib import Path
from typing import Any

from devicedeck.config import Settings

README = Path(__file__).resolve().parents[2] / "README.md"
PREFIX = str(Settings.model_config.get("env_prefix", ""))
NONE_SHOWN_AS = "(none)"


def configuration_table() -> dict[str, str]:
    """Variable -> documented default, from the table under README's `## Configuration`."""
    text = README.read_text()
    section = re.search(r"^## Configuration\n(.*?)(?=^## )", text, re.DOTALL | re.MULTILINE)
    assert section, "README has no '## Configuration' section"
    rows: dict[str, str] = {}
    for line in section.group(1).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("|") or len(cells) < 3 or set(cells[0]) <= {"-"}:
            continue
        if cells[0] == "variable":
            continue
        name = cells[0].strip("`")
        assert name not in rows, f"{name} has two rows in README's configuration table"
        rows[name] = cells[1].strip("`")
    assert rows, "README's configuration table is empty"
    return rows


def variables() -> dict[str, Any]:
    """Environment variable -> default, for every setting the service reads."""
    return {
        f"{PREFIX}{name}".upper(): field.default for name, field in Settings.model_fields.items()
    }


def shown(default: Any) -> str:
    if default is None:
        return NONE_SHOWN_AS
    if isinstance(default, bool):
        return str(default).lower()  # as it is written in the environment
    if isinstance(default, Enum):
        return str(default.value)
    if isinstance(default, float) and default.is_integer():
        return str(int(default))
    return str(default)


def test_every_setting_has_a_row_in_the_readme_table() -> None:
    missing = sorted(set(variables()) - set(configuration_table()))
    assert not missing, f"settings missing from README's configuration table: {missing}"


def test_every_row_of_the_readme_table_names_a_real_setting() -> None:
    unknown = sorted(set(configuration_table()) - set(variables()))
    assert not unknown, f"README documents settings devicedeck/config.py does not read: {unknown}"


def test_documented_defaults_are_the_real_defaults() -> None:
    table = configuration_table()
    wrong = {
        name: (table[name], shown(default))
        for name, default in variables().items()
        if name in table and table[name] != shown(default)
    }
    assert not wrong, f"README default differs (README, devicedeck/config.py): {wrong}"
