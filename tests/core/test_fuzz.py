"""Schemathesis against the app's own OpenAPI schema: no 5xx, no response off its schema.

Bounded and deterministic: a fixed number of derandomized examples per operation, positive
(valid by the schema) and negative (invalid by it). The examples are generated once and sent
to the app on each database through the TestClient, with a token that holds every scope.
"""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import Case, GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from devicedeck.config import Settings
from devicedeck.main import create_app

from .conftest import GPU, Api, dev, held, listandwatch, pod, podresources

EXAMPLES_PER_OPERATION = 12
# Snapshot bodies nest five levels deep and are slow to generate.
EXAMPLES_PER_SNAPSHOT_OPERATION = 6
CHECKS = [
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
    content_type_conformance,
]

Cases = list[tuple[str, Case]]


def can_be_invalid(definition: dict[str, Any]) -> bool:
    """Whether an operation has any input the schema could call invalid."""
    if definition.get("requestBody"):
        return True
    for parameter in definition.get("parameters", []):
        rules = set(parameter.get("schema", {})) - {"title", "description"}
        if rules != {"type"} or parameter["schema"]["type"] != "string":
            return True
    return False


def generate(operation: Any, mode: GenerationMode, count: int) -> list[Case]:
    found: list[Case] = []

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=count,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.explicit, Phase.generate],
    )
    def collect(case: Case) -> None:
        found.append(case)

    try:
        collect()
    except Unsatisfiable:
        # Every parameter takes any string (a name, say): nothing can be made invalid.
        if mode is not GenerationMode.NEGATIVE:
            raise
    return found


@pytest.fixture(scope="module")
def fuzz_cases() -> Cases:
    # Only the schema is needed: the app is not started, and the URL is never opened.
    raw = create_app(Settings(database_url="sqlite:///unused.db")).openapi()
    schema = schemathesis.openapi.from_dict(raw)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 16
    cases: Cases = []
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
        for operation in operations:
            definition = raw["paths"][operation.path][operation.method.lower()]
            if mode is GenerationMode.NEGATIVE and not can_be_invalid(definition):
                continue
            snapshot = operation.path.startswith("/api/v1/ingest/")
            count = EXAMPLES_PER_SNAPSHOT_OPERATION if snapshot else EXAMPLES_PER_OPERATION
            label = f"{operation.label} ({mode.value})"
            cases.extend((label, case) for case in generate(operation, mode, count))
    return cases


def seed(api: Api) -> None:
    """Some data, so read routes answer with items and not only empty lists."""
    api.ingest_listandwatch(
        listandwatch("node-a", [dev("gpu-0", numa=[0]), dev("gpu-1", "Unhealthy")], 1)
    )
    api.ingest_podresources(
        podresources("node-a", [pod("p", containers={"c": [held(GPU, "gpu-0")]})], 1)
    )


def send(api: Api, case: Case) -> Any:
    request = case.as_transport_kwargs(base_url="http://testserver")
    headers = {**request.get("headers", {}), **api.headers}
    kwargs: dict[str, Any] = {"params": request.get("params"), "headers": headers}
    if "json" in request:
        kwargs["json"] = request["json"]
    elif request.get("data") is not None:
        kwargs["content"] = request["data"]
    return api.client.request(request["method"], request["url"], **kwargs)


def test_fuzzing_finds_no_server_error_or_schema_violation(api: Api, fuzz_cases: Cases) -> None:
    seed(api)
    failures: list[str] = []
    statuses: set[int] = set()
    for label, case in fuzz_cases:
        response = send(api, case)
        statuses.add(response.status_code)
        try:
            case.validate_response(response, checks=CHECKS)
        except Exception as e:  # a FailureGroup naming each broken check
            failures.append(f"{label}: {e}")
    assert not failures, f"{len(failures)} failures; the first:\n" + "\n".join(failures[:3])
    # The fuzzing reached the handlers, not just the auth and validation layers.
    assert {200, 422} <= statuses, statuses
