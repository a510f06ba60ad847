from __future__ import annotations

import asyncio
import os
import tty
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from support.pty_links import point_symlink, receive_exactly

from ulogstream.adapters.connection import open_transport
from ulogstream.adapters.serial_transport import SerialTransport
from ulogstream.config.values import parse_connection
from ulogstream.errors import LinkError
from ulogstream.mavlink_codec import MavlinkCodec
from ulogstream.stream.packets import LoggingAck, LoggingPacket, MavlinkMessage

if TYPE_CHECKING:
    from collections.abc import Iterator

    from ulogstream.adapters.transport import Transport


class Pty:
    """A real pseudo-terminal: the test plays the autopilot on the master side."""

    def __init__(self) -> None:
        self.master, self.slave = os.openpty()
        tty.setraw(self.master)
        tty.setraw(self.slave)
        self.device = os.ttyname(self.slave)
        self.master_open = True

    def close_master(self) -> None:
        if self.master_open:
            os.close(self.master)
            self.master_open = False

    def close(self) -> None:
        self.close_master()
        os.close(self.slave)


@pytest.fixture(name="pty")
def fixture_pty() -> Iterator[Pty]:
    pty = Pty()
    yield pty
    pty.close()


async def read_master(pty: Pty, size: int) -> bytes:
    loop = asyncio.get_running_loop()
    got = b""
    async with asyncio.timeout(5):
        while len(got) < size:
            await asyncio.sleep(0.005)
            got += await loop.run_in_executor(None, os.read, pty.master, size - len(got))
    return got


async def decode_until(
    link: SerialTransport, codec: MavlinkCodec, count: int
) -> list[MavlinkMessage]:
    decoded: list[MavlinkMessage] = []
    async with asyncio.timeout(5):
        while len(decoded) < count:
            decoded += codec.decode(await link.receive())
    return decoded


@pytest.mark.asyncio
async def test_frames_split_across_reads_decode(pty: Pty) -> None:
    link = await open_transport(parse_connection(f"{pty.device}:921600"))
    assert isinstance(link, SerialTransport)
    vehicle, receiver = (
        MavlinkCodec(system_id=1, component_id=1),
        MavlinkCodec(system_id=255, component_id=155),
    )
    stream = b"".join(
        vehicle.encode_logging_data(sequence, 255, 155, 0, bytes([sequence]) * 249, acked=False)
        for sequence in range(20)
    )
    reads = 0

    async def autopilot() -> None:
        for start in range(0, len(stream), 100):  # 100-byte writes split every frame
            os.write(pty.master, stream[start : start + 100])
            await asyncio.sleep(0.001)

    writer = asyncio.create_task(autopilot())
    decoded: list[MavlinkMessage] = []
    async with asyncio.timeout(5):
        while len(decoded) < 20:
            decoded += receiver.decode(await link.receive())
            reads += 1
    await writer
    assert [p.sequence for p in decoded if isinstance(p, LoggingPacket)] == list(range(20))
    assert reads > 1
    assert receiver.bad_frames == receiver.skipped_bytes == 0
    await link.aclose()


@pytest.mark.asyncio
async def test_sent_frames_reach_the_autopilot(pty: Pty) -> None:
    link = SerialTransport.open(pty.device, 57600)
    receiver, vehicle = (
        MavlinkCodec(system_id=255, component_id=155),
        MavlinkCodec(system_id=1, component_id=1),
    )
    ack = receiver.encode_logging_ack(300, 1, 1)
    link.send(ack)
    assert await read_master(pty, len(ack)) == ack
    assert vehicle.decode(ack) == [LoggingAck(300, 255, 155, 1, 1)]
    assert link.describe() == f"{pty.device}:57600"
    await link.aclose()


@pytest.mark.asyncio
async def test_device_vanishing_raises_a_link_error(pty: Pty) -> None:
    link = SerialTransport.open(pty.device, 57600)
    waiting = asyncio.create_task(link.receive())
    await asyncio.sleep(0.01)
    pty.close_master()  # what a USB unplug looks like to the reader: a hangup
    async with asyncio.timeout(5):
        with pytest.raises(LinkError, match=f"serial device {pty.device} stopped working") as info:
            await waiting
    assert isinstance(info.value.__cause__, OSError) or "end of file" in str(info.value)
    await link.aclose()


@pytest.mark.asyncio
async def test_aclose_ends_a_waiting_receive(pty: Pty) -> None:
    link = SerialTransport.open(pty.device, 57600)
    waiting = asyncio.create_task(link.receive())
    await asyncio.sleep(0.01)
    await link.aclose()
    async with asyncio.timeout(5):
        assert await waiting == b""
    link.send(b"late")
    assert link.dropped_sends == 1


@pytest.mark.asyncio
async def test_missing_device_says_to_plug_the_autopilot_in() -> None:
    with pytest.raises(
        LinkError,
        match=r"serial device /dev/ttyNOPE9 does not exist; is the autopilot plugged in\?",
    ):
        await open_transport(parse_connection("/dev/ttyNOPE9"))


@pytest.mark.asyncio
async def test_device_in_use_is_a_link_error(pty: Pty) -> None:
    first = SerialTransport.open(pty.device, 57600)
    with pytest.raises(LinkError, match=f"serial device {pty.device} is in use by another program"):
        SerialTransport.open(pty.device, 57600)
    await first.aclose()


async def receive_exactly_from(first: asyncio.Task[bytes], link: Transport, size: int) -> bytes:
    """What the pending ``receive`` task ``first`` got, then more until ``size`` bytes."""
    async with asyncio.timeout(5):
        got = await first
    return got + (await receive_exactly(link, size - len(got)) if len(got) < size else b"")


@pytest.mark.asyncio
async def test_a_device_plugged_back_at_the_same_path_is_read(tmp_path: Path) -> None:
    device = tmp_path / "pixhawk"
    first = Pty()
    point_symlink(device, first.device)
    spec = parse_connection(str(device))
    link = await open_transport(spec)
    try:
        os.write(first.master, b"before the unplug")
        assert await receive_exactly(link, 17) == b"before the unplug"
        waiting = asyncio.create_task(link.receive())  # registered with the loop while unplugged
        await asyncio.sleep(0)  # the task runs until it waits
        first.close_master()
        async with asyncio.timeout(5):
            with pytest.raises(LinkError, match="stopped working"):
                await waiting
    finally:
        await link.aclose()
        first.close()

    second = Pty()  # plugged back: a new device behind the same path
    try:
        point_symlink(device, second.device)
        # PX4 streams on: bytes are waiting before the recorder opens the device again.
        os.write(second.master, b"sent while closed")
        link = await open_transport(spec)
        try:
            assert await receive_exactly(link, 17) == b"sent while closed"
            waiting = asyncio.create_task(link.receive())  # now read through the loop's selector
            await asyncio.sleep(0)  # the task runs until it waits
            os.write(second.master, b"after the replug")
            assert await receive_exactly_from(waiting, link, 16) == b"after the replug"
        finally:
            await link.aclose()
    finally:
        second.close()


def opened_file(fd: int) -> str:
    """The path descriptor ``fd`` of this process was opened from."""
    return str(Path(f"/proc/self/fd/{fd}").readlink())


@pytest.mark.asyncio
async def test_a_registration_left_behind_by_other_code_does_not_blind_the_port(pty: Pty) -> None:
    # Some code watched a descriptor and closed it without telling the loop: the kernel forgot
    # it, the loop did not. Our port is then opened under the same number.
    loop = asyncio.get_running_loop()
    stale, other_end = os.pipe()
    loop.add_reader(stale, lambda: None)
    os.close(stale)
    os.close(other_end)
    link = await open_transport(parse_connection(pty.device))
    try:
        assert opened_file(stale) == pty.device, "the port did not get the same number"
        waiting = asyncio.create_task(link.receive())
        await asyncio.sleep(0)  # the task runs until it waits
        os.write(pty.master, b"still read")
        assert await receive_exactly_from(waiting, link, 10) == b"still read"
    finally:
        await link.aclose()


@pytest.mark.asyncio
async def test_wake_after_reads_a_frame_once_it_is_whole(pty: Pty) -> None:
    """With ``wake_after(n)`` the reader sleeps through pieces and reads all n bytes in one go.

    Linux returns at most 64 bytes per tty read while VMIN is above 64; the transport reads on
    until it has everything that is waiting.
    """
    link = await open_transport(parse_connection(f"{pty.device}:57600"))
    assert isinstance(link, SerialTransport)
    os.write(pty.master, b"a" * 32)
    assert await link.receive() == b"a" * 32
    link.wake_after(200)
    receiving = asyncio.create_task(link.receive())
    for _ in range(5):  # 160 bytes in 32-byte pieces, as a radio writes them: no wake-up
        os.write(pty.master, b"b" * 32)
        await asyncio.sleep(0.01)
    assert not receiving.done()
    os.write(pty.master, b"c" * 40)  # 200 bytes waiting
    async with asyncio.timeout(5):
        data = await receiving
    assert data == b"b" * 160 + b"c" * 40
    link.wake_after(1)
    os.write(pty.master, b"d")
    async with asyncio.timeout(5):
        assert await link.receive() == b"d"
    await link.aclose()


@pytest.mark.asyncio
async def test_a_device_gone_wakes_a_reader_waiting_for_more_bytes(pty: Pty) -> None:
    link = await open_transport(parse_connection(f"{pty.device}:57600"))
    assert isinstance(link, SerialTransport)
    os.write(pty.master, b"a")
    assert await link.receive() == b"a"
    link.wake_after(255)
    receiving = asyncio.create_task(link.receive())
    os.write(pty.master, b"x" * 10)
    await asyncio.sleep(0.02)
    assert not receiving.done()
    pty.close_master()
    # The hangup wakes it; the 10 bytes (part of a frame that can never end) go with the device.
    async with asyncio.timeout(5):
        with pytest.raises(LinkError, match="unplugged"):
            await receiving
    await link.aclose()
