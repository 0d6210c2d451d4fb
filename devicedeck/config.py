"""Settings, read from the environment with the DEVICEDECK_ prefix."""

from __future__ import annotations

import ipaddress
import re
import string
from enum import StrEnum
from typing import Any
from urllib.parse import unquote, urlsplit

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class AuthMode(StrEnum):
    TOKEN = "token"
    OFF = "off"


class LogFormat(StrEnum):
    TEXT = "text"
    JSON = "json"


class LogLevel(StrEnum):
    DEBUG = "DEBUG"
    INFO = "INFO"
    WARNING = "WARNING"
    ERROR = "ERROR"
    CRITICAL = "CRITICAL"

    @classmethod
    def _missing_(cls, value: object) -> LogLevel | None:
        # Python's logging takes the names in capitals; people write them either way.
        if isinstance(value, str) and value.upper() != value:
            return cls.__members__.get(value.upper())
        return None


class KubeMode(StrEnum):
    OFF = "off"
    INCLUSTER = "incluster"
    KUBECONFIG = "kubeconfig"


LINK_FIELDS = {"node", "resource", "device_id"}
WEBHOOK_URL = re.compile(r"https?://[^/?#\s,]+(/[^\s,]*)?")


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="DEVICEDECK_", extra="ignore")

    database_url: str = Field(
        default="sqlite:///./devicedeck.db",
        description="SQLAlchemy URL, e.g. postgresql+psycopg://user@host/db",
    )
    auth: AuthMode = Field(default=AuthMode.TOKEN, description="token, or off for local demos")
    token_cache_seconds: float = Field(
        default=10.0,
        ge=0,
        description="how long a checked token is trusted without asking the database again",
    )
    session_idle_seconds: float = Field(
        default=8 * 3600,
        gt=0,
        description="a dashboard sign-in unused for this long ends",
    )
    session_max_age_seconds: float = Field(
        default=7 * 24 * 3600,
        gt=0,
        description="a dashboard sign-in ends this long after it began, however used",
    )
    secure_cookies: bool = Field(
        default=False,
        description="mark cookies Secure even when the request reached the service over "
        "plain HTTP (behind a TLS-terminating proxy)",
    )
    max_live_streams: int = Field(
        default=20,
        gt=0,
        description="most live-update streams one token, session or user may hold open on "
        "one serving process",
    )
    stream_check_seconds: float = Field(
        default=15.0,
        gt=0,
        description="how often open live-update streams are checked against the database, "
        "and closed when their token is revoked or their session has ended",
    )
    proxy_user_header: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9-]+$",
        description="a request header in which an authenticating proxy names the user",
    )
    proxy_trusted_cidrs: str | None = Field(
        default=None,
        description="networks, comma-separated, whose requests' proxy user header is believed",
    )
    proxy_admins: str | None = Field(
        default=None,
        description="users, comma-separated, who get the admin scope through the proxy",
    )
    stale_after: float = Field(
        default=90.0, gt=0, description="seconds without a snapshot before a node is stale"
    )
    body_limit: int = Field(default=3 * 1024 * 1024, gt=0, description="request body limit, bytes")
    body_read_timeout: float = Field(
        default=30.0, gt=0, description="seconds a request's whole body may take to arrive"
    )
    header_read_timeout: float = Field(
        default=10.0,
        gt=0,
        description="seconds a request's headers may take to arrive; a slower connection is "
        "answered 408 and closed",
    )
    max_connections_per_client: int = Field(
        default=256,
        ge=0,
        description="connections one client address may hold open to one serving process; "
        "more are answered 429 and closed; 0: no cap",
    )
    form_read_timeout: float = Field(
        default=5.0,
        gt=0,
        description="seconds a dashboard form's whole body may take to arrive; anyone may "
        "post the sign-in form, so this is kept short",
    )
    max_concurrent_requests: int = Field(
        default=100,
        gt=0,
        description="reads and API writes other than ingest one process answers at once; "
        "more get 503",
    )
    max_concurrent_ingest: int = Field(
        default=100,
        gt=0,
        description="agents' snapshots one process takes in at once; more get 503",
    )
    max_concurrent_forms: int = Field(
        default=20,
        gt=0,
        description="dashboard form posts (sign-in included) one process answers at once; "
        "more get 503",
    )
    log_format: LogFormat = Field(default=LogFormat.TEXT)
    log_level: LogLevel = Field(default=LogLevel.INFO)
    access_log: bool = Field(default=True, description="log a line per request")
    metrics_per_device: bool = Field(
        default=False,
        description="export devicedeck_device_healthy, one series per present device",
    )
    metrics_refresh: float = Field(
        default=5.0,
        ge=0,
        description="seconds between reads of the fleet gauges, which scrapes answer with; "
        "0 reads at every scrape",
    )
    max_devices_per_snapshot: int = Field(default=4096, gt=0)
    max_pods_per_snapshot: int = Field(default=2048, gt=0)
    max_devices_per_node: int = Field(default=16384, gt=0)
    kube: KubeMode = Field(default=KubeMode.OFF)
    kubeconfig: str | None = Field(default=None)
    kube_resync: float = Field(default=300.0, gt=0)
    leader_lease_name: str = Field(
        default="devicedeck-leader",
        max_length=253,
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
        description="the coordination.k8s.io Lease the replicas elect their leader with",
    )
    leader_lease_namespace: str | None = Field(
        default=None,
        max_length=63,
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
        description="the Lease's namespace; default: the pod's own (in cluster) or the "
        "kubeconfig context's, else default",
    )
    agent_service_accounts: str = Field(
        default="devicedeck-agent:devicedeck-agent",
        pattern=r"^[a-z0-9.-]+:[a-z0-9.-]+(,[a-z0-9.-]+:[a-z0-9.-]+)*$",
        description="NAMESPACE:NAME of the ServiceAccounts node agents run as, comma-separated",
    )
    public_url: str | None = Field(
        default=None,
        pattern=r"^https?://[^/?#\s]+(/[^?#\s]*)?$",
        description="the service's address as clients reach it, for absolute links",
    )
    device_link_template: str | None = Field(
        default=None,
        description="a link shown on each device's page, e.g. to a Grafana board: an http(s) "
        "URL with {node}, {resource} and {device_id} in it",
    )
    webhook_url: str | None = Field(
        default=None,
        description="http(s) URLs, comma-separated, that get an Alertmanager-style webhook "
        "message when a device turns unhealthy or is removed, or a node goes stale, and when "
        "that ends",
    )
    webhook_receiver: str = Field(
        default="devicedeck", min_length=1, description="the messages' `receiver` field"
    )
    webhook_timeout: float = Field(
        default=10.0, gt=0, description="seconds a webhook receiver has to answer one message"
    )
    webhook_backoff_max: float = Field(
        default=300.0, gt=0, description="the longest wait, seconds, before retrying a receiver"
    )
    webhook_retention_days: float = Field(
        default=7.0, gt=0, description="days a sent notification is kept before it is pruned"
    )

    @field_validator("webhook_url")
    @classmethod
    def _webhook_urls(cls, value: str | None) -> str | None:
        if not value or not value.strip():
            return None
        urls = [part.strip() for part in value.split(",")]
        for number, url in enumerate(urls, start=1):
            if not WEBHOOK_URL.fullmatch(url):
                # The entry is not repeated: it may carry a password.
                raise ValueError(
                    f"each comma-separated entry must be an http:// or https:// URL; entry "
                    f"{number} of {len(urls)} is not"
                )
        if len(set(urls)) != len(urls):
            raise ValueError("lists the same URL twice")
        return ",".join(urls)

    @property
    def webhook_urls(self) -> list[str]:
        return [url.strip() for url in (self.webhook_url or "").split(",") if url.strip()]

    def secret_values(self) -> list[str]:
        """What the logs must never show: each webhook URL whole, its credentials and its
        query (a key may be there), and the database password."""
        secrets: list[str] = list(self.webhook_urls)
        for url in self.webhook_urls:
            secrets += _url_secrets(url, query=True)
        secrets += _url_secrets(self.database_url, query=False)
        return secrets + [unquote(s) for s in secrets if unquote(s) != s]

    @field_validator("proxy_trusted_cidrs")
    @classmethod
    def _networks(cls, value: str | None) -> str | None:
        parts = split_list(value)
        for number, part in enumerate(parts, start=1):
            try:
                ipaddress.ip_network(part, strict=False)
            except ValueError as e:
                raise ValueError(
                    f"each comma-separated entry must be an address or a network such as "
                    f"10.0.0.0/8; entry {number} of {len(parts)} is not"
                ) from e
        return value

    @model_validator(mode="after")
    def _proxy_has_networks(self) -> Settings:
        if self.proxy_user_header and not split_list(self.proxy_trusted_cidrs):
            raise ValueError(
                "DEVICEDECK_PROXY_USER_HEADER needs DEVICEDECK_PROXY_TRUSTED_CIDRS: the "
                "networks of the proxy that sets it"
            )
        return self

    @field_validator("device_link_template")
    @classmethod
    def _link_template(cls, value: str | None) -> str | None:
        if not value:
            return None
        if not value.startswith(("https://", "http://")):
            raise ValueError("must be an http:// or https:// URL")
        try:
            names = {name for _, name, _, _ in string.Formatter().parse(value) if name is not None}
        except ValueError as e:
            raise ValueError(f"is not a template: {e}") from e
        if not names <= LINK_FIELDS:
            # The placeholders' names, never the template: it is a URL, which may hold a key.
            unknown = ", ".join(f"{{{name}}}" for name in sorted(names - LINK_FIELDS))
            raise ValueError(
                f"may use only {{node}}, {{resource}} and {{device_id}} as placeholders, "
                f"not {unknown}"
            )
        return value


def _url_secrets(url: str, query: bool) -> list[str]:
    """A URL's password (with its user name, as they stand in it), and its query if asked."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:  # no URL the parser can read: any credentials in it stay unknown
        return []
    found = [f"{parts.username}:{password}", password] if password else []
    return found + ([parts.query] if query and parts.query else [])


def split_list(value: str | None) -> list[str]:
    """A comma-separated setting's items, spaces around them ignored."""
    return [part.strip() for part in (value or "").split(",") if part.strip()]


def load_settings(**overrides: Any) -> Settings:
    """The settings from the environment, with `overrides` (by field name) taking the place of
    the variables they name. A bad value stops the command with an error naming the variable
    and what it accepts, before anything is started or changed. The value itself is never
    repeated: it may be a credential (a webhook URL with a password, a database URL), and the
    error ends up in logs."""
    try:
        return Settings(**overrides)
    except ValidationError as e:
        prefix = str(Settings.model_config.get("env_prefix", ""))
        problems = [
            f"{prefix}{'_'.join(str(part) for part in error['loc']).upper()}: {error['msg']}"
            if error["loc"]
            # A rule across settings, whose message names them.
            else error["msg"]
            for error in e.errors()
        ]
        raise SystemExit("invalid settings:\n  " + "\n  ".join(problems)) from e
