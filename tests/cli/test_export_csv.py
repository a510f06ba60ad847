"""CSV export: byte for byte what pyulog's ``ulog2csv`` writes, streamed with bounded memory."""

from __future__ import annotations

import contextlib
import io
import struct
from typing import TYPE_CHECKING

import numpy as np
import pytest
from pyulog.ulog2csv import convert_ulog2csv

from ulogstream.errors import ReadError
from ulogstream.export import csv as csv_export
from ulogstream.export.csv import csv_columns, export_csv
from ulogstream.sim.flightlog import generate_flight_log
from ulogstream.ulog.dtypes import parse_format
from ulogstream.ulog.writer import ULogWriter

if TYPE_CHECKING:
    from pathlib import Path


def _pyulog_csv(log: Path, out: Path) -> dict[str, bytes]:
    out.mkdir()
    with contextlib.redirect_stdout(io.StringIO()):  # it prints a line per file
        convert_ulog2csv(str(log), None, str(out), ",", None, None)
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())}


def _our_csv(log: Path, out: Path, *, chunk_size: int = 1 << 20) -> dict[str, bytes]:
    export_csv(log, out, chunk_size=chunk_size)
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())}


def _assert_same_as_pyulog(log: Path, tmp_path: Path) -> None:
    ours = _our_csv(log, tmp_path / "ours")
    theirs = _pyulog_csv(log, tmp_path / "pyulog")
    assert ours.keys() == theirs.keys()
    for name, data in theirs.items():
        assert ours[name] == data, name


@pytest.mark.parametrize("seed", [0, 1])
def test_generated_flight_is_exported_exactly_as_ulog2csv(tmp_path: Path, seed: int) -> None:
    log = tmp_path / "flight.ulg"
    generate_flight_log(log, duration_s=4.0, seed=seed)
    _assert_same_as_pyulog(log, tmp_path)


def test_small_chunks_give_the_same_files(
    flight_log: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    whole = _our_csv(flight_log, tmp_path / "whole")
    # Many tiny batches per topic, and files closed and reopened past the open-file bound.
    monkeypatch.setattr(csv_export, "MAX_OPEN_FILES", 3)
    chunked = _our_csv(flight_log, tmp_path / "chunked", chunk_size=4099)
    assert chunked == whole


def _edge_case_log(path: Path) -> Path:
    """Types and layouts the flight log lacks: every basic type, char text, nested padding."""
    writer = ULogWriter(timestamp_us=100)
    writer.flag_bits()
    writer.format(
        "odd:uint8_t flag;uint64_t timestamp;bool ok;char c;char[6] name;int8_t i8;"
        "int16_t i16;uint16_t u16;int32_t i32;uint32_t u32;int64_t i64;double d;float f;"
        "uint8_t[2] _padding0;inner[2] inner;float[2] v;"
    )
    writer.format("inner:char[3] tag;uint8_t[1] _padding0;float w;")
    ids = [writer.add_logged_message("odd", 0), writer.add_logged_message("odd", 3)]
    writer.add_logged_message("empty/topic", 0)  # subscribed without data: no file
    rng = np.random.default_rng(4)
    floats = [0.1, -0.0, float("inf"), float("nan"), 1e-8, 3.4e38, 123456.7]
    for i in range(40):
        row = struct.pack(
            "<BQ?B6sbhHiIqdf2s",
            i % 256,
            1000 + i,
            i % 3 == 0,
            65 + i % 26,
            [b"abc", b"", b"abcdef", b"ab\0zz"][i % 4],
            -i,
            -300 * i,
            700 * i,
            -(1 << 31) + i,
            (1 << 32) - 1 - i,
            -(1 << 63) + i,
            float(rng.normal()) * 10.0 ** int(rng.integers(-20, 20)),
            floats[i % len(floats)],
            bytes([i, 255 - i]),
        )
        inner = b"".join(struct.pack("<3sBf", b"xyz"[: i % 4], i, i / 7) for _ in range(2))
        writer.data(ids[i % 2], row + inner + struct.pack("<2f", i / 3, -i / 3))
    path.write_bytes(writer.getvalue())
    return path


def test_every_type_char_text_and_nested_padding_match_ulog2csv(tmp_path: Path) -> None:
    log = _edge_case_log(tmp_path / "edge.ulg")
    _assert_same_as_pyulog(log, tmp_path)
    header = (tmp_path / "ours" / "edge_odd_3.csv").read_text().splitlines()[0].split(",")
    # timestamp first; top-level padding dropped; nested padding kept (as ulog2csv does)
    assert header[:4] == ["timestamp", "flag", "ok", "c"]
    assert "_padding0[0]" not in header
    assert "inner[1]._padding0[0]" in header
    assert "inner[0].tag" in header


def test_columns_follow_log_order_with_timestamp_first() -> None:
    formats = {
        f.name: f
        for f in (
            parse_format("a:float x;uint64_t timestamp;b[2] sub;uint8_t[3] _padding0;"),
            parse_format("b:char[4] s;int16_t[2] k;"),
        )
    }
    names = [column.name for column in csv_columns("a", formats)]
    assert names == [
        "timestamp",
        "x",
        "sub[0].s",
        "sub[0].k[0]",
        "sub[0].k[1]",
        "sub[1].s",
        "sub[1].k[0]",
        "sub[1].k[1]",
    ]


def test_a_topic_instance_subscribed_twice_gets_one_file_with_all_rows(tmp_path: Path) -> None:
    writer = ULogWriter()
    writer.format("t:uint64_t timestamp;int32_t v;")
    first = writer.add_logged_message("t")
    writer.data(first, struct.pack("<Qi", 10, 1))
    writer.data(first, struct.pack("<Qi", 20, 2))
    writer.remove_logged_message(first)
    second = writer.add_logged_message("t")
    writer.data(second, struct.pack("<Qi", 30, 3))
    log = tmp_path / "twice.ulg"
    log.write_bytes(writer.getvalue())
    export_csv(log, tmp_path)
    assert (tmp_path / "twice_t_0.csv").read_text() == "timestamp,v\n10,1\n20,2\n30,3\n"


def test_stem_strips_only_a_ulg_suffix(tmp_path: Path) -> None:
    log = tmp_path / "Flight.v2.ULG"
    generate_flight_log(log, duration_s=0.5)
    summary = export_csv(log, tmp_path / "out")
    assert summary.files[("cpuload", 0)].name == "Flight.v2_cpuload_0.csv"
    assert summary.rows == sum(len(p.read_text().splitlines()) - 1 for p in summary.files.values())


def test_missing_source_is_an_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ReadError, match=r"cannot read ULog file .*nope\.ulg"):
        export_csv(tmp_path / "nope.ulg", tmp_path / "out")


@pytest.mark.slow
@pytest.mark.shared
def test_sample_logs_are_exported_exactly_as_ulog2csv(
    shared_ulg_files: list[Path], tmp_path: Path
) -> None:
    """Byte-equal on every sample; on damaged ones our parser recovers more rows.

    Where the parser reports corruption, ulog2csv loses the rows up to its next sync point or
    misreads them, so there each of its files must be contained in ours: same header, and its
    rows a subsequence of ours.
    """
    for log in shared_ulg_files:
        ours_dir, theirs_dir = tmp_path / log.stem / "ours", tmp_path / log.stem / "pyulog"
        summary = export_csv(log, ours_dir)
        theirs = _pyulog_csv(log, theirs_dir)
        ours = {p.name: p.read_bytes() for p in sorted(ours_dir.iterdir())}
        assert ours.keys() == theirs.keys(), log.name
        for name, data in theirs.items():
            if not summary.problems:
                assert ours[name] == data, f"{log.name}: {name}"
                continue
            our_lines, their_lines = ours[name].splitlines(), data.splitlines()
            assert our_lines[0] == their_lines[0], f"{log.name}: {name}"
            remaining = iter(our_lines)
            assert all(line in remaining for line in their_lines), f"{log.name}: {name}"
