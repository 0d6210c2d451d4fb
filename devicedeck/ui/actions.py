"""What an operator does next, ready to copy: kubectl commands for a node or a device, and
the optional link-out for a device (DEVICEDECK_DEVICE_LINK_TEMPLATE)."""

from __future__ import annotations

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
