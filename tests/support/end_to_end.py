"""Helpers of the end-to-end tests: a recorder and a simulated PX4 on real links, plus oracles.

The oracle of a lossy run is built from ground truth, not from the receiver's logic: the pure
vehicle model packetises the log offline (every packet's byte range in the file), the delivery
report says which of those packets arrived and in what order, and the theoretical maximum is
every whole message that lies inside a run of consecutive packets and starts at or after the
first message start PX4 declared in that run (the run from packet 0 starts at the header).
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import errno
import io
import os
import tty
from collections import deque
from typing import TYPE_CHECKING

import msgspec
from pyulog import ULog

from ulogstream.adapters.udp_transport import UdpTransport
from ulogstream.config.sections import LinkSettings, RecordingSettings, Settings
from ulogstream.mavlink_codec import MavlinkCodec
from ulogstream.sim.faults import NO_FAULTS, FaultConfig
from ulogstream.sim.flightlog import generate_flight_log
from ulogstream.sim.runner import SimSummary, run_vehicle
from ulogstream.sim.vehicle import (
    DeliveredPacket,
    LogStreamEnded,
    SendLoggingData,
    SimVehicle,
    VehicleConfig,
    VehicleOutput,
)
from ulogstream.stream.packets import (
    MAV_CMD_LOGGING_START,
    MAV_CMD_LOGGING_STOP,
    MAV_CMD_REQUEST_MESSAGE,
    MAV_COMP_ID_AUTOPILOT1,
    MAV_COMP_ID_LOG,
    CommandLong,
    LoggingAck,
    LoggingPacket,
    MavlinkMessage,
)
from ulogstream.stream.reassembler import (
    DATA_SECTION_TYPES,
    DEFAULT_REORDER_PACKETS,
    DEFAULT_REORDER_TIME,
)
from ulogstream.stream.session import DEFAULT_SYSTEM_ID
from ulogstream.ulog.spec import HEADER_SIZE, MESSAGE_HEADER_SIZE, MessageType
from ulogstream.ulog.spec import unpack_message_header as _unpack_header

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from pathlib import Path

    import pytest

    from ulogstream.adapters.transport import Transport
    from ulogstream.recorder.recorder import Recorder

RECEIVER_SYSTEM = DEFAULT_SYSTEM_ID
RECEIVER_COMPONENT = MAV_COMP_ID_LOG
FAST = VehicleConfig(link_rate=None, speed=None, stop_accept_delay=0.0)
"""A vehicle that streams as fast as the loop turns: lossless, for tests where timing is moot."""
SEQUENCE_MODULO = 0x10000
NEWER_LIMIT = 0x8000


# ---------------------------------------------------------------------------------------------
# The log as messages


def flight_log(duration_s: float, seed: int = 0, start_timestamp_us: int = 16_000_000) -> bytes:
    """A generated PX4 flight log of ``duration_s`` seconds (about 52 KB per second)."""
    out = io.BytesIO()
    generate_flight_log(
        out, duration_s=duration_s, seed=seed, start_timestamp_us=start_timestamp_us
    )
    return out.getvalue()


class Span(msgspec.Struct, frozen=True):
    """One ULog message (or the 16-byte file header, ``msg_type`` 0) at ``start:end``."""

    start: int
    end: int
    msg_type: int


def spans(log: bytes) -> list[Span]:
    """The file header and every whole message of ``log``, in order (a cut-off tail is left out)."""
    found = [Span(0, HEADER_SIZE, 0)]
    position = HEADER_SIZE
    while position + MESSAGE_HEADER_SIZE <= len(log):
        size, msg_type = _unpack_header(log, position)
        end = position + MESSAGE_HEADER_SIZE + size
        if end > len(log):
            break
        found.append(Span(position, end, msg_type))
        position = end
    return found


Item = bytes | None
"""A recorded message's bytes, or None for a dropout ('O') message."""


def recorded_items(recording: bytes) -> tuple[list[Item], list[int]]:
    """The recording as a list of messages with dropouts as None, and the dropout durations (ms).

    Raises:
        AssertionError: The recording does not end on a message boundary.
    """
    items: list[Item] = [recording[:HEADER_SIZE]]
    durations: list[int] = []
    for span in spans(recording)[1:]:
        if span.msg_type == MessageType.DROPOUT:
            items.append(None)
            durations.append(int.from_bytes(recording[span.start + 3 : span.end], "little"))
        else:
            items.append(recording[span.start : span.end])
    assert spans(recording)[-1].end == len(recording), "the recording ends inside a message"
    return items, durations


def assert_loss_marked(log: bytes, recording: bytes, said: str) -> None:
    """``recording`` holds ``log``'s messages in order, with the loss between them marked.

    What a recording of a simulated PX4 that dropped packets in its buffer holds (a loaded
    machine makes it, as PX4's logger does when its writer falls behind); ``said`` explains a
    failure (the recorder's and the vehicle's counters).
    """
    items, durations = recorded_items(recording)
    assert durations, said  # the loss is marked
    log_messages = iter(log[span.start : span.end] for span in spans(log))
    assert all(item in log_messages for item in items if item is not None), said


def read_pyulog(path: Path) -> ULog:
    """Parse ``path`` with pyulog and check that it saw no corruption."""
    ulog = ULog(str(path))
    assert not ulog.file_corruption, f"pyulog found corruption in {path}"
    return ulog


# ---------------------------------------------------------------------------------------------
# Offline packetisation by the pure vehicle model


def _command(command: int) -> CommandLong:
    return CommandLong(
        command=command,
        param1=0.0,
        system_id=RECEIVER_SYSTEM,
        component_id=RECEIVER_COMPONENT,
        target_system=1,
        target_component=MAV_COMP_ID_AUTOPILOT1,
    )


def _ack(sequence: int) -> LoggingAck:
    return LoggingAck(
        sequence=sequence,
        system_id=RECEIVER_SYSTEM,
        component_id=RECEIVER_COMPONENT,
        target_system=1,
        target_component=MAV_COMP_ID_AUTOPILOT1,
    )


def vehicle_packets(log: bytes, *, synthesize_perf: bool = False) -> list[LoggingPacket]:
    """Every packet the simulated PX4 publishes for ``log`` in order: START, all data, STOP.

    A perfect, instantly acking receiver on a link without a rate limit drives the pure model.
    """
    config = VehicleConfig(
        link_rate=None, speed=None, stop_accept_delay=0.0, synthesize_perf=synthesize_perf
    )
    vehicle = SimVehicle(log, now=0.0, config=config)
    now = 0.0
    packets: list[LoggingPacket] = []
    pending: deque[VehicleOutput] = deque(vehicle.receive(_command(MAV_CMD_LOGGING_START), now))
    stopping = False
    while True:
        while pending:
            output = pending.popleft()
            if isinstance(output, SendLoggingData):
                packet = output.packet
                packets.append(packet)
                if packet.needs_ack:
                    pending.extend(vehicle.receive(_ack(packet.sequence), now))
            elif isinstance(output, LogStreamEnded):
                return packets
        if vehicle.waiting_for_stop and not stopping:
            stopping = True
            pending.extend(vehicle.receive(_command(MAV_CMD_LOGGING_STOP), now))
            continue
        deadline = vehicle.next_deadline()
        now = now if deadline is None else max(now, deadline)
        pending.extend(vehicle.handle_timer(now))


# ---------------------------------------------------------------------------------------------
# The theoretical maximum of a lossy stream


def _packet_indexes(
    packets: Sequence[LoggingPacket], delivered: Sequence[DeliveredPacket]
) -> list[int]:
    """Index into ``packets`` of each delivery (sequence numbers unwrapped), checked by content."""
    indexes: list[int] = []
    last = 0
    for delivery in delivered:
        step = (delivery.sequence - last) % SEQUENCE_MODULO
        index = last + (step if step < NEWER_LIMIT else step - SEQUENCE_MODULO)
        packet = packets[index]
        assert (packet.data, packet.first_message_offset) == (
            delivery.data,
            delivery.first_message_offset,
        ), f"delivery of #{delivery.sequence} is not packet {index} of the offline model"
        indexes.append(index)
        last = index
    return indexes


def theoretical_maximum(
    log: bytes, packets: Sequence[LoggingPacket], delivered: Sequence[DeliveredPacket]
) -> list[Item]:
    """What an ideal receiver records from ``delivered`` (one log's frames, in arrival order).

    Args:
        log: The streamed file.
        packets: :func:`vehicle_packets` of ``log``.
        delivered: The deliveries of this log, as the receiver got them.

    Returns:
        The messages, with None where a dropout ('O') belongs: before the first message written
        after a gap, once the definitions section is over.
    """
    begins = [0]
    for packet in packets:
        begins.append(begins[-1] + len(packet.data))
    assert begins[-1] == len(log), "the offline packets do not cover the log"
    accepted: list[int] = []
    for index in _packet_indexes(packets, delivered):
        if not accepted:
            if index == 0:
                accepted.append(index)
            continue
        if 1 <= index - accepted[-1] < NEWER_LIMIT:
            accepted.append(index)
    runs: list[list[int]] = []
    for index in accepted:
        if runs and runs[-1][-1] + 1 == index:
            runs[-1].append(index)
        else:
            runs.append([index])
    items: list[Item] = []
    all_spans = spans(log)
    starts = [span.start for span in all_spans]
    pending = False
    data_seen = False
    for number, run in enumerate(runs):
        pending = pending or number > 0
        if number == 0:
            first_start: int | None = 0
        else:
            first_start = next(
                (
                    begins[i] + packets[i].first_message_offset
                    for i in run
                    if packets[i].first_message_offset != 255  # no message start
                ),
                None,
            )
        if first_start is None:
            continue
        run_end = begins[run[-1] + 1]
        for span in all_spans[bisect.bisect_left(starts, first_start) :]:
            if span.end > run_end:
                break
            if pending:
                pending = False
                if data_seen:
                    items.append(None)
            items.append(log[span.start : span.end])
            data_seen = data_seen or span.msg_type in DATA_SECTION_TYPES
    return items


def in_sequence_order(delivered: Sequence[DeliveredPacket]) -> list[DeliveredPacket]:
    """``delivered`` sorted by unwrapped sequence: what a receiver with a reorder window takes.

    Every reordering the simulated wire makes (latency +- jitter) stays within the receiver's
    window, so an ideal receiver takes every delivered packet in its place.
    """
    keyed: list[tuple[int, int, DeliveredPacket]] = []
    last = 0
    for arrival, delivery in enumerate(delivered):
        step = (delivery.sequence - last) % SEQUENCE_MODULO
        index = last + (step if step < NEWER_LIMIT else step - SEQUENCE_MODULO)
        keyed.append((index, arrival, delivery))
        last = index
    return [delivery for _, _, delivery in sorted(keyed, key=lambda k: (k[0], k[1]))]


def within_reorder_window(
    delivered: Sequence[DeliveredPacket],
    *,
    window_s: float = DEFAULT_REORDER_TIME,
    window_packets: int = DEFAULT_REORDER_PACKETS,
) -> list[DeliveredPacket]:
    """The deliveries an ideal receiver with a reorder window takes, in sequence order.

    Times are when each frame left the simulated wire (the recorder reads it then: both run on
    one event loop, so a stall of the process delays both alike). A packet missing when a later
    one arrived is waited for ``window_s`` from the oldest held packet's arrival, or until more
    than ``window_packets`` are held; arriving after that, it is lost, as in the reassembler.
    On a loaded machine the wire itself can stretch past the window: this counts what was
    delivered in time, not what the wire's settings promise.
    """
    ordered = sorted(enumerate(delivered), key=lambda item: (item[1].time, item[0]))
    unwrapped: dict[int, int] = {}
    last = 0
    for arrival, delivery in enumerate(delivered):  # unwrap in arrival order
        step = (delivery.sequence - last) % SEQUENCE_MODULO
        unwrapped[arrival] = last + (step if step < NEWER_LIMIT else step - SEQUENCE_MODULO)
        last = unwrapped[arrival]
    taken: list[tuple[int, DeliveredPacket]] = []
    held: dict[int, tuple[float, DeliveredPacket]] = {}
    last_taken: int | None = None

    def take_following() -> None:
        nonlocal last_taken
        while last_taken is not None and last_taken + 1 in held:
            last_taken += 1
            taken.append((last_taken, held.pop(last_taken)[1]))

    def release_oldest_gap() -> None:
        nonlocal last_taken
        index = min(held)
        last_taken = index
        taken.append((index, held.pop(index)[1]))
        take_following()

    for arrival, delivery in ordered:
        index = unwrapped[arrival]
        while held and delivery.time >= min(t for t, _ in held.values()) + window_s:
            release_oldest_gap()
        if last_taken is None:
            if index == 0:
                last_taken = 0
                taken.append((0, delivery))
            continue
        if index <= last_taken or index in held:
            continue  # a duplicate, or late past its window: what the receiver drops
        if index == last_taken + 1:
            last_taken = index
            taken.append((index, delivery))
            take_following()
        else:
            held[index] = (delivery.time, delivery)
            if len(held) > window_packets:
                release_oldest_gap()
    while held:
        release_oldest_gap()
    return [delivery for _, delivery in sorted(taken, key=lambda item: item[0])]


def deliveries_of(summary: SimSummary, log_index: int) -> list[DeliveredPacket]:
    """The frames of log ``log_index`` that reached the receiver, in order."""
    return [d for d in summary.deliveries if d.log_index == log_index]


# ---------------------------------------------------------------------------------------------
# Links


class PtyPair(msgspec.Struct):
    """A real pseudo-terminal: the recorder opens ``device``, the vehicle writes on ``master``.

    The test keeps the slave open too, so the master never reads EIO between the recorder's
    closing and reopening the device.
    """

    master: int
    slave: int
    device: str

    @classmethod
    def open(cls) -> PtyPair:
        """Open a raw pair (no echo: the vehicle must not read its own frames back)."""
        master, slave = os.openpty()
        tty.setraw(master)
        tty.setraw(slave)
        return cls(master, slave, os.ttyname(slave))

    def close(self) -> None:
        """Close both ends."""
        os.close(self.master)
        os.close(self.slave)


class FdTransport:
    """A :class:`Transport` on a raw file descriptor: the vehicle's end of a pseudo-terminal.

    Args:
        fd: An open descriptor (made non-blocking here); not closed by :meth:`aclose`.
        name: For log messages.
    """

    def __init__(self, fd: int, name: str) -> None:
        self._fd = fd
        self._name = name
        self._loop = asyncio.get_running_loop()
        self._outgoing = bytearray()
        self._closed = False
        self._readable: asyncio.Future[None] | None = None
        self.dropped = 0
        os.set_blocking(fd, False)

    @property
    def dropped_sends(self) -> int:
        """Sends dropped after close."""
        return self.dropped

    async def receive(self) -> bytes:
        """The next bytes the other end wrote; ``b""`` once closed."""
        while not self._closed:
            try:
                data = os.read(self._fd, 1 << 14)
            except BlockingIOError:
                data = None
            except OSError as err:
                if err.errno != errno.EIO:  # EIO: no slave open right now; wait for one
                    raise
                await asyncio.sleep(0.01)
                continue
            if data:
                return data
            readable = self._loop.create_future()
            self._readable = readable
            self._loop.add_reader(self._fd, _set_done, readable)
            try:
                await readable
            finally:
                self._readable = None
                self._loop.remove_reader(self._fd)
        return b""

    def send(self, data: bytes) -> None:
        """Write ``data``; what the terminal cannot take now is written when it can."""
        if self._closed:
            self.dropped += 1
            return
        if not self._outgoing:
            try:
                written = os.write(self._fd, data)
            except BlockingIOError:
                written = 0
            data = data[written:]
            if not data:
                return
            self._loop.add_writer(self._fd, self._flush)
        self._outgoing += data

    def _flush(self) -> None:
        try:
            written = os.write(self._fd, self._outgoing)
        except BlockingIOError:
            return
        del self._outgoing[:written]
        if not self._outgoing:
            self._loop.remove_writer(self._fd)

    async def aclose(self) -> None:
        """Stop reading and writing (the descriptor stays open)."""
        if self._closed:
            return
        self._closed = True
        self._loop.remove_writer(self._fd)
        if self._readable is not None:
            _set_done(self._readable)

    def describe(self) -> str:
        """The name given."""
        return self._name


def _set_done(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class CountingTransport:
    """Wraps the vehicle's transport and counts the commands it receives from clients.

    :attr:`commands` are the logging commands (START, STOP) in order; :attr:`requests` the
    messages asked for with MAV_CMD_REQUEST_MESSAGE (AUTOPILOT_VERSION at first contact).
    """

    def __init__(self, inner: Transport) -> None:
        self.inner = inner
        self.codec = MavlinkCodec(system_id=1, component_id=MAV_COMP_ID_AUTOPILOT1)
        self.commands: list[int] = []
        self.requests: list[int] = []

    @property
    def dropped_sends(self) -> int:
        """The inner transport's count."""
        return self.inner.dropped_sends

    async def receive(self) -> bytes:
        """Receive from the inner transport, noting every COMMAND_LONG."""
        data = await self.inner.receive()
        for message in self.codec.decode(data):
            if isinstance(message, CommandLong):
                if message.command == MAV_CMD_REQUEST_MESSAGE:
                    self.requests.append(int(message.param1))
                else:
                    self.commands.append(message.command)
        return data

    def send(self, data: bytes) -> None:
        """Send on the inner transport."""
        self.inner.send(data)

    async def aclose(self) -> None:
        """Close the inner transport."""
        await self.inner.aclose()

    def describe(self) -> str:
        """The inner transport's name."""
        return self.inner.describe()


# ---------------------------------------------------------------------------------------------
# A recorder and a vehicle together


def recorder_settings(
    connection: str, out_dir: Path, *, idle_timeout_s: float = 5.0, target_sysid: int | None = None
) -> Settings:
    """Settings of a recorder on ``connection`` writing to ``out_dir`` (no MQTT)."""
    return Settings(
        link=LinkSettings(connection=connection, target_sysid=target_sysid),
        recording=RecordingSettings(out_dir=out_dir, min_free_mb=10, idle_timeout_s=idle_timeout_s),
    )


class Session(msgspec.Struct):
    """What one recorder-plus-vehicle run produced."""

    recorder: Recorder
    summary: SimSummary
    exit_code: int
    delivered_logs: list[int] = msgspec.field(default_factory=list)

    @property
    def files(self) -> list[Path]:
        """The finished ``.ulg`` files, in the order they were closed."""
        return [finished.path for finished in self.recorder.status.finished]


async def record(
    log: bytes,
    recorder: Recorder,
    vehicle_link: Transport | str,
    *,
    config: VehicleConfig = FAST,
    faults: FaultConfig = NO_FAULTS,
    stop_after_log: int | None = 0,
    repeat: bool = False,
    limit_s: float = 60.0,
    on_delivered: Callable[[int], None] | None = None,
) -> Session:
    """Run ``recorder`` against a simulated PX4 streaming ``log`` until the recorder returns.

    The recorder is asked to stop once the vehicle delivered all data of log ``stop_after_log``
    (None: never; the recorder must end by itself, e.g. with ``once``). The vehicle runs until
    its STOP handshake completes (or, with ``repeat``, until the recorder has returned).
    """
    delivered: list[int] = []
    stop_vehicle = asyncio.Event()

    def log_delivered(log_index: int) -> None:
        delivered.append(log_index)
        if on_delivered is not None:
            on_delivered(log_index)
        if log_index == stop_after_log:
            recorder.request_stop()

    recorder_task = asyncio.create_task(recorder.run())
    await asyncio.sleep(0)  # the recorder opens its link before the vehicle sends
    vehicle_task = asyncio.create_task(
        run_vehicle(
            log,
            vehicle_link,
            config=config,
            faults=faults,
            repeat=repeat,
            stop_event=stop_vehicle,
            on_log_delivered=log_delivered,
        )
    )
    try:
        async with asyncio.timeout(limit_s):
            exit_code = await recorder_task
            if repeat or stop_after_log is None:
                stop_vehicle.set()  # else it ends by itself after the STOP handshake
            summary = await vehicle_task
    finally:
        for task in (recorder_task, vehicle_task):
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
    return Session(recorder, summary, exit_code, delivered)


def files(root: Path, pattern: str) -> list[Path]:
    """Files under ``root`` matching ``pattern`` at any depth (sorted)."""
    return sorted(root.rglob(pattern))


def decode_all(codec: MavlinkCodec, data: bytes) -> list[MavlinkMessage]:
    """``codec.decode`` as a plain helper (keeps call sites short)."""
    return codec.decode(data)


async def listening_vehicle() -> tuple[UdpTransport, str]:
    """The vehicle's UDP end on a free port, and the recorder's connection string toward it."""
    link = await UdpTransport.listen("127.0.0.1", 0)
    return link, f"udpout:127.0.0.1:{link.local_address[1]}"


def finished_messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The "log finished" lines the recorder logged, in order."""
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("log finished")]
