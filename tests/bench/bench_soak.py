"""Soak: hours of USB-rate log streaming, played fast, through ``ulogstream run`` with MQTT on.

A generated flight is streamed again and again by ``ulogstream sim --repeat`` (each repeat a new
log: the sim ends each flight as a GCS's STOP on disarm does and the daemon restarts streaming)
to the daemon, a real process publishing to a local mosquitto this script starts. Until the
target packet count (by default one hour at PX4's USB rate, about 2100 packets/s: 7.56 M
packets, 1.9 GB) or the time limit, the script samples the daemon's resident memory, checks
each finished ``.ulg`` (byte-equal to what was streamed, else valid to our reader) and deletes
it to keep the disk use bounded.

Run: ``.venv/bin/python tests/bench/bench_soak.py [--packets N] [--minutes M] [--rate-factor F]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import getpass
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import msgspec

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # run from a checkout, uninstalled
sys.path.insert(0, str(ROOT / "tests"))
import aiomqtt  # noqa: E402
from support.processes import (  # noqa: E402
    Flight,
    Process,
    daemon_config,
    make_flight,
)

from ulogstream.adapters.ulog_file import read  # noqa: E402
from ulogstream.cli.demo import free_udp_port  # noqa: E402
from ulogstream.sim.vehicle import USB_LINK_RATE  # noqa: E402

USB_PACKETS_PER_S = 2100
"""PX4 streams about this many LOGGING_DATA packets per second over USB (protocol.md)."""

HOUR_OF_PACKETS = USB_PACKETS_PER_S * 3600
SAMPLE_INTERVAL_S = 2.0
VEHICLE_ID = "soak"


class SoakResult(msgspec.Struct):
    """What a soak run measured."""

    packets: int = 0
    packets_lost: int = 0
    bytes_recorded: int = 0
    logs_started: int = 0
    logs_finished: int = 0
    logs_discarded: int = 0
    """Logs stopped before their first data message (the last one, at the stop): no file."""
    files_checked: int = 0
    files_identical: int = 0
    files_lossy: int = 0
    files_invalid: list[str] = msgspec.field(default_factory=list)
    rss_kb: list[tuple[float, int]] = msgspec.field(default_factory=list)
    error_lines: list[str] = msgspec.field(default_factory=list)
    mqtt_published: int = 0
    mqtt_dropped: int = 0
    duration_s: float = 0.0
    daemon_cpu_s: float = 0.0
    sim_summary: str = ""
    loss_warnings: int = 0
    exit_code: int | None = None

    @property
    def files_lost(self) -> int:
        """Logs the daemon finished but whose file was not there to check, or vice versa."""
        return abs(self.logs_finished - self.files_checked)


def rss_kb(pid: int) -> int:
    """Resident memory of ``pid`` in kB (``VmRSS`` of ``/proc/PID/status``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    msg = f"no VmRSS for process {pid}"
    raise RuntimeError(msg)


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of ``pid`` so far (``/proc/PID/stat`` fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Checker:
    """Checks finished recordings against the streamed flight and deletes them."""

    def __init__(self, flight: Flight, out_dir: Path, result: SoakResult) -> None:
        self.out_dir = out_dir
        self.result = result
        self.streamed_size = len(flight.streamed)
        self.streamed_hash = hashlib.sha256(flight.streamed).digest()
        self.flight = flight

    def check_finished(self) -> None:
        """Check and delete every finished ``.ulg`` under the output directory."""
        for path in sorted(self.out_dir.rglob("*.ulg")):
            data = path.read_bytes()
            result = self.result
            result.files_checked += 1
            result.bytes_recorded += len(data)
            if len(data) == self.streamed_size and hashlib.sha256(data).digest() == (
                self.streamed_hash
            ):
                result.files_identical += 1
            elif self.flight.is_stopped_log(data):
                result.files_identical += 1  # the last log, stopped by us at the end
            else:
                log = read(path)
                if log.corruption or log.truncated is not None or not log.topics:
                    result.files_invalid.append(path.name)
                else:
                    result.files_lossy += 1
            path.unlink()


def start_mosquitto(workdir: Path) -> tuple[subprocess.Popen[bytes], int]:
    """A local anonymous mosquitto on a free port."""
    binary = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    config = workdir / "mosquitto.conf"
    config.write_text(
        f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n"
        f"log_dest stderr\nlog_type error\nuser {getpass.getuser()}\n"
    )
    log = (workdir / "mosquitto.log").open("wb")
    process = subprocess.Popen([binary, "-c", str(config)], stdout=log, stderr=log)
    deadline = time.monotonic() + 10
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return process, port
        except OSError:
            if time.monotonic() > deadline or process.poll() is not None:
                raise
            time.sleep(0.05)


async def watch_status(host: str, port: int, latest: dict[str, object]) -> None:
    """Keep ``latest`` equal to the daemon's retained MQTT status."""
    async with aiomqtt.Client(host, port) as client:
        await client.subscribe(f"ulogstream/{VEHICLE_ID}/meta/status")
        async for message in client.messages:
            payload = message.payload
            if isinstance(payload, bytes):
                value = json.loads(payload)
                if isinstance(value, dict):
                    latest.clear()
                    latest.update(value)


def _int(value: object) -> int:
    return value if isinstance(value, int) else 0


async def soak(
    workdir: Path,
    *,
    mqtt_port: int,
    packets: int = HOUR_OF_PACKETS,
    time_limit_s: float = 600.0,
    flight_s: float = 900.0,
    rate_factor: float = 5.0,
    progress: bool = True,
) -> SoakResult:
    """Stream ``packets`` (or for ``time_limit_s``) through a daemon; see the module docstring.

    Args:
        workdir: Scratch directory (recordings are deleted once checked).
        mqtt_port: A broker on 127.0.0.1 to publish to.
        packets: Stop once the daemon received this many packets.
        time_limit_s: Stop after this long in any case.
        flight_s: Length of the generated flight each log replays.
        rate_factor: The simulated link's rate in multiples of USB's (speed: as fast as it takes).
        progress: Print a line per sample.
    """
    result = SoakResult()
    flight = make_flight(workdir, duration_s=flight_s, seed=11)
    out_dir = workdir / "recordings"
    udp_port = free_udp_port()
    config = daemon_config(
        workdir / "ulogstream.toml",
        connection=f"udpin:127.0.0.1:{udp_port}",
        out_dir=out_dir,
        idle_timeout_s=0.5,
        mqtt={"url": f"mqtt://127.0.0.1:{mqtt_port}", "vehicle_id": VEHICLE_ID},
        extra={"recording": {"min_free_mb": 100}},
    )
    checker = Checker(flight, out_dir, result)
    status: dict[str, object] = {}
    watcher = asyncio.create_task(watch_status("127.0.0.1", mqtt_port, status))
    daemon = Process(["run", "--config", str(config)], workdir)
    sim: Process | None = None
    started = time.monotonic()
    try:
        await daemon.await_line("listening on")  # MQTT connects at the vehicle's first contact
        rate = str(int(rate_factor * USB_LINK_RATE))
        sim = Process(
            [
                *("sim", str(flight.path), f"udpout:127.0.0.1:{udp_port}", "--repeat"),
                *("--rate", rate, "--speed", "max"),
            ],
            workdir,
            name="sim",
        )
        while True:
            await asyncio.sleep(SAMPLE_INTERVAL_S)
            elapsed = time.monotonic() - started
            result.rss_kb.append((elapsed, rss_kb(daemon.pid)))
            await asyncio.to_thread(checker.check_finished)
            received = _int(status.get("packets"))
            if progress:
                print(
                    f"{elapsed:6.0f} s  {received:9d} packets  {result.files_checked:4d} files "
                    f" RSS {result.rss_kb[-1][1] / 1024:6.1f} MB",
                    flush=True,
                )
            if received >= packets or elapsed >= time_limit_s:
                break
            if daemon.process.poll() is not None or sim.process.poll() is not None:
                break
        result.daemon_cpu_s = cpu_seconds(daemon.pid)
        daemon.send_signal(signal.SIGTERM)
        result.exit_code = await daemon.await_exit(60)
        result.duration_s = time.monotonic() - started
        await asyncio.sleep(0.5)
        result.packets = _int(status.get("packets"))
        result.packets_lost = _int(status.get("packets_lost"))
        result.mqtt_dropped = _int(status.get("mqtt_dropped"))
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError, aiomqtt.MqttError):
            await watcher
        daemon.kill()
        if sim is not None:
            sim.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                sim.wait(10)
            sim.kill()
    checker.check_finished()
    if sim is not None:
        result.sim_summary = next(
            (line for line in sim.stderr().splitlines() if "frames delivered" in line), ""
        )
    text = daemon.stderr()
    result.loss_warnings = text.count("logging packet(s) before")
    result.logs_finished = text.count("log finished")
    result.logs_discarded = text.count("no log file kept for")
    result.logs_started = text.count("INFO ulogstream: recording ")
    result.error_lines = [line for line in text.splitlines() if " ERROR " in line]
    return result


def report(result: SoakResult, target: int) -> list[str]:
    """The figures, one per line."""
    start_rss = result.rss_kb[min(2, len(result.rss_kb) - 1)][1] if result.rss_kb else 0
    end_rss = result.rss_kb[-1][1] if result.rss_kb else 0
    peak_rss = max((kb for _, kb in result.rss_kb), default=0)
    rate = result.packets / result.duration_s if result.duration_s else 0.0
    per_packet_us = result.daemon_cpu_s / result.packets * 1e6 if result.packets else 0.0
    return [
        (
            f"packets received     {result.packets} of a {target} target"
            f" ({result.packets / USB_PACKETS_PER_S / 60:.1f} min at USB rate)"
        ),
        (
            f"packets lost         {result.packets_lost} ({result.loss_warnings} loss warnings,"
            " rate-limited to one per 5 s)"
        ),
        (
            f"duration             {result.duration_s:.0f} s ({rate:.0f} packets/s,"
            f" {rate / USB_PACKETS_PER_S:.1f}x USB)"
        ),
        f"bytes recorded       {result.bytes_recorded / 1e9:.2f} GB",
        (
            f"logs started/finished/files  {result.logs_started}/{result.logs_finished}/"
            f"{result.files_checked} ({result.logs_discarded} without data, identical"
            f" {result.files_identical}, lossy but valid"
            f" {result.files_lossy}, invalid {len(result.files_invalid)}, lost {result.files_lost})"
        ),
        (
            f"daemon RSS           start {start_rss / 1024:.1f} MB (after warm-up), end"
            f" {end_rss / 1024:.1f} MB, peak {peak_rss / 1024:.1f} MB"
        ),
        (
            f"daemon CPU           {result.daemon_cpu_s:.0f} s, {per_packet_us:.0f} us/packet"
            f" ({per_packet_us * USB_PACKETS_PER_S / 1e4:.0f} % of a core at USB rate)"
        ),
        f"simulated PX4        {result.sim_summary.partition('sim: ')[2]}",
        f"MQTT dropped         {result.mqtt_dropped}",
        f"ERROR lines          {len(result.error_lines)}",
        f"daemon exit code     {result.exit_code}",
    ]


def main() -> int:
    """Run the soak and print its figures; non-zero when a file was lost or invalid."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--packets", type=int, default=HOUR_OF_PACKETS)
    parser.add_argument("--minutes", type=float, default=10.0, help="time limit")
    parser.add_argument("--flight-s", type=float, default=900.0, help="flight length per log")
    parser.add_argument("--rate-factor", type=float, default=5.0, help="link rate / USB rate")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ulogstream-soak-") as directory:
        workdir = Path(directory)
        broker, port = start_mosquitto(workdir)
        try:
            result = asyncio.run(
                soak(
                    workdir,
                    mqtt_port=port,
                    packets=args.packets,
                    time_limit_s=args.minutes * 60,
                    flight_s=args.flight_s,
                    rate_factor=args.rate_factor,
                )
            )
        finally:
            broker.kill()
            broker.wait()
    for line in report(result, args.packets):
        print(line)
    for line in result.error_lines[:10]:
        print("  " + line)
    ok = not result.files_invalid and not result.files_lost and not result.error_lines
    return 0 if ok and result.exit_code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
