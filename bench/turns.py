"""Two checkouts' code taking turns on one machine: the harness of the code-against-code
benchmarks (bench/unchanged_cpu.py, bench/listandwatch_cpu.py).

Each side is a child process running the benchmark script in its checkout: it sets up, prints
"ready", then runs one block per line it reads and prints the block's figures on one line; an
empty line ends it. Turns alternate who goes first, so neither always follows the other.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
from pathlib import Path


class Child:
    def __init__(self, script: str, checkout: Path, database: str, options: list[str]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(Path(script).resolve()), "--child", database, *options],
            cwd=checkout,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdin and self.process.stdout
        self.stdin, self.stdout = self.process.stdin, self.process.stdout
        if self.stdout.readline().strip() != "ready":
            raise SystemExit(f"{checkout}: did not start")

    def block(self) -> list[float]:
        self.stdin.write("go\n")
        self.stdin.flush()
        return [float(x) for x in self.stdout.readline().split()]

    def stop(self) -> None:
        self.stdin.write("\n")
        self.stdin.flush()
        self.process.wait(timeout=60)


def take_turns(
    script: str,
    checkouts: tuple[Path, Path],
    databases: tuple[str, str],
    options: list[str],
    blocks: int,
) -> tuple[list[list[float]], list[list[float]]]:
    """The figures of each block: the first checkout's, the other's."""
    mine = Child(script, checkouts[0], databases[0], options)
    theirs = Child(script, checkouts[1], databases[1], options)
    these: list[list[float]] = []
    those: list[list[float]] = []
    try:
        for index in range(blocks):
            if index % 2:
                these.append(mine.block())
                those.append(theirs.block())
            else:
                those.append(theirs.block())
                these.append(mine.block())
    finally:
        mine.stop()
        theirs.stop()
    return these, those


def medians(
    these: list[list[float]], those: list[list[float]], index: int
) -> tuple[float, float, float]:
    """Of figure `index`: the median of each side, and the median ratio of a block's pair."""
    mine = statistics.median(b[index] for b in these)
    theirs = statistics.median(b[index] for b in those)
    ratio = statistics.median(a[index] / b[index] for a, b in zip(these, those, strict=True))
    return mine, theirs, ratio
