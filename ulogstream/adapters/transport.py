"""The Transport protocol every link (UDP, TCP, serial) implements for the receive loop."""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Callable

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

    The descriptor stays registered with the loop while its reader keeps reading: on a slow link
    (a radio's 32-byte pieces) every read is followed by a wait, and registering and removing the
    reader for each would cost two ``epoll_ctl`` calls per piece. When it becomes readable while
    nobody waits, the registration is dropped (a readable descriptor would wake the loop at every
    turn until read) and made again by the next :meth:`wait`. :meth:`close` must be called
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
        self._readable = False
        self._registered = False
        self._closed = False
        # ``fd`` was just opened, so any registration under its number is stale: one left by
        # code that closed its descriptor without removing it. Drop it, or add_reader would only
        # update the loop's table and never ask the kernel to watch the new descriptor.
        with contextlib.suppress(OSError):  # the kernel already forgot the closed descriptor
            self._loop.remove_reader(fd)
        with contextlib.suppress(OSError):
            self._loop.remove_writer(fd)
        self._loop.add_reader(fd, self._on_readable)
        self._registered = True

    def _on_readable(self) -> None:
        waiting = self._waiting
        if waiting is None:
            # Readable while nobody waits: the next wait returns at once. Stop watching until
            # then, or the loop would run this at every turn while the data stays unread.
            self._readable = True
            self._loop.remove_reader(self._fd)
            self._registered = False
        elif not waiting.done():
            waiting.set_result(None)

    async def wait(self) -> None:
        """Return once ``fd`` is readable, or at once after :meth:`close`.

        It always lets the other tasks run first, even when ``fd`` was already readable.
        """
        if self._closed:
            return
        if self._readable:
            self._readable = False
            await asyncio.sleep(0)
            return
        if not self._registered:
            self._loop.add_reader(self._fd, self._on_readable)
            self._registered = True
        readable = self._loop.create_future()
        self._waiting = readable
        try:
            await readable
        finally:
            self._waiting = None

    async def serve(self, on_readable: Callable[[], None]) -> None:
        """Run ``on_readable`` from the loop each time ``fd`` is readable, until :meth:`close`.

        The callback reads the descriptor itself, so no task wakes per chunk: one loop turn per
        wake-up instead of two (the callback, then the waiting task). It must read only a bounded
        amount per call; the loop calls it again at its next turn while data is left.

        Raises:
            Exception: What ``on_readable`` raised; the descriptor is no longer watched then.
        """
        if self._closed:
            return
        loop = self._loop
        fd = self._fd
        ended: asyncio.Future[None] = loop.create_future()

        def run() -> None:
            try:
                on_readable()
            except Exception as err:  # noqa: BLE001 (raised again by the awaiting task)
                loop.remove_reader(fd)
                self._registered = False
                if not ended.done():
                    ended.set_exception(err)

        loop.add_reader(fd, run)
        self._registered = True
        self._waiting = ended  # close() ends it
        try:
            await ended
        finally:
            self._waiting = None
            if not self._closed:  # back to waking wait() (or to noticing unread data)
                loop.add_reader(fd, self._on_readable)
                self._registered = True

    def close(self) -> None:
        """Stop watching ``fd`` (before it is closed) and release a waiting :meth:`wait`."""
        if self._closed:
            return
        self._closed = True
        self._loop.remove_reader(self._fd)
        self._registered = False
        if self._waiting is not None and not self._waiting.done():
            self._waiting.set_result(None)
