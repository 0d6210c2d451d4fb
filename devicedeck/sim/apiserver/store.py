"""The objects, their resourceVersions and the change history that watches read.

One counter gives every change a new resourceVersion, as etcd's revision does. The history
of changes is kept in memory (bounded); a watch from a version older than the history
answers 410 Expired, and so does one after a restart, when the history starts afresh. Every
change is written to the state file before it is answered (write to a temporary file, fsync,
rename), so a restart continues from the same objects and the same counter.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import secrets
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devicedeck.sim.apiserver import admission
from devicedeck.sim.apiserver.errors import (
    STALE,
    ApiError,
    already_exists,
    bad_request,
    conflict,
    invalid,
    not_found,
)
from devicedeck.sim.apiserver.lifecycles import Lifecycles, now_text
from devicedeck.sim.apiserver.patches import apply_patch
from devicedeck.sim.apiserver.resources import BY_PLURAL, NAMESPACES, RESOURCES, Resource
from devicedeck.sim.apiserver.selectors import Matcher
from devicedeck.sim.apiserver.validation import normalise_quantities, validate
from devicedeck.sim.apiserver.write_rules import check_type, merged_object
from devicedeck.sim.kubelet.pods import atomic_write_text

log = logging.getLogger(__name__)

STATE_FILE_NAME = "state.json"
STATE_VERSION = 1
HISTORY_LIMIT = 20000
FIRST_RESOURCE_VERSION = 1000


@dataclass(frozen=True)
class Change:
    resource_version: int
    plural: str
    type: str  # ADDED, MODIFIED, DELETED, BOOKMARK
    object: dict[str, Any]


def object_key(resource: Resource, namespace: str | None, name: str) -> str:
    return f"{namespace}/{name}" if resource.namespaced else name


class Store(Lifecycles):
    def __init__(self, data_dir: Path | None) -> None:
        self.cond = threading.Condition()
        self.data_dir = data_dir
        self.resource_version = FIRST_RESOURCE_VERSION
        self.objects: dict[str, dict[str, dict[str, Any]]] = {r.plural: {} for r in RESOURCES}
        self.history: deque[Change] = deque(maxlen=HISTORY_LIMIT)
        # Watches from a version older than this one answer 410 Expired.
        self.oldest_watchable = FIRST_RESOURCE_VERSION
        self.admin_token = secrets.token_urlsafe(32)
        self.signing_key = secrets.token_urlsafe(32)
        # Open watches end when this changes; `epoch_action` says how ("drop" or "expire").
        self.watch_epoch = 0
        self.epoch_action = "drop"
        self.closing = False
        # When each object of a resource with a time to live goes: (plural, key) -> monotonic.
        self.expiry: dict[tuple[str, str], float] = {}
        # Namespaces being deleted, and when their contents go.
        self.terminating: dict[str, float] = {}
        if data_dir is not None:
            self._load()
        with self.cond:
            self._ensure_namespaces(admission.SYSTEM_NAMESPACES)

    # --- persistence ----------------------------------------------------------------------

    @property
    def state_file(self) -> Path | None:
        return self.data_dir / STATE_FILE_NAME if self.data_dir is not None else None

    def _load(self) -> None:
        path = self.state_file
        assert path is not None
        try:
            state = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            self._save()
            return
        if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
            raise ValueError(f"{path}: not a sim-apiserver state file of version {STATE_VERSION}")
        self.resource_version = int(state["resourceVersion"])
        self.admin_token = str(state["adminToken"])
        self.signing_key = str(state["signingKey"])
        for plural, objects in state["objects"].items():
            if plural in self.objects:
                self.objects[plural] = dict(objects)
        for name, namespace in self.objects[NAMESPACES.plural].items():
            if "deletionTimestamp" in namespace["metadata"]:
                self.terminating[name] = time.monotonic()
        self.oldest_watchable = self.resource_version
        log.info("state restored", extra={"path": path, "resource_version": self.resource_version})

    def _save(self) -> None:
        path = self.state_file
        if path is None:
            return
        state = {
            "version": STATE_VERSION,
            "resourceVersion": self.resource_version,
            "adminToken": self.admin_token,
            "signingKey": self.signing_key,
            # Objects with a time to live (events) live in memory only.
            "objects": {p: o for p, o in self.objects.items() if not BY_PLURAL[p].ttl_seconds},
        }
        atomic_write_text(path, json.dumps(state, sort_keys=True) + "\n")

    # --- reading --------------------------------------------------------------------------

    def list(self, resource: Resource, matches: Matcher) -> tuple[list[dict[str, Any]], int]:
        with self.cond:
            self._expire(resource)
            items = [
                copy.deepcopy(obj)
                for _, obj in sorted(self.objects[resource.plural].items())
                if matches(obj)
            ]
            return items, self.resource_version

    def get(self, resource: Resource, namespace: str | None, name: str) -> dict[str, Any]:
        with self.cond:
            self._expire(resource)
            obj = self.objects[resource.plural].get(object_key(resource, namespace, name))
            if obj is None:
                raise not_found(resource.plural, name, resource.group)
            return copy.deepcopy(obj)

    def find(self, plural: str, key: str) -> dict[str, Any] | None:
        with self.cond:
            obj = self.objects[plural].get(key)
            return copy.deepcopy(obj) if obj is not None else None

    # --- writing --------------------------------------------------------------------------

    def _commit(self, resource: Resource, key: str, obj: dict[str, Any], event: str) -> None:
        """Give the change the next version, record it for watches and persist it."""
        self.resource_version += 1
        obj["metadata"]["resourceVersion"] = str(self.resource_version)
        if event == "DELETED":
            del self.objects[resource.plural][key]
            self.expiry.pop((resource.plural, key), None)
        else:
            self.objects[resource.plural][key] = obj
            if resource.ttl_seconds:
                self.expiry[(resource.plural, key)] = time.monotonic() + resource.ttl_seconds
        self.history.append(
            Change(self.resource_version, resource.plural, event, copy.deepcopy(obj))
        )
        if self.history.maxlen and len(self.history) == self.history.maxlen:
            self.oldest_watchable = self.history[0].resource_version - 1
        self._save()
        self.cond.notify_all()

    def create(
        self,
        resource: Resource,
        namespace: str | None,
        obj: Any,
        *,
        keep_status: bool = False,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """POST. `dry_run`: everything but storing it; the answer is what would be stored."""
        if not isinstance(obj, dict):
            raise bad_request("the body of the request must be a JSON object")
        obj = copy.deepcopy(obj)
        check_type(resource, obj)
        metadata = obj.setdefault("metadata", {})
        if not isinstance(metadata, dict):
            raise bad_request("metadata must be an object")
        if resource.namespaced:
            given = metadata.get("namespace")
            if given not in (None, "", namespace):
                raise bad_request(
                    "the namespace of the provided object does not match the namespace sent "
                    "on the request"
                )
            metadata["namespace"] = namespace
        if not metadata.get("name") and metadata.get("generateName"):
            metadata["name"] = f"{metadata['generateName']}{secrets.token_hex(3)[:5]}"
        normalise_quantities(obj)
        validate(resource, obj)
        obj["apiVersion"], obj["kind"] = resource.api_version, resource.kind
        metadata["uid"] = str(uuid.uuid4())
        metadata["creationTimestamp"] = now_text()
        for field in ("resourceVersion", "deletionTimestamp", "generation"):
            metadata.pop(field, None)
        admission.on_create(resource, obj, keep_status=keep_status)
        with self.cond:
            self._expire(resource)
            key = object_key(resource, namespace, metadata["name"])
            if key in self.objects[resource.plural]:
                raise already_exists(resource.plural, metadata["name"], resource.group)
            if namespace is not None:
                self._check_namespace_open(namespace, resource, metadata["name"])
            if dry_run:
                return copy.deepcopy(obj)
            if namespace is not None:
                # No namespace admission here: writing into a namespace makes it exist.
                self._ensure_namespaces([namespace])
            self._commit(resource, key, obj, "ADDED")
            return copy.deepcopy(obj)

    def update(
        self,
        resource: Resource,
        namespace: str | None,
        name: str,
        change: Any,
        *,
        subresource: str | None = None,
        content_type: str | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """PUT (content_type None: `change` is the whole object) or PATCH of the object or of
        its status subresource; `dry_run` answers the result without storing it."""
        with self.cond:
            key = object_key(resource, namespace, name)
            current = self.objects[resource.plural].get(key)
            if current is None:
                raise not_found(resource.plural, name, resource.group)
            if content_type is None:
                if not isinstance(change, dict):
                    raise bad_request("the body of the request must be a JSON object")
                proposed = copy.deepcopy(change)
                check_type(resource, proposed)
            else:
                proposed = apply_patch(content_type, current, change)
                if not isinstance(proposed, dict):
                    raise bad_request("the patched object is not a JSON object")
            metadata = proposed.get("metadata")
            if not isinstance(metadata, dict):
                raise bad_request("metadata must be an object")
            wanted = metadata.get("resourceVersion")
            if wanted in (None, "") and content_type is None and not resource.unconditional_update:
                raise invalid(
                    resource.qualified,
                    name,
                    [
                        (
                            "metadata.resourceVersion",
                            "Invalid value: 0: must be specified for an update",
                        )
                    ],
                )
            if wanted not in (None, "") and str(wanted) != current["metadata"]["resourceVersion"]:
                raise conflict(resource.plural, name, STALE, resource.group)
            if metadata.get("name", name) != name or (
                resource.namespaced and metadata.get("namespace", namespace) != namespace
            ):
                raise bad_request("the name of the object does not match the name on the URL")
            merged = merged_object(resource, current, proposed, subresource)
            normalise_quantities(merged)
            validate(resource, merged, name)
            admission.on_write(resource, merged)
            if merged == current or dry_run:
                # A write that changes nothing is not a change: no new version, no event.
                return copy.deepcopy(merged)
            self._commit(resource, key, merged, "MODIFIED")
            return copy.deepcopy(merged)

    def replace(
        self,
        resource: Resource,
        namespace: str | None,
        name: str,
        body: Any,
        *,
        subresource: str | None = None,
        dry_run: bool = False,
    ) -> tuple[bool, dict[str, Any]]:
        """PUT: (whether it created the object, the object). A resource that allows it is
        created by a PUT when missing, as the API server does for leases."""
        with self.cond:
            missing = object_key(resource, namespace, name) not in self.objects[resource.plural]
            if missing and resource.create_on_update and subresource is None:
                if not isinstance(body, dict):
                    raise bad_request("the body of the request must be a JSON object")
                metadata = body.get("metadata")
                if not isinstance(metadata, dict):
                    raise bad_request("metadata must be an object")
                if metadata.get("name", name) != name:
                    raise bad_request("the name of the object does not match the name on the URL")
                return True, self.create(
                    resource,
                    namespace,
                    {**body, "metadata": {**metadata, "name": name}},
                    dry_run=dry_run,
                )
            return False, self.update(
                resource, namespace, name, body, subresource=subresource, dry_run=dry_run
            )

    def delete(
        self,
        resource: Resource,
        namespace: str | None,
        name: str,
        preconditions: dict[str, Any] | None = None,
        *,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        with self.cond:
            self._expire(resource)
            key = object_key(resource, namespace, name)
            current = self.objects[resource.plural].get(key)
            if current is None:
                raise not_found(resource.plural, name, resource.group)
            if resource is NAMESPACES and name in admission.UNDELETABLE_NAMESPACES:
                raise ApiError(
                    403,
                    "Forbidden",
                    f'namespaces "{name}" is forbidden: this namespace may not be deleted',
                    {"name": name, "kind": "namespaces"},
                )
            for field in ("uid", "resourceVersion"):
                wanted = (preconditions or {}).get(field)
                if wanted and str(wanted) != current["metadata"].get(field):
                    raise conflict(
                        resource.plural,
                        name,
                        f"Precondition failed: {field.upper() if field == 'uid' else field} "
                        f"in precondition: {wanted}, {field} in object meta: "
                        f"{current['metadata'].get(field)}",
                        resource.group,
                    )
            obj = copy.deepcopy(current)
            if dry_run:
                return obj
            if resource is NAMESPACES:
                return self._terminate_namespace(obj)
            self._commit(resource, key, obj, "DELETED")
            return copy.deepcopy(obj)

    # --- direct changes (in-process owners and tests) --------------------------------------

    def put(self, plural: str, obj: dict[str, Any], *, silent: bool = False) -> dict[str, Any]:
        """Create or replace an object as it is, status included. `silent`: no watch event,
        as if the change had been compacted away."""
        resource = BY_PLURAL[plural]
        obj = copy.deepcopy(obj)
        obj.setdefault("apiVersion", resource.api_version)
        obj.setdefault("kind", resource.kind)
        metadata = obj.setdefault("metadata", {})
        namespace = metadata.get("namespace") if resource.namespaced else None
        key = object_key(resource, namespace, metadata["name"])
        admission.on_write(resource, obj)
        with self.cond:
            if namespace is not None:
                self._ensure_namespaces([namespace])
            existing = self.objects[plural].get(key)
            metadata.setdefault(
                "uid", (existing or {}).get("metadata", {}).get("uid") or str(uuid.uuid4())
            )
            metadata.setdefault("creationTimestamp", now_text())
            normalise_quantities(obj)
            if silent:
                self.resource_version += 1
                metadata["resourceVersion"] = str(self.resource_version)
                self.objects[plural][key] = obj
                self._save()
            else:
                self._commit(resource, key, obj, "MODIFIED" if existing else "ADDED")
            return copy.deepcopy(obj)

    def bookmark(self, plural: str) -> int:
        """Tell open watches of the collection that it is current up to a new version."""
        resource = BY_PLURAL[plural]
        with self.cond:
            self.resource_version += 1
            marker = {
                "kind": resource.kind,
                "apiVersion": resource.api_version,
                "metadata": {"resourceVersion": str(self.resource_version)},
            }
            self.history.append(Change(self.resource_version, plural, "BOOKMARK", marker))
            self._save()
            self.cond.notify_all()
            return self.resource_version

    def compact(self) -> None:
        """Forget the history up to now, as etcd compaction does: watches answer 410."""
        with self.cond:
            self.oldest_watchable = self.resource_version + 1
            self.history.clear()
            self._end_watches("expire")

    def drop_watches(self) -> None:
        """Cut every open watch without a goodbye, as a dying load balancer would."""
        with self.cond:
            self._end_watches("drop")

    def _end_watches(self, action: str) -> None:
        self.watch_epoch += 1
        self.epoch_action = action
        self.cond.notify_all()

    def close(self) -> None:
        with self.cond:
            self.closing = True
            self.cond.notify_all()
        with contextlib.suppress(OSError):
            self._save()
