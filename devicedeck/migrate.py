"""Running the Alembic migrations from code, so `devicedeck serve` and tests share one path."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from alembic import command
from alembic.config import Config

from devicedeck.resources import resource_dir

MIGRATIONS_DIR = resource_dir("migrations")


def alembic_config(database_url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    # Alembic's ini interpolation treats '%' specially.
    config.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    config.attributes["configure_logging"] = False
    return config


def upgrade_to_head(database_url: str) -> None:
    command.upgrade(alembic_config(database_url), "head")


def downgrade_to_base(database_url: str) -> None:
    command.downgrade(alembic_config(database_url), "base")


def compares_on(dialect: str) -> Callable[..., bool]:
    """Alembic's include_object for comparing the models with a database of that dialect:
    an index the models create only on another database (`Index.ddl_if`) is not expected."""

    def include(obj: Any, _name: Any, kind: str, reflected: bool, _compare_to: Any) -> bool:
        if kind != "index" or reflected:
            return True
        only = getattr(obj, "_ddl_if", None)
        return only is None or only.dialect in (None, dialect)

    return include
