"""Server-side printing: the STATUS and AGE cells kubectl shows, from the objects."""

from __future__ import annotations

from typing import Any

import pytest

from devicedeck.sim.apiserver.errors import ApiError
from devicedeck.sim.apiserver.printers import human_duration, pod_status_text
from devicedeck.sim.apiserver.tables import wanted_table


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (-5, "<invalid>"),
        (0, "0s"),
        (119, "119s"),
        (150, "2m30s"),
        (300, "5m"),
        (11 * 60, "11m"),
        (3 * 3600 + 10 * 60, "3h10m"),
        (20 * 3600, "20h"),
        (50 * 3600, "2d2h"),
        (10 * 86400, "10d"),
        (3 * 365 * 86400, "3y"),
    ],
)
def test_ages_read_as_kubectl_prints_them(seconds: int, text: str) -> None:
    assert human_duration(seconds) == text


def pod(
    containers: list[dict[str, Any]],
    phase: str = "Running",
    init: list[dict[str, Any]] | None = None,
    **metadata: Any,
) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", **metadata},
        "spec": {
            "containers": [{"name": c["name"]} for c in containers],
            "initContainers": [{"name": c["name"]} for c in init or []],
        },
        "status": {
            "phase": phase,
            "containerStatuses": containers,
            "initContainerStatuses": init or [],
        },
    }


RUNNING = {"name": "a", "ready": True, "state": {"running": {}}}
CRASHING = {"name": "b", "ready": False, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}
DONE = {
    "name": "a",
    "ready": False,
    "state": {"terminated": {"exitCode": 0, "reason": "Completed"}},
}
KILLED = {"name": "a", "ready": False, "state": {"terminated": {"exitCode": 137}}}


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        (pod([], "Pending"), ("Pending", 0, 0)),
        (pod([RUNNING]), ("Running", 1, 1)),
        (pod([RUNNING, CRASHING]), ("CrashLoopBackOff", 1, 2)),
        (pod([DONE], "Succeeded"), ("Completed", 0, 1)),
        (pod([KILLED], "Failed"), ("ExitCode:137", 0, 1)),
        (pod([RUNNING], deletionTimestamp="2026-01-01T00:00:00Z"), ("Terminating", 1, 1)),
        (
            pod(
                [{"name": "a", "state": {"waiting": {"reason": "PodInitializing"}}}],
                "Pending",
                init=[{"name": "i", "state": {"running": {}}}],
            ),
            ("Init:0/1", 0, 1),
        ),
    ],
)
def test_pod_status_as_kubectl_shows_it(
    obj: dict[str, Any], expected: tuple[str, int, int]
) -> None:
    assert pod_status_text(obj) == expected


def test_the_accept_header_picks_a_table_an_object_or_nothing_acceptable() -> None:
    kubectl = (
        "application/json;as=Table;v=v1;g=meta.k8s.io,"
        "application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
    )
    assert wanted_table(kubectl, "") is not None
    assert wanted_table("application/json", "") is None
    assert wanted_table("", "") is None
    with pytest.raises(ApiError) as refused:
        wanted_table("application/json;as=Table;v=v2;g=meta.k8s.io", "")
    assert refused.value.code == 406
    with pytest.raises(ApiError) as bad:
        wanted_table(kubectl, "Everything")
    assert bad.value.code == 400 and "includeObject" in bad.value.message
