"""TCP links: ``tcp`` connects to a MAVLink TCP server, ``tcpin`` serves one client."""

from __future__ import annotations

import asyncio
import contextlib
import errno

from ulogstream.adapters.transport import DEFAULT_MAX_WRITE_BUFFER
from ulogstream.errors import LinkError

READ_SIZE = 1 << 16
"""Largest chunk one ``receive`` returns."""

DEFAULT_CONNECT_TIMEOUT = 5.0
"""Seconds ``TcpTransport.connect`` waits for the server to accept."""


class TcpTransport:
    """A TCP stream: ``receive`` returns whatever one read got (frames may be split).

    Create it with ``await TcpTransport.connect(...)`` (``tcp:HOST:PORT``), or get one from
    ``TcpServerTransport``.

    Args:
        reader: The asyncio stream reader.
        writer: The asyncio stream writer.
        name: The connection string, for logs.
        max_write_buffer: Bytes held for a slow peer before ``send`` drops data.
    """

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        name: str,
        max_write_buffer: int = DEFAULT_MAX_WRITE_BUFFER,
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._name = name
        self._max_write_buffer = max_write_buffer
        self._dropped_sends = 0

    @classmethod
    async def connect(
        cls,
        host: str,
        port: int,
        *,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        max_write_buffer: int = DEFAULT_MAX_WRITE_BUFFER,
    ) -> TcpTransport:
        """Connect to ``host:port``.

        Raises:
            LinkError: The server refused, was silent for ``connect_timeout`` s, or is unknown.
        """
        name = f"tcp:{host}:{port}"
        try:
            async with asyncio.timeout(connect_timeout):
                reader, writer = await asyncio.open_connection(host, port)
        except TimeoutError as err:
            msg = f"{name}: no answer from {host}:{port} within {connect_timeout:g} s"
            raise LinkError(msg) from err
        except OSError as err:
            msg = f"{name}: cannot connect to {host}:{port}: {err.strerror or err}"
            raise LinkError(msg) from err
        return cls(reader, writer, name=name, max_write_buffer=max_write_buffer)

    @property
    def dropped_sends(self) -> int:
        """Sends dropped because the connection was closing or its buffer was full."""
        return self._dropped_sends

    async def receive(self) -> bytes:
        """Wait for the next bytes; ``b""`` when the peer or ``aclose`` closed the connection.

        Raises:
            LinkError: The connection broke (reset by the peer, network error).
        """
        try:
            return await self._reader.read(READ_SIZE)
        except OSError as err:
            msg = f"{self._name}: connection lost: {err.strerror or err}"
            raise LinkError(msg) from err

    def send(self, data: bytes) -> None:
        """Queue ``data`` without waiting; dropped (and counted) when the peer is not reading."""
        writer = self._writer
        if writer.is_closing() or writer.transport.get_write_buffer_size() > self._max_write_buffer:
            self._dropped_sends += 1
            return
        writer.write(data)

    async def aclose(self) -> None:
        """Close the connection; a waiting ``receive`` returns ``b""``."""
        self._writer.close()
        with contextlib.suppress(OSError):  # already broken: closing is all that was asked
            await self._writer.wait_closed()

    def describe(self) -> str:
        """The connection string."""
        return self._name


class TcpServerTransport:
    """``tcpin:HOST:PORT``: listen and serve the first client that connects, only that one.

    ``receive`` waits for the client; when it leaves, ``receive`` returns ``b""`` and the server
    stops listening. Later clients are turned away while one is served. ``send`` before a client
    connects is dropped. Create it with ``await TcpServerTransport.listen(...)``.

    Args:
        name: The connection string, for logs.
        max_write_buffer: Bytes held for a slow client before ``send`` drops data.
    """

    def __init__(self, *, name: str, max_write_buffer: int = DEFAULT_MAX_WRITE_BUFFER) -> None:
        self._name = name
        self._max_write_buffer = max_write_buffer
        self._server: asyncio.Server | None = None
        self._client: TcpTransport | None = None
        self._connected: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._closed = False
        self._dropped_sends = 0
        self.rejected_clients = 0

    @classmethod
    async def listen(
        cls, host: str, port: int, *, max_write_buffer: int = DEFAULT_MAX_WRITE_BUFFER
    ) -> TcpServerTransport:
        """Listen on ``host:port``.

        Raises:
            LinkError: The address cannot be bound (port in use, address not local).
        """
        name = f"tcpin:{host}:{port}"
        transport = cls(name=name, max_write_buffer=max_write_buffer)
        try:
            transport._server = await asyncio.start_server(transport._accept, host, port)
        except OSError as err:
            if err.errno == errno.EADDRINUSE:
                msg = f"{name}: TCP port {port} on {host} is already in use"
            else:
                msg = f"{name}: cannot listen on {host}:{port}: {err.strerror or err}"
            raise LinkError(msg) from err
        return transport

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._client is not None or self._closed:
            self.rejected_clients += 1
            writer.close()
            return
        self._client = TcpTransport(
            reader, writer, name=self._name, max_write_buffer=self._max_write_buffer
        )
        if not self._connected.done():
            self._connected.set_result(None)

    @property
    def local_address(self) -> tuple[str, int]:
        """The address listened on (useful after binding port 0)."""
        if self._server is None:
            msg = "local_address before listen()"
            raise RuntimeError(msg)
        sockname: tuple[str, int] = self._server.sockets[0].getsockname()[:2]
        return sockname

    @property
    def dropped_sends(self) -> int:
        """Sends dropped: no client yet, or the client's buffer was full."""
        client = self._client
        return self._dropped_sends + (0 if client is None else client.dropped_sends)

    async def receive(self) -> bytes:
        """Wait for a client, then for its next bytes; ``b""`` once it left or we closed.

        Raises:
            LinkError: The client's connection broke.
        """
        if not self._connected.done():
            await self._connected
        client = self._client
        if client is None or self._closed:
            return b""
        data = await client.receive()
        if not data and self._server is not None:
            self._server.close()  # one client only: the link ends with it
        return data

    def send(self, data: bytes) -> None:
        """Send to the client without waiting; dropped (and counted) while there is none."""
        if self._client is None:
            self._dropped_sends += 1
            return
        self._client.send(data)

    async def aclose(self) -> None:
        """Stop listening and close the client; a waiting ``receive`` returns ``b""``."""
        self._closed = True
        if not self._connected.done():
            self._connected.set_result(None)
        if self._client is not None:
            await self._client.aclose()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    def describe(self) -> str:
        """The connection string."""
        return self._name
