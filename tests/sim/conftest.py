"""Fixtures for the simulated kubelet tests: a short root directory, kubelets and plugins
that are always stopped, whatever the test does."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from devicedeck.kubelet.deviceplugin import DevicePluginServer
from devicedeck.kubelet.paths import device_plugins_dir
from devicedeck.sim.kubelet import SimKubelet

from .helpers import RecordingPlugin, make_devices

# Quick loops for tests; each test that cares about the grace period sets its own.
FAST = {"reconcile_seconds": 0.05, "housekeeping_seconds": 0.05}


@pytest.fixture
def root() -> Iterator[Path]:
    """A kubelet root short enough for unix socket paths (pytest's tmp_path may not be)."""
    path = Path(tempfile.mkdtemp(prefix="dd", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def start_kubelet(root: Path) -> Iterator[Callable[..., SimKubelet]]:
    started: list[SimKubelet] = []

    def start(**options: Any) -> SimKubelet:
        kubelet = SimKubelet(root, **{**FAST, **options})
        kubelet.start()
        started.append(kubelet)
        return kubelet

    yield start
    for kubelet in reversed(started):
        kubelet.stop()


@pytest.fixture
def start_plugin(root: Path) -> Iterator[Callable[..., RecordingPlugin]]:
    """Start a recording plugin in ROOT/device-plugins (or `directory`) and stop it later."""
    started: list[DevicePluginServer] = []

    def start(
        resource: str,
        devices: Any = 4,
        *,
        directory: Path | None = None,
        wait: bool = True,
        **options: Any,
    ) -> RecordingPlugin:
        plugin = RecordingPlugin(
            resource,
            device_plugins_dir=directory or device_plugins_dir(root),
            devices=make_devices(devices),
            **options,
        )
        plugin.start()
        started.append(plugin)
        if wait and directory is None:
            assert plugin.wait_for_registration(1, timeout=10), f"{resource} did not register"
        return plugin

    yield start
    for plugin in reversed(started):
        plugin.stop(grace=0)
