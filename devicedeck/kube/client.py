"""The API server through the official client: configuration, lists, watches, status patches.

Responses are read as plain JSON dicts (`_preload_content=False`): resource.k8s.io/v1 has no
typed models in every client release, and the fields Devicedeck reads (allocatedResourcesStatus,
DRA allocation results) must not be lost to a model that predates them.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.config.config_exception import ConfigException

from devicedeck.config import KubeMode, Settings
from devicedeck.kube.errors import ApiStatus, ApiUnreachable, KubeUnavailable

log = logging.getLogger(__name__)

DRA_GROUP = "resource.k8s.io"
# Newest first: 1.34 serves v1, 1.33 v1beta2 (and v1beta1), 1.32 v1beta1 only; the objects
# are read into one shape (devicedeck/kube/dra_objects.py).
DRA_VERSIONS = ("v1", "v1beta2", "v1beta1")
LIST_PAGE_SIZE = 500
CONNECT_TIMEOUT = 10.0
# A watch may be quiet for its whole timeout; the read timeout only has to catch dead peers.
WATCH_READ_SLACK = 30.0
PATCH_TIMEOUT = (CONNECT_TIMEOUT, 30.0)
# A lease write must end well within the leader's renew deadline (devicedeck/kube/lease.py).
LEASE_TIMEOUT = (3.0, 3.0)
JSON_PATCH = "application/json-patch+json"


@dataclass(frozen=True)
class Kind:
    """A collection the watcher lists and watches: `name` is its plural resource name."""

    name: str
    api_version: str


NODES = Kind("nodes", "v1")
PODS = Kind("pods", "v1")
RESOURCE_SLICES = Kind("resourceslices", DRA_GROUP)
RESOURCE_CLAIMS = Kind("resourceclaims", DRA_GROUP)


def load_configuration(settings: Settings) -> k8s.Configuration:
    """Client configuration for the mode in settings; KubeUnavailable when it cannot be built."""
    configuration = k8s.Configuration()
    try:
        if settings.kube is KubeMode.INCLUSTER:
            k8s_config.load_incluster_config(client_configuration=configuration)
        elif settings.kube is KubeMode.KUBECONFIG:
            k8s_config.load_kube_config(
                config_file=settings.kubeconfig,
                client_configuration=configuration,
                persist_config=False,
            )
        else:
            raise KubeUnavailable("DEVICEDECK_KUBE is off")
    except (ConfigException, OSError, ValueError, TypeError) as e:
        where = settings.kubeconfig or "the default kubeconfig"
        source = "in-cluster service account" if settings.kube is KubeMode.INCLUSTER else where
        raise KubeUnavailable(
            f"cannot load the Kubernetes client configuration from {source}: {e}"
        ) from e
    return configuration


def status_from_exception(e: k8s.ApiException) -> ApiStatus:
    """The Status object the API server sent with an error, or one made from the HTTP line."""
    code = int(e.status or 0)
    reason = str(e.reason or "")
    message = reason
    try:
        body = json.loads(e.body) if e.body else None
    except ValueError:
        body = None
    if isinstance(body, dict) and body.get("kind") == "Status":
        reason = str(body.get("reason") or reason)
        message = str(body.get("message") or message)
        code = int(body.get("code") or code)
    return ApiStatus(code, reason, message)


class KubeApi:
    """One ApiClient (one connection pool) shared by the watch threads and the admin routes."""

    def __init__(self, configuration: k8s.Configuration) -> None:
        self.host = str(configuration.host)
        self.api_client = k8s.ApiClient(configuration)
        self.core = k8s.CoreV1Api(self.api_client)
        self.custom = k8s.CustomObjectsApi(self.api_client)
        self.authentication = k8s.AuthenticationV1Api(self.api_client)
        self.coordination = k8s.CoordinationV1Api(self.api_client)
        # The DRA version this API server serves, found by the first list that succeeded.
        self.dra_version: str | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> KubeApi:
        return cls(load_configuration(settings))

    def close(self) -> None:
        self.api_client.close()

    def _lister(self, kind: Kind) -> Callable[..., Any]:
        if kind == NODES:
            return self.core.list_node
        if kind == PODS:
            return self.core.list_pod_for_all_namespaces

        def custom(**kwargs: Any) -> Any:
            return self._dra_list(kind, **kwargs)

        return custom

    def _dra_list(self, kind: Kind, **kwargs: Any) -> Any:
        """List or watch in the newest DRA version served; 404 means not served: try older."""
        versions = (self.dra_version,) if self.dra_version else DRA_VERSIONS
        for version in versions:
            try:
                response = self.custom.list_cluster_custom_object(
                    DRA_GROUP, version, kind.name, **kwargs
                )
            except k8s.ApiException as e:
                if e.status == 404 and version != versions[-1]:
                    continue
                if e.status == 404:
                    # Next time start over: the cluster may have been upgraded.
                    self.dra_version = None
                raise
            if version != self.dra_version:
                log.info(
                    "reading DRA objects",
                    extra={"event": "dra_version_chosen", "version": f"{DRA_GROUP}/{version}"},
                )
                self.dra_version = version
            return response
        raise AssertionError("unreachable: DRA_VERSIONS is not empty")

    def _call(self, kind: Kind, **kwargs: Any) -> urllib3.BaseHTTPResponse:
        try:
            response: urllib3.BaseHTTPResponse = self._lister(kind)(
                _preload_content=False, **kwargs
            )
        except k8s.ApiException as e:
            raise status_from_exception(e) from e
        except (urllib3.exceptions.HTTPError, OSError) as e:
            raise ApiUnreachable(f"{self.host}: {e}") from e
        return response

    def list_all(self, kind: Kind) -> tuple[list[dict[str, Any]], str]:
        """Every object of the kind, in pages, and the resourceVersion to watch from."""
        items: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"limit": LIST_PAGE_SIZE}
            if token:
                kwargs["_continue"] = token
            response = self._call(kind, _request_timeout=(CONNECT_TIMEOUT, 60.0), **kwargs)
            try:
                body = json.loads(response.data)
            except (urllib3.exceptions.HTTPError, OSError) as e:
                raise ApiUnreachable(f"{self.host}: {e}") from e
            except ValueError as e:
                raise ApiStatus(500, "InvalidResponse", f"list is not JSON: {e}") from e
            finally:
                response.release_conn()
            items.extend(body.get("items") or [])
            metadata = body.get("metadata") or {}
            token = metadata.get("continue")
            if not token:
                return items, str(metadata.get("resourceVersion") or "")

    def open_watch(
        self, kind: Kind, resource_version: str, timeout_seconds: int
    ) -> urllib3.BaseHTTPResponse:
        """A watch stream from resource_version; the server ends it after timeout_seconds."""
        return self._call(
            kind,
            watch=True,
            resource_version=resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=timeout_seconds,
            _request_timeout=(CONNECT_TIMEOUT, timeout_seconds + WATCH_READ_SLACK),
        )

    def patch_node_status(self, node: str, operations: list[dict[str, Any]]) -> dict[str, Any]:
        """Apply a JSON Patch (RFC 6902) to the node's status subresource; the updated node."""
        return self._json(
            lambda: self.core.patch_node_status(
                node,
                operations,
                _content_type=JSON_PATCH,
                _preload_content=False,
                _request_timeout=PATCH_TIMEOUT,
            )
        )

    def review_token(self, token: str, audiences: list[str]) -> dict[str, Any]:
        """The API server's TokenReview of a bearer token: its status (authenticated, user,
        error)."""
        body: Any = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token, "audiences": audiences},
        }
        review = self._json(
            lambda: self.authentication.create_token_review(
                body, _preload_content=False, _request_timeout=PATCH_TIMEOUT
            )
        )
        status: dict[str, Any] = review.get("status") or {}
        return status

    def read_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The pod, or None when there is none of that name."""
        try:
            return self._json(
                lambda: self.core.read_namespaced_pod(
                    name, namespace, _preload_content=False, _request_timeout=PATCH_TIMEOUT
                )
            )
        except ApiStatus as e:
            if e.code == 404:
                return None
            raise

    def read_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The coordination.k8s.io/v1 Lease, or None when there is none of that name."""
        try:
            return self._json(
                lambda: self.coordination.read_namespaced_lease(
                    name, namespace, _preload_content=False, _request_timeout=LEASE_TIMEOUT
                )
            )
        except ApiStatus as e:
            if e.code == 404:
                return None
            raise

    def create_lease(self, namespace: str, lease: dict[str, Any]) -> dict[str, Any]:
        """Create the Lease; 409 AlreadyExists when another wrote it first."""
        body: Any = lease  # sent as the JSON it is, not through the typed model
        return self._json(
            lambda: self.coordination.create_namespaced_lease(
                namespace, body, _preload_content=False, _request_timeout=LEASE_TIMEOUT
            )
        )

    def replace_lease(self, namespace: str, name: str, lease: dict[str, Any]) -> dict[str, Any]:
        """Replace the Lease; 409 Conflict unless lease's resourceVersion is still current."""
        body: Any = lease
        return self._json(
            lambda: self.coordination.replace_namespaced_lease(
                name, namespace, body, _preload_content=False, _request_timeout=LEASE_TIMEOUT
            )
        )

    def _json(self, call: Callable[[], Any]) -> dict[str, Any]:
        """One request's JSON answer; ApiStatus for an error Status, ApiUnreachable for none."""
        try:
            response: Any = call()
        except k8s.ApiException as e:
            raise status_from_exception(e) from e
        except (urllib3.exceptions.HTTPError, OSError) as e:
            raise ApiUnreachable(f"{self.host}: {e}") from e
        try:
            answer: dict[str, Any] = json.loads(response.data)
        finally:
            response.release_conn()
        return answer


def watch_events(response: urllib3.BaseHTTPResponse) -> Iterator[dict[str, Any]]:
    """Watch events, one JSON object a line. An ERROR event is raised as ApiStatus."""
    buffer = b""
    try:
        for chunk in response.stream(amt=None, decode_content=True):
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                if line.strip():
                    yield _event(line)
    except (urllib3.exceptions.HTTPError, OSError) as e:
        raise ApiUnreachable(f"watch stream broke: {e}") from e
    if buffer.strip():
        yield _event(buffer)


def _event(line: bytes) -> dict[str, Any]:
    try:
        event = json.loads(line)
    except ValueError as e:
        raise ApiStatus(500, "InvalidResponse", f"watch event is not JSON: {e}") from e
    if not isinstance(event, dict) or not isinstance(event.get("object"), dict):
        raise ApiStatus(500, "InvalidResponse", "watch event without an object")
    if event.get("type") == "ERROR":
        status = event["object"]
        raise ApiStatus(
            int(status.get("code") or 500),
            str(status.get("reason") or ""),
            str(status.get("message") or ""),
        )
    return event
