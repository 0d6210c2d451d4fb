"""What a real server does with callers that would tie it up: a body from a caller without a
valid token is never read, a body that stalls is cut off with 408, and requests beyond the
concurrency limit are turned away with 503 while the probes keep answering.

Each test speaks HTTP/1.1 over a raw socket to uvicorn, since what matters is what reaches the
wire before (or without) the body being sent.
"""

from __future__ import annotations

import json
import select
import socket
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from devicedeck.config import Settings
from devicedeck.main import create_app

from .conftest import dev, listandwatch, live_server, wait_until

LAW = "/api/v1/ingest/listandwatch"
# Well under the 3 MiB body limit, so a 413 for the declared length cannot be the answer.
DECLARED = 3_000_000
PATIENCE = 60.0


class Answer:
    def __init__(self, raw: bytes) -> None:
        head, _, self.body = raw.partition(b"\r\n\r\n")
        status_line, *lines = head.decode("latin-1").split("\r\n")
        self.status_code = int(status_line.split()[1])
        self.headers = {
            name.strip().lower(): value.strip()
            for name, _, value in (line.partition(":") for line in lines)
        }

    def json(self) -> Any:
        return json.loads(self.body)


def connect(url: str) -> socket.socket:
    parts = urlsplit(url)
    sock = socket.create_connection((parts.hostname, parts.port), timeout=PATIENCE)
    return sock


def send_head(sock: socket.socket, method: str, path: str, headers: dict[str, str]) -> None:
    lines = [
        f"{method} {path} HTTP/1.1",
        "Host: devicedeck.test",
        *(f"{k}: {v}" for k, v in headers.items()),
    ]
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())


def read_answer(sock: socket.socket) -> Answer:
    """One response read to its Content-Length; fails if none comes within PATIENCE."""
    raw = b""
    while b"\r\n\r\n" not in raw:
        chunk = sock.recv(65536)
        assert chunk, f"the server closed the connection without answering: {raw!r}"
        raw += chunk
    answer = Answer(raw)
    length = int(answer.headers["content-length"])
    while len(answer.body) < length:
        chunk = sock.recv(65536)
        assert chunk, "the server closed the connection in the middle of its answer"
        answer.body += chunk
    return answer


def closed_by_server(sock: socket.socket) -> bool:
    """Whether the server closes the connection (within PATIENCE) after its answer."""
    try:
        return sock.recv(65536) == b""
    except ConnectionResetError:
        return True


@pytest.fixture
def serve(settings: Settings) -> Iterator[Callable[..., str]]:
    """A real server for the test's database with some settings changed; its base URL."""
    with ExitStack() as stack:

        def start(**overrides: Any) -> str:
            app = create_app(settings.model_copy(update=overrides))
            return stack.enter_context(live_server(app))

        yield start


def json_head(length: int = DECLARED, **extra: str) -> dict[str, str]:
    return {"Content-Type": "application/json", "Content-Length": str(length), **extra}


@pytest.mark.parametrize(
    ("authorization", "status", "message"),
    [
        (None, 401, "bearer token is required"),
        ("Bearer dd_not-a-token-anyone-was-given", 401, "unknown or revoked"),
        ("Basic dXNlcjpwYXNz", 401, "Bearer <token>"),
        ("read-only", 403, "lacks the 'ingest' scope"),
    ],
)
def test_a_caller_without_a_valid_token_is_refused_before_its_body_is_sent(
    serve: Callable[..., str],
    make_token: Callable[..., str],
    db_rows: Callable[..., dict],
    authorization: str | None,
    status: int,
    message: str,
) -> None:
    url = serve()
    head = json_head()
    if authorization == "read-only":
        head["Authorization"] = f"Bearer {make_token('read')}"
    elif authorization is not None:
        head["Authorization"] = authorization
    before = db_rows()
    with connect(url) as sock:
        send_head(sock, "POST", LAW, head)
        # Not one byte of the 3 MB the request announced has been sent.
        answer = read_answer(sock)
        assert answer.status_code == status, answer.body
        assert message in answer.json()["error"]["message"]
        assert answer.headers["connection"] == "close"
        assert closed_by_server(sock)
    assert db_rows() == before


def test_an_admin_request_without_a_token_is_refused_before_its_body_is_sent(
    serve: Callable[..., str], make_token: Callable[..., str]
) -> None:
    url = serve()
    ingest_only = f"Bearer {make_token('ingest')}"
    for headers, status in (({}, 401), ({"Authorization": ingest_only}, 403)):
        with connect(url) as sock:
            send_head(sock, "POST", "/api/v1/tokens", json_head(**headers))
            answer = read_answer(sock)
            assert answer.status_code == status, answer.body
            assert closed_by_server(sock)


def test_a_dashboard_form_without_a_sign_in_goes_to_the_login_page_unread(
    serve: Callable[..., str],
) -> None:
    url = serve()
    with connect(url) as sock:
        head = {"Content-Type": "application/x-www-form-urlencoded", "Content-Length": "100000"}
        send_head(sock, "POST", "/nodes/node-a/extended-resources", head)
        answer = read_answer(sock)
        assert answer.status_code == 303, answer.body
        assert answer.headers["location"].startswith("/login?next=")
        assert closed_by_server(sock)


def test_a_valid_token_still_gets_its_snapshot_read_and_applied(
    serve: Callable[..., str], make_token: Callable[..., str]
) -> None:
    url = serve()
    body = json.dumps(listandwatch("node-a", [dev("gpu-0")], 1)).encode()
    with connect(url) as sock:
        send_head(
            sock, "POST", LAW, json_head(len(body), Authorization=f"Bearer {make_token('ingest')}")
        )
        sock.sendall(body)
        answer = read_answer(sock)
        assert answer.status_code == 200, answer.body
        assert answer.json()["added"] == 1


def test_a_stalled_body_gets_408_and_its_connection_closed(
    serve: Callable[..., str], make_token: Callable[..., str], db_rows: Callable[..., dict]
) -> None:
    url = serve(body_read_timeout=1.0)
    body = json.dumps(listandwatch("node-a", [dev("gpu-0")], 1)).encode()
    head = json_head(len(body), Authorization=f"Bearer {make_token('ingest')}")
    before = db_rows()
    with connect(url) as sock:
        send_head(sock, "POST", LAW, head)
        sock.sendall(body[:20])
        answer = read_answer(sock)
        assert answer.status_code == 408, answer.body
        error = answer.json()["error"]
        assert error["code"] == "request_timeout"
        assert error["details"] == [
            {"field": "body", "rule": "read_timeout", "message": "must arrive within 1 seconds"}
        ]
        assert answer.headers["connection"] == "close"
        assert closed_by_server(sock)
    assert db_rows() == before


def test_the_read_timeout_default(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().body_read_timeout == 30
    monkeypatch.setenv("DEVICEDECK_BODY_READ_TIMEOUT", "2.5")
    assert Settings().body_read_timeout == 2.5


def stalled_uploads(stack: ExitStack, url: str, token: str, count: int) -> list[socket.socket]:
    """`count` requests that hold a place each: a token that passes, a body that never ends."""
    socks = []
    for _ in range(count):
        sock = stack.enter_context(connect(url))
        send_head(sock, "POST", LAW, json_head(1000, Authorization=f"Bearer {token}"))
        sock.sendall(b'{"node": ')
        socks.append(sock)
    return socks


@contextmanager
def every_place_held(url: str, token: str, limit: int) -> Iterator[Answer]:
    """Every place taken by a stalled upload; yields the answer of the one upload too many.

    One upload more than the limit, and no other request: whatever order they arrive in, the
    limit's worth are let in and hold their places, and exactly one is turned away.
    """
    with ExitStack() as stack:
        socks = stalled_uploads(stack, url, token, limit + 1)
        answered, _, _ = select.select(socks, [], [], PATIENCE)
        assert len(answered) == 1, f"{len(answered)} of {limit + 1} uploads were answered"
        yield read_answer(answered[0])


def test_snapshots_beyond_the_ingest_limit_get_503_while_reads_and_probes_answer(
    serve: Callable[..., str], make_token: Callable[..., str]
) -> None:
    url = serve(max_concurrent_ingest=2, body_read_timeout=600)
    reader = {"Authorization": f"Bearer {make_token('read')}"}
    with httpx.Client(base_url=url, timeout=PATIENCE) as http:
        with every_place_held(url, make_token("ingest"), 2) as turned_away:
            assert turned_away.status_code == 503
            assert turned_away.headers["retry-after"] == "1"
            error = turned_away.json()["error"]
            assert error["code"] == "overloaded"
            assert "2 ingest requests at once" in error["message"]
            # Reads have places of their own.
            assert http.get("/api/v1/nodes", headers=reader).status_code == 200
            assert http.get("/livez").status_code == 200
            assert http.get("/readyz").status_code == 200
        # The stalled senders gave up: their places are free again.
        body = listandwatch("node-a", [dev("gpu-0")], 1)
        agent = {"Authorization": f"Bearer {make_token('ingest')}"}
        wait_until(
            lambda: http.post(LAW, json=body, headers=agent).status_code == 200,
            what="snapshots to be answered again",
        )


def test_reads_beyond_their_limit_get_503(
    serve: Callable[..., str], make_token: Callable[..., str]
) -> None:
    url = serve(max_concurrent_requests=1)
    reader = {"Authorization": f"Bearer {make_token('read')}"}
    with httpx.Client(base_url=url, timeout=PATIENCE) as http, connect(url) as sock:
        # A token creation whose body never comes holds the one place of the reads' class.
        send_head(sock, "POST", "/api/v1/tokens", json_head(1000, **admin_head(make_token)))
        sock.sendall(b"{")
        wait_until(
            lambda: http.get("/api/v1/nodes", headers=reader).status_code == 503,
            what="the read to be turned away",
        )
        answer = http.get("/api/v1/nodes", headers=reader)
        assert "1 requests at once" in answer.json()["error"]["message"]


def admin_head(make_token: Callable[..., str]) -> dict[str, str]:
    return {"Authorization": f"Bearer {make_token('admin')}"}


def hanging_form_posts(stack: ExitStack, url: str, path: str, count: int) -> list[socket.socket]:
    """Anonymous form posts that announce 1000 bytes and send one."""
    socks = []
    for _ in range(count):
        sock = stack.enter_context(connect(url))
        head = {"Content-Type": "application/x-www-form-urlencoded", "Content-Length": "1000"}
        send_head(sock, "POST", path, head)
        sock.sendall(b"t")
        socks.append(sock)
    return socks


@pytest.mark.parametrize("path", ["/login", "/logout"])
def test_hanging_anonymous_form_posts_leave_agents_and_readers_answered(
    serve: Callable[..., str], make_token: Callable[..., str], path: str
) -> None:
    # Long read timeouts: the posts hang for the whole test, none is cut off meanwhile.
    url = serve(body_read_timeout=600, form_read_timeout=600)
    agent = {"Authorization": f"Bearer {make_token('ingest')}"}
    reader = {"Authorization": f"Bearer {make_token('read')}"}
    with ExitStack() as stack, httpx.Client(base_url=url, timeout=PATIENCE) as http:
        socks = hanging_form_posts(stack, url, path, 110)
        # The forms' 20 places are taken, and every post over them has been turned away.
        wait_until(
            lambda: len(select.select(socks, [], [], 0)[0]) == 110 - 20,
            what="the posts over the forms' limit to be turned away",
        )
        answered = select.select(socks, [], [], 0)[0]
        assert {read_answer(sock).status_code for sock in answered} == {503}
        for seq, health in enumerate(("Healthy", "Unhealthy", "Healthy"), start=1):
            snapshot = listandwatch("node-a", [dev("gpu-0", health)], seq)
            assert http.post(LAW, json=snapshot, headers=agent).status_code == 200
            assert http.get("/api/v1/nodes", headers=reader).status_code == 200
            assert http.get("/livez").status_code == 200


def test_a_form_body_gets_a_shorter_read_timeout_than_a_snapshot(
    serve: Callable[..., str],
) -> None:
    url = serve(form_read_timeout=1.0, body_read_timeout=600)
    with ExitStack() as stack:
        (sock,) = hanging_form_posts(stack, url, "/login", 1)
        answer = read_answer(sock)
        assert answer.status_code == 408
        assert answer.json()["error"]["details"][0]["message"] == "must arrive within 1 seconds"


def test_a_caller_who_has_its_answer_finds_its_place_free(
    serve: Callable[..., str], make_token: Callable[..., str]
) -> None:
    """One place, one caller asking again as soon as each answer arrives: never turned away,
    however late the server gets round to finishing the request it answered."""
    url = serve(max_concurrent_requests=1)
    reader = {"Authorization": f"Bearer {make_token('read')}"}
    with httpx.Client(base_url=url, timeout=PATIENCE) as http:
        answers = [http.get("/api/v1/nodes", headers=reader).status_code for _ in range(50)]
    assert answers == [200] * 50


def test_an_open_event_stream_does_not_hold_a_place(
    serve: Callable[..., str], make_token: Callable[..., str]
) -> None:
    url = serve(max_concurrent_requests=1)
    reader = {"Authorization": f"Bearer {make_token('read')}"}
    with (
        httpx.Client(base_url=url, timeout=PATIENCE) as http,
        http.stream("GET", "/ui/stream", headers=reader) as stream,
    ):
        assert stream.status_code == 200
        assert stream.headers["content-type"].startswith("text/event-stream")
        assert http.get("/api/v1/nodes", headers=reader).status_code == 200


def test_the_concurrency_limit_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().max_concurrent_requests == 100
    assert Settings().max_concurrent_ingest == 100
    assert Settings().max_concurrent_forms == 20
    assert Settings().form_read_timeout == 5
    monkeypatch.setenv("DEVICEDECK_MAX_CONCURRENT_REQUESTS", "0")
    with pytest.raises(ValueError, match="max_concurrent_requests"):
        Settings()


def test_every_route_that_takes_a_body_checks_its_caller_first() -> None:
    from fastapi.routing import APIRoute, iter_route_contexts

    from devicedeck.web.caller_first import CallerFirstRoute, marked_checks

    app = create_app(Settings())
    with_body = [
        context.original_route
        for context in iter_route_contexts(app.router.routes)
        if isinstance(context.original_route, APIRoute)
        and context.original_route.body_field is not None
    ]
    assert len(with_body) >= 4, "ingest (2), token creation, extended resources"
    for route in with_body:
        assert marked_checks(route.dependant), f"{route.path} checks no caller"
        assert isinstance(route, CallerFirstRoute), f"{route.path} reads its body first"
