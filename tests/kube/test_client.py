"""The API client layer against the fake: paged lists and the configuration it loads."""

from __future__ import annotations

from pathlib import Path

import pytest

from devicedeck.config import KubeMode, Settings
from devicedeck.kube import client as kube_client
from devicedeck.kube.client import NODES, KubeApi
from devicedeck.kube.errors import ApiStatus

from .fake_apiserver import FakeApiServer
from .objects import node


def test_lists_follow_continue_tokens(
    fake_api: FakeApiServer, kubeconfig: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kube_client, "LIST_PAGE_SIZE", 2)
    for i in range(5):
        fake_api.put("nodes", node(f"node-{i}", capacity={}))
    api = KubeApi.from_settings(Settings(kube=KubeMode.KUBECONFIG, kubeconfig=str(kubeconfig)))
    try:
        items, version = api.list_all(NODES)
        fake_api.deny("nodes")
        with pytest.raises(ApiStatus) as refused:
            api.list_all(NODES)
    finally:
        api.close()
    assert [i["metadata"]["name"] for i in items] == [f"node-{i}" for i in range(5)]
    assert version == fake_api.store.find("nodes", "node-4")["metadata"]["resourceVersion"]
    pages = fake_api.recorded("GET", "/api/v1/nodes")[:3]
    assert [bool(r.query.get("continue")) for r in pages] == [False, True, True]
    assert all(r.query["limit"] == ["2"] for r in pages)
    assert (refused.value.code, refused.value.reason) == (403, "Forbidden")
