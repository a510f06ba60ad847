"""Signals to a recorder process, leftover ``.part`` recovery at start-up, and the disk guard."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import signal
import subprocess
import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import msgspec
import pytest
from support.end_to_end import (
    CountingTransport,
    assert_loss_marked,
    files,
    flight_log,
    read_pyulog,
    record,
    recorder_settings,
    spans,
)
from support.processes import Process, make_flight
from support.waiting import eventually

from ulogstream.adapters.file_sink import MB, UlgFileSink, whole_messages_end
from ulogstream.adapters.udp_transport import UdpTransport
from ulogstream.cli.demo import free_udp_port
from ulogstream.recorder import pipeline as daemon
from ulogstream.recorder.wiring import build_recorder
from ulogstream.sim.runner import run_vehicle
from ulogstream.sim.vehicle import USB_LINK_RATE, VehicleConfig, split_log
from ulogstream.stream.packets import MAV_CMD_LOGGING_START, MAV_CMD_LOGGING_STOP

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

START, STOP = MAV_CMD_LOGGING_START, MAV_CMD_LOGGING_STOP


def holds_data(path: Path) -> bool:
    """Whether the log at ``path`` holds a data ('D') message yet."""
    return any(span.msg_type == ord("D") for span in spans(path.read_bytes())[1:])


def post_flight_tail(log: bytes) -> bytes:
    split = split_log(log)
    return b"".join(message.data for message in split.messages[split.tail_start :])


@pytest.mark.asyncio
@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=["SIGTERM", "SIGINT", "SIGHUP"]
)
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
        # A log without a data message is no flight (and is not kept): wait for one.
        await eventually(
            lambda: any(holds_data(part) for part in out.glob("*/*/*.ulg.part")),
            what="no data on disk",
        )
        process.send_signal(signum)
        async with asyncio.timeout(20):
            stdout, stderr = await process.communicate()
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
    said = (
        f"the recorder: {stdout.decode()!r}; the vehicle dropped {summary.stats.queue_drops} in "
        f"its buffer, {summary.wire_drops} on the wire, {summary.transport_drops} at its socket"
    )
    assert summary.wire_drops == summary.transport_drops == 0, said
    if summary.stats.queue_drops == 0:
        assert log.startswith(recording[: -len(tail)]), said
    else:  # a loaded machine makes the simulated PX4 overflow its buffer, as PX4 does (CI saw it)
        assert_loss_marked(log, recording[: -len(tail)], said)
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
    cut = messages[len(messages) // 2].start + 5  # a crash in the middle of a message
    crashed = interrupted(tmp_path, log[:cut], when=datetime(2026, 1, 1, 10, 0, tzinfo=UTC))
    headless = interrupted(tmp_path, b"\0" * 100, when=datetime(2026, 1, 1, 10, 5, tzinfo=UTC))
    foreign = tmp_path / "uav1" / "2026-01-01" / "09_00_00.ulg.part"  # not written by us
    foreign.write_bytes(log[:cut])
    recorder = build_recorder(recorder_settings(f"udpin:127.0.0.1:{free_udp_port()}", tmp_path))
    task = asyncio.create_task(recorder.run())
    final = crashed.with_name("10_00_00.ulg")
    await eventually(final.exists, what="the .part was not recovered")
    recorder.request_stop()
    async with asyncio.timeout(10):
        assert await task == 0
    assert final.read_bytes() == log[: messages[len(messages) // 2].start]
    read_pyulog(final)
    assert headless.with_name("10_05_00.ulg.corrupt").read_bytes() == b"\0" * 100
    assert files(tmp_path, "*.part") == [foreign]
    assert foreign.read_bytes() == log[:cut]
    warnings = " ".join(record.getMessage() for record in caplog.records)
    assert "trimmed 5 bytes" in warnings
    assert "does not start with a ULog header" in warnings


def interrupted(out: Path, content: bytes, *, when: datetime) -> Path:
    """A ``.part`` of ours that a crash left: in the logbook, never finished."""
    sink = UlgFileSink(out, folder="uav1", min_free_mb=0)
    part = sink.start_log(now_utc=when).path
    sink.write(content)
    sink.flush()
    sink.drop()
    return part


class FakeDisk(msgspec.Struct):
    """Free space that shrinks as logs are written, until space is freed (a full-disk stand-in)."""

    root: Path
    room: int

    def __call__(self, _: Path) -> Usage:
        used = sum(path.stat().st_size for path in self.root.rglob("*.ulg*"))
        return Usage(free=MB + self.room - used)


class Usage(msgspec.Struct, frozen=True):
    free: int


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_a_full_disk_ends_the_file_not_the_recording_which_goes_on_once_space_is_freed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 21 item 3, with a stand-in disk (the tmpfs test below uses a real one)."""
    monkeypatch.setattr(daemon, "DISK_RETRY_S", 0.2)
    log = flight_log(20.0, seed=33)
    disk = FakeDisk(tmp_path, room=300_000)
    link = await UdpTransport.listen("127.0.0.1", 0)
    counting = CountingTransport(link)
    recorder = build_recorder(
        recorder_settings(f"udpout:127.0.0.1:{link.local_address[1]}", tmp_path)
    )
    recorder.parts.files = lambda _sysid, _vehicle: UlgFileSink(
        tmp_path, min_free_mb=1, disk_usage=disk
    )
    config = VehicleConfig(link_rate=USB_LINK_RATE, speed=8.0, stop_accept_delay=0.0)

    async def free_space_once_full() -> None:
        await eventually(lambda: recorder.status.disk_full, what="the disk never filled")
        assert recorder.status.state == "disk full"
        assert recorder.status.error is not None
        assert recorder.status.error.startswith("disk full: only 1 MB free")
        assert counting.commands == [START]  # the stream goes on: never a STOP for the disk
        disk.room = 100 * MB

    freeing = asyncio.create_task(free_space_once_full())
    run = await record(log, recorder, counting, config=config, stop_after_log=0)
    await freeing
    assert run.exit_code == 0
    assert not files(tmp_path, "*.part")
    first, continued = run.files
    assert continued.name == first.stem + "_part2.ulg"
    recording = first.read_bytes()
    assert 0 < len(recording) <= 300_000
    assert whole_messages_end(recording) == len(recording)  # never half a message
    assert log.startswith(recording)
    read_pyulog(first)
    assert run.recorder.status.finished[0].disk_full is not None
    # The second file: the log's head, a dropout for the time the disk was full, then the
    # rest of the log to its end (the tail the final STOP brings included).
    rest = continued.read_bytes()
    kinds = [span.msg_type for span in spans(rest)]
    dropout = kinds.index(ord("O"))
    assert rest[: spans(rest)[dropout].start] == log[: spans(rest)[dropout].start]
    assert log.endswith(rest[spans(rest)[dropout].end :])
    assert rest.endswith(post_flight_tail(log))
    read_pyulog(continued)
    assert not run.recorder.status.disk_full
    assert run.recorder.status.bytes_not_written > 0


@pytest.fixture(name="small_disk")
def fixture_small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 4 MiB file system (tmpfs), mounted for the test; skipped where none can be."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    mount = shutil.which("mount")
    if mount is None or os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root and mount(8); the stand-in test covers it")
    done = subprocess.run(
        [mount, "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount_point)],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


@pytest.mark.asyncio
@pytest.mark.timeout(90)
async def test_a_real_full_disk_ends_one_file_and_recording_goes_on_once_space_is_freed(
    tmp_path: Path, small_disk: Path, processes: list[Process]
) -> None:
    """Issue 21 item 3 on a real file system: the recorder stays up, never STOPs the vehicle."""
    flight = make_flight(tmp_path, duration_s=60.0, seed=34)  # 3.1 MB
    filler = small_disk / "someone-elses-file.bin"
    filler.write_bytes(bytes(int(1.5 * MB)))
    port = free_udp_port()
    recorder = Process(
        ["record", f"udpin:127.0.0.1:{port}", "--out", str(small_disk), "--min-free-mb", "1",
         "--no-status", "--idle-timeout", "3"],
        tmp_path,
    )  # fmt: skip
    processes.append(recorder)
    await recorder.await_line("listening on")
    sim = Process(
        ["sim", str(flight.path), f"udpout:127.0.0.1:{port}", "--rate", "usb", "--speed", "4"],
        tmp_path,
        name="sim",
    )
    processes.append(sim)
    await recorder.await_line("disk full: only", limit=30)
    assert recorder.process.poll() is None  # the recorder stays up
    filler.unlink()  # space is back
    await recorder.await_line("disk space is back", limit=30)
    assert await sim.await_exit(limit=60) == 0
    await recorder.await_line("log finished", count=2, limit=30)
    assert recorder.terminate() == 0
    assert "sent to its end" in sim.stderr()  # the flight ended it, never our STOP
    assert "ended (stopped)" not in sim.stderr()
    first, continued = files(small_disk, "*.ulg")
    assert continued.name == first.stem + "_part2.ulg"
    stderr = recorder.stderr()
    assert f"log finished: {first} (" in stderr
    assert "incomplete: disk full" in stderr.split(f"log finished: {first} (")[1].split("\n")[0]
    for path in (first, continued):
        read_pyulog(path)
    sent = next(line for line in sim.stderr().splitlines() if "frames delivered" in line)
    said = f"the recorder: {recorder.stdout()!r}; {sent!r}"
    if ", 0 dropped in the logger's buffer" in sent:
        assert flight.data.startswith(first.read_bytes()), said
    else:  # a loaded machine makes the simulated PX4 overflow its buffer, as PX4 does
        assert_loss_marked(flight.data, first.read_bytes(), said)
    assert flight.data.endswith(continued.read_bytes()[-1000:])
    assert "MB not written: the disk was full or too slow" in recorder.stdout()
