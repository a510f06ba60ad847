"""Hypothesis: any chunking gives the same events; random valid logs round-trip."""

from __future__ import annotations

import struct

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.ulog_builders import normalise, of_type, parse, sample_log

from ulogstream.errors import UlogstreamError
from ulogstream.ulog.dtypes import TIMESTAMP_TYPES
from ulogstream.ulog.events import DataRows, Info, InfoValue, Parameter, Subscription, ULogEvent
from ulogstream.ulog.parser import ULogParser
from ulogstream.ulog.spec import TYPE_SIZES
from ulogstream.ulog.writer import ULogWriter

SAMPLE = sample_log(rows=6)
chunk_sizes = st.lists(st.integers(1, 300), min_size=1, max_size=20)


def parse_or_error(data: bytes, chunks: list[int] | None) -> list[str]:
    """Normalised events (as repr: NaN values compare equal), or the error, for comparisons."""
    try:
        return [repr(item) for item in normalise(parse(data, chunks))]
    except UlogstreamError as err:
        return [type(err).__name__, str(err)]


@given(chunks=chunk_sizes)
def test_any_chunking_gives_identical_events(chunks: list[int]) -> None:
    assert normalise(parse(SAMPLE, chunks)) == normalise(parse(SAMPLE))


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(
    chunks=chunk_sizes,
    at=st.integers(16, len(SAMPLE)),
    cut=st.integers(0, 60),
    junk=st.binary(max_size=60),
)
def test_chunking_invariant_holds_for_corrupt_logs(
    chunks: list[int], at: int, cut: int, junk: bytes
) -> None:
    data = SAMPLE[:at] + junk + SAMPLE[at + cut :]
    assert parse_or_error(data, chunks) == parse_or_error(data, None)


class Field(msgspec.Struct, frozen=True):
    type_name: str
    length: int | None
    name: str

    @property
    def size(self) -> int:
        return TYPE_SIZES[self.type_name] * (self.length or 1)


@st.composite
def topic_formats(draw: st.DrawFn, index: int) -> tuple[str, list[Field], int]:
    """A random format: fields of every basic type, a timestamp somewhere, padding at the end."""
    names = [f"f{i}" for i in range(draw(st.integers(0, 6)))]
    fields = [
        Field(
            draw(st.sampled_from(sorted(TYPE_SIZES))),
            draw(st.one_of(st.none(), st.integers(1, 4))),
            name,
        )
        for name in names
    ]
    stamp = Field(draw(st.sampled_from(sorted(TIMESTAMP_TYPES))), None, "timestamp")
    fields.insert(draw(st.integers(0, len(fields))), stamp)
    padding = draw(st.integers(0, 7))
    return f"topic{index}", fields, padding


def unroll(values: list[int], type_name: str) -> list[int]:
    modulus, scale = TIMESTAMP_TYPES[type_name]
    out, wraps, previous = [], 0, None
    for value in values:
        if modulus and previous is not None and value - previous < -(modulus // 2):
            wraps += 1
        previous = value
        out.append((value + wraps * modulus) * scale)
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_valid_logs_round_trip(data: st.DataObject) -> None:
    topics = [data.draw(topic_formats(i)) for i in range(data.draw(st.integers(1, 3)))]
    w = ULogWriter(timestamp_us=data.draw(st.integers(0, 2**40)))
    w.flag_bits()
    for name, fields, padding in topics:
        spec = "".join(
            f"{f.type_name}{'' if f.length is None else f'[{f.length}]'} {f.name};" for f in fields
        )
        w.format(f"{name}:{spec}" + (f"uint8_t[{padding}] _padding0;" if padding else ""))
    infos: dict[str, tuple[str, InfoValue]] = {
        "i_int": ("int32_t", data.draw(st.integers(-(2**31), 2**31 - 1))),
        "i_str": ("char", data.draw(st.text(max_size=20))),
        "i_bytes": ("uint8_t", data.draw(st.binary(max_size=20))),
        "i_u64": ("uint64_t", data.draw(st.integers(0, 2**64 - 1))),
    }
    for key, (type_name, value) in infos.items():
        w.info(type_name, key, value)
    param = data.draw(st.floats(width=32, allow_nan=False))
    w.parameter("PARAM_F", param)
    msg_ids = [w.add_logged_message(name) for name, _, _ in topics]
    expected: dict[int, list[bytes]] = {m: [] for m in msg_ids}
    stamps: dict[int, list[int]] = {m: [] for m in msg_ids}
    for _ in range(data.draw(st.integers(0, 40))):
        which = data.draw(st.integers(0, len(topics) - 1))
        _, fields, padding = topics[which]
        payload = b""
        for f in fields:
            if f.name == "timestamp":
                value = data.draw(st.integers(0, 2 ** (8 * f.size) - 1))
                stamps[msg_ids[which]].append(value)
                payload += value.to_bytes(f.size, "little")
            else:
                payload += data.draw(st.binary(min_size=f.size, max_size=f.size))
        full = data.draw(st.booleans())  # PX4 omits trailing padding; others may not
        w.data(msg_ids[which], payload + bytes(padding if full else 0))
        expected[msg_ids[which]].append(payload + bytes(padding))
    log = w.getvalue()
    chunks = data.draw(chunk_sizes)
    events = parse(log, chunks)
    assert normalise(events) == normalise(parse(log))
    infos_out = {e.key: e.value for e in of_type(events, Info)}
    assert infos_out == {key: value for key, (_, value) in infos.items()}
    assert of_type(events, Parameter)[0].value == struct.unpack("<f", struct.pack("<f", param))[0]
    subs = {s.msg_id: s for s in of_type(events, Subscription)}
    for (name, fields, _), msg_id in zip(topics, msg_ids, strict=True):
        batches = [e for e in of_type(events, DataRows) if e.subscription.msg_id == msg_id]
        assert b"".join(b.rows.tobytes() for b in batches) == b"".join(expected[msg_id])
        got = [int(t) for b in batches for t in b.timestamps_us]
        stamp_type = next(f.type_name for f in fields if f.name == "timestamp")
        assert got == [v % 2**64 for v in unroll(stamps[msg_id], stamp_type)]
        assert subs[msg_id].name == name


def rows_per_msg_id(events: list[ULogEvent]) -> dict[int, bytes]:
    out: dict[int, bytes] = {}
    for e in events:
        if isinstance(e, DataRows):
            out[e.subscription.msg_id] = out.get(e.subscription.msg_id, b"") + e.rows.tobytes()
    return out


@settings(max_examples=50)
@given(
    chunks=chunk_sizes,
    at=st.integers(16, len(SAMPLE)),
    junk=st.binary(max_size=30),
)
def test_unordered_mode_keeps_rows_and_event_values(
    chunks: list[int], at: int, junk: bytes
) -> None:
    data = SAMPLE[:at] + junk + SAMPLE[at:]
    try:
        ordered = parse(data, chunks)
    except UlogstreamError:
        return
    unordered = parse(data, chunks, ordered=False)
    assert [repr(e) for e in unordered if not isinstance(e, DataRows)] == [
        repr(e) for e in ordered if not isinstance(e, DataRows)
    ]
    assert rows_per_msg_id(unordered) == rows_per_msg_id(ordered)


def feed_all(data: bytes, chunk: int) -> list[ULogEvent]:
    parser = ULogParser()
    out: list[ULogEvent] = []
    for i in range(0, len(data), chunk):
        out += parser.receive_bytes(data[i : i + chunk])
    return out + parser.close()


def test_growing_buffer_h11_style() -> None:
    """Every prefix fed, then the rest: the same events as the whole (h11's growing buffer)."""
    whole = normalise(parse(SAMPLE))
    for split in range(0, len(SAMPLE), 7):
        parser = ULogParser()
        events = parser.receive_bytes(SAMPLE[:split]) + parser.receive_bytes(SAMPLE[split:])
        assert normalise(events + parser.close()) == whole
