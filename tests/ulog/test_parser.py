"""ULogParser: writer -> parser round trips for every message type and format feature."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from support.ulog_builders import (
    NEST_FORMAT,
    VEHICLE_FORMAT,
    VEHICLE_SIZE,
    normalise,
    of_type,
    parse,
    rows_of,
    sample_log,
    timestamps_of,
    vehicle_payload,
)

from ulogstream.errors import ULogFormatError, UlogstreamError
from ulogstream.ulog.events import (
    Corruption,
    DataRows,
    DataWithoutSubscription,
    DefinitionsEnd,
    Dropout,
    FileHeader,
    FlagBits,
    FormatDefined,
    Info,
    InfoMultiple,
    LoggedString,
    Parameter,
    ParameterDefault,
    ParserWarning,
    Subscription,
    Sync,
    Truncated,
    Unsubscription,
)
from ulogstream.ulog.parser import MIN_MAX_BUFFERED, ULogParser
from ulogstream.ulog.spec import MAGIC, SYNC_MAGIC, MessageType
from ulogstream.ulog.writer import ULogWriter


def minimal_writer(
    fmt: str = "t:uint64_t timestamp;int32_t x;", *, timestamp_us: int = 0, version: int = 1
) -> ULogWriter:
    w = ULogWriter(timestamp_us=timestamp_us, version=version)
    w.flag_bits()
    w.format(fmt)
    return w


def test_sample_log_events_in_order() -> None:
    events = parse(sample_log(rows=2))
    kinds = [type(e).__name__ for e in normalise(events)]
    assert kinds[:2] == ["FileHeader", "FlagBits"]
    assert kinds.count("FormatDefined") == 3
    assert kinds.index("DefinitionsEnd") < kinds.index("Subscription")
    assert kinds[-1] == "tuple"  # the last 'vehicle' row
    assert of_type(events, FileHeader) == [FileHeader(1, 1000)]
    assert of_type(events, DefinitionsEnd)[0].offset > 16


def test_info_values_decoded_by_key_type() -> None:
    infos = {e.key: e for e in of_type(parse(sample_log()), Info)}
    assert infos["sys_name"].value == "PX4"
    assert infos["sys_name"].type_name == "char[3]"
    assert infos["time_ref_utc"].value == -3600
    assert infos["ver_sw_release"].value == 0x010F00FF
    assert infos["blob"].value == b"\x00\x01\x02"
    assert infos["ratio"].value == (1.5, 2.5)
    assert infos["sys_name"].timestamp_us is None
    assert infos["late"].timestamp_us == 65680  # data section: last data timestamp seen


def test_scalar_info_types() -> None:
    w = minimal_writer()
    w.info("bool", "flag", value=True)
    w.info("double", "pi", 3.25)
    w.info("int8_t", "neg", -3)
    w.info("uint64_t", "big", 2**63 + 5)
    w.info("int16_t", "arr", (-1, 2, -3))
    w.message(MessageType.INFO, bytes([len(b"foo_t x")]) + b"foo_t x" + b"\x01\x02")
    values = {e.key: e.value for e in of_type(parse(w.getvalue()), Info)}
    assert values == {
        "flag": True,
        "pi": 3.25,
        "neg": -3,
        "big": 2**63 + 5,
        "arr": (-1, 2, -3),
        "x": b"\x01\x02",
    }


def test_info_multiple_pieces_keep_is_continued() -> None:
    pieces = of_type(parse(sample_log()), InfoMultiple)
    assert [(p.key, p.value, p.is_continued) for p in pieces] == [
        ("perf", "abc", False),
        ("perf", "def", True),
        ("perf", "second", False),
    ]


def test_parameters_initial_changed_and_default() -> None:
    events = parse(sample_log())
    params = of_type(events, Parameter)
    assert params[:2] == [Parameter("MC_ROLL_P", 6.5, None), Parameter("SYS_AUTOSTART", 4001, None)]
    # a change in the data section is stamped with the largest data timestamp so far
    assert params[2] == Parameter("MC_ROLL_P", 6.75, 65580)
    assert of_type(events, ParameterDefault) == [ParameterDefault("MC_ROLL_P", 7.0, 1)]


def test_parameter_before_data_is_stamped_with_header_timestamp() -> None:
    w = minimal_writer(timestamp_us=777)
    w.add_logged_message("t")
    w.parameter("X", 1)
    w.dropout(5)
    events = parse(w.getvalue())
    assert of_type(events, Parameter) == [Parameter("X", 1, 777)]
    assert of_type(events, Dropout) == [Dropout(5, 777)]


def test_logged_strings_sync_dropout_unsubscription() -> None:
    events = parse(sample_log())
    assert of_type(events, LoggedString) == [
        LoggedString(ord("6"), None, 2050, "hello"),
        LoggedString(ord("4"), 7, 2060, "tagged"),
    ]
    assert len(of_type(events, Sync)) == 1
    assert of_type(events, Dropout) == [Dropout(120, 65580)]
    assert of_type(events, Unsubscription) == [Unsubscription(1)]


def test_definitions_end_at_first_logging_message() -> None:
    w = minimal_writer()
    w.logging(ord("6"), 5, "boot")
    w.add_logged_message("t")
    events = parse(w.getvalue())
    ends = of_type(events, DefinitionsEnd)
    assert len(ends) == 1
    assert events.index(ends[0]) + 1 == events.index(of_type(events, LoggedString)[0])


def test_nested_format_defined_after_use_flattened_with_pyulog_names() -> None:
    events = parse(sample_log())
    vehicle = next(s for s in of_type(events, Subscription) if s.name == "vehicle")
    assert vehicle.dtype.names == (
        "timestamp",
        "v[0]",
        "v[1]",
        "v[2]",
        "name",
        "n[0].a",
        "n[0].b",
        "n[1].a",
        "n[1].b",
    )
    assert vehicle.dtype.itemsize == VEHICLE_SIZE
    rows = rows_of(events, "vehicle")
    assert rows["name"].tolist()[:2] == [b"ab", b"ab"]
    assert rows["name"][5] == b"abcd"
    assert rows["v[2]"].tolist()[:3] == [2.0, 3.0, 4.0]
    assert rows["n[1].a"].tolist()[:3] == [1, 2, 3]
    assert rows["n[0].b"].all()
    assert not rows["n[1].b"].any()


def test_payload_with_trailing_padding_included_decodes_the_same() -> None:
    w = minimal_writer(VEHICLE_FORMAT)
    w.format(NEST_FORMAT)
    msg_id = w.add_logged_message("vehicle")
    payload = vehicle_payload(5, 1.0, b"abcd", 3)
    w.data(msg_id, payload)
    w.data(msg_id, payload + b"\xff\xff\xff")  # the full struct, padding bytes are junk
    rows = rows_of(parse(w.getvalue()), "vehicle")
    assert rows[0].tobytes() == rows[1].tobytes() == payload + bytes(3)


@pytest.mark.parametrize(
    ("type_name", "raw", "expected"),
    [
        (
            "uint32_t",
            [2**32 - 300, 2**32 - 1, 100, 500],
            [2**32 - 300, 2**32 - 1, 2**32 + 100, 2**32 + 500],
        ),
        ("uint16_t", [65000, 100, 60000, 200, 300], [65000, 65636, 125536, 131272, 131372]),
        ("uint8_t", [250, 255, 3, 10], [250000, 255000, 259000, 266000]),  # milliseconds
        ("uint64_t", [5, 3, 2**64 - 1], [5, 3, 2**64 - 1]),
    ],
)
def test_small_timestamps_not_first_are_unrolled(
    type_name: str, raw: list[int], expected: list[int]
) -> None:
    code = {"uint32_t": "I", "uint16_t": "H", "uint8_t": "B", "uint64_t": "Q"}[type_name]
    w = minimal_writer(f"t:float x;{type_name} timestamp;int8_t y;")
    msg_id = w.add_logged_message("t")
    for value in raw:
        w.data(msg_id, struct.pack(f"<f{code}b", 1.0, value, 2))
        w.sync()  # every row in its own batch: the unrolling state carries over
    events = parse(w.getvalue())
    assert timestamps_of(events, "t") == expected
    assert normalise(parse(w.getvalue(), [7])) == normalise(events)


def test_unroll_in_one_batch_matches_unroll_across_batches() -> None:
    w = minimal_writer("t:uint16_t timestamp;")
    msg_id = w.add_logged_message("t")
    for i in range(300):
        w.data(msg_id, struct.pack("<H", (i * 1000) % 65536))
    data = w.getvalue()
    whole = timestamps_of(parse(data), "t")
    assert whole == [i * 1000 for i in range(300)]
    assert timestamps_of(parse(data, [5]), "t") == whole


def test_topic_without_timestamp_warns_and_reads_zero() -> None:
    w = minimal_writer("t:float x;")
    msg_id = w.add_logged_message("t")
    w.data(msg_id, struct.pack("<f", 1.0))
    events = parse(w.getvalue())
    assert any("no integer 'timestamp'" in e.text for e in of_type(events, ParserWarning))
    assert timestamps_of(events, "t") == [0]


def test_remove_logged_message_then_data_is_data_without_subscription() -> None:
    w = minimal_writer()
    msg_id = w.add_logged_message("t")
    w.data(msg_id, struct.pack("<Qi", 1, 1))
    w.remove_logged_message(msg_id)
    w.data(msg_id, struct.pack("<Qi", 2, 2))
    w.sync()
    events = parse(w.getvalue())
    assert of_type(events, Unsubscription) == [Unsubscription(msg_id)]
    assert timestamps_of(events, "t") == [1]
    assert of_type(events, Corruption) == []  # a whole message, not damage
    (orphan,) = of_type(events, DataWithoutSubscription)
    assert orphan.msg_id == msg_id


def test_resubscribed_msg_id_uses_new_format() -> None:
    w = minimal_writer()
    w.format("u:uint64_t timestamp;")
    w.add_logged_message("t", msg_id=3)
    w.remove_logged_message(3)
    w.add_logged_message("u", msg_id=3)
    w.data(3, struct.pack("<Q", 42))
    events = parse(w.getvalue())
    assert timestamps_of(events, "u") == [42]


def test_unknown_message_type_skipped_with_one_warning() -> None:
    w = minimal_writer()
    msg_id = w.add_logged_message("t")
    w.message(ord("Z"), b"future stuff")
    w.data(msg_id, struct.pack("<Qi", 1, 1))
    w.message(ord("Z"), b"again")
    w.data(msg_id, struct.pack("<Qi", 2, 2))
    events = parse(w.getvalue())
    warnings = of_type(events, ParserWarning)
    assert [w.text for w in warnings] == ["skipping messages of unknown type 'Z' (90)"]
    assert timestamps_of(events, "t") == [1, 2]
    assert not of_type(events, Corruption)


def test_unknown_message_type_at_end_of_stream() -> None:
    w = minimal_writer()
    w.add_logged_message("t")
    w.message(ord("z"), b"last")
    events = parse(w.getvalue())
    assert len(of_type(events, ParserWarning)) == 1
    assert not of_type(events, Truncated)


def test_future_version_parsed_with_warning() -> None:
    w = minimal_writer(version=3)
    msg_id = w.add_logged_message("t")
    w.data(msg_id, struct.pack("<Qi", 1, 1))
    events = parse(w.getvalue())
    assert of_type(events, FileHeader) == [FileHeader(3, 0)]
    assert "version 3 is newer" in of_type(events, ParserWarning)[0].text
    assert timestamps_of(events, "t") == [1]


def test_unknown_incompat_bit_is_refused_and_parser_stays_failed() -> None:
    w = ULogWriter()
    w.flag_bits(incompat_flags=b"\x01\x02")
    parser = ULogParser()
    with pytest.raises(ULogFormatError, match="unknown incompat_flags bits 0102") as info:
        parser.receive_bytes(w.getvalue())
    assert info.value.offset == 16
    assert "needs a newer parser" in str(info.value)
    with pytest.raises(ULogFormatError, match="parser failed earlier"):
        parser.receive_bytes(b"more")
    with pytest.raises(ULogFormatError, match="parser failed earlier"):
        parser.close()


def test_incompat_bit_in_first_byte_refused() -> None:
    w = ULogWriter()
    w.flag_bits(incompat_flags=b"\x04")
    with pytest.raises(ULogFormatError, match="unknown incompat_flags"):
        parse(w.getvalue())


def test_flag_bits_longer_than_40_bytes_accepted() -> None:
    w = ULogWriter()
    w.flag_bits(compat_flags=b"\x01", extra=b"future fields")
    w.format("t:uint64_t timestamp;")
    events = parse(w.getvalue())
    assert of_type(events, FlagBits)[0].compat_flags == b"\x01" + bytes(7)
    assert of_type(events, FormatDefined)[0].name == "t"
    assert not of_type(events, ParserWarning)


def test_flag_bits_not_first_is_ignored_with_warning() -> None:
    w = ULogWriter()
    w.format("t:uint64_t timestamp;")
    w.flag_bits(incompat_flags=b"\x80")
    events = parse(w.getvalue())
    assert not of_type(events, FlagBits)
    assert "after the first message" in of_type(events, ParserWarning)[0].text


def test_not_a_ulog_stream_is_refused_at_once() -> None:
    parser = ULogParser()
    with pytest.raises(ULogFormatError, match="not a ULog stream") as info:
        parser.receive_bytes(b"ULog\x02")
    assert info.value.offset == 0


def test_stream_ending_inside_header_is_an_error() -> None:
    parser = ULogParser()
    assert parser.receive_bytes(MAGIC) == []
    with pytest.raises(ULogFormatError, match="inside the 16-byte file header"):
        parser.close()


def test_receive_after_close_is_a_runtime_error() -> None:
    parser = ULogParser()
    parser.receive_bytes(sample_log())
    parser.close()
    with pytest.raises(RuntimeError, match=r"receive_bytes\(\) after close\(\)"):
        parser.receive_bytes(b"x")
    with pytest.raises(RuntimeError, match=r"close\(\) after close\(\)"):
        parser.close()


def test_max_buffered_has_a_floor() -> None:
    with pytest.raises(ValueError, match="max_buffered must be at least"):
        ULogParser(max_buffered=1000)
    assert ULogParser(max_buffered=MIN_MAX_BUFFERED).buffered == 0


def test_truncated_tail_reported_and_rest_kept() -> None:
    data = sample_log()
    cut = data[:-7]
    events = parse(cut)
    (truncated,) = of_type(events, Truncated)
    last_message = 3 + 2 + VEHICLE_SIZE - 3
    assert truncated == Truncated(len(data) - last_message, last_message - 7)
    assert len(rows_of(events, "vehicle")) == 10


def test_properties_track_formats_subscriptions_and_offset() -> None:
    data = sample_log()
    parser = ULogParser()
    parser.receive_bytes(data[:-4])
    assert set(parser.formats) == {"vehicle", "nest", "small"}
    assert set(parser.subscriptions) == {0}
    assert parser.offset + parser.buffered == len(data) - 4
    assert parser.buffered > 0
    parser.receive_bytes(data[-4:])
    assert parser.offset == len(data)
    assert parser.last_timestamp_us == 65680


def test_appended_data_resumes_at_each_offset() -> None:
    w = ULogWriter()
    w.flag_bits(incompat_flags=b"\x01")  # DATA_APPENDED; the offsets are patched in below
    w.format("t:uint64_t timestamp;int32_t x;")
    msg_id = w.add_logged_message("t")
    w.data(msg_id, struct.pack("<Qi", 1, 1))
    w.data(msg_id, struct.pack("<Qi", 2, 2))
    data = bytearray(w.getvalue())
    partial = ULogWriterBytes.data(msg_id, struct.pack("<Qi", 99, 99))[:-5]  # cut by a crash
    data += partial
    first = len(data)
    data += ULogWriterBytes.data(msg_id, struct.pack("<Qi", 3, 3))
    second = len(data)
    data += ULogWriterBytes.data(msg_id, struct.pack("<Qi", 4, 4))
    struct.pack_into("<3Q", data, 16 + 3 + 16, first, second, 0)
    events = parse(bytes(data))
    assert of_type(events, FlagBits)[0].appended_offsets == (first, second, 0)
    assert timestamps_of(events, "t") == [1, 2, 3, 4]
    (corruption,) = of_type(events, Corruption)
    assert (corruption.offset, corruption.skipped) == (first - len(partial), len(partial))
    assert corruption.reason == f"message cut short by data appended at byte {first}"
    for chunks in ([1], [2, 5], [17]):
        assert normalise(parse(bytes(data), chunks)) == normalise(events)


class ULogWriterBytes:
    """Single encoded messages, for splicing logs by hand."""

    @staticmethod
    def data(msg_id: int, payload: bytes) -> bytes:
        w = ULogWriter(header=False)
        w.data(msg_id, payload)
        return w.getvalue()


def test_appended_offsets_ignored_without_the_incompat_flag() -> None:
    w = ULogWriter()
    w.flag_bits(appended_offsets=(20, 0, 0))
    w.format("t:uint64_t timestamp;")
    assert of_type(parse(w.getvalue()), FormatDefined)[0].name == "t"


def test_zero_filled_gap_is_skipped_to_the_next_message() -> None:
    w = minimal_writer()
    msg_id = w.add_logged_message("t")
    w.data(msg_id, struct.pack("<Qi", 1, 1))
    good = w.getvalue()
    tail = ULogWriter(header=False)
    tail.data(msg_id, struct.pack("<Qi", 2, 2))
    tail.data(msg_id, struct.pack("<Qi", 3, 3))
    data = good + bytes(100) + tail.getvalue()
    events = parse(data)
    assert timestamps_of(events, "t") == [1, 2, 3]
    (corruption,) = of_type(events, Corruption)
    assert (corruption.offset, corruption.skipped) == (len(good), 100)
    assert "zero type or size" in corruption.reason
    for chunks in ([1], [3, 250], [64]):
        assert normalise(parse(data, chunks)) == normalise(events)


def test_garbage_resyncs_at_sync_message() -> None:
    w = minimal_writer()
    msg_id = w.add_logged_message("t")
    w.data(msg_id, struct.pack("<Qi", 1, 1))
    good = w.getvalue()
    tail = ULogWriter(header=False)
    tail.sync()
    tail.data(msg_id, struct.pack("<Qi", 2, 2))
    garbage = bytes([0x30, 0x00, 0x7A]) + b"\x99" * 40  # unknown 'z' that runs into junk
    data = good + garbage + tail.getvalue()
    events = parse(data)
    assert timestamps_of(events, "t") == [1, 2]
    (corruption,) = of_type(events, Corruption)
    assert corruption.offset == len(good)
    assert corruption.skipped == len(garbage)
    assert len(of_type(events, Sync)) == 1
    assert normalise(parse(data, [2])) == normalise(events)


def test_sync_magic_with_broken_header_resumes_after_it() -> None:
    w = minimal_writer()
    msg_id = w.add_logged_message("t")
    good = w.getvalue()
    tail = ULogWriter(header=False)
    tail.data(msg_id, struct.pack("<Qi", 2, 2))
    tail.data(msg_id, struct.pack("<Qi", 3, 3))
    data = good + b"\x00\x00\x00" + b"\x01\x01\x01" + SYNC_MAGIC + tail.getvalue()
    events = parse(data)
    assert timestamps_of(events, "t") == [2, 3]
    assert of_type(events, Corruption)[0].skipped == 6 + len(SYNC_MAGIC)


def test_wrong_size_data_message_dropped_alone() -> None:
    w = minimal_writer()
    msg_id = w.add_logged_message("t")
    w.data(msg_id, struct.pack("<Qi", 1, 1))
    bad_at = w.size
    w.data(msg_id, struct.pack("<Qi", 2, 2) + b"xx")
    w.data(msg_id, struct.pack("<Qi", 3, 3))
    events = parse(w.getvalue())
    assert timestamps_of(events, "t") == [1, 3]
    (corruption,) = of_type(events, Corruption)
    assert (corruption.offset, corruption.skipped) == (bad_at, 3 + 2 + 14)
    assert "payload of 14 bytes for 't' (msg_id 0)" in corruption.reason


def test_corruption_at_end_of_stream_reported_on_close() -> None:
    w = minimal_writer()
    msg_id = w.add_logged_message("t")
    w.data(msg_id, struct.pack("<Qi", 1, 1))
    good = w.getvalue()
    parser = ULogParser()
    parser.receive_bytes(good + bytes(50))
    events = parser.close()
    assert events == [
        Corruption(
            len(good), 50, "message header with a zero type or size; no valid message followed"
        )
    ]


@pytest.mark.parametrize(
    ("msg_type", "payload", "reason"),
    [
        (MessageType.DROPOUT, b"\x01\x02\x03", "'O' message of 3 bytes instead of 2"),
        (MessageType.SYNC, b"notmagic", "'S' message without the sync magic"),
        (MessageType.INFO, b"\x50short", "key of 80 bytes in a message of 6"),
        (MessageType.INFO, b"\x05nokey", "key 'nokey' is not 'type name'"),
        (MessageType.PARAMETER, b"\x07float x\x01", "float value of 1 bytes"),
        (MessageType.PARAMETER, b"\x09char[1] x\x41", "parameter value 'A' is not a number"),
        (MessageType.LOGGING, b"6", "'L' message of 1 bytes"),
        (MessageType.LOGGING_TAGGED, b"6", "'C' message of 1 bytes"),
        (MessageType.ADD_LOGGED_MSG, b"\x00", "'A' message of 1 bytes, too short for a topic name"),
        (MessageType.REMOVE_LOGGED_MSG, b"\x00", "'R' message of 1 bytes instead of 2"),
        (MessageType.DATA, b"\x00", "'D' message without a msg_id"),
    ],
)
def test_invalid_known_message_is_corruption_not_an_error(
    msg_type: int, payload: bytes, reason: str
) -> None:
    w = minimal_writer()
    msg_id = w.add_logged_message("t")
    w.data(msg_id, struct.pack("<Qi", 1, 1))
    bad_at = w.size
    w.message(msg_type, payload)
    w.data(msg_id, struct.pack("<Qi", 2, 2))
    events = parse(w.getvalue())
    assert of_type(events, Corruption) == [Corruption(bad_at, 3 + len(payload), reason)]
    assert timestamps_of(events, "t") == [1, 2]


def test_run_of_bad_messages_is_one_corruption() -> None:
    w = minimal_writer()
    msg_id = w.add_logged_message("t")
    bad_at = w.size
    w.message(MessageType.DROPOUT, b"\x01\x02\x03")
    w.message(MessageType.SYNC, b"notmagic")
    w.message(MessageType.LOGGING, b"6")
    good_at = w.size
    w.data(msg_id, struct.pack("<Qi", 1, 1))
    w.data(msg_id, struct.pack("<Qi", 2, 2))
    events = parse(w.getvalue())
    (corruption,) = of_type(events, Corruption)
    assert (corruption.offset, corruption.skipped) == (bad_at, good_at - bad_at)
    assert timestamps_of(events, "t") == [1, 2]


def test_subscription_to_undefined_format_is_ignored_with_warning() -> None:
    w = minimal_writer("t:uint64_t timestamp;missing m;")
    msg_id = w.add_logged_message("t")
    w.data(msg_id, b"\x00" * 12)
    events = parse(w.getvalue())
    (warning,) = of_type(events, ParserWarning)
    assert warning.text == (
        "subscription 't' (msg_id 0) ignored: format 't' uses the undefined type 'missing'"
    )
    assert not of_type(events, Corruption)
    assert not of_type(events, DataRows)


def test_malformed_format_is_ignored_with_warning() -> None:
    w = ULogWriter()
    w.format("no colon here")
    w.format("t:uint64_t timestamp;bad field spec;")
    events = parse(w.getvalue())
    texts = [e.text for e in of_type(events, ParserWarning)]
    assert len(texts) == 2
    assert "has no valid 'name:' prefix" in texts[0]
    assert "malformed field" in texts[1]


def test_rows_are_structured_arrays_with_subscription_dtype() -> None:
    events = parse(sample_log())
    batch = next(e for e in events if isinstance(e, DataRows))
    assert batch.rows.dtype == batch.subscription.dtype
    assert batch.timestamps_us.dtype == np.uint64
    assert len(batch.rows) == len(batch.timestamps_us)


def test_batches_group_rows_per_subscription_within_a_call() -> None:
    events = parse(sample_log(rows=4))
    batches = of_type(events, DataRows)
    assert [(b.subscription.name, len(b.rows)) for b in batches[:2]] == [
        ("vehicle", 4),
        ("small", 4),
    ]


def test_single_bytes_give_the_same_events_as_whole() -> None:
    data = sample_log()
    assert normalise(parse(data, [1])) == normalise(parse(data))


def test_only_ulogstream_errors_escape_on_header_garbage() -> None:
    with pytest.raises(UlogstreamError):
        parse(b"\x00" * 40)


def test_data_rows_equal_the_same_rows_built_again() -> None:
    """Comparing two batches of the same arrays must not ask numpy for an array's truth."""
    batch = of_type(parse(sample_log()), DataRows)[0]
    assert batch == DataRows(batch.subscription, batch.rows, batch.timestamps_us)
