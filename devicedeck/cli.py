"""The `devicedeck` command.

Each feature area keeps its own subcommands in a `commands` module with a
``register(subparsers)`` function; this module only gathers them.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from devicedeck import __version__

COMMAND_MODULES = (
    "devicedeck.commands",
    "devicedeck.sim.plugin_cli",
    "devicedeck.sim.commands",
    "devicedeck.demo.commands",
    "devicedeck.agent.commands",
    "devicedeck.truth.commands",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="devicedeck",
        description="Devicedeck: Kubernetes device inventory, health history and assignments.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    result = args.func(args)
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
