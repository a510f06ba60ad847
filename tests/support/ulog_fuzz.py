"""A seeded fuzzer of the ULog parser: mutated real and generated logs, fed in random chunks.

tests/ulog/test_fuzz.py runs a short run; tests/bench/fuzz_ulog.py a long one, by hand.
"""

from __future__ import annotations

import random
import struct
import time
from typing import TYPE_CHECKING

from support.shared_data import SHARED_ULG_FILES
from support.ulog_builders import normalise, sample_log
from ulogstream.errors import UlogstreamError
from ulogstream.ulog.parser import MIN_MAX_BUFFERED, ULogParser
from ulogstream.ulog.spec import MAGIC, SYNC_MAGIC
from ulogstream.ulog.writer import ULogWriter

if TYPE_CHECKING:
    from ulogstream.ulog.events import ULogEvent

MAX_SECONDS_PER_INPUT = 2.0
REAL_HEAD_BYTES = 8192


def generated_seeds() -> list[bytes]:
    w = ULogWriter()
    w.flag_bits(incompat_flags=b"\x01", appended_offsets=(300, 420, 0))
    w.format("t:uint16_t timestamp;float[2] v;char[3] s;uint8_t[2] _padding0;")
    msg_id = w.add_logged_message("t")
    for i in range(40):
        w.data(msg_id, struct.pack("<H2f3s", i * 999, 1.0, float(i), b"ab\0"))
        if i % 9 == 0:
            w.sync()
        if i % 13 == 0:
            w.logging_tagged(ord("3"), i, i, "x")
    w.message(ord("Y"), b"future")
    w.remove_logged_message(msg_id)
    return [sample_log(rows=3), sample_log(rows=12), w.getvalue()]


def real_seeds() -> list[bytes]:
    out = []
    for path in SHARED_ULG_FILES[:6]:
        with path.open("rb") as file:
            out.append(file.read(REAL_HEAD_BYTES))
    return out


def mutate(rng: random.Random, data: bytes, seeds: list[bytes]) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        choice = rng.randrange(8)
        at = rng.randrange(len(buf) + 1)
        if choice == 0 and buf:  # bit flips
            for _ in range(rng.randint(1, 8)):
                i = rng.randrange(len(buf))
                buf[i] ^= 1 << rng.randrange(8)
        elif choice == 1:  # truncation
            del buf[at:]
        elif choice == 2:  # splice from another input
            other = rng.choice(seeds)
            start = rng.randrange(len(other))
            buf[at:at] = other[start : start + rng.randint(1, 300)]
        elif choice == 3:  # delete a range
            del buf[at : at + rng.randint(1, 200)]
        elif choice == 4:  # random junk
            buf[at:at] = rng.randbytes(rng.randint(1, 100))
        elif choice == 5:  # zero-filled gap
            buf[at : at + rng.randint(1, 300)] = bytes(rng.randint(1, 300))
        elif choice == 6:  # a sync marker somewhere
            buf[at:at] = b"\x08\x00S" + SYNC_MAGIC
        elif buf:  # interesting numbers in a header field
            i = rng.randrange(len(buf))
            buf[i : i + 2] = rng.choice([b"\xff\xff", b"\x00\x00", b"\x01\x00", b"\xfe\xff"])
    if rng.random() < 0.5 and len(buf) >= len(MAGIC):
        buf[: len(MAGIC)] = MAGIC  # mostly keep the header so the body gets exercised
    return bytes(buf)


def feed(data: bytes, rng: random.Random | None) -> list[str]:
    """Parse in random chunks (or whole); the normalised events or the error, for comparing."""
    parser = ULogParser(max_buffered=MIN_MAX_BUFFERED)
    events: list[ULogEvent] = []
    pos = 0
    try:
        while pos < len(data):
            size = len(data) if rng is None else rng.choice([1, 3, 249, rng.randint(1, 4096)])
            events += parser.receive_bytes(data[pos : pos + size])
            pos += size
            assert parser.buffered <= MIN_MAX_BUFFERED
        events += parser.close()
    except UlogstreamError as err:  # the only exception family allowed out
        return [type(err).__name__, str(err)]  # events of the failing call are not returned
    return [repr(item) for item in normalise(events)]  # repr: NaN values compare equal


def fuzz(seed: int, *, count: int | None, seconds: float | None) -> int:
    """Run mutated inputs until ``count`` or ``seconds``; return how many ran."""
    rng = random.Random(seed)  # noqa: S311 - reproducible test inputs
    seeds = generated_seeds() + real_seeds()
    deadline = None if seconds is None else time.monotonic() + seconds
    ran = 0
    while (count is None or ran < count) and (deadline is None or time.monotonic() < deadline):
        kind = rng.random()
        if kind < 0.05:
            data = rng.randbytes(rng.randint(0, 500))
        elif kind < 0.1:
            data = MAGIC + b"\x01" + bytes(8) + rng.randbytes(rng.randint(0, 2000))
        else:
            data = mutate(rng, rng.choice(seeds), seeds)
        start = time.monotonic()
        whole = feed(data, None)
        if ran % 5 == 0:  # the chunking invariant holds for broken input too
            assert feed(data, rng) == whole, f"chunking changed the events of input #{ran}"
        assert time.monotonic() - start < MAX_SECONDS_PER_INPUT, f"input #{ran} took too long"
        ran += 1
    return ran
