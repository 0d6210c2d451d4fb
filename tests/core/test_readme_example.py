"""The README's hand-posted snapshot does what the README says it does."""

from __future__ import annotations

import json
import re
from pathlib import Path

from .conftest import Api

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_snapshot() -> tuple[str, bytes]:
    """The path and body of the README's `curl ... -d @- <<'EOF'` example."""
    found = re.search(
        r"(/api/v1/ingest/\w+) -d @- <<'EOF'\n(.*?)\nEOF\n", README.read_text(), re.DOTALL
    )
    assert found, "the README's curl example is gone"
    return found.group(1), found.group(2).encode()


def test_readme_curl_example_ingests_as_described(api: Api) -> None:
    path, body = readme_snapshot()
    headers = {**api.headers, "content-type": "application/json"}
    answer = api.client.post(path, content=body, headers=headers)
    assert answer.status_code == 200, answer.text
    assert answer.json()["changed"] and answer.json()["added"] == 2
    assert answer.json()["events"] == 3
    again = api.client.post(path, content=body, headers=headers).json()
    assert not again["changed"]
    unhealthy = api.get("/api/v1/devices", health="Unhealthy")["results"]
    assert [d["device_id"] for d in unhealthy] == [json.loads(body)["devices"][1]["ID"]]
