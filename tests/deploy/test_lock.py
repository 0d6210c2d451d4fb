"""The lock files in requirements/ agree with pyproject.toml, pin every package with hashes,
and are what the Makefile, the Dockerfile and CI install from."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from .helpers import REPO

LOCKS = REPO / "requirements"


@dataclass(frozen=True)
class Pin:
    name: str
    version: str
    marker: Marker | None
    hashes: tuple[str, ...]

    def applies_here(self) -> bool:
        return self.marker is None or self.marker.evaluate()


def read_lock(path: Path) -> dict[str, Pin]:
    """name -> pin; continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", path.read_text())
    pins: dict[str, Pin] = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        requirement_text, *options = re.split(r"\s+(?=--)", line)
        requirement = Requirement(requirement_text)
        (specifier,) = requirement.specifier
        assert specifier.operator == "==", f"{path.name}: {line!r} is not pinned with =="
        hashes = tuple(o.removeprefix("--hash=") for o in options if o.startswith("--hash="))
        assert hashes and all(h.startswith("sha256:") for h in hashes), f"{path.name}: {line!r}"
        assert len(hashes) == len(options), f"{path.name}: options besides hashes in {line!r}"
        name = canonicalize_name(requirement.name)
        assert name not in pins, f"{path.name}: {name} pinned twice"
        pins[name] = Pin(name, specifier.version, requirement.marker, hashes)
    return pins


def pyproject() -> dict:
    with (REPO / "pyproject.toml").open("rb") as f:
        return tomllib.load(f)


def declared(lock: str) -> list[Requirement]:
    """What pyproject.toml asks for, as the lock file of that name must hold it."""
    project = pyproject()["project"]
    texts = list(project["dependencies"])
    if lock == "dev.txt":
        texts += project["optional-dependencies"]["dev"]
    return [Requirement(text) for text in texts]


def closure(requirements: list[Requirement]) -> set[str]:
    """Every distribution the requirements need on this interpreter, extras followed, read
    from the installed packages' metadata."""
    followed: set[tuple[str, str]] = set()  # (distribution, extra)
    pending = [(r, "") for r in requirements]
    while pending:
        requirement, extra = pending.pop()
        if requirement.marker and not requirement.marker.evaluate({"extra": extra}):
            continue
        name = canonicalize_name(requirement.name)
        for wanted in ["", *requirement.extras]:
            if (name, wanted) not in followed:
                followed.add((name, wanted))
                requires = metadata.distribution(name).requires or []
                pending += [(Requirement(r), wanted) for r in requires]
    return {name for name, _ in followed}


@pytest.mark.parametrize("lock", ["runtime.txt", "dev.txt"])
def test_every_declared_dependency_is_pinned_within_its_range(lock: str) -> None:
    pins = read_lock(LOCKS / lock)
    for requirement in declared(lock):
        pin = pins.get(canonicalize_name(requirement.name))
        assert pin is not None, f"{requirement} is not in {lock}: run `make lock`"
        assert requirement.specifier.contains(pin.version, prereleases=True), (
            f"{lock} pins {pin.name}=={pin.version}, outside {requirement}: run `make lock`"
        )
        assert pin.marker is None, f"{requirement} is needed everywhere, {lock} has {pin.marker}"


def test_dev_lock_keeps_the_runtime_pins() -> None:
    runtime, dev = read_lock(LOCKS / "runtime.txt"), read_lock(LOCKS / "dev.txt")
    assert {n: p.version for n, p in runtime.items()} == {n: dev[n].version for n in runtime}


@pytest.mark.parametrize("lock", ["runtime.txt", "dev.txt"])
def test_lock_holds_exactly_what_the_declared_dependencies_need(lock: str) -> None:
    """Nothing missing, nothing left over from a dependency since removed (on this platform;
    pins for others carry markers)."""
    pins = read_lock(LOCKS / lock)
    for pin in pins.values():
        if pin.applies_here():
            installed = metadata.version(pin.name)
            assert installed == pin.version, (
                f"{pin.name} {installed} is installed, {lock} pins {pin.version}: run `make`"
            )
    here = {name for name, pin in pins.items() if pin.applies_here()}
    assert here == closure(declared(lock))


def test_build_lock_satisfies_the_build_requirements() -> None:
    pins = read_lock(LOCKS / "build.txt")
    for text in pyproject()["build-system"]["requires"]:
        requirement = Requirement(text)
        pin = pins[canonicalize_name(requirement.name)]
        assert requirement.specifier.contains(pin.version)


def test_every_pip_install_uses_the_locks_with_hashes() -> None:
    """In the Makefile and the Dockerfile, a pip install either installs a lock file with
    --require-hashes or installs the project itself without fetching anything."""
    makefile = (REPO / "Makefile").read_text()
    dockerfile = (REPO / "Dockerfile").read_text()
    installs = []
    makefile = re.sub(r"^PIP :=.*$", "", makefile, flags=re.MULTILINE).replace(
        "$(PIP)", "pip install"
    )
    for text in (makefile, dockerfile):
        text = re.sub(r"\\\n", " ", text)
        installs += re.findall(r"pip install ([^&\n]*)", text)
    locks = set()
    for options in installs:
        if "-r " in options:
            assert "--require-hashes" in options, options
            locks |= set(re.findall(r"-r (requirements/\S+)", options))
        else:
            assert "--no-deps" in options or "--no-index" in options, options
    assert locks == {f"requirements/{n}" for n in ("build.txt", "runtime.txt", "dev.txt")}
    assert "make test" in (REPO / ".ci" / "run").read_text()


def test_tampered_lock_line_is_refused(tmp_path: Path) -> None:
    unpinned = tmp_path / "unpinned.txt"
    unpinned.write_text("fastapi>=0.163 \\\n    --hash=sha256:00\n")
    with pytest.raises(AssertionError, match="not pinned"):
        read_lock(unpinned)
    unhashed = tmp_path / "unhashed.txt"
    unhashed.write_text("fastapi==0.163.2\n")
    with pytest.raises(AssertionError):
        read_lock(unhashed)
