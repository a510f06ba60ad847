"""The Transport protocol every link (UDP, TCP, serial) implements for the receive loop."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Protocol

DEFAULT_MAX_WRITE_BUFFER = 1 << 16
"""Bytes a stream transport holds for a slow peer before ``send`` drops data."""


class Transport(Protocol):
    """A bidirectional byte link to a MAVLink peer.

    ``receive`` yields raw chunks (one UDP datagram, or whatever a serial or TCP read returned);
    it does no parsing. ``send`` never waits: the ack path must not block on the network, so a
    transport that cannot take more data drops it and counts it in ``dropped_sends``.
    """

    @property
    def dropped_sends(self) -> int:
        """Sends dropped because there was no peer yet or the outgoing buffer was full."""
        ...

    async def receive(self) -> bytes:
        """Wait for the next chunk of bytes from the peer.

        Returns:
            At least one byte, or ``b""`` once the link is closed (by ``aclose`` or by the peer).

        Raises:
            LinkError: The link failed (device unplugged, socket error); reopen it to go on.
        """
        ...

    def send(self, data: bytes) -> None:
        """Queue ``data`` for the peer without waiting (best effort)."""
        ...

    async def aclose(self) -> None:
        """Close the link; a pending ``receive`` returns ``b""``. Closing twice is allowed."""
        ...

    def describe(self) -> str:
        """Name the link for log messages, e.g. ``udpin:0.0.0.0:14550``."""
        ...


class ReadableWaiter:
    """Waits until a non-blocking file descriptor has data, on the running event loop.

    The transports read their descriptor directly until it would block, then wait here; this
    costs one event-loop wake-up per burst instead of a protocol callback per chunk.

    Every registration is removed before :meth:`wait` returns, and :meth:`close` must be called
    before the descriptor is closed. A registration that outlives its descriptor (the loop does
    not notice the close) would be taken for the next descriptor given the same number, a USB
    device plugged in again, which would then never be read.

    Args:
        fd: The descriptor (a socket's or a serial port's), just opened.
    """

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._loop = asyncio.get_running_loop()
        self._waiting: asyncio.Future[None] | None = None
        self._closed = False
        # ``fd`` was just opened, so any registration under its number is stale: one left by
        # code that closed its descriptor without removing it. Drop it, or add_reader would only
        # update the loop's table and never ask the kernel to watch the new descriptor.
        with contextlib.suppress(OSError):  # the kernel already forgot the closed descriptor
            self._loop.remove_reader(fd)
        with contextlib.suppress(OSError):
            self._loop.remove_writer(fd)

    async def wait(self) -> None:
        """Return once ``fd`` is readable, or at once after :meth:`close`."""
        if self._closed:
            return
        readable = self._loop.create_future()
        self._waiting = readable
        self._loop.add_reader(self._fd, _set_done, readable)
        try:
            await readable
        finally:
            self._waiting = None
            if not self._closed:
                self._loop.remove_reader(self._fd)

    def close(self) -> None:
        """Stop watching ``fd`` (before it is closed) and release a waiting :meth:`wait`."""
        if self._closed:
            return
        self._closed = True
        self._loop.remove_reader(self._fd)
        if self._waiting is not None:
            _set_done(self._waiting)


def _set_done(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
