"""The demo's agents authenticate as a cluster's would: with ServiceAccount tokens.

In a cluster each agent Pod of the DaemonSet gets a projected token (audience `devicedeck`)
that the kubelet writes into the Pod and renews before it expires; the service checks it
through TokenReview and lets it write only the node the Pod runs on. The demo plays both the
DaemonSet and the kubelet's part against the simulated API server: it creates one agent Pod per
node, asks the API server for a token bound to that Pod (TokenRequest), writes it where the
agent reads its token, and asks again when 80 % of the token's life has passed, as the kubelet
does.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from devicedeck.demo.private_files import write_private
from devicedeck.sim.kubeclient import KubeClient, KubeClientError

log = logging.getLogger(__name__)

AGENT_NAMESPACE = "devicedeck-agent"
AGENT_SERVICE_ACCOUNT = "devicedeck-agent"
AUDIENCE = "devicedeck"
TOKEN_SECONDS = 3600
RENEW_AT = 0.8  # of a token's life, as the kubelet renews projected tokens
RETRY_SECONDS = 2.0


def agent_pod_name(node: str) -> str:
    return f"devicedeck-agent-{node}"


def agent_pod(node: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": agent_pod_name(node),
            "namespace": AGENT_NAMESPACE,
            "labels": {"app.kubernetes.io/name": "devicedeck-agent"},
        },
        "spec": {
            "nodeName": node,
            "serviceAccountName": AGENT_SERVICE_ACCOUNT,
            "containers": [{"name": "agent", "image": "devicedeck"}],
        },
    }


def ensure_agent_pod(client: KubeClient, node: str) -> dict[str, Any]:
    """The node's agent Pod, created when the API server has none."""
    path = f"/api/v1/namespaces/{AGENT_NAMESPACE}/pods/{quote(agent_pod_name(node))}"
    try:
        found: dict[str, Any] = client.request("GET", path)
        return found
    except KubeClientError as e:
        if e.code != 404:
            raise
    try:
        return client.create_pod(agent_pod(node))
    except KubeClientError as e:
        if e.code != 409:  # made by someone else in between: read theirs
            raise
        again: dict[str, Any] = client.request("GET", path)
        return again


def request_agent_token(client: KubeClient, pod: dict[str, Any]) -> str:
    """A token for the agent's ServiceAccount, bound to its Pod, for the service's audience."""
    metadata = pod["metadata"]
    body = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {
            "audiences": [AUDIENCE],
            "expirationSeconds": TOKEN_SECONDS,
            "boundObjectRef": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": metadata["name"],
                "uid": metadata["uid"],
            },
        },
    }
    answer = client.request(
        "POST",
        f"/api/v1/namespaces/{AGENT_NAMESPACE}/serviceaccounts/{AGENT_SERVICE_ACCOUNT}/token",
        body,
    )
    token: str = answer["status"]["token"]
    return token


@dataclass
class _Renewal:
    node: str
    path: Path
    due: float = 0.0
    issued: bool = False


class AgentCredentials:
    """Keeps every agent's token file holding a current ServiceAccount token, in a thread."""

    def __init__(
        self,
        kubeconfig: Path,
        token_files: Iterable[tuple[str, Path]],
        stop: threading.Event,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kubeconfig = kubeconfig
        self.renewals = [_Renewal(node, path) for node, path in token_files]
        self.stop = stop
        self.clock = clock
        self.thread = threading.Thread(target=self._run, name="agent-credentials", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def join(self, timeout: float | None = None) -> None:
        self.thread.join(timeout)

    def all_issued(self) -> bool:
        """Whether every agent has been given a token by this run (older files don't count)."""
        return all(r.issued for r in self.renewals)

    def _run(self) -> None:
        client: KubeClient | None = None
        while not self.stop.is_set():
            if client is None:
                try:
                    client = KubeClient.from_kubeconfig(self.kubeconfig)
                except ValueError as e:
                    log.warning(
                        "agent credentials waiting",
                        extra={"event": "agent_credentials_waiting", "reason": str(e)},
                    )
                    self.stop.wait(RETRY_SECONDS)
                    continue
            self.renew_due(client)
            now = self.clock()
            wait = min((r.due for r in self.renewals), default=now + TOKEN_SECONDS) - now
            self.stop.wait(max(0.1, min(wait, 60.0)))

    def renew_due(self, client: KubeClient) -> None:
        """Issue a token for every agent whose token is due; retry soon where that failed."""
        for renewal in self.renewals:
            if self.stop.is_set() or self.clock() < renewal.due:
                continue
            try:
                pod = ensure_agent_pod(client, renewal.node)
                write_private(renewal.path, request_agent_token(client, pod))
            except (KubeClientError, KeyError, OSError) as e:
                # The API server starts with the demo; until it answers, try again shortly.
                log.info(
                    "agent token pending",
                    extra={"event": "agent_token_pending", "node": renewal.node, "reason": str(e)},
                )
                renewal.due = self.clock() + RETRY_SECONDS
                continue
            log.info(
                "agent token issued", extra={"event": "agent_token_issued", "node": renewal.node}
            )
            renewal.issued = True
            renewal.due = self.clock() + TOKEN_SECONDS * RENEW_AT
