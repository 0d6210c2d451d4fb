"""The leader's election task ends when it is cancelled (the service shutting down), whenever
the cancellation comes: a lost one left the shutdown waiting for ever."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from devicedeck.runtime.leadership import Leadership, _still_connected


class HeldStatement:
    """A connection whose `SELECT 1` ends when the test says so."""

    def __init__(self) -> None:
        self.answer: asyncio.Future[None] | None = None

    async def execute(self, _query: str) -> None:
        self.answer = asyncio.get_running_loop().create_future()
        await self.answer


def test_a_cancellation_as_the_check_ends_is_kept() -> None:
    async def scenario() -> None:
        conn = HeldStatement()
        check = asyncio.create_task(_still_connected(conn))  # type: ignore[arg-type]
        while conn.answer is None:
            await asyncio.sleep(0)
        conn.answer.set_result(None)
        check.cancel()
        with pytest.raises(asyncio.CancelledError):
            await check

    asyncio.run(scenario())


def test_a_cancellation_while_the_work_is_ending_is_kept() -> None:
    async def scenario() -> None:
        cleaning = asyncio.Event()
        cleaned = asyncio.Event()

        async def work() -> None:
            try:
                await asyncio.Future()
            finally:
                cleaning.set()
                await cleaned.wait()

        async def lost() -> bool:
            return False

        leadership = Leadership("sqlite:///unused.db")
        lead: Any = asyncio.create_task(leadership._lead(work, lost))
        await cleaning.wait()  # the lock was lost and the work is being stopped
        lead.cancel()
        cleaned.set()
        with pytest.raises(asyncio.CancelledError):
            await lead
        assert not leadership.leading

    asyncio.run(scenario())
