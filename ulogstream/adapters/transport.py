"""The Transport protocol every link (UDP, TCP, serial) implements for the receive loop."""

from __future__ import annotations

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
