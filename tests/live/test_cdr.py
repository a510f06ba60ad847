"""ROS 2 CDR messages of decoded rows: byte for byte what rosbags serializes for the MCAP export.

The oracle is rosbags (``Typestore.serialize_cdr``) on the message objects the MCAP export
builds (:class:`~ulogstream.export.rostypes.RowConverter`), for every topic of every real PX4
log in ``../shared/data/ulg`` and of logs our writer makes with strings, booleans, nested
formats and arrays.
"""

from __future__ import annotations

import subprocess
import sys
from typing import TYPE_CHECKING

import numpy as np
import pytest
from support.shared_data import shared_ulg

from ulogstream.adapters.ulog_file import read
from ulogstream.export.rosnames import RosVersion, message_definition
from ulogstream.export.rostypes import RowConverter, new_typestore, register_format
from ulogstream.live.encode import CDR_HEADER, CdrEncoder
from ulogstream.ulog.writer import ULogWriter

if TYPE_CHECKING:
    from pathlib import Path

    import numpy.typing as npt

    from ulogstream.ulog.reader import ULogData

REAL_LOGS = [
    "px4-ulog-rs__6ba1abc7-b433-4029-b8f5-3b2bb12d3b6c.ulg",
    "px4-ulog-rs__esc_status_log.ulg",
    "pyulog__sample.ulg",
    "pyulog__sample_2016.ulg",
    "pyulog__sample_appended_multiple.ulg",
    "pyulog__sample_logging_tagged_and_default_params.ulg",
    "pyulog__sample_px4_events.ulg",
    "pyulog__sample_unordered.ulg",
    "yule_log__powers.ulg",
]


def rosbags_cdr(data: ULogData, name: str, rows: npt.NDArray[np.void]) -> list[bytes]:
    """What the MCAP export writes for ``rows`` of topic ``name``: rosbags' CDR."""
    store = new_typestore(RosVersion.ROS2)
    padded = _with_trailing_padding(data, name, rows)
    converter = RowConverter(
        store, name, data.formats, itemsize=padded.dtype.itemsize, version=RosVersion.ROS2
    )
    return [
        bytes(store.serialize_cdr(message, converter.typename))
        for message in converter.messages(padded)
    ]


def _with_trailing_padding(
    data: ULogData, name: str, rows: npt.NDArray[np.void]
) -> npt.NDArray[np.void]:
    """``rows`` widened to the format's full size (the parser leaves trailing padding out)."""
    from ulogstream.ulog.dtypes import nested_dtype  # noqa: PLC0415

    size = nested_dtype(name, data.formats).itemsize
    raw = np.zeros((len(rows), size), dtype=np.uint8)
    raw[:, : rows.dtype.itemsize] = np.ascontiguousarray(rows).view(np.uint8).reshape(len(rows), -1)
    fields = rows.dtype.fields
    assert fields is not None
    wide = np.dtype(
        {
            "names": list(fields),
            "formats": [spec[0] for spec in fields.values()],
            "offsets": [spec[1] for spec in fields.values()],
            "itemsize": size,
        }
    )
    return raw.reshape(-1).view(wide)


@pytest.mark.shared
@pytest.mark.parametrize("log", REAL_LOGS)
def test_every_topic_of_a_real_log_is_rosbags_cdr_byte_for_byte(log: str) -> None:
    data = read(shared_ulg(log))
    checked = 0
    for topic in data.topics.values():
        rows = topic.data[:200]
        if len(rows) == 0:
            continue
        assert CdrEncoder(rows.dtype).payloads(rows) == rosbags_cdr(data, topic.name, rows), (
            topic.name
        )
        checked += 1
    assert checked >= 1


def test_strings_booleans_nested_formats_and_arrays_are_rosbags_cdr(tmp_path: Path) -> None:
    path = tmp_path / "kinds.ulg"
    writer = ULogWriter(timestamp_us=1)
    writer.format("inner:uint8_t kind;float[2] v;bool ok;")
    writer.format(
        "mixed:uint64_t timestamp;char[10] label;bool[3] flags;int16_t n;inner[2] parts;"
        "char[5] tag;double d;uint8_t[3] _padding0;"
    )
    msg_id = writer.add_logged_message("mixed")
    for i, (label, tag) in enumerate([(b"hello", b"ab"), (b"", b"abcde"), (b"x\0junk", b"")]):
        row = (
            (1000 + i).to_bytes(8, "little")
            + label.ljust(10, b"\0")
            + bytes([1, 0, 7 * i])  # a stray byte in a bool, as PX4 leaves some
            + (-5 * i).to_bytes(2, "little", signed=True)
            + b"".join(
                bytes([k]) + np.array([k, -k], "<f4").tobytes() + bytes([k % 2]) for k in (i, i + 1)
            )
            + tag.ljust(5, b"\0")
            + np.array([i / 3], "<f8").tobytes()
            + b"\0\0\0"
        )
        writer.data(msg_id, row)
    path.write_bytes(writer.getvalue())
    data = read(path)
    (topic,) = data.topics.values()
    ours = CdrEncoder(topic.data.dtype).payloads(topic.data)
    assert ours == rosbags_cdr(data, "mixed", topic.data)
    assert all(payload.startswith(CDR_HEADER) for payload in ours)


@pytest.mark.shared
@pytest.mark.parametrize("log", REAL_LOGS)
def test_the_live_views_ros2_definitions_are_rosbags_msgdef(log: str) -> None:
    """The live view writes the export's full definitions itself: rosbags' text, exactly."""
    data = read(shared_ulg(log))
    store = new_typestore(RosVersion.ROS2)
    for name in {topic.name for topic in data.topics.values()}:
        typename = register_format(store, name, data.formats, RosVersion.ROS2)
        expected, _ = store.generate_msgdef(typename, ros_version=2)
        assert message_definition(name, data.formats) == expected, name


def test_the_live_view_loads_no_rosbags() -> None:
    """Loading rosbags and registering a log's types takes ~0.7 s: never on the ack loop."""
    code = (
        "import sys, ulogstream.adapters.foxglove_sink, ulogstream.live.policy;"
        "print('rosbags' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == "False"
