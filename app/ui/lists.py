"""What the four list pages (nodes, devices, pods, events) share: run the query when the form
is valid, and answer with the page, its problems (422) and its canonical URL."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

from app.inventory.errors import InvalidInput
from app.ui.forms import Form, problems_of
from app.ui.render import View
from app.ui.templating import query_url

PageT = TypeVar("PageT")


def run_list_query(
    form: Form, query: Callable[[], PageT]
) -> tuple[PageT | None, list[dict[str, str]]]:
    """The page, or None with the problems: the form's own, or the query's refusal."""
    problems = form.problem_dicts()
    if not form.ok:
        return None, problems
    try:
        return query(), problems
    except InvalidInput as e:
        return None, problems_of(e)


def list_view(
    *,
    template: str,
    path: str,
    title: str,
    region: str,
    page: Any,
    problems: list[dict[str, str]],
    state: dict[str, Any],
    cursor: str | None,
    **context: Any,
) -> View:
    return View(
        template,
        {"page": page, "state": state, "problems": problems, "cursor": cursor, **context},
        title=title,
        nav=path.strip("/"),
        regions=(region,),
        canonical=query_url(path, state, cursor=cursor),
        status=422 if problems else 200,
    )


def export_url(path: str, filters: Any, **extra: str) -> str:
    """The API's CSV of what a page's filters show (a dataclass of them): times as RFC 3339
    (an age typed into the page becomes the time it meant), booleans as true/false."""
    params: dict[str, str] = {}
    for name, value in vars(filters).items():
        if value is None or name == "after_id":
            continue
        if isinstance(value, bool):
            params[name] = "true" if value else "false"
        elif isinstance(value, datetime):
            params[name] = value.isoformat()
        else:
            params[name] = str(value)
    return query_url(path, params, **extra, format="csv")
