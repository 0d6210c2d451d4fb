"""/metrics answered from the fleet gauges' last read, which the service renews in the
background every DEVICEDECK_METRICS_REFRESH seconds while scrapes come."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, event

from devicedeck.config import Settings
from devicedeck.main import create_app

from .conftest import GPU, Api, StatementCounter, dev, listandwatch, wait_until
from .test_metrics import node_devices, scrape

MakeApp = Callable[..., tuple[Api, StatementCounter]]


@pytest.fixture
def make_app(settings: Settings, auth: dict[str, str]) -> Iterator[MakeApp]:
    """An app with the fleet gauges renewed every `refresh` seconds, and a counter of the
    statements its engine sends; `background=False` leaves out every background task."""
    with ExitStack() as stack:

        def make(refresh: float, *, background: bool = True) -> tuple[Api, StatementCounter]:
            app = create_app(settings.model_copy(update={"metrics_refresh": refresh}))
            if not background:
                app.state.background_starters.clear()
            api = Api(stack.enter_context(TestClient(app)), auth)
            engine: Engine = app.state.engine
            counter = StatementCounter(engine)
            event.listen(engine, "before_cursor_execute", counter._on_execute)
            return api, counter

        yield make


def healthy_gpus(api: Api, node: str) -> float:
    return node_devices(scrape(api), node, GPU).get("Healthy", 0)


def wait_for_healthy_gpus(api: Api, node: str, wanted: float) -> None:
    wait_until(lambda: healthy_gpus(api, node) == wanted, what=f"{wanted} healthy GPUs on {node}")


def test_a_scrape_between_renewals_reads_nothing_and_shows_the_last_read(
    make_app: MakeApp,
) -> None:
    api, statements = make_app(600)
    api.ingest_listandwatch(listandwatch("node-a", [dev("gpu-0")], 1))
    assert healthy_gpus(api, "node-a") == 1  # the first scrape reads: there is nothing yet
    api.ingest_listandwatch(listandwatch("node-a", [dev("gpu-0"), dev("gpu-1")], 2))
    with statements:
        assert healthy_gpus(api, "node-a") == 1
    assert statements.statements == []


def test_the_service_renews_the_read_between_scrapes(make_app: MakeApp) -> None:
    api, statements = make_app(0.2)
    api.ingest_listandwatch(listandwatch("node-a", [dev("gpu-0")], 1))
    assert healthy_gpus(api, "node-a") == 1
    api.ingest_listandwatch(listandwatch("node-a", [dev("gpu-0"), dev("gpu-1")], 2))
    with statements:  # no scrape meanwhile: the service reads on its own
        wait_until(
            lambda: any("device_counts" in text for text in statements.statements),
            what="the fleet gauges to be read again",
        )
    wait_for_healthy_gpus(api, "node-a", 2)


def test_a_scrape_reads_for_itself_when_the_last_read_is_too_old(make_app: MakeApp) -> None:
    """Without renewals (their reads failing, say), scrapes still show the fleet as it is
    within a few refresh intervals."""
    api, statements = make_app(0.2, background=False)
    api.ingest_listandwatch(listandwatch("node-a", [dev("gpu-0")], 1))
    assert healthy_gpus(api, "node-a") == 1
    api.ingest_listandwatch(listandwatch("node-a", [dev("gpu-0"), dev("gpu-1")], 2))
    wait_for_healthy_gpus(api, "node-a", 2)
    time.sleep(0.7)  # more than 3 refresh intervals since that read
    with statements:
        scrape(api)
    assert statements.statements != []


def test_the_refresh_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().metrics_refresh == 5
    monkeypatch.setenv("DEVICEDECK_METRICS_REFRESH", "-1")
    with pytest.raises(ValueError, match="metrics_refresh"):
        Settings()
