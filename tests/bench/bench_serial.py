"""Benchmark: whole-process CPU reading a slow serial link, against a PX4-script-style receiver.

``python tests/bench/bench_serial.py [SECONDS] [PIECE]`` (default 20 s, 32-byte writes).

A telemetry radio delivers MAVLink in small pieces at about 5.7 KB/s. A writer thread plays a
generated flight's LOGGING_DATA frames (with a HEARTBEAT each second) into a pseudo-terminal in
PIECE-byte writes at 5700 B/s; the receiver on the other end is a separate process:

- ``record``: ``ulogstream record PTY --baud 57600 --once --no-status`` (ended with two SIGTERMs
  once the stream is over: the vehicle is gone, so the STOP is abandoned at once);
- ``script``: ``px4_script.py``, a pymavlink ``recv_match`` loop like PX4's
  ``Tools/mavlink_ulog_streaming.py`` (ack, sequence check, write whole messages), ended by SIGTERM.

Both runs get the same bytes; the figure is whole-process CPU (start-up and shutdown included),
best of ``--runs``, and the ratio record/script.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
import tty
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the suite's helpers

from bench.installed import compile_package
from support.packetize import packetize

from ulogstream.mavlink_codec import MavlinkCodec
from ulogstream.sim.flightlog import generate_flight_log

RADIO_BYTES_PER_S = 5700
SCRIPT = Path(__file__).with_name("px4_script.py")


def frames(seconds: float) -> bytes:
    """A flight's logging frames, with a HEARTBEAT before each second's worth of data."""
    codec = MavlinkCodec(system_id=1, component_id=1)
    stream = bytearray()
    budget = int(seconds * RADIO_BYTES_PER_S)
    per_second = RADIO_BYTES_PER_S
    next_heartbeat = 0
    log = io.BytesIO()
    generate_flight_log(log, duration_s=max(seconds / 8, 5.0), seed=7)  # ~52 KB per second
    for packet in packetize(log.getvalue()):
        if len(stream) >= next_heartbeat:
            stream += codec.encode_heartbeat()
            next_heartbeat += per_second
        stream += codec.encode_logging_data(
            packet.sequence, 254, 155, packet.first_message_offset, packet.data,
            acked=packet.needs_ack,
        )  # fmt: skip
        if len(stream) >= budget:
            break
    return bytes(stream)


def play(master: int, data: bytes, piece: int) -> None:
    """Write ``data`` in ``piece``-byte writes at the radio's rate, draining what comes back."""
    os.set_blocking(master, False)
    started = time.monotonic()
    for offset in range(0, len(data), piece):
        due = started + offset / RADIO_BYTES_PER_S
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        chunk = data[offset : offset + piece]
        while chunk:
            try:
                chunk = chunk[os.write(master, chunk) :]
            except BlockingIOError:
                time.sleep(0.001)
        with contextlib.suppress(BlockingIOError, OSError):
            os.read(master, 1 << 16)  # the receiver's acks and heartbeats


def run(kind: str, data: bytes, piece: int, out_dir: Path) -> float:
    """CPU seconds of one receiver process over the whole stream."""
    master, slave = os.openpty()
    tty.setraw(slave)
    device = os.ttyname(slave)
    if kind == "record":
        command = [
            sys.executable, "-m", "ulogstream", "record", device, "--baud", "57600", "--once",
            "--no-status", "--out", str(out_dir),
        ]  # fmt: skip
    else:
        command = [sys.executable, str(SCRIPT), device, str(out_dir / "script.ulg")]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # the receiver opens the port before the vehicle talks
    player = threading.Thread(target=play, args=(master, data, piece))
    player.start()
    player.join()
    time.sleep(0.5)
    process.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)  # a second one abandons a STOP nobody answers
    process.wait(30)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    os.close(master)
    os.close(slave)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    """Run both receivers ``--runs`` times each, interleaved; print the best CPU and the ratio."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("seconds", type=float, nargs="?", default=20.0)
    parser.add_argument("piece", type=int, nargs="?", default=32)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    compile_package()
    data = frames(args.seconds)
    best = {"record": float("inf"), "script": float("inf")}
    for _ in range(args.runs):
        for kind, so_far in list(best.items()):
            with tempfile.TemporaryDirectory() as tmp:
                best[kind] = min(so_far, run(kind, data, args.piece, Path(tmp)))
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    record, script = best["record"], best["script"]
    print(
        f"serial at {RADIO_BYTES_PER_S} B/s in {args.piece}-byte writes, {len(data)} bytes "
        f"({args.seconds:.0f} s), best of {args.runs}, load {load}: record {record:.2f} CPU s, "
        f"script {script:.2f} CPU s: record/script {record / script:.2f}"
    )


if __name__ == "__main__":
    main()
