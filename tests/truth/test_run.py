"""A short seeded run of the whole oracle: the simulated cluster, the service on PostgreSQL,
the workload, the readings, the verdicts."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from devicedeck.truth.run import Options, Oracle

SEED = 7
ACTIONS = 80


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_a_short_seeded_run_finds_the_service_truthful(database_url: str, tmp_path: Path) -> None:
    oracle = Oracle(
        Options(
            seed=SEED,
            actions=ACTIONS,
            keep_going=True,
            data_dir=tmp_path / "truth",
            database_url=database_url,
        ),
        progress=lambda text: None,
    )
    try:
        report = oracle.run()
    finally:
        # A deep tmp_path moves the kubelet roots to a short directory of their own.
        shutil.rmtree(oracle.cluster.layout.kubelet_dir, ignore_errors=True)

    assert report.actions == ACTIONS
    assert report.samples > 0 and report.samples_unanswered < report.samples
    assert report.failures == {
        "mismatch samples": 0,
        "false events": 0,
        "false alerts": 0,
        "missing alerts": 0,
        "alerts left firing": 0,
    }, report.text()
