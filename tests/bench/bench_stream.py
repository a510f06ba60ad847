"""Benchmark: LOGGING_DATA packets per second through the session core alone (no codec, no I/O).

Run: ``.venv/bin/python tests/bench/bench_stream.py [megabytes]``. The whole receive path
(codec, session, file write) must reach 40000 packets/s on one core, so the session alone
should leave most of the 25 microseconds per packet to the codec and the file.
"""

from __future__ import annotations

import struct
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # run from a checkout, uninstalled
sys.path.insert(0, str(ROOT / "tests"))
from support.packetize import packetize  # noqa: E402

from ulogstream.stream.packets import MAV_CMD_LOGGING_START, CommandAck, MavResult  # noqa: E402
from ulogstream.stream.session import DEFAULT_SYSTEM_ID, LoggingSession  # noqa: E402
from ulogstream.ulog.writer import ULogWriter  # noqa: E402

if TYPE_CHECKING:
    from ulogstream.stream.packets import LoggingPacket


def make_log(megabytes: float) -> bytes:
    """Definitions, then D messages of typical PX4 sizes (20..150 bytes) and a few strings."""
    writer = ULogWriter(timestamp_us=1)
    writer.flag_bits()
    sizes = (12, 28, 44, 60, 92, 140)
    ids = []
    for size in sizes:
        writer.format(f"t{size}:uint64_t timestamp;uint8_t[{size}] x;")
        ids.append(writer.add_logged_message(f"t{size}"))
    number = 0
    while writer.size < megabytes * 1e6:
        size = sizes[number % len(sizes)]
        writer.data(ids[number % len(sizes)], struct.pack("<Q", number) + bytes(size))
        if number % 500 == 0:
            writer.logging(ord("6"), number, "status")
        number += 1
    return writer.getvalue()


def run(packets: list[LoggingPacket]) -> tuple[float, int]:
    """Seconds of CPU to feed every packet to a fresh session, and the bytes it wrote."""
    session = LoggingSession(target_system=1)
    session.start(0.0)
    accepted = CommandAck(MAV_CMD_LOGGING_START, MavResult.ACCEPTED, 1, 1, DEFAULT_SYSTEM_ID, 155)
    session.receive(accepted, 0.0)
    receive = session.receive
    began = time.process_time()
    for number, packet in enumerate(packets):
        receive(packet, number * 1e-4)
    return time.process_time() - began, session.counters.bytes_written


def main() -> None:
    megabytes = float(sys.argv[1]) if len(sys.argv) > 1 else 8.0
    ulog = make_log(megabytes)
    packets = packetize(ulog)
    lossy = [p for p in packets if p.sequence % 100 != 50]  # 1 % loss
    acked = [msgspec.structs.replace(p, needs_ack=True) for p in packets]
    print(f"{len(ulog) / 1e6:.1f} MB of ULog, {len(packets)} packets")
    for name, stream in (("lossless", packets), ("1% loss", lossy), ("all ACKED", acked)):
        best = min(run(stream)[0] for _ in range(3))
        print(
            f"{name:>10}: {len(stream) / best:10.0f} packets/s"
            f"  {best / len(stream) * 1e6:5.2f} us/packet"
            f"  {len(ulog) / best / 1e6:6.1f} MB/s"
        )
    _, written = run(packets)
    assert written == len(ulog), "a lossless stream must be written whole"


if __name__ == "__main__":
    main()
