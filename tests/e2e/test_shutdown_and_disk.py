"""Signals to a recorder process, leftover ``.part`` recovery at start-up, and the disk guard."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pytest
from e2e.support import (
    CountingTransport,
    files,
    flight_log,
    read_pyulog,
    record,
    recorder_settings,
    spans,
)
from waiting import eventually

from ulogstream.adapters.file_sink import MB, UlgFileSink, whole_messages_end
from ulogstream.adapters.udp_transport import UdpTransport
from ulogstream.daemon import Recorder
from ulogstream.demo import free_udp_port
from ulogstream.sim.runner import run_vehicle
from ulogstream.sim.vehicle import USB_LINK_RATE, VehicleConfig, split_log
from ulogstream.stream.packets import MAV_CMD_LOGGING_START, MAV_CMD_LOGGING_STOP

if TYPE_CHECKING:
    from pathlib import Path

START, STOP = MAV_CMD_LOGGING_START, MAV_CMD_LOGGING_STOP


def post_flight_tail(log: bytes) -> bytes:
    split = split_log(log)
    return b"".join(message.data for message in split.messages[split.tail_start :])


@pytest.mark.asyncio
@pytest.mark.timeout(60)
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_signal_stops_a_recorder_process_with_a_finished_file(
    tmp_path: Path, signum: signal.Signals
) -> None:
    log = flight_log(20.0, seed=31)
    tail = post_flight_tail(log)
    assert tail
    link = await UdpTransport.listen("127.0.0.1", 0)
    out = tmp_path / "logs"
    config = VehicleConfig(link_rate=USB_LINK_RATE, speed=4.0)  # 5 s of streaming
    vehicle = asyncio.create_task(run_vehicle(log, link, config=config))
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "ulogstream", "record", f"udpout:127.0.0.1:{link.local_address[1]}",
        "--out", str(out), "--min-free-mb", "10", "--no-status",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        await eventually(
            lambda: any(p.stat().st_size for p in out.glob("*/*/*.ulg.part")),
            what="no data on disk",
        )
        process.send_signal(signum)
        async with asyncio.timeout(20):
            _, stderr = await process.communicate()
            summary = await vehicle
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        vehicle.cancel()
    assert process.returncode == 0, stderr.decode()
    assert summary.logs_stopped == 1  # the STOP handshake was completed
    assert not files(out, "*.part")
    (path,) = files(out, "*.ulg")
    recording = path.read_bytes()
    # Whole messages up to the signal, then the post-flight perf data STOP brings.
    assert recording.endswith(tail)
    assert log.startswith(recording[: -len(tail)])
    assert len(recording) < len(log)
    read_pyulog(path)


@pytest.mark.asyncio
@pytest.mark.timeout(30)
async def test_leftover_part_files_are_recovered_at_start_up(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="ulogstream")
    log = flight_log(2.0, seed=32)
    messages = spans(log)
    day = tmp_path / "2026-01-01"
    day.mkdir()
    cut = messages[len(messages) // 2].start + 5  # a crash in the middle of a message
    (day / "10_00_00.ulg.part").write_bytes(log[:cut])
    (day / "10_05_00.ulg.part").write_bytes(b"\0" * 100)  # no ULog header: kept aside
    recorder = Recorder(recorder_settings(f"udpin:127.0.0.1:{free_udp_port()}", tmp_path))
    task = asyncio.create_task(recorder.run())
    await eventually((day / "10_00_00.ulg").exists, what="the .part was not recovered")
    recorder.request_stop()
    async with asyncio.timeout(10):
        assert await task == 0
    recovered = (day / "10_00_00.ulg").read_bytes()
    assert recovered == log[: messages[len(messages) // 2].start]
    read_pyulog(day / "10_00_00.ulg")
    assert (day / "10_05_00.ulg.corrupt").read_bytes() == b"\0" * 100
    assert not files(tmp_path, "*.part")
    warnings = " ".join(record.getMessage() for record in caplog.records)
    assert "trimmed 5 bytes" in warnings
    assert "does not start with a ULog header" in warnings


@dataclass(frozen=True, slots=True)
class Usage:
    free: int


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_disk_guard_stops_cleanly_on_a_message_boundary(tmp_path: Path) -> None:
    log = flight_log(20.0, seed=33)
    room = 300_000  # bytes the recording may use before free space reaches min_free_mb

    def disk_usage(_: Path) -> Usage:
        used = sum(path.stat().st_size for path in tmp_path.rglob("*.ulg*"))
        return Usage(free=MB + room - used)

    link = await UdpTransport.listen("127.0.0.1", 0)
    counting = CountingTransport(link)
    recorder = Recorder(
        recorder_settings(f"udpout:127.0.0.1:{link.local_address[1]}", tmp_path), once=True
    )
    recorder.sink = UlgFileSink(tmp_path, min_free_mb=1, disk_usage=disk_usage)
    config = VehicleConfig(link_rate=USB_LINK_RATE, speed=None, stop_accept_delay=0.0)
    run = await record(log, recorder, counting, config=config, stop_after_log=None)
    assert run.exit_code == 1
    error = run.recorder.status.error
    assert error is not None
    assert error.startswith("recording stopped: only 1 MB free")
    assert counting.commands == [START, STOP]  # the stream was stopped, not left running
    assert not files(tmp_path, "*.part")
    (path,) = run.files
    recording = path.read_bytes()
    assert 0 < len(recording) <= room
    assert whole_messages_end(recording) == len(recording)  # never half a message
    assert log.startswith(recording)
    read_pyulog(path)
    assert run.recorder.status.finished[0].disk_full is not None
    assert path.stat().st_size == run.recorder.status.finished[0].size
