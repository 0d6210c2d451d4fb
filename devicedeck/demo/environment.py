"""The environment of the demo's processes.

The service gets every DEVICEDECK_ setting of the environment the demo was started in, so
webhooks, JSON logs, per-device metrics or a device link template can be tried with `make
run`; the demo's own choices for it (a node is stale after 10 s) give way to them. Four
settings are the demo's alone, because the demo would not work otherwise: its database, no
sign-in for the dashboard, and the simulated cluster the service watches. The service's
webhook URLs always include the demo's receiver. The log format is every process's.
"""

from __future__ import annotations

from collections.abc import Mapping

from devicedeck.demo.layout import DemoError, DemoLayout

PREFIX = "DEVICEDECK_"
# Set by the demo whatever the environment says.
DEMO_OWNS = ("DATABASE_URL", "AUTH", "KUBE", "KUBECONFIG")
# The demo's defaults for the service; the environment may change them.
STALE_AFTER_SECONDS = 10.0
DEMO_DEFAULTS = {"STALE_AFTER": f"{STALE_AFTER_SECONDS:g}"}
# Settings every process of the demo reads (the simulators take their log format from it).
SHARED = ("LOG_FORMAT",)


def user_settings(environ: Mapping[str, str]) -> dict[str, str]:
    """The DEVICEDECK_ settings of the environment, by name without the prefix."""
    return {k.removeprefix(PREFIX): v for k, v in environ.items() if k.startswith(PREFIX)}


def ignored_settings(environ: Mapping[str, str]) -> list[str]:
    """Variables of the environment the demo sets itself."""
    return [PREFIX + name for name in DEMO_OWNS if name in user_settings(environ)]


def base_env(environ: Mapping[str, str]) -> dict[str, str]:
    """What every child gets: the environment without DEVICEDECK_ settings but the shared."""
    env = {k: v for k, v in environ.items() if not k.startswith(PREFIX)}
    env.update({PREFIX + k: v for k, v in user_settings(environ).items() if k in SHARED})
    env["PYTHONUNBUFFERED"] = "1"
    return env


def service_settings(
    environ: Mapping[str, str], layout: DemoLayout, receiver_url: str
) -> dict[str, str]:
    """The service's DEVICEDECK_ settings, by name without the prefix."""
    settings = {**DEMO_DEFAULTS, **user_settings(environ)}
    settings.update(
        DATABASE_URL=layout.database_url,
        AUTH="off",
        KUBE="kubeconfig",
        KUBECONFIG=str(layout.kubeconfig),
    )
    urls = [u.strip() for u in settings.get("WEBHOOK_URL", "").split(",") if u.strip()]
    settings["WEBHOOK_URL"] = ",".join([*urls, receiver_url])
    return settings


def check_service_settings(settings: Mapping[str, str]) -> None:
    """Stop the demo before it starts anything if the service would refuse its settings,
    naming the variable (never its value, which may be a secret)."""
    from devicedeck.config import load_settings

    try:
        load_settings(**{name.lower(): value for name, value in settings.items()})
    except SystemExit as e:
        raise DemoError(f"the service would not start with these settings: {e}") from e


def service_env(settings: Mapping[str, str]) -> dict[str, str]:
    return {PREFIX + name: value for name, value in settings.items()}


def log_format(environ: Mapping[str, str]) -> str:
    """`json` or `text`, as the demo's processes log."""
    return "json" if user_settings(environ).get("LOG_FORMAT", "").lower() == "json" else "text"
