"""The live view's public socket: viewers of both Foxglove WebSocket subprotocols, one server.

foxglove-sdk 0.30's server accepts only the subprotocol ``foxglove.sdk.v1``; Foxglove Studio 1.x
and Lichtblick before 1.22.1 offer only ``foxglove.websocket.v1``, whose frames are the same, and
would be refused with HTTP 400. So the SDK's server listens on a loopback port of its own and this
front owns the address viewers open: it reads each viewer's WebSocket upgrade request, names the
SDK's subprotocol in it, hands it on, names the viewer's own subprotocol in the answer, and from
then on copies bytes both ways unchanged (the frames, their masks and any compression are the two
ends' business). With TLS configured, the front is where ``wss://`` ends.

The copying runs on threads of its own (two per viewer, blocking sockets): the event loop that
acks the vehicle never carries a viewer's bytes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import ssl
import threading
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from ulogstream.config.values import ListenAddress

logger = logging.getLogger("ulogstream")

SDK_SUBPROTOCOL: Final = "foxglove.sdk.v1"
"""What foxglove-sdk's server accepts (Foxglove 2.x, Lichtblick 1.22.1 and newer offer it)."""

LEGACY_SUBPROTOCOL: Final = "foxglove.websocket.v1"
"""What Foxglove Studio 1.x and Lichtblick before 1.22.1 offer: the same frames."""

SUBPROTOCOLS: Final = (SDK_SUBPROTOCOL, LEGACY_SUBPROTOCOL)
"""The subprotocols a viewer may offer, in the order they are chosen."""

MAX_HEAD: Final = 16 * 1024
"""The longest HTTP head read from a viewer or the SDK (a browser's upgrade is under 1 KiB)."""

_CHUNK: Final = 256 * 1024


class FoxgloveFront:
    """Listens at ``listen`` for viewers and joins each to the SDK's server at ``upstream_port``.

    Args:
        listen: The address viewers open (``foxglove.listen``, parsed; port 0: any free port).
        upstream_port: The SDK server's port on 127.0.0.1.
        tls: Serve ``wss://`` with this context (None: plain ``ws://``).

    Raises:
        OSError: ``listen`` cannot be listened on.
    """

    def __init__(
        self, *, listen: ListenAddress, upstream_port: int, tls: ssl.SSLContext | None
    ) -> None:
        self._upstream = ("127.0.0.1", upstream_port)
        self._tls = tls
        family = socket.getaddrinfo(listen.host, listen.port, type=socket.SOCK_STREAM)[0][0]
        self._listener = socket.create_server((listen.host, listen.port), family=family)
        self.port: int = self._listener.getsockname()[1]
        """The bound port."""
        self._sockets: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._closed = False
        self.viewers: dict[int, str] = {}
        """Connected viewers: the local port of the front's connection to the SDK (what the
        SDK's log names) -> the viewer's address."""
        self._thread = threading.Thread(target=self._accept, name="foxglove-front", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop listening and cut every viewer's connection."""
        with self._lock:
            self._closed = True
            sockets = list(self._sockets)
            self._sockets.clear()
        _close(self._listener)
        for sock in sockets:
            _close(sock)
        self._thread.join(timeout=5)

    # -- threads --------------------------------------------------------------------------------

    def _accept(self) -> None:
        while True:
            try:
                viewer, peer = self._listener.accept()
            except OSError:
                return  # closed
            threading.Thread(
                target=self._join, args=(viewer, peer), name="foxglove-viewer", daemon=True
            ).start()

    def _join(self, viewer: socket.socket, peer: tuple[object, ...]) -> None:
        """Hand ``viewer``'s upgrade to the SDK, then copy bytes both ways until either closes."""
        where = f"{peer[0]}:{peer[1]}"
        if not self._track(viewer):
            return
        upstream: socket.socket | None = None
        try:
            if self._tls is not None:
                viewer = self._tls.wrap_socket(viewer, server_side=True)
                self._track(viewer)
            head, rest = _read_head(viewer)
            request, chosen = upgrade_request(head)
            if chosen is None and _offered(head):
                logger.warning(
                    "Foxglove viewer at %s refused: it offered the WebSocket subprotocols %s, "
                    "this server speaks %s (Foxglove 1.x and 2.x, Lichtblick)",
                    where,
                    ", ".join(_offered(head)),
                    " and ".join(SUBPROTOCOLS),
                )
            upstream = socket.create_connection(self._upstream, timeout=5)
            upstream.settimeout(None)
            if not self._track(upstream):
                return
            local_port: int = upstream.getsockname()[1]
            self.viewers[local_port] = where
            upstream.sendall(request + rest)
            answer, early = _read_head(upstream)
            viewer.sendall(upgrade_answer(answer, chosen) + early)
        except (OSError, ValueError) as err:
            logger.info("Foxglove viewer at %s: connection ended before it began (%s)", where, err)
            self._untrack(viewer, upstream)
            return
        back = threading.Thread(
            target=_copy, args=(upstream, viewer), name="foxglove-viewer-out", daemon=True
        )
        back.start()
        _copy(viewer, upstream)
        back.join()
        self.viewers.pop(local_port, None)
        self._untrack(viewer, upstream)

    def _track(self, sock: socket.socket) -> bool:
        with self._lock:
            if self._closed:
                _close(sock)
                return False
            self._sockets.add(sock)
            return True

    def _untrack(self, *socks: socket.socket | None) -> None:
        for sock in socks:
            if sock is not None:
                with self._lock:
                    self._sockets.discard(sock)
                _close(sock)


def upgrade_request(head: bytes) -> tuple[bytes, str | None]:
    """``head`` (an HTTP request head) naming the SDK's subprotocol, and the one to answer with.

    A request offering ``foxglove.sdk.v1`` or ``foxglove.websocket.v1`` offers the SDK's alone;
    any other request goes on unchanged (the SDK answers it) and the chosen subprotocol is None.
    """
    offered = _offered(head)
    chosen = next((name for name in SUBPROTOCOLS if name in offered), None)
    if chosen is None:
        return head, None
    lines = [
        line for line in head.split(b"\r\n") if not _is_header(line, b"sec-websocket-protocol")
    ]
    # the head ends with an empty line: insert before it
    lines.insert(len(lines) - 2, b"Sec-WebSocket-Protocol: " + SDK_SUBPROTOCOL.encode())
    return b"\r\n".join(lines), chosen


def upgrade_answer(head: bytes, chosen: str | None) -> bytes:
    """The SDK's answer ``head`` naming ``chosen`` (the viewer's own subprotocol) instead."""
    if chosen is None or chosen == SDK_SUBPROTOCOL:
        return head
    lines = [
        b"Sec-WebSocket-Protocol: " + chosen.encode()
        if _is_header(line, b"sec-websocket-protocol")
        else line
        for line in head.split(b"\r\n")
    ]
    return b"\r\n".join(lines)


def _offered(head: bytes) -> list[str]:
    """The subprotocols a request head offers, in its order."""
    offered: list[str] = []
    for line in head.split(b"\r\n")[1:]:
        if _is_header(line, b"sec-websocket-protocol"):
            value = line.split(b":", 1)[1].decode("latin-1")
            offered.extend(name.strip() for name in value.split(",") if name.strip())
    return offered


def _is_header(line: bytes, name: bytes) -> bool:
    key, colon, _ = line.partition(b":")
    return bool(colon) and key.strip().lower() == name


def _read_head(sock: socket.socket) -> tuple[bytes, bytes]:
    """An HTTP head (through its empty line) read from ``sock``, and any bytes after it.

    Raises:
        ValueError: The peer closed first, or the head is longer than :data:`MAX_HEAD`.
    """
    data = b""
    while True:
        end = data.find(b"\r\n\r\n")
        if end >= 0:
            return data[: end + 4], data[end + 4 :]
        if len(data) > MAX_HEAD:
            msg = f"HTTP head longer than {MAX_HEAD} bytes"
            raise ValueError(msg)
        chunk = sock.recv(4096)
        if not chunk:
            msg = "closed during the WebSocket handshake"
            raise ValueError(msg)
        data += chunk


def _copy(source: socket.socket, target: socket.socket) -> None:
    """Copy bytes from ``source`` to ``target`` until either end closes; then close both ways.

    Between plain sockets the kernel moves the bytes (``splice`` through a pipe): they never
    enter Python. A TLS socket's bytes (and any on a system without ``splice``) are copied
    through a buffer.
    """
    try:
        tls = isinstance(source, ssl.SSLSocket) or isinstance(target, ssl.SSLSocket)
        if tls or not hasattr(os, "splice"):  # splice: Linux only
            _copy_through_buffer(source, target)
        else:
            _splice(source.fileno(), target.fileno())
    except OSError:
        pass  # either end gone: both ways end
    for sock in (source, target):
        _shutdown(sock)


def _splice(source: int, target: int) -> None:
    """Move bytes from socket ``source`` to socket ``target`` in the kernel, until EOF."""
    read_end, write_end = os.pipe()
    try:
        while True:
            n = os.splice(source, write_end, _CHUNK)
            if n == 0:
                return
            while n:
                n -= os.splice(read_end, target, n)
    finally:
        os.close(read_end)
        os.close(write_end)


def _copy_through_buffer(source: socket.socket, target: socket.socket) -> None:
    buffer = bytearray(_CHUNK)
    view = memoryview(buffer)
    while True:
        n = source.recv_into(buffer)
        if n == 0:
            return
        target.sendall(view[:n])


def _shutdown(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


def _close(sock: socket.socket) -> None:
    _shutdown(sock)
    sock.close()
