"""The flight summary of a finished log.

Against a generated flight whose truth is known, and against pyulog's reading of real PX4 logs
(../shared/data/ulg).
"""

from __future__ import annotations

import math
import struct
from typing import TYPE_CHECKING

import numpy as np
import pytest
from pyulog import ULog
from support.shared_data import shared_ulg

from ulogstream.errors import ULogFormatError
from ulogstream.recorder.backfill import completeness
from ulogstream.sim.flightlog import UTC_AT_START_US, generate_flight_log
from ulogstream.ulog.flight import FlightSummarizer, FlightSummary
from ulogstream.ulog.spec import encode_dropout
from ulogstream.ulog.writer import ULogWriter
from ulogstream.upload.info import describe

if TYPE_CHECKING:
    from pathlib import Path


def summarize_flight(path: Path, chunk: int = 1 << 20) -> FlightSummary:
    summarizer = FlightSummarizer()
    data = path.read_bytes()
    for start in range(0, len(data), chunk):
        summarizer.feed(data[start : start + chunk])
    return summarizer.summary()


def test_a_generated_flight_is_summarized_as_it_was_flown(tmp_path: Path) -> None:
    path = tmp_path / "flight.ulg"
    generate_flight_log(path, duration_s=60.0, seed=3)
    summary = summarize_flight(path)

    assert summary.duration_s == pytest.approx(60.0, abs=0.05)
    assert summary.armed_s == pytest.approx((0.985 - 0.02) * 60.0, abs=0.6)  # 2 Hz status
    assert summary.max_altitude_m == pytest.approx(10.0, abs=0.3)  # its climb to 10 m
    assert 40.0 < (summary.distance_m or 0) < 200.0  # out, a circle of 10-14 m, back
    assert summary.min_battery_v is not None
    assert summary.min_battery_remaining is not None
    assert 0.0 < summary.min_battery_remaining < 1.0
    assert (summary.warnings, summary.errors) == (1, 0)  # one preflight warning
    assert summary.vehicle_type == "rotary wing"
    assert summary.firmware == "v1.15.2"  # ver_sw_release 0x010F02FF
    start = UTC_AT_START_US / 1e6
    assert summary.start_time is not None
    assert summary.start_time.startswith("2024-05-01T")
    assert abs(_seconds(summary.start_time) - start) < 2
    assert summary.takeoff_time is None  # the generator logs no vehicle_land_detected
    json = summary.as_json()
    assert json["firmware"] == "v1.15.2"
    assert set(json) >= {"start_time", "armed_s", "max_altitude_m", "home_lat"}


def _seconds(iso: str) -> float:
    from datetime import datetime  # noqa: PLC0415

    return datetime.fromisoformat(iso).timestamp()


@pytest.mark.parametrize(
    "name",
    [
        "pyulog__sample_px4_events.ulg",
        "px4-ulog-rs__esc_status_log.ulg",
        "px4-ulog-rs__6ba1abc7-b433-4029-b8f5-3b2bb12d3b6c.ulg",
        "pyulog__sample_logging_tagged_and_default_params.ulg",
    ],
)
def test_real_logs_are_summarized_as_pyulog_reads_them(name: str) -> None:
    path = shared_ulg(name)
    summary = summarize_flight(path)
    log = ULog(str(path))
    data = {(d.name, d.multi_id): d.data for d in log.data_list}

    duration = (log.last_timestamp - log.start_timestamp) / 1e6
    assert summary.duration_s == pytest.approx(duration, abs=1e-3)
    levels = [int(m.log_level) - ord("0") for m in log.logged_messages]
    levels += [int(m.log_level) - ord("0") for m in log.logged_messages_tagged.get(0, [])]
    tagged = [m for tag, ms in log.logged_messages_tagged.items() if tag for m in ms]
    levels += [int(m.log_level) - ord("0") for m in tagged]
    assert summary.warnings == sum(level == 4 for level in levels)
    assert summary.errors == sum(level < 4 for level in levels)

    status = data.get(("vehicle_status", 0))
    if status is not None:
        seconds = status["timestamp"] / 1e6
        armed = status["arming_state"][:-1] == 2
        assert summary.armed_s == pytest.approx(float(np.sum(np.diff(seconds)[armed])), abs=1e-3)

    land = data.get(("vehicle_land_detected", 0))
    if land is not None:
        landed = land["landed"].astype(bool)
        changes = np.flatnonzero(landed[1:] != landed[:-1]) + 1
        takeoffs = [land["timestamp"][i] for i in changes if not landed[i]]
        landings = [land["timestamp"][i] for i in changes if landed[i]]
        start = log.start_timestamp
        expected = None if not takeoffs else round((takeoffs[0] - start) / 1e6, 3)
        assert summary.takeoff_s == expected
        expected = None if not landings else round((landings[-1] - start) / 1e6, 3)
        assert summary.landing_s == expected

    battery = data.get(("battery_status", 0))
    if battery is not None:
        volts = battery["voltage_v"]
        ok = volts > 0
        if "connected" in battery:
            ok &= battery["connected"].astype(bool)
        assert summary.min_battery_v == pytest.approx(float(volts[ok].min()), abs=1e-3)

    position = data.get(("vehicle_local_position", 0))
    if position is not None:
        z = position["z"][position["z_valid"].astype(bool)]
        home = data.get(("home_position", 0))
        ground = float(home["z"][-1]) if home is not None else float(z[0])
        assert summary.max_altitude_m == pytest.approx(ground - float(z.min()), abs=0.01)

    home = data.get(("home_position", 0))
    if home is not None and summary.home_lat is not None:
        assert summary.home_lat == pytest.approx(float(home["lat"][-1]), abs=1e-6)
        assert summary.home_lon == pytest.approx(float(home["lon"][-1]), abs=1e-6)
    assert not any(
        isinstance(value, float) and not math.isfinite(value)
        for value in summary.as_json().values()
    )


def test_any_chunking_gives_the_same_summary(tmp_path: Path) -> None:
    path = tmp_path / "flight.ulg"
    generate_flight_log(path, duration_s=20.0, seed=5)
    whole = summarize_flight(path, chunk=1 << 30)
    for chunk in (1, 7, 4093):
        assert summarize_flight(path, chunk) == whole


def test_a_cut_log_is_summarized_up_to_its_cut_and_no_ulog_is_one_clear_error(
    tmp_path: Path,
) -> None:
    path = tmp_path / "flight.ulg"
    generate_flight_log(path, duration_s=20.0, seed=5)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2] + b"\xff" * 100)  # cut, then garbage
    half = summarize_flight(path)
    assert half.duration_s is not None
    assert 5.0 < half.duration_s < 15.0

    path.write_bytes(b"these are not the logs you are looking for" * 10)
    with pytest.raises(ULogFormatError):
        summarize_flight(path)
    info = describe(path, path.stat().st_size, vehicle="v", how="complete")
    assert info.sha256 is not None  # the checksum is taken all the same
    assert info.flight is None


def test_the_dropouts_left_in_a_log_say_how_complete_its_flight_is(tmp_path: Path) -> None:
    path = tmp_path / "2026-11-25" / "12_34_56.ulg"
    path.parent.mkdir()
    generate_flight_log(path, duration_s=20.0, seed=5)
    assert completeness(path).startswith("the flight's log is 100.0% complete")
    with path.open("ab") as file:  # two dropouts the backfill could not fill: 2.5 s in all
        file.write(encode_dropout(2000) + encode_dropout(500))
    summary = summarize_flight(path)
    assert summary.dropout_s == 2.5
    assert summary.duration_s is not None
    share = 1 - 2.5 / summary.duration_s
    assert completeness(path) == f"the flight's log is {share:.1%} complete, 2.5 s still missing"


def test_a_msg_id_subscribed_again_is_read_as_its_new_topic() -> None:
    """A topic with nothing wanted takes the fold's shortest path; its msg_id reused leaves it."""
    writer = ULogWriter(timestamp_us=1_000_000)
    writer.format("other:uint64_t timestamp;float value;")
    writer.format("battery_status:uint64_t timestamp;float voltage_v;float remaining;")
    writer.add_logged_message("other", msg_id=3)
    writer.data(3, struct.pack("<Qf", 2_000_000, 11.0))
    writer.add_logged_message("battery_status", msg_id=3)  # the same msg_id, now wanted
    writer.data(3, struct.pack("<Qff", 3_000_000, 15.5, 0.8))
    writer.data(3, struct.pack("<Qff", 4_000_000, 15.2, 0.7))
    summarizer = FlightSummarizer()
    summarizer.feed(writer.getvalue())
    summary = summarizer.summary()
    assert summary.min_battery_v == pytest.approx(15.2)
    assert summary.duration_s == pytest.approx(3.0)
