"""The store's part of two controllers' work: namespaces (made by being written into,
Terminating when deleted, emptied and removed a moment later) and objects with a time to
live (events), which go when it runs out."""

from __future__ import annotations

import copy
import threading
import time
import uuid
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from devicedeck.sim.apiserver import admission
from devicedeck.sim.apiserver.errors import ApiError
from devicedeck.sim.apiserver.resources import NAMESPACES, RESOURCES, Resource

# How long a deleted namespace stays Terminating before its contents and it are gone.
NAMESPACE_TERMINATION_SECONDS = 2.0


def now_text() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Lifecycles:
    """Mixed into the Store, whose lock, objects and commit it uses."""

    cond: threading.Condition
    objects: dict[str, dict[str, dict[str, Any]]]
    # Namespaces being deleted, and when their contents go.
    terminating: dict[str, float]
    # When each object of a resource with a time to live goes: (plural, key) -> monotonic.
    expiry: dict[tuple[str, str], float]

    def _commit(self, resource: Resource, key: str, obj: dict[str, Any], event: str) -> None:
        raise NotImplementedError

    def _ensure_namespaces(self, names: Iterable[str]) -> None:
        for name in names:
            if name not in self.objects[NAMESPACES.plural]:
                obj = admission.namespace_object(name)
                obj["metadata"] |= {"uid": str(uuid.uuid4()), "creationTimestamp": now_text()}
                admission.on_create(NAMESPACES, obj)
                self._commit(NAMESPACES, name, obj, "ADDED")

    def _terminate_namespace(self, namespace: dict[str, Any]) -> dict[str, Any]:
        """A deleted namespace is Terminating first; the namespace controller's turn
        (finish_namespace_deletions) deletes what is in it, then the namespace."""
        name = namespace["metadata"]["name"]
        if "deletionTimestamp" not in namespace["metadata"]:
            namespace["metadata"]["deletionTimestamp"] = now_text()
            namespace["status"] = {"phase": "Terminating"}
            self._commit(NAMESPACES, name, namespace, "MODIFIED")
        self.terminating.setdefault(name, time.monotonic() + NAMESPACE_TERMINATION_SECONDS)
        return copy.deepcopy(namespace)

    def finish_namespace_deletions(self) -> None:
        with self.cond:
            now = time.monotonic()
            for name, due in list(self.terminating.items()):
                if due > now:
                    continue
                del self.terminating[name]
                for resource in RESOURCES:
                    if not resource.namespaced:
                        continue
                    for key, obj in list(self.objects[resource.plural].items()):
                        if obj["metadata"].get("namespace") == name:
                            self._commit(resource, key, copy.deepcopy(obj), "DELETED")
                namespace = self.objects[NAMESPACES.plural].get(name)
                if namespace is not None:
                    self._commit(NAMESPACES, name, copy.deepcopy(namespace), "DELETED")

    def _check_namespace_open(self, namespace: str, resource: Resource, name: str) -> None:
        existing = self.objects[NAMESPACES.plural].get(namespace)
        if existing is not None and "deletionTimestamp" in existing["metadata"]:
            raise ApiError(
                403,
                "Forbidden",
                f'{resource.qualified} "{name}" is forbidden: unable to create new content in '
                f"namespace {namespace} because it is being terminated",
                {"name": name, "kind": resource.plural},
            )

    def _expire(self, resource: Resource) -> None:
        if not resource.ttl_seconds:
            return
        now = time.monotonic()
        for (plural, key), deadline in list(self.expiry.items()):
            if plural == resource.plural and deadline <= now:
                obj = copy.deepcopy(self.objects[plural][key])
                self._commit(resource, key, obj, "DELETED")
