"""ULogReader's own framing and gathering gives what the parser alone gives, for any log.

The reference is ``ULogReader(gather=False)``: every byte through the ULogParser. Logs are the
shared samples and generated ones (every timestamp type, re-subscriptions, stamped values in
the data section), whole and with damage spliced in, fed in blocks of several sizes.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.ulog_builders import sample_log

from ulogstream.errors import ULogFormatError
from ulogstream.ulog import reader as reader_module
from ulogstream.ulog.reader import ULogData, ULogReader
from ulogstream.ulog.writer import ULogWriter

if TYPE_CHECKING:
    from pathlib import Path

BLOCK_SIZES = [70_000, 1 << 17, 1 << 22]


def fold(data: bytes, block_size: int, *, gather: bool = True) -> ULogData:
    """Feed ``data`` to a reader in blocks of ``block_size``, as the file adapter does."""
    reader = ULogReader(gather=gather)
    pos = 0
    while True:
        block = data[pos : pos + block_size]
        final = pos + len(block) >= len(data)
        pos += reader.feed(block, final=final)
        if final:
            return reader.result()


def assert_same(ours: ULogData, reference: ULogData) -> None:
    """Every part of two ULogData values is equal (rows compared as bytes)."""
    for name in (
        "header",
        "flag_bits",
        "formats",
        "info",
        "info_multiple",
        "initial_parameters",
        "changed_parameters",
        "default_parameters",
        "logged_messages",
        "dropouts",
        "corruption",
        "warnings",
        "truncated",
        "start_timestamp_us",
        "last_timestamp_us",
    ):
        # repr: a damaged value can be NaN, which equals nothing
        assert repr(getattr(ours, name)) == repr(getattr(reference, name)), name
    assert list(ours.topics) == list(reference.topics)
    for key, topic in ours.topics.items():
        theirs = reference.topics[key]
        assert topic.msg_ids == theirs.msg_ids, key
        assert topic.dtype == theirs.dtype, key
        assert topic.data.tobytes() == theirs.data.tobytes(), key
        assert topic.timestamps_us.tolist() == theirs.timestamps_us.tolist(), key


def generated_log(rows: int = 300) -> bytes:
    """Topics with uint64, int64, uint32 (wrapping) and no timestamp; values stamped in data."""
    w = ULogWriter(timestamp_us=500)
    w.flag_bits()
    w.format("fast:uint64_t timestamp;float x;uint8_t[3] _padding0;")
    w.format("signed:int64_t timestamp;int16_t y;")
    w.format("wrap:uint32_t timestamp;uint8_t z;")
    w.format("plain:uint8_t w;")
    w.parameter("P_START", 1)
    fast = w.add_logged_message("fast")
    signed = w.add_logged_message("signed")
    wrap = w.add_logged_message("wrap")
    plain = w.add_logged_message("plain", multi_id=2)
    for i in range(rows):
        w.data(fast, struct.pack("<Qf", 1000 + i * 7, i))
        w.data(signed, struct.pack("<qh", 2000 + i * 5, -(i % 30_000)))
        w.data(wrap, struct.pack("<IB", (0xFFFF_FF00 + i * 3) & 0xFFFF_FFFF, i % 256))
        w.data(plain, bytes([i % 256]))
        if i % 50 == 25:
            w.parameter("P_CHANGE", i)
            w.info("char", "note", f"at {i}")
            w.dropout(i)
            w.sync()
        if i == rows // 3:  # data for a msg_id never subscribed (above every other)
            w.data(900, b"\x00" * 6)
        if i == rows // 2:  # the same instance again under a new msg_id
            w.remove_logged_message(fast)
            fast = w.add_logged_message("fast", msg_id=40)
    w.logging(ord("6"), 99_999, "end")
    return w.getvalue()


def test_shared_samples_read_as_the_parser_reads_them(shared_ulg_files: list[Path]) -> None:
    for path in shared_ulg_files:
        data = path.read_bytes()
        reference = fold(data, 1 << 22, gather=False)
        for block_size in BLOCK_SIZES:
            assert_same(fold(data, block_size), reference)


def test_generated_log_with_every_timestamp_type() -> None:
    data = generated_log()
    reference = fold(data, 1 << 22, gather=False)
    assert reference.topics["fast", 0].data.size == 300
    for block_size in (*BLOCK_SIZES, 1 << 16):
        assert_same(fold(data, block_size), reference)


def test_values_in_data_are_stamped_with_the_largest_timestamp_before_them() -> None:
    """Rows out of time order around changed parameters: each gets the maximum so far."""
    w = ULogWriter(timestamp_us=500)
    w.format("a:uint64_t timestamp;float x;")
    w.format("b:uint64_t timestamp;uint8_t y;")
    a = w.add_logged_message("a")
    b = w.add_logged_message("b")
    stamps = [1000, 9000, 2000, 3000, 12000, 4000, 5000, 6000]
    for i, stamp in enumerate(stamps):
        w.data(a, struct.pack("<Qf", stamp, i))
        w.data(b, struct.pack("<QB", stamp // 2, i))
        w.parameter("P_CHANGE", i)
        w.dropout(i)
    data = w.getvalue()
    reference = fold(data, 1 << 22, gather=False)
    stamped = [p.timestamp_us for p in reference.changed_parameters]
    assert stamped == [1000, 9000, 9000, 9000, 12000, 12000, 12000, 12000]
    assert [d.timestamp_us for d in reference.dropouts] == stamped
    for block_size in (*BLOCK_SIZES, 1 << 16):
        assert_same(fold(data, block_size), reference)


def test_sample_log_reads_as_the_parser_reads_it() -> None:
    data = sample_log(rows=5)
    reference = fold(data, 1 << 22, gather=False)
    assert reference.changed_parameters
    assert reference.dropouts
    assert_same(fold(data, 1 << 16), reference)


@settings(max_examples=150, deadline=None)
@given(
    cuts=st.lists(
        st.tuples(st.floats(0.0, 1.0), st.binary(min_size=1, max_size=40), st.booleans()),
        min_size=1,
        max_size=4,
    ),
    block_size=st.sampled_from([1 << 16, 70_001, 1 << 22]),
)
def test_damaged_logs_read_as_the_parser_reads_them(
    cuts: list[tuple[float, bytes, bool]], block_size: int
) -> None:
    data = bytearray(generated_log(120))
    for where, junk, insert in cuts:  # overwritten or inserted bytes
        at = 16 + int(where * (len(data) - 16))
        data[at : at + (0 if insert else len(junk))] = junk
    damaged = bytes(data)
    reference = outcome(damaged, 1 << 22, gather=False)
    ours = outcome(damaged, block_size)
    if isinstance(reference, ULogData) and isinstance(ours, ULogData):
        assert_same(ours, reference)
    else:  # damage in the 'B' flags can make the log unreadable
        assert ours == reference


def outcome(data: bytes, block_size: int, *, gather: bool = True) -> ULogData | tuple[str, int]:
    """The log read, or the error (its text and offset) that refuses it."""
    try:
        return fold(data, block_size, gather=gather)
    except ULogFormatError as err:
        return str(err), err.offset


def test_warnings_name_file_offsets_in_their_text_too() -> None:
    tail = ULogWriter(header=False)
    tail.message(ord("F"), b"\xff not a format")  # after rows the parser did not see
    data = generated_log(50) + tail.getvalue()
    reference = fold(data, 1 << 22, gather=False)
    ours = fold(data, 1 << 22)
    assert_same(ours, reference)
    offset = len(data) - len(tail.getvalue())
    assert ours.warnings[-1].offset == offset
    assert ours.warnings[-1].text.endswith(f"(at byte {offset})")


def test_truncated_log_reads_as_the_parser_reads_it() -> None:
    data = generated_log(50)[:-7]
    reference = fold(data, 1 << 22, gather=False)
    assert reference.truncated is not None
    assert_same(fold(data, 1 << 16), reference)


def test_gathered_rows_own_their_memory() -> None:
    block = bytearray(generated_log(20))
    reader = ULogReader()
    reader.feed(memoryview(block), final=True)
    topic = reader.result().topics["fast", 0]
    block[:] = bytes(len(block))  # the caller reuses its buffer
    assert topic.timestamps_us.tolist() == [1000 + i * 7 for i in range(20)]


@pytest.mark.parametrize("remap", [True, False], ids=["mremap", "copy"])
def test_large_instances_keep_every_row_as_their_buffer_grows(
    monkeypatch: pytest.MonkeyPatch, *, remap: bool
) -> None:
    """A large instance's rows keep every value, in order, as their buffer grows.

    Past the heap part they move to a mapping of their own, which grows in place (mremap) or,
    where the system cannot (macOS, simulated here), into a larger mapping; "fast" rows are
    gathered by the reader, "wrap" rows come through the parser.
    """
    if not remap:
        monkeypatch.setattr(reader_module, "_resize", lambda _mapping, _size: False)
    rows = 60_000
    result = fold(generated_log(rows), 1 << 17)
    fast = result.topics["fast", 0]
    wrap = result.topics["wrap", 0]
    assert fast.data.nbytes > 2 * reader_module._MAPPED_START  # grown twice
    assert wrap.data.nbytes > reader_module._MAPPED_START
    assert fast.data["x"].tolist() == [float(i) for i in range(rows)]
    assert fast.timestamps_us.tolist() == [1000 + i * 7 for i in range(rows)]
    assert wrap.data["z"].tolist() == [i % 256 for i in range(rows)]


def test_result_can_be_taken_twice_while_the_first_lives() -> None:
    reader = ULogReader()
    reader.feed(generated_log(40_000), final=True)  # "fast" rows in a mapping
    first = reader.result()
    second = reader.result()
    assert_same(second, first)
    assert second.topics["fast", 0].data["x"][-1] == 39_999


def test_feed_after_the_final_block_is_refused() -> None:
    reader = ULogReader()
    reader.feed(sample_log(), final=True)
    with pytest.raises(RuntimeError, match="after the final block"):
        reader.feed(b"x")
