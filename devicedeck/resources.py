"""Where the service finds its files that are not Python: migrations/, templates/ and static/.

They are top-level folders of the repository, read in place by a source checkout or an editable
install. A built wheel carries copies under devicedeck/bundled/, put there by setup.py, so an
installed service runs from any working directory.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
BUNDLED_DIR = PACKAGE_DIR / "bundled"


def resource_dir(name: str) -> Path:
    """The folder `name` (migrations, templates or static) this installation reads."""
    bundled = BUNDLED_DIR / name
    return bundled if bundled.is_dir() else PACKAGE_DIR.parent / name
