"""Copies the pinned front-end packages from node_modules into static/vendor.

`make` runs this after `npm ci`; the copies are not committed. Run as
`python -m app.ui.assets`.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VENDOR = ROOT / "static" / "vendor"
VENDORED_FILES = {
    "htmx.min.js": ROOT / "node_modules" / "htmx.org" / "dist" / "htmx.min.js",
    "htmx-ext-sse.min.js": ROOT / "node_modules" / "htmx-ext-sse" / "dist" / "sse.min.js",
}


def missing_assets() -> list[str]:
    return [name for name in VENDORED_FILES if not (VENDOR / name).is_file()]


def copy_assets() -> None:
    VENDOR.mkdir(parents=True, exist_ok=True)
    for name, source in VENDORED_FILES.items():
        if not source.is_file():
            raise SystemExit(f"{source} is missing: run `npm ci` first (make does)")
        shutil.copyfile(source, VENDOR / name)


if __name__ == "__main__":
    copy_assets()
    print(f"copied {len(VENDORED_FILES)} files to {VENDOR}", file=sys.stderr)
