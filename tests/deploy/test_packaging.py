"""The wheel, as an operator installs it: built from the source, installed into a fresh
virtualenv with the locked runtime dependencies only, then run from another directory with no
source tree, no Node.js and no dev tools in reach."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import urllib.request
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from devicedeck import __version__
from devicedeck.demo.topology import TOPOLOGY
from devicedeck.ui.assets import VENDORED_FILES

from .helpers import REPO, wait_until
from .test_demo import free_port, run_demo_until_data

pytestmark = pytest.mark.slow

# Left out of the copy the wheel is built from: none of it may be needed.
NOT_SOURCE = shutil.ignore_patterns(
    ".git", ".venv", "node_modules", "build", "dist", "*.egg-info", "__pycache__", "*.pyc",
    "devicedeck-data", "demo-data", ".mypy_cache", ".ruff_cache", ".pytest_cache", ".hypothesis",
    "*.db", "*.db-*",
)  # fmt: skip


@dataclass
class Installed:
    wheel: Path
    venv: Path
    elsewhere: Path  # a working directory with nothing of the project in it

    @property
    def devicedeck(self) -> str:
        return str(self.venv / "bin" / "devicedeck")

    def env(self, **settings: str) -> dict[str, str]:
        """The caller's environment without the test run's virtualenv or Devicedeck settings."""
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("DEVICEDECK_", "PYTHON", "VIRTUAL_ENV"))
        }
        env["PATH"] = os.pathsep.join(
            p
            for p in env.get("PATH", "").split(os.pathsep)
            if Path(sys.executable).parent != Path(p)
        )
        return {**env, **settings}


def run(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"{argv} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def installed() -> Iterator[Installed]:
    base = Path(tempfile.mkdtemp(prefix="dd-wheel-"))
    try:
        source = base / "source"
        shutil.copytree(REPO, source, ignore=NOT_SOURCE)
        # Built as the Dockerfile builds it: the locked setuptools, no build isolation.
        run(
            [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
             "--wheel-dir", str(base / "dist"), str(source)],
            cwd=base,
        )  # fmt: skip
        (wheel,) = (base / "dist").glob("devicedeck-*.whl")
        venv = base / "venv"
        run([sys.executable, "-m", "venv", str(venv)], cwd=base)
        # The runtime lock, installed with uv for speed (pip takes minutes here), then the
        # wheel with pip and --no-index: a dependency the lock lacks fails the install.
        uv = str(Path(sys.executable).with_name("uv"))
        runtime_lock = str(REPO / "requirements" / "runtime.txt")
        run(
            [uv, "pip", "install", "--quiet", "--python", str(venv / "bin" / "python"),
             "--require-hashes", "-r", runtime_lock],
            cwd=base,
        )  # fmt: skip
        run([str(venv / "bin" / "python"), "-m", "pip", "install", "--no-index", str(wheel)], base)
        elsewhere = base / "elsewhere"
        elsewhere.mkdir()
        yield Installed(wheel, venv, elsewhere)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_wheel_carries_migrations_templates_and_static_files(installed: Installed) -> None:
    names = set(zipfile.ZipFile(installed.wheel).namelist())
    for name in ("migrations/env.py", "migrations/script.py.mako", "templates/base.html"):
        assert f"devicedeck/bundled/{name}" in names
    versions = {p.name for p in (REPO / "migrations" / "versions").glob("*.py")}
    assert {n.rpartition("/")[2] for n in names if "/migrations/versions/" in n} == versions
    static = {str(p.relative_to(REPO)) for p in (REPO / "static").rglob("*") if p.is_file()}
    assert {f"static/vendor/{name}" for name in VENDORED_FILES} <= static
    assert {f"devicedeck/bundled/{name}" for name in static} <= names
    assert not [n for n in names if "__pycache__" in n]
    # One top-level package: nothing with a generic name that another project could shadow.
    assert {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")} == {
        "devicedeck"
    }


def test_the_wheel_carries_the_license_its_metadata_names(installed: Installed) -> None:
    license_text = (REPO / "LICENSE").read_text()
    assert license_text.split()[:4] == ["Apache", "License", "Version", "2.0,"]
    assert "END OF TERMS AND CONDITIONS" in license_text
    wheel = zipfile.ZipFile(installed.wheel)
    info = next(n.split("/")[0] for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
    metadata = wheel.read(f"{info}/METADATA").decode()
    assert "License-Expression: Apache-2.0" in metadata.splitlines()
    assert "License-File: LICENSE" in metadata.splitlines()
    assert wheel.read(f"{info}/licenses/LICENSE").decode() == license_text


def test_installed_command_reports_its_version(installed: Installed) -> None:
    out = run([installed.devicedeck, "--version"], installed.elsewhere, installed.env())
    assert out.strip() == f"devicedeck {__version__}"
    where = run(
        [
            str(installed.venv / "bin" / "python"),
            "-c",
            "import devicedeck; print(devicedeck.__file__)",
        ],
        installed.elsewhere,
        installed.env(),
    )
    assert Path(where.strip()).is_relative_to(installed.venv), "devicedeck imported from the source"


def fetch(url: str) -> tuple[int, bytes, str]:
    with urllib.request.urlopen(url, timeout=30) as response:
        return response.status, response.read(), response.headers["content-type"]


def test_installed_service_migrates_and_serves_the_dashboard_with_its_files(
    installed: Installed,
) -> None:
    port = free_port()
    env = installed.env(
        DEVICEDECK_DATABASE_URL=f"sqlite:///{installed.elsewhere / 'devicedeck.db'}",
        DEVICEDECK_AUTH="off",
    )
    log = installed.elsewhere / "serve.log"
    base = f"http://127.0.0.1:{port}"
    with (
        log.open("w") as out,
        subprocess.Popen(
            [installed.devicedeck, "serve", "--port", str(port)],
            cwd=installed.elsewhere,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        ) as served,
    ):
        try:

            def live() -> bool:
                assert served.poll() is None, log.read_text()
                try:
                    return fetch(base + "/livez")[0] == 200
                except OSError:
                    return False

            wait_until(live, message="/livez of the installed service")
            status, body, content_type = fetch(base + "/")
            assert status == 200 and content_type.startswith("text/html")
            page = body.decode()
            assets = sorted(set(re.findall(r'(?:src|href)="(/static/[^"?]+)', page)))
            assert any(a.endswith("/htmx.min.js") for a in assets), page
            for asset in assets:
                status, content, _ = fetch(base + asset)
                assert status == 200, asset
                assert content == (REPO / asset.removeprefix("/")).read_bytes(), asset
        finally:
            served.send_signal(signal.SIGTERM)
            served.wait(timeout=60)
    assert "Traceback" not in log.read_text(), log.read_text()


def test_installed_demo_runs_from_another_directory(installed: Installed) -> None:
    data_dir = Path(tempfile.mkdtemp(prefix="dd", dir="/tmp")) / "data"  # short socket paths
    try:
        demo = run_demo_until_data(
            data_dir,
            data_dir.parent / "demo.log",
            program=[installed.devicedeck],
            cwd=installed.elsewhere,
        )
    finally:
        shutil.rmtree(data_dir.parent, ignore_errors=True)
    assert demo.exit_code == 0, demo.output
    assert set(demo.nodes) == {node.name for node in TOPOLOGY}
    assert "<html" in demo.dashboard.lower()
