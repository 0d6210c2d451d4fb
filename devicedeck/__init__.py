"""Devicedeck: every device that Kubernetes device plugins expose, with health and holders."""

__version__ = "0.1.0"
