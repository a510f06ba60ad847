from __future__ import annotations

import asyncio
import socket
import time

import pytest
from support.loop_watch import count_registrations
from support.waiting import eventually

from ulogstream.adapters.connection import open_transport
from ulogstream.adapters.udp_transport import MAX_BURST, UdpTransport
from ulogstream.config.values import parse_connection
from ulogstream.errors import LinkError
from ulogstream.mavlink_codec import MavlinkCodec
from ulogstream.stream.packets import LoggingAck, LoggingPacket


class LoopTurns:
    """Counts the event loop's turns from :meth:`start`: a task that only yields, once a turn."""

    def __init__(self) -> None:
        self.count = 0
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Start counting from the next turn on."""
        self._task = asyncio.create_task(self._tick())
        await asyncio.sleep(0)
        self.count = 0

    def stop(self) -> None:
        assert self._task is not None
        self._task.cancel()

    async def _tick(self) -> None:
        while True:
            self.count += 1
            await asyncio.sleep(0)


@pytest.mark.asyncio
async def test_frames_round_trip_between_udpout_and_udpin() -> None:
    receiver_link = await UdpTransport.listen("127.0.0.1", 0)
    host, port = receiver_link.local_address
    vehicle_link = await open_transport(parse_connection(f"udpout:{host}:{port}"))
    vehicle, receiver = (
        MavlinkCodec(system_id=1, component_id=1),
        MavlinkCodec(system_id=255, component_id=155),
    )
    try:
        async with asyncio.timeout(5):
            vehicle_link.send(vehicle.encode_logging_data(7, 255, 155, 0, b"ULog\x01", acked=True))
            packets = receiver.decode(await receiver_link.receive())
            assert packets == [
                LoggingPacket(
                    7, 0, b"ULog\x01", needs_ack=True, target_system=255, target_component=155
                )
            ]
            receiver_link.send(receiver.encode_logging_ack(7, 1, 1))  # goes to the vehicle's port
            assert vehicle.decode(await vehicle_link.receive()) == [LoggingAck(7, 255, 155, 1, 1)]
    finally:
        await vehicle_link.aclose()
        await receiver_link.aclose()


@pytest.mark.asyncio
async def test_each_receive_returns_one_whole_datagram() -> None:
    link = await UdpTransport.listen("127.0.0.1", 0)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
        for datagram in (b"first", b"second datagram", b"3"):
            sender.sendto(datagram, link.local_address)
        async with asyncio.timeout(5):
            received = [await link.receive() for _ in range(3)]
    await link.aclose()
    assert received == [b"first", b"second datagram", b"3"]


@pytest.mark.asyncio
async def test_replies_go_to_the_last_sender() -> None:
    link = await UdpTransport.listen("127.0.0.1", 0)
    with (
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as first,
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as second,
    ):
        first.bind(("127.0.0.1", 0))
        second.bind(("127.0.0.1", 0))
        first.settimeout(5)
        second.settimeout(5)
        async with asyncio.timeout(5):
            first.sendto(b"from first", link.local_address)
            assert await link.receive() == b"from first"
            link.send(b"to first")
            second.sendto(b"from second", link.local_address)
            assert await link.receive() == b"from second"
            link.send(b"to second")
        assert link.peer == second.getsockname()
        assert first.recv(100) == b"to first"
        assert second.recv(100) == b"to second"
        assert "peer 127.0.0.1" in link.describe()
    await link.aclose()


@pytest.mark.asyncio
async def test_send_before_anyone_spoke_is_dropped_and_counted() -> None:
    link = await UdpTransport.listen("127.0.0.1", 0)
    link.send(b"nobody to send to")
    assert link.dropped_sends == 1
    await link.aclose()


@pytest.mark.asyncio
async def test_a_flood_of_datagrams_does_not_starve_other_tasks() -> None:
    link = await UdpTransport.listen("127.0.0.1", 0)
    turns = LoopTurns()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
        for index in range(300):  # all queued in the kernel before we read: never would block
            sender.sendto(index.to_bytes(2, "little"), link.local_address)
        await asyncio.sleep(0.05)
        await turns.start()
        async with asyncio.timeout(5):
            received = [await link.receive() for _ in range(300)]
        turns.stop()
    assert received == [index.to_bytes(2, "little") for index in range(300)]
    assert 300 // MAX_BURST <= turns.count < 300
    await link.aclose()


@pytest.mark.asyncio
async def test_aclose_ends_a_waiting_receive() -> None:
    link = await UdpTransport.listen("127.0.0.1", 0)
    waiting = asyncio.create_task(link.receive())
    await asyncio.sleep(0.01)
    await link.aclose()
    async with asyncio.timeout(5):
        assert await waiting == b""
    assert await link.receive() == b""


@pytest.mark.asyncio
async def test_port_in_use_is_a_clear_link_error() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as holder:
        holder.bind(("127.0.0.1", 0))
        port = holder.getsockname()[1]
        with pytest.raises(LinkError, match=f"UDP port {port} on 127.0.0.1 is already in use"):
            await open_transport(parse_connection(f"udpin:127.0.0.1:{port}"))


@pytest.mark.asyncio
async def test_unresolvable_host_is_a_link_error() -> None:
    with pytest.raises(LinkError, match=r"udpout:no-such-host\.invalid:14556: cannot resolve host"):
        await UdpTransport.connect("no-such-host.invalid", 14556)


@pytest.mark.asyncio
@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1"])
async def test_a_host_by_address_or_by_name_carries_datagrams(host: str) -> None:
    # An address is used as it is (no resolver thread); a name goes through getaddrinfo.
    receiver = await UdpTransport.listen(host, 0)
    sender = await UdpTransport.connect(host, receiver.local_address[1])
    try:
        sender.send(b"hello")
        assert await asyncio.wait_for(receiver.receive(), 5) == b"hello"
        assert receiver.peer is not None
        assert receiver.peer[1] == sender.local_address[1]  # replies go back to the sender
    finally:
        await sender.aclose()
        await receiver.aclose()


@pytest.mark.asyncio
async def test_datagrams_nobody_reads_yet_do_not_keep_the_loop_busy() -> None:
    """A readable socket whose reader is busy elsewhere must not wake the loop at every turn.

    The transport keeps its descriptor registered between reads; readable while nobody waits,
    it stops watching until the next wait (which then returns at once with the data).
    """
    link = await UdpTransport.listen("127.0.0.1", 0)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
        sender.sendto(b"first", link.local_address)
        assert await asyncio.wait_for(link.receive(), 5) == b"first"
        sender.sendto(b"second", link.local_address)  # nobody is in receive() now
        started = time.process_time()
        await asyncio.sleep(0.5)
        busy = time.process_time() - started
        assert await asyncio.wait_for(link.receive(), 5) == b"second"
    await link.aclose()
    # An idle loop sleeps in epoll; one kept awake by the unread socket spins through 0.5 s.
    assert busy < 0.2, f"the loop used {busy:.2f} CPU s while it had nothing to do"


@pytest.mark.asyncio
async def test_pump_hands_over_every_datagram_in_order_without_starving_other_tasks() -> None:
    link = await UdpTransport.listen("127.0.0.1", 0)
    received: list[bytes] = []
    all_received = asyncio.Event()
    turns = LoopTurns()

    def handle(data: bytes) -> None:
        received.append(data)
        if len(received) == 300:
            all_received.set()

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
        sender.bind(("127.0.0.1", 0))
        sent = [index.to_bytes(2, "little") for index in range(300)]
        sent[150] = b""  # an empty datagram is a datagram, not the end of the link
        for datagram in sent:  # all queued in the kernel before the pump reads
            sender.sendto(datagram, link.local_address)
        await asyncio.sleep(0.05)
        pump = asyncio.create_task(link.pump(handle))
        await turns.start()
        await asyncio.wait_for(all_received.wait(), 5)
        turns.stop()
        assert link.peer == sender.getsockname()  # udpin follows the sender, as receive() does
    assert received == sent
    assert 300 // MAX_BURST <= turns.count < 300
    await link.aclose()
    async with asyncio.timeout(5):
        await pump  # ends when the transport is closed
    assert await link.receive() == b""


@pytest.mark.asyncio
async def test_pump_raises_what_its_handler_raised_and_the_link_can_still_be_read() -> None:
    link = await UdpTransport.listen("127.0.0.1", 0)
    got: list[bytes] = []

    def handle(data: bytes) -> None:
        if data == b"bad":
            msg = "handler failed"
            raise RuntimeError(msg)
        got.append(data)

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
        for datagram in (b"one", b"bad", b"after"):
            sender.sendto(datagram, link.local_address)
        async with asyncio.timeout(5):
            with pytest.raises(RuntimeError, match="handler failed"):
                await link.pump(handle)
            assert got == [b"one"]
            assert await link.receive() == b"after"  # back to waking receive()
    await link.aclose()


@pytest.mark.asyncio
async def test_cancelling_the_pump_leaves_the_socket_to_receive() -> None:
    link = await UdpTransport.listen("127.0.0.1", 0)
    pump = asyncio.create_task(link.pump(lambda _: None))
    await asyncio.sleep(0.01)
    pump.cancel()
    with pytest.raises(asyncio.CancelledError):
        await pump
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
        sender.sendto(b"later", link.local_address)
        assert await asyncio.wait_for(link.receive(), 5) == b"later"
    await link.aclose()


@pytest.mark.asyncio
async def test_each_drained_burst_is_reported_and_the_socket_stays_watched(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No epoll_ctl per wake-up: the reader is registered once for the whole pump."""
    watched = count_registrations(monkeypatch, asyncio.get_running_loop(), "add_reader")
    link = await UdpTransport.listen("127.0.0.1", 0)
    got: list[bytes] = []
    bursts: list[int] = []

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
        pump = asyncio.create_task(
            link.pump(got.append, after_burst=lambda: bursts.append(len(got)))
        )
        await asyncio.sleep(0.02)
        started = len(watched)
        sender.sendto(b"one", link.local_address)
        await eventually(lambda: bursts[-1:] == [1], what="the first burst")
        for datagram in (b"two", b"three", b"four"):  # sent together: one wake-up reads them
            sender.sendto(datagram, link.local_address)
        await eventually(lambda: got == [b"one", b"two", b"three", b"four"], what="the clump")
        await eventually(lambda: bursts[-1] == 4, what="the clump's end")
        assert 2 <= len(bursts) <= 4  # the loop may wake while the clump is still arriving
        assert len(watched) == started  # never watched anew
    await link.aclose()
    async with asyncio.timeout(5):
        await pump


@pytest.mark.asyncio
async def test_a_burst_of_exactly_max_burst_datagrams_is_reported_too() -> None:
    """The socket is empty after it, so no later wake-up would report it."""
    link = await UdpTransport.listen("127.0.0.1", 0)
    got: list[bytes] = []
    bursts: list[int] = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
        for index in range(MAX_BURST):  # all queued before the pump reads any
            sender.sendto(b"%d" % index, link.local_address)
        pump = asyncio.create_task(
            link.pump(got.append, after_burst=lambda: bursts.append(len(got)))
        )
        await eventually(lambda: len(got) == MAX_BURST, what="the burst")
        await eventually(lambda: bursts[-1:] == [MAX_BURST], what="the burst reported")
    await link.aclose()
    async with asyncio.timeout(5):
        await pump


@pytest.mark.asyncio
async def test_closing_ends_the_pump_and_reads_nothing_more() -> None:
    link = await UdpTransport.listen("127.0.0.1", 0)
    got: list[bytes] = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
        pump = asyncio.create_task(link.pump(got.append))
        sender.sendto(b"one", link.local_address)
        await eventually(lambda: bool(got), what="the first datagram")
        address = link.local_address
        await link.aclose()
        sender.sendto(b"two", address)
        async with asyncio.timeout(1):
            await pump
        await asyncio.sleep(0.05)
    assert got == [b"one"]
