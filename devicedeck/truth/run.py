"""One run of the oracle: start the cluster, act and read every second, judge, report."""

from __future__ import annotations

import signal
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from devicedeck.truth.cluster import Cluster
from devicedeck.truth.compare import MismatchTracker, differences
from devicedeck.truth.disruptions import EVERY_NODE, Disruption, Disruptions
from devicedeck.truth.history import TruthHistory
from devicedeck.truth.model import Truth
from devicedeck.truth.readings import (
    Unanswered,
    node_last_seen,
    read_api,
    read_events,
    read_truth,
)
from devicedeck.truth.receiver import AlertRecorder
from devicedeck.truth.report import Report
from devicedeck.truth.verdicts import (
    alerts_left_firing,
    device_alerts,
    judge_alerts,
    judge_events,
    missing_alerts,
)
from devicedeck.truth.workload import Taken, Workload

SAMPLE_SECONDS = 1.0
TICK_SECONDS = 0.05
# How long after a change the service's webhook may come: the outbox is sent by a loop
# that wakes about every second, behind the change's own ingest.
ALERT_DELAY_SECONDS = 5.0
RECOVERY_TIMEOUT_SECONDS = 120.0


@dataclass
class Options:
    seed: int = 1
    actions: int | None = 200
    seconds: float | None = None
    settle: float = 5.0
    interval: float = 0.5
    keep_going: bool = False
    data_dir: Path | None = None
    database_url: str | None = None


def rfc3339(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat()


@dataclass
class _Pending:
    member: str
    restarts: int
    disruption: Disruption


class Oracle:
    def __init__(
        self,
        options: Options,
        progress: Callable[[str], None],
        interrupt: threading.Event | None = None,
    ) -> None:
        self.options = options
        # Set by SIGINT or SIGTERM: the actions stop and what was read so far is judged.
        self.interrupt = interrupt or threading.Event()
        self.progress = progress
        data_dir = options.data_dir or Path(tempfile.mkdtemp(prefix="devicedeck-truth-"))
        self.data_dir = data_dir
        self.recorder = AlertRecorder()
        self.cluster = Cluster(data_dir, options.database_url, self.recorder.url, self.log)
        self.history = TruthHistory()
        self.disruptions = Disruptions()
        self.tracker = MismatchTracker(options.settle)
        self.report = Report(seed=options.seed, settle=options.settle)
        self._pending: list[_Pending] = []
        self._log_path = self.cluster.layout.logs_dir / "truth.log"

    def log(self, text: str) -> None:
        self._log_path.parent.mkdir(parents=True, exist_ok=True)
        with self._log_path.open("a", encoding="utf-8") as log:
            log.write(f"{rfc3339(time.time())} {text}\n")

    def run(self) -> Report:
        self.recorder.start()
        try:
            self.progress(f"starting the cluster in {self.data_dir}")
            self.cluster.start()
            self.progress(f"cluster ready; the service is at {self.cluster.base_url}")
            return self._run()
        finally:
            self.cluster.stop()
            self.recorder.stop()

    def _run(self) -> Report:
        options = self.options
        workload = Workload(
            options.seed,
            self.cluster.roots,
            self._known_devices,
            self._restart,
            lambda: not self._pending,
        )
        began = time.time()
        since = rfc3339(began)
        next_action = next_sample = began
        stop = False
        while not stop:
            if self.interrupt.is_set():
                self.report.interrupted = True
                self.progress("interrupted: judging what was read so far")
                break
            self.cluster.supervise()
            now = time.time()
            self._notice_recoveries(now)
            if now >= next_action:
                if self._more_actions(workload.tally.total, now - began):
                    taken = workload.step()
                    if taken is not None:
                        self._record(taken, time.time())
                        if workload.tally.total % 100 == 0:
                            self.progress(f"{workload.tally.total} actions")
                    for refusal in workload.refusals:
                        self.log(f"not taken: {refusal}")
                    workload.refusals.clear()
                else:
                    break
                # No catching up after a slow action: the pace stays one every interval.
                next_action = max(next_action + options.interval, now)
            if now >= next_sample:
                found_overdue = self._sample(now)
                stop = found_overdue and not options.keep_going
                self.report.stopped_early = stop
                next_sample = now + SAMPLE_SECONDS
            time.sleep(TICK_SECONDS)
        self._drain()
        self.report.actions = workload.tally.total
        self.report.actions_by_kind = dict(workload.tally.taken)
        self.report.actions_refused = dict(workload.tally.refused)
        self.report.seconds = time.time() - began
        self._judge(since, began)
        return self.report

    def _more_actions(self, taken: int, elapsed: float) -> bool:
        if self.options.seconds is not None:
            return elapsed < self.options.seconds
        return self.options.actions is None or taken < self.options.actions

    def _known_devices(self, node: str, resource: str) -> list[str]:
        return [
            k.device_id for k in self.history.devices() if (k.node, k.resource) == (node, resource)
        ]

    def _restart(self, member: str, kind: str, signum: signal.Signals) -> bool:
        child = self.cluster.members[member].child
        restarts = child.restarts
        if not self.cluster.kill(member, signum):
            return False
        node = self.cluster.members[member].node
        disruption = self.disruptions.begin(kind, node, time.time())
        self._pending.append(_Pending(member, restarts, disruption))
        return True

    def _record(self, taken: Taken, at: float) -> None:
        self.log(taken.text)
        if taken.device is not None and taken.device_action is not None:
            self.history.record_action(taken.device, at, taken.device_action)

    def _notice_recoveries(self, now: float) -> None:
        for pending in list(self._pending):
            member = self.cluster.members[pending.member]
            back = member.child.restarts > pending.restarts and member.child.running
            if back and member.ready() and self._heard_since(pending):
                pending.disruption.end = time.time()
                self._pending.remove(pending)
                self.log(f"{pending.member} answers again after {pending.disruption.what}")
            elif now - pending.disruption.start > RECOVERY_TIMEOUT_SECONDS:
                raise RuntimeError(f"{pending.member} did not come back; see its log")

    def _heard_since(self, pending: _Pending) -> bool:
        """A restarted agent is back once the service has heard from it, not when it merely
        listens: its first report may take seconds more on a busy machine."""
        if not pending.member.startswith("agent "):
            return True
        node = self.cluster.members[pending.member].node
        try:
            seen = node_last_seen(self.cluster.base_url, node)
        except Unanswered:
            return False
        return seen is not None and seen > pending.disruption.start

    def _sample(self, now: float) -> bool:
        """One reading of the truth and of the service; True if a difference is overdue."""
        report = self.report
        report.samples += 1
        truth, silent = read_truth(self.cluster.roots, set(), self.cluster.derived)
        self.history.record_reading(now, truth, silent)
        if self.disruptions.active(EVERY_NODE):
            # The service or the API server is restarting: nothing it says now is judged.
            return False
        try:
            api = read_api(self.cluster.base_url)
        except Unanswered:
            report.samples_unanswered += 1
            return False
        calm = frozenset(n for n in truth.nodes if not self.disruptions.active(n))
        judged = Truth(calm, truth.devices, truth.holders, truth.derived)
        overdue = self.tracker.observe(now, differences(judged, api), self.disruptions.calm_since)
        for item in overdue:
            kind = item.difference.kind
            report.mismatch_samples[kind] = report.mismatch_samples.get(kind, 0) + 1
            if item.first:
                report.mismatches[kind] = report.mismatches.get(kind, 0) + 1
                text = f"{rfc3339(now)} {item.difference.describe()} for {item.age:.0f} s"
                if item.carried_over_restart:
                    report.mismatches_after_restart += 1
                    text += ", there already when the last restart ended"
                report.example(f"{kind} mismatches", text)
                self.log("MISMATCH " + text)
        return bool(overdue)

    def _drain(self) -> None:
        """No more actions: let restarts finish and the service settle, reading on."""
        deadline = time.time() + RECOVERY_TIMEOUT_SECONDS
        while self._pending and time.time() < deadline:
            self.cluster.supervise()
            self._notice_recoveries(time.time())
            time.sleep(0.2)
        end = time.time() + self.options.settle + ALERT_DELAY_SECONDS + 2 * SAMPLE_SECONDS
        while time.time() < end:
            self.cluster.supervise()
            self._sample(time.time())
            time.sleep(SAMPLE_SECONDS)

    def _read_events(self, since: str) -> list[dict[str, Any]]:
        """The events to judge; a busy service gets a few tries."""
        deadline = time.time() + RECOVERY_TIMEOUT_SECONDS
        while True:
            self.cluster.supervise()
            try:
                return read_events(self.cluster.base_url, since)
            except Unanswered:
                if time.time() > deadline:
                    raise
            time.sleep(1.0)

    def _judge(self, since: str, began: float) -> None:
        report, settle = self.report, self.options.settle
        until = time.time()
        events = judge_events(
            self._read_events(since), self.history, self.disruptions, settle, began
        )
        report.events_judged, report.false_events = events.judged, len(events.false)
        report.events_unjudged = len(events.unjudged)
        for text in events.false:
            report.example("false events", text)
        alerts = device_alerts(self.recorder.messages())
        judged = judge_alerts(alerts, self.history, self.disruptions, settle, began)
        report.alerts_judged, report.false_alerts = judged.judged, len(judged.false)
        report.alerts_unjudged = len(judged.unjudged)
        for text in judged.false:
            report.example("false alerts", text)
        missing = missing_alerts(
            alerts, self.history, self.disruptions, settle, ALERT_DELAY_SECONDS, until
        )
        report.missing_alerts = len(missing)
        for text in missing:
            report.example("missing alerts", text)
        left = alerts_left_firing(alerts, self.history, settle, until)
        report.alerts_left_firing = len(left)
        for text in left:
            report.example("alerts left firing", text)
