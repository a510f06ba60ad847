"""Test helpers: wait for a condition instead of sleeping a fixed time and hoping it holds.

A fixed sleep followed by an assertion fails on a loaded machine (the work took longer) and wastes
time on an idle one. These helpers poll the condition and return as soon as it holds; the limit
only decides when to give up, so it is generous. For a property that must *stay* true (nothing
is repeated, nothing is retried), :func:`holds_for` and :func:`stays_true` check it throughout a
window and fail at the first violation.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Coroutine

WAIT_LIMIT = 20.0
"""Default seconds before giving up: generous for a 2-core machine shared with other jobs."""

POLL_INTERVAL = 0.02
"""Seconds between two checks of the condition."""


def _give_up(what: str, limit: float) -> AssertionError:
    return AssertionError(f"{what}: not within {limit} s")


async def eventually(
    condition: Callable[[], bool], *, limit: float = WAIT_LIMIT, what: str = "condition"
) -> None:
    """Wait (asynchronously) until ``condition()`` holds.

    Raises:
        AssertionError: It did not within ``limit`` seconds (the message names ``what``).
    """
    deadline = time.monotonic() + limit
    while not condition():
        if time.monotonic() > deadline:
            raise _give_up(what, limit)
        await asyncio.sleep(POLL_INTERVAL)


def wait_until(
    condition: Callable[[], bool], *, limit: float = WAIT_LIMIT, what: str = "condition"
) -> None:
    """Block until ``condition()`` holds (for tests that drive subprocesses synchronously).

    Raises:
        AssertionError: It did not within ``limit`` seconds (the message names ``what``).
    """
    deadline = time.monotonic() + limit
    while not condition():
        if time.monotonic() > deadline:
            raise _give_up(what, limit)
        time.sleep(POLL_INTERVAL)


async def holds_for(condition: Callable[[], bool], seconds: float, *, what: str) -> None:
    """Check (asynchronously) that ``condition()`` stays true for ``seconds``.

    Raises:
        AssertionError: It became false (the message names ``what``).
    """
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert condition(), what
        await asyncio.sleep(POLL_INTERVAL)
    assert condition(), what


def stays_true(condition: Callable[[], bool], seconds: float, *, what: str) -> None:
    """Check (blocking) that ``condition()`` stays true for ``seconds``.

    Raises:
        AssertionError: It became false (the message names ``what``).
    """
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert condition(), what
        time.sleep(POLL_INTERVAL)
    assert condition(), what


@contextlib.asynccontextmanager
async def running(work: Coroutine[object, object, None]) -> AsyncIterator[asyncio.Task[None]]:
    """Run ``work`` (a sink's or a worker's ``run()``) as a task for the block; cancel it after."""
    task = asyncio.create_task(work)
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
