"""Copy-ready commands and the device link-out: values from outside stay inside their slot."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from devicedeck.config import Settings
from devicedeck.ui.actions import device_commands, device_link, node_commands


def test_commands_quote_names_for_the_shell() -> None:
    assert node_commands("gpu-node-02")[1]["command"] == "kubectl cordon gpu-node-02"
    odd = device_commands({"node": "n; rm -rf /", "allocation": {"namespace": "ml", "pod": "a b"}})
    assert odd[0]["command"] == "kubectl describe pod 'a b' -n ml"
    assert odd[1]["command"] == "kubectl describe node 'n; rm -rf /'"


def test_device_link_fills_url_encoded_values() -> None:
    template = "https://g.example/d?n={node}&r={resource}&id={device_id}"
    device = {"node": "node-a", "resource": "nvidia.com/gpu", "device_id": "x&y=/z"}
    assert device_link(template, device) == (
        "https://g.example/d?n=node-a&r=nvidia.com%2Fgpu&id=x%26y%3D%2Fz"
    )
    assert device_link(None, device) is None


@pytest.mark.parametrize(
    ("template", "says"),
    [
        ("javascript:alert({device_id})", "http"),
        ("https://g.example/{uuid}", "uuid"),
        ("https://g.example/{device_id", "template"),
    ],
)
def test_link_template_setting_is_checked(template: str, says: str) -> None:
    with pytest.raises(ValidationError, match=says):
        Settings(device_link_template=template)
