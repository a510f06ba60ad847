"""A log's life over a real UDP link: reboot, link cut, STOP handshake, refusals, other clients."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import time
from pathlib import Path
from typing import Any

import pytest
from support.end_to_end import (
    FAST,
    RECEIVER_COMPONENT,
    RECEIVER_SYSTEM,
    CountingTransport,
    deliveries_of,
    files,
    finished_messages,
    flight_log,
    listening_vehicle,
    read_pyulog,
    record,
    recorded_items,
    recorder_settings,
    spans,
    theoretical_maximum,
    vehicle_packets,
)
from support.packetize import definitions_end
from support.waiting import eventually, holds_for

from ulogstream.adapters import file_sink
from ulogstream.adapters.udp_transport import UdpTransport
from ulogstream.cli.demo import free_udp_port
from ulogstream.mavlink_codec import MavlinkCodec
from ulogstream.recorder.wiring import build_recorder
from ulogstream.sim.faults import FaultConfig
from ulogstream.sim.runner import run_vehicle
from ulogstream.sim.vehicle import USB_LINK_RATE, VehicleConfig
from ulogstream.stream.packets import (
    MAV_CMD_LOGGING_START,
    MAV_CMD_LOGGING_STOP,
    MAV_CMD_REQUEST_MESSAGE,
    CommandLong,
    LoggingPacket,
)
from ulogstream.ulog.spec import MessageType
from ulogstream.ulog.writer import ULogWriter

START, STOP = MAV_CMD_LOGGING_START, MAV_CMD_LOGGING_STOP


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_reboot_mid_log_gives_two_valid_files(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="ulogstream")
    log = flight_log(4.0, seed=21)
    link, connection = await listening_vehicle()
    recorder = build_recorder(recorder_settings(connection, tmp_path))
    faults = FaultConfig(reboot_at=400)
    run = await record(log, recorder, link, faults=faults, stop_after_log=1)
    assert run.exit_code == 0
    assert run.summary.stats.reboots == 1
    first, second = run.files
    # The first file holds every whole message of the 400 packets sent before the reboot.
    expected = theoretical_maximum(log, vehicle_packets(log), deliveries_of(run.summary, 0))
    assert recorded_items(first.read_bytes())[0] == expected
    assert len(first.read_bytes()) < len(log)
    assert second.read_bytes() == log
    read_pyulog(first)
    read_pyulog(second)
    finished = finished_messages(caplog)
    assert "incomplete" in finished[0]
    assert "new log" in finished[0]
    assert "complete; stopped" in finished[1]


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_a_cut_past_the_idle_timeout_finishes_the_file_and_the_log_goes_on_in_a_second(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 21 item 5: the vehicle streams on through the cut; nothing of it is lost or STOPped."""
    caplog.set_level(logging.INFO, logger="ulogstream")
    log = flight_log(8.0, seed=22)
    link, connection = await listening_vehicle()
    recorder = build_recorder(recorder_settings(connection, tmp_path, idle_timeout_s=0.5))
    config = VehicleConfig(link_rate=USB_LINK_RATE, speed=None, stop_accept_delay=0.0)
    faults = FaultConfig(cut_at=800, cut_seconds=2.0)
    files_at_cut_end: list[int] = []

    def delivered(log_index: int) -> None:
        if log_index == 1:
            files_at_cut_end.append(len(recorder.status.finished))

    run = await record(
        log,
        recorder,
        link,
        config=config,
        faults=faults,
        repeat=True,
        stop_after_log=1,
        on_delivered=delivered,
    )
    assert run.exit_code == 0
    assert run.summary.stats.cut_drops > 0
    assert run.summary.stats.logs_started == 2  # no STOP/START for the cut itself
    *parts, second = run.files
    first = parts[0]
    # The cut went past the idle timeout, and so did the sim's wait for a STOP at the log's
    # end (it sends nothing then, a real PX4 always has data): log 0 is in three files.
    assert [part.name for part in parts[1:]] == [f"{first.stem}_part{n}.ulg" for n in (2, 3)]
    assert files_at_cut_end == [3]  # every file of log 0 was closed before log 1 was in
    # Log 0, all the cut let through, its tail after our STOP included; each later file
    # starts with the log's head and a dropout.
    expected = theoretical_maximum(log, vehicle_packets(log), deliveries_of(run.summary, 0))
    items, durations = recorded_items(first.read_bytes())
    head = len(recorded_items(log[: definitions_end(log)])[0])
    for part in parts[1:]:
        after, part_durations = recorded_items(part.read_bytes())
        assert after[:head] == expected[:head]  # the header, definitions and subscriptions
        items += after[head:]
        durations += part_durations
        read_pyulog(part)
    assert items == expected
    assert 1900 <= durations[0] <= 2600  # the dropout spans the cut
    assert second.read_bytes() == log
    read_pyulog(first)
    finished = finished_messages(caplog)
    assert "incomplete" in finished[0]
    assert "data timeout" in finished[0]
    assert run.recorder.status.link_reconnects == 0  # UDP never closed: the session restarted


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_stop_handshake_records_the_acked_post_flight_tail(tmp_path: Path) -> None:
    log = flight_log(15.0, seed=23)  # shorter generated flights end with 'Landing detected'
    assert spans(log)[-1].msg_type == MessageType.INFO_MULTIPLE
    link, connection = await listening_vehicle()
    recorder = build_recorder(recorder_settings(connection, tmp_path), once=True)
    delivered_at: list[float] = []
    config = VehicleConfig(link_rate=None, speed=None)  # 0.19 s from IN_PROGRESS to ACCEPTED
    run = await record(
        log,
        recorder,
        link,
        config=config,
        on_delivered=lambda _: delivered_at.append(time.monotonic()),
    )
    assert run.exit_code == 0
    (path,) = run.files
    assert path.read_bytes() == log
    after_stop = [d for d in deliveries_of(run.summary, 0) if d.time >= delivered_at[0]]
    assert after_stop
    assert all(d.acked for d in after_stop)
    tail = b"".join(d.data for d in after_stop)
    assert log.endswith(tail)
    assert b"perf_counter_postflight" in tail
    assert b"perf_top_postflight" in tail


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_stop_brings_a_synthesised_perf_message_into_the_file(tmp_path: Path) -> None:
    writer = ULogWriter(timestamp_us=5_000)
    writer.format("small:uint64_t timestamp;float x;")
    writer.info("char", "sys_name", "PX4")
    msg_id = writer.add_logged_message("small")
    for number in range(2000):
        writer.data(msg_id, (1_000_000 + number * 1000).to_bytes(8, "little") + bytes(4))
    log = writer.getvalue()
    link, connection = await listening_vehicle()
    recorder = build_recorder(recorder_settings(connection, tmp_path), once=True)
    config = VehicleConfig(link_rate=None, speed=None, synthesize_perf=True)
    run = await record(log, recorder, link, config=config)
    (path,) = run.files
    recording = path.read_bytes()
    assert recording.startswith(log)
    extra = recording[len(log) :]
    assert extra[2] == MessageType.INFO_MULTIPLE
    assert b"perf_counter_postflight" in extra
    read_pyulog(path)


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_backend_off_is_rejected_after_one_stop_and_retry(tmp_path: Path) -> None:
    link, connection = await listening_vehicle()
    counting = CountingTransport(link)
    recorder = build_recorder(recorder_settings(connection, tmp_path), once=True)
    config = VehicleConfig(link_rate=None, speed=None, backend_off=True)
    run = await record(flight_log(1.0), recorder, counting, config=config, stop_after_log=None)
    assert run.exit_code == 1
    assert run.recorder.status.error is not None
    assert "backend is off" in run.recorder.status.error
    assert counting.commands == [START, STOP, START]
    assert not files(tmp_path, "*.ulg*")


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_stream_left_running_by_a_crashed_receiver_is_taken_over(tmp_path: Path) -> None:
    log = flight_log(3.0, seed=24)
    link, connection = await listening_vehicle()
    counting = CountingTransport(link)
    delivered: list[int] = []
    stop_vehicle = asyncio.Event()
    vehicle = asyncio.create_task(
        run_vehicle(
            log,
            counting,
            config=FAST,
            repeat=True,
            stop_event=stop_vehicle,
            on_log_delivered=delivered.append,
        )
    )
    # A receiver with our ids starts the stream, acks the definitions, then dies without STOP.
    crashed = await UdpTransport.connect("127.0.0.1", link.local_address[1])
    codec = MavlinkCodec(system_id=RECEIVER_SYSTEM, component_id=RECEIVER_COMPONENT)
    crashed.send(codec.encode_command_long(START, 0.0, 1, 1))

    async def ack_until_delivered() -> None:
        while not delivered:
            for message in codec.decode(await crashed.receive()):
                if isinstance(message, LoggingPacket) and message.needs_ack:
                    crashed.send(codec.encode_logging_ack(message.sequence, 1, 1))

    acking = asyncio.create_task(ack_until_delivered())
    await eventually(lambda: bool(delivered), what="the first stream never got going")
    acking.cancel()
    await crashed.aclose()

    recorder = build_recorder(recorder_settings(connection, tmp_path), once=True)
    recorder_task = asyncio.create_task(recorder.run())
    await eventually(lambda: len(delivered) == 2, what="the recorder never got its own stream")
    recorder.request_stop()
    async with asyncio.timeout(20):
        exit_code = await recorder_task
    stop_vehicle.set()
    summary = await vehicle
    assert exit_code == 0
    assert counting.commands == [START, START, STOP, START, STOP]
    assert summary.logs_started == 2
    (path,) = [finished.path for finished in recorder.status.finished]
    assert path.read_bytes() == log


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_denied_is_a_clear_error_without_retries(tmp_path: Path) -> None:
    link, connection = await listening_vehicle()
    counting = CountingTransport(link)
    recorder = build_recorder(recorder_settings(connection, tmp_path))  # not --once: it would go on
    config = VehicleConfig(link_rate=4000.0, speed=None)  # a telemetry radio's rate

    async def stop_later() -> None:
        await eventually(lambda: recorder.status.error is not None, what="no rejection reported")
        # Nothing to wait for: no retry must come. 2.5 command retry intervals, checked throughout.
        await holds_for(lambda: counting.commands == [START], 2.5, what="denied START retried")
        recorder.request_stop()

    stopper = asyncio.create_task(stop_later())
    run = await record(flight_log(1.0), recorder, counting, config=config, stop_after_log=None)
    await stopper
    error = run.recorder.status.error
    assert error is not None
    assert "denied" in error
    assert "too slow" in error
    assert counting.commands == [START]
    assert not files(tmp_path, "*.ulg*")


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_denied_with_once_exits_non_zero(tmp_path: Path) -> None:
    link, connection = await listening_vehicle()
    counting = CountingTransport(link)
    recorder = build_recorder(recorder_settings(connection, tmp_path), once=True)
    config = VehicleConfig(link_rate=4000.0, speed=None)
    run = await record(flight_log(1.0), recorder, counting, config=config, stop_after_log=None)
    assert run.exit_code == 1
    assert counting.commands == [START]


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_another_clients_stop_makes_the_recorder_stream_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="ulogstream")
    log = flight_log(3.0, seed=25)
    port = free_udp_port()
    recorder = build_recorder(
        recorder_settings(f"udpin:127.0.0.1:{port}", tmp_path, idle_timeout_s=1.0)
    )
    vehicle_link = await UdpTransport.connect("127.0.0.1", port)
    # A ground station on the same vehicle: its commands reach the vehicle, whose replies go
    # out on the recorder's link (PX4 sends COMMAND_ACK on every link).
    ground_station = await UdpTransport.connect("127.0.0.1", vehicle_link.local_address[1])
    gcs_codec = MavlinkCodec(system_id=255, component_id=190)

    def delivered(log_index: int) -> None:
        if log_index == 0:
            ground_station.send(gcs_codec.encode_command_long(STOP, 0.0, 1, 1))

    try:
        run = await record(
            log, recorder, vehicle_link, repeat=True, stop_after_log=1, on_delivered=delivered
        )
    finally:
        await ground_station.aclose()
    assert run.exit_code == 0
    assert run.summary.logs_started == 2
    first, second = run.files
    assert first.read_bytes() == log  # the tail sent on the other client's STOP came to us
    assert second.read_bytes() == log
    read_pyulog(first)


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_another_clients_stop_ends_the_log_as_complete_at_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="ulogstream")
    port = free_udp_port()
    recorder = build_recorder(recorder_settings(f"udpin:127.0.0.1:{port}", tmp_path), once=True)
    vehicle_link = await UdpTransport.connect("127.0.0.1", port)
    ground_station = await UdpTransport.connect("127.0.0.1", vehicle_link.local_address[1])
    gcs_codec = MavlinkCodec(system_id=255, component_id=190)

    def delivered(_: int) -> None:
        ground_station.send(gcs_codec.encode_command_long(STOP, 0.0, 1, 1))

    try:
        await record(
            flight_log(3.0, seed=26),
            recorder,
            vehicle_link,
            repeat=True,
            stop_after_log=None,
            on_delivered=delivered,
            limit_s=4.0,  # the idle timeout (5 s) must not be needed
        )
    finally:
        await ground_station.aclose()
    assert "complete; stopped by another client" in finished_messages(caplog)[0]


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_new_log_with_another_header_mid_stream_starts_a_second_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A scripted vehicle: log A breaks off after 300 packets and log B begins at sequence 0
    # (a reboot on real hardware: another header time). The end of A and the start of B come
    # out of one packet, while A's file is still being closed.
    caplog.set_level(logging.INFO, logger="ulogstream")
    log_a = flight_log(3.0, seed=27)
    log_b = flight_log(2.0, seed=28, start_timestamp_us=17_000_000)
    port = free_udp_port()
    recorder = build_recorder(recorder_settings(f"udpin:127.0.0.1:{port}", tmp_path))
    recorder_task = asyncio.create_task(recorder.run())
    vehicle = await UdpTransport.connect("127.0.0.1", port)
    codec = MavlinkCodec(system_id=1, component_id=1)
    commands: list[int] = []

    async def answer_commands() -> None:
        while True:
            for message in codec.decode(await vehicle.receive()):
                if isinstance(message, CommandLong):
                    vehicle.send(codec.encode_command_ack(message.command, 0, 254, 155))
                    if message.command == MAV_CMD_REQUEST_MESSAGE:  # who it is: no GUID
                        vehicle.send(codec.encode_autopilot_version(uid=0, uid2=b""))
                    else:
                        commands.append(message.command)

    answering = asyncio.create_task(answer_commands())
    try:
        while not commands:
            vehicle.send(codec.encode_heartbeat(mav_type=2, autopilot=12))
            await asyncio.sleep(0.05)
        packets = vehicle_packets(log_a)[:300] + vehicle_packets(log_b)
        for number, packet in enumerate(packets):
            vehicle.send(
                codec.encode_logging_data(
                    packet.sequence,
                    254,
                    155,
                    packet.first_message_offset,
                    packet.data,
                    acked=packet.needs_ack,
                )
            )
            if number % 32 == 0:
                await asyncio.sleep(0.001)
        await eventually(
            lambda: recorder.status.bytes_total >= len(log_b) + 300 * 200, what="data not in"
        )
        recorder.request_stop()
        async with asyncio.timeout(10):
            assert await recorder_task == 0
    finally:
        answering.cancel()
        await vehicle.aclose()
    assert commands == [START, STOP]
    first, second = [finished.path for finished in recorder.status.finished]
    assert log_a.startswith(first.read_bytes())
    assert len(first.read_bytes()) > 300 * 200
    assert second.read_bytes() == log_b
    read_pyulog(first)
    read_pyulog(second)
    assert "new log" in finished_messages(caplog)[0]


async def record_past_a_disk_fault(tmp_path: Path, *, seed: int) -> tuple[str, Path]:
    """Two logs (the vehicle reboots) while the first one meets a disk fault set up before.

    The second log must be recorded whole, acking must never stop, and the first log's
    ``.part`` must stay as far as it reached the disk. Returns the status error and that part.
    """
    log = flight_log(4.0, seed=seed)
    link, connection = await listening_vehicle()
    recorder = build_recorder(recorder_settings(connection, tmp_path))
    run = await record(log, recorder, link, faults=FaultConfig(reboot_at=400), stop_after_log=1)
    assert run.exit_code == 0
    (second,) = run.files
    assert second.read_bytes() == log
    assert run.summary.stats.ack_timeouts == 0
    (part,) = files(tmp_path, "*.ulg.part")
    assert log.startswith(part.read_bytes())
    error = run.recorder.status.error
    assert error is not None
    return error, part


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_a_failed_finalise_keeps_its_part_and_recording_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="ulogstream")
    real_finalise = file_sink._finalise
    calls = 0

    def eio_once(open_log: Any) -> Path:  # noqa: ANN401 (the sink's private record)
        nonlocal calls
        calls += 1
        if calls == 1:
            os.close(open_log.fd)
            raise OSError(errno.EIO, "Input/output error")
        return real_finalise(open_log)

    monkeypatch.setattr(file_sink, "_finalise", eio_once)
    error, part = await record_past_a_disk_fault(tmp_path, seed=26)
    assert "Input/output error" in error
    assert f"{part.name} is kept and recovered at start-up" in error


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_a_disk_that_fails_mid_log_ends_that_log_and_the_next_is_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_write = os.write
    failed: list[int] = []

    def read_only_once(fd: int, data: bytes) -> int:
        if not failed and str(Path(f"/proc/self/fd/{fd}").readlink()).endswith(".ulg.part"):
            failed.append(fd)
            raise OSError(errno.EROFS, "Read-only file system")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", read_only_once)
    error, _part = await record_past_a_disk_fault(tmp_path, seed=27)
    assert failed
    assert "Read-only file system" in error
    assert "recording goes on with the next log" in error


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_a_stream_ended_during_its_header_leaves_no_log_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 21 item 6: a blackout during the header; PX4 gives up (ack timeout) and starts over."""
    caplog.set_level(logging.INFO, logger="ulogstream")
    log = flight_log(4.0, seed=23)
    link, connection = await listening_vehicle()
    recorder = build_recorder(recorder_settings(connection, tmp_path, idle_timeout_s=1.0))
    config = VehicleConfig(link_rate=USB_LINK_RATE, speed=None, stop_accept_delay=0.0)
    faults = FaultConfig(cut_at=20, cut_seconds=4.0)  # ACKED packet 20 goes unanswered
    run = await record(
        log, recorder, link, config=config, faults=faults, repeat=True, stop_after_log=1
    )
    assert run.exit_code == 0
    assert run.summary.ack_timeouts == 1
    (path,) = files(tmp_path, "*.ulg")  # the header-only start left nothing behind
    assert path.read_bytes() == log
    assert not files(tmp_path, "*.part")
    assert recorder.status.logs_discarded == 1
    assert any("the stream ended before any data" in r.getMessage() for r in caplog.records)
