"""Examples for the OpenAPI schema: each response model carries one, so a reader of /docs sees
a real answer, and tests/core/test_openapi.py checks each against its own schema."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

AT = "2026-12-02T12:00:00+00:00"
EARLIER = "2026-12-01T08:30:00+00:00"


def example(value: dict[str, Any]) -> ConfigDict:
    return ConfigDict(json_schema_extra={"examples": [value]})


def example_of(model: type[BaseModel]) -> dict[str, Any]:
    """The example `model` was given with example(), to build a larger one from."""
    extra = model.model_config.get("json_schema_extra")
    examples = extra.get("examples") if isinstance(extra, dict) else None
    if not isinstance(examples, list) or not isinstance(examples[0], dict):
        raise TypeError(f"{model.__name__} has no example")
    return dict(examples[0])
