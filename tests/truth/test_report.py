"""The report: any count that must be zero and is not makes the run fail, and says which."""

from __future__ import annotations

from devicedeck.truth.report import EXAMPLES, Report


def test_a_clean_report() -> None:
    report = Report(seed=3, settle=5, actions=10, actions_by_kind={"flap": 10})
    assert report.clean
    assert report.text().endswith("OK: the service told the truth")
    assert report.to_json()["clean"] is True


def test_each_count_fails_the_run_and_is_named() -> None:
    for field, name in [
        ("false_events", "false events"),
        ("false_alerts", "false alerts"),
        ("missing_alerts", "missing alerts"),
        ("alerts_left_firing", "alerts left firing"),
    ]:
        report = Report(seed=3, settle=5)
        setattr(report, field, 2)
        assert not report.clean
        assert report.failures[name] == 2
        assert any(line.split() == [*name.split(), "2"] for line in report.text().splitlines())
        assert report.text().endswith("FAILED")

    report = Report(
        seed=3,
        settle=5,
        mismatch_samples={"holder": 4},
        mismatches={"holder": 1},
        mismatches_after_restart=1,
    )
    assert report.failures["mismatch samples"] == 4
    assert "holder 4 in 1 episodes; 1 episodes left by a restart" in report.text()


def test_examples_are_kept_to_a_few() -> None:
    report = Report(seed=3, settle=5)
    for number in range(EXAMPLES + 5):
        report.example("false events", f"event {number}")
    assert len(report.examples["false events"]) == EXAMPLES
