"""What an operator does next, ready to copy: kubectl commands for a node or a device, a
DeviceTaintRule that keeps new claims off one DRA device, and the optional link-out for a
device (DEVICEDECK_DEVICE_LINK_TEMPLATE)."""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from typing import Any
from urllib.parse import quote

from devicedeck.config import LINK_FIELDS


def node_commands(node: str) -> list[dict[str, str]]:
    name = shlex.quote(node)
    return [
        {"what": "Show the node", "command": f"kubectl describe node {name}"},
        {"what": "Stop new pods landing here", "command": f"kubectl cordon {name}"},
        {
            "what": "Move its pods away",
            "command": f"kubectl drain {name} --ignore-daemonsets --delete-emptydir-data",
        },
        {"what": "Let pods land here again", "command": f"kubectl uncordon {name}"},
    ]


def device_commands(device: dict[str, Any]) -> list[dict[str, str]]:
    commands = []
    holder = device.get("allocation")
    if holder:
        pod = f"{shlex.quote(holder['pod'])} -n {shlex.quote(holder['namespace'])}"
        command = f"kubectl describe pod {pod}"
        commands.append({"what": "Show the pod holding it", "command": command})
    return commands + node_commands(device["node"])


def device_link(template: str | None, device: dict[str, Any]) -> str | None:
    """The template with the device's node, resource and ID filled in, each URL-encoded, so
    an ID cannot add to the URL's path or query."""
    if not template:
        return None
    return template.format(**{name: quote(str(device[name]), safe="") for name in LINK_FIELDS})


# DeviceTaintRule is served as resource.k8s.io/v1 from Kubernetes 1.37, where device taints are
# generally available; a 1.36 cluster that serves the beta takes v1beta2, with the same fields.
TAINT_RULE_API_VERSION = "resource.k8s.io/v1"
TAINT_KEY = "devicedeck.dev/out-of-service"
TAINT_VALUE = "marked-for-return"
RULE_NAME_MAX = 253
_NOT_IN_NAME = re.compile(r"[^a-z0-9-]+")


def taint_rule_name(driver: str, pool: str, device: str) -> str:
    """A DNS subdomain naming the rule after the device, unique per driver, pool and device:
    the readable part is cut short where needed, the hash keeps apart what the cut joins."""
    digest = hashlib.sha256(f"{driver}\0{pool}\0{device}".encode()).hexdigest()[:10]
    readable = _NOT_IN_NAME.sub("-", f"{device}-{pool}".lower()).strip("-")
    prefix = f"devicedeck-{readable}"[: RULE_NAME_MAX - len(digest) - 1].rstrip("-")
    return f"{prefix}-{digest}"


def taint_rule_manifest(driver: str, pool: str, device: str) -> str:
    """A DeviceTaintRule with a NoSchedule taint on exactly this device: claims that do not
    tolerate it are not allocated the device; pods already using it keep running. Strings are
    written as JSON strings, which YAML reads as they are."""
    return "\n".join(
        [
            f"apiVersion: {TAINT_RULE_API_VERSION}",
            "kind: DeviceTaintRule",
            "metadata:",
            f"  name: {taint_rule_name(driver, pool, device)}",
            "spec:",
            "  deviceSelector:",
            f"    driver: {json.dumps(driver)}",
            f"    pool: {json.dumps(pool)}",
            f"    device: {json.dumps(device)}",
            "  taint:",
            f"    key: {TAINT_KEY}",
            f"    value: {TAINT_VALUE}",
            "    effect: NoSchedule",
        ]
    )


def dra_device_commands(device: dict[str, Any]) -> list[dict[str, str]]:
    """For a DRA device: the taint rule, applied through a quoted here-document so the shell
    expands nothing in it, and the rule's removal; then its node's commands, when it has one."""
    driver, pool, name = device["driver"], device["pool"], device["device"]
    manifest = taint_rule_manifest(driver, pool, name)
    commands = [
        {
            "what": "Keep new claims off this device (a DeviceTaintRule)",
            "command": f"kubectl apply -f - <<'EOF'\n{manifest}\nEOF",
        },
        {
            "what": "Let claims use it again",
            "command": f"kubectl delete devicetaintrule {taint_rule_name(driver, pool, name)}",
        },
    ]
    node = (device.get("current") or {}).get("node")
    return commands + (node_commands(node) if node else [])
