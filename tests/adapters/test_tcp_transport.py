from __future__ import annotations

import asyncio
import socket
from typing import TYPE_CHECKING

import pytest
from support.pty_links import receive_exactly

from ulogstream.adapters.connection import open_transport
from ulogstream.adapters.tcp_transport import TcpServerTransport, TcpTransport
from ulogstream.config.values import parse_connection
from ulogstream.errors import LinkError
from ulogstream.mavlink_codec import MavlinkCodec
from ulogstream.stream.packets import CommandLong, LoggingPacket

if TYPE_CHECKING:
    from ulogstream.adapters.transport import Transport


async def receive_packets(link: Transport, codec: MavlinkCodec, count: int) -> list[object]:
    decoded: list[object] = []
    async with asyncio.timeout(5):
        while len(decoded) < count:
            data = await link.receive()
            assert data, "link closed early"
            decoded += codec.decode(data)
    return decoded


@pytest.mark.asyncio
async def test_frames_round_trip_between_tcpin_and_tcp() -> None:
    server = await TcpServerTransport.listen("127.0.0.1", 0)
    host, port = server.local_address
    client = await open_transport(parse_connection(f"tcp:{host}:{port}"))
    vehicle, receiver = (
        MavlinkCodec(system_id=1, component_id=1),
        MavlinkCodec(system_id=255, component_id=155),
    )
    try:
        client.send(receiver.encode_command_long(2510, 0, 1, 1))
        assert await receive_packets(server, vehicle, 1) == [CommandLong(2510, 0.0, 255, 155, 1, 1)]
        for sequence in range(50):
            server.send(
                vehicle.encode_logging_data(
                    sequence, 255, 155, 0, bytes([sequence]) * 200, acked=False
                )
            )
        packets = await receive_packets(client, receiver, 50)
        assert [p.sequence for p in packets if isinstance(p, LoggingPacket)] == list(range(50))
    finally:
        await client.aclose()
        await server.aclose()


@pytest.mark.asyncio
async def test_server_link_ends_when_its_client_leaves() -> None:
    server = await TcpServerTransport.listen("127.0.0.1", 0)
    client = await TcpTransport.connect(*server.local_address)
    client.send(b"hello")
    async with asyncio.timeout(5):
        assert await server.receive() == b"hello"
        await client.aclose()
        assert await server.receive() == b""
    await server.aclose()


@pytest.mark.asyncio
async def test_server_serves_only_its_first_client() -> None:
    server = await TcpServerTransport.listen("127.0.0.1", 0)
    first = await TcpTransport.connect(*server.local_address)
    first.send(b"first")
    async with asyncio.timeout(5):
        assert await server.receive() == b"first"
        second = await TcpTransport.connect(*server.local_address)
        assert await second.receive() == b""  # turned away
    assert server.rejected_clients == 1
    for link in (second, first, server):
        await link.aclose()


@pytest.mark.asyncio
async def test_server_send_before_a_client_is_dropped_and_counted() -> None:
    server = await TcpServerTransport.listen("127.0.0.1", 0)
    server.send(b"nobody")
    assert server.dropped_sends == 1
    await server.aclose()


@pytest.mark.asyncio
async def test_aclose_ends_waiting_receives() -> None:
    server = await TcpServerTransport.listen("127.0.0.1", 0)
    waiting_for_client = asyncio.create_task(server.receive())
    await asyncio.sleep(0.01)
    await server.aclose()
    async with asyncio.timeout(5):
        assert await waiting_for_client == b""

    server = await TcpServerTransport.listen("127.0.0.1", 0)
    client = await TcpTransport.connect(*server.local_address)
    waiting = asyncio.create_task(client.receive())
    await asyncio.sleep(0.01)
    await client.aclose()
    async with asyncio.timeout(5):
        assert await waiting == b""
    await server.aclose()


@pytest.mark.asyncio
async def test_refused_connection_is_a_link_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # nothing listens here once the probe is closed
    with pytest.raises(
        LinkError, match=f"tcp:127.0.0.1:{port}: cannot connect to 127.0.0.1:{port}"
    ):
        await open_transport(parse_connection(f"tcp:127.0.0.1:{port}"))


@pytest.mark.asyncio
async def test_listening_on_a_port_in_use_is_a_link_error() -> None:
    server = await TcpServerTransport.listen("127.0.0.1", 0)
    port = server.local_address[1]
    with pytest.raises(LinkError, match=f"TCP port {port} on 127.0.0.1 is already in use"):
        await open_transport(parse_connection(f"tcpin:127.0.0.1:{port}"))
    await server.aclose()


class Vehicle:
    """A TCP server that greets each client with ``greeting`` and keeps its writer."""

    def __init__(self, greeting: bytes) -> None:
        self.greeting = greeting
        self.clients: list[asyncio.StreamWriter] = []
        self.server: asyncio.Server | None = None

    async def listen(self, port: int) -> int:
        self.server = await asyncio.start_server(self._accept, "127.0.0.1", port)
        port_number: int = self.server.sockets[0].getsockname()[1]
        return port_number

    def _accept(self, _reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(self.greeting)
        self.clients.append(writer)

    async def close(self) -> None:
        for writer in self.clients:
            writer.close()
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()


@pytest.mark.asyncio
async def test_a_server_that_restarts_on_the_same_port_is_read_after_the_reopen() -> None:
    first = Vehicle(b"first server")
    port = await first.listen(0)
    spec = parse_connection(f"tcp:127.0.0.1:{port}")
    link = await open_transport(spec)
    try:
        assert await receive_exactly(link, 12) == b"first server"
        waiting = asyncio.create_task(link.receive())
        await asyncio.sleep(0)  # the task runs until it waits
        await first.close()
        async with asyncio.timeout(5):
            assert await waiting == b""  # the server went away
    finally:
        await link.aclose()

    second = Vehicle(b"second server")  # greets at once: data waits before the first read
    await second.listen(port)
    try:
        link = await open_transport(spec)
        try:
            assert await receive_exactly(link, 13) == b"second server"
            waiting = asyncio.create_task(link.receive())
            await asyncio.sleep(0)
            second.clients[0].write(b"streaming on")
            async with asyncio.timeout(5):
                got = await waiting
            assert got + await receive_exactly(link, 12 - len(got)) == b"streaming on"
        finally:
            await link.aclose()
    finally:
        await second.close()
