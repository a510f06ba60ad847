"""ULog -> ROS 1 bag and MCAP: read back with rosbags and mcap-ros2, compare with our parser."""

from __future__ import annotations

import dataclasses
import itertools
import keyword
import math
import struct
from collections import defaultdict
from typing import TYPE_CHECKING, Protocol

import msgspec
import numpy as np
import pytest
from mcap.reader import make_reader
from mcap_ros2.decoder import DecoderFactory
from numpy.lib.recfunctions import repack_fields
from rosbags.rosbag1 import Reader
from rosbags.typesys import Stores, get_types_from_msg, get_typestore
from support.shared_data import SHARED_ULG_FILES, shared_ulg

from ulogstream.adapters.ulog_file import read
from ulogstream.errors import ExportError, ReadError, ULogFormatError
from ulogstream.export import rosbag
from ulogstream.export.mcap import export_mcap
from ulogstream.export.rosbag import export_rosbag
from ulogstream.export.rosnames import RosVersion, ros_topic, ros_type_name
from ulogstream.export.rostypes import (
    PARAMETER_TYPE_FLOAT,
    PARAMETER_TYPE_INT32,
    WallClock,
    ros_log_level,
    scan_wall_clock,
    text_of,
)
from ulogstream.ulog.events import FormatDefined, LoggedString, Parameter
from ulogstream.ulog.writer import ULogWriter

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    import numpy.typing as npt
    from mcap.records import Channel, Message, Schema

    from ulogstream.export.rostypes import ExportSummary, Progress

GPS_UTC_US = 1_732_200_000_000_000
GPS_FIX_TIMESTAMP_US = 2_050_000


def _outer(i: int) -> bytes:
    inner = struct.pack("<H2xf", i, i / 4) + struct.pack(
        "<H2xf", i + 1, math.nan if i % 5 == 0 else -i
    )
    label = f"lbl{i}".encode().ljust(10, b"\0") if i % 3 else b"full-label"
    single = struct.pack("<H2xf", 7, 0.125)
    return (
        struct.pack("<Q", 2_000_000 + i * 10_000)
        + inner
        + label
        + b"\0"
        + struct.pack("<3h", -i, i, 3)
        + bytes([i % 2])
        + single
        + bytes(3)
    )


def write_feature_log(path: Path) -> None:
    """A log with every format feature the export must carry."""
    writer = ULogWriter(timestamp_us=1_000_000)
    writer.flag_bits()
    writer.info("char", "sys_name", "PX4")
    writer.info("char", "ver_hw", "TEST_HW")
    writer.format("leaf:float x;char c;uint8_t[3] _padding0;")  # nested, defined before its user
    writer.format("early:uint64_t timestamp;leaf l;double d;leaf[2] ls;")
    writer.format(  # nests `inner`, defined after it; trailing padding
        "outer:uint64_t timestamp;inner[2] in;char[10] label;uint8_t _padding0;int16_t[3] v;"
        "bool ok;inner single;uint8_t[3] _padding1;"
    )
    writer.format("inner:uint16_t a;uint8_t[2] _padding0;float b;")
    writer.format(
        "vehicle_gps_position:uint64_t timestamp;uint64_t time_utc_usec;int32_t lat;"
        "uint8_t[4] _padding0;"
    )
    writer.format("sensor_accel:uint64_t timestamp;float[3] xyz;uint8_t c;uint8_t[3] _padding0;")
    writer.parameter("MC_ROLL_P", 6.5)
    writer.parameter("SYS_AUTOSTART", 4001)
    outer = writer.add_logged_message("outer")
    early = writer.add_logged_message("early")
    gps = writer.add_logged_message("vehicle_gps_position")
    accel0 = writer.add_logged_message("sensor_accel", 0)
    accel1 = writer.add_logged_message("sensor_accel", 1)
    writer.logging(ord("6"), 1_900_000, "logger started")
    for i in range(40):
        timestamp = 2_000_000 + i * 10_000
        payload = _outer(i)
        writer.data(outer, payload[:-3] if i % 2 else payload)  # PX4 omits trailing padding
        leaf = struct.pack("<fc3x", i * 1.5, b"k")
        ls = struct.pack("<fc3x", -1.0, b"a") + struct.pack("<fc3x", math.inf, b"\0")
        writer.data(early, struct.pack("<Q", timestamp + 1) + leaf + struct.pack("<d", i / 3) + ls)
        for multi_id, msg_id in ((0, accel0), (1, accel1)):
            xyz = struct.pack("<3f", i, -i, multi_id + 0.5)
            writer.data(msg_id, struct.pack("<Q", timestamp + 2) + xyz + bytes([i]))
        if i % 10 == 5:
            utc = 0 if i == 5 else GPS_UTC_US + (timestamp + 3 - GPS_FIX_TIMESTAMP_US)
            writer.data(gps, struct.pack("<QQi4x", timestamp + 3, utc, 473_977_418))
        if i == 20:
            writer.parameter("MC_ROLL_P", 7.25)
            writer.logging_tagged(ord("4"), 7, timestamp + 4, "tagged warning")
        if i == 30:
            writer.logging(ord("3"), timestamp + 5, "an error")
    path.write_bytes(writer.getvalue())


class Expected(msgspec.Struct):
    """What our reader reads from a log: the values the export must carry."""

    header_timestamp_us: int
    topics: dict[tuple[str, int], tuple[npt.NDArray[np.void], npt.NDArray[np.uint64]]]
    strings: list[LoggedString]
    parameters: list[Parameter]
    formats: dict[str, FormatDefined]


def expected_of(path: Path) -> Expected:
    data = read(path)
    initial = [Parameter(name, value, None) for name, value in data.initial_parameters.items()]
    return Expected(
        header_timestamp_us=data.header.timestamp_us,
        topics={key: (t.data, t.timestamps_us) for key, t in data.topics.items() if len(t.data)},
        strings=data.logged_messages,
        parameters=initial + data.changed_parameters,
        formats=data.formats,
    )


def flatten(message: object, prefix: str = "") -> Iterator[tuple[str, object]]:
    """A decoded ROS message as pyulog's flat ``(name, value)`` pairs (``a[i].b``)."""
    if dataclasses.is_dataclass(message):
        names = [f.name for f in dataclasses.fields(message) if not f.name.startswith("__")]
    else:  # mcap_ros2's decoded messages
        names = list(type(message).__slots__)  # type: ignore[attr-defined]
    for name in names:
        value = getattr(message, name)
        plain = name[:-1] if name.endswith("_") and keyword.iskeyword(name[:-1]) else name
        key = prefix + plain
        if isinstance(value, bytes):  # mcap_ros2 decodes uint8[N] as bytes
            for i, item in enumerate(value):
                yield f"{key}[{i}]", item
        elif isinstance(value, np.ndarray | list | tuple):
            for i, item in enumerate(value):
                if isinstance(item, int | float | bool | np.generic):
                    yield f"{key}[{i}]", item
                else:
                    yield from flatten(item, f"{key}[{i}].")
        elif isinstance(value, int | float | bool | str | np.generic):
            yield key, value
        else:
            yield from flatten(value, f"{key}.")


def same(expected: object, actual: object) -> bool:
    if isinstance(actual, str):
        assert isinstance(expected, bytes)
        return text_of(expected) == actual
    if isinstance(expected, bytes):  # a lone ``char`` (numpy S1) exported as uint8
        return expected.ljust(1, b"\0")[0] == actual
    if isinstance(expected, float) and math.isnan(expected):
        return isinstance(actual, float | np.floating) and math.isnan(actual)
    return expected == actual


def assert_rows_equal(
    key: tuple[str, int],
    rows: npt.NDArray[np.void],
    messages: list[object],
) -> None:
    assert len(messages) == len(rows), key
    names = rows.dtype.names
    assert names is not None
    for index, (row, message) in enumerate(zip(rows.tolist(), messages, strict=True)):
        actual = dict(flatten(message))
        assert sorted(actual) == sorted(names), key
        for name, value in zip(names, row, strict=True):
            assert same(value, actual[name]), (key, index, name, value, actual[name])


class ReadBack(msgspec.Struct):
    """What a bag or MCAP file holds, per topic: messages and times in order."""

    types: dict[str, str] = msgspec.field(default_factory=dict)
    messages: dict[str, list[object]] = msgspec.field(default_factory=lambda: defaultdict(list))
    times: dict[str, list[int]] = msgspec.field(default_factory=lambda: defaultdict(list))
    raw: dict[str, list[bytes]] = msgspec.field(default_factory=lambda: defaultdict(list))
    """Each message in ROS 1 wire form (bags as stored, MCAP's CDR converted by rosbags)."""


def read_bag(path: Path, *, decode: bool = True) -> ReadBack:
    back = ReadBack()
    with Reader(path) as reader:
        store = get_typestore(Stores.EMPTY)
        for connection in reader.connections:
            back.types[connection.topic] = connection.msgtype
            # the stored definitions must parse, and give the stored md5sum (rosbags' rules)
            assert connection.msgdef.data
            own = get_typestore(Stores.EMPTY)
            types = get_types_from_msg(connection.msgdef.data, connection.msgtype)
            own.register(types)
            assert own.generate_msgdef(connection.msgtype)[1] == connection.digest
            store.register(types)
        # one connection at a time: the time-ordered merge of all of them thrashes chunks
        messages = itertools.chain.from_iterable(
            reader.messages(connections=[connection]) for connection in reader.connections
        )
        for connection, time_ns, raw in messages:
            if decode or connection.topic in {"/rosout", "/parameters"}:
                message = store.deserialize_ros1(raw, connection.msgtype)
                back.messages[connection.topic].append(message)
            back.raw[connection.topic].append(raw)
            back.times[connection.topic].append(time_ns)
    return back


def read_mcap(path: Path, *, decoder: str = "mcap_ros2") -> ReadBack:
    """Read an MCAP file back with mcap-ros2's decoder (Foxglove's rules), rosbags' or none."""
    back = ReadBack()
    store = get_typestore(Stores.EMPTY)
    with path.open("rb") as stream:
        reader = make_reader(stream, decoder_factories=[DecoderFactory()])
        assert reader.get_header().profile == "ros2"
        if decoder == "mcap_ros2":
            records: Iterator[tuple[Schema | None, Channel, Message, object]] = (
                reader.iter_decoded_messages(log_time_order=False)
            )
        else:
            records = (
                (schema, channel, message, None)
                for schema, channel, message in reader.iter_messages(log_time_order=False)
            )
        for schema, channel, message, given in records:
            assert schema is not None
            assert schema.encoding == "ros2msg"
            assert channel.message_encoding == "cdr"
            if schema.name not in store.fielddefs:
                # every schema must parse as a valid ROS 2 definition
                store.register(get_types_from_msg(schema.data.decode(), schema.name))
            back.types[channel.topic] = schema.name
            decoded = given
            if decoder == "rosbags" or channel.topic in {"/rosout", "/parameters"}:
                decoded = store.deserialize_cdr(message.data, schema.name)
            if decoded is not None:
                back.messages[channel.topic].append(decoded)
            back.raw[channel.topic].append(bytes(store.cdr_to_ros1(message.data, schema.name)))
            back.times[channel.topic].append(message.log_time)
            assert message.publish_time == message.log_time
    return back


def string_fields(name: str, formats: dict[str, FormatDefined], prefix: str = "") -> set[str]:
    """The flat names of ``char[N]`` fields (ROS strings) of format ``name``."""
    names: set[str] = set()
    for f in formats[name].fields:
        if f.type_name == "char" and f.array_length is not None:
            names.add(prefix + f.name)
        elif f.type_name in formats:
            subs = [""] if f.array_length is None else [f"[{i}]" for i in range(f.array_length)]
            for sub in subs:
                names |= string_fields(f.type_name, formats, f"{prefix}{f.name}{sub}.")
    return names


def ros1_wire(rows: npt.NDArray[np.void], strings: set[str]) -> list[bytes]:
    """Rows in ROS 1 wire form, by the ROS 1 rules alone.

    Fields little-endian in order, no padding, fixed arrays and nested messages inline,
    bools as 0 or 1, strings as uint32 length + UTF-8.
    """
    packed = repack_fields(rows)
    for name, spec in (packed.dtype.fields or {}).items():
        if spec[0].kind == "b":
            packed[name] = packed[name].view(np.uint8) != 0
    size = packed.dtype.itemsize
    if not strings:
        data = packed.tobytes()
        return [data[i : i + size] for i in range(0, len(data), size)]
    names = rows.dtype.names
    assert names is not None
    out = []
    for row in packed:
        parts = []
        for name in names:
            value = row[name]
            if name in strings:
                text = text_of(value.tobytes()).encode()
                parts.append(struct.pack("<I", len(text)) + text)
            else:
                parts.append(np.asarray(value).tobytes())
        out.append(b"".join(parts))
    return out


def check_export(
    src: Path, back: ReadBack, version: RosVersion, clock: WallClock, *, by_bytes: bool = False
) -> None:
    """Every sample, log string and parameter of ``src`` is in ``back``, in order, on time.

    Samples are compared as decoded values, or (``by_bytes``, faster) as ROS 1 wire bytes.
    """
    expected = expected_of(src)
    data_topics = {
        ros_topic(name, multi_id): (name, multi_id) for name, multi_id in expected.topics
    }
    for topic, key in data_topics.items():
        rows, timestamps = expected.topics[key]
        # both formats are written in time order, ties in log order (Foxglove needs it)
        order = np.argsort(timestamps, kind="stable")
        rows, timestamps = rows[order], timestamps[order]
        assert back.types[topic] == ros_type_name(key[0]), topic
        if by_bytes:
            wire = ros1_wire(rows, string_fields(key[0], expected.formats))
            assert back.raw[topic] == wire, topic
        else:
            assert_rows_equal(key, rows, back.messages[topic])
        assert back.times[topic] == [clock.to_ns(int(t)) for t in timestamps], topic
    assert set(back.messages) - set(data_topics) <= {"/rosout", "/parameters"}
    strings = expected.strings
    parameters = expected.parameters
    start = expected.header_timestamp_us
    strings = sorted(strings, key=lambda s: clock.to_ns(s.timestamp_us))
    parameters = sorted(
        parameters,
        key=lambda p: clock.to_ns(start if p.timestamp_us is None else p.timestamp_us),
    )
    logs = back.messages.get("/rosout", [])
    assert [m.msg for m in logs] == [s.text for s in strings]  # type: ignore[attr-defined]
    levels = [ros_log_level(s.level, version) for s in strings]
    assert [m.level for m in logs] == levels  # type: ignore[attr-defined]
    assert back.times.get("/rosout", []) == [clock.to_ns(s.timestamp_us) for s in strings]
    params = back.messages.get("/parameters", [])
    assert [(p.name, p.value) for p in params] == [  # type: ignore[attr-defined]
        (p.name, float(p.value)) for p in parameters
    ]
    kinds = [
        PARAMETER_TYPE_INT32 if isinstance(p.value, int) else PARAMETER_TYPE_FLOAT
        for p in parameters
    ]
    assert [p.type for p in params] == kinds  # type: ignore[attr-defined]
    times = [clock.to_ns(start if p.timestamp_us is None else p.timestamp_us) for p in parameters]
    assert back.times.get("/parameters", []) == times


class Exporter(Protocol):
    def __call__(
        self,
        src: Path,
        dst: Path,
        *,
        progress: Progress | None = None,
        epoch_offset_us: int | None = None,
        chunk_size: int = ...,
    ) -> ExportSummary: ...


EXPORTERS: dict[str, Exporter] = {"rosbag": export_rosbag, "mcap": export_mcap}
READERS: dict[str, Callable[[Path], ReadBack]] = {"rosbag": read_bag, "mcap": read_mcap}
FAST_READERS: dict[str, Callable[[Path], ReadBack]] = {
    "rosbag": lambda path: read_bag(path, decode=False),
    "mcap": lambda path: read_mcap(path, decoder="none"),
}
VERSIONS = {"rosbag": RosVersion.ROS1, "mcap": RosVersion.ROS2}


@pytest.fixture(name="feature_log")
def fixture_feature_log(tmp_path: Path) -> Path:
    path = tmp_path / "features.ulg"
    write_feature_log(path)
    return path


@pytest.mark.parametrize("kind", ["rosbag", "mcap"])
def test_feature_log_round_trips(kind: str, feature_log: Path, tmp_path: Path) -> None:
    dst = tmp_path / f"out.{kind}"
    calls: list[tuple[int, int]] = []
    summary = EXPORTERS[kind](
        feature_log, dst, progress=lambda done, total: calls.append((done, total)), chunk_size=512
    )
    size = feature_log.stat().st_size
    assert calls[-1] == (size, size)
    assert len(calls) > 2
    assert all(a[0] <= b[0] for a, b in itertools.pairwise(calls))
    clock = WallClock(GPS_UTC_US - GPS_FIX_TIMESTAMP_US, "gps")
    assert summary.clock == clock
    assert summary.topics == 5
    assert summary.data_messages == 40 * 4 + 4
    assert summary.log_messages == 3
    assert summary.parameter_messages == 3
    assert summary.problem_count == 0
    back = READERS[kind](dst)
    check_export(feature_log, back, VERSIONS[kind], clock)
    assert set(back.types) == {
        "/outer",
        "/early",
        "/vehicle_gps_position",
        "/sensor_accel",
        "/sensor_accel_1",
        "/rosout",
        "/parameters",
    }
    # spot checks on top of check_export: a full char[10] string, the initial parameters' stamp
    outer = back.messages["/outer"][3]
    assert outer.label == "full-label"  # type: ignore[attr-defined]
    assert back.times["/parameters"][0] == clock.to_ns(1_000_000)


def test_bag_connections_carry_types_definitions_and_md5sums(
    feature_log: Path, tmp_path: Path
) -> None:
    dst = tmp_path / "out.bag"
    export_rosbag(feature_log, dst)
    with Reader(dst) as reader:
        connections = {c.topic: c for c in reader.connections}
        outer = connections["/outer"]
        assert outer.msgtype == "px4_ulog/msg/Outer"
        assert outer.msgdef.data.startswith(
            "uint64 timestamp\npx4_ulog/Inner[2] in\nstring label\nint16[3] v\nbool ok\n"
            "px4_ulog/Inner single\n"
        )
        assert "MSG: px4_ulog/Inner\nuint16 a\nfloat32 b\n" in outer.msgdef.data
        assert connections["/rosout"].msgtype == "rosgraph_msgs/msg/Log"
        assert connections["/rosout"].digest == "acffd30cd6b6de30f120938c17c593fb"  # ROS 1's
        assert connections["/parameters"].msgtype == "px4_ulog/msg/Parameter"
        assert reader.message_count == 40 * 4 + 4 + 3 + 3
    raw = dst.read_bytes()  # on disk, types carry ROS 1 names (no "/msg/")
    assert b"type=px4_ulog/Outer" in raw
    assert b"type=rosgraph_msgs/Log" in raw
    assert b"/msg/" not in raw


def test_bag_of_many_chunks_keeps_its_counts_and_index(
    feature_log: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the writer forgets each written chunk's per-message index (bounded memory); the chunk
    # infos written at close must still count every message of every connection
    monkeypatch.setattr(rosbag, "BAG_CHUNK_SIZE", 1024)
    dst = tmp_path / "chunky.bag"
    export_rosbag(feature_log, dst)
    with Reader(dst) as reader:
        assert len(reader.chunk_infos) > 5
        assert reader.message_count == 40 * 4 + 4 + 3 + 3
        for connection in reader.connections:
            count = sum(1 for _ in reader.messages(connections=[connection]))
            assert reader.topics[connection.topic].msgcount == count
    check_export(feature_log, read_bag(dst), RosVersion.ROS1, scan_wall_clock(feature_log))


def test_mcap_holds_info_metadata_and_ros2_log_type(feature_log: Path, tmp_path: Path) -> None:
    dst = tmp_path / "out.mcap"
    export_mcap(feature_log, dst)
    with dst.open("rb") as stream:
        reader = make_reader(stream)
        metadata = {m.name: m.metadata for m in reader.iter_metadata()}
        summary = reader.get_summary()
    assert metadata["ulog_info"] == {"sys_name": "PX4", "ver_hw": "TEST_HW"}
    assert summary is not None
    schemas = {s.name for s in summary.schemas.values()}
    assert {"rcl_interfaces/msg/Log", "px4_ulog/msg/Outer", "px4_ulog/msg/Parameter"} <= schemas
    assert summary.statistics is not None
    assert summary.statistics.message_count == 40 * 4 + 4 + 3 + 3


@pytest.mark.parametrize("kind", ["rosbag", "mcap"])
def test_given_epoch_offset_skips_the_gps_rule(
    kind: str, feature_log: Path, tmp_path: Path
) -> None:
    summary = EXPORTERS[kind](feature_log, tmp_path / "out", epoch_offset_us=5)
    assert summary.clock == WallClock(5, "given")


def test_log_without_gps_keeps_boot_time(tmp_path: Path) -> None:
    writer = ULogWriter(timestamp_us=10)
    writer.format("t:uint64_t timestamp;float x;")
    msg_id = writer.add_logged_message("t")
    writer.data(msg_id, struct.pack("<Qf", 1_500, 1.0))
    src = tmp_path / "plain.ulg"
    src.write_bytes(writer.getvalue())
    assert scan_wall_clock(src) == WallClock(0, "boot")
    dst = tmp_path / "plain.bag"
    export_rosbag(src, dst)
    with Reader(dst) as reader:
        assert [t for _, t, _ in reader.messages()] == [1_500_000]


@pytest.mark.parametrize("kind", ["rosbag", "mcap"])
def test_topic_ros_cannot_express_is_skipped_and_reported(kind: str, tmp_path: Path) -> None:
    writer = ULogWriter()
    writer.format("odd:uint64_t timestamp;float _x;")  # ROS field names start with a letter
    writer.format("fine:uint64_t timestamp;float x;")
    odd, fine = writer.add_logged_message("odd"), writer.add_logged_message("fine")
    for i in range(3):
        writer.data(odd, struct.pack("<Qf", i, 1.0))
        writer.data(fine, struct.pack("<Qf", i, 2.0))
    src = tmp_path / "odd.ulg"
    src.write_bytes(writer.getvalue())
    summary = EXPORTERS[kind](src, tmp_path / "out")
    assert summary.topics == 1
    assert summary.data_messages == 3
    assert summary.problem_count == 1
    assert "topic odd instance 0 skipped" in summary.problems[0]
    assert "'_x' of ULog format 'odd' is not a valid ROS field name" in summary.problems[0]
    assert set(READERS[kind](tmp_path / "out").messages) == {"/fine"}


@pytest.mark.slow
@pytest.mark.shared
@pytest.mark.parametrize("kind", ["rosbag", "mcap"])
def test_corruption_in_a_sample_log_is_reported(kind: str, tmp_path: Path) -> None:
    src = shared_ulg("px4-ulog-rs__corrupt_unregistered_msg_id.ulg")
    summary = EXPORTERS[kind](src, tmp_path / "out")
    assert summary.problem_count >= 1
    assert any("corrupt" in problem for problem in summary.problems)


@pytest.mark.parametrize("kind", ["rosbag", "mcap"])
def test_instance_names_that_collide_get_a_unique_topic(kind: str, tmp_path: Path) -> None:
    writer = ULogWriter()
    writer.format("foo:uint64_t timestamp;float x;")
    writer.format("foo_1:uint64_t timestamp;int8_t y;")
    writer.format("rosout:uint64_t timestamp;int8_t y;")
    ids = [
        writer.add_logged_message("foo", 1),
        writer.add_logged_message("foo_1", 0),
        writer.add_logged_message("rosout", 0),
    ]
    writer.data(ids[0], struct.pack("<Qf", 1, 1.0))
    writer.data(ids[1], struct.pack("<Qb", 2, -1))
    writer.data(ids[2], struct.pack("<Qb", 3, -2))
    src = tmp_path / "names.ulg"
    src.write_bytes(writer.getvalue())
    summary = EXPORTERS[kind](src, tmp_path / "out")
    back = READERS[kind](tmp_path / "out")
    assert back.types == {
        "/foo_1": "px4_ulog/msg/Foo",
        "/foo_1/instance_0": "px4_ulog/msg/Foo1",
        "/rosout/instance_0": "px4_ulog/msg/Rosout",
    }
    assert summary.problem_count == 2
    assert "/foo_1 is another topic instance" in summary.problems[0]


@pytest.mark.parametrize("kind", ["rosbag", "mcap"])
def test_corrupt_timestamps_are_clamped_to_valid_ros_times(kind: str, tmp_path: Path) -> None:
    writer = ULogWriter()
    writer.format("t:uint64_t timestamp;float x;")
    msg_id = writer.add_logged_message("t")
    for timestamp in (5, 2**64 - 1, 2**62, 3 * 10**15):
        writer.data(msg_id, struct.pack("<Qf", timestamp, 1.0))
    src = tmp_path / "stamps.ulg"
    src.write_bytes(writer.getvalue())
    EXPORTERS[kind](src, tmp_path / "out", epoch_offset_us=0)
    latest = (2**31 - 1) * 10**9
    assert sorted(READERS[kind](tmp_path / "out").times["/t"]) == [0, 5_000, latest, latest]


@pytest.mark.parametrize("kind", ["rosbag", "mcap"])
def test_existing_output_is_refused_and_kept(kind: str, feature_log: Path, tmp_path: Path) -> None:
    dst = tmp_path / "taken"
    dst.write_bytes(b"precious")
    with pytest.raises(ExportError, match="already exists") as raised:
        EXPORTERS[kind](feature_log, dst)
    assert raised.value.path == dst
    assert dst.read_bytes() == b"precious"


@pytest.mark.parametrize("kind", ["rosbag", "mcap"])
def test_missing_input_is_reported(kind: str, tmp_path: Path) -> None:
    with pytest.raises(ReadError, match="cannot read ULog file") as raised:
        EXPORTERS[kind](tmp_path / "absent.ulg", tmp_path / "out")
    assert raised.value.path == tmp_path / "absent.ulg"
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("kind", ["rosbag", "mcap"])
def test_non_ulog_input_is_reported_and_leaves_no_output(kind: str, tmp_path: Path) -> None:
    src = tmp_path / "bad.ulg"
    src.write_bytes(b"this is not a ULog file at all" * 10)
    with pytest.raises(ULogFormatError, match=r"bad\.ulg is not a readable ULog file"):
        EXPORTERS[kind](src, tmp_path / "out", epoch_offset_us=0)
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
@pytest.mark.shared
@pytest.mark.parametrize("src", SHARED_ULG_FILES, ids=[path.stem for path in SHARED_ULG_FILES])
@pytest.mark.parametrize("kind", ["rosbag", "mcap"])
def test_sample_log_round_trips(kind: str, src: Path, tmp_path: Path) -> None:
    dst = tmp_path / f"{src.stem}.{kind}"
    summary = EXPORTERS[kind](src, dst)
    check_export(src, FAST_READERS[kind](dst), VERSIONS[kind], summary.clock, by_bytes=True)


@pytest.mark.slow
@pytest.mark.shared
def test_mcap_of_a_flight_decodes_with_mcap_ros2(tmp_path: Path) -> None:
    src = shared_ulg("px4-ulog-rs__esc_status_log.ulg")  # nested esc_report[8], multi_id 2
    dst = tmp_path / "esc.mcap"
    summary = export_mcap(src, dst)
    check_export(src, read_mcap(dst), RosVersion.ROS2, summary.clock)


@pytest.mark.shared
@pytest.mark.parametrize(
    ("name", "utc_us", "timestamp_us"),
    [  # the first vehicle_gps_position sample with a fix, as pyulog reads it
        ("px4-ulog-rs__esc_status_log.ulg", 1_557_756_559_600_179, 5_080_891_710),
        ("pyulog__sample_log_small.ulg", 1_618_986_658_600_345, 20_471_648),
    ],
)
def test_sample_logs_are_placed_at_their_gps_time(
    name: str, utc_us: int, timestamp_us: int
) -> None:
    assert scan_wall_clock(shared_ulg(name)) == WallClock(utc_us - timestamp_us, "gps")


@pytest.mark.shared
def test_sample_log_without_gps_fix_stays_in_boot_time() -> None:
    assert scan_wall_clock(shared_ulg("pyulog__sample_2016.ulg")) == WallClock(0, "boot")


def test_topics_subscribed_without_data_get_no_channel(tmp_path: Path) -> None:
    writer = ULogWriter(timestamp_us=1_000)
    writer.flag_bits()
    writer.format("busy:uint64_t timestamp;float x;")
    writer.format("idle:uint64_t timestamp;float y;")
    busy = writer.add_logged_message("busy")
    writer.add_logged_message("idle")  # subscribed, never logged
    for row in range(5):
        writer.data(busy, struct.pack("<Qf", 2_000 + row * 1_000, row / 2))
    log = tmp_path / "log.ulg"
    log.write_bytes(writer.getvalue())
    export_rosbag(log, tmp_path / "log.bag")
    export_mcap(log, tmp_path / "log.mcap")
    with Reader(tmp_path / "log.bag") as reader:
        bag_topics = {connection.topic for connection in reader.connections}
    with (tmp_path / "log.mcap").open("rb") as stream:
        summary = make_reader(stream).get_summary()
        assert summary is not None
        mcap_topics = {channel.topic for channel in summary.channels.values()}
    assert "/busy" in bag_topics
    assert "/busy" in mcap_topics
    assert not any("idle" in topic for topic in bag_topics | mcap_topics)
