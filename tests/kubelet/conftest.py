"""Fixtures for the kubelet protocol tests: short socket dirs and a fake kubelet Registration."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from devicedeck.kubelet.paths import KubeletPaths

from .fakes import FakeKubeletRegistration


@pytest.fixture
def kubelet_root() -> Iterator[KubeletPaths]:
    """A kubelet root with its directories. Kept short on purpose: pytest's tmp_path can
    exceed the 107-byte limit of a unix socket path."""
    root = Path(tempfile.mkdtemp(prefix="dd-", dir="/tmp"))
    paths = KubeletPaths(root)
    paths.make_dirs()
    try:
        yield paths
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def fake_kubelet(kubelet_root: KubeletPaths) -> Iterator[FakeKubeletRegistration]:
    kubelet = FakeKubeletRegistration(kubelet_root.kubelet_socket)
    kubelet.start()
    try:
        yield kubelet
    finally:
        kubelet.stop()
