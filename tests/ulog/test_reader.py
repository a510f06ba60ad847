"""read() and iter_events() on files written by ULogWriter under tmp_path."""

from __future__ import annotations

import struct
import subprocess
import sys
from typing import TYPE_CHECKING

import numpy as np
import pytest
from support.ulog_builders import VEHICLE_SIZE, normalise, parse, sample_log, vehicle_payload

from ulogstream.adapters.ulog_file import iter_events, read
from ulogstream.errors import ReadError, ULogFormatError
from ulogstream.ulog import Dropout, LoggedString, Parameter, ParameterDefault
from ulogstream.ulog.writer import ULogWriter

if TYPE_CHECKING:
    from pathlib import Path


def write(tmp_path: Path, data: bytes, name: str = "log.ulg") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def test_read_gathers_every_part_of_the_sample(tmp_path: Path) -> None:
    log = read(write(tmp_path, sample_log(rows=5)))
    assert log.header.timestamp_us == log.start_timestamp_us == 1000
    assert log.flag_bits is not None
    assert set(log.formats) == {"vehicle", "nest", "small"}
    assert log.info["sys_name"] == "PX4"
    assert log.info["late"] == "x"
    assert log.info_multiple == {"perf": ["abcdef", "second"]}
    assert log.initial_parameters == {"MC_ROLL_P": 6.5, "SYS_AUTOSTART": 4001}
    assert log.changed_parameters == [Parameter("MC_ROLL_P", 6.75, 65580)]
    assert log.default_parameters == [ParameterDefault("MC_ROLL_P", 7.0, 1)]
    assert log.logged_messages == [
        LoggedString(ord("6"), None, 2050, "hello"),
        LoggedString(ord("4"), 7, 2060, "tagged"),
    ]
    assert log.dropouts == [Dropout(120, 65580)]
    assert log.corruption == []
    assert log.warnings == []
    assert log.truncated is None
    assert log.last_timestamp_us == 65680


def test_topics_in_subscription_order_with_joined_rows(tmp_path: Path) -> None:
    log = read(write(tmp_path, sample_log(rows=5)))
    assert list(log.topics) == [("vehicle", 0), ("small", 1)]
    vehicle = log.topics["vehicle", 0]
    assert vehicle.msg_ids == (0,)
    # the trailing padding (3 bytes) and the nested padding after the last field are not kept
    assert vehicle.dtype.itemsize == VEHICLE_SIZE - 4
    assert vehicle.data.dtype == vehicle.dtype
    assert len(vehicle.data) == 11
    assert vehicle.timestamps_us.tolist() == [2000 + i * 10 for i in range(10)] + [9000]
    assert vehicle.data["v[0]"].tolist() == [float(i) for i in range(10)] + [9.0]
    small = log.topics["small", 1]
    assert small.timestamps_us.dtype == np.uint64
    assert small.timestamps_us.tolist() == [65500 + i * 20 for i in range(10)]
    assert small.data["x"].tolist() == list(range(10))


def test_subscribed_topic_without_rows_is_present_and_empty(tmp_path: Path) -> None:
    w = ULogWriter()
    w.format("t:uint64_t timestamp;")
    w.add_logged_message("t")
    topic = read(write(tmp_path, w.getvalue())).topics["t", 0]
    assert len(topic.data) == 0
    assert len(topic.timestamps_us) == 0


def test_instance_resubscribed_under_new_msg_id_is_merged(tmp_path: Path) -> None:
    w = ULogWriter()
    w.format("t:uint64_t timestamp;")
    w.add_logged_message("t", msg_id=1)
    w.data(1, struct.pack("<Q", 1))
    w.remove_logged_message(1)
    w.add_logged_message("t", msg_id=5)
    w.data(5, struct.pack("<Q", 2))
    topic = read(write(tmp_path, w.getvalue())).topics["t", 0]
    assert topic.msg_ids == (1, 5)
    assert topic.timestamps_us.tolist() == [1, 2]


def test_instance_resubscribed_with_other_format_keeps_first(tmp_path: Path) -> None:
    w = ULogWriter()
    w.format("t:uint64_t timestamp;")
    w.add_logged_message("t", msg_id=1)
    w.data(1, struct.pack("<Q", 1))
    w.format("t:uint64_t timestamp;int8_t x;")
    w.add_logged_message("t", msg_id=2)
    w.data(2, struct.pack("<Qb", 2, 3))
    log = read(write(tmp_path, w.getvalue()))
    assert log.topics["t", 0].timestamps_us.tolist() == [1]
    assert "re-subscribed with a different format" in log.warnings[0].text


def test_truncated_file_keeps_everything_before(tmp_path: Path) -> None:
    log = read(write(tmp_path, sample_log()[:-3]))
    assert log.truncated is not None
    assert len(log.topics["vehicle", 0].data) == 10


def test_iter_events_matches_the_parser_at_any_chunk_size(tmp_path: Path) -> None:
    data = sample_log()
    path = write(tmp_path, data)
    expected = normalise(parse(data))
    for chunk_size in (1, 100, 1 << 20):
        assert normalise(iter_events(path, chunk_size=chunk_size)) == expected


_READ_UNDER_LIMIT = """
import resource, sys
from ulogstream.adapters.ulog_file import read
from ulogstream.errors import UlogstreamError
with open("/proc/self/status") as status:
    size = next(int(line.split()[1]) for line in status if line.startswith("VmSize")) * 1024
resource.setrlimit(resource.RLIMIT_AS, (size + int(sys.argv[2]), resource.RLIM_INFINITY))
try:
    read(sys.argv[1])
except UlogstreamError as err:
    print(err)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="address-space limit: Linux")
@pytest.mark.parametrize("room", [100_000, 600_000, 2_000_000])  # heap, then row mappings
def test_rows_that_do_not_fit_in_memory_give_one_error_naming_the_file(
    tmp_path: Path, room: int
) -> None:
    """Rows beyond the memory there is give one error saying what is short and what to do.

    A process limited to ``room`` more bytes of address space than its imports take reads a
    log of 3.7 MB of rows; no traceback.
    """
    w = ULogWriter(timestamp_us=1)
    w.format("big:uint64_t timestamp;float[6] v;")
    msg_id = w.add_logged_message("big")
    for i in range(100_000):
        w.data(msg_id, struct.pack("<Q6f", i, *[float(i)] * 6))
    log = tmp_path / "big.ulg"
    log.write_bytes(w.getvalue())
    done = subprocess.run(
        [sys.executable, "-c", _READ_UNDER_LIMIT, str(log), str(room)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.startswith(f"not enough memory to read ULog file {log} whole"), done
    assert "ulogstream export" in done.stdout


def test_missing_file_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.ulg"
    with pytest.raises(ReadError, match=r"cannot read ULog file .*nope\.ulg") as raised:
        read(path)
    assert raised.value.path == path


def test_not_a_ulog_file_names_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, b"PK\x03\x04 a zip file", "archive.ulg")
    with pytest.raises(ULogFormatError, match=r"archive\.ulg is not a readable ULog file") as info:
        read(path)
    assert info.value.offset == 0
    assert str(info.value).count("(at byte 0)") == 1


def test_empty_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ULogFormatError, match="inside the 16-byte file header"):
        read(write(tmp_path, b""))


def test_corrupt_file_reports_corruption_and_keeps_rows(tmp_path: Path) -> None:
    w = ULogWriter()
    w.format("vehicle:uint64_t timestamp;float[3] v;char[4] name;nest[2] n;uint8_t[3] _padding0;")
    w.format("nest:uint16_t a;bool b;uint8_t _padding0;")
    msg_id = w.add_logged_message("vehicle")
    w.data(msg_id, vehicle_payload(1, 0.0, b"a\0\0\0", 1))
    data = w.getvalue() + bytes(64)
    tail = ULogWriter(header=False)
    tail.sync()
    tail.data(msg_id, vehicle_payload(2, 0.0, b"b\0\0\0", 2))
    log = read(write(tmp_path, data + tail.getvalue()))
    assert log.topics["vehicle", 0].timestamps_us.tolist() == [1, 2]
    assert [(c.offset, c.skipped) for c in log.corruption] == [(len(data) - 64, 64)]
