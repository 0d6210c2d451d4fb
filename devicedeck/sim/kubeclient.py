"""A small Kubernetes API client for the simulators, from a kubeconfig.

The simulated kubelet talks to an API server the way the kubelet does (register its Node,
patch its status, write Pods) but must not depend on the service's cluster code, so it has
this client of its own: JSON over HTTP(S) with the kubeconfig's bearer token.
"""

from __future__ import annotations

import base64
import json
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import yaml

REQUEST_TIMEOUT = 10.0
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
MERGE_PATCH = "application/merge-patch+json"


class KubeClientError(Exception):
    """The API server refused (code > 0: the Status it sent) or could not be reached (0)."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(f"{code} {reason}: {message}" if code else message)
        self.code = code
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class KubeClient:
    server: str
    token: str | None = None
    context: ssl.SSLContext | None = None

    @classmethod
    def from_kubeconfig(cls, path: Path | str) -> KubeClient:
        """The current context's cluster and user; ValueError when the file cannot serve."""
        try:
            config = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
            contexts = {c["name"]: c["context"] for c in config.get("contexts") or []}
            context = contexts[config["current-context"]]
            cluster = {c["name"]: c["cluster"] for c in config["clusters"]}[context["cluster"]]
            users = {u["name"]: u.get("user") or {} for u in config.get("users") or []}
            user = users.get(context.get("user"), {})
        except (OSError, yaml.YAMLError, KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"kubeconfig {path}: {e}") from e
        server = str(cluster["server"]).rstrip("/")
        ssl_context = None
        if server.startswith("https://"):
            ssl_context = ssl.create_default_context()
            if cluster.get("insecure-skip-tls-verify"):
                ssl_context.check_hostname = False
                ssl_context.verify_mode = ssl.CERT_NONE
            elif cluster.get("certificate-authority-data"):
                data = base64.b64decode(cluster["certificate-authority-data"]).decode()
                ssl_context.load_verify_locations(cadata=data)
            elif cluster.get("certificate-authority"):
                ssl_context.load_verify_locations(cafile=cluster["certificate-authority"])
        token = user.get("token")
        if not token and user.get("tokenFile"):
            token = Path(user["tokenFile"]).read_text(encoding="utf-8").strip()
        return cls(server, token or None, ssl_context)

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        content_type: str = "application/json",
    ) -> Any:
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = content_type
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        request = urllib.request.Request(
            self.server + path, data=data, method=method, headers=headers
        )
        try:
            with urllib.request.urlopen(
                request, timeout=REQUEST_TIMEOUT, context=self.context
            ) as response:
                return json.load(response)
        except urllib.error.HTTPError as e:
            with e:
                try:
                    status = json.load(e)
                except ValueError:
                    status = {}
            raise KubeClientError(
                e.code, str(status.get("reason") or e.reason), str(status.get("message") or "")
            ) from e
        except (urllib.error.URLError, OSError, ValueError) as e:
            raise KubeClientError(0, "Unreachable", f"{self.server}: {e}") from e

    # --- the calls the simulated kubelet makes ---------------------------------------------

    def get_node(self, name: str) -> dict[str, Any]:
        node: dict[str, Any] = self.request("GET", f"/api/v1/nodes/{quote(name)}")
        return node

    def create_node(self, node: dict[str, Any]) -> dict[str, Any]:
        created: dict[str, Any] = self.request("POST", "/api/v1/nodes", node)
        return created

    def patch_node_status(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        patched: dict[str, Any] = self.request(
            "PATCH", f"/api/v1/nodes/{quote(name)}/status", patch, STRATEGIC_MERGE_PATCH
        )
        return patched

    def pods_on_node(self, node: str) -> list[dict[str, Any]]:
        listed = self.request("GET", f"/api/v1/pods?fieldSelector=spec.nodeName%3D{quote(node)}")
        items: list[dict[str, Any]] = listed.get("items") or []
        return items

    def create_pod(self, pod: dict[str, Any]) -> dict[str, Any]:
        namespace = quote(pod["metadata"]["namespace"])
        created: dict[str, Any] = self.request("POST", f"/api/v1/namespaces/{namespace}/pods", pod)
        return created

    def patch_pod_status(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        self.request(
            "PATCH",
            f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(name)}/status",
            patch,
            STRATEGIC_MERGE_PATCH,
        )

    def delete_pod(self, namespace: str, name: str, uid: str | None = None) -> None:
        """Delete the pod (only that incarnation of it when uid is given); gone is fine."""
        body = {"preconditions": {"uid": uid}} if uid else None
        try:
            self.request(
                "DELETE", f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(name)}", body
            )
        except KubeClientError as e:
            if e.code not in (404, 409):
                raise

    # --- the node's lease and the events the kubelet reports -------------------------------

    def get_lease(self, namespace: str, name: str) -> dict[str, Any]:
        lease: dict[str, Any] = self.request(
            "GET",
            f"/apis/coordination.k8s.io/v1/namespaces/{quote(namespace)}/leases/{quote(name)}",
        )
        return lease

    def create_lease(self, lease: dict[str, Any]) -> dict[str, Any]:
        namespace = quote(lease["metadata"]["namespace"])
        created: dict[str, Any] = self.request(
            "POST", f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases", lease
        )
        return created

    def replace_lease(self, lease: dict[str, Any]) -> dict[str, Any]:
        """PUT with the resourceVersion the lease carries: 409 when someone wrote it since."""
        metadata = lease["metadata"]
        path = (
            f"/apis/coordination.k8s.io/v1/namespaces/{quote(metadata['namespace'])}"
            f"/leases/{quote(metadata['name'])}"
        )
        replaced: dict[str, Any] = self.request("PUT", path, lease)
        return replaced

    def create_event(self, event: dict[str, Any]) -> None:
        namespace = quote(event["metadata"]["namespace"])
        self.request("POST", f"/api/v1/namespaces/{namespace}/events", event)
