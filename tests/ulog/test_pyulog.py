"""Golden results: ulogstream.adapters.ulog_file.read agrees with pyulog 1.3 on every sample log.

Where we deliberately differ it is asserted precisely:
- corrupt files: pyulog skips to the next sync magic after a garbage header; we resume at the
  first pair of plausible messages, so we keep every row pyulog has (in order) plus the rows
  listed in EXTRA_ROWS;
- ``char[N]`` fields are one ``S{N}`` column here, ``field[i]`` int8 columns in pyulog;
- array info values are tuples here, raw bytes in pyulog;
- ``bool`` columns are numpy bool here (any non-zero byte is True), raw int8 in pyulog.
"""

from __future__ import annotations

import contextlib
import io
import re
import struct
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
import pytest
from pyulog import ULog
from support.shared_data import SHARED_ULG_FILES, shared_ulg
from support.ulog_builders import EXTRA_ROWS

from ulogstream.adapters.ulog_file import read
from ulogstream.ulog.spec import PADDING_PREFIX, TYPE_STRUCT_CODES

if TYPE_CHECKING:
    from ulogstream.ulog import TopicData, ULogData

SAMPLE_NAMES = [p.name for p in SHARED_ULG_FILES] or ["pyulog__sample.ulg"]

pytestmark = [pytest.mark.slow, pytest.mark.shared]

_cache: dict[str, tuple[ULogData, ULog]] = {}


def both(name: str) -> tuple[ULogData, ULog]:
    if name not in _cache:
        path = shared_ulg(name)
        with contextlib.redirect_stdout(io.StringIO()):
            theirs = ULog(str(path))
        _cache[name] = (read(path), theirs)
    return _cache[name]


def is_padding(field: str) -> bool:
    return any(part.startswith(PADDING_PREFIX) for part in field.split("."))


def pyulog_columns(topic: TopicData) -> dict[str, npt.NDArray[np.generic]]:
    """Our columns under pyulog's names and types (char[N] split into int8 columns)."""
    out: dict[str, npt.NDArray[np.generic]] = {}
    fields = topic.dtype.fields
    assert fields is not None
    for name, spec in fields.items():
        column = topic.data[name]
        if spec[0].kind == "S":
            size = spec[0].itemsize
            chars = np.frombuffer(column.tobytes(), np.int8).reshape(len(column), size)
            for i in range(size):
                out[f"{name}[{i}]"] = chars[:, i]
        else:
            out[name] = column
    return out


def subsequence_index(ours: npt.NDArray[np.uint64], theirs: npt.NDArray[np.uint64]) -> list[int]:
    """Indices in ``ours`` of a greedy match of ``theirs`` as a subsequence (timestamps)."""
    out, j = [], 0
    for value in theirs.tolist():
        while ours[j] != value:
            j += 1
        out.append(j)
        j += 1
    return out


@pytest.mark.parametrize("name", SAMPLE_NAMES)
def test_topics_and_fields_match_pyulog(name: str) -> None:
    ours, theirs = both(name)
    keys = {(d.name, d.multi_id) for d in theirs.data_list}
    assert len(keys) == len(theirs.data_list)  # no instance logged under two msg_ids
    with_data = {key for key, topic in ours.topics.items() if len(topic.data)}
    assert with_data == keys
    extra = 0
    for d in theirs.data_list:
        topic = ours.topics[d.name, d.multi_id]
        assert d.msg_id in topic.msg_ids
        columns = pyulog_columns(topic)
        assert set(columns) == {f for f in d.data if not is_padding(f)}
        index = subsequence_index(topic.timestamps_us, d.data["timestamp"])
        extra += len(topic.data) - len(index)
        for field, column in columns.items():
            expected = d.data[field]
            if column.dtype == np.bool_:  # pyulog: int8 with the raw byte (0xA2 seen in logs)
                expected = expected != 0
            assert column.dtype == expected.dtype, field
            np.testing.assert_array_equal(column[index], expected, err_msg=f"{d.name}.{field}")
        assert (topic.timestamps_us == topic.data["timestamp"]).all()
    assert extra == EXTRA_ROWS.get(name, 0)
    assert (ours.corruption != []) == theirs.file_corruption or name in EXTRA_ROWS


def pyulog_info_value(type_name: str, value: object) -> object:
    """Our info value as pyulog gives it: arrays other than char/uint8_t as raw bytes."""
    match = re.fullmatch(r"(\w+)\[(\d+)\]", type_name)
    if isinstance(value, tuple) and match:
        return struct.pack(f"<{len(value)}{TYPE_STRUCT_CODES[match.group(1)]}", *value)
    if type_name == "char" and isinstance(value, str):
        return value.encode()
    return value


@pytest.mark.parametrize("name", SAMPLE_NAMES)
def test_info_and_parameters_match_pyulog(name: str) -> None:
    ours, theirs = both(name)
    assert ours.start_timestamp_us == theirs.start_timestamp
    assert set(ours.info) == set(theirs.msg_info_dict)
    for key, value in theirs.msg_info_dict.items():
        type_name = theirs._msg_info_dict_types[key]
        assert pyulog_info_value(type_name, ours.info[key]) == value, key
    assert set(ours.info_multiple) == set(theirs.msg_info_multiple_dict)
    for key, values in theirs.msg_info_multiple_dict.items():
        joined = ["".join(v) if isinstance(v[0], str) else b"".join(v) for v in values]
        assert ours.info_multiple[key] == joined, key
    assert ours.initial_parameters == theirs.initial_parameters
    changed = [(p.timestamp_us, p.name, p.value) for p in ours.changed_parameters]
    assert changed == theirs.changed_parameters
    for bit in range(2):
        defaults = {
            q.name: q.value for q in ours.default_parameters if q.default_types & (1 << bit)
        }
        assert defaults == theirs.get_default_parameters(bit)


@pytest.mark.parametrize("name", SAMPLE_NAMES)
def test_logged_messages_and_dropouts_match_pyulog(name: str) -> None:
    ours, theirs = both(name)
    plain = [(m.level, m.timestamp_us, m.text) for m in ours.logged_messages if m.tag is None]
    assert plain == [(m.log_level, m.timestamp, m.message) for m in theirs.logged_messages]
    tagged: dict[int, list[tuple[int, int, str]]] = {}
    for m in ours.logged_messages:
        if m.tag is not None:
            tagged.setdefault(m.tag, []).append((m.level, m.timestamp_us, m.text))
    assert tagged == {
        tag: [(m.log_level, m.timestamp, m.message) for m in messages]
        for tag, messages in theirs.logged_messages_tagged.items()
    }
    assert [(d.duration_ms, d.timestamp_us) for d in ours.dropouts] == [
        (d.duration, d.timestamp) for d in theirs.dropouts
    ]
    if name not in EXTRA_ROWS:
        assert ours.last_timestamp_us == theirs.last_timestamp


def test_truncated_sample_reports_its_partial_message() -> None:
    ours, _ = both("pyulog__sample_2016.ulg")
    assert ours.truncated is not None
    assert (ours.truncated.offset, ours.truncated.size) == (1081257, 87)


def test_appended_sample_has_no_corruption() -> None:
    ours, _ = both("pyulog__sample_appended_multiple.ulg")
    assert ours.flag_bits is not None
    assert ours.flag_bits.appended_offsets == (434369, 451825, 469281)
    assert ours.corruption == []


def test_corrupt_samples_report_where_they_skipped() -> None:
    ours, _ = both("px4-ulog-rs__corrupt_unregistered_msg_id.ulg")
    assert [(c.offset, c.reason.split(",")[0]) for c in ours.corruption] == [
        (1644033, "unknown message type 122 with 38703 bytes"),
        (3102212, "unknown message type 71 with 18288 bytes"),
    ]
    # A whole 'D' message for a msg_id that was never subscribed: counted apart from damage.
    assert ours.data_without_subscription == {32812: 1}
    ours, _ = both("px4-ulog-rs__corrupt_actuator_armed_wrong_size.ulg")
    (gap,) = ours.corruption
    assert (
        gap.offset + gap.skipped
        == Path(shared_ulg("px4-ulog-rs__corrupt_actuator_armed_wrong_size.ulg")).stat().st_size
    )
