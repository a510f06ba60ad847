"""The simulator over real UDP sockets on 127.0.0.1, against a minimal receiver written here."""

from __future__ import annotations

import argparse
import asyncio
import errno
import json
import os
import struct
from typing import TYPE_CHECKING

import msgspec
import pytest
from support.waiting import eventually

from ulogstream.adapters.tcp_transport import TcpServerTransport, TcpTransport
from ulogstream.adapters.udp_transport import UdpTransport
from ulogstream.errors import ConfigError, ULogFormatError
from ulogstream.mavlink_codec import MavlinkCodec
from ulogstream.sim.faults import FaultConfig
from ulogstream.sim.runner import (
    RADIO_BANDWIDTH,
    PtyDevice,
    SimOptions,
    add_sim_arguments,
    open_vehicle_link,
    parse_bandwidth,
    parse_cut,
    parse_milliseconds,
    parse_rate,
    parse_speed,
    run_sim,
    run_vehicle,
    sim_options_from_args,
)
from ulogstream.sim.vehicle import RADIO_LINK_RATE, USB_LINK_RATE, VehicleConfig, split_log
from ulogstream.stream.packets import (
    MAV_CMD_LOGGING_START,
    MAV_CMD_LOGGING_STOP,
    MAX_DATA_LENGTH,
    CommandAck,
    Heartbeat,
    LoggingPacket,
    MavResult,
)
from ulogstream.ulog.writer import ULogWriter

if TYPE_CHECKING:
    from pathlib import Path

    from ulogstream.adapters.transport import Transport

RECEIVER_ID = (42, 155)
# 300 kB/s: bursts of 79 frames per 100 ms, well inside a loopback socket's receive buffer.
CONFIG = VehicleConfig(link_rate=300_000, speed=None, stop_accept_delay=0.0)


def make_log(samples: int = 500) -> bytes:
    writer = ULogWriter(timestamp_us=1)
    writer.flag_bits()
    writer.info("char", "sys_name", "PX4")
    writer.format("sensor:uint64_t timestamp;float[20] values;")
    for index in range(50):
        writer.parameter(f"PARAM_{index}", index)
    topic = writer.add_logged_message("sensor")
    for sample in range(samples):
        values = [float(sample + i) for i in range(20)]
        writer.data(topic, struct.pack("<Q20f", 1000 + sample * 1000, *values))
        if sample == samples // 2:
            writer.add_logged_message("sensor", multi_id=1)
    writer.info_multiple("char", "perf_counter_postflight", "logger: 1 event")
    return writer.getvalue()


LOG = make_log()
_SPLIT = split_log(LOG)
BEFORE_STOP = sum(len(m.data) for m in _SPLIT.messages[: _SPLIT.tail_start]) - MAX_DATA_LENGTH + 1
"""Bytes surely sent before STOP: all but the post-flight tail and the unflushed partial packet."""


class MiniReceiver(msgspec.Struct):
    """The least a receiver must do: START, ack every acked copy, collect by sequence, STOP."""

    transport: Transport
    codec: MavlinkCodec = msgspec.field(
        default_factory=lambda: MavlinkCodec(system_id=RECEIVER_ID[0], component_id=RECEIVER_ID[1])
    )
    packets: dict[int, bytes] = msgspec.field(default_factory=dict)
    copies: int = 0
    acks: list[CommandAck] = msgspec.field(default_factory=list)
    heartbeats: int = 0

    def command(self, command: int) -> None:
        self.transport.send(self.codec.encode_command_long(command, 0.0, 1, 1))

    async def record(
        self, *, start_now: bool = False, stop_after: int | None = None, idle: float = 0.3
    ) -> bytes:
        """Stream one log: START, take packets, STOP, wait for ACCEPTED.

        STOP goes once ``stop_after`` bytes are in, or (without it) when the stream goes quiet;
        it is resent whenever nothing arrives for ``idle`` seconds after that.
        """
        self.packets = {}
        received = 0
        started = start_now
        stopping = False
        if start_now:
            self.command(MAV_CMD_LOGGING_START)
        while True:
            try:
                data = await asyncio.wait_for(self.transport.receive(), timeout=idle)
            except TimeoutError:
                if started and (stopping or stop_after is None):
                    stopping = True
                    self.command(MAV_CMD_LOGGING_STOP)
                continue
            for message in self.codec.decode(data):
                match message:
                    case Heartbeat():
                        self.heartbeats += 1
                        if not started:
                            started = True
                            self.command(MAV_CMD_LOGGING_START)
                    case LoggingPacket(sequence=sequence, data=payload, needs_ack=needs_ack):
                        if needs_ack:
                            self.transport.send(self.codec.encode_logging_ack(sequence, 1, 1))
                        self.copies += 1
                        if sequence not in self.packets:
                            self.packets[sequence] = payload
                            received += len(payload)
                        if stop_after is not None and received >= stop_after and not stopping:
                            stopping = True
                            self.command(MAV_CMD_LOGGING_STOP)
                    case CommandAck(command=command, result=result):
                        self.acks.append(message)
                        if stopping and command == MAV_CMD_LOGGING_STOP and result == 0:
                            return b"".join(self.packets[s] for s in sorted(self.packets))


@pytest.mark.asyncio
@pytest.mark.timeout(30)
async def test_runner_streams_the_exact_file_over_udp(tmp_path: Path) -> None:
    receiver = MiniReceiver(await UdpTransport.listen("127.0.0.1", 0))
    port = receiver.transport.local_address[1]  # type: ignore[attr-defined]
    report = tmp_path / "delivered.jsonl"
    sim = asyncio.create_task(
        run_vehicle(LOG, f"udpout:127.0.0.1:{port}", config=CONFIG, report_path=report)
    )
    try:
        received = await receiver.record(stop_after=BEFORE_STOP)
        summary = await asyncio.wait_for(sim, timeout=5)
    finally:
        await receiver.transport.aclose()
    assert received == LOG
    assert receiver.heartbeats >= 1  # the receiver only STARTs after the vehicle's heartbeat
    assert summary.logs_started == summary.logs_stopped == 1
    assert summary.transport_drops == 0
    assert summary.delivered == receiver.copies == len(summary.deliveries)
    lines = [json.loads(line) for line in report.read_text().splitlines()]
    assert len(lines) == summary.delivered
    assert bytes.fromhex(lines[0]["data"]).startswith(b"ULog")
    assert [line["seq"] for line in lines if not line["acked"]] == sorted(
        line["seq"] for line in lines if not line["acked"]
    )
    results = [(a.command, a.result) for a in receiver.acks]
    assert results == [
        (MAV_CMD_LOGGING_START, MavResult.ACCEPTED),
        (MAV_CMD_LOGGING_STOP, MavResult.IN_PROGRESS),
        (MAV_CMD_LOGGING_STOP, MavResult.ACCEPTED),
    ]


@pytest.mark.asyncio
@pytest.mark.timeout(30)
async def test_delivery_report_is_exactly_what_a_receiver_can_recover() -> None:
    faults = FaultConfig(
        seed=11, loss=0.1, duplicate=0.05, reorder=0.05, corrupt=0.05, garbage=0.05, lost_acks=0.1
    )
    receiver = MiniReceiver(await UdpTransport.listen("127.0.0.1", 0))
    port = receiver.transport.local_address[1]  # type: ignore[attr-defined]
    sim = asyncio.create_task(
        run_vehicle(LOG, f"udpout:127.0.0.1:{port}", config=CONFIG, faults=faults)
    )
    try:
        await receiver.record()
        summary = await asyncio.wait_for(sim, timeout=5)
    finally:
        await receiver.transport.aclose()
    delivered = {d.sequence: d.data for d in summary.deliveries}
    assert receiver.packets == delivered
    assert receiver.copies == summary.delivered
    stats = summary.stats
    assert stats.link_losses
    assert stats.duplicated
    assert stats.corrupted
    assert stats.garbage
    assert receiver.codec.bad_frames >= stats.corrupted
    assert len(delivered) < stats.packets_published


@pytest.mark.asyncio
@pytest.mark.timeout(30)
async def test_repeat_serves_the_log_again_on_an_open_transport() -> None:
    vehicle_side = await UdpTransport.listen("127.0.0.1", 0)
    port = vehicle_side.local_address[1]
    stop = asyncio.Event()
    sim = asyncio.create_task(
        run_vehicle(LOG, vehicle_side, config=CONFIG, repeat=True, stop_event=stop)
    )
    receiver = MiniReceiver(await UdpTransport.connect("127.0.0.1", port))
    try:
        first = await receiver.record(start_now=True, stop_after=BEFORE_STOP)
        second = await receiver.record(start_now=True, stop_after=BEFORE_STOP)
        stop.set()
        summary = await asyncio.wait_for(sim, timeout=5)
    finally:
        await receiver.transport.aclose()
    assert first == second == LOG
    assert summary.logs_started == summary.logs_stopped == 2


@pytest.mark.asyncio
@pytest.mark.timeout(30)
async def test_tcp_stream_at_usb_rate_with_noise_matches_the_report() -> None:
    vehicle_side = await TcpServerTransport.listen("127.0.0.1", 0)
    port = vehicle_side.local_address[1]
    config = VehicleConfig(link_rate=USB_LINK_RATE, speed=None, stop_accept_delay=0.0)
    faults = FaultConfig(seed=3, corrupt=0.05, garbage=0.2, loss=0.05)
    sim = asyncio.create_task(run_vehicle(LOG, vehicle_side, config=config, faults=faults))
    receiver = MiniReceiver(await TcpTransport.connect("127.0.0.1", port))
    try:
        await receiver.record(start_now=True)
        summary = await asyncio.wait_for(sim, timeout=5)
    finally:
        await receiver.transport.aclose()
    assert summary.transport_drops == 0
    assert summary.stats.garbage > 0
    assert receiver.packets == {d.sequence: d.data for d in summary.deliveries}
    assert receiver.copies == summary.delivered


@pytest.mark.asyncio
@pytest.mark.timeout(30)
async def test_run_sim_rejects_a_bad_connection_string(tmp_path: Path) -> None:
    path = tmp_path / "log.ulg"
    path.write_bytes(LOG)
    with pytest.raises(ConfigError, match="connection 'carrier-pigeon:1'"):
        await run_sim(SimOptions(log=path, connection="carrier-pigeon:1"))


@pytest.mark.parametrize(
    "words",
    [
        ["--stream-lead", "2"],
        ["--sd-card", "--stream-lead", "-1"],
        ["--sd-card", "--stream-lead=nan"],
    ],
)
def test_a_stream_lead_needs_an_sd_card_and_a_time(words: list[str]) -> None:
    parser = argparse.ArgumentParser()
    add_sim_arguments(parser)
    args = parser.parse_args(["flight.ulg", "udpout:127.0.0.1:14550", *words])
    with pytest.raises(
        ConfigError, match="--stream-lead must be 0 or more seconds, with --sd-card"
    ):
        sim_options_from_args(args)


def test_a_stream_lead_is_kept() -> None:
    parser = argparse.ArgumentParser()
    add_sim_arguments(parser)
    args = parser.parse_args(["f.ulg", "udpout:127.0.0.1:1", "--sd-card", "--stream-lead", "2.5"])
    assert sim_options_from_args(args).stream_lead_s == 2.5


def test_command_line_options() -> None:
    parser = argparse.ArgumentParser()
    add_sim_arguments(parser)
    args = parser.parse_args(
        [
            "flight.ulg",
            "udpout:127.0.0.1:14550",
            "--loss=0.1",
            "--duplicate=0.2",
            "--reorder=0.3",
            "--lost-acks=0.4",
            "--corrupt=0.05",
            "--garbage=0.01",
            "--reboot-at=500",
            "--cut-at=800:2.5",
            "--sitl-gap=7",
            "--seed=3",
            "--rate=usb",
            "--speed=max",
            "--report=out.jsonl",
            "--repeat",
            "--stray-acks",
            "--perf-tail",
        ]
    )
    options = sim_options_from_args(args)
    assert options.connection == "udpout:127.0.0.1:14550"
    assert options.link_rate == USB_LINK_RATE
    assert options.speed is None
    assert options.repeat
    assert options.report is not None
    assert options.report.name == "out.jsonl"
    assert options.faults == FaultConfig(
        seed=3,
        loss=0.1,
        duplicate=0.2,
        reorder=0.3,
        lost_acks=0.4,
        corrupt=0.05,
        garbage=0.01,
        reboot_at=500,
        cut_at=800,
        cut_seconds=2.5,
        sitl_gap=7,
    )
    config = options.vehicle_config()
    assert config.stray_acks
    assert config.synthesize_perf
    assert not config.backend_off
    radio = sim_options_from_args(
        parser.parse_args(
            [
                "f.ulg",
                "pty:/tmp/pixhawk",
                "--rate=radio",
                "--bandwidth=radio",
                "--delay-ms=40",
                "--jitter-ms=15",
                "--accept-stop-at-once",
            ]
        )
    )
    assert radio.connection == "pty:/tmp/pixhawk"
    assert radio.link_rate == RADIO_LINK_RATE
    assert radio.faults == FaultConfig(delay=0.04, jitter=0.015, bandwidth=RADIO_BANDWIDTH)
    assert radio.vehicle_config().accept_stop_at_once
    defaults = sim_options_from_args(parser.parse_args(["f.ulg", "udpin:0.0.0.0:14550"]))
    assert defaults.link_rate == 100_000
    assert defaults.speed == 1.0
    assert defaults.faults == FaultConfig()
    with pytest.raises(ConfigError, match="between 0 and 1"):
        sim_options_from_args(parser.parse_args(["f.ulg", "udpin:0.0.0.0:1", "--loss=2"]))


@pytest.mark.parametrize(
    ("text", "rate"), [("unlimited", None), ("UDP", 100_000.0), ("250000", 250_000.0)]
)
def test_parse_rate(text: str, rate: float | None) -> None:
    assert parse_rate(text) == rate


@pytest.mark.parametrize(
    ("parse", "text", "match"),
    [
        (parse_rate, "fast", "--rate 'fast'"),
        (parse_rate, "-5", "--rate '-5'"),
        (parse_speed, "0", "--speed '0'"),
        (parse_speed, "warp", "--speed 'warp'"),
        (parse_cut, "500", "--cut-at '500'"),
        (parse_cut, "x:1", "--cut-at 'x:1'"),
        (parse_bandwidth, "fast", "--bandwidth 'fast'"),
        (parse_bandwidth, "0", "--bandwidth '0'"),
    ],
)
def test_bad_option_values(parse: object, text: str, match: str) -> None:
    assert callable(parse)
    with pytest.raises(ConfigError, match=match):
        parse(text)


def test_parse_speed_and_cut() -> None:
    assert parse_speed("2.5") == 2.5
    assert parse_speed("max") is None
    assert parse_cut("120:0.5") == (120, 0.5)


def test_parse_wire_options() -> None:
    assert parse_bandwidth("radio") == RADIO_BANDWIDTH
    assert parse_bandwidth("unlimited") is None
    assert parse_bandwidth("12000") == 12_000.0
    assert parse_milliseconds("--delay-ms", "40") == 0.04
    with pytest.raises(ConfigError, match="--jitter-ms '-1' is not a number of milliseconds"):
        parse_milliseconds("--jitter-ms", "-1")


@pytest.mark.asyncio
async def test_pty_connection_needs_a_path() -> None:
    with pytest.raises(ConfigError, match="names no device path"):
        await open_vehicle_link("pty:")


@pytest.mark.asyncio
@pytest.mark.timeout(30)
async def test_delayed_jittery_link_delivers_everything_it_reports() -> None:
    receiver = MiniReceiver(await UdpTransport.listen("127.0.0.1", 0))
    port = receiver.transport.local_address[1]  # type: ignore[attr-defined]
    faults = FaultConfig(seed=2, delay=0.02, jitter=0.01)
    sim = asyncio.create_task(
        run_vehicle(LOG, f"udpout:127.0.0.1:{port}", config=CONFIG, faults=faults)
    )
    try:
        received = await receiver.record(stop_after=BEFORE_STOP)
        summary = await asyncio.wait_for(sim, timeout=5)
    finally:
        await receiver.transport.aclose()
    assert received == LOG
    assert summary.delivered == receiver.copies
    sequences = [d.sequence for d in summary.deliveries if not d.acked]
    assert sequences != sorted(sequences)  # the wire reordered them, as reported
    # The last COMMAND_ACK left the wire before the run ended.
    assert (receiver.acks[-1].command, receiver.acks[-1].result) == (
        MAV_CMD_LOGGING_STOP,
        MavResult.ACCEPTED,
    )


def read_some(fd: int) -> bytes:
    try:
        return os.read(fd, 4096)
    except BlockingIOError:
        return b""
    except OSError as err:  # a hung-up terminal reads EIO on some kernels
        if err.errno != errno.EIO:
            raise
        return b""


async def read_exactly(fd: int, size: int) -> bytes:
    """Read ``size`` bytes from the non-blocking ``fd`` as they come."""
    got = bytearray()

    def complete() -> bool:
        got.extend(read_some(fd))
        return len(got) >= size

    await eventually(complete, what=f"{size} bytes never arrived")
    return bytes(got)


@pytest.mark.asyncio
@pytest.mark.timeout(30)
async def test_pty_device_is_unplugged_and_plugged_back_at_the_same_path(tmp_path: Path) -> None:
    path = tmp_path / "pixhawk"
    device = PtyDevice.create(path)
    try:
        assert not bool(device.host_open)  # (a call: mypy must not narrow the property)
        receiver = os.open(path, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK)
        assert device.host_open
        device.send(b"before")
        assert await read_exactly(receiver, 6) == b"before"
        os.write(receiver, b"hello vehicle")
        assert await asyncio.wait_for(device.receive(), 5) == b"hello vehicle"

        await device.unplug()
        assert not path.exists()
        assert os.read(receiver, 10) == b""  # hung up, as a pulled USB device
        os.close(receiver)
        dropped = device.dropped_sends
        device.send(b"into the void")
        assert device.dropped_sends == dropped + 1
        pending = asyncio.ensure_future(device.receive())

        device.plug()
        assert path.exists()
        assert not bool(device.host_open)  # (a call: mypy must not narrow the property)
        device.send(b"before the receiver is back")  # nobody has the port open: lost
        assert device.dropped_sends == dropped + 2
        receiver = os.open(path, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK)
        assert device.host_open
        device.send(b"after")
        assert await read_exactly(receiver, 5) == b"after"
        os.write(receiver, b"again")
        assert await asyncio.wait_for(pending, 5) == b"again"
        os.close(receiver)
    finally:
        await device.aclose()
    assert not path.exists()
    assert await device.receive() == b""


@pytest.mark.asyncio
@pytest.mark.timeout(30)
async def test_an_unanswered_acked_packet_ends_the_stream_with_an_ack_timeout(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level("INFO", logger="ulogstream.sim")
    receiver = await UdpTransport.listen("127.0.0.1", 0)
    port = receiver.local_address[1]
    stop = asyncio.Event()
    sim = asyncio.create_task(
        run_vehicle(LOG, f"udpout:127.0.0.1:{port}", config=CONFIG, stop_event=stop)
    )
    codec = MavlinkCodec(system_id=RECEIVER_ID[0], component_id=RECEIVER_ID[1])
    try:
        await receiver.receive()  # the vehicle's first heartbeat: its address is known
        receiver.send(codec.encode_command_long(MAV_CMD_LOGGING_START, 0.0, 1, 1))
        # Packet 0 is never acked: PX4 resends it every 50 ms and gives up after 50 tries.
        await eventually(
            lambda: "Ack timeout. Stopping mavlink log" in caplog.text,
            what="the vehicle never gave up",
        )
        stop.set()
        summary = await asyncio.wait_for(sim, timeout=5)
    finally:
        await receiver.aclose()
    assert summary.ack_timeouts == 1
    assert summary.stats.frames_sent == 50  # 50 tries, 50 ms apart
    assert "1 ack timeouts" in caplog.text


@pytest.mark.asyncio
@pytest.mark.parametrize("sd_card", [False, True])
async def test_run_sim_names_a_file_that_is_not_a_ulog(tmp_path: Path, *, sd_card: bool) -> None:
    path = tmp_path / "notes.txt"
    path.write_bytes(b"not a log at all")
    options = SimOptions(
        log=path, connection="udpout:127.0.0.1:9", sd_card=sd_card, stream_lead_s=2.0 * sd_card
    )
    with pytest.raises(ULogFormatError, match=f"{path} is not a ULog file"):
        await run_sim(options)
