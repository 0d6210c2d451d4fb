"""`devicedeck truth`: run the simulated cluster under a seeded workload and check the
service against the simulators' own state (docs/truth.md)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

EXIT_CLEAN = 0
EXIT_FOUND = 1
EXIT_NOT_RUN = 2


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "truth",
        help="check the service against the simulators under a seeded workload",
        description="Start the simulated cluster (API server, DRA driver, three nodes, their "
        "agents, the service and a webhook receiver), take seeded random actions (device "
        "flaps, unplugs and plug-backs, pods, restarts of agents, kubelets, the service and "
        "the API server), read the simulators' own state and the service's API every second, "
        "and report what the service got wrong: presence, health or holder differences that "
        "last longer than the settling window, false events, false and missing alerts. Exits "
        "1 when any of these counts is not zero.",
    )
    parser.add_argument("--seed", type=int, default=1, help="the workload's seed (default 1)")
    amount = parser.add_mutually_exclusive_group()
    amount.add_argument(
        "--actions",
        type=int,
        default=200,
        help="actions to take (default 200); one refused (a pod that does not fit, a node "
        "restarting) is not counted and another is chosen",
    )
    amount.add_argument("--seconds", type=float, help="take actions for this long instead")
    parser.add_argument(
        "--settle",
        type=float,
        default=5.0,
        help="seconds the service may lag behind the truth before a difference counts (default 5)",
    )
    parser.add_argument(
        "--interval", type=float, default=0.5, help="seconds between actions (default 0.5)"
    )
    parser.add_argument(
        "--keep-going",
        action="store_true",
        help="take every action even after a mismatch (by default the run stops at the first)",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--data-dir",
        type=Path,
        help="where the cluster keeps its state and logs (default: a new temporary directory)",
    )
    parser.add_argument(
        "--database-url",
        help="the service's database (default: SQLite in the data directory)",
    )
    parser.set_defaults(func=run_truth)


def _check(args: argparse.Namespace) -> str | None:
    if args.seconds is None and args.actions < 1:
        return "--actions must be at least 1"
    if args.seconds is not None and args.seconds <= 0:
        return "--seconds must be positive"
    if args.settle < 0:
        return "--settle must not be negative"
    if args.interval <= 0:
        return "--interval must be positive"
    return None


def run_truth(args: argparse.Namespace) -> int:
    from devicedeck.signals import stop_on_signals
    from devicedeck.truth.readings import Unanswered
    from devicedeck.truth.run import Options, Oracle

    problem = _check(args)
    if problem:
        print(f"devicedeck truth: {problem}", file=sys.stderr)
        return EXIT_NOT_RUN
    options = Options(
        seed=args.seed,
        actions=None if args.seconds is not None else args.actions,
        seconds=args.seconds,
        settle=args.settle,
        interval=args.interval,
        keep_going=args.keep_going,
        data_dir=args.data_dir,
        database_url=args.database_url,
    )
    with stop_on_signals() as interrupt:
        oracle = Oracle(
            options,
            lambda text: print(f"truth: {text}", file=sys.stderr, flush=True),
            interrupt,
        )
        try:
            report = oracle.run()
        except (TimeoutError, RuntimeError, Unanswered) as e:
            logs = oracle.cluster.layout.logs_dir
            print(f"devicedeck truth: {e}; logs in {logs}", file=sys.stderr)
            return EXIT_NOT_RUN
    if args.json:
        print(json.dumps(report.to_json(), indent=2, sort_keys=True))
    else:
        print(report.text())
        print(f"logs: {oracle.cluster.layout.logs_dir}")
    return EXIT_CLEAN if report.clean else EXIT_FOUND
