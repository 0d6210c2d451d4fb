"""The build step pyproject.toml cannot declare: migrations/, templates/ and static/ go into the
wheel as devicedeck/bundled/, where devicedeck/resources.py looks for them. Everything else is in
pyproject.toml."""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

RESOURCE_DIRS = ("migrations", "templates", "static")


class BuildPyWithResources(build_py):
    def run(self) -> None:
        super().run()
        if self.editable_mode:  # an editable install reads the folders where they are
            return
        bundled = Path(self.build_lib) / "devicedeck" / "bundled"
        for name in RESOURCE_DIRS:
            shutil.rmtree(bundled / name, ignore_errors=True)
            shutil.copytree(
                name, bundled / name, ignore=shutil.ignore_patterns("__pycache__", "*.py[co]")
            )


setup(cmdclass={"build_py": BuildPyWithResources})
