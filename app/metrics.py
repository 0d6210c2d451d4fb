"""Prometheus metrics of the service. Device counts are read from the database at scrape time."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector
from sqlalchemy.orm import Session, sessionmaker

DeviceCounter = Callable[[Session], list[tuple[str, str, int]]]


class ServiceMetrics:
    """One registry per app, so several apps in one process (tests) do not collide."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.ingest_total = Counter(
            "devicedeck_ingest_snapshots_total",
            "Snapshots received, by kind and outcome.",
            ["kind", "outcome"],
            registry=self.registry,
        )
        self.ingest_seconds = Histogram(
            "devicedeck_ingest_duration_seconds",
            "Time to apply one snapshot, by kind.",
            ["kind"],
            registry=self.registry,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
        )

    def watch_leadership(self, leading: Callable[[], bool]) -> None:
        gauge = Gauge(
            "devicedeck_leader",
            "1 while this process runs the work only one process runs (stale sweep, cluster "
            "watcher), else 0.",
            registry=self.registry,
        )
        gauge.set_function(lambda: 1.0 if leading() else 0.0)

    def watch_inventory(self, factory: sessionmaker[Session], counter: DeviceCounter) -> None:
        self.registry.register(_InventoryCollector(factory, counter))

    def render(self, accept: str | None) -> tuple[bytes, str]:
        """The exposition the scraper asked for by its Accept header (OpenMetrics or the text
        format), and its content type."""
        encode, content_type = choose_encoder(accept or "")
        return encode(self.registry), content_type


class _InventoryCollector(Collector):
    def __init__(self, factory: sessionmaker[Session], counter: DeviceCounter) -> None:
        self.factory = factory
        self.counter = counter

    def collect(self) -> Iterator[Metric]:
        gauge = GaugeMetricFamily(
            "devicedeck_devices",
            "Present devices by resource and health (Unknown for stale nodes).",
            labels=["resource", "health"],
        )
        with self.factory() as session:
            for resource, health, count in self.counter(session):
                gauge.add_metric([resource, health], count)
        yield gauge

    def describe(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            "devicedeck_devices",
            "Present devices by resource and health (Unknown for stale nodes).",
            labels=["resource", "health"],
        )
