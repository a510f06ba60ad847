"""The asyncio shell of the simulated vehicle: a transport, the codec, a clock and a report.

``ulogstream sim FILE.ulg CONNECTION`` lands here through :func:`add_sim_arguments`,
:func:`sim_options_from_args` and :func:`run_sim`; tests call :func:`run_vehicle` directly.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, TYPE_CHECKING

from ulogstream.adapters.connection import open_transport, parse_connection
from ulogstream.errors import ConfigError
from ulogstream.mavlink_codec import MAV_AUTOPILOT_PX4, MAV_TYPE_QUADROTOR, MavlinkCodec
from ulogstream.sim.faults import NO_FAULTS, FaultConfig, corrupt_frame
from ulogstream.sim.vehicle import (
    UDP_LINK_RATE,
    USB_LINK_RATE,
    DeliveredPacket,
    LogStreamEnded,
    LogStreamStarted,
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

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable

    from ulogstream.adapters.transport import Transport

logger = logging.getLogger(__name__)

RUNNER_MAX_BATCH = 64
"""Frames sent per turn of the event loop (about 17 KB), so stream transports keep up."""


@dataclass(frozen=True, slots=True)
class SimSummary:
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
    """

    stats: VehicleStats
    logs_started: int
    logs_stopped: int
    delivered: int
    transport_drops: int
    bad_frames: int
    duration: float
    deliveries: tuple[DeliveredPacket, ...] = ()


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

    def execute(self, outputs: list[VehicleOutput], now: float) -> None:
        transport = self.transport
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
                    dropped = transport.dropped_sends
                    transport.send(frame)
                    if transport.dropped_sends != dropped:
                        self.transport_drops += 1
                        continue
                    record = delivered_packet(output, now)
                    if record is not None:
                        self._record(record)
                case SendCommandAck(command, result, target_system, target_component):
                    transport.send(
                        codec.encode_command_ack(command, result, target_system, target_component)
                    )
                case SendVehicleHeartbeat():
                    transport.send(
                        codec.encode_heartbeat(
                            mav_type=MAV_TYPE_QUADROTOR, autopilot=MAV_AUTOPILOT_PX4
                        )
                    )
                case SendGarbage(data):
                    transport.send(data)
                case LogStreamStarted(log_index, target_system, target_component):
                    logger.info(
                        "sim: log %d streaming to %d/%d", log_index, target_system, target_component
                    )
                case LogStreamEnded(log_index, reason):
                    if reason == "flight-ended":
                        logger.info(
                            "sim: log %d sent to its end (the flight is over: STOP on disarm)",
                            log_index,
                        )
                    else:
                        logger.info("sim: log %d ended (%s)", log_index, reason)
                    if reason in {"stopped", "flight-ended"}:
                        self.logs_stopped += 1

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

    Raises:
        ConfigError: The connection string is not valid.
        LinkError: The link cannot be opened or failed.
        ULogFormatError: ``log`` is not a ULog file.
    """
    data = await asyncio.to_thread(log.read_bytes) if isinstance(log, Path) else log
    base = config if config is not None else VehicleConfig()
    vehicle_config = replace(base, max_batch=min(base.max_batch, RUNNER_MAX_BATCH))
    started = time.monotonic()
    vehicle = SimVehicle(data, now=started, config=vehicle_config, faults=faults)
    if isinstance(connection, str):
        transport = await open_transport(parse_connection(connection))
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
            shell = _Shell(vehicle, transport, codec, report, keep_deliveries=keep_deliveries)
            await _serve(shell, stop_event, repeat=repeat, on_log_delivered=on_log_delivered)
    finally:
        await transport.aclose()
    duration = time.monotonic() - started
    summary = SimSummary(
        stats=replace(vehicle.stats),
        logs_started=vehicle.stats.logs_started,
        logs_stopped=shell.logs_stopped,
        delivered=shell.delivered,
        transport_drops=shell.transport_drops,
        bad_frames=codec.bad_frames,
        duration=duration,
        deliveries=tuple(shell.deliveries),
    )
    logger.info(
        "sim: %d logs, %d frames delivered, %d dropped by the transport, in %.1f s",
        summary.logs_started,
        summary.delivered,
        summary.transport_drops,
        duration,
    )
    return summary


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
    try:
        while not stop.is_set():
            if receive_task is None:
                receive_task = asyncio.ensure_future(transport.receive())
            deadline = vehicle.next_deadline()
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
                for message in codec.decode(data):
                    shell.execute(vehicle.receive(message, now), now)
            deadline = vehicle.next_deadline()
            if deadline is not None and now >= deadline:
                shell.execute(vehicle.handle_timer(now), now)
            if on_log_delivered is not None and vehicle.waiting_for_stop:
                log_index = vehicle.log_index
                if log_index is not None and log_index != delivered_log:
                    delivered_log = log_index
                    on_log_delivered(log_index)
            if shell.logs_stopped and not repeat:
                return
    finally:
        for task in (receive_task, stop_task):
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task


# ---------------------------------------------------------------------------------------------
# Command line


@dataclass(frozen=True, slots=True, kw_only=True)
class SimOptions:
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
        synthesize_perf: Send a post-flight perf 'M' message on STOP when the log has none.
        stop_at_end: End each log at the end of the flight as a GCS's STOP on disarm does
            (every byte sent); False holds the end until the receiver's STOP.
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
    synthesize_perf: bool = False
    stop_at_end: bool = True

    def vehicle_config(self) -> VehicleConfig:
        """The :class:`VehicleConfig` these options describe."""
        return VehicleConfig(
            system_id=self.system_id,
            link_rate=self.link_rate,
            speed=self.speed,
            backend_off=self.backend_off,
            packet0_before_ack=self.packet0_before_ack,
            stray_acks=self.stray_acks,
            synthesize_perf=self.synthesize_perf,
            stop_at_end=self.stop_at_end,
        )


async def run_sim(options: SimOptions, *, stop_event: asyncio.Event | None = None) -> SimSummary:
    """Run ``ulogstream sim`` with ``options`` (see :func:`run_vehicle` for what may be raised)."""
    return await run_vehicle(
        options.log,
        options.connection,
        config=options.vehicle_config(),
        faults=options.faults,
        report_path=options.report,
        repeat=options.repeat,
        keep_deliveries=False,
        stop_event=stop_event,
    )


_NAMED_RATES = {"usb": USB_LINK_RATE, "udp": UDP_LINK_RATE}


def parse_rate(text: str) -> float | None:
    """``--rate``: bytes per second, ``usb`` (800000), ``udp`` (100000) or ``unlimited``.

    Raises:
        ConfigError: ``text`` is none of these.
    """
    word = text.strip().lower()
    if word == "unlimited":
        return None
    if word in _NAMED_RATES:
        return _NAMED_RATES[word]
    try:
        rate = float(word)
    except ValueError:
        rate = math.nan
    if not (math.isfinite(rate) and rate > 0):
        msg = f"--rate {text!r} is not a positive number of B/s, 'usb', 'udp' or 'unlimited'"
        raise ConfigError(msg)
    return rate


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
        help="udpout:HOST:PORT (toward a receiver on udpin), udpin:, tcpin:, or a serial device",
    )
    link = parser.add_argument_group("link and vehicle")
    link.add_argument(
        "--rate",
        default="udp",
        help="link rate in B/s, 'usb' (800000), 'udp' (100000, default) or 'unlimited'",
    )
    link.add_argument(
        "--speed", default="1", help="replay speed of the log's time, or 'max' (default 1)"
    )
    link.add_argument("--sysid", type=int, default=1, help="vehicle system id (default 1)")
    link.add_argument("--repeat", action="store_true", help="serve the log again after each STOP")
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
        "--perf-tail", action="store_true", help="add post-flight perf data on STOP if none"
    )
    link.add_argument(
        "--hold-end",
        action="store_true",
        help="at the end of the flight, hold the last packet until the receiver's STOP"
        " (default: end the log as a GCS's STOP on disarm does, sending every byte)",
    )
    link.add_argument("--report", type=Path, help="write delivered frames as JSON lines here")
    faults = parser.add_argument_group("faults (seeded; probabilities per LOGGING_DATA frame)")
    for name, text in (
        ("loss", "lose frames"),
        ("duplicate", "send frames twice"),
        ("reorder", "swap frames with the next one"),
        ("lost-acks", "drop received LOGGING_ACKs"),
        ("corrupt", "flip a byte (bad CRC)"),
        ("garbage", "send noise before frames"),
    ):
        faults.add_argument(f"--{name}", type=float, default=0.0, metavar="P", help=text)
    faults.add_argument("--seed", type=int, default=0, help="fault seed (default 0)")
    faults.add_argument(
        "--reboot-at", type=int, metavar="N", help="reboot at packet N of the first log"
    )
    faults.add_argument("--cut-at", metavar="N:SECONDS", help="cut the link at frame N for SECONDS")
    faults.add_argument(
        "--sitl-gap", type=int, default=0, metavar="N", help="lose N packets after the header"
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
    )
    system_id = int(args.sysid)
    if not 1 <= system_id <= 255:  # noqa: PLR2004
        msg = f"--sysid must be 1-255, not {system_id}"
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
        synthesize_perf=bool(args.perf_tail),
        stop_at_end=not bool(args.hold_end),
    )
