"""The API's closed vocabularies, as enums in its OpenAPI schema.

Response fields are typed with them. Query parameters only publish them: the domain still
checks the value (health and state in any letter case, sort with its '-'), so a wrong value
keeps the 422 that names the field and lists the choices, the same on the API and the pages.
tests/core/test_openapi.py holds each one to the domain's own tuple.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import WithJsonSchema

from devicedeck.credentials.tokens import SCOPES
from devicedeck.inventory.events import EVENT_KINDS
from devicedeck.inventory.fields import HEALTH_VALUES
from devicedeck.inventory.read.pods import POD_STATES
from devicedeck.inventory.read.queries import DEVICE_SORTS, NODE_SORTS, STATE_VALUES
from devicedeck.inventory.read.reliability import DEVICE_SORTS as RELIABILITY_DEVICE_SORTS
from devicedeck.inventory.read.reliability import GROUP_SORTS as RELIABILITY_GROUP_SORTS
from devicedeck.inventory.read.reliability import WINDOWS

Health = Literal["Healthy", "Unhealthy", "Unknown"]
# A DRA device's reported health: Unknown only when a driver's health stream says so.
ReportedHealth = Literal["Healthy", "Unhealthy", "Unknown"]
DeviceState = Literal["present", "removed"]
DevicePresence = Literal["present", "removed", "unhealthy_or_removed"]
Scope = Literal["read", "ingest", "admin"]
KubeModeName = Literal["off", "incluster", "kubeconfig"]
ExtendedSource = Literal["device_plugin", "manual"]
DraHealthSource = Literal["pod_status", "claim_status", "kubelet_dra_health"]


def _sorts(keys: tuple[str, ...]) -> list[str]:
    return [prefix + key for key in keys for prefix in ("", "-")]


def published_enum(values: tuple[str, ...] | list[str]) -> WithJsonSchema:
    return WithJsonSchema({"type": "string", "enum": list(values)})


HealthChoice = Annotated[str, published_enum(HEALTH_VALUES)]
StateChoice = Annotated[str, published_enum(STATE_VALUES)]
PodStateChoice = Annotated[str, published_enum(POD_STATES)]
EventKindChoice = Annotated[str, published_enum(EVENT_KINDS)]
DeviceSort = Annotated[str, published_enum(_sorts(tuple(DEVICE_SORTS)))]
NodeSort = Annotated[str, published_enum(_sorts(tuple(NODE_SORTS)))]
ScopeChoice = Annotated[str, published_enum(SCOPES)]
WindowChoice = Annotated[str, published_enum(tuple(WINDOWS))]
ReliabilityDeviceSort = Annotated[str, published_enum(_sorts(RELIABILITY_DEVICE_SORTS))]
ReliabilityGroupSort = Annotated[str, published_enum(_sorts(RELIABILITY_GROUP_SORTS))]
