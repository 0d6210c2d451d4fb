"""Who am I and what may I do: SelfSubjectReview (`kubectl auth whoami`),
SelfSubjectAccessReview (`kubectl auth can-i VERB RESOURCE`) and SelfSubjectRulesReview
(`kubectl auth can-i --list`).

This server enforces no RBAC: every authenticated caller may do everything, so that is what
the reviews answer, saying why. Roles and bindings applied to it are stored, not enforced.
"""

from __future__ import annotations

from typing import Any

from devicedeck.sim.apiserver.errors import bad_request, invalid

ADMIN_USER = {"username": "admin", "groups": ["system:masters", "system:authenticated"]}
REASON = "the simulated API server enforces no RBAC: every authenticated user may do everything"


def _review(kind: str, group: str, body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise bad_request(f"the body of the request must be a {kind} object")
    spec = body.get("spec") or {}
    if not isinstance(spec, dict):
        raise bad_request("spec must be an object")
    return {
        "kind": kind,
        "apiVersion": f"{group}/v1",
        "metadata": {"creationTimestamp": None},
        "spec": spec,
    }


def self_subject_review(user: dict[str, Any], body: Any) -> dict[str, Any]:
    answer = _review("SelfSubjectReview", "authentication.k8s.io", body)
    answer.pop("spec")
    answer["status"] = {"userInfo": user}
    return answer


def access_review(body: Any) -> dict[str, Any]:
    answer = _review("SelfSubjectAccessReview", "authorization.k8s.io", body)
    spec = answer["spec"]
    attributes = spec.get("resourceAttributes") or spec.get("nonResourceAttributes")
    if not isinstance(attributes, dict):
        raise invalid(
            "SelfSubjectAccessReview",
            "",
            [
                (
                    "spec.resourceAttributes",
                    "Required value: exactly one of nonResourceAttributes "
                    "or resourceAttributes must be specified",
                )
            ],
        )
    answer["status"] = {"allowed": True, "reason": REASON}
    return answer


def rules_review(body: Any) -> dict[str, Any]:
    answer = _review("SelfSubjectRulesReview", "authorization.k8s.io", body)
    answer["status"] = {
        "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
        "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
        "incomplete": False,
    }
    return answer
