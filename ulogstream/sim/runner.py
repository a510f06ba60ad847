"""The asyncio shell of the simulated vehicle: a transport, the codec, a clock and a report.

``ulogstream sim FILE.ulg CONNECTION`` lands here through :func:`add_sim_arguments`,
:func:`sim_options_from_args` and :func:`run_sim`; tests call :func:`run_vehicle` directly.

Past 700 lines because each kind of link (UDP, TCP, a pseudo-terminal standing in for USB, a
radio's bandwidth) needs its own small device here; they share the clock and the report.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import math
import os
import select
import struct
import termios
import time
import tty
from pathlib import Path
from typing import IO, TYPE_CHECKING

import msgspec

from ulogstream.adapters.connection import open_transport
from ulogstream.adapters.transport import ReadableWaiter
from ulogstream.config.values import parse_connection
from ulogstream.download.packets import (
    FtpMessage,
    FtpOpcode,
    LogData,
    LogEntry,
    LogRequestData,
    LogRequestEnd,
    LogRequestList,
)
from ulogstream.errors import ConfigError, LinkError, ULogFormatError
from ulogstream.mavlink_codec import MAV_AUTOPILOT_PX4, MAV_TYPE_QUADROTOR, MavlinkCodec
from ulogstream.sim.faults import NO_FAULTS, DelayLine, FaultConfig, corrupt_frame
from ulogstream.sim.sd_card import (
    DEFAULT_BYTES_PER_S,
    LOGGER_STALL_S,
    SdCard,
    SdLog,
    split_at_stream_start,
)
from ulogstream.sim.vehicle import (
    RADIO_LINK_RATE,
    UDP_LINK_RATE,
    USB_LINK_RATE,
    DeliveredPacket,
    LinkCut,
    LogStreamEnded,
    LogStreamStarted,
    SendAutopilotVersion,
    SendCommandAck,
    SendGarbage,
    SendLoggingData,
    SendVehicleHeartbeat,
    SimVehicle,
    VehicleConfig,
    VehicleOutput,
    VehicleStats,
    delivered_packet,
)
from ulogstream.stream.packets import MAV_MODE_FLAG_SAFETY_ARMED
from ulogstream.ulog.spec import MAGIC

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable

    from ulogstream.adapters.transport import Transport
    from ulogstream.sim.sd_card import SdCardOutput
    from ulogstream.stream.packets import MavlinkMessage

logger = logging.getLogger(__name__)

RUNNER_MAX_BATCH = 64
"""Frames sent per turn of the event loop (about 17 KB), so stream transports keep up."""

PTY_PREFIX = "pty:"
"""``pty:PATH``: serve a pseudo-terminal whose device appears at PATH (a USB autopilot)."""

RADIO_BANDWIDTH = 5700.0
"""Bytes per second a 57600-baud telemetry radio carries (``--bandwidth radio``)."""

DRAIN_LIMIT = 1.0
"""Longest wait (seconds) at an unplug for the receiver to read what the terminal holds."""

USB_BUFFER = 1 << 16
"""Bytes a simulated USB device holds for a receiver that reads late (the host driver's buffer)."""

DRAIN_SETTLE = 0.03
"""Seconds the terminal's queue must stay empty before an unplug counts it drained."""

_READ_SIZE = 1 << 14


class PtyDevice:
    """The vehicle's end of a pseudo-terminal whose device appears at ``path``: PX4 on USB.

    The receiver opens ``path``, a symlink to the terminal as udev's ``/dev/pixhawk`` is.
    :meth:`unplug` pulls the cable: the terminal hangs up and ``path`` disappears; :meth:`plug`
    brings a new terminal back at the same path. As on USB, data goes out only while the host
    has the port open: until the receiver opens the device (again), every send is dropped, like
    PX4's writes to a USB port nobody reads. What the terminal cannot take yet waits in a
    :data:`USB_BUFFER`; a frame that does not fit whole is dropped, never cut, so every frame
    counted as sent reaches the receiver intact.

    Create it with :meth:`create` from the event loop.

    Args:
        path: Where the device appears (replaced if it exists).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._loop = asyncio.get_running_loop()
        self._master: int | None = None
        self._terminal = ""
        self._waiter: ReadableWaiter | None = None
        self._poll = select.poll()
        self._pending = bytearray()
        self._plugged = asyncio.Event()
        self._closed = False
        self._dropped = 0

    @classmethod
    def create(cls, path: Path) -> PtyDevice:
        """Create the terminal and its ``path``.

        Raises:
            LinkError: ``path`` cannot be created.
        """
        device = cls(path)
        device.plug()
        return device

    @property
    def plugged(self) -> bool:
        """True while the device is there."""
        return self._master is not None

    @property
    def host_open(self) -> bool:
        """True while the device is there and the receiver has it open."""
        if self._master is None:
            return False
        # The master side reports a hang-up while no process has the terminal open.
        return not any(events & select.POLLHUP for _, events in self._poll.poll(0))

    @property
    def dropped_sends(self) -> int:
        """Sends dropped: unplugged, not open at the other end, or the previous frame unfinished."""
        return self._dropped

    def plug(self) -> None:
        """Plug the device in: a new terminal at ``path``.

        Raises:
            LinkError: ``path`` cannot be created.
        """
        if self._closed or self._master is not None:
            return
        master, slave = os.openpty()
        try:
            # Raw both ways before the receiver opens it: an echoing terminal would send our
            # own frames back to us.
            tty.setraw(master)
            tty.setraw(slave)
            terminal = os.ttyname(slave)
        finally:
            os.close(slave)  # the terminal stays while the master is open
        os.set_blocking(master, False)
        staging = self.path.with_name(self.path.name + ".new")
        try:
            staging.unlink(missing_ok=True)
            staging.symlink_to(terminal)
            staging.replace(self.path)
        except OSError as err:
            os.close(master)
            msg = f"cannot create the simulated device {self.path}: {err.strerror or err}"
            raise LinkError(msg) from err
        self._master, self._terminal = master, terminal
        self._waiter = ReadableWaiter(master)
        self._poll.register(master, select.POLLIN)
        self._plugged.set()

    async def unplug(self) -> None:
        """Pull the cable: once the receiver has read what the terminal holds, hang up.

        Waiting for the receiver (at most :data:`DRAIN_LIMIT`) keeps the delivery report true:
        a frame counted as sent is not lost inside the terminal.
        """
        now = time.monotonic()
        deadline = now + DRAIN_LIMIT
        empty_since: float | None = None
        # The kernel's queue has no event to wait for: look at it every 5 ms. It must stay
        # empty a while: bytes just written reach it through the kernel's flip buffer a moment
        # later, and a busy machine delays that moment.
        while self.host_open and now < deadline:
            if self._unread():
                empty_since = None
            elif empty_since is None:
                empty_since = now
            elif now - empty_since >= DRAIN_SETTLE:
                break
            await asyncio.sleep(0.005)
            now = time.monotonic()
        self._hang_up()

    def _unread(self) -> int:
        """Bytes written that the receiver has not read yet."""
        try:
            probe = os.open(self._terminal, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK)
        except OSError:
            return len(self._pending)
        try:
            queued = fcntl.ioctl(probe, termios.FIONREAD, b"\0\0\0\0")
        finally:
            os.close(probe)
        return int(struct.unpack("i", queued)[0]) + len(self._pending)

    def _hang_up(self) -> None:
        master, waiter = self._master, self._waiter
        if master is None or waiter is None:
            return
        self._master = self._waiter = None
        self._pending.clear()
        self._plugged.clear()
        waiter.close()  # the loop forgets the descriptor before it is closed
        self._loop.remove_writer(master)
        self._poll.unregister(master)
        os.close(master)
        self.path.unlink(missing_ok=True)

    async def receive(self) -> bytes:
        """The next bytes the receiver wrote; waits while unplugged; ``b""`` after ``aclose``."""
        while not self._closed:
            master, waiter = self._master, self._waiter
            if master is None or waiter is None:
                await self._plugged.wait()
                continue
            try:
                data = os.read(master, _READ_SIZE)
            except BlockingIOError:
                await waiter.wait()
                continue
            except OSError:
                # EIO: nobody has the terminal open. Its hang-up would wake a reader at once,
                # again and again: look every 10 ms instead.
                await asyncio.sleep(0.01)
                continue
            if data:
                return data
            await waiter.wait()
        return b""

    def send(self, data: bytes) -> None:
        """Write ``data`` whole, later if the terminal is full; drop it if it cannot go now.

        What the terminal cannot take yet waits in a buffer of :data:`USB_BUFFER` bytes, as in
        the USB host's driver; a frame that does not fit whole is dropped (PX4 sends a message
        only when there is room for all of it).
        """
        master = self._master
        if master is None or not self.host_open:
            self._dropped += 1
            return
        if self._pending:
            if len(self._pending) + len(data) > USB_BUFFER:
                self._dropped += 1
            else:
                self._pending += data
            return
        try:
            written = os.write(master, data)
        except BlockingIOError:  # the terminal is full
            written = 0
        except OSError:
            self._dropped += 1
            return
        if written < len(data):
            self._pending += data[written:]
            self._loop.add_writer(master, self._flush)

    def _flush(self) -> None:
        master = self._master
        if master is None:
            return
        try:
            written = os.write(master, self._pending)
        except BlockingIOError:
            return
        except OSError:
            written = len(self._pending)
        del self._pending[:written]
        if not self._pending:
            self._loop.remove_writer(master)

    async def aclose(self) -> None:
        """Close the terminal and remove ``path``; a waiting :meth:`receive` returns ``b""``.

        What the receiver has not read yet (the STOP's last COMMAND_ACK) is given time to go.
        """
        if self._closed:
            return
        await self.unplug()
        self._closed = True
        self._plugged.set()

    def describe(self) -> str:
        """The device path."""
        return f"pty {self.path}"


class SimSummary(msgspec.Struct, frozen=True):
    """What a simulator run did.

    Attributes:
        stats: The vehicle's counters at the end.
        logs_started: Logs started (STARTs accepted plus reboots).
        logs_stopped: Logs that ended with a completed STOP handshake.
        delivered: Intact LOGGING_DATA frames handed to the transport and not dropped by it.
        transport_drops: Frames the transport dropped (no peer yet, buffer full).
        bad_frames: Undecodable frames received from clients.
        duration: Seconds the run took.
        deliveries: Every delivered frame, in order (empty unless kept).
        wire_drops: Frames lost because the rate-limited wire's queue was full.
        unplugs: Times a pseudo-terminal device was unplugged (and plugged back).
    """

    stats: VehicleStats
    logs_started: int
    logs_stopped: int
    delivered: int
    transport_drops: int
    bad_frames: int
    duration: float
    deliveries: tuple[DeliveredPacket, ...] = ()
    wire_drops: int = 0
    unplugs: int = 0

    @property
    def ack_timeouts(self) -> int:
        """Streams PX4 gave up on with "Ack timeout. Stopping mavlink log" (2.5 s unacked)."""
        return self.stats.ack_timeouts


class _Shell:
    """Carries out the vehicle's outputs on a transport and keeps the books."""

    def __init__(
        self,
        vehicle: SimVehicle,
        transport: Transport,
        codec: MavlinkCodec,
        report: IO[str] | None,
        *,
        keep_deliveries: bool,
        faults: FaultConfig = NO_FAULTS,
    ) -> None:
        self.vehicle = vehicle
        self.transport = transport
        self.codec = codec
        self.report = report
        self.keep_deliveries = keep_deliveries
        self.deliveries: list[DeliveredPacket] = []
        self.delivered = 0
        self.transport_drops = 0
        self.logs_stopped = 0
        self.unplugs = 0
        self.outbound: DelayLine[tuple[bytes, SendLoggingData | None]] | None = None
        self.inbound: DelayLine[MavlinkMessage] | None = None
        if faults.shapes_link:
            self.outbound = DelayLine(faults, direction=0)
            self.inbound = DelayLine(faults, direction=1, limit_rate=False)
        self._replugs: set[asyncio.Task[None]] = set()
        self.sd_card: SdCard | None = None
        self.armed = False
        """HEARTBEATs say armed (``--armed``: until the flight's log is delivered)."""

    @property
    def wire_drops(self) -> int:
        """Frames the rate-limited wire lost (its queue was full)."""
        return 0 if self.outbound is None else self.outbound.backlog_drops

    def execute(self, outputs: list[VehicleOutput], now: float) -> None:
        codec = self.codec
        for output in outputs:
            match output:
                case SendLoggingData(packet=packet, corrupt=corrupt):
                    frame = codec.encode_logging_data(
                        packet.sequence,
                        packet.target_system,
                        packet.target_component,
                        packet.first_message_offset,
                        packet.data,
                        acked=packet.needs_ack,
                    )
                    if corrupt is not None:
                        frame = corrupt_frame(frame, corrupt)
                    self._send(frame, output, now)
                case SendCommandAck(command, result, target_system, target_component):
                    frame = codec.encode_command_ack(
                        command, result, target_system, target_component
                    )
                    self._send(frame, None, now)
                case SendAutopilotVersion(uid2):
                    self._send(codec.encode_autopilot_version(uid=0, uid2=uid2), None, now)
                case SendVehicleHeartbeat():
                    frame = codec.encode_heartbeat(
                        mav_type=MAV_TYPE_QUADROTOR,
                        autopilot=MAV_AUTOPILOT_PX4,
                        base_mode=MAV_MODE_FLAG_SAFETY_ARMED if self.armed else 0,
                    )
                    self._send(frame, None, now)
                case SendGarbage(data):
                    self._send(data, None, now)
                case LogStreamStarted(log_index, target_system, target_component):
                    logger.info(
                        "sim: log %d streaming to %d/%d", log_index, target_system, target_component
                    )
                case LogStreamEnded(log_index, reason):
                    if reason == "ack-timeout":
                        logger.warning("sim: Ack timeout. Stopping mavlink log (log %d)", log_index)
                    elif reason == "flight-ended":
                        logger.info(
                            "sim: log %d sent to its end (the flight is over: STOP on disarm)",
                            log_index,
                        )
                    else:
                        logger.info("sim: log %d ended (%s)", log_index, reason)
                    if reason in {"stopped", "flight-ended"}:
                        self.logs_stopped += 1
                case LinkCut(seconds):
                    self._cut(seconds, now)

    def serve_sd_card(self, outputs: list[SdCardOutput], now: float) -> None:
        """Send the SD card's LOG_ENTRY and LOG_DATA answers."""
        codec = self.codec
        for output in outputs:
            if isinstance(output, LogData):
                self._send(codec.encode_log_data(output), None, now)
            elif isinstance(output, FtpMessage):
                assert self.sd_card is not None  # noqa: S101 (its answers)
                self._send(codec.encode_ftp(output, self.sd_card.ftp_target, 0), None, now)
            else:
                self._send(codec.encode_log_entry(output), None, now)

    def _send(self, frame: bytes, output: SendLoggingData | None, now: float) -> None:
        """Put ``frame`` on the wire (its delivery is recorded when it leaves the wire)."""
        if self.outbound is None:
            self._transmit(frame, output, now)
        else:
            self.outbound.push((frame, output), len(frame), now)

    def arrivals(self, now: float) -> None:
        """Hand the transport every frame whose time on the wire is over."""
        if self.outbound is not None:
            for frame, output in self.outbound.pop_due(now):
                self._transmit(frame, output, now)

    @property
    def wire_busy(self) -> bool:
        """True while frames are still on their way."""
        return self.outbound is not None and len(self.outbound) > 0

    def _transmit(self, frame: bytes, output: SendLoggingData | None, now: float) -> None:
        transport = self.transport
        dropped = transport.dropped_sends
        transport.send(frame)
        if output is None:
            return
        if transport.dropped_sends != dropped:
            self.transport_drops += 1
            return
        record = delivered_packet(output, now)
        if record is not None:
            self._record(record)

    def _cut(self, seconds: float, now: float) -> None:
        """A link cut: on a pseudo-terminal, the device disappears for ``seconds``."""
        device = self.transport
        if not isinstance(device, PtyDevice):
            return
        self.unplugs += 1
        task = asyncio.ensure_future(self._replug(device, now + seconds))
        self._replugs.add(task)
        task.add_done_callback(self._replugs.discard)

    @staticmethod
    async def _replug(device: PtyDevice, back_at: float) -> None:
        await device.unplug()
        logger.info("sim: %s unplugged", device.path)
        await asyncio.sleep(max(0.0, back_at - time.monotonic()))
        device.plug()
        logger.info("sim: %s plugged back in", device.path)

    async def aclose(self) -> None:
        """Cancel a pending replug."""
        for task in list(self._replugs):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _record(self, record: DeliveredPacket) -> None:
        self.delivered += 1
        if self.keep_deliveries:
            self.deliveries.append(record)
        if self.report is not None:
            self.report.write(json.dumps(record.to_json(), separators=(",", ":")) + "\n")


async def run_vehicle(
    log: Path | bytes,
    connection: str | Transport,
    *,
    config: VehicleConfig | None = None,
    faults: FaultConfig = NO_FAULTS,
    report_path: Path | None = None,
    repeat: bool = False,
    keep_deliveries: bool = True,
    stop_event: asyncio.Event | None = None,
    on_log_delivered: Callable[[int], None] | None = None,
    sd_card: SdCard | None = None,
    armed: bool = False,
) -> SimSummary:
    """Serve a simulated PX4 that streams ``log`` on ``connection`` until told to stop.

    The run ends after the first completed STOP handshake, or the end of the flight with
    ``config.stop_at_end`` (or, with ``repeat``, only when ``stop_event`` is set or the link
    closes), so a receiver can record the log again and again.

    Args:
        log: The ULog file (path or bytes).
        connection: A connection string (``udpout:127.0.0.1:14550`` toward a receiver on
            ``udpin``, ``udpin:0.0.0.0:14550`` to wait for one, ``tcpin:...``, a serial device)
            or an open transport (closed when the run ends).
        config: Vehicle behaviour; its ``max_batch`` is capped to keep the event loop turning.
        faults: Faults to inject (seeded).
        report_path: Write each delivered frame as a JSON line here.
        repeat: Keep serving after a STOP (each START streams the log again, as a new log).
        keep_deliveries: Return every delivered frame in :attr:`SimSummary.deliveries`.
        stop_event: Set it to end the run.
        on_log_delivered: Called once per log (with its index) when everything up to the
            post-flight tail is sent and acked, so a receiver knows when to STOP.
        sd_card: The vehicle's SD card: its logs are served to LOG_REQUEST_LIST / _DATA / _END.
        armed: The vehicle is armed from the start until its flight's log is delivered (up to
            the post-flight tail), then disarmed: a receiver recording while armed streams it.

    Raises:
        ConfigError: The connection string is not valid.
        LinkError: The link cannot be opened or failed.
        ULogFormatError: ``log`` is not a ULog file.
    """
    data = await asyncio.to_thread(log.read_bytes) if isinstance(log, Path) else log
    base = config if config is not None else VehicleConfig()
    vehicle_config = msgspec.structs.replace(base, max_batch=min(base.max_batch, RUNNER_MAX_BATCH))
    started = time.monotonic()
    vehicle = SimVehicle(data, now=started, config=vehicle_config, faults=faults)
    if isinstance(connection, str):
        transport = await open_vehicle_link(connection)
    else:
        transport = connection
    codec = MavlinkCodec(
        system_id=vehicle_config.system_id, component_id=vehicle_config.component_id
    )
    try:
        with contextlib.ExitStack() as stack:
            report = (
                stack.enter_context(report_path.open("w", encoding="utf-8"))
                if report_path is not None
                else None
            )
            shell = _Shell(
                vehicle, transport, codec, report, keep_deliveries=keep_deliveries, faults=faults
            )
            shell.sd_card = sd_card
            shell.armed = armed
            try:
                await _serve(shell, stop_event, repeat=repeat, on_log_delivered=on_log_delivered)
            finally:
                await shell.aclose()
    finally:
        await transport.aclose()
    duration = time.monotonic() - started
    summary = SimSummary(
        stats=msgspec.structs.replace(vehicle.stats),
        logs_started=vehicle.stats.logs_started,
        logs_stopped=shell.logs_stopped,
        delivered=shell.delivered,
        transport_drops=shell.transport_drops,
        bad_frames=codec.bad_frames,
        duration=duration,
        deliveries=tuple(shell.deliveries),
        wire_drops=shell.wire_drops,
        unplugs=shell.unplugs,
    )
    logger.info(
        "sim: %d logs, %d frames delivered, %d dropped in the logger's buffer, %d on the wire, "
        "%d by the transport, %d ack timeouts, in %.1f s",
        summary.logs_started,
        summary.delivered,
        summary.stats.queue_drops,
        summary.wire_drops,
        summary.transport_drops,
        summary.ack_timeouts,
        duration,
    )
    return summary


async def open_vehicle_link(connection: str) -> Transport:
    """Open the vehicle's end of ``connection``: ``pty:PATH`` or any receiver connection string.

    Raises:
        ConfigError: The connection string is not valid.
        LinkError: The link cannot be opened.
    """
    if connection.startswith(PTY_PREFIX):
        path = connection[len(PTY_PREFIX) :]
        if not path:
            msg = f"connection {connection!r} names no device path (pty:/tmp/pixhawk)"
            raise ConfigError(msg)
        return PtyDevice.create(Path(path))
    return await open_transport(parse_connection(connection))


async def _wait_for(event: asyncio.Event) -> bytes:
    await event.wait()
    return b""


async def _serve(
    shell: _Shell,
    stop_event: asyncio.Event | None,
    *,
    repeat: bool,
    on_log_delivered: Callable[[int], None] | None = None,
) -> None:
    vehicle = shell.vehicle
    delivered_log = -1
    transport = shell.transport
    codec = shell.codec
    clock = time.monotonic
    stop = stop_event if stop_event is not None else asyncio.Event()
    stop_task = asyncio.ensure_future(_wait_for(stop))
    receive_task: asyncio.Future[bytes] | None = None
    inbound = shell.inbound
    outbound = shell.outbound
    sd_card = shell.sd_card
    decode = codec.decode if sd_card is None else codec.decode_with_log_download
    try:
        while not stop.is_set():
            if receive_task is None:
                receive_task = asyncio.ensure_future(transport.receive())
            deadline = _earliest(
                vehicle.next_deadline(),
                None if outbound is None else outbound.next_due(),
                None if inbound is None else inbound.next_due(),
                None if sd_card is None else sd_card.next_deadline(),
            )
            timeout = None if deadline is None else max(0.0, deadline - clock())
            done, _ = await asyncio.wait(
                {receive_task, stop_task}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
            now = clock()
            if receive_task in done:
                data = receive_task.result()
                receive_task = None
                if not data:
                    logger.info("sim: link %s closed", transport.describe())
                    return
                for message in decode(data):
                    if isinstance(message, LogRequestList | LogRequestData | LogRequestEnd):
                        if sd_card is not None:
                            sd_card.receive(message, now)
                        continue
                    if isinstance(message, FtpMessage):
                        if sd_card is not None and message.opcode < FtpOpcode.ACK:
                            sd_card.receive_ftp(message, now)
                        continue
                    if isinstance(message, LogEntry | LogData):
                        continue  # another vehicle's answers
                    if inbound is None:
                        shell.execute(vehicle.receive(message, now), now)
                    else:
                        inbound.push(message, 0, now)
            if inbound is not None:
                for message in inbound.pop_due(now):
                    shell.execute(vehicle.receive(message, now), now)
            deadline = vehicle.next_deadline()
            if deadline is not None and now >= deadline:
                shell.execute(vehicle.handle_timer(now), now)
            if sd_card is not None:
                shell.serve_sd_card(sd_card.handle_timer(now), now)
            shell.arrivals(now)
            if shell.armed and vehicle.waiting_for_stop:
                shell.armed = False  # the flight is over: the vehicle disarms (and says so)
                shell.execute([SendVehicleHeartbeat()], now)
            if on_log_delivered is not None and vehicle.waiting_for_stop:
                log_index = vehicle.log_index
                if log_index is not None and log_index != delivered_log:
                    delivered_log = log_index
                    on_log_delivered(log_index)
            if shell.logs_stopped and not repeat and sd_card is None and not shell.wire_busy:
                return
    finally:
        for task in (receive_task, stop_task):
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task


def _earliest(*times: float | None) -> float | None:
    known = [t for t in times if t is not None]
    return min(known) if known else None


# ---------------------------------------------------------------------------------------------
# Command line


class SimOptions(msgspec.Struct, frozen=True, kw_only=True):
    """Everything ``ulogstream sim`` takes.

    Attributes:
        log: The ULog file to stream.
        connection: Where to serve it (see :func:`run_vehicle`).
        link_rate: The link's configured rate in B/s (None: unlimited).
        speed: Replay speed of the log's time (None: as fast as the link allows, lossless).
        faults: Faults to inject.
        report: JSON-lines delivery report path.
        repeat: Serve again after each STOP.
        system_id: The vehicle's MAVLink system id.
        backend_off: Reject every START (the logger's MAVLink backend is off).
        packet0_before_ack: Let packet 0 overtake the COMMAND_ACK.
        stray_acks: Also send misleading COMMAND_ACKs addressed to another system.
        autopilot_version: Answer a request for AUTOPILOT_VERSION (its GUID: the log's
            ``sys_uuid``); False: UNSUPPORTED.
        synthesize_perf: Send a post-flight perf 'M' message on STOP when the log has none.
        accept_stop_at_once: Answer STOP with IN_PROGRESS and ACCEPTED before the end of the log.
        stop_at_end: End each log at the end of the flight as a GCS's STOP on disarm does
            (every byte sent); False holds the end until the receiver's STOP.
        sd_card: The vehicle's SD card holds the log too, served to log downloads, and the
            vehicle serves until stopped.
        armed: Armed until the flight's log is delivered, then disarmed (with ``--hold-end``
            a receiver recording while armed stops the stream after the disarm).
    """

    log: Path
    connection: str
    link_rate: float | None = UDP_LINK_RATE
    speed: float | None = 1.0
    faults: FaultConfig = NO_FAULTS
    report: Path | None = None
    repeat: bool = False
    system_id: int = 1
    backend_off: bool = False
    packet0_before_ack: bool = False
    stray_acks: bool = False
    autopilot_version: bool = True
    synthesize_perf: bool = False
    accept_stop_at_once: bool = False
    stop_at_end: bool = True
    sd_card: bool = False
    ftp: bool = True
    stream_lead_s: float = 0.0
    armed: bool = False

    def vehicle_config(self) -> VehicleConfig:
        """The :class:`VehicleConfig` these options describe."""
        return VehicleConfig(
            system_id=self.system_id,
            link_rate=self.link_rate,
            speed=self.speed,
            backend_off=self.backend_off,
            packet0_before_ack=self.packet0_before_ack,
            stray_acks=self.stray_acks,
            autopilot_version=self.autopilot_version,
            synthesize_perf=self.synthesize_perf,
            accept_stop_at_once=self.accept_stop_at_once,
            stop_at_end=self.stop_at_end,
        )


async def run_sim(options: SimOptions, *, stop_event: asyncio.Event | None = None) -> SimSummary:
    """Run ``ulogstream sim`` with ``options`` (see :func:`run_vehicle` for what may be raised)."""
    sd_card = None
    data = await asyncio.to_thread(options.log.read_bytes)
    if not data.startswith(MAGIC):
        msg = f"{options.log} is not a ULog file: the simulated vehicle streams a PX4 log (.ulg)"
        raise ULogFormatError(msg, offset=0)
    source = data
    if options.sd_card:
        sd_card = SdCard(
            system_id=options.system_id,
            bytes_per_s=options.link_rate or DEFAULT_BYTES_PER_S,
            faults=options.faults,
            ftp=options.ftp,
        )
        mtime = (await asyncio.to_thread(options.log.stat)).st_mtime
        if options.stream_lead_s:
            source, data = split_at_stream_start(data, options.stream_lead_s)
        sd_card.add(SdLog(data, int(mtime)))  # PX4's LOG_ENTRY gives the file's mtime too
    return await run_vehicle(
        source,
        options.connection,
        config=options.vehicle_config(),
        faults=options.faults,
        report_path=options.report,
        repeat=options.repeat,
        keep_deliveries=False,
        stop_event=stop_event,
        sd_card=sd_card,
        armed=options.armed,
    )


_NAMED_RATES = {"usb": USB_LINK_RATE, "udp": UDP_LINK_RATE, "radio": RADIO_LINK_RATE}


def parse_rate(text: str) -> float | None:
    """``--rate``: B/s, ``usb`` (800000), ``udp`` (100000), ``radio`` (5760) or ``unlimited``.

    Raises:
        ConfigError: ``text`` is none of these.
    """
    return _bytes_per_s("--rate", text, _NAMED_RATES)


def parse_bandwidth(text: str) -> float | None:
    """``--bandwidth``: B/s the wire carries, ``radio`` (5700) or ``unlimited``.

    Raises:
        ConfigError: ``text`` is none of these.
    """
    return _bytes_per_s("--bandwidth", text, {"radio": RADIO_BANDWIDTH})


def _bytes_per_s(option: str, text: str, named: dict[str, float]) -> float | None:
    """A positive number of B/s, one of the ``named`` rates, or ``unlimited`` (None)."""
    word = text.strip().lower()
    if word == "unlimited":
        return None
    if word in named:
        return named[word]
    try:
        rate = float(word)
    except ValueError:
        rate = math.nan
    if not (math.isfinite(rate) and rate > 0):
        names = "".join(f"'{name}', " for name in named)
        msg = f"{option} {text!r} is not a positive number of B/s, {names}or 'unlimited'"
        raise ConfigError(msg)
    return rate


def parse_milliseconds(option: str, text: str) -> float:
    """``--delay-ms`` / ``--jitter-ms``: milliseconds >= 0, returned in seconds.

    Raises:
        ConfigError: ``text`` is not a number >= 0.
    """
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        msg = f"{option} {text!r} is not a number of milliseconds >= 0"
        raise ConfigError(msg)
    return value / 1000.0


def parse_speed(text: str) -> float | None:
    """``--speed``: a replay factor of the log's time, or ``max`` (as fast as the link allows).

    Raises:
        ConfigError: ``text`` is neither.
    """
    word = text.strip().lower()
    if word in {"max", "unlimited"}:
        return None
    try:
        speed = float(word)
    except ValueError:
        speed = math.nan
    if not (math.isfinite(speed) and speed > 0):
        msg = f"--speed {text!r} is not a positive factor or 'max'"
        raise ConfigError(msg)
    return speed


def parse_cut(text: str) -> tuple[int, float]:
    """``--cut-at N:SECONDS``: cut the link at frame N for SECONDS.

    Raises:
        ConfigError: ``text`` is not of that form.
    """
    index_text, sep, seconds_text = text.partition(":")
    try:
        index = int(index_text)
        seconds = float(seconds_text)
    except ValueError:
        index, seconds = -1, math.nan
    if not sep or index < 0 or not (math.isfinite(seconds) and seconds >= 0):
        msg = f"--cut-at {text!r} is not FRAME:SECONDS (e.g. 500:3)"
        raise ConfigError(msg)
    return index, seconds


def add_sim_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``ulogstream sim``'s arguments to ``parser`` (read by :func:`sim_options_from_args`)."""
    parser.add_argument("log", type=Path, metavar="FILE.ulg", help="the ULog file to stream")
    parser.add_argument(
        "connection",
        metavar="CONNECTION",
        help=(
            "udpout:HOST:PORT (toward a receiver on udpin), udpin:, tcpin:, a serial device, "
            "or pty:PATH (a USB autopilot: a pseudo-terminal appears at PATH)"
        ),
    )
    link = parser.add_argument_group("link and vehicle")
    link.add_argument(
        "--rate",
        default="udp",
        help=(
            "PX4's configured link rate in B/s, 'usb' (800000), 'udp' (100000, default), "
            "'radio' (5760) or 'unlimited'"
        ),
    )
    link.add_argument(
        "--speed", default="1", help="replay speed of the log's time, or 'max' (default 1)"
    )
    link.add_argument("--sysid", type=int, default=1, help="vehicle system id (default 1)")
    link.add_argument("--repeat", action="store_true", help="serve the log again after each STOP")
    link.add_argument(
        "--armed",
        action="store_true",
        help="say armed (HEARTBEAT) until the flight's log is delivered, then disarmed (with"
        " --hold-end: as a PX4 on the bench that lands and disarms)",
    )
    link.add_argument(
        "--sd-card",
        action="store_true",
        help="the vehicle's SD card holds the log too: serve it to log downloads (LOG_REQUEST_*)"
        " until stopped",
    )
    link.add_argument(
        "--no-ftp",
        action="store_true",
        help="with --sd-card, answer MAVLink FTP with UnknownCommand (a vehicle without it)",
    )
    link.add_argument(
        "--stream-lead",
        type=float,
        default=0.0,
        metavar="S",
        help="with --sd-card, the SD log starts S seconds of flight before the stream does, and"
        f" both lose the {LOGGER_STALL_S:g} s PX4's logger waits while the stream's header is acked"
        " (default 0: the SD log is the streamed log)",
    )
    link.add_argument(
        "--backend-off", action="store_true", help="answer every START TEMPORARILY_REJECTED"
    )
    link.add_argument(
        "--packet0-first", action="store_true", help="send packet 0 before the START's ack"
    )
    link.add_argument(
        "--stray-acks", action="store_true", help="also send COMMAND_ACKs for another system"
    )
    link.add_argument(
        "--no-autopilot-version",
        action="store_true",
        help="give no AUTOPILOT_VERSION (no GUID), as an autopilot without it",
    )
    link.add_argument(
        "--perf-tail", action="store_true", help="add post-flight perf data on STOP if none"
    )
    link.add_argument(
        "--accept-stop-at-once",
        action="store_true",
        help="answer STOP with IN_PROGRESS and ACCEPTED before the end of the log goes out",
    )
    link.add_argument(
        "--hold-end",
        action="store_true",
        help="at the end of the flight, hold the last packet until the receiver's STOP"
        " (default: end the log as a GCS's STOP on disarm does, sending every byte)",
    )
    link.add_argument("--report", type=Path, help="write delivered frames as JSON lines here")
    faults = parser.add_argument_group(
        "faults (seeded; probabilities per LOGGING_DATA frame; --loss also loses LOG_DATA)"
    )
    for name, text in (
        ("loss", "lose frames"),
        ("duplicate", "send frames twice"),
        ("reorder", "swap frames with the next one (see --jitter-ms for delay-based reordering)"),
        ("lost-acks", "drop received LOGGING_ACKs"),
        ("corrupt", "flip a byte (bad CRC)"),
        ("garbage", "send noise before frames"),
    ):
        faults.add_argument(f"--{name}", type=float, default=0.0, metavar="P", help=text)
    faults.add_argument("--seed", type=int, default=0, help="fault seed (default 0)")
    faults.add_argument(
        "--reboot-at", type=int, metavar="N", help="reboot at packet N of the first log"
    )
    faults.add_argument(
        "--cut-at",
        metavar="N:SECONDS",
        help="cut the link at frame N for SECONDS (on pty:PATH the device disappears meanwhile)",
    )
    faults.add_argument(
        "--sitl-gap", type=int, default=0, metavar="N", help="lose N packets after the header"
    )
    wire = parser.add_argument_group(
        "the wire (a radio: --rate radio --bandwidth radio --delay-ms 40 --loss 0.02)"
    )
    wire.add_argument(
        "--delay-ms", default="0", metavar="MS", help="one-way latency, both ways (default 0)"
    )
    wire.add_argument(
        "--jitter-ms",
        default="0",
        metavar="MS",
        help="each frame's latency drawn on its own from delay +- MS: frames reorder (default 0)",
    )
    wire.add_argument(
        "--bandwidth",
        default="unlimited",
        metavar="B/S",
        help="bytes per second the wire carries from the vehicle, 'radio' (5700) or 'unlimited'",
    )


def sim_options_from_args(args: argparse.Namespace) -> SimOptions:
    """Build :class:`SimOptions` from arguments parsed with :func:`add_sim_arguments`.

    Raises:
        ConfigError: A value is out of range or malformed.
    """
    cut_at: int | None = None
    cut_seconds = 0.0
    if args.cut_at is not None:
        cut_at, cut_seconds = parse_cut(str(args.cut_at))
    faults = FaultConfig(
        seed=int(args.seed),
        loss=float(args.loss),
        duplicate=float(args.duplicate),
        reorder=float(args.reorder),
        lost_acks=float(args.lost_acks),
        corrupt=float(args.corrupt),
        garbage=float(args.garbage),
        reboot_at=None if args.reboot_at is None else int(args.reboot_at),
        cut_at=cut_at,
        cut_seconds=cut_seconds,
        sitl_gap=int(args.sitl_gap),
        delay=parse_milliseconds("--delay-ms", str(args.delay_ms)),
        jitter=parse_milliseconds("--jitter-ms", str(args.jitter_ms)),
        bandwidth=parse_bandwidth(str(args.bandwidth)),
    )
    system_id = int(args.sysid)
    if not 1 <= system_id <= 255:  # noqa: PLR2004
        msg = f"--sysid must be 1-255, not {system_id}"
        raise ConfigError(msg)
    stream_lead_s = float(args.stream_lead)
    if not 0 <= stream_lead_s < math.inf or (stream_lead_s and not args.sd_card):
        msg = f"--stream-lead must be 0 or more seconds, with --sd-card (not {args.stream_lead})"
        raise ConfigError(msg)
    return SimOptions(
        log=Path(args.log),
        connection=str(args.connection),
        link_rate=parse_rate(str(args.rate)),
        speed=parse_speed(str(args.speed)),
        faults=faults,
        report=None if args.report is None else Path(args.report),
        repeat=bool(args.repeat),
        system_id=system_id,
        backend_off=bool(args.backend_off),
        packet0_before_ack=bool(args.packet0_first),
        stray_acks=bool(args.stray_acks),
        autopilot_version=not bool(args.no_autopilot_version),
        synthesize_perf=bool(args.perf_tail),
        accept_stop_at_once=bool(args.accept_stop_at_once),
        stop_at_end=not bool(args.hold_end),
        sd_card=bool(args.sd_card),
        ftp=not bool(args.no_ftp),
        stream_lead_s=stream_lead_s,
        armed=bool(args.armed),
    )
