"""Before against after from saved bench/scale.py outputs: the median over pairs of after/before.

    .venv/bin/python bench/scale.py --checkout /tmp/before ... > before-1.txt   # then after-1.txt,
    .venv/bin/python bench/scale.py --checkout /tmp/after ... > after-1.txt     # before-2.txt, ...
    .venv/bin/python bench/scale_compare.py --before before-*.txt --after after-*.txt

Runs pair up in the order given (the first before with the first after, and so on), so pair the
runs that followed one another. For each timed query and page: after/before of the p50, of the
p95 as a ratio to /livez's p95 in the same run, and of the service's CPU per request; for each
ingest rate: after/before of the rate, of its ratio to the /livez rate in the same run, and of
the CPU per snapshot. Below 1 is faster for latencies and CPU, above 1 is faster for rates.
The fill's rate and the service's memory at the end are compared too. Each cell is the median
over the pairs, then the lowest and highest pair.
"""

from __future__ import annotations

import argparse
import re
import statistics
from pathlib import Path

QUERY = re.compile(r"^(?P<label>.+?)\s+(?P<p50>[\d.]+)\s+[\d.]+\s+(?P<ratio>\d+)\s+(?P<cpu>\S+)$")
RATE = re.compile(
    r"^(?P<label>.+?)\s+(?P<rate>[\d.]+)/s"
    r"(?:\s+ratio to /livez\s+(?P<ratio>[\d.]+)\s+server CPU\s+(?P<cpu>\S+) ms/snapshot)?$"
)
FILLED = re.compile(r"^  filled [\d,]+ nodes, (?P<rate>[\d.]+) snapshots/s$")
RSS_AT_END = re.compile(r"^service RSS at the end: (?P<mb>\d+) MB")
NAN = float("nan")
Figures = dict[str, tuple[float, float, float]]


def parse(path: Path) -> tuple[Figures, Figures]:
    """A run's queries and ingest rates: label -> (p50 or rate, ratio to /livez, CPU ms);
    the fill's rate and the service's memory at the end are among the rates."""
    queries: Figures = {}
    rates: Figures = {}
    section = None
    for line in path.read_text().splitlines():
        if m := FILLED.match(line):  # the last one is the whole fill's rate
            rates["fill (concurrency 8)"] = (float(m["rate"]), NAN, NAN)
        elif m := RSS_AT_END.match(line):
            rates["service RSS at the end (MB)"] = (float(m["mb"]), NAN, NAN)
        elif line.startswith("query "):
            section = "queries"
        elif line.startswith("ingest with wrk"):
            section = "rates"
        elif line.startswith("service RSS"):
            section = None
        elif section == "queries" and (m := QUERY.match(line)):
            queries[m["label"]] = (float(m["p50"]), float(m["ratio"]), float(m["cpu"]))
        elif section == "rates" and (m := RATE.match(line)):
            rate = float(m["rate"])
            if m["ratio"] is None:  # the /livez baseline
                rates[m["label"]] = (rate, 1.0, NAN)
            else:
                rates[m["label"]] = (rate, float(m["ratio"]), float(m["cpu"]))
    if "/livez" not in queries:
        raise SystemExit(f"{path}: no query table")
    return queries, rates


def cell(before: list[Figures], after: list[Figures], label: str, index: int) -> str:
    ratios = []
    for b, a in zip(before, after, strict=True):
        old, new = b[label][index], a[label][index]
        if old > 0 and new > 0:  # neither zero (too little to measure) nor nan
            ratios.append(new / old)
    if not ratios:
        return ""
    return f"{statistics.median(ratios):.2f} ({min(ratios):.2f} to {max(ratios):.2f})"


def table(before: list[Figures], after: list[Figures], heads: tuple[str, ...]) -> None:
    print(f"| {' | '.join(heads)} |")
    print(f"|{'---|' * len(heads)}")
    labels = [label for label in before[0] if all(label in run for run in before + after)]
    for label in labels:
        cells = [cell(before, after, label, i) for i in range(3)]
        print(f"| {label} | {' | '.join(cells)} |")
    missing = {label for run in before + after for label in run} - set(labels)
    if missing:
        print(f"\nnot in every run, left out: {', '.join(sorted(missing))}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--before", type=Path, nargs="+", required=True)
    parser.add_argument("--after", type=Path, nargs="+", required=True)
    args = parser.parse_args()
    if len(args.before) != len(args.after):
        raise SystemExit("give as many --before runs as --after runs: they are taken in pairs")
    before = [parse(path) for path in args.before]
    after = [parse(path) for path in args.after]
    print(f"after/before, median over {len(before)} pairs (lowest to highest pair)\n")
    table(
        [q for q, _ in before],
        [q for q, _ in after],
        ("query", "p50", "p95 / livez", "CPU ms"),
    )
    if all(r for _, r in before + after):
        print()
        table(
            [r for _, r in before],
            [r for _, r in after],
            ("ingest", "rate", "ratio to /livez", "CPU ms/snapshot"),
        )


if __name__ == "__main__":
    main()
