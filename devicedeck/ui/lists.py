"""What the list pages (nodes, devices, DRA devices, pods, events) share: run the query when
is valid, and answer with the page, its problems (422) and its canonical URL."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

from devicedeck.inventory.errors import InvalidInput
from devicedeck.ui.forms import Form, problems_of
from devicedeck.ui.render import View
from devicedeck.ui.templating import query_url

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


def list_page(
    form: Form,
    query: Callable[[str | None, int], Any],
    *,
    filters: tuple[str, ...],
    kept: tuple[str, ...] = (),
    template: str,
    path: str,
    title: str,
    region: str,
    **context: Any,
) -> View:
    """A filterable list page: `query(cursor, limit)` run when the form is valid, the filters
    (and `kept`, a sort say) kept in the page's URL, and whether any filter is set."""
    limit = form.page_size()
    cursor = form.cursor()
    state = form.state(*filters, *kept, "limit")
    page, problems = run_list_query(form, lambda: query(cursor, limit))
    return list_view(
        template=template,
        path=path,
        title=title,
        region=region,
        page=page,
        problems=problems,
        state=state,
        cursor=cursor,
        filtered=any(state[name] for name in filters),
        **context,
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
