"""Prometheus metrics of the service: counters kept in process, fleet gauges read from the
database (devicedeck/runtime/fleet_metrics.py, which says when)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import choose_encoder

from devicedeck.runtime.fleet_metrics import FleetGauges

HTTP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
OPENMETRICS_END = b"# EOF\n"


WATCH_STATE_HELP = (
    "With cluster access on, 1 for the state each watched collection is in, 0 for the others."
)


class WatchStateCollector:
    """devicedeck_kube_watch_state, read at each scrape from the status the leading process's
    watcher keeps in the database, so every replica exports the same."""

    def __init__(self, read: Callable[[], list[tuple[str, str]]], states: Sequence[str]) -> None:
        self.read = read
        self.states = tuple(states)

    def _family(self) -> GaugeMetricFamily:
        return GaugeMetricFamily(
            "devicedeck_kube_watch_state", WATCH_STATE_HELP, labels=["resource", "state"]
        )

    def describe(self) -> Iterator[GaugeMetricFamily]:
        # Registration asks for the names; reading the database then is not needed.
        yield self._family()

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = self._family()
        for resource, current in self.read():
            for state in self.states:
                family.add_metric([resource, state], 1.0 if state == current else 0.0)
        yield family


class ServiceMetrics:
    """One registry per app, so several apps in one process (tests) do not collide."""

    def __init__(self, version: str) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.fleet: FleetGauges | None = None
        self.leading: Callable[[], bool] = lambda: False
        Gauge(
            "devicedeck_leader",
            "1 while this process runs the work only one process runs (stale sweep, cluster "
            "watcher), else 0.",
            registry=self.registry,
        ).set_function(lambda: 1.0 if self.leading() else 0.0)
        Gauge(
            "devicedeck_build_info",
            "Always 1; version is the running release.",
            ["version"],
            registry=self.registry,
        ).labels(version).set(1)
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
        self._unchanged_ingest: dict[str, tuple[Histogram, Counter]] = {}
        self.http_requests = Counter(
            "devicedeck_http_requests_total",
            "Requests answered, by route template, method and status code.",
            ["route", "method", "status"],
            registry=self.registry,
        )
        self.http_seconds = Histogram(
            "devicedeck_http_request_duration_seconds",
            "Time from request to the end of the answer, by route template and method "
            "(event streams are not timed).",
            ["route", "method"],
            registry=self.registry,
            buckets=HTTP_BUCKETS,
        )

    def unchanged_ingest(self, kind: str) -> tuple[Histogram, Counter]:
        """The duration and count an unchanged snapshot of `kind` is recorded in, looked up
        once: `labels()` takes a lock and builds its key at every call, a visible share of
        what the most frequent request costs."""
        found = self._unchanged_ingest.get(kind)
        if found is None:
            found = self._unchanged_ingest[kind] = (
                self.ingest_seconds.labels(kind),
                self.ingest_total.labels(kind, "unchanged"),
            )
        return found

    def watch_leadership(self, leading: Callable[[], bool]) -> None:
        self.leading = leading

    def watch_fleet(self, fleet: FleetGauges) -> None:
        self.fleet = fleet

    def watch_cluster(
        self, read: Callable[[], list[tuple[str, str]]], states: Sequence[str]
    ) -> None:
        self.registry.register(WatchStateCollector(read, states))

    def render(self, accept: str | None) -> tuple[bytes, str]:
        """The exposition the scraper asked for by its Accept header (OpenMetrics or the text
        format), and its content type."""
        encode, content_type = choose_encoder(accept or "")
        body = encode(self.registry)
        if self.fleet is None:
            return body, content_type
        fleet = self.fleet.render()
        if content_type.startswith("application/openmetrics-text"):
            return body.removesuffix(OPENMETRICS_END) + fleet + OPENMETRICS_END, content_type
        return body + fleet, content_type
