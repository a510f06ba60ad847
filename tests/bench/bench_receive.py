"""Benchmark: the receive path (decode, ack, reassemble, write a file) against a PX4-style receiver.

Run: ``.venv/bin/python tests/bench/bench_receive.py [--log FILE.ulg] [--passes N]``.

A recorded MAVLink byte stream is built once: the pure simulated PX4
(:class:`ulogstream.sim.vehicle.SimVehicle`, driven offline by an instantly acking receiver)
packetises a sample log (``../shared/data/ulg/pyulog__sample.ulg``, 4 MB; a generated 60 s flight
when absent) and :class:`ulogstream.mavlink_codec.MavlinkCodec` encodes each packet as its own
datagram. Both receivers then run on one core (the process is pinned) over the same datagrams:

- ulogstream: ``MavlinkCodec.decode`` -> ``LoggingSession.receive`` -> every ``SendAck`` encoded
  with ``encode_logging_ack`` and handed to a no-op send -> ``WriteUlog`` bytes to a real file
  through :class:`UlgFileSink` (flushed once per simulated second, fsynced on close), exactly the
  order of :meth:`ulogstream.recorder.pipeline.Pipeline.receive`.
- reference: written here the way PX4's ``Tools/mavlink_ulog_streaming.py`` works (from
  protocol.md and style.md, not from its code): a pymavlink ``mavutil`` link polled with
  ``recv_match(type=[LOGGING_DATA_ACKED, LOGGING_DATA])``, acks sent with
  ``mav.logging_ack_send`` for new ACKED packets, ``check_sequence`` with uint16 wrap,
  ``process_streamed_ulog_data`` that takes the first 16 bytes as the header (no magic check),
  resyncs at ``first_message_offset`` after a gap with a guessed dropout (lost x 10 ms, at most
  250) and ``write_ulog_messages`` writing each whole message to a buffered file.

CPU is ``time.process_time`` of the loop (file close included); the best of ``--passes`` passes
is reported. Target: ulogstream >= 40000 packets/s.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # run from a checkout, uninstalled
sys.path.insert(0, str(ROOT / "tests"))

from bench.px4_script import ReferenceReceiver  # noqa: E402
from pymavlink import mavutil  # noqa: E402

from ulogstream.adapters.file_sink import UlgFileSink  # noqa: E402
from ulogstream.mavlink_codec import MavlinkCodec, fast_crc_active  # noqa: E402
from ulogstream.sim.flightlog import generate_flight_log  # noqa: E402
from ulogstream.sim.vehicle import (  # noqa: E402
    LogStreamEnded,
    SendLoggingData,
    SimVehicle,
    VehicleConfig,
    VehicleOutput,
)
from ulogstream.stream.packets import (  # noqa: E402
    MAV_CMD_LOGGING_START,
    MAV_CMD_LOGGING_STOP,
    MAV_COMP_ID_LOG,
    CommandLong,
    LoggingAck,
    LoggingPacket,
)
from ulogstream.stream.reassembler import LogStarted, SendAck, WriteUlog  # noqa: E402
from ulogstream.stream.session import DEFAULT_SYSTEM_ID, LoggingSession  # noqa: E402

if TYPE_CHECKING:
    from collections.abc import Sequence

SAMPLE = ROOT.parent / "shared" / "data" / "ulg" / "pyulog__sample.ulg"
USB_PACKET_INTERVAL = 1 / 2100
"""Seconds between datagrams at the USB streaming ceiling: the simulated receive clock."""
OUR_SYSTEM, OUR_COMPONENT = DEFAULT_SYSTEM_ID, MAV_COMP_ID_LOG
MB = 1e6


# ---------------------------------------------------------------------------------------------
# The recorded stream


def _command(command: int) -> CommandLong:
    return CommandLong(command, 0.0, OUR_SYSTEM, OUR_COMPONENT, 1, 1)


def vehicle_packets(log: bytes) -> list[LoggingPacket]:
    """Every packet the simulated PX4 publishes for ``log``: START, the data, STOP's tail."""
    vehicle = SimVehicle(log, now=0.0, config=VehicleConfig(link_rate=None, speed=None))
    now = 0.0
    packets: list[LoggingPacket] = []
    pending: deque[VehicleOutput] = deque(vehicle.receive(_command(MAV_CMD_LOGGING_START), now))
    stopping = False
    while True:
        while pending:
            output = pending.popleft()
            if isinstance(output, SendLoggingData):
                packets.append(output.packet)
                if output.packet.needs_ack:
                    ack = LoggingAck(output.packet.sequence, OUR_SYSTEM, OUR_COMPONENT, 1, 1)
                    pending.extend(vehicle.receive(ack, now))
            elif isinstance(output, LogStreamEnded):
                return packets
        if vehicle.waiting_for_stop and not stopping:
            stopping = True
            pending.extend(vehicle.receive(_command(MAV_CMD_LOGGING_STOP), now))
            continue
        deadline = vehicle.next_deadline()
        now = now if deadline is None else max(now, deadline)
        pending.extend(vehicle.handle_timer(now))


def recorded_stream(log: bytes) -> list[bytes]:
    """The log's packets as MAVLink 2 frames from the vehicle, one datagram each."""
    codec = MavlinkCodec(system_id=1, component_id=1)
    return [
        codec.encode_logging_data(
            p.sequence,
            p.target_system,
            p.target_component,
            p.first_message_offset,
            p.data,
            acked=p.needs_ack,
        )
        for p in vehicle_packets(log)
    ]


def load_log(path: Path | None) -> tuple[bytes, str]:
    """The log to stream and its name (a generated 60 s flight when no sample log is there)."""
    if path is None and SAMPLE.is_file():
        path = SAMPLE
    if path is not None:
        return path.read_bytes(), path.name
    out = io.BytesIO()
    generate_flight_log(out, duration_s=60.0)
    return out.getvalue(), "generated 60 s flight"


# ---------------------------------------------------------------------------------------------
# ulogstream's receive path


def _no_send(_data: bytes) -> None:
    """The link: acks are encoded but go nowhere."""


def run_ours(datagrams: Sequence[bytes], out_dir: Path) -> int:
    """Feed every datagram through codec, session, acks and file; return the bytes written."""
    codec = MavlinkCodec(system_id=OUR_SYSTEM, component_id=OUR_COMPONENT)
    session = LoggingSession(target_system=1)
    session.start(0.0)
    sink = UlgFileSink(out_dir, min_free_mb=0)
    decode, session_receive, encode_ack = codec.decode, session.receive, codec.encode_logging_ack
    send = _no_send
    now = 0.0
    next_flush = 1.0
    for datagram in datagrams:
        now += USB_PACKET_INTERVAL
        later = []
        for message in decode(datagram):
            for output in session_receive(message, now):
                if type(output) is SendAck:
                    send(encode_ack(output.sequence, output.target_system, output.target_component))
                else:
                    later.append(output)
        for output in later:
            kind = type(output)
            if kind is WriteUlog:
                sink.write(output.data)  # type: ignore[union-attr]
            elif kind is LogStarted:
                sink.start_log()
        if now >= next_flush:
            next_flush = now + 1.0
            sink.flush()
    return sink.close().size


# ---------------------------------------------------------------------------------------------
# A receiver written the way PX4's Tools/mavlink_ulog_streaming.py works


class ReplayLink(mavutil.mavfile):  # type: ignore[misc]
    """A pymavlink ``mavfile`` whose reads are the recorded datagrams and whose writes vanish."""

    def __init__(self, datagrams: Sequence[bytes]) -> None:
        self._datagrams = iter(datagrams)
        mavutil.mavfile.__init__(
            self, None, "replay", source_system=OUR_SYSTEM, source_component=OUR_COMPONENT
        )

    def recv(self, n: int | None = None) -> bytes:  # noqa: ARG002 (one datagram per read, as UDP)
        return next(self._datagrams, b"")

    def write(self, buf: bytes) -> None:
        pass


def run_reference(datagrams: Sequence[bytes], path: Path) -> int:
    """The PX4-style loop over every datagram; return the bytes written."""
    link = ReplayLink(datagrams)
    with path.open("wb") as file:
        receiver = ReferenceReceiver(file)
        while True:
            msg = link.recv_match(type=["LOGGING_DATA_ACKED", "LOGGING_DATA"], blocking=False)
            if msg is None:
                break
            if msg.target_system != OUR_SYSTEM:
                continue
            lost = receiver.check_sequence(msg.sequence)
            if lost < 0:
                continue  # duplicate: dropped without an ack, as the script does
            if msg.get_type() == "LOGGING_DATA_ACKED":
                link.mav.logging_ack_send(msg.get_srcSystem(), msg.get_srcComponent(), msg.sequence)
            if lost:
                receiver.lost(lost)
            receiver.last_sequence = msg.sequence
            receiver.process_streamed_ulog_data(msg)
        file.flush()
        os.fsync(file.fileno())
    return path.stat().st_size


# ---------------------------------------------------------------------------------------------


class Figures(msgspec.Struct, frozen=True):
    """One receiver's best pass."""

    name: str
    cpu_s: float
    packets: int
    stream_bytes: int

    @property
    def packets_per_s(self) -> float:
        return self.packets / self.cpu_s

    @property
    def cpu_per_mb(self) -> float:
        return self.cpu_s / (self.stream_bytes / MB)


def best_of(passes: int, run: object, datagrams: Sequence[bytes], log: bytes) -> float:
    """Least CPU seconds over ``passes`` runs (each checks that the file equals ``log``)."""
    best = float("inf")
    for _ in range(passes):
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp)
            started = time.process_time()
            if run is run_ours:
                size = run_ours(datagrams, out)
                recorded = next(out.glob("*/*.ulg")).read_bytes()
            else:
                size = run_reference(datagrams, out / "reference.ulg")
                recorded = (out / "reference.ulg").read_bytes()
            cpu = time.process_time() - started
        if recorded != log or size != len(log):
            msg = f"{getattr(run, '__name__', run)} did not record the log byte for byte"
            raise SystemExit(msg)
        best = min(best, cpu)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--log", type=Path, help="ULog file to stream (default: pyulog sample)")
    parser.add_argument("--passes", type=int, default=5, help="passes per receiver (default 5)")
    args = parser.parse_args()
    cpu = max(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpu})
    log, name = load_log(args.log)
    datagrams = recorded_stream(log)
    stream_bytes = sum(map(len, datagrams))
    print(
        f"stream: {name}, {len(log) / MB:.2f} MB of log in {len(datagrams)} datagrams "
        f"({stream_bytes / MB:.2f} MB of MAVLink); pinned to CPU {cpu}; "
        f"fast CRC: {fast_crc_active()}; best of {args.passes} passes"
    )
    rows = [
        Figures(
            "ulogstream (decode, ack, reassemble, UlgFileSink)",
            best_of(args.passes, run_ours, datagrams, log),
            len(datagrams),
            len(log),
        ),
        Figures(
            "PX4-style pymavlink reference (recv_match loop)",
            best_of(args.passes, run_reference, datagrams, log),
            len(datagrams),
            len(log),
        ),
    ]
    print(f"{'receiver':<52} {'packets/s':>10} {'us/packet':>10} {'CPU s/MB':>9}")
    for row in rows:
        print(
            f"{row.name:<52} {row.packets_per_s:>10.0f} {1e6 / row.packets_per_s:>10.1f} "
            f"{row.cpu_per_mb:>9.4f}"
        )
    ours, reference = rows
    print(f"CPU per MB, reference / ulogstream: {reference.cpu_per_mb / ours.cpu_per_mb:.2f}x")
    verdict = "met" if ours.packets_per_s >= 40000 else "MISSED"
    print(f"target >= 40000 packets/s: {verdict}")


if __name__ == "__main__":
    main()
