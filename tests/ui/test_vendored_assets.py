"""The committed static/vendor/ files are exactly the npm files package-lock.json pins: each is
read from its package's tarball after the tarball's sha512 matched the lock's integrity."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from devicedeck.ui.assets import (
    PACKAGE_LOCK,
    VENDOR,
    VENDORED_FILES,
    check_integrity,
    fetch_tarballs,
    locked_contents,
    locked_package,
)


def test_vendored_files_match_the_locked_npm_packages() -> None:
    for name, content in locked_contents().items():
        file = VENDORED_FILES[name]
        assert (VENDOR / name).read_bytes() == content, (
            f"static/vendor/{name} is not {file.path} of {locked_package(file.package).spec}: "
            "run `make assets`"
        )


def test_static_vendor_holds_only_the_listed_files() -> None:
    assert {p.name for p in VENDOR.iterdir()} == set(VENDORED_FILES)


def test_vendored_packages_are_pinned_exactly_in_package_json() -> None:
    wanted = json.loads((PACKAGE_LOCK.parent / "package.json").read_text())["dependencies"]
    for file in VENDORED_FILES.values():
        assert wanted[file.package] == locked_package(file.package).version


def test_a_tarball_that_does_not_match_the_lock_is_refused(tmp_path: Path) -> None:
    package = locked_package(next(iter(VENDORED_FILES.values())).package)
    (tarball,) = fetch_tarballs([package], tmp_path).values()
    tarball.write_bytes(tarball.read_bytes() + b"\0")
    with pytest.raises(SystemExit, match="does not match the lock"):
        check_integrity(tarball, package.integrity)
