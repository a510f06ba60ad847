"""The GPS-to-UTC rule shared by live publishing and the exporters."""

from __future__ import annotations

import datetime as dt

import numpy as np

from ulogstream.ulog.gps_time import MIN_PLAUSIBLE_UTC_US, first_gps_fix

GPS_ROW = [("timestamp", "<u8"), ("time_utc_usec", "<u8")]


def utc_us(year: int, month: int = 1, day: int = 1) -> int:
    moment = dt.datetime(year, month, day, tzinfo=dt.UTC)
    return int(moment.timestamp()) * 1_000_000


def test_the_threshold_is_2010() -> None:
    assert utc_us(2010) == MIN_PLAUSIBLE_UTC_US


def test_the_fix_is_the_first_row_with_a_utc_time_from_2010_on() -> None:
    rows = np.array(
        [
            (1, 0),  # no fix yet
            (2, utc_us(1980, 1, 6)),  # the GPS epoch: a receiver that knows nothing
            (3, utc_us(1999, 8, 22)),  # a week-number rollover in 2019
            (4, utc_us(2009, 12, 31)),
            (5, 1_600_000_000_000_000),
            (6, 1_600_000_001_000_000),
        ],
        dtype=GPS_ROW,
    )
    timestamps = rows["timestamp"].astype(np.uint64)
    assert first_gps_fix(rows, timestamps) == (1_600_000_000_000_000, 5)
    assert first_gps_fix(rows[:4], timestamps[:4]) is None


def test_rows_without_the_utc_field_have_no_fix() -> None:
    no_field = np.zeros(2, dtype=[("timestamp", "<u8")])
    assert first_gps_fix(no_field, no_field["timestamp"].astype(np.uint64)) is None
