"""Service subcommands: serve, migrate, token."""

from __future__ import annotations

import argparse
import gc
import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from devicedeck.config import load_settings

# uvicorn's variable and default for the proxies whose X-Forwarded-* headers are believed.
FORWARDED_ALLOW_IPS = "FORWARDED_ALLOW_IPS"
DEFAULT_FORWARDED_ALLOW_IPS = "127.0.0.1,::1"


def register(subparsers: Any) -> None:
    serve = subparsers.add_parser("serve", help="run the HTTP service (API and dashboard)")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on")
    serve.add_argument("--port", type=int, default=8000, help="port to listen on")
    serve.add_argument(
        "--no-migrate", action="store_true", help="do not run database migrations at start"
    )
    serve.add_argument(
        "--workers",
        type=_positive,
        default=1,
        help="worker processes; each serves requests, one at a time runs the stale sweep and "
        "the cluster watcher",
    )
    serve.add_argument(
        "--forwarded-allow-ips",
        metavar="ADDRESSES",
        help="comma-separated addresses or networks of reverse proxies whose X-Forwarded-Proto "
        "and X-Forwarded-For are believed, or '*' for any (uvicorn's option; default: the "
        "FORWARDED_ALLOW_IPS environment variable, else 127.0.0.1 and ::1)",
    )
    serve.set_defaults(func=run_serve)

    migrate = subparsers.add_parser("migrate", help="upgrade the database schema to the latest")
    migrate.set_defaults(func=run_migrate)

    token = subparsers.add_parser("token", help="create, list and revoke API tokens")
    token_commands = token.add_subparsers(dest="token_command", metavar="ACTION", required=True)
    create = token_commands.add_parser("create", help="create a token; prints it alone last")
    create.add_argument("--name", required=True)
    create.add_argument(
        "--scope",
        action="append",
        required=True,
        choices=["read", "ingest", "admin"],
        help="repeat for several scopes",
    )
    binding = create.add_mutually_exclusive_group()
    binding.add_argument(
        "--node", help="for an ingest token: the one node whose snapshots it may send"
    )
    binding.add_argument(
        "--all-nodes",
        action="store_true",
        help="for an ingest token: may send every node's snapshots (a fleet-wide credential)",
    )
    create.set_defaults(func=run_token_create)
    listing = token_commands.add_parser("list", help="list tokens (never their secrets)")
    listing.set_defaults(func=run_token_list)
    revoke = token_commands.add_parser("revoke", help="revoke a token by name")
    revoke.add_argument("name")
    revoke.set_defaults(func=run_token_revoke)


def run_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from devicedeck.logs import configure_logging
    from devicedeck.migrate import upgrade_to_head

    settings = load_settings()
    configure_logging(settings.log_format, settings.log_level, settings.secret_values())
    if not args.no_migrate:
        upgrade_to_head(settings.database_url)
    url = f"http://{args.host}:{args.port}/"
    # Logged, not printed: with DEVICEDECK_LOG_FORMAT=json every line of output is JSON.
    logging.getLogger(__name__).info(
        f"Devicedeck is serving on {url}", extra={"event": "serving", "url": url}
    )
    if args.forwarded_allow_ips is not None:
        # Where worker_app reads it, in this process and in the worker processes it starts.
        os.environ[FORWARDED_ALLOW_IPS] = args.forwarded_allow_ips
    if args.workers > 1:
        # Each worker process builds its own app (engines and pools are per process).
        uvicorn.run(
            "devicedeck.commands:worker_app",
            factory=True,
            workers=args.workers,
            host=args.host,
            port=args.port,
            log_config=None,
            access_log=False,
            # worker_app applies X-Forwarded-* itself, after noting the connection's address.
            proxy_headers=False,
        )
        return 0
    uvicorn.run(
        worker_app(),
        host=args.host,
        port=args.port,
        log_config=None,
        access_log=False,
        proxy_headers=False,
    )
    return 0


def worker_app() -> Any:
    """The app one serving process runs, built from the environment's settings."""
    from devicedeck.logs import configure_logging
    from devicedeck.main import create_app
    from devicedeck.web.proxy import behind_proxies

    settings = load_settings()
    configure_logging(settings.log_format, settings.log_level, settings.secret_values())
    app = behind_proxies(
        create_app(settings), os.environ.get(FORWARDED_ALLOW_IPS, DEFAULT_FORWARDED_ALLOW_IPS)
    )
    freeze_startup_objects()
    return app


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def freeze_startup_objects() -> None:
    """Keep what startup built out of the garbage collector's full collections.

    Modules, models, routes and schemas are most of the heap and live as long as the process.
    Every full collection used to scan them all, holding up each request in flight for tens of
    milliseconds: frozen, the ingest benchmark's changed-snapshot p99 went from 105-146 ms to
    40-50 ms. Startup's garbage goes first, as reference cycles among frozen objects are never
    collected.
    """
    gc.collect()
    gc.freeze()


def run_migrate(_args: argparse.Namespace) -> int:
    from devicedeck.migrate import upgrade_to_head

    settings = load_settings()
    upgrade_to_head(settings.database_url)
    print("database schema is up to date")
    return 0


@contextmanager
def _factory() -> Iterator[Any]:
    """A session factory whose engine is disposed afterwards, its connections closed."""
    from devicedeck.db import create_db_engine, make_session_factory

    engine = create_db_engine(load_settings().database_url)
    try:
        yield make_session_factory(engine)
    finally:
        engine.dispose()


def run_token_create(args: argparse.Namespace) -> int:
    from devicedeck.clock import utcnow
    from devicedeck.credentials.tokens import create_token, describe_binding
    from devicedeck.db import write_session
    from devicedeck.inventory.errors import InvalidInput

    try:
        with _factory() as factory, write_session(factory) as session:
            token, plaintext = create_token(
                session, args.name, args.scope, utcnow(), node=args.node, all_nodes=args.all_nodes
            )
            scopes = ",".join(token.scopes)
            binding = describe_binding(token)
    except InvalidInput as e:
        for problem in e.problems:
            print(f"error: {problem.field}: {problem.message}", file=sys.stderr)
        return 2
    bound = "" if binding == "-" else f", writing {binding}"
    print(f"created token {args.name!r} with scopes {scopes}{bound}; it is shown only now:")
    print(plaintext)
    return 0


def run_token_list(_args: argparse.Namespace) -> int:
    from devicedeck.credentials.tokens import describe_binding, list_tokens

    with _factory() as factory, factory() as session:
        tokens = list_tokens(session)
        print(
            f"{'NAME':<24} {'SCOPES':<20} {'WRITES':<24} {'CREATED':<26} {'LAST USED':<26} REVOKED"
        )
        for t in tokens:
            print(
                f"{t.name:<24} {','.join(t.scopes):<20} {describe_binding(t):<24} "
                f"{t.created_at.isoformat():<26} "
                f"{t.last_used_at.isoformat() if t.last_used_at else '-':<26} "
                f"{t.revoked_at.isoformat() if t.revoked_at else '-'}"
            )
    return 0


def run_token_revoke(args: argparse.Namespace) -> int:
    from devicedeck.clock import utcnow
    from devicedeck.credentials.tokens import revoke_token
    from devicedeck.db import write_session
    from devicedeck.inventory.errors import NotFound

    try:
        with _factory() as factory, write_session(factory) as session:
            revoke_token(session, args.name, utcnow())
    except NotFound as e:
        print(f"error: {e.message}", file=sys.stderr)
        return 1
    print(f"revoked token {args.name!r}")
    return 0
