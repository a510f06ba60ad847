"""Fuzzing volume: the codec, the reassembler and the parser on millions of generated inputs.

``python tests/bench/fuzz_volume.py [MILLIONS] [SEED]`` (default 10 million, seed from the clock).

Each input is one chunk handed to a core, as the live path hands them:

- MAVLink codec: a chunk of bytes from a link: valid LOGGING_DATA frames with bit flips, cuts,
  splices and runs of garbage between them.
- Reassembler: one LOGGING_DATA packet of a real stream, or one with a random sequence number,
  ``first_message_offset`` and payload (also random packet-0 look-alikes and copies).
- Parser: one chunk of a generated ULog with random bit flips, cut at random points.

Only :class:`~ulogstream.errors.UlogstreamError` may escape (the project's error type, which the
shell reports in one line); anything else stops the run and prints the seed and the step. Memory
must stay bounded: the resident size is sampled and must not grow by more than 64 MB.
"""

from __future__ import annotations

import random
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the suite's helpers

import contextlib

from support.packetize import make_ulog, packetize

from ulogstream.errors import UlogstreamError
from ulogstream.mavlink_codec import MavlinkCodec
from ulogstream.stream.packets import LoggingPacket
from ulogstream.stream.reassembler import LogEndReason, LogStreamReassembler
from ulogstream.ulog.parser import ULogParser

MAX_GROWTH_MB = 64.0
SHARES = {"codec": 0.3, "reassembler": 0.5, "parser": 0.2}
"""The share of the inputs each core gets (the reassembler's are the cheapest)."""


def rss_mb() -> float:
    """Peak resident size of this process so far, in MB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def mutate(data: bytes, rng: random.Random) -> bytes:
    """A copy of ``data`` with a few bit flips, maybe cut short or with garbage spliced in."""
    out = bytearray(data)
    for _ in range(rng.randrange(4)):
        if out:
            out[rng.randrange(len(out))] ^= 1 << rng.randrange(8)
    choice = rng.random()
    if choice < 0.1 and out:
        del out[rng.randrange(len(out)) :]
    elif choice < 0.2:
        at = rng.randrange(len(out) + 1)
        out[at:at] = rng.randbytes(rng.randrange(1, 40))
    return bytes(out)


def fuzz_codec(count: int, rng: random.Random) -> int:
    ulog = make_ulog(200, seed=rng.randrange(1000))
    sender = MavlinkCodec(system_id=1, component_id=1)
    frames = [
        sender.encode_logging_data(
            p.sequence, 254, 155, p.first_message_offset, p.data, acked=p.needs_ack
        )
        for p in packetize(ulog)
    ]
    codec = MavlinkCodec(system_id=254, component_id=155)
    for step in range(count):
        if step % 100_000 == 0:
            codec = MavlinkCodec(system_id=254, component_id=155)  # fresh state, as a new link
        chunk = b"".join(rng.choice(frames) for _ in range(rng.randrange(1, 4)))
        with contextlib.suppress(UlogstreamError):
            codec.decode(mutate(chunk, rng))
    return count


def fuzz_reassembler(count: int, rng: random.Random) -> int:
    packets = packetize(make_ulog(300, seed=rng.randrange(1000)))
    reassembler = LogStreamReassembler(reorder_packets=rng.choice((0, 16, 256)))
    now = 0.0
    for step in range(count):
        now += 0.0005
        choice = rng.random()
        if choice < 0.6:
            packet = packets[step % len(packets)]
        elif choice < 0.8:
            packet = rng.choice(packets)
        else:
            data = rng.randbytes(rng.randrange(0, 250))
            offset = rng.choice((0, 255, rng.randrange(256)))
            packet = LoggingPacket(rng.randrange(0x10000), offset, data, rng.random() < 0.3)
        try:
            reassembler.receive_packet(packet, now)
            if step % 5000 == 0:
                reassembler.handle_timer(now, [])
            if step % 200_000 == 0:
                reassembler.end_log(LogEndReason.STOPPED, complete=True, out=[])
        except UlogstreamError:
            pass
    return count


def fuzz_parser(count: int, rng: random.Random) -> int:
    ulog = make_ulog(300, seed=rng.randrange(1000))
    done = 0
    while done < count:
        data = mutate(ulog, rng) if rng.random() < 0.9 else rng.randbytes(rng.randrange(2000))
        parser = ULogParser()
        position = 0
        try:
            while position < len(data) and done < count:
                size = rng.randrange(1, 600)
                parser.receive_bytes(data[position : position + size])
                position += size
                done += 1
            parser.close()
        except UlogstreamError:
            done += 1
    return done


def main() -> None:
    """Run MILLIONS inputs split over the three cores; exit non-zero on the first escape."""
    millions = float(sys.argv[1]) if len(sys.argv) > 1 else 10.0
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else time.time_ns() % 2**32
    total = int(millions * 1_000_000)
    start_rss = rss_mb()
    started = time.monotonic()
    ran: dict[str, int] = {}
    for name, runner in (
        ("codec", fuzz_codec),
        ("reassembler", fuzz_reassembler),
        ("parser", fuzz_parser),
    ):
        rng = random.Random(f"{seed}-{name}")  # noqa: S311 (test data)
        t0 = time.monotonic()
        ran[name] = runner(int(total * SHARES[name]), rng)
        print(f"  {name}: {ran[name]:,} inputs in {time.monotonic() - t0:.0f} s", flush=True)
    growth = rss_mb() - start_rss
    summary = ", ".join(f"{name} {count:,}" for name, count in ran.items())
    print(
        f"fuzz volume: {sum(ran.values()):,} inputs ({summary}) in "
        f"{time.monotonic() - started:.0f} s, seed {seed}; only UlogstreamError escaped; "
        f"peak RSS grew {growth:.1f} MB"
    )
    if growth > MAX_GROWTH_MB:
        msg = f"memory grew by {growth:.1f} MB (limit {MAX_GROWTH_MB:.0f} MB)"
        raise SystemExit(msg)


if __name__ == "__main__":
    main()
