"""Node agents that authenticate as a Kubernetes ServiceAccount.

An agent may send its projected ServiceAccount token (audience `devicedeck`, rotated by the
kubelet) instead of a Devicedeck token. The service asks the API server's TokenReview who it
belongs to, accepts only the configured agent ServiceAccounts, and takes the node the token is
bound to from the review (the `node-name` extra, or the bound pod's spec.nodeName): such an
agent writes that node and nothing else, just as the NodeRestriction admission plugin confines
a kubelet to its own Node.
"""

from __future__ import annotations

import base64
import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass

from devicedeck.kube.client import KubeApi
from devicedeck.kube.errors import ApiStatus, ApiUnreachable

AUDIENCE = "devicedeck"
EXTRA = "authentication.kubernetes.io/"
SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"
# A review stays trusted this long at most, and never past the token's own expiry: a deleted
# pod or ServiceAccount stops its agent within a minute.
MAX_CACHE_SECONDS = 60.0


@dataclass(frozen=True)
class ReviewedAgent:
    """A node agent's ServiceAccount (`system:serviceaccount:NS:NAME`) and its node."""

    username: str
    node: str


class ReviewRefused(Exception):
    """The token is not an agent's: `status` 401 (not authenticated) or 403 (not allowed)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class ReviewUnavailable(Exception):
    """TokenReview could not answer; the same request may succeed later."""


def parse_service_accounts(text: str) -> frozenset[str]:
    """`NAMESPACE:NAME[,NAMESPACE:NAME...]` as the usernames the API server gives them."""
    accounts = set()
    for item in text.split(","):
        namespace, _, name = item.strip().partition(":")
        if not namespace or not name or ":" in name:
            raise ValueError(f"{item.strip()!r} is not NAMESPACE:NAME")
        accounts.add(f"{SERVICE_ACCOUNT_PREFIX}{namespace}:{name}")
    return frozenset(accounts)


def token_expiry(token: str) -> float | None:
    """The `exp` claim of a JWT, read without checking its signature (TokenReview does that):
    only to keep a cached review from outliving the token."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
        expiry = claims.get("exp") if isinstance(claims, dict) else None
    except ValueError:
        return None
    return float(expiry) if isinstance(expiry, int | float) else None


class ServiceAccountReviewer:
    """Reviews agents' ServiceAccount tokens through TokenReview, caching successes briefly."""

    MAX_ENTRIES = 10_000

    def __init__(
        self,
        api: KubeApi,
        accounts: frozenset[str],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.api = api
        self.accounts = accounts
        self._clock = clock
        self._cache: dict[str, tuple[ReviewedAgent, float]] = {}

    def review(self, token: str) -> ReviewedAgent:
        """The agent the token belongs to; ReviewRefused or ReviewUnavailable otherwise."""
        key = hashlib.sha256(token.encode()).hexdigest()
        now = self._clock()
        cached = self._cache.get(key)
        if cached is not None and now < cached[1]:
            return cached[0]
        agent = self._ask(token)
        expiry = token_expiry(token)
        until = min(now + MAX_CACHE_SECONDS, expiry if expiry is not None else now)
        if until > now:
            if len(self._cache) >= self.MAX_ENTRIES:
                self._cache.clear()
            self._cache[key] = (agent, until)
        return agent

    def _ask(self, token: str) -> ReviewedAgent:
        try:
            status = self.api.review_token(token, [AUDIENCE])
        except (ApiStatus, ApiUnreachable) as e:
            raise ReviewUnavailable(f"TokenReview at {self.api.host} failed: {e}") from e
        if not status.get("authenticated"):
            reason = status.get("error") or "not authenticated"
            raise ReviewRefused(401, f"the token is unknown, revoked or expired: {reason}")
        # No audiences means the API server's own (Kubernetes says so), never this service's.
        if AUDIENCE not in (status.get("audiences") or []):
            raise ReviewRefused(401, f"the token is not for the audience {AUDIENCE!r}")
        user = status.get("user") or {}
        username = str(user.get("username") or "")
        if username not in self.accounts:
            allowed = ", ".join(sorted(self.accounts))
            raise ReviewRefused(
                403,
                f"{username or 'this identity'} is not a node agent's ServiceAccount "
                f"(DEVICEDECK_AGENT_SERVICE_ACCOUNTS: {allowed})",
            )
        node = self._node(username, user.get("extra") or {})
        return ReviewedAgent(username=username, node=node)

    def _node(self, username: str, extra: dict[str, list[str]]) -> str:
        """The node from the review, else from the pod the token is bound to."""
        nodes = extra.get(f"{EXTRA}node-name") or []
        if nodes:
            return nodes[0]
        pods = extra.get(f"{EXTRA}pod-name") or []
        if pods:
            namespace = username.removeprefix(SERVICE_ACCOUNT_PREFIX).partition(":")[0]
            try:
                pod = self.api.read_pod(namespace, pods[0])
            except (ApiStatus, ApiUnreachable) as e:
                raise ReviewUnavailable(f"reading pod {namespace}/{pods[0]} failed: {e}") from e
            node = ((pod or {}).get("spec") or {}).get("nodeName")
            if node:
                return str(node)
        raise ReviewRefused(
            403, "the token names no node: use a projected token bound to the agent's pod"
        )
