"""Query parameters every list route takes alike."""

from __future__ import annotations

from typing import Annotated

from fastapi import Query

from devicedeck.inventory.fields import CURSOR_MAX, NAME_MAX
from devicedeck.inventory.read.pagination import MAX_LIMIT

Limit = Annotated[int, Query(ge=1, le=MAX_LIMIT, description="page size")]
Cursor = Annotated[
    str | None, Query(max_length=CURSOR_MAX, description="from the `next` URL of the previous page")
]
# A node, pod, driver or pool name, or a device ID.
Text = Annotated[str | None, Query(max_length=NAME_MAX)]
