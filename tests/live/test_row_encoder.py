"""One row (what a rate cap publishes) is encoded without numpy, to the same text numpy writes."""

from __future__ import annotations

import numpy as np
import pytest
from support.shared_data import SHARED_ULG_FILES

from ulogstream.adapters.ulog_file import read
from ulogstream.live import encode
from ulogstream.live.encode import RowEncoder


def batch_and_single(rows: np.ndarray) -> tuple[list[list[object]], list[list[object]]]:
    encoder = RowEncoder(rows.dtype)
    batch = encoder.columns(rows)  # two rows or more: numpy formats each column at once
    single = [encoder.columns(rows[i : i + 1])[0] for i in range(len(rows))]
    return batch, single


@pytest.mark.skipif(not SHARED_ULG_FILES, reason="../shared/data/ulg is only beside a CI checkout")
@pytest.mark.parametrize("path", SHARED_ULG_FILES, ids=lambda p: p.stem)
def test_one_row_reads_as_numpy_writes_every_field_of_a_real_log(path: object) -> None:
    log = read(path)  # type: ignore[arg-type]
    checked = 0
    for topic in log.topics.values():
        rows = topic.data[:: max(1, len(topic.data) // 40)][:40]
        if len(rows) < 2:
            continue
        batch, single = batch_and_single(rows)
        assert single == batch, topic.name
        checked += len(rows)
    assert checked


def test_special_values_and_every_type_read_as_numpy_writes_them() -> None:
    dtype = np.dtype(
        [
            ("timestamp", "<u8"),
            ("f", "<f4"),
            ("d", "<f8"),
            ("b", "|b1"),
            ("u8", "|u1"),
            ("i8", "|i1"),
            ("u16", "<u2"),
            ("i16", "<i2"),
            ("u32", "<u4"),
            ("i32", "<i4"),
            ("i64", "<i8"),
            ("name", "S6"),
            ("_padding0", "|u1"),
            ("g", "<f4"),
        ]
    )
    specials = [0.0, -0.0, np.nan, np.inf, -np.inf, 1e-45, 3.4028235e38, 0.1, 1e16, 1e-5, 123.5]
    rows = np.zeros(len(specials), dtype=dtype)
    rows["f"] = specials
    rows["d"] = [*specials[:-1], 1.2345678901234567e-300]
    rows["g"] = specials[::-1]
    rows["b"] = [i % 2 for i in range(len(specials))]
    rows["i64"] = -(2**63)
    rows["u32"] = 2**32 - 1
    rows["name"] = ([b"ab", b"", b"abcdef", b"a\0b", b"\xff\xfe", b"x"] * 2)[: len(specials)]
    batch, single = batch_and_single(rows)
    assert single == batch
    assert single[2][0] == "null"  # NaN
    assert single[1][0] == "-0.0"


def test_the_float_text_cache_stays_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(encode, "FLOAT_TEXT_CACHE", 8)
    encode._FLOAT32_TEXTS.clear()
    rows = np.zeros(30, dtype=[("timestamp", "<u8"), ("x", "<f4")])
    rows["x"] = np.arange(30) + 0.5
    batch, single = batch_and_single(rows)
    assert single == batch
    assert len(encode._FLOAT32_TEXTS) <= 8
