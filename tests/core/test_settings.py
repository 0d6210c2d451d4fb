"""Settings from the environment: a bad value stops the command before it starts anything, with
an error that names the variable and what it accepts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from devicedeck.config import LogLevel, Settings

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("given", "level"), [("debug", "DEBUG"), ("Warning", "WARNING")])
def test_log_level_names_are_taken_in_either_case(
    monkeypatch: pytest.MonkeyPatch, given: str, level: str
) -> None:
    monkeypatch.setenv("DEVICEDECK_LOG_LEVEL", given)
    assert Settings().log_level is LogLevel(level)


def run_with_settings(command: list[str], **settings: str) -> subprocess.CompletedProcess[str]:
    """`devicedeck COMMAND` with these settings and no other DEVICEDECK_ variable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEVICEDECK_")}
    return subprocess.run(
        [sys.executable, "-m", "devicedeck.cli", *command],
        cwd=REPO,
        env=env | settings,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("command", [["serve", "--port", "0"], ["migrate"]])
def test_unknown_log_level_stops_the_command_naming_the_setting(
    tmp_path: Path, command: list[str]
) -> None:
    database = tmp_path / "devicedeck.db"
    done = run_with_settings(
        command, DEVICEDECK_LOG_LEVEL="verbose", DEVICEDECK_DATABASE_URL=f"sqlite:///{database}"
    )
    assert done.returncode == 1, done.stderr
    # Named, and what it takes said; the value is not repeated (a value may be a secret).
    assert "DEVICEDECK_LOG_LEVEL" in done.stderr and "verbose" not in done.stderr
    assert "'DEBUG', 'INFO', 'WARNING', 'ERROR' or 'CRITICAL'" in done.stderr
    assert "Traceback" not in done.stderr
    assert not database.exists(), "nothing may be created before the settings are valid"
