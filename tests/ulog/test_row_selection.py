"""Row selection: the parser frames and counts every 'D' message, and decodes only chosen rows."""

from __future__ import annotations

import io
import random
import struct
from collections import defaultdict

import numpy as np
import pytest
from support.shared_data import shared_ulg
from support.ulog_builders import of_type

from ulogstream.sim.flightlog import generate_flight_log
from ulogstream.ulog.events import DataRows, Subscription, ULogEvent, UndecodedRows
from ulogstream.ulog.parser import RowSelection, RowSelector, ULogParser
from ulogstream.ulog.writer import ULogWriter

REAL_LOGS = (
    "px4-ulog-rs__corrupt_format_not_utf8.ulg",  # v1.17, corruption, timestamps that go back
    "pyulog__sample_logging_tagged_and_default_params.ulg",  # v1.13, 170 topic instances
    "pyulog__sample_2016.ulg",  # old format, truncated
)


def flight(seconds: float = 5.0) -> bytes:
    out = io.BytesIO()
    generate_flight_log(out, duration_s=seconds, seed=3)
    return out.getvalue()


def chunks(log: bytes, seed: int) -> list[bytes]:
    """``log`` cut at random places, as a live stream's datagrams cut it (1..600 bytes)."""
    rng = random.Random(seed)  # noqa: S311 (reproducible cuts, not secrets)
    out: list[bytes] = []
    pos = 0
    while pos < len(log):
        size = rng.randint(1, 600)
        out.append(log[pos : pos + size])
        pos += size
    return out


def feed(pieces: list[bytes], rows: RowSelector | None) -> tuple[list[ULogEvent], ULogParser]:
    parser = ULogParser(rows=rows)
    events: list[ULogEvent] = []
    for piece in pieces:
        events.extend(parser.receive_bytes(piece))
    events.extend(parser.close())
    return events, parser


def every(selection: RowSelection) -> RowSelector:
    def select(_subscription: Subscription) -> RowSelection:
        return selection

    return select


def row_batches(events: list[ULogEvent]) -> list[DataRows | UndecodedRows]:
    return [e for e in events if isinstance(e, DataRows | UndecodedRows)]


def other_events(events: list[ULogEvent]) -> list[ULogEvent]:
    return [e for e in events if not isinstance(e, DataRows | UndecodedRows)]


def the_same_rows(a: DataRows, b: DataRows) -> bool:
    return a.rows.tobytes() == b.rows.tobytes() and np.array_equal(a.timestamps_us, b.timestamps_us)


def check_selection(log: bytes, seed: int) -> None:
    """NEWEST gives ALL's batches undecoded, NONE none; the counts are the same.

    Where timestamps wrap, NEWEST's batches come as the newest row decoded.
    """
    pieces = chunks(log, seed)
    everything, all_parser = feed(pieces, None)
    newest, newest_parser = feed(pieces, every(RowSelection.NEWEST))
    nothing, none_parser = feed(pieces, every(RowSelection.NONE))

    all_batches = of_type(everything, DataRows)
    newest_batches = row_batches(newest)
    assert len(newest_batches) == len(all_batches)
    undecoded = 0
    for full, batch in zip(all_batches, newest_batches, strict=True):
        assert batch.subscription == full.subscription
        if isinstance(batch, UndecodedRows):
            undecoded += 1
            assert len(batch.payloads) == len(full.rows)
            for payload, row in zip(batch.payloads, full.rows, strict=True):
                assert row.tobytes() == payload + bytes(full.rows.itemsize - len(payload))
            assert batch.timestamp_us == full.timestamps_us[-1]
        one = batch.newest() if isinstance(batch, UndecodedRows) else batch
        assert len(one.rows) == 1
        assert one.rows.tobytes() == full.rows[-1:].tobytes()
        assert one.timestamps_us.tolist() == full.timestamps_us[-1:].tolist()
    assert undecoded  # every log here has uint64 timestamps somewhere
    assert not row_batches(nothing)
    # every other event is the same, in the same order
    assert other_events(newest) == other_events(everything)
    assert other_events(nothing) == other_events(everything)

    rows_per_sub: dict[int, int] = defaultdict(int)
    for batch in all_batches:
        rows_per_sub[id(batch.subscription)] += len(batch.rows)
    assert all_parser.decoded_rows == sum(rows_per_sub.values())
    assert newest_parser.decoded_rows == len(newest_batches)
    assert none_parser.decoded_rows == 0
    expected = [
        (c.subscription, c.samples, c.first_timestamp_us) for c in all_parser.topic_counts()
    ]
    for parser in (newest_parser, none_parser):
        counted = [(c.subscription, c.samples, c.first_timestamp_us) for c in parser.topic_counts()]
        assert counted == expected
    for count in all_parser.topic_counts():
        assert count.samples == rows_per_sub[id(count.subscription)]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_selected_rows_are_the_newest_of_each_batch_on_a_flight(seed: int) -> None:
    check_selection(flight(), seed)


@pytest.mark.slow
@pytest.mark.shared
@pytest.mark.parametrize("name", REAL_LOGS)
def test_selected_rows_are_the_newest_of_each_batch_on_real_logs(name: str) -> None:
    check_selection(shared_ulg(name).read_bytes(), seed=7)


def test_the_selector_is_asked_once_per_subscription_and_can_mix() -> None:
    w = ULogWriter(timestamp_us=100)
    w.format("fast:uint64_t timestamp;float x;")
    w.format("slow:uint64_t timestamp;float x;")
    fast = w.add_logged_message("fast")
    slow = w.add_logged_message("slow")
    for i in range(1, 7):
        w.data(fast, struct.pack("<Qf", 1000 + i, i))
        w.data(slow, struct.pack("<Qf", 2000 + i, -i))
    asked: list[str] = []

    def select(subscription: Subscription) -> RowSelection:
        asked.append(subscription.name)
        return RowSelection.NEWEST if subscription.name == "fast" else RowSelection.ALL

    events, parser = feed([w.getvalue()], select)
    assert asked == ["fast", "slow"]
    (fast_rows,) = of_type(events, UndecodedRows)
    assert fast_rows.subscription.name == "fast"
    assert len(fast_rows.payloads) == 6
    assert fast_rows.newest().rows["x"].tolist() == [6.0]
    (slow_rows,) = of_type(events, DataRows)
    assert slow_rows.rows["x"].tolist() == [-1.0, -2.0, -3.0, -4.0, -5.0, -6.0]
    counts = {c.subscription.name: c for c in parser.topic_counts()}
    assert (counts["fast"].samples, counts["fast"].first_timestamp_us) == (6, 1001)
    assert counts["fast"].last_timestamp_us == 1006
    assert (counts["slow"].samples, counts["slow"].last_timestamp_us) == (6, 2006)
    assert parser.decoded_rows == 7


def test_wrapping_timestamps_are_unrolled_over_rows_never_decoded() -> None:
    """A uint16 millisecond timestamp wraps: NEWEST still reports the unrolled time."""
    w = ULogWriter(timestamp_us=0)
    w.format("old:uint16_t timestamp;float x;")
    msg_id = w.add_logged_message("old")
    stamps = [65000, 65500, 100, 600]  # wraps once after 65500
    header = w.getvalue()
    for stamp in stamps:
        w.data(msg_id, struct.pack("<Hf", stamp, 1.0))
    data = w.getvalue()[len(header) :]
    pieces = [header, data[: len(data) // 2], data[len(data) // 2 :]]
    full, _ = feed(pieces, None)
    newest, parser = feed(pieces, every(RowSelection.NEWEST))
    assert [b.timestamps_us[-1] for b in of_type(newest, DataRows)] == [
        b.timestamps_us[-1] for b in of_type(full, DataRows)
    ]
    (count,) = parser.topic_counts()
    assert count.samples == len(stamps)
    assert count.last_timestamp_us == of_type(full, DataRows)[-1].timestamps_us[-1]
