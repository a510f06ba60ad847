"""The synthetic flight log: deterministic, read cleanly by pyulog, PX4-like in shape and rate."""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

import numpy as np
import pytest
from pyulog import ULog

from ulogstream.adapters.ulog_file import read
from ulogstream.sim.flightlog import (
    FORMATS,
    INITIAL_PARAMETERS,
    PARAMETER_CHANGES,
    SUBSCRIPTIONS,
    TOPIC_RATES_HZ,
    generate_flight_log,
)

if TYPE_CHECKING:
    from pathlib import Path


def _generate(*, duration_s: float, seed: int) -> bytes:
    out = io.BytesIO()
    generate_flight_log(out, duration_s=duration_s, seed=seed)
    return out.getvalue()


@pytest.fixture(name="minute_ulog", scope="module")
def fixture_minute_ulog(minute_log: Path) -> ULog:
    return ULog(str(minute_log))


def test_same_seed_gives_the_same_bytes() -> None:
    assert _generate(duration_s=3.0, seed=5) == _generate(duration_s=3.0, seed=5)


def test_other_seed_gives_other_bytes_of_the_same_shape() -> None:
    first, second = _generate(duration_s=3.0, seed=1), _generate(duration_s=3.0, seed=2)
    assert first != second
    assert abs(len(first) - len(second)) < 200  # only values differ, not the message mix


def test_writes_to_a_path_and_reports_what_it_wrote(tmp_path: Path) -> None:
    path = tmp_path / "log.ulg"
    summary = generate_flight_log(path, duration_s=2.0, seed=3, start_timestamp_us=5_000_000)
    data = path.read_bytes()
    assert summary.size == len(data)
    assert data[:7] == b"ULog\x01\x12\x35"
    assert int.from_bytes(data[8:16], "little") == 5_000_000
    assert summary.start_timestamp_us == 5_000_000
    assert summary.data_counts[("sensor_combined", 0)] == pytest.approx(400, abs=2)
    assert set(summary.data_counts) == set(SUBSCRIPTIONS)
    assert summary.duration_s == pytest.approx(2.0, abs=0.02)


@pytest.mark.parametrize("duration", [0.0, -1.0, float("nan")])
def test_refuses_a_duration_that_is_not_positive(duration: float) -> None:
    with pytest.raises(ValueError, match="duration_s must be positive"):
        generate_flight_log(io.BytesIO(), duration_s=duration)


def test_pyulog_reads_it_without_corruption(minute_ulog: ULog) -> None:
    assert not minute_ulog.file_corruption
    assert minute_ulog.has_default_parameters
    assert minute_ulog.msg_info_dict["sys_name"] == "PX4"
    assert minute_ulog.get_version_info_str() == "v1.15.2"
    assert minute_ulog.msg_info_dict["time_ref_utc"] == 0


def test_our_reader_reads_it_without_problems(minute_log: Path) -> None:
    log = read(minute_log)
    assert log.corruption == []
    assert log.warnings == []
    assert log.truncated is None
    assert {key for key, topic in log.topics.items() if len(topic.data)} == set(SUBSCRIPTIONS)


def test_every_topic_is_logged_at_its_rate(minute_ulog: ULog) -> None:
    seen = {(d.name, d.multi_id): d.data["timestamp"] for d in minute_ulog.data_list}
    assert set(seen) == set(SUBSCRIPTIONS)
    for key, hz in TOPIC_RATES_HZ.items():
        stamps = seen[key]
        rate = (len(stamps) - 1) / ((stamps[-1] - stamps[0]) / 1e6)
        assert rate == pytest.approx(hz, rel=0.01), key
        assert np.all(np.diff(stamps.astype(np.int64)) > 0), key


def test_log_rate_is_about_px4s_default_50_kb_per_second(minute_log: Path) -> None:
    assert 45_000 < minute_log.stat().st_size / 60.0 < 60_000


def test_formats_are_px4_shaped_with_nested_type_defined_after_its_user(
    minute_ulog: ULog,
) -> None:
    formats = minute_ulog.message_formats
    attitude = [(t, n, name) for t, n, name in formats["vehicle_attitude"].fields]
    assert attitude[-1] == ("uint8_t", 7, "_padding0")
    assert ("float", 4, "q") in attitude
    assert list(FORMATS).index("esc_status") < list(FORMATS).index("esc_report")
    esc = minute_ulog.get_dataset("esc_status").data
    assert esc["esc[3].esc_rpm"].max() > 5000
    text = minute_ulog.get_dataset("mavlink_log").data
    assert "text[0]" in text  # a char[127] field


def test_flight_takes_off_flies_a_circle_and_lands(minute_ulog: ULog) -> None:
    position = minute_ulog.get_dataset("vehicle_local_position").data
    altitude = -position["z"]
    assert altitude[:50].max() < 0.2  # on the ground at first
    assert altitude.max() == pytest.approx(10.0, abs=0.5)
    assert altitude[-50:].max() < 0.2  # and again at the end
    radius = np.hypot(position["x"], position["y"])
    assert 9.0 < radius.max() < 15.0
    step = np.hypot(np.diff(position["x"]), np.diff(position["y"]))
    assert step.max() < 0.5  # smooth: under 25 m/s between 50 Hz samples, noise included
    speed = np.hypot(position["vx"], position["vy"])
    assert 3.0 < speed.max() < 12.0


def test_attitude_is_level_on_the_ground_and_tilts_moderately_in_flight(
    minute_ulog: ULog,
) -> None:
    data = minute_ulog.get_dataset("vehicle_attitude").data
    q = np.stack([data[f"q[{i}]"] for i in range(4)], axis=1)
    assert np.allclose(np.linalg.norm(q, axis=1), 1.0, atol=1e-5)
    tilt = np.degrees(2 * np.arcsin(np.clip(np.hypot(q[:, 1], q[:, 2]), 0, 1)))
    assert tilt[:50].max() < 2.0
    assert 5.0 < tilt.max() < 40.0
    accel = minute_ulog.get_dataset("sensor_combined").data["accelerometer_m_s2[2]"]
    assert np.median(accel) == pytest.approx(-9.8, abs=0.3)


def test_battery_drains_and_motors_spin_only_when_armed(minute_ulog: ULog) -> None:
    battery = minute_ulog.get_dataset("battery_status").data
    assert np.all(np.diff(battery["discharged_mah"]) > 0)
    assert battery["remaining"][-1] < battery["remaining"][0] - 0.02
    assert battery["voltage_v"][-1] < battery["voltage_v"][0]
    outputs = minute_ulog.get_dataset("actuator_outputs").data["output[0]"]
    assert outputs[0] == 900.0  # disarmed
    assert np.median(outputs) > 1300.0  # hovering


def test_parameters_defaults_changes_and_messages(minute_ulog: ULog) -> None:
    assert minute_ulog.initial_parameters.keys() == INITIAL_PARAMETERS.keys()
    assert minute_ulog.initial_parameters["SYS_AUTOSTART"] == 4001
    assert minute_ulog.get_default_parameters(0)["SYS_AUTOSTART"] == 0
    assert minute_ulog.get_default_parameters(1)["SYS_AUTOSTART"] == 4001
    changes = [(name, value) for _, name, value in minute_ulog.changed_parameters]
    assert changes == [(name, value) for _, name, value in PARAMETER_CHANGES]
    start = minute_ulog.start_timestamp
    first_change = minute_ulog.changed_parameters[0][0]
    assert (first_change - start) / 1e6 == pytest.approx(PARAMETER_CHANGES[0][0] * 60, abs=0.1)
    levels = {m.log_level_str() for m in minute_ulog.logged_messages}
    assert levels == {"INFO", "WARNING", "DEBUG"}
    tagged = [m for ms in minute_ulog.logged_messages_tagged.values() for m in ms]
    assert len(tagged) == 1
    perf = minute_ulog.msg_info_multiple_dict["perf_counter_preflight"]
    assert len(perf) == 1
    assert len(perf[0]) > 1  # split over continued pieces


def test_sync_markers_every_500_ms(minute_log: Path) -> None:
    assert minute_log.read_bytes().count(b"\x2f\x73\x13\x20\x25\x0c\xbb\x12") == 119
