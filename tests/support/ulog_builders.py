"""Builders and comparison helpers shared by the ULog tests."""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, TypeVar

import numpy as np

from ulogstream.ulog.events import DataRows, ULogEvent
from ulogstream.ulog.parser import ULogParser
from ulogstream.ulog.writer import ULogWriter

if TYPE_CHECKING:
    from collections.abc import Iterable

VEHICLE_FORMAT = (
    "vehicle:uint64_t timestamp;float[3] v;char[4] name;nest[2] n;uint8_t[3] _padding0;"
)
"""A format using a nested type defined after it, a char array and trailing padding."""
NEST_FORMAT = "nest:uint16_t a;bool b;uint8_t _padding0;"
VEHICLE_SIZE = 8 + 12 + 4 + 2 * 4 + 3
VEHICLE_WIRE = VEHICLE_SIZE - 3


def vehicle_payload(timestamp: int, v: float, name: bytes, a: int) -> bytes:
    """A 'vehicle' row as PX4 logs it: trailing padding left out."""
    nest = struct.pack("<HBx", a, 1) + struct.pack("<HBx", a + 1, 0)  # b: True, False
    return struct.pack("<Q3f4s", timestamp, v, v + 1, v + 2, name) + nest


def sample_log(rows: int = 5) -> bytes:
    """A log with every message type; ``rows`` 'vehicle' samples between other messages."""
    w = ULogWriter(timestamp_us=1000)
    w.flag_bits(compat_flags=b"\x01")
    w.format(VEHICLE_FORMAT)
    w.format(NEST_FORMAT)
    w.format("small:uint16_t timestamp;int8_t x;")
    w.info("char", "sys_name", "PX4")
    w.info("int32_t", "time_ref_utc", -3600)
    w.info("uint32_t", "ver_sw_release", 0x010F00FF)
    w.info("uint8_t", "blob", b"\x00\x01\x02")
    w.info("float", "ratio", (1.5, 2.5))
    w.info_multiple("char", "perf", "abc")
    w.info_multiple("char", "perf", "def", is_continued=True)
    w.info_multiple("char", "perf", "second")
    w.parameter("MC_ROLL_P", 6.5)
    w.parameter("SYS_AUTOSTART", 4001)
    w.parameter_default("MC_ROLL_P", 7.0, 1)
    vehicle = w.add_logged_message("vehicle")
    small = w.add_logged_message("small", multi_id=1)
    for i in range(rows):
        w.data(vehicle, vehicle_payload(2000 + i * 10, float(i), b"ab\0\0", i))
        w.data(small, struct.pack("<Hb", (65500 + i * 20) % 65536, i))
    w.logging(ord("6"), 2050, "hello")
    w.logging_tagged(ord("4"), 7, 2060, "tagged")
    w.sync()
    w.parameter("MC_ROLL_P", 6.75)
    w.dropout(120)
    for i in range(rows, 2 * rows):
        w.data(vehicle, vehicle_payload(2000 + i * 10, float(i), b"abcd", i))
        w.data(small, struct.pack("<Hb", (65500 + i * 20) % 65536, i))
    w.info("char", "late", "x")
    w.remove_logged_message(small)
    w.data(vehicle, vehicle_payload(9000, 9.0, b"zz\0\0", 9))
    return w.getvalue()


def parse(
    data: bytes, chunks: Iterable[int] | None = None, *, ordered: bool = True
) -> list[ULogEvent]:
    """Events of ``data`` fed whole (or split at ``chunks`` sizes, cycled), then close()."""
    parser = ULogParser(ordered=ordered)
    events: list[ULogEvent] = []
    if chunks is None:
        events += parser.receive_bytes(data)
    else:
        sizes = list(chunks)
        pos, i = 0, 0
        while pos < len(data):
            size = max(1, sizes[i % len(sizes)])
            events += parser.receive_bytes(data[pos : pos + size])
            pos += size
            i += 1
    events += parser.close()
    return events


NormalItem = ULogEvent | tuple[str, int, bytes, tuple[int, ...]]


def normalise(events: Iterable[ULogEvent]) -> list[NormalItem]:
    """Events with data batching undone: between two non-D events, one item per msg_id.

    Each data item is ``("rows", msg_id, row bytes, timestamps)``, sorted by msg_id, so the
    lists of two chunkings of the same bytes are equal exactly when their events are.
    """
    out: list[NormalItem] = []
    pending: dict[int, tuple[list[bytes], list[int]]] = {}

    def flush() -> None:
        for msg_id in sorted(pending):
            raw, stamps = pending[msg_id]
            out.append(("rows", msg_id, b"".join(raw), tuple(stamps)))
        pending.clear()

    for event in events:
        if isinstance(event, DataRows):
            raw, stamps = pending.setdefault(event.subscription.msg_id, ([], []))
            raw.append(event.rows.tobytes())
            stamps.extend(int(t) for t in event.timestamps_us)
        else:
            flush()
            out.append(event)
    flush()
    return out


def rows_of(events: Iterable[ULogEvent], name: str) -> np.ndarray:
    """All rows of topic ``name`` (any instance) concatenated."""
    arrays = [e.rows for e in events if isinstance(e, DataRows) and e.subscription.name == name]
    # not np.concatenate: it packs structured dtypes, dropping the padding bytes
    return np.frombuffer(b"".join(a.tobytes() for a in arrays), arrays[0].dtype)


def timestamps_of(events: Iterable[ULogEvent], name: str) -> list[int]:
    """All unrolled timestamps of topic ``name``."""
    return [
        int(t)
        for e in events
        if isinstance(e, DataRows) and e.subscription.name == name
        for t in e.timestamps_us
    ]


T = TypeVar("T")


def of_type(events: Iterable[object], kind: type[T]) -> list[T]:
    """The events of one type, in order."""
    return [e for e in events if isinstance(e, kind)]


EXTRA_ROWS = {
    "px4-ulog-rs__corrupt_format_not_utf8.ulg": 25,
    "px4-ulog-rs__corrupt_unregistered_msg_id.ulg": 276,
}
"""Rows we recover that pyulog loses, by file (every other file: exactly pyulog's rows)."""
