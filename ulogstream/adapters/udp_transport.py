"""UDP links: ``udpin`` listens and replies to the last sender, ``udpout`` sends to one address.

The socket is read directly with ``recvfrom``, never through a protocol's callbacks: the
recorder has each datagram handled inside the event loop's reader callback (:meth:`pump`, no
task woken per datagram), other readers wait for one at a time (:meth:`receive`, which tries
``recvfrom`` first and waits for the loop only when it would block). Per datagram that matters
at thousands of packets per second on a Raspberry Pi. The kernel's receive buffer is the
bounded queue.
"""

from __future__ import annotations

import asyncio
import errno
import socket
from typing import TYPE_CHECKING

from ulogstream.adapters.transport import ReadableWaiter
from ulogstream.errors import LinkError

if TYPE_CHECKING:
    from collections.abc import Callable

Address = tuple[str, int]

MAX_DATAGRAM = 65535
"""Largest UDP payload; MAVLink datagrams are at most a few frames."""

DEFAULT_RECEIVE_BUFFER = 1 << 20
"""Kernel receive buffer asked for (capped by net.core.rmem_max): ~4000 full LOGGING_DATA."""

MAX_BURST = 64
"""Datagrams ``receive`` returns back to back before it lets other tasks run once."""


class UdpTransport:
    """One non-blocking UDP socket; each ``receive`` returns one whole datagram.

    Create it with ``await UdpTransport.listen(...)`` (``udpin``) or
    ``await UdpTransport.connect(...)`` (``udpout``).

    Args:
        sock: A bound, non-blocking UDP socket.
        name: The connection string, for logs.
        peer: Where ``send`` goes; None until a datagram arrives (``udpin``).
        follow_sender: Reply to the sender of the last datagram received (``udpin``).
    """

    def __init__(
        self, sock: socket.socket, *, name: str, peer: Address | None, follow_sender: bool
    ) -> None:
        self._sock = sock
        self._name = name
        self._peer = peer
        self._follow_sender = follow_sender
        self._loop = asyncio.get_running_loop()
        self._readable = ReadableWaiter(sock.fileno())
        self._burst = 0
        self._closed = False
        self._dropped_sends = 0
        sock.settimeout(0.0)  # non-blocking

    @classmethod
    async def listen(
        cls, host: str, port: int, *, receive_buffer: int = DEFAULT_RECEIVE_BUFFER
    ) -> UdpTransport:
        """Bind ``host:port`` (``udpin``); replies go to whoever sent the last datagram.

        Raises:
            LinkError: The host is unknown or the address cannot be bound (in use, not local).
        """
        name = f"udpin:{host}:{port}"
        family, address = await _resolve(name, host, port)
        sock = _udp_socket(family, receive_buffer)
        try:
            sock.bind(address)
        except OSError as err:
            sock.close()
            raise LinkError(_bind_error(name, host, port, err)) from err
        return cls(sock, name=name, peer=None, follow_sender=True)

    @classmethod
    async def connect(
        cls, host: str, port: int, *, receive_buffer: int = DEFAULT_RECEIVE_BUFFER
    ) -> UdpTransport:
        """Send to ``host:port`` (``udpout``) from an ephemeral port; accept datagrams from anyone.

        Raises:
            LinkError: ``host`` cannot be resolved.
        """
        name = f"udpout:{host}:{port}"
        family, address = await _resolve(name, host, port)
        sock = _udp_socket(family, receive_buffer)
        try:
            sock.bind(("::", 0) if family == socket.AF_INET6 else ("", 0))
        except OSError as err:
            sock.close()
            msg = f"{name}: cannot open a UDP socket: {err.strerror or err}"
            raise LinkError(msg) from err
        return cls(sock, name=name, peer=address, follow_sender=False)

    @property
    def local_address(self) -> Address:
        """The bound address (useful after binding port 0)."""
        sockname: tuple[str, int] = self._sock.getsockname()[:2]
        return sockname

    @property
    def peer(self) -> Address | None:
        """Where ``send`` goes now."""
        return self._peer

    @property
    def dropped_sends(self) -> int:
        """Sends dropped: no peer known yet, a full socket buffer, or a network error."""
        return self._dropped_sends

    async def receive(self) -> bytes:
        """Wait for one datagram; ``b""`` once closed.

        Raises:
            LinkError: The socket failed.
        """
        while not self._closed:
            if self._burst < MAX_BURST:
                try:
                    data, sender = self._sock.recvfrom(MAX_DATAGRAM)
                except (BlockingIOError, InterruptedError):
                    pass
                except ConnectionRefusedError:
                    continue  # an ICMP error for an earlier send: UDP is best effort
                except OSError as err:
                    self._close()
                    msg = f"{self._name}: socket failed: {err.strerror or err}"
                    raise LinkError(msg) from err
                else:
                    self._burst += 1
                    if self._follow_sender:
                        # mavutil's udpin: answer on the link the packet came from.
                        self._peer = (str(sender[0]), int(sender[1]))
                    return data
            # Waiting also lets other tasks run after a burst of back-to-back datagrams.
            self._burst = 0
            await self._readable.wait()
        return b""

    async def pump(
        self, handle: Callable[[bytes], object], *, after_burst: Callable[[], None] | None = None
    ) -> None:
        """Hand each datagram to ``handle`` as it arrives, until the transport is closed.

        ``handle`` runs inside the event loop's reader callback, up to :data:`MAX_BURST`
        datagrams per loop turn: no task wakes per datagram, which costs about 10 us less per
        datagram than :meth:`receive` (a receiver's main cost at 2000 packets/s). An empty
        datagram is handed over too (:meth:`receive` would take it for the end).

        The socket stays watched: each wake-up reads what has come. PX4 sends in clumps (one
        per turn of its MAVLink thread), so a wake-up reads a clump; leaving the socket unread
        for a few milliseconds to let more gather cost a timer and two ``epoll_ctl`` calls per
        wake-up and took more CPU on a real PX4, not less (``docs/performance.md``).

        Args:
            handle: Called with each datagram, in order.
            after_burst: Called after each wake-up's burst (at most :data:`MAX_BURST` datagrams).

        Raises:
            LinkError: The socket failed.
            Exception: What ``handle`` raised (the socket is no longer read then).
        """
        recvfrom = self._sock.recvfrom
        follow_sender = self._follow_sender
        last_sender: object = None

        def on_readable() -> None:
            nonlocal last_sender
            for _ in range(MAX_BURST):
                try:
                    data, sender = recvfrom(MAX_DATAGRAM)
                except (BlockingIOError, InterruptedError):
                    break
                except ConnectionRefusedError:
                    continue  # an ICMP error for an earlier send: UDP is best effort
                except OSError as err:
                    msg = f"{self._name}: socket failed: {err.strerror or err}"
                    raise LinkError(msg) from err
                if follow_sender and sender != last_sender:  # nearly always the same one
                    last_sender = sender
                    self._peer = (str(sender[0]), int(sender[1]))
                handle(data)
            # A burst cut at MAX_BURST goes on at the loop's next turn, if more is waiting.
            if after_burst is not None:
                after_burst()

        await self._readable.serve(on_readable)

    def send(self, data: bytes) -> None:
        """Send one datagram to the peer without waiting; dropped (and counted) if it cannot go."""
        peer = self._peer
        if peer is None:
            self._dropped_sends += 1
            return
        self.send_to(data, peer)

    def send_to(self, data: bytes, peer: Address) -> None:
        """Send one datagram to ``peer`` (one of several vehicles behind this socket)."""
        if self._closed:
            self._dropped_sends += 1
            return
        try:
            self._sock.sendto(data, peer)
        except OSError:
            self._dropped_sends += 1  # full buffer or unreachable network: best effort

    async def aclose(self) -> None:
        """Close the socket; a waiting ``receive`` returns ``b""``. Closing twice is allowed."""
        self._close()

    def _close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._readable.close()  # the loop forgets the descriptor before it is closed
        self._sock.close()

    def describe(self) -> str:
        """The connection string, plus the current peer for ``udpin``."""
        if self._follow_sender and self._peer is not None:
            return f"{self._name} (peer {self._peer[0]}:{self._peer[1]})"
        return self._name


async def _resolve(name: str, host: str, port: int) -> tuple[socket.AddressFamily, Address]:
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            socket.inet_pton(family, host)
        except OSError:
            continue
        # An address already (the common case): no resolver thread, no IDNA codec to import.
        return family, (host, port)
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_DGRAM)
    except OSError as err:
        msg = f"{name}: cannot resolve host {host!r}: {err}"
        raise LinkError(msg) from err
    family, _, _, _, sockaddr = infos[0]
    return family, (str(sockaddr[0]), int(sockaddr[1]))


def _udp_socket(family: socket.AddressFamily, receive_buffer: int) -> socket.socket:
    sock = socket.socket(family, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    return sock


def _bind_error(name: str, host: str, port: int, err: OSError) -> str:
    if err.errno == errno.EADDRINUSE:
        return (
            f"{name}: UDP port {port} on {host} is already in use; is another receiver "
            "(QGroundControl, mavlink-router, MAVProxy) running?"
        )
    return f"{name}: cannot bind UDP {host}:{port}: {err.strerror or err}"
