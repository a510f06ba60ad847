"""``ulogstream run --config FILE`` as a real process against a simulated PX4.

The vehicle is either ``ulogstream sim`` (another process, on UDP) or :func:`run_vehicle` in the
test's event loop (on UDP, or on the master side of a real pseudo-terminal whose slave the daemon
opens through a symlink, as udev's ``/dev/pixhawk``). PX4 streams a log until it is told to stop,
so logs the daemon did not stop end by its idle timeout, without the last, partial packet.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
import time
from typing import TYPE_CHECKING

import pytest
from support.end_to_end import FdTransport, PtyPair
from support.processes import (
    Flight,
    Process,
    assert_valid_ulog,
    daemon_config,
    make_flight,
    messages_of,
    partial_files,
    recordings,
    start_vehicle,
)
from support.pty_links import point_symlink
from support.waiting import stays_true, wait_until

from ulogstream.cli.demo import free_udp_port
from ulogstream.sim.vehicle import VehicleConfig

if TYPE_CHECKING:
    from pathlib import Path

FAST = VehicleConfig(link_rate=None, speed=None, stop_accept_delay=0.0)
"""As fast as the link takes it, lossless."""


def assert_clean_run(daemon: Process) -> None:
    """No traceback and no ERROR line in the daemon's output."""
    text = daemon.stderr()
    assert "Traceback" not in text, text
    assert " ERROR " not in text, text


def assert_lossless_logs(files: list[Path], flight: Flight) -> None:
    """Every file is valid and holds the flight's beginning: all it streamed, or until stopped."""
    for path in files:
        assert_valid_ulog(path)
        data = path.read_bytes()
        whole = data in {flight.streamed, flight.data}
        assert whole or flight.is_stopped_log(data), f"{path} is not the flight"


def assert_begun_by_repeat(files: list[Path], flight: Flight) -> None:
    """Logs ``sim --repeat`` began before SIGTERM: the flight's start, perhaps headers only."""
    for path in files:
        data = path.read_bytes()
        assert flight.is_stopped_log(data) or flight.data.startswith(data), path


def start_daemon_on_udp(
    tmp_path: Path, processes: list[Process], *, idle_timeout_s: float = 1.0
) -> tuple[Process, int, Path]:
    """``ulogstream run`` listening on a free UDP port; its process, port and recordings dir."""
    port = free_udp_port()
    out = tmp_path / "recordings"
    config = daemon_config(
        tmp_path / "ulogstream.toml",
        connection=f"udpin:127.0.0.1:{port}",
        out_dir=out,
        idle_timeout_s=idle_timeout_s,
    )
    daemon = Process(["run", "--config", str(config)], tmp_path)
    processes.append(daemon)
    daemon.wait_for("listening on")
    return daemon, port, out


def test_several_logs_in_a_row_each_in_its_own_file(
    tmp_path: Path, processes: list[Process]
) -> None:
    flight = make_flight(tmp_path, duration_s=2.0, seed=1)
    daemon, port, out = start_daemon_on_udp(tmp_path, processes, idle_timeout_s=0.5)
    sim_args = ["sim", str(flight.path), f"udpout:127.0.0.1:{port}", "--repeat"]
    sim = Process([*sim_args, "--rate", "usb", "--speed", "max"], tmp_path, name="sim")
    processes.append(sim)

    daemon.wait_for("log finished", count=3, timeout=40)
    assert daemon.terminate(signal.SIGTERM) == 0
    assert sim.terminate(signal.SIGTERM) == 0

    files = recordings(out)
    assert len(files) >= 3
    assert partial_files(out) == []
    assert daemon.stderr().count("log finished") == len(files)
    for path in files[:3]:  # each flight ended by the sim's STOP on disarm: every byte
        assert path.read_bytes() == flight.data
    assert_lossless_logs(files[:3], flight)
    assert_begun_by_repeat(files[3:], flight)
    assert_clean_run(daemon)


def test_vehicle_reboot_mid_log_gives_two_files(tmp_path: Path, processes: list[Process]) -> None:
    flight = make_flight(tmp_path, duration_s=3.0, seed=2)
    daemon, port, out = start_daemon_on_udp(tmp_path, processes, idle_timeout_s=0.5)
    sim = Process(
        [
            "sim", str(flight.path), f"udpout:127.0.0.1:{port}", "--rate", "usb",
            "--speed", "max", "--reboot-at", "300", "--repeat",
        ],
        tmp_path,
        name="sim",
    )  # fmt: skip
    processes.append(sim)

    daemon.wait_for("log finished", count=2, timeout=30)
    assert daemon.terminate(signal.SIGTERM) == 0
    sim.terminate(signal.SIGTERM)

    files = recordings(out)
    assert partial_files(out) == []
    before_reboot, after_reboot = (path.read_bytes() for path in files[:2])
    # Cut by the reboot: the whole messages of the first 300 packets (at most 249 bytes each).
    assert flight.is_stopped_log(before_reboot)
    assert 200 * 249 < len(before_reboot) <= 300 * 249
    assert after_reboot == flight.data  # ended by the sim's STOP on disarm: every byte
    assert_lossless_logs(files[:2], flight)
    assert_begun_by_repeat(files[2:], flight)
    assert "incomplete: the stream stopped unannounced; new log" in daemon.stderr()
    assert_clean_run(daemon)


@pytest.mark.asyncio
async def test_serial_device_that_vanishes_and_returns(
    tmp_path: Path, processes: list[Process]
) -> None:
    flight = make_flight(tmp_path, duration_s=2.0, seed=3)
    device = tmp_path / "pixhawk"
    out = tmp_path / "recordings"
    first = PtyPair.open()
    point_symlink(device, first.device)
    config = daemon_config(
        tmp_path / "ulogstream.toml", connection=str(device), out_dir=out, idle_timeout_s=10.0
    )
    daemon = Process(["run", "--config", str(config)], tmp_path)
    processes.append(daemon)
    await daemon.await_line("listening on")

    # First plug-in: the whole flight arrives, then the cable is pulled (the pty disappears).
    stop_first = asyncio.Event()
    vehicle, delivered = start_vehicle(
        flight.data, FdTransport(first.master, first.device), config=FAST, stop_event=stop_first
    )
    await asyncio.wait_for(delivered.wait(), 20)
    stop_first.set()
    await vehicle
    first.close()
    # Unplugged: the path goes away with the device, as /dev/serial/by-id links do. (Left
    # pointing at /dev/pts/N, the daemon's retries could open another test's new pty.)
    device.unlink()
    await daemon.await_line("stopped working")
    await daemon.await_line("the open log waits for it to come back")
    await daemon.await_line("retrying")
    assert "log finished" not in daemon.stderr(), "a short outage must not end the log"
    assert daemon.process.poll() is None, "the daemon exited when the device vanished"

    # Plugged in again: a new pseudo-terminal behind the same path.
    second = PtyPair.open()
    try:
        point_symlink(device, second.device)
        vehicle, delivered = start_vehicle(
            flight.data, FdTransport(second.master, second.device), config=FAST
        )
        await daemon.await_line("is back")
        await asyncio.wait_for(delivered.wait(), 20)
        daemon.send_signal(signal.SIGTERM)
        summary = await asyncio.wait_for(vehicle, 20)  # ends with the STOP handshake
        assert await daemon.await_exit() == 0
    finally:
        second.close()

    assert summary.logs_stopped == 1
    files = recordings(out)
    assert partial_files(out) == []
    assert [path.read_bytes() for path in files] == [flight.streamed, flight.data]
    for path in files:
        assert_valid_ulog(path)
    text = daemon.stderr()
    # The vehicle came back rebooted: our START probe was accepted, so its old stream was over.
    assert "incomplete: the stream stopped unannounced; the vehicle's stream ended" in text
    assert f"serial device {device}" in text
    assert_clean_run(daemon)


def first_data_end(log: bytes) -> int:
    """The offset in ``log`` where its first data ('D') message ends."""
    position = 0
    for message in messages_of(log):
        position += len(message)
        if message[2:3] == b"D":
            return position
    msg = "the flight has no data message"
    raise AssertionError(msg)


def recording_has_data(out: Path, flight: Flight) -> bool:
    """Whether a log being recorded under ``out`` holds topic data on disk.

    Bytes alone are not enough: a signal after the definitions only gives a log with no data.
    """
    wanted = first_data_end(flight.data)
    for path in partial_files(out):
        with contextlib.suppress(FileNotFoundError):  # renamed meanwhile: the log ended
            if path.stat().st_size >= wanted:
                return True
    return False


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_mid_log_stops_cleanly(
    tmp_path: Path, processes: list[Process], signum: signal.Signals
) -> None:
    flight = make_flight(tmp_path, duration_s=20.0, seed=4)
    daemon, port, out = start_daemon_on_udp(tmp_path, processes)
    sim_args = ["sim", str(flight.path), f"udpout:127.0.0.1:{port}", "--rate", "usb"]
    sim = Process([*sim_args, "--speed", "4"], tmp_path, name="sim")
    processes.append(sim)
    daemon.wait_for("recording ")
    wait_until(lambda: recording_has_data(out, flight), what="no data written while streaming")
    assert daemon.terminate(signum) == 0
    assert sim.wait() == 0  # the simulated PX4 exits after its log was stopped

    files = recordings(out)
    assert len(files) == 1
    assert partial_files(out) == []
    recording = files[0].read_bytes()
    assert len(recording) < len(flight.data), "the signal came after the whole flight"
    assert flight.is_stopped_log(recording)
    assert_valid_ulog(files[0])
    assert "complete; stopped" in daemon.stderr()
    assert_clean_run(daemon)


def test_sigterm_while_the_device_is_missing_exits_at_once(
    tmp_path: Path, processes: list[Process]
) -> None:
    device = tmp_path / "pixhawk"
    config = daemon_config(
        tmp_path / "ulogstream.toml", connection=str(device), out_dir=tmp_path / "recordings"
    )
    daemon = Process(["run", "--config", str(config)], tmp_path)
    processes.append(daemon)
    daemon.wait_for(f"serial device {device} does not exist")
    # Nothing to wait for: the daemon must keep waiting, warning once. Attempts come after 0.5,
    # 1.0 and 2.0 s (RECONNECT_BACKOFF), so 2 s spans a few; checked throughout.
    stays_true(
        lambda: daemon.process.poll() is None and daemon.stderr().count("does not exist") == 1,
        2.0,
        what="the daemon exited or repeated the warning",
    )
    started = time.monotonic()
    assert daemon.terminate(signal.SIGTERM) == 0
    assert time.monotonic() - started < 3.0
    assert_clean_run(daemon)


@pytest.mark.asyncio
async def test_record_once_ends_when_the_device_vanishes_mid_log(
    tmp_path: Path, processes: list[Process]
) -> None:
    flight = make_flight(tmp_path, duration_s=2.0, seed=8)
    out = tmp_path / "recordings"
    pair = PtyPair.open()
    try:
        record = Process(
            ["record", pair.device, "--once", "--out", str(out), "--idle-timeout", "2"],
            tmp_path,
            name="record",
        )
        processes.append(record)
        await record.await_line("listening on")
        stop = asyncio.Event()
        vehicle, delivered = start_vehicle(
            flight.data, FdTransport(pair.master, pair.device), config=FAST, stop_event=stop
        )
        await asyncio.wait_for(delivered.wait(), 20)
        stop.set()
        await vehicle
    finally:
        pair.close()
    # The link stayed away longer than the outage grace (--idle-timeout): the first log ended
    # as incomplete and --once is done.
    assert await record.await_exit() == 0
    files = recordings(out)
    assert [path.read_bytes() for path in files] == [flight.streamed]
    assert "incomplete: the stream stopped unannounced; data timeout" in record.stderr()


def test_recording_a_log_without_a_live_sink_never_loads_numpy(
    tmp_path: Path, processes: list[Process]
) -> None:
    """File only, nothing is decoded, so numpy (~0.1 s of CPU at every start) is never imported."""
    flight = make_flight(tmp_path, duration_s=2.0, seed=3)
    daemon, port, out = start_daemon_on_udp(tmp_path, processes)
    sim_args = ["sim", str(flight.path), f"udpout:127.0.0.1:{port}", "--rate", "usb"]
    processes.append(Process([*sim_args, "--speed", "max"], tmp_path, name="sim"))

    daemon.wait_for("log finished", timeout=30)
    with open(f"/proc/{daemon.pid}/maps", encoding="utf-8") as maps:  # noqa: PTH123 (a /proc file)
        mapped = maps.read()
    assert "numpy" not in mapped
    assert daemon.terminate(signal.SIGTERM) == 0
    assert recordings(out)[0].read_bytes() == flight.data


def test_record_starts_without_the_file_tools_the_parser_pymavlink_or_numpy(tmp_path: Path) -> None:
    """What ``record`` imports before its first packet is what it needs (its start-up CPU)."""
    script = (
        "import sys\n"
        "from ulogstream.cli import main\n"
        "try:\n"
        "    main(['record', '--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(' '.join(sorted(sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=tmp_path
    )
    loaded = set(done.stdout.split())
    assert "ulogstream.recorder.recorder" in loaded  # the record command's own modules
    assert not {name for name in loaded if name.split(".")[0] in {"numpy", "pymavlink"}}
    unneeded = {
        "ulogstream.cli.files",
        "ulogstream.ulog.parser",
        "ulogstream.ulog.events",
        "ulogstream.ulog.dtypes",
    }
    assert not loaded & unneeded
