"""ServiceAccount tokens: TokenRequest issues them, TokenReview checks them.

Tokens are signed JWTs (HS256 with a key kept in the data directory) carrying the claims the
kube-apiserver puts in a bound token: the service account, the pod it is bound to and that
pod's node. A review answers who the token belongs to, with the extras
`authentication.kubernetes.io/pod-name`, `pod-uid`, `node-name`, `node-uid` and
`credential-id`; a token this server did not issue, an expired one, one whose pod is gone or
was replaced, or one for other audiences answers `authenticated: false` with the reason.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
import uuid
from datetime import UTC, datetime
from typing import Any

from devicedeck.sim.apiserver.errors import ApiError, bad_request, conflict, invalid, not_found
from devicedeck.sim.apiserver.resources import NODES, PODS, SERVICE_ACCOUNTS
from devicedeck.sim.apiserver.store import Store, object_key

ISSUER = "https://kubernetes.default.svc.cluster.local"
API_AUDIENCES = [ISSUER]
DEFAULT_EXPIRATION_SECONDS = 3600
MIN_EXPIRATION_SECONDS = 600
MAX_EXPIRATION_SECONDS = 2**32
EXTRA = "authentication.kubernetes.io/"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _timestamp(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def service_account_uid(store: Store, namespace: str, name: str) -> str:
    """The account's uid. Tokens may be asked for any account, written to the server or
    not: one never written has a stable uid made from its name."""
    stored = store.find(SERVICE_ACCOUNTS.plural, object_key(SERVICE_ACCOUNTS, namespace, name))
    if stored is not None:
        return str(stored["metadata"]["uid"])
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"serviceaccount:{namespace}/{name}"))


def user_info(claims: dict[str, Any]) -> dict[str, Any]:
    """The user a valid token authenticates, with the extras naming its pod and node."""
    k8s = claims["kubernetes.io"]
    namespace, account = k8s["namespace"], k8s["serviceaccount"]
    extra = {f"{EXTRA}credential-id": [f"JTI={claims['jti']}"]}
    for bound in ("pod", "node"):
        if bound in k8s:
            extra[f"{EXTRA}{bound}-name"] = [k8s[bound]["name"]]
            if k8s[bound].get("uid"):
                extra[f"{EXTRA}{bound}-uid"] = [k8s[bound]["uid"]]
    return {
        "username": f"system:serviceaccount:{namespace}:{account['name']}",
        "uid": account["uid"],
        "groups": [
            "system:serviceaccounts",
            f"system:serviceaccounts:{namespace}",
            "system:authenticated",
        ],
        "extra": extra,
    }


class TokenIssuer:
    def __init__(self, store: Store) -> None:
        self.store = store

    def _sign(self, signing_input: bytes) -> str:
        key = self.store.signing_key.encode()
        return _b64(hmac.new(key, signing_input, hashlib.sha256).digest())

    def request(self, namespace: str, account: str, body: Any) -> dict[str, Any]:
        """POST .../serviceaccounts/NAME/token: the TokenRequest answered with its token."""
        if not isinstance(body, dict):
            raise bad_request("the body of the request must be a TokenRequest object")
        spec = body.get("spec") or {}
        if not isinstance(spec, dict):
            raise bad_request("spec must be an object")
        audiences = spec.get("audiences") or API_AUDIENCES
        if not isinstance(audiences, list) or not all(isinstance(a, str) for a in audiences):
            raise invalid("TokenRequest", account, [("spec.audiences", "must be strings")])
        expiration = spec.get("expirationSeconds", DEFAULT_EXPIRATION_SECONDS)
        if not isinstance(expiration, int) or isinstance(expiration, bool):
            raise bad_request("spec.expirationSeconds must be an integer")
        if expiration < MIN_EXPIRATION_SECONDS:
            raise invalid(
                "TokenRequest",
                account,
                [
                    (
                        "spec.expirationSeconds",
                        f"Invalid value: {expiration}: may not specify a duration less than "
                        "10 minutes",
                    )
                ],
            )
        if expiration > MAX_EXPIRATION_SECONDS:
            raise invalid(
                "TokenRequest",
                account,
                [("spec.expirationSeconds", f"Invalid value: {expiration}: too long")],
            )
        claims_k8s: dict[str, Any] = {
            "namespace": namespace,
            "serviceaccount": {
                "name": account,
                "uid": service_account_uid(self.store, namespace, account),
            },
        }
        bound = spec.get("boundObjectRef")
        if bound:
            claims_k8s.update(self._bound(namespace, bound))
        issued = int(time.time())
        expires = issued + expiration
        claims = {
            "aud": audiences,
            "exp": expires,
            "iat": issued,
            "nbf": issued,
            "iss": ISSUER,
            "jti": str(uuid.uuid4()),
            "sub": f"system:serviceaccount:{namespace}:{account}",
            "kubernetes.io": claims_k8s,
        }
        header = _b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
        payload = _b64(json.dumps(claims, separators=(",", ":")).encode())
        signing_input = f"{header}.{payload}"
        token = f"{signing_input}.{self._sign(signing_input.encode())}"
        return {
            "kind": "TokenRequest",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {
                "name": account,
                "namespace": namespace,
                "creationTimestamp": _timestamp(issued),
            },
            "spec": {
                "audiences": audiences,
                "expirationSeconds": expiration,
                "boundObjectRef": bound or None,
            },
            "status": {"token": token, "expirationTimestamp": _timestamp(expires)},
        }

    def _bound(self, namespace: str, bound: Any) -> dict[str, Any]:
        if not isinstance(bound, dict) or not bound.get("name"):
            raise bad_request("spec.boundObjectRef needs a kind and a name")
        kind, name = bound.get("kind"), str(bound["name"])
        if kind == "Pod" and bound.get("apiVersion", "v1") == "v1":
            pod = self.store.find("pods", object_key(PODS, namespace, name))
            if pod is None:
                raise not_found("pods", name)
            uid = pod["metadata"]["uid"]
            self._check_uid(bound, uid, "Pod", name)
            claims: dict[str, Any] = {"pod": {"name": name, "uid": uid}}
            node_name = (pod.get("spec") or {}).get("nodeName")
            if node_name:
                node = self.store.find("nodes", node_name)
                claims["node"] = {"name": node_name}
                if node is not None:
                    claims["node"]["uid"] = node["metadata"]["uid"]
            return claims
        if kind == "Node" and bound.get("apiVersion", "v1") == "v1":
            node = self.store.find("nodes", name)
            if node is None:
                raise not_found(NODES.plural, name)
            self._check_uid(bound, node["metadata"]["uid"], "Node", name)
            return {"node": {"name": name, "uid": node["metadata"]["uid"]}}
        raise bad_request(f"cannot bind token to object of type {bound.get('apiVersion')}, {kind}")

    def _check_uid(self, bound: dict[str, Any], uid: str, kind: str, name: str) -> None:
        if bound.get("uid") and bound["uid"] != uid:
            raise conflict(
                kind,
                name,
                f"the UID in the bound object reference ({bound['uid']}) does not match the UID "
                "in record. The object might have been deleted and then recreated",
            )

    def verify(self, token: str, audiences: list[str] | None = None) -> dict[str, Any]:
        """The token's claims; ApiError(401) with the reason when it is not valid."""
        parts = token.split(".")
        if len(parts) != 3:
            raise ApiError(401, "Unauthorized", "invalid bearer token: not a JWT")
        expected = self._sign(f"{parts[0]}.{parts[1]}".encode())
        if not hmac.compare_digest(expected, parts[2]):
            raise ApiError(401, "Unauthorized", "invalid bearer token: not issued by this server")
        claims: dict[str, Any] = json.loads(_unb64(parts[1]))
        if claims.get("exp", 0) <= time.time():
            raise ApiError(401, "Unauthorized", "service account token has expired")
        wanted = audiences or API_AUDIENCES
        if not set(wanted) & set(claims.get("aud") or []):
            raise ApiError(401, "Unauthorized", "token audiences do not match the requested ones")
        pod = (claims.get("kubernetes.io") or {}).get("pod")
        if pod:
            namespace = claims["kubernetes.io"]["namespace"]
            current = self.store.find("pods", object_key(PODS, namespace, pod["name"]))
            if current is None or current["metadata"]["uid"] != pod["uid"]:
                raise ApiError(
                    401, "Unauthorized", f"pod {namespace}/{pod['name']} is gone or was replaced"
                )
        return claims

    def review(self, body: Any) -> dict[str, Any]:
        """POST /apis/authentication.k8s.io/v1/tokenreviews."""
        if not isinstance(body, dict) or not isinstance(body.get("spec"), dict):
            raise bad_request("the body of the request must be a TokenReview object")
        spec = body["spec"]
        token = spec.get("token")
        if not isinstance(token, str) or not token:
            raise invalid("TokenReview", "", [("spec.token", "Required value")])
        audiences = spec.get("audiences") or None
        answer: dict[str, Any] = {
            "kind": "TokenReview",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"creationTimestamp": None},
            "spec": spec,
        }
        try:
            claims = self.verify(token, audiences)
        except (ApiError, ValueError) as e:
            reason = e.message if isinstance(e, ApiError) else "invalid bearer token"
            answer["status"] = {"authenticated": False, "user": {}, "error": f"[{reason}]"}
            return answer
        answer["status"] = {
            "authenticated": True,
            "user": user_info(claims),
            "audiences": sorted(set(audiences or API_AUDIENCES) & set(claims["aud"])),
        }
        return answer
