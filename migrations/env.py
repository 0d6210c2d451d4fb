"""Alembic environment: the URL comes from the caller's config, the metadata from the models."""

from __future__ import annotations

from alembic import context
from sqlalchemy import pool, text

from devicedeck.db import create_db_engine
from devicedeck.inventory.models import Base
from devicedeck.migrate import compares_on

config = context.config
target_metadata = Base.metadata
# PostgreSQL advisory lock key held while migrating: "devicede" in ASCII.
MIGRATION_LOCK_KEY = 0x6465766963656465


def run_migrations_offline() -> None:
    context.configure(
        url=config.get_main_option("sqlalchemy.url"),
        target_metadata=target_metadata,
        literal_binds=True,
        render_as_batch=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    url = config.get_main_option("sqlalchemy.url")
    assert url is not None
    engine = create_db_engine(url, poolclass=pool.NullPool)
    with engine.connect() as connection:
        context.configure(
            connection=connection,
            target_metadata=target_metadata,
            render_as_batch=True,
            compare_type=True,
            include_object=compares_on(connection.dialect.name),
        )
        with context.begin_transaction():
            if connection.dialect.name == "postgresql":
                # Replicas that start together each migrate (an init container each, or
                # `serve` without --no-migrate): one at a time, held to the transaction's end,
                # so the others then read the version it committed and find nothing to do.
                connection.execute(
                    text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY}
                )
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
