"""The parser's fast paths give the same events as its general ones."""

from __future__ import annotations

import struct

import numpy as np
from support.ulog_builders import normalise, of_type, parse

from ulogstream.ulog.events import Corruption, DataRows, Parameter
from ulogstream.ulog.parser import _PARAMETER_KEYS, ULogParser
from ulogstream.ulog.reader import ULogReader
from ulogstream.ulog.spec import MessageType
from ulogstream.ulog.writer import ULogWriter


def parameter_message(type_name: str, name: str, value: bytes) -> bytes:
    """A 'P' payload with any key type and raw value bytes."""
    key = f"{type_name} {name}".encode()
    return bytes([len(key)]) + key + value


def test_a_definitions_parameter_has_its_name_and_value_and_no_timestamp() -> None:
    w = ULogWriter()
    w.parameter("MC_ROLL_P", 6.5)
    parameter = of_type(parse(w.getvalue()), Parameter)[0]
    assert parameter == Parameter("MC_ROLL_P", 6.5, None)


def test_repeated_parameter_keys_decode_like_the_first() -> None:
    """Known keys take a cached path; its size check still sends bad values to corruption."""
    w = ULogWriter(timestamp_us=500)
    w.format("t:uint64_t timestamp;")
    w.parameter("CACHED_F", 1.5)
    w.parameter("CACHED_I", -7)
    w.message(MessageType.PARAMETER, parameter_message("bool", "CACHED_B", b"\x01"))
    msg_id = w.add_logged_message("t")
    w.data(msg_id, struct.pack("<Q", 900))
    w.parameter("CACHED_F", 2.5)
    w.parameter("CACHED_I", 8)
    w.message(MessageType.PARAMETER, parameter_message("float", "CACHED_F", b"\x00" * 5))
    w.message(MessageType.PARAMETER, parameter_message("bool", "CACHED_B", b"\x01"))
    w.message(MessageType.PARAMETER, parameter_message("int32_t", "CACHED_D", b"\x02" * 4))
    for parser_input in (w.getvalue(), w.getvalue()):  # the second run finds every key known
        events = parse(parser_input)
        assert of_type(events, Parameter) == [
            Parameter("CACHED_F", 1.5, None),
            Parameter("CACHED_I", -7, None),
            Parameter("CACHED_F", 2.5, 900),
            Parameter("CACHED_I", 8, 900),
            Parameter("CACHED_D", 0x02020202, 900),
        ]
        reasons = [c.reason for c in of_type(events, Corruption)]
        assert len(reasons) == 3
        assert "not a number" in reasons[0]
        assert "float value of 5 bytes" in reasons[1]
        assert "not a number" in reasons[2]


def test_large_batches_of_every_timestamp_kind_match_single_bytes() -> None:
    """Many rows per call (joined batches) decode as one row per call does."""
    w = ULogWriter(timestamp_us=10)
    w.format("wide:uint64_t timestamp;float x;uint8_t[4] _padding0;")
    w.format("wrap:uint16_t timestamp;int16_t y;")
    w.format("ms:uint8_t timestamp;uint8_t z;uint8_t[2] _padding0;")
    ids = [w.add_logged_message(name) for name in ("wide", "wrap", "ms")]
    for i in range(200):
        w.data(ids[0], struct.pack("<Qf", 1000 + i * 700, i))
        w.data(ids[1], struct.pack("<Hh", (i * 700) % 65536, -i))
        if i % 3 == 0:
            w.data(ids[2], struct.pack("<BB", (i // 3 * 50) % 256, i % 256))
    data = w.getvalue()
    whole = parse(data)
    assert normalise(parse(data, [1])) == normalise(whole)
    assert normalise(parse(data, [97])) == normalise(whole)
    batches = of_type(whole, DataRows)
    assert [len(b.rows) for b in batches] == [200, 200, 67]
    wide, wrap, ms = batches
    assert wide.rows.dtype.itemsize == 16
    assert wide.timestamps_us.tolist() == [1000 + i * 700 for i in range(200)]
    assert wrap.timestamps_us.tolist() == [i * 700 for i in range(200)]
    assert ms.timestamps_us.tolist() == [k * 50 * 1000 for k in range(67)]
    assert not wide.rows.flags.writeable


def test_parser_last_timestamp_follows_single_row_batches() -> None:
    w = ULogWriter(timestamp_us=10)
    w.format("t:uint32_t a;uint64_t timestamp;")
    msg_id = w.add_logged_message("t")
    parser = ULogParser()
    parser.receive_bytes(w.getvalue())
    for stamp in (50, 40, 70):
        row = ULogWriter(header=False)
        row.data(msg_id, struct.pack("<IQ", 1, stamp))
        batch = of_type(parser.receive_bytes(row.getvalue()), DataRows)[0]
        assert batch.timestamps_us.dtype == np.uint64
        assert batch.timestamps_us.tolist() == [stamp]
    assert parser.last_timestamp_us == 70


def test_whole_file_reader_leaves_the_parameter_key_cache_alone() -> None:
    """ULogReader sees each key once: it decodes like the parser but caches no new key."""
    w = ULogWriter()
    w.parameter("UNSEEN_F", 0.25)
    w.parameter("UNSEEN_I", 3)
    keys = {b"float UNSEEN_F", b"int32_t UNSEEN_I"}
    reader = ULogReader()
    reader.feed(w.getvalue(), final=True)
    assert reader.result().initial_parameters == {"UNSEEN_F": 0.25, "UNSEEN_I": 3}
    assert not keys & _PARAMETER_KEYS.keys()
    parameters = of_type(parse(w.getvalue()), Parameter)  # the incremental parser does
    assert parameters == [Parameter("UNSEEN_F", 0.25, None), Parameter("UNSEEN_I", 3, None)]
    assert keys <= _PARAMETER_KEYS.keys()
