"""The simulated API server (devicedeck/sim/apiserver) with the levers the cluster tests pull.

It is the real sim-apiserver, on a localhost port, in memory; this subclass only adds what a
test does to a cluster that no client could: deny a collection (an RBAC 403), stop serving
one (a group the cluster lacks), refuse the next patch with a chosen Status, compact the
history, cut watches. Every request is recorded, so tests can assert what was sent.
"""

from __future__ import annotations

import threading
from typing import Any

from devicedeck.sim.apiserver import SimApiServer
from devicedeck.sim.apiserver.errors import ApiError
from devicedeck.sim.apiserver.handler import Request
from devicedeck.sim.apiserver.resources import BY_PLURAL
from devicedeck.sim.apiserver.store import object_key

RecordedRequest = Request
COLLECTION_PATHS = {
    plural: (f"/apis/{r.group}/{r.version}/{plural}" if r.group else f"/api/{r.version}/{plural}")
    for plural, r in BY_PLURAL.items()
}


class FakeApiServer(SimApiServer):
    def __init__(self, token: str | None = None) -> None:
        super().__init__(None, admin_token=token)
        self.requests: list[Request] = []
        self.denied: set[str] = set()
        self.not_served: set[str] = set()
        self.patch_refusal: ApiError | None = None
        # An older cluster: resource.k8s.io served in this version only.
        self.dra_version = "v1"
        self._lock = threading.Lock()

    def before(self, request: Request) -> None:
        with self._lock:
            self.requests.append(request)
            self._dra_as_served(request)
            collection = next(
                (c for c, path in COLLECTION_PATHS.items() if request.path == path), None
            )
            if collection in self.not_served:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            if collection in self.denied:
                raise ApiError(
                    403,
                    "Forbidden",
                    f'{collection} is forbidden: User "system:serviceaccount:devicedeck:'
                    f'devicedeck" cannot list resource "{collection}" in API group "" at the '
                    "cluster scope",
                )
            if request.method == "PATCH" and self.patch_refusal is not None:
                refusal, self.patch_refusal = self.patch_refusal, None
                raise refusal

    # What a test does to the cluster ----------------------------------------------------------

    def put(self, collection: str, obj: dict[str, Any], *, silent: bool = False) -> dict[str, Any]:
        return self.store.put(collection, obj, silent=silent)

    def delete(self, collection: str, name: str, namespace: str | None = None) -> None:
        self.store.delete(BY_PLURAL[collection], namespace, name)

    def get(self, collection: str, key: str) -> dict[str, Any]:
        found = self.store.find(collection, key)
        assert found is not None, f"no {collection} {key}"
        return found

    def bookmark(self, collection: str) -> int:
        return self.store.bookmark(collection)

    def expire_history(self) -> None:
        self.store.compact()

    def drop_watches(self) -> None:
        self.store.drop_watches()

    def deny(self, collection: str) -> None:
        with self._lock:
            self.denied.add(collection)
        self.store.drop_watches()

    def allow(self, collection: str) -> None:
        with self._lock:
            self.denied.discard(collection)

    def serve_dra_only(self, version: str) -> None:
        """Serve resource.k8s.io in `version` alone, as a 1.32 (v1beta1) or 1.33 cluster
        with DRA turned on would; objects are kept as the test wrote them."""
        with self._lock:
            self.dra_version = version

    def _dra_as_served(self, request: Request) -> None:
        prefix = "/apis/resource.k8s.io/"
        if self.dra_version == "v1" or not request.path.startswith(prefix):
            return
        version, _, rest = request.path[len(prefix) :].partition("/")
        if version != self.dra_version:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        request.path = f"{prefix}v1/{rest}"

    def stop_serving(self, collection: str) -> None:
        with self._lock:
            self.not_served.add(collection)

    def refuse_next_patch(self, code: int, reason: str, message: str) -> None:
        with self._lock:
            self.patch_refusal = ApiError(code, reason, message)

    def recorded(self, method: str | None = None, path: str | None = None) -> list[Request]:
        with self._lock:
            return [
                r
                for r in self.requests
                if (method is None or r.method == method) and (path is None or r.path == path)
            ]

    def lists(self, collection_path: str) -> int:
        return sum(1 for r in self.recorded("GET", collection_path) if not r.watching)


__all__ = ["FakeApiServer", "RecordedRequest", "object_key"]
