"""Name rules the kubelet and the API server apply, written out so every part checks the same.

Each check returns None when the value passes, or a short sentence naming the broken rule.
"""

from __future__ import annotations

import re
from functools import lru_cache

DNS1123_LABEL_MAX = 63
DNS1123_SUBDOMAIN_MAX = 253
QUALIFIED_NAME_MAX = 63
DEVICE_ID_MAX = 253

_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_QUALIFIED_NAME_PART = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")

# Every snapshot repeats the same few resource names, namespaces and container names, and
# checks them once per mention: the answers are kept. The values are bounded in length by the
# body limit, and the caches in number.
_remembered = lru_cache(maxsize=4096)


@_remembered
def dns1123_label_problem(value: str) -> str | None:
    if not value:
        return "must not be empty"
    if len(value) > DNS1123_LABEL_MAX:
        return f"must be at most {DNS1123_LABEL_MAX} characters (DNS-1123 label)"
    if not _DNS1123_LABEL.fullmatch(value):
        return (
            "must be a DNS-1123 label: lower-case letters, digits and '-', "
            "starting and ending with a letter or digit"
        )
    return None


@_remembered
def dns1123_subdomain_problem(value: str) -> str | None:
    if not value:
        return "must not be empty"
    if len(value) > DNS1123_SUBDOMAIN_MAX:
        return f"must be at most {DNS1123_SUBDOMAIN_MAX} characters (DNS-1123 subdomain)"
    if not _DNS1123_SUBDOMAIN.fullmatch(value):
        return (
            "must be a DNS-1123 subdomain: lower-case letters, digits, '-' and '.', "
            "each part starting and ending with a letter or digit"
        )
    return None


def qualified_name_problem(value: str) -> str | None:
    """Kubernetes IsQualifiedName: optional DNS-1123 subdomain prefix, '/', a short name."""
    prefix, sep, name = value.rpartition("/")
    if sep:
        if not prefix:
            return "prefix before '/' must not be empty"
        problem = dns1123_subdomain_problem(prefix)
        if problem:
            return f"prefix {problem}"
    if not name:
        return "name part must not be empty"
    if len(name) > QUALIFIED_NAME_MAX:
        return f"name part must be at most {QUALIFIED_NAME_MAX} characters"
    if not _QUALIFIED_NAME_PART.fullmatch(name):
        return (
            "name part must consist of letters, digits, '-', '_' or '.', "
            "starting and ending with a letter or digit"
        )
    return None


@_remembered
def extended_resource_name_problem(value: str) -> str | None:
    """The rule the kubelet applies to device plugin resource names (IsExtendedResourceName)."""
    if "/" not in value:
        return "must be an extended resource name of the form 'vendor-domain/resourcetype'"
    if "kubernetes.io/" in value:
        return "must not be in the kubernetes.io namespace"
    if value.startswith("requests."):
        return "must not start with 'requests.'"
    problem = qualified_name_problem("requests." + value)
    if problem:
        return f"must be a qualified name: {problem}"
    return None


def text_problem(value: str) -> str | None:
    """Text that UTF-8 cannot encode (a lone UTF-16 surrogate such as JSON's "\\ud800") can be
    neither stored nor sent on, so it is refused where it comes in."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "must be valid Unicode text (no lone UTF-16 surrogates)"
    return None


def unprintable_problem(value: str) -> str | None:
    """Control, format (bidi overrides, zero-width marks) and separator characters other than
    the space: in a name they hide or reorder what a reader of a page or a log sees."""
    if value.isprintable():
        return None
    found = next(ch for ch in value if not ch.isprintable())
    return (
        "must not contain control, format or line separator characters "
        f"(line breaks, bidi controls, zero-width marks); found U+{ord(found):04X}"
    )


def device_id_problem(value: str) -> str | None:
    # Printable text has no NUL, line break, bidi control or lone surrogate.
    if 0 < len(value) <= DEVICE_ID_MAX and value.isprintable():
        return None
    if not value:
        return "must not be empty"
    problem = text_problem(value)
    if problem:
        return problem
    if len(value) > DEVICE_ID_MAX:
        return f"must be at most {DEVICE_ID_MAX} characters"
    return unprintable_problem(value)


def pod_name_problem(value: str) -> str | None:
    return dns1123_subdomain_problem(value)
