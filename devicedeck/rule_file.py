"""Write deploy/monitoring/devicedeck.rules.yaml, the alert rules as a plain Prometheus rule
file, from the PrometheusRule beside it.

    python -m devicedeck.rule_file           # rewrite the rule file (make rules)
    python -m devicedeck.rule_file --check   # exit 1 if it differs from the PrometheusRule

The PrometheusRule is the one to edit: the Prometheus Operator loads it, and its `spec` is a
rule file as it is. The plain file is that `spec`, moved two columns left with its comments,
so a Prometheus without the operator loads it as it is, and `promtool test rules
deploy/monitoring/rules-test.yaml` runs from a checkout with nothing prepared. Nothing here
knows which rules there are.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

MONITORING = Path(__file__).resolve().parents[1] / "deploy" / "monitoring"
PROMETHEUS_RULE = MONITORING / "prometheus-rule.yaml"
RULE_FILE = MONITORING / "devicedeck.rules.yaml"
HEADER = (
    "# Generated from prometheus-rule.yaml (its spec) by `make rules`: edit that file, then run\n"
    "# `make rules`. A Prometheus rule file for a Prometheus without the Prometheus Operator;\n"
    "# rules-test.yaml unit-tests it: promtool test rules deploy/monitoring/rules-test.yaml\n"
)
INDENT = "  "


class NotARule(ValueError):
    """The PrometheusRule's text has no `spec:` the rule file can be cut from."""


def spec_text(prometheus_rule: str) -> str:
    """The lines under the top-level `spec:` key, two columns to the left."""
    lines = prometheus_rule.splitlines()
    try:
        start = lines.index("spec:") + 1
    except ValueError as e:
        raise NotARule("no top-level `spec:` line") from e
    body = []
    for line in lines[start:]:
        if line.strip() and not line.startswith(INDENT):
            if line.startswith("#"):
                body.append(line)
                continue
            raise NotARule(f"a top-level key after spec: {line!r}")
        body.append(line.removeprefix(INDENT))
    while body and not body[-1].strip():
        body.pop()
    return "\n".join(body) + "\n"


def rule_file_text(prometheus_rule: str) -> str:
    return HEADER + spec_text(prometheus_rule)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only say whether it is current")
    args = parser.parse_args(argv)
    wanted = rule_file_text(PROMETHEUS_RULE.read_text(encoding="utf-8"))
    if args.check:
        current = RULE_FILE.read_text(encoding="utf-8") if RULE_FILE.exists() else ""
        if current != wanted:
            print(f"{RULE_FILE} is out of date: run `make rules`", file=sys.stderr)
            return 1
        return 0
    RULE_FILE.write_text(wanted, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
