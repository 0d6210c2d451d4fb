"""The dashboard's front-end files from npm packages, kept in static/vendor/.

They are committed, so that installing and running Devicedeck needs no Node.js. Each is the
file of the npm package that package-lock.json pins, taken from the package's tarball after
its sha512 was checked against the lock's `integrity`; tests/ui/test_vendored_assets.py checks
the committed copies the same way.

To add a file: add the package to package.json with an exact version, run
`npm install --package-lock-only`, add an entry to VENDORED_FILES, then `make assets`
(`python -m devicedeck.ui.assets`, run in the repository), which rewrites static/vendor/.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VENDOR = ROOT / "static" / "vendor"
PACKAGE_LOCK = ROOT / "package-lock.json"


@dataclass(frozen=True)
class VendoredFile:
    package: str
    path: str  # inside the package


VENDORED_FILES = {
    "htmx.min.js": VendoredFile("htmx.org", "dist/htmx.min.js"),
    "htmx-ext-sse.min.js": VendoredFile("htmx-ext-sse", "dist/sse.min.js"),
    # The API's /docs page, so it works without internet access.
    "swagger-ui-bundle.js": VendoredFile("swagger-ui-dist", "swagger-ui-bundle.js"),
    "swagger-ui.css": VendoredFile("swagger-ui-dist", "swagger-ui.css"),
}


@dataclass(frozen=True)
class LockedPackage:
    name: str
    version: str
    integrity: str  # "sha512-<base64>", the digest of the package's tarball

    @property
    def spec(self) -> str:
        return f"{self.name}@{self.version}"


def locked_package(name: str, lock_path: Path = PACKAGE_LOCK) -> LockedPackage:
    entry = json.loads(lock_path.read_text())["packages"].get(f"node_modules/{name}")
    if entry is None:
        raise SystemExit(f"{name} is not in {lock_path.name}: run npm install --package-lock-only")
    return LockedPackage(name, entry["version"], entry["integrity"])


def check_integrity(tarball: Path, integrity: str) -> None:
    algorithm, _, expected = integrity.partition("-")
    if algorithm != "sha512":
        raise SystemExit(f"{tarball.name}: the lock's integrity is {algorithm}, not sha512")
    actual = base64.b64encode(hashlib.sha512(tarball.read_bytes()).digest()).decode()
    if actual != expected:
        raise SystemExit(f"{tarball.name}: sha512 {actual} does not match the lock's {expected}")


def fetch_tarballs(packages: list[LockedPackage], into: Path) -> dict[str, Path]:
    """Each package's tarball, through npm (from its cache when it has it), integrity-checked."""
    specs = sorted({p.spec for p in packages})
    if shutil.which("npm") is None:
        raise SystemExit("npm is needed to read the packages package-lock.json pins")
    result = subprocess.run(
        ["npm", "pack", "--prefer-offline", "--json", "--pack-destination", str(into), *specs],
        cwd=into,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise SystemExit(f"npm pack {' '.join(specs)} failed:\n{result.stderr}")
    packs = json.loads(result.stdout)
    packed = {f"{p['name']}@{p['version']}": into / p["filename"] for p in packs}
    for package in packages:
        check_integrity(packed[package.spec], package.integrity)
    return packed


def locked_contents(lock_path: Path = PACKAGE_LOCK) -> dict[str, bytes]:
    """What each vendored file must hold, read from the tarballs the lock pins."""
    packages = {f.package: locked_package(f.package, lock_path) for f in VENDORED_FILES.values()}
    with tempfile.TemporaryDirectory() as tmp:
        tarballs = fetch_tarballs(list(packages.values()), Path(tmp))
        contents = {}
        for name, file in VENDORED_FILES.items():
            with tarfile.open(tarballs[packages[file.package].spec]) as tar:
                member = tar.extractfile(f"package/{file.path}")
                if member is None:
                    raise SystemExit(f"{file.package} has no file {file.path}")
                contents[name] = member.read()
    return contents


def write_vendored_files() -> None:
    VENDOR.mkdir(parents=True, exist_ok=True)
    for name, content in locked_contents().items():
        (VENDOR / name).write_bytes(content)
    for stray in set(p.name for p in VENDOR.iterdir()) - set(VENDORED_FILES):
        (VENDOR / stray).unlink()


if __name__ == "__main__":
    write_vendored_files()
    print(f"wrote {len(VENDORED_FILES)} files to {VENDOR}", file=sys.stderr)
