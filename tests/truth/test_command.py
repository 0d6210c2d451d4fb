"""`devicedeck truth` refuses options it cannot run with, naming the option and the rule."""

from __future__ import annotations

import pytest

from devicedeck.cli import main
from devicedeck.truth.commands import EXIT_NOT_RUN


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--actions", "0"], "--actions must be at least 1"),
        (["--seconds", "-1"], "--seconds must be positive"),
        (["--settle", "-2"], "--settle must not be negative"),
        (["--interval", "0"], "--interval must be positive"),
    ],
)
def test_bad_options_are_refused_before_anything_starts(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["truth", *args]) == EXIT_NOT_RUN
    assert message in capsys.readouterr().err


def test_actions_and_seconds_exclude_each_other(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["truth", "--actions", "5", "--seconds", "5"])
    assert "not allowed with argument" in capsys.readouterr().err
