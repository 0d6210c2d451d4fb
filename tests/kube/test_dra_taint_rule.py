"""A DRA device's page offers a DeviceTaintRule for that one device, ready to paste into a
shell, and its node's cordon and drain commands."""

from __future__ import annotations

import re
import subprocess

import yaml
from fastapi.testclient import TestClient
from ui.dom import Element, parse

from devicedeck.ui.actions import taint_rule_manifest, taint_rule_name

from .conftest import StartApp, wait_for
from .dra_builders import DRIVER, device, slice_object
from .fake_apiserver import FakeApiServer
from .objects import node

DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def _commands(page: Element) -> dict[str, str]:
    """What -> the command its Copy button copies, from the Act card."""
    [listing] = page.find_all("dl", predicate=lambda e: e.has_class("command-list"))
    terms = [c for c in listing.children if isinstance(c, Element)]
    return {
        dt.clean_text: dd.one("button").attrs["data-copy"]
        for dt, dd in zip(terms[::2], terms[1::2], strict=True)
    }


def _pasted(command: str) -> str:
    """What kubectl would read on its standard input when the command is pasted into bash."""
    script = "kubectl() { cat; }\n" + command + "\n"
    return subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, check=True, timeout=30
    ).stdout


def test_the_dra_device_page_offers_a_taint_rule_for_that_device(
    fake_api: FakeApiServer, start_app: StartApp, auth: dict[str, str]
) -> None:
    fake_api.put("nodes", node("node-a", capacity={}))
    fake_api.put(
        "resourceslices",
        slice_object("node-a-gpus", [device("gpu-0")], pool="node-a", nodeName="node-a"),
    )
    client: TestClient = start_app()
    path = f"/dra/devices/{DRIVER}/node-a/gpu-0"
    page = wait_for(
        lambda: (
            (r := client.get(path, headers=auth)).status_code == 200
            and "node-a-gpus" in r.text
            and parse(r.text)
        ),
        what="the DRA device's page",
    )
    commands = _commands(page)
    applied = commands["Keep new claims off this device (a DeviceTaintRule)"]
    rule = yaml.safe_load(_pasted(applied))
    assert rule["apiVersion"] == "resource.k8s.io/v1" and rule["kind"] == "DeviceTaintRule"
    assert rule["spec"] == {
        "deviceSelector": {"driver": DRIVER, "pool": "node-a", "device": "gpu-0"},
        "taint": {
            "key": "devicedeck.dev/out-of-service",
            "value": "marked-for-return",
            "effect": "NoSchedule",
        },
    }
    name = rule["metadata"]["name"]
    assert commands["Let claims use it again"] == f"kubectl delete devicetaintrule {name}"
    assert commands["Stop new pods landing here"] == "kubectl cordon node-a"
    assert commands["Move its pods away"].startswith("kubectl drain node-a ")


def test_odd_names_stay_inside_their_fields_and_the_rule_name_is_valid() -> None:
    pool = 'rack-1/slot: "7" #x'
    manifest = taint_rule_manifest("gpu.example.com", pool, "Dev_0\nkind: Secret")
    rule = yaml.safe_load(manifest)
    assert rule["kind"] == "DeviceTaintRule"
    assert rule["spec"]["deviceSelector"]["pool"] == pool
    assert rule["spec"]["deviceSelector"]["device"] == "Dev_0\nkind: Secret"
    long = taint_rule_name("d", "p" * 253, "x" * 253)
    for name in (rule["metadata"]["name"], long, taint_rule_name("d", "a/b", "c")):
        assert len(name) <= 253 and DNS_SUBDOMAIN.match(name), name
    # Two devices that read alike once cut to a name still get rules of their own.
    assert taint_rule_name("d", "a/b", "c") != taint_rule_name("d", "a-b", "c")
