"""Test helper: record which descriptors an event loop is asked to watch."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Callable

    import pytest


def count_registrations(
    monkeypatch: pytest.MonkeyPatch,
    loop: asyncio.AbstractEventLoop,
    method: Literal["add_reader", "add_writer"],
) -> list[int]:
    """From now on, each descriptor ``loop.<method>`` registers (it still registers it).

    Each registration is an ``epoll_ctl`` and, for a writer, a loop turn: the tests count them
    where the hot path must not make any.
    """
    registered: list[int] = []
    register = getattr(loop, method)

    def counted(fd: int, callback: Callable[..., object], *args: object) -> None:
        registered.append(fd)
        register(fd, callback, *args)

    monkeypatch.setattr(loop, method, counted)
    return registered
