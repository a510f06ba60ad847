"""ULog formats -> ROS types, rows -> message objects, the wall-clock rule, log levels."""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

import numpy as np
import pytest
from rosbags.typesys import get_types_from_msg

from ulogstream.errors import ExportError
from ulogstream.export.rosnames import (
    RosVersion,
    nested_closure,
    ros2_field_name,
    ros_definition,
    ros_topic,
    ros_type_name,
)
from ulogstream.export.rostypes import (
    PARAMETER_TYPE,
    RowConverter,
    WallClock,
    new_typestore,
    register_format,
    ros_log_level,
    wall_clock,
)
from ulogstream.ulog.dtypes import compile_format, parse_format

if TYPE_CHECKING:
    from ulogstream.ulog.events import FormatDefined


def formats_of(*texts: str) -> dict[str, FormatDefined]:
    parsed = [parse_format(text) for text in texts]
    return {fmt.name: fmt for fmt in parsed}


def test_type_names_are_camel_case_in_the_px4_ulog_package() -> None:
    assert ros_type_name("vehicle_gps_position") == "px4_ulog/msg/VehicleGpsPosition"
    assert ros_type_name("actuator_controls_0") == "px4_ulog/msg/ActuatorControls0"
    assert ros_type_name("esc_report") == "px4_ulog/msg/EscReport"


def test_format_names_that_cannot_be_ros_names_are_refused() -> None:
    with pytest.raises(ExportError, match="cannot be turned into a ROS message type"):
        ros_type_name("9lives")


def test_topic_instance_zero_keeps_the_bare_name() -> None:
    assert ros_topic("sensor_accel", 0) == "/sensor_accel"
    assert ros_topic("sensor_accel", 2) == "/sensor_accel_2"


def test_definition_drops_padding_and_maps_types() -> None:
    formats = formats_of(
        "esc_status:uint64_t timestamp;char[10] name;bool armed;char c;uint8_t[2] _padding0;"
        "esc_report[8] esc;int16_t[3] v;double d;uint8_t[5] _padding1;",
        "esc_report:uint64_t timestamp;float esc_voltage;uint8_t[4] _padding0;",
    )
    assert ros_definition(formats["esc_status"]) == (
        "uint64 timestamp\n"
        "string name\n"
        "bool armed\n"
        "uint8 c\n"
        "px4_ulog/EscReport[8] esc\n"
        "int16[3] v\n"
        "float64 d\n"
    )
    assert ros_definition(formats["esc_report"]) == "uint64 timestamp\nfloat32 esc_voltage\n"
    for name, fmt in formats.items():
        parsed = get_types_from_msg(ros_definition(fmt), ros_type_name(name))
        assert ros_type_name(name) in parsed


def test_closure_lists_dependencies_first_and_reports_missing_and_cycles() -> None:
    formats = formats_of("a:uint64_t timestamp;b[2] bs;c one;", "b:c x;", "c:float y;")
    assert nested_closure("a", formats) == ["c", "b", "a"]
    with pytest.raises(ExportError, match="'d' \\(nested in 'x'\\) is not defined"):
        nested_closure("x", formats_of("x:d inner;"))
    with pytest.raises(ExportError, match="'p' contains itself"):
        nested_closure("p", formats_of("p:q inner;", "q:p outer;"))


def test_md5sums_equal_those_of_the_standard_ros_types_with_the_same_layout() -> None:
    # Known md5sums of ROS 1 messages: the hash covers types and names, not package names,
    # and nested types enter by their own md5, so equal layouts must give equal sums.
    formats = formats_of(
        "color:float r;float g;float b;float a;",
        "point:double x;double y;double z;",
        "quaternion:double x;double y;double z;double w;",
        "pose:point position;quaternion orientation;",
    )
    store = new_typestore(RosVersion.ROS1)
    expected = {
        "color": "a29a96539573343b1310c73607334b00",  # std_msgs/ColorRGBA
        "point": "4a842b65f413084dc2b10fb484ea7f17",  # geometry_msgs/Point
        "quaternion": "a779879fadf0160734f906b8c19c7004",  # geometry_msgs/Quaternion
        "pose": "e45d45a5a1ce597b249e23fb30fc871f",  # geometry_msgs/Pose
    }
    for name, md5sum in expected.items():
        typename = register_format(store, name, formats)
        assert store.generate_msgdef(typename)[1] == md5sum


def test_full_definition_holds_nested_types_once() -> None:
    formats = formats_of("outer:inner a;inner[2] b;", "inner:float x;")
    store = new_typestore(RosVersion.ROS1)
    definition, _ = store.generate_msgdef(register_format(store, "outer", formats))
    assert definition == (
        "px4_ulog/Inner a\npx4_ulog/Inner[2] b\n" + "=" * 80 + "\nMSG: px4_ulog/Inner\nfloat32 x\n"
    )


def pack_outer(timestamp: int, values: tuple[int, float, int, float], text: bytes) -> bytes:
    a0, b0, a1, b1 = values
    return (
        struct.pack("<Q", timestamp)
        + struct.pack("<H2xf", a0, b0)
        + struct.pack("<H2xf", a1, b1)
        + text.ljust(3, b"\0")
        + b"\0"
        + struct.pack("<2h", -1, 7)
        + bytes(3)
    )


@pytest.mark.parametrize("version", list(RosVersion))
def test_rows_become_nested_message_objects_that_serialize(version: RosVersion) -> None:
    formats = formats_of(
        "outer:uint64_t timestamp;inner[2] in;char[3] s;uint8_t _padding0;int16_t[2] v;"
        "uint8_t[3] _padding1;",
        "inner:uint16_t a;uint8_t[2] _padding0;float b;",
    )
    flat = compile_format("outer", formats).dtype
    payload = pack_outer(5, (1, 0.5, 2, float("nan")), b"ab") + pack_outer(
        6, (3, 1.5, 4, 2.0), b"xyz"
    )
    rows = np.frombuffer(payload, dtype=flat)
    store = new_typestore(version)
    converter = RowConverter(store, "outer", formats, itemsize=flat.itemsize)
    messages = converter.messages(rows)
    assert len(messages) == 2
    first, second = messages
    assert first.timestamp == 5  # type: ignore[attr-defined]
    assert first.s == "ab"  # type: ignore[attr-defined]
    assert second.s == "xyz"  # type: ignore[attr-defined]
    assert [i.a for i in first.in_] == [1, 2]  # type: ignore[attr-defined]
    assert np.isnan(first.in_[1].b)  # type: ignore[attr-defined]
    assert first.v.tolist() == [-1, 7]  # type: ignore[attr-defined]
    serialize = store.serialize_ros1 if version is RosVersion.ROS1 else store.serialize_cdr
    deserialize = store.deserialize_ros1 if version is RosVersion.ROS1 else store.deserialize_cdr
    back = deserialize(serialize(second, converter.typename), converter.typename)
    assert back.in_[0].b == 1.5  # type: ignore[attr-defined]
    assert back.v.tolist() == [-1, 7]  # type: ignore[attr-defined]


def test_row_size_that_disagrees_with_the_format_is_refused() -> None:
    formats = formats_of("t:uint64_t timestamp;float x;")
    with pytest.raises(ExportError, match="rows of ULog format 't' are 16 bytes"):
        RowConverter(new_typestore(RosVersion.ROS1), "t", formats, itemsize=16)


def test_registering_a_format_twice_reuses_the_type() -> None:
    formats = formats_of("t:uint64_t timestamp;float x;")
    store = new_typestore(RosVersion.ROS2)
    assert register_format(store, "t", formats) == register_format(store, "t", formats)
    assert PARAMETER_TYPE in store.fielddefs


def test_strings_are_cut_at_the_first_nul_and_bad_utf8_is_replaced() -> None:
    formats = formats_of("t:uint64_t timestamp;char[6] s;")
    flat = compile_format("t", formats).dtype
    rows = np.frombuffer(
        struct.pack("<Q6s", 1, b"ab\0cd\xff") + struct.pack("<Q6s", 2, b"\xffz"), flat
    )
    converter = RowConverter(new_typestore(RosVersion.ROS1), "t", formats, itemsize=flat.itemsize)
    assert [m.s for m in converter.messages(rows)] == ["ab", "\ufffdz"]  # type: ignore[attr-defined]


def test_wall_clock_comes_from_the_gps_fix_else_boot_time() -> None:
    clock = wall_clock((1_700_000_000_000_000, 5_000_000))
    assert clock == WallClock(1_700_000_000_000_000 - 5_000_000, "gps")
    assert clock.to_ns(5_000_001) == 1_700_000_000_000_001_000
    boot = wall_clock(None)
    assert boot == WallClock(0, "boot")
    assert boot.to_ns(42) == 42_000


def test_wall_clock_clamps_stamps_to_what_ros_time_can_hold() -> None:
    assert WallClock(-100, "given").to_ns(42) == 0
    assert WallClock(0, "boot").to_ns(2**63) == (2**31 - 1) * 10**9


@pytest.mark.parametrize(
    ("level", "ros1", "ros2"),
    [
        ("0", 16, 50),
        ("2", 16, 50),
        ("3", 8, 40),
        ("4", 4, 30),
        ("5", 2, 20),
        ("6", 2, 20),
        ("7", 1, 10),
    ],
)
def test_log_levels_map_syslog_to_ros(level: str, ros1: int, ros2: int) -> None:
    assert ros_log_level(ord(level), RosVersion.ROS1) == ros1
    assert ros_log_level(ord(level), RosVersion.ROS2) == ros2


def test_unknown_log_levels_count_as_info() -> None:
    assert ros_log_level(0, RosVersion.ROS1) == 2
    assert ros_log_level(ord("9"), RosVersion.ROS2) == 20


def test_a_format_named_like_the_parameter_type_is_refused() -> None:
    formats = formats_of("parameter:uint64_t timestamp;float x;")
    with pytest.raises(ExportError, match="export's own type px4_ulog/msg/Parameter"):
        register_format(new_typestore(RosVersion.ROS1), "parameter", formats)


@pytest.mark.parametrize("version", list(RosVersion))
def test_a_format_of_padding_only_gives_one_empty_message_per_row(version: RosVersion) -> None:
    formats = formats_of("t:uint8_t[4] _padding0;")
    rows = np.zeros(3, dtype=compile_format("t", formats).dtype)
    converter = RowConverter(new_typestore(version), "t", formats, itemsize=4)
    assert len(converter.messages(rows)) == 3


def test_ros2_definitions_have_names_ros2_allows() -> None:
    fmt = parse_format("t:uint64_t timestamp;float voltage5V_v;uint8_t a__b_;float A;float a;")
    assert ros_definition(fmt, RosVersion.ROS2) == (
        "uint64 timestamp\nfloat32 voltage5v_v\nuint8 a_b\nfloat32 a\nfloat32 a_2\n"
    )
    assert "float32 voltage5V_v\n" in ros_definition(fmt)  # ROS 1 keeps the ULog names
    assert ros2_field_name("_x1") == "x1"
    assert ros2_field_name("9lives") == "f_9lives"
