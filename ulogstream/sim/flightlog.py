"""A realistic synthetic PX4 quadrotor flight log: take-off, hover, a circle and a landing.

The log looks like one PX4's logger writes with its default profile: uORB formats (with
padding, a nested type, ``char`` text), system info, perf counters split over continued 'M'
messages, about 50 parameters with defaults, logged strings, a parameter change in flight,
a sync marker every 500 ms, and topics at PX4-like rates, about 50 KB of log per second.
Every byte follows from ``seed``: the same arguments always give the same file.

Past 700 lines because it is mostly data: the formats, parameters and rates of a real logger
profile, written out so a reader can compare them with PX4's.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import BinaryIO

import msgspec
import numpy as np
import numpy.typing as npt

from ulogstream.ulog.dtypes import nested_dtype, parse_format
from ulogstream.ulog.spec import COMPAT_DEFAULT_PARAMETERS
from ulogstream.ulog.writer import ULogWriter

FloatArray = npt.NDArray[np.float64]

DEFAULT_START_TIMESTAMP_US = 16_000_000
"""Header timestamp: PX4 starts logging on arming, some seconds after boot."""

SYNC_INTERVAL_US = 500_000
"""PX4's logger writes a sync marker ('S') every 500 ms."""

GRAVITY = 9.80665
EARTH_RADIUS_M = 6_371_000.0
HOME_LAT_DEG = 47.397742
HOME_LON_DEG = 8.545594
HOME_ALT_M = 488.0
UTC_AT_START_US = 1_714_557_600_000_000
"""2024-05-01T10:00:00Z: GPS time of the first sample (fixed so that bytes are reproducible)."""

BATTERY_CAPACITY_MAH = 5000.0
CELL_COUNT = 4


# Formats as PX4 v1.15 writes them (vehicle_status and esc_status trimmed a little);
# esc_status uses esc_report, defined after it as PX4's logger does.
FORMATS: dict[str, str] = {
    "sensor_combined": (
        "uint64_t timestamp;float[3] gyro_rad;uint32_t gyro_integral_dt;"
        "int32_t accelerometer_timestamp_relative;float[3] accelerometer_m_s2;"
        "uint32_t accelerometer_integral_dt;uint8_t accelerometer_clipping;uint8_t gyro_clipping;"
        "uint8_t accel_calibration_count;uint8_t gyro_calibration_count;"
    ),
    "vehicle_attitude": (
        "uint64_t timestamp;uint64_t timestamp_sample;float[4] q;float[4] delta_q_reset;"
        "uint8_t quat_reset_counter;uint8_t[7] _padding0;"
    ),
    "vehicle_angular_velocity": (
        "uint64_t timestamp;uint64_t timestamp_sample;float[3] xyz;float[3] xyz_derivative;"
    ),
    "sensor_accel": (
        "uint64_t timestamp;uint64_t timestamp_sample;uint32_t device_id;float x;float y;float z;"
        "float temperature;uint32_t error_count;uint8_t[3] clip_counter;uint8_t samples;"
        "uint8_t[4] _padding0;"
    ),
    "sensor_gyro": (
        "uint64_t timestamp;uint64_t timestamp_sample;uint32_t device_id;float x;float y;float z;"
        "float temperature;uint32_t error_count;uint8_t[3] clip_counter;uint8_t samples;"
        "uint8_t[4] _padding0;"
    ),
    "vehicle_local_position": (
        "uint64_t timestamp;uint64_t timestamp_sample;uint64_t ref_timestamp;double ref_lat;"
        "double ref_lon;float x;float y;float z;float[2] delta_xy;float delta_z;float vx;float vy;"
        "float vz;float z_deriv;float[2] delta_vxy;float delta_vz;float ax;float ay;float az;"
        "float heading;float heading_var;float unaided_heading;float delta_heading;"
        "float tilt_var;float ref_alt;float dist_bottom;float eph;float epv;float evh;float evv;"
        "float vxy_max;float vz_max;float hagl_min;float hagl_max;bool xy_valid;bool z_valid;"
        "bool v_xy_valid;bool v_z_valid;uint8_t xy_reset_counter;uint8_t z_reset_counter;"
        "uint8_t vxy_reset_counter;uint8_t vz_reset_counter;uint8_t heading_reset_counter;"
        "bool heading_good_for_control;bool xy_global;bool z_global;bool dist_bottom_valid;"
        "uint8_t dist_bottom_sensor_bitfield;bool dead_reckoning;uint8_t[5] _padding0;"
    ),
    "vehicle_global_position": (
        "uint64_t timestamp;uint64_t timestamp_sample;double lat;double lon;float alt;"
        "float alt_ellipsoid;float delta_alt;float eph;float epv;float terrain_alt;"
        "uint8_t lat_lon_reset_counter;uint8_t alt_reset_counter;bool terrain_alt_valid;"
        "bool dead_reckoning;uint8_t[4] _padding0;"
    ),
    "actuator_outputs": (
        "uint64_t timestamp;uint32_t noutputs;float[16] output;uint8_t[4] _padding0;"
    ),
    "battery_status": (
        "uint64_t timestamp;float voltage_v;float voltage_filtered_v;float current_a;"
        "float current_filtered_a;float current_average_a;float discharged_mah;float remaining;"
        "float scale;float time_remaining_s;float temperature;float[14] voltage_cell_v;"
        "float max_cell_voltage_delta;uint32_t custom_faults;float average_power;"
        "float available_energy;float full_charge_capacity_wh;float remaining_capacity_wh;"
        "float design_capacity;float nominal_voltage;uint16_t capacity;uint16_t cycle_count;"
        "uint16_t average_time_to_empty;uint16_t serial_number;uint16_t manufacture_date;"
        "uint16_t state_of_health;uint16_t max_error;uint16_t interface_error;uint16_t faults;"
        "uint16_t average_time_to_full;uint16_t over_discharge_count;bool connected;"
        "uint8_t cell_count;uint8_t source;uint8_t priority;uint8_t id;bool is_powering_off;"
        "bool is_required;uint8_t warning;uint8_t mode;uint8_t[1] _padding0;"
    ),
    "sensor_gps": (
        "uint64_t timestamp;uint64_t timestamp_sample;double latitude_deg;double longitude_deg;"
        "double altitude_msl_m;double altitude_ellipsoid_m;uint64_t time_utc_usec;"
        "uint32_t device_id;float s_variance_m_s;float c_variance_rad;float eph;float epv;"
        "float hdop;float vdop;int32_t noise_per_ms;int32_t jamming_indicator;float vel_m_s;"
        "float vel_n_m_s;float vel_e_m_s;float vel_d_m_s;float cog_rad;"
        "int32_t timestamp_time_relative;float heading;float heading_offset;"
        "float heading_accuracy;float rtcm_injection_rate;uint16_t automatic_gain_control;"
        "uint8_t fix_type;uint8_t jamming_state;uint8_t spoofing_state;bool vel_ned_valid;"
        "uint8_t satellites_used;uint8_t selected_rtcm_instance;bool rtcm_crc_failed;"
        "uint8_t rtcm_msg_used;uint8_t[2] _padding0;"
    ),
    "esc_status": (
        "uint64_t timestamp;uint16_t counter;uint8_t esc_count;uint8_t esc_connectiontype;"
        "uint8_t esc_online_flags;uint8_t esc_armed_flags;uint8_t[2] _padding0;"
        "esc_report[4] esc;"
    ),
    "esc_report": (
        "uint64_t timestamp;uint32_t esc_errorcount;int32_t esc_rpm;float esc_voltage;"
        "float esc_current;float esc_temperature;uint16_t failures;uint8_t esc_address;"
        "uint8_t esc_cmdcount;uint8_t esc_state;uint8_t actuator_function;int8_t esc_power;"
        "uint8_t[5] _padding0;"
    ),
    "vehicle_status": (
        "uint64_t timestamp;uint64_t armed_time;uint64_t takeoff_time;uint64_t nav_state_timestamp;"
        "uint32_t valid_nav_states_mask;uint32_t can_set_nav_states_mask;"
        "uint16_t failure_detector_status;uint8_t arming_state;uint8_t latest_arming_reason;"
        "uint8_t latest_disarming_reason;uint8_t nav_state_user_intention;uint8_t nav_state;"
        "uint8_t executor_in_charge;uint8_t hil_state;uint8_t vehicle_type;bool failsafe;"
        "bool failsafe_and_user_took_over;uint8_t failsafe_defer_state;bool gcs_connection_lost;"
        "uint8_t gcs_connection_lost_counter;bool high_latency_data_link_lost;bool is_vtol;"
        "bool is_vtol_tailsitter;bool in_transition_mode;bool in_transition_to_fw;"
        "uint8_t system_type;uint8_t system_id;uint8_t component_id;bool safety_button_available;"
        "bool safety_off;bool power_input_valid;bool usb_connected;bool pre_flight_checks_pass;"
        "uint8_t[1] _padding0;"
    ),
    "cpuload": "uint64_t timestamp;float load;float ram_usage;",
    "mavlink_log": "uint64_t timestamp;char[127] text;uint8_t severity;",
}

_PARSED_FORMATS = {name: parse_format(f"{name}:{body}") for name, body in FORMATS.items()}


class _Rate(msgspec.Struct, frozen=True):
    """A periodic topic instance: ``hz`` samples per second, first after ``phase_s``."""

    name: str
    multi_id: int
    hz: float
    phase_s: float


# PX4's default logger profile logs these at about these rates (logged_topics.cpp intervals).
_PERIODIC: tuple[_Rate, ...] = (
    _Rate("sensor_combined", 0, 200.0, 0.0011),
    _Rate("vehicle_attitude", 0, 100.0, 0.0023),
    _Rate("vehicle_angular_velocity", 0, 100.0, 0.0027),
    _Rate("sensor_accel", 0, 50.0, 0.0031),
    _Rate("sensor_accel", 1, 50.0, 0.0037),
    _Rate("sensor_gyro", 0, 50.0, 0.0041),
    _Rate("sensor_gyro", 1, 50.0, 0.0047),
    _Rate("vehicle_local_position", 0, 50.0, 0.0053),
    _Rate("vehicle_global_position", 0, 50.0, 0.0059),
    _Rate("actuator_outputs", 0, 50.0, 0.0061),
    _Rate("battery_status", 0, 10.0, 0.0067),
    _Rate("sensor_gps", 0, 10.0, 0.0071),
    _Rate("esc_status", 0, 10.0, 0.0073),
    _Rate("vehicle_status", 0, 2.0, 0.0079),
    _Rate("cpuload", 0, 2.0, 0.0083),
)

SUBSCRIPTIONS: tuple[tuple[str, int], ...] = (
    *((rate.name, rate.multi_id) for rate in _PERIODIC),
    ("mavlink_log", 0),
)
"""Every topic instance the log subscribes, in the order of its 'A' messages."""

TOPIC_RATES_HZ: dict[tuple[str, int], float] = {(r.name, r.multi_id): r.hz for r in _PERIODIC}
"""The sample rate of each periodic topic instance (``mavlink_log`` is event driven)."""

INFO: tuple[tuple[str, str, str | int], ...] = (
    ("char", "sys_name", "PX4"),
    ("char", "ver_hw", "PX4_FMU_V6X"),
    ("char", "ver_hw_subtype", "V6X000000"),
    ("char", "ver_sw", "8d8a9bb1b0f6c0a7e6f2e3b0d1c4a5f6e7d8c9b0"),
    ("char", "ver_sw_branch", "release/1.15"),
    ("uint32_t", "ver_sw_release", 0x010F02FF),
    ("char", "sys_os_name", "NuttX"),
    ("char", "sys_os_ver", "3d3d5d1ba5e6f0c9c2b57a1c4b8e7b2a3c9d0e1f"),
    ("uint32_t", "sys_os_ver_release", 0x0B0000FF),
    ("char", "sys_toolchain", "GNU GCC"),
    ("char", "sys_toolchain_ver", "9.3.1 20200408 (release)"),
    ("char", "sys_mcu", "STM32H7[4|5]xxx, rev. V"),
    ("char", "sys_uuid", "000600000000383233333039510700340029"),
    ("uint32_t", "ver_data_format", 1),
    ("int32_t", "time_ref_utc", 0),
)
"""'I' messages of the definitions section, as PX4 writes them (ver_sw_release = v1.15.2)."""

INITIAL_PARAMETERS: dict[str, int | float] = {
    "BAT1_CAPACITY": 5000.0,
    "BAT1_N_CELLS": 4,
    "BAT1_R_INTERNAL": 0.005,
    "BAT1_SOURCE": 0,
    "BAT1_V_CHARGED": 4.05,
    "BAT1_V_EMPTY": 3.5,
    "CAL_ACC0_ID": 1310988,
    "CAL_ACC0_XOFF": 0.0371,
    "CAL_ACC0_YOFF": -0.0152,
    "CAL_ACC0_ZOFF": 0.0844,
    "CAL_ACC1_ID": 1310996,
    "CAL_GYRO0_ID": 1310988,
    "CAL_GYRO0_XOFF": 0.0012,
    "CAL_GYRO1_ID": 1310996,
    "CAL_MAG0_ID": 197388,
    "CA_AIRFRAME": 0,
    "CA_ROTOR_COUNT": 4,
    "COM_ARM_WO_GPS": 1,
    "COM_DISARM_LAND": 2.0,
    "COM_RC_IN_MODE": 1,
    "EKF2_BARO_NOISE": 3.5,
    "EKF2_GPS_CTRL": 7,
    "EKF2_GPS_DELAY": 110.0,
    "EKF2_HGT_REF": 1,
    "GF_ACTION": 1,
    "LNDMC_Z_VEL_MAX": 0.5,
    "MAV_SYS_ID": 1,
    "MAV_TYPE": 2,
    "MC_PITCHRATE_D": 0.003,
    "MC_PITCHRATE_I": 0.2,
    "MC_PITCHRATE_P": 0.15,
    "MC_PITCH_P": 6.5,
    "MC_ROLLRATE_D": 0.003,
    "MC_ROLLRATE_I": 0.2,
    "MC_ROLLRATE_P": 0.15,
    "MC_ROLL_P": 6.5,
    "MC_YAWRATE_I": 0.1,
    "MC_YAWRATE_P": 0.2,
    "MC_YAW_P": 2.8,
    "MIS_TAKEOFF_ALT": 10.0,
    "MPC_LAND_SPEED": 0.7,
    "MPC_THR_HOVER": 0.42,
    "MPC_TKO_SPEED": 1.5,
    "MPC_XY_CRUISE": 5.0,
    "MPC_XY_VEL_MAX": 12.0,
    "MPC_Z_VEL_MAX_DN": 1.5,
    "MPC_Z_VEL_MAX_UP": 3.0,
    "NAV_DLL_ACT": 0,
    "NAV_RCL_ACT": 2,
    "PWM_MAIN_FUNC1": 101,
    "PWM_MAIN_FUNC2": 102,
    "PWM_MAIN_FUNC3": 103,
    "PWM_MAIN_FUNC4": 104,
    "RTL_RETURN_ALT": 30.0,
    "SDLOG_MODE": 0,
    "SDLOG_PROFILE": 1,
    "SYS_AUTOSTART": 4001,
}
"""'P' messages of the definitions section: int values are int32_t, float values float."""

PARAMETER_DEFAULTS: tuple[tuple[str, int | float, int], ...] = (
    ("BAT1_CAPACITY", -1.0, 0b01),
    ("BAT1_N_CELLS", 3, 0b01),
    ("BAT1_N_CELLS", 4, 0b10),
    ("CA_ROTOR_COUNT", 0, 0b01),
    ("CA_ROTOR_COUNT", 4, 0b10),
    ("COM_ARM_WO_GPS", 0, 0b11),
    ("MPC_THR_HOVER", 0.5, 0b11),
    ("MPC_XY_CRUISE", 5.0, 0b11),
    ("PWM_MAIN_FUNC1", 0, 0b01),
    ("PWM_MAIN_FUNC1", 101, 0b10),
    ("RTL_RETURN_ALT", 60.0, 0b11),
    ("SYS_AUTOSTART", 0, 0b01),
    ("SYS_AUTOSTART", 4001, 0b10),
)
"""'Q' messages: (name, default, default_types) with bit 0 system, bit 1 current setup."""

PARAMETER_CHANGES: tuple[tuple[float, str, int | float], ...] = (
    (0.40, "MPC_XY_CRUISE", 7.5),
    (0.90, "COM_DISARM_LAND", 1.0),
)
"""In-flight 'P' changes: (fraction of the flight, name, new value)."""

_PERF_PREFLIGHT = (
    "logger_sd_write: 1184 events, 2415083us elapsed, 2039.76us avg, min 161us max 56433us\n"
    "logger_sd_fsync: 0 events, 0us elapsed, 0.00us avg, min 0us max 0us\n"
    "ekf2: update: 31722 events, 3189403us elapsed, 100.54us avg, min 52us max 418us\n"
    "mc_att_control: cycle: 32122 events, 462411us elapsed, 14.40us avg, min 9us max 84us\n"
    "mc_rate_control: cycle: 128492 events, 1542911us elapsed, 12.01us avg, min 7us max 61us\n"
    "sensors: 128493 events, 2311862us elapsed, 17.99us avg, min 11us max 98us\n"
)
_PERF_CHUNK = 120
"""PX4 splits long 'M' values into pieces of a limited size, continued with ``is_continued``."""


class FlightLogSummary(msgspec.Struct, frozen=True):
    """What :func:`generate_flight_log` wrote.

    Attributes:
        size: Bytes written.
        duration_s: Flight duration, first to last data sample.
        start_timestamp_us: The header timestamp.
        data_counts: Number of 'D' messages per topic instance ``(name, multi_id)``.
    """

    size: int
    duration_s: float
    start_timestamp_us: int
    data_counts: dict[tuple[str, int], int]


def format_dtype(name: str, *, strip_trailing_padding: bool = False) -> np.dtype[np.void]:
    """The packed numpy dtype of one of :data:`FORMATS` (see :func:`~ulogstream.ulog.nested_dtype`).

    Args:
        name: A key of :data:`FORMATS` (nested types are resolved in it too).
        strip_trailing_padding: Leave out the top-level padding at the end, as PX4's logger
            does when it writes a 'D' message.
    """
    return nested_dtype(name, _PARSED_FORMATS, strip_trailing_padding=strip_trailing_padding)


def _smootherstep(u: FloatArray) -> FloatArray:
    """0 to 1 with zero speed and acceleration at both ends (Perlin's smootherstep)."""
    u = np.clip(u, 0.0, 1.0)
    result: FloatArray = u * u * u * (u * (u * 6.0 - 15.0) + 10.0)
    return result


class _Trajectory(msgspec.Struct, frozen=True):
    """The flight sampled on a 1 kHz grid: NED position/velocity/acceleration, attitude, thrust."""

    t: FloatArray
    pos: FloatArray
    vel: FloatArray
    acc: FloatArray
    quat: FloatArray
    rates: FloatArray
    thrust: FloatArray
    yaw: FloatArray


# Phases as fractions of the flight: on ground, climb, hover, out to the circle, circle,
# back to the centre, descend, on ground.
_T_CLIMB = (0.06, 0.22)
_T_OUT = (0.30, 0.37)
_T_CIRCLE = (0.37, 0.75)
_T_BACK = (0.75, 0.82)
_T_DESCEND = (0.84, 0.96)


def _phase(t: FloatArray, duration: float, span: tuple[float, float]) -> FloatArray:
    return _smootherstep((t / duration - span[0]) / (span[1] - span[0]))


def _trajectory(duration: float, rng: np.random.Generator) -> _Trajectory:
    # Short flights shrink with the square of their duration: accelerations stay the same.
    scale = min(1.0, duration / 60.0) ** 2
    altitude = 10.0 * scale
    radius = float(rng.uniform(10.0, 14.0)) * scale
    heading0 = float(rng.uniform(-math.pi, math.pi))
    dt = 0.001
    t = np.arange(0.0, duration + 0.05, dt)
    climb = _phase(t, duration, _T_CLIMB) - _phase(t, duration, _T_DESCEND)
    out = _phase(t, duration, _T_OUT) - _phase(t, duration, _T_BACK)
    angle = heading0 + 2.0 * math.pi * _phase(t, duration, _T_CIRCLE)
    # Out to the circle's edge at heading0, once around it, and back to the centre.
    pos = np.zeros((t.size, 3))
    pos[:, 0] = radius * out * np.cos(angle)
    pos[:, 1] = radius * out * np.sin(angle)
    pos[:, 2] = -altitude * climb
    # Light wind gusts (a few slow sinusoids) push the vehicle a little while airborne.
    frequencies = rng.uniform(0.05, 0.4, (4, 3))
    phases = rng.uniform(0.0, 2.0 * math.pi, (4, 3))
    gust = (0.15 * np.sin(2.0 * math.pi * frequencies * t[:, None, None] + phases)).sum(axis=1)
    pos += gust * climb[:, None] * np.array([1.0, 1.0, 0.3])
    vel = np.asarray(np.gradient(pos, dt, axis=0), dtype=np.float64)
    acc = np.asarray(np.gradient(vel, dt, axis=0), dtype=np.float64)
    # Yaw turns with the circle (nose along the flight path) and back for landing.
    yaw = heading0 + (angle - heading0 + math.pi / 2.0) * _phase(t, duration, (0.33, 0.40))
    yaw -= math.pi / 2.0 * _phase(t, duration, (0.78, 0.84))  # nose back to heading0
    thrust_vec = acc - np.array([0.0, 0.0, GRAVITY])
    thrust = np.linalg.norm(thrust_vec, axis=1)
    quat = _attitude(-thrust_vec / thrust[:, None], yaw)
    rates = _body_rates(quat, dt)
    return _Trajectory(t, pos, vel, acc, quat, rates, thrust, yaw)


def _attitude(body_z: FloatArray, yaw: FloatArray) -> FloatArray:
    """Quaternions (w, x, y, z) with body z along ``body_z`` and heading ``yaw`` (PX4's way)."""
    y_c = np.stack([-np.sin(yaw), np.cos(yaw), np.zeros_like(yaw)], axis=1)
    body_x = np.cross(y_c, body_z)
    body_x /= np.linalg.norm(body_x, axis=1)[:, None]
    body_y = np.cross(body_z, body_x)
    r = np.stack([body_x, body_y, body_z], axis=2)  # columns are the body axes in NED
    w = 0.5 * np.sqrt(np.maximum(1.0 + r[:, 0, 0] + r[:, 1, 1] + r[:, 2, 2], 1e-12))
    quat = np.stack(
        [
            w,
            (r[:, 2, 1] - r[:, 1, 2]) / (4.0 * w),
            (r[:, 0, 2] - r[:, 2, 0]) / (4.0 * w),
            (r[:, 1, 0] - r[:, 0, 1]) / (4.0 * w),
        ],
        axis=1,
    )
    result: FloatArray = quat / np.linalg.norm(quat, axis=1)[:, None]
    return result


def _quat_conj_mul(a: FloatArray, b: FloatArray) -> FloatArray:
    """conj(a) * b for arrays of quaternions (w, x, y, z)."""
    aw, ax, ay, az = a[:, 0], a[:, 1], a[:, 2], a[:, 3]
    bw, bx, by, bz = b[:, 0], b[:, 1], b[:, 2], b[:, 3]
    return np.stack(
        [
            aw * bw + ax * bx + ay * by + az * bz,
            aw * bx - ax * bw - ay * bz + az * by,
            aw * by + ax * bz - ay * bw - az * bx,
            aw * bz - ax * by + ay * bx - az * bw,
        ],
        axis=1,
    )


def _body_rates(quat: FloatArray, dt: float) -> FloatArray:
    delta = _quat_conj_mul(quat[:-1], quat[1:])
    rates = 2.0 * delta[:, 1:] * np.sign(delta[:, :1]) / dt
    result: FloatArray = np.vstack([rates, rates[-1:]])
    return result


def _rotate_to_body(quat: FloatArray, vec: FloatArray) -> FloatArray:
    """Express NED vectors in the body frame: R(q)^T v."""
    w, x, y, z = quat[:, 0], quat[:, 1], quat[:, 2], quat[:, 3]
    r = np.empty((quat.shape[0], 3, 3))
    r[:, 0, 0] = 1 - 2 * (y * y + z * z)
    r[:, 0, 1] = 2 * (x * y - w * z)
    r[:, 0, 2] = 2 * (x * z + w * y)
    r[:, 1, 0] = 2 * (x * y + w * z)
    r[:, 1, 1] = 1 - 2 * (x * x + z * z)
    r[:, 1, 2] = 2 * (y * z - w * x)
    r[:, 2, 0] = 2 * (x * z - w * y)
    r[:, 2, 1] = 2 * (y * z + w * x)
    r[:, 2, 2] = 1 - 2 * (x * x + y * y)
    result: FloatArray = np.einsum("nji,nj->ni", r, vec)
    return result


class _Sampler:
    """Samples the trajectory at one topic's timestamps."""

    def __init__(self, traj: _Trajectory, t_s: FloatArray) -> None:
        self._traj = traj
        self._index = np.clip(np.rint(t_s / (traj.t[1] - traj.t[0])).astype(np.int64), 0, None)
        self._index = np.minimum(self._index, traj.t.size - 1)

    def __call__(self, values: FloatArray) -> FloatArray:
        result: FloatArray = values[self._index]
        return result


def _timestamps(
    rate: _Rate, duration: float, start_us: int, rng: np.random.Generator
) -> npt.NDArray[np.int64]:
    period_us = 1e6 / rate.hz
    count = int((duration - rate.phase_s) * rate.hz) + 1
    nominal = start_us + rate.phase_s * 1e6 + np.arange(count) * period_us
    # Scheduling jitter of a few tens of microseconds, as on a real flight controller.
    jitter = rng.integers(0, 60, count)
    stamps: npt.NDArray[np.int64] = (np.rint(nominal) + jitter).astype(np.int64)
    return stamps


class _Flight:
    """Builds every topic's rows for one flight."""

    def __init__(self, duration: float, start_us: int, rng: np.random.Generator) -> None:
        self.duration = duration
        self.start_us = start_us
        self.rng = rng
        self.traj = _trajectory(duration, rng)
        self.armed_s = 0.02 * duration
        self.takeoff_s = _T_CLIMB[0] * duration
        self.landed_s = _T_DESCEND[1] * duration
        self.disarmed_s = 0.985 * duration

    def rows(self, rate: _Rate) -> npt.NDArray[np.void]:
        stamps = _timestamps(rate, self.duration, self.start_us, self.rng)
        t_s = (stamps - self.start_us) / 1e6
        rows = np.zeros(stamps.size, dtype=format_dtype(rate.name, strip_trailing_padding=True))
        rows["timestamp"] = stamps
        builder = getattr(self, "_" + rate.name)
        builder(rows, t_s, _Sampler(self.traj, t_s), rate.multi_id)
        return rows

    def _noise(self, sigma: float, shape: int | tuple[int, ...]) -> FloatArray:
        return self.rng.normal(0.0, sigma, shape)

    def _sample_stamp(self, rows: npt.NDArray[np.void], delay_us: int) -> None:
        rows["timestamp_sample"] = (
            rows["timestamp"] - delay_us - self.rng.integers(0, 200, len(rows))
        )

    def _imu(self, sample: _Sampler) -> tuple[FloatArray, FloatArray]:
        traj = self.traj
        specific_force = _rotate_to_body(
            sample(traj.quat), sample(traj.acc) - np.array([0.0, 0.0, GRAVITY])
        )
        return specific_force, sample(traj.rates)

    def _airborne(self, t_s: FloatArray) -> npt.NDArray[np.bool_]:
        result: npt.NDArray[np.bool_] = (t_s > self.takeoff_s) & (t_s < self.landed_s)
        return result

    def _armed(self, t_s: FloatArray) -> npt.NDArray[np.bool_]:
        result: npt.NDArray[np.bool_] = (t_s >= self.armed_s) & (t_s < self.disarmed_s)
        return result

    def _vibration(self, t_s: FloatArray, sigma: float) -> FloatArray:
        # Motor vibration: noise that only exists while the propellers spin.
        return self._noise(sigma, (t_s.size, 3)) * (0.1 + self._armed(t_s))[:, None]

    def _sensor_combined(
        self, rows: npt.NDArray[np.void], t_s: FloatArray, sample: _Sampler, _multi_id: int
    ) -> None:
        accel, gyro = self._imu(sample)
        rows["gyro_rad"] = gyro + self._vibration(t_s, 0.01)
        rows["gyro_integral_dt"] = 5000
        rows["accelerometer_timestamp_relative"] = 0
        rows["accelerometer_m_s2"] = accel + self._vibration(t_s, 0.25)
        rows["accelerometer_integral_dt"] = 5000

    def _vehicle_attitude(
        self, rows: npt.NDArray[np.void], t_s: FloatArray, sample: _Sampler, _multi_id: int
    ) -> None:
        self._sample_stamp(rows, 600)
        quat = sample(self.traj.quat) + self._noise(2e-4, (t_s.size, 4))
        rows["q"] = quat / np.linalg.norm(quat, axis=1)[:, None]
        rows["delta_q_reset"] = np.array([1.0, 0.0, 0.0, 0.0])
        rows["quat_reset_counter"] = 1

    def _vehicle_angular_velocity(
        self, rows: npt.NDArray[np.void], t_s: FloatArray, sample: _Sampler, _multi_id: int
    ) -> None:
        self._sample_stamp(rows, 300)
        rates = sample(self.traj.rates) + self._vibration(t_s, 0.005)
        rows["xyz"] = rates
        rows["xyz_derivative"] = np.gradient(rates, axis=0) * 100.0

    def _sensor_accel(
        self, rows: npt.NDArray[np.void], t_s: FloatArray, sample: _Sampler, multi_id: int
    ) -> None:
        self._sample_stamp(rows, 900)
        accel, _ = self._imu(sample)
        accel = accel + self._vibration(t_s, 0.3 + 0.1 * multi_id)
        rows["device_id"] = (1310988, 1310996)[multi_id]
        rows["x"], rows["y"], rows["z"] = accel[:, 0], accel[:, 1], accel[:, 2]
        rows["temperature"] = 41.5 + 3.0 * multi_id + np.linspace(0.0, 1.5, t_s.size)
        rows["samples"] = 4

    def _sensor_gyro(
        self, rows: npt.NDArray[np.void], t_s: FloatArray, sample: _Sampler, multi_id: int
    ) -> None:
        self._sample_stamp(rows, 900)
        _, gyro = self._imu(sample)
        gyro = gyro + self._vibration(t_s, 0.012 + 0.004 * multi_id)
        rows["device_id"] = (1310988, 1310996)[multi_id]
        rows["x"], rows["y"], rows["z"] = gyro[:, 0], gyro[:, 1], gyro[:, 2]
        rows["temperature"] = 41.5 + 3.0 * multi_id + np.linspace(0.0, 1.5, t_s.size)
        rows["samples"] = 8

    def _vehicle_local_position(
        self, rows: npt.NDArray[np.void], t_s: FloatArray, sample: _Sampler, _multi_id: int
    ) -> None:
        traj = self.traj
        self._sample_stamp(rows, 400)
        pos = sample(traj.pos) + self._noise(0.02, (t_s.size, 3))
        vel = sample(traj.vel) + self._noise(0.03, (t_s.size, 3))
        acc = sample(traj.acc) + self._noise(0.1, (t_s.size, 3))
        rows["ref_timestamp"] = self.start_us
        rows["ref_lat"], rows["ref_lon"] = HOME_LAT_DEG, HOME_LON_DEG
        rows["x"], rows["y"], rows["z"] = pos[:, 0], pos[:, 1], pos[:, 2]
        rows["vx"], rows["vy"], rows["vz"] = vel[:, 0], vel[:, 1], vel[:, 2]
        rows["z_deriv"] = vel[:, 2]
        rows["ax"], rows["ay"], rows["az"] = acc[:, 0], acc[:, 1], acc[:, 2]
        heading = np.angle(np.exp(1j * sample(traj.yaw)))
        rows["heading"] = heading
        rows["unaided_heading"] = heading + 0.01
        rows["heading_var"] = 1e-3
        rows["tilt_var"] = 2e-5
        rows["ref_alt"] = HOME_ALT_M
        rows["dist_bottom"] = np.maximum(-pos[:, 2], 0.0) + 0.1
        rows["eph"], rows["epv"], rows["evh"], rows["evv"] = 0.45, 0.6, 0.12, 0.1
        # PX4 publishes "no limit" as infinities and unknown terrain limits as NaN.
        rows["vxy_max"], rows["vz_max"] = math.inf, math.inf
        rows["hagl_min"], rows["hagl_max"] = math.inf, math.nan
        for name in ("xy_valid", "z_valid", "v_xy_valid", "v_z_valid"):
            rows[name] = 1
        rows["heading_good_for_control"] = 1
        rows["xy_global"], rows["z_global"] = 1, 1
        rows["dist_bottom_valid"] = 1

    def _vehicle_global_position(
        self, rows: npt.NDArray[np.void], t_s: FloatArray, sample: _Sampler, _multi_id: int
    ) -> None:
        self._sample_stamp(rows, 400)
        pos = sample(self.traj.pos) + self._noise(0.02, (t_s.size, 3))
        lat, lon = _to_geodetic(pos)
        rows["lat"], rows["lon"] = lat, lon
        rows["alt"] = HOME_ALT_M - pos[:, 2]
        rows["alt_ellipsoid"] = HOME_ALT_M + 47.6 - pos[:, 2]
        rows["eph"], rows["epv"] = 0.45, 0.6
        rows["terrain_alt"] = HOME_ALT_M
        rows["terrain_alt_valid"] = 1

    def _actuator_outputs(
        self, rows: npt.NDArray[np.void], t_s: FloatArray, sample: _Sampler, _multi_id: int
    ) -> None:
        traj = self.traj
        thrust = sample(traj.thrust) / GRAVITY * 0.42  # MPC_THR_HOVER
        rates = sample(traj.rates)
        # Quad X mixing: each motor gets the collective thrust plus a share of the body rates.
        mix = np.array([[-1.0, 1.0, 1.0], [1.0, -1.0, 1.0], [1.0, 1.0, -1.0], [-1.0, -1.0, -1.0]])
        effort = thrust[:, None] + 0.05 * rates @ mix.T + self._noise(0.004, (t_s.size, 4))
        pwm = 1000.0 + 1000.0 * np.clip(effort, 0.08, 1.0)
        armed = self._armed(t_s)[:, None]
        output = np.zeros((t_s.size, 16))
        output[:, :4] = np.where(armed, np.rint(pwm), 900.0)
        rows["noutputs"] = 8
        rows["output"] = output

    def _battery_status(
        self, rows: npt.NDArray[np.void], t_s: FloatArray, sample: _Sampler, _multi_id: int
    ) -> None:
        thrust = sample(self.traj.thrust) / GRAVITY
        # Idle draw, spinning propellers on the ground when armed, thrust-dependent in the air.
        current = np.where(self._armed(t_s), 2.5, 0.6)
        current = np.where(self._airborne(t_s), 0.6 + 16.0 * thrust**1.5, current)
        current = current + self._noise(0.15, t_s.size)
        discharged = 120.0 + np.cumsum(current) * (1000.0 / 3600.0) / 10.0  # 10 Hz samples
        remaining = 1.0 - discharged / BATTERY_CAPACITY_MAH
        cell = 3.5 + 0.7 * remaining - current * 0.005
        voltage = CELL_COUNT * cell + self._noise(0.01, t_s.size)
        rows["voltage_v"] = voltage
        rows["voltage_filtered_v"] = voltage
        rows["current_a"] = current
        rows["current_filtered_a"] = current
        rows["current_average_a"] = np.cumsum(current) / np.arange(1, t_s.size + 1)
        rows["discharged_mah"] = discharged
        rows["remaining"] = remaining
        rows["scale"] = 1.0
        rows["time_remaining_s"] = math.nan
        rows["temperature"] = math.nan
        cells = np.full((t_s.size, 14), 0.0)
        cells[:, :CELL_COUNT] = cell[:, None]
        rows["voltage_cell_v"] = cells
        rows["average_power"] = voltage * current
        rows["available_energy"] = math.nan
        rows["design_capacity"] = math.nan
        rows["nominal_voltage"] = math.nan
        rows["connected"] = 1
        rows["cell_count"] = CELL_COUNT
        rows["warning"] = 0

    def _sensor_gps(
        self, rows: npt.NDArray[np.void], t_s: FloatArray, sample: _Sampler, _multi_id: int
    ) -> None:
        self._sample_stamp(rows, 120_000)
        pos = sample(self.traj.pos) + self._noise(0.3, (t_s.size, 3))
        vel = sample(self.traj.vel) + self._noise(0.05, (t_s.size, 3))
        lat, lon = _to_geodetic(pos)
        rows["latitude_deg"], rows["longitude_deg"] = lat, lon
        rows["altitude_msl_m"] = HOME_ALT_M - pos[:, 2]
        rows["altitude_ellipsoid_m"] = HOME_ALT_M + 47.6 - pos[:, 2]
        rows["time_utc_usec"] = UTC_AT_START_US + (rows["timestamp_sample"] - self.start_us)
        rows["device_id"] = 11469065
        rows["s_variance_m_s"], rows["c_variance_rad"] = 0.35, 0.6
        rows["eph"], rows["epv"], rows["hdop"], rows["vdop"] = 0.9, 1.3, 0.7, 1.0
        rows["noise_per_ms"] = 92
        rows["jamming_indicator"] = 38
        rows["vel_m_s"] = np.hypot(vel[:, 0], vel[:, 1])
        rows["vel_n_m_s"], rows["vel_e_m_s"], rows["vel_d_m_s"] = vel[:, 0], vel[:, 1], vel[:, 2]
        rows["cog_rad"] = np.arctan2(vel[:, 1], vel[:, 0])
        rows["heading"], rows["heading_offset"], rows["heading_accuracy"] = math.nan, 0.0, 0.0
        rows["automatic_gain_control"] = 1720
        rows["fix_type"] = 3
        rows["vel_ned_valid"] = 1
        rows["satellites_used"] = self.rng.choice([14, 15], t_s.size, p=[0.7, 0.3])

    def _esc_status(
        self, rows: npt.NDArray[np.void], t_s: FloatArray, sample: _Sampler, _multi_id: int
    ) -> None:
        thrust = sample(self.traj.thrust) / GRAVITY * 0.42
        armed = self._armed(t_s)
        rows["counter"] = np.arange(t_s.size)
        rows["esc_count"] = 4
        rows["esc_connectiontype"] = 6  # DSHOT
        rows["esc_online_flags"] = 0b1111
        rows["esc_armed_flags"] = np.where(armed, 0b1111, 0)
        esc = rows["esc"]
        esc["timestamp"] = rows["timestamp"][:, None] - 800
        rpm = np.where(armed, 2500.0 + 14000.0 * thrust, 0.0)[:, None] + self._noise(
            60.0, (t_s.size, 4)
        )
        esc["esc_rpm"] = np.where(armed[:, None], rpm, 0)
        esc["esc_voltage"] = 16.1 + self._noise(0.02, (t_s.size, 4))
        esc["esc_current"] = np.where(armed[:, None], 3.5 * thrust[:, None], 0.0)
        esc["esc_temperature"] = 35.0 + np.linspace(0.0, 6.0, t_s.size)[:, None]
        esc["esc_address"] = np.arange(4)
        esc["actuator_function"] = 101 + np.arange(4)
        esc["esc_power"] = np.where(armed[:, None], np.rint(100.0 * thrust)[:, None], 0)

    def _vehicle_status(
        self, rows: npt.NDArray[np.void], t_s: FloatArray, _sample: _Sampler, _multi_id: int
    ) -> None:
        armed = self._armed(t_s)
        rows["armed_time"] = np.where(armed, self.start_us + int(self.armed_s * 1e6), 0)
        rows["takeoff_time"] = np.where(
            t_s > self.takeoff_s, self.start_us + int(self.takeoff_s * 1e6), 0
        )
        # nav_state: 17 AUTO_TAKEOFF, 4 AUTO_LOITER, 3 AUTO_MISSION, 18 AUTO_LAND.
        nav_state = np.select(
            [
                t_s < _T_CLIMB[1] * self.duration,
                t_s < _T_OUT[0] * self.duration,
                t_s < _T_BACK[1] * self.duration,
                t_s >= 0,
            ],
            [17, 4, 3, 18],
        )
        rows["nav_state"] = nav_state
        rows["nav_state_user_intention"] = nav_state
        rows["nav_state_timestamp"] = rows["timestamp"] - 1000
        rows["valid_nav_states_mask"] = 0x7E3E79F
        rows["can_set_nav_states_mask"] = 0x7E3E79F
        rows["arming_state"] = np.where(armed, 2, 1)
        rows["latest_arming_reason"] = 2
        rows["latest_disarming_reason"] = np.where(t_s >= self.disarmed_s, 3, 0)
        rows["hil_state"] = 0
        rows["vehicle_type"] = 1  # rotary wing
        rows["system_type"] = 2  # MAV_TYPE_QUADROTOR
        rows["system_id"] = 1
        rows["component_id"] = 1
        rows["safety_button_available"] = 1
        rows["safety_off"] = 1
        rows["power_input_valid"] = 1
        rows["pre_flight_checks_pass"] = 1

    def _cpuload(
        self, rows: npt.NDArray[np.void], t_s: FloatArray, _sample: _Sampler, _multi_id: int
    ) -> None:
        rows["load"] = 0.52 + 0.08 * self._armed(t_s) + self._noise(0.01, t_s.size)
        rows["ram_usage"] = 0.47 + np.linspace(0.0, 0.01, t_s.size)


def _to_geodetic(pos: FloatArray) -> tuple[FloatArray, FloatArray]:
    lat = HOME_LAT_DEG + np.degrees(pos[:, 0] / EARTH_RADIUS_M)
    lon = HOME_LON_DEG + np.degrees(
        pos[:, 1] / (EARTH_RADIUS_M * math.cos(math.radians(HOME_LAT_DEG)))
    )
    return lat, lon


# (fraction of the flight or a named moment, ULog level, MAVLink severity, text)
_MESSAGES: tuple[tuple[str | float, str, int, str], ...] = (
    (0.004, "6", 6, "[logger] /fs/microsd/log/2024-05-01/10_00_00.ulg"),
    (0.012, "4", 4, "Preflight: GPS Horizontal Pos Drift too high"),
    ("armed", "6", 6, "Armed by external command"),
    ("takeoff", "6", 6, "Takeoff detected"),
    (_T_OUT[0], "6", 6, "[navigator] Executing Mission"),
    (0.55, "7", 7, "[ekf2] reset position to GPS"),
    (_T_BACK[1], "6", 6, "[navigator] Mission finished, loitering"),
    ("landed", "6", 6, "Landing detected"),
    ("disarmed", "6", 6, "Disarmed by landing"),
)
_TAGGED_MESSAGE = (0.985, "6", 0x0147, "[commander] Mission finished, landed")
"""One tagged ('C') message with a tag as PX4's multi-instance modules use."""


def generate_flight_log(
    out: BinaryIO | Path,
    *,
    duration_s: float = 60.0,
    seed: int = 0,
    start_timestamp_us: int = DEFAULT_START_TIMESTAMP_US,
) -> FlightLogSummary:
    """Write a realistic PX4 quadrotor flight log: take-off, hover, one circle, landing.

    Args:
        out: A binary stream to write to, or the path of a file to create (overwritten).
        duration_s: Length of the flight in seconds (the flight shrinks with shorter logs).
        seed: Seeds the noise, circle size and heading; equal arguments give equal bytes.
        start_timestamp_us: Header timestamp; data follows within milliseconds.

    Returns:
        What was written.

    Raises:
        ValueError: ``duration_s`` is not positive.
        OSError: ``out`` is a path that cannot be written.
    """
    if not duration_s > 0:
        msg = f"duration_s must be positive, not {duration_s}"
        raise ValueError(msg)
    if isinstance(out, Path):
        with out.open("wb") as file:
            return generate_flight_log(
                file, duration_s=duration_s, seed=seed, start_timestamp_us=start_timestamp_us
            )
    rng = np.random.default_rng(seed)
    flight = _Flight(duration_s, start_timestamp_us, rng)
    writer = ULogWriter(out, timestamp_us=start_timestamp_us)
    _write_definitions(writer)
    msg_ids = [writer.add_logged_message(name, multi_id) for name, multi_id in SUBSCRIPTIONS]

    payloads: list[list[bytes]] = []
    stamps: list[npt.NDArray[np.int64]] = []
    for rate in _PERIODIC:
        rows = flight.rows(rate)
        raw = rows.tobytes()
        size = rows.dtype.itemsize
        payloads.append([raw[i : i + size] for i in range(0, len(raw), size)])
        stamps.append(np.asarray(rows["timestamp"], dtype=np.int64))
    others, log_rows = _other_messages(flight)
    payloads.append([row.tobytes() for row in log_rows])
    stamps.append(np.asarray(log_rows["timestamp"], dtype=np.int64))

    # Every message in time order; at equal times topics in subscription order, then the rest
    # (so mavlink_log comes before its 'L' message, as in PX4 where both come from one call).
    other_stamps = np.array([stamp for stamp, _ in others], dtype=np.int64)
    all_stamps = np.concatenate([*stamps, other_stamps])
    sources = np.concatenate(
        [np.full(len(s), i, dtype=np.int64) for i, s in enumerate(stamps)]
        + [np.full(len(others), len(stamps), dtype=np.int64)]
    )
    indices = np.concatenate(
        [np.arange(len(s), dtype=np.int64) for s in stamps] + [np.arange(len(others))]
    )
    order = np.lexsort((sources, all_stamps))
    data = writer.data
    other = len(stamps)
    for source, index in zip(sources[order].tolist(), indices[order].tolist(), strict=True):
        if source == other:
            others[index][1](writer)
        else:
            data(msg_ids[source], payloads[source][index])

    first = min(int(s[0]) for s in stamps if len(s))
    last = max(int(s[-1]) for s in stamps if len(s))
    return FlightLogSummary(
        size=writer.size,
        duration_s=(last - first) / 1e6,
        start_timestamp_us=start_timestamp_us,
        data_counts={key: len(payloads[i]) for i, key in enumerate(SUBSCRIPTIONS)},
    )


_WriteMessage = Callable[[ULogWriter], None]


def _other_messages(
    flight: _Flight,
) -> tuple[list[tuple[int, _WriteMessage]], npt.NDArray[np.void]]:
    """The data section's other messages with their times, and the ``mavlink_log`` rows."""
    start_us, duration = flight.start_us, flight.duration
    moments = {
        "armed": flight.armed_s,
        "takeoff": flight.takeoff_s + 0.3,
        "landed": flight.landed_s + 0.5,
        "disarmed": flight.disarmed_s,
    }
    others: list[tuple[int, _WriteMessage]] = []
    log_rows = np.zeros(len(_MESSAGES), dtype=format_dtype("mavlink_log"))
    for index, (when, level, severity, text) in enumerate(_MESSAGES):
        at_s = moments[when] if isinstance(when, str) else when * duration
        stamp = start_us + round(at_s * 1e6)
        log_rows[index] = (stamp, text.encode(), severity)
        others.append(
            (stamp, partial(ULogWriter.logging, level=ord(level), timestamp_us=stamp, text=text))
        )
    at, level, tag, text = _TAGGED_MESSAGE
    stamp = start_us + round(at * duration * 1e6)
    tagged = partial(
        ULogWriter.logging_tagged, level=ord(level), tag=tag, timestamp_us=stamp, text=text
    )
    others.append((stamp, tagged))
    for at, name, value in PARAMETER_CHANGES:
        stamp = start_us + round(at * duration * 1e6)
        others.append((stamp, partial(ULogWriter.parameter, name=name, value=value)))
    end_us = start_us + round(duration * 1e6)
    others.extend(
        (stamp, ULogWriter.sync)
        for stamp in range(start_us + SYNC_INTERVAL_US, end_us, SYNC_INTERVAL_US)
    )
    others.append((end_us + 1000, _write_postflight))
    return others, log_rows


def _write_postflight(writer: ULogWriter) -> None:
    _write_perf(writer, "perf_counter_postflight", _PERF_PREFLIGHT.replace("1184", "2371"))
    _write_perf(writer, "perf_top_postflight", _PERF_TOP)


_PERF_TOP = (
    "Processes: 42 total, 3 running, 39 sleeping\n"
    "CPU usage: 58.37% tasks, 2.14% sched, 39.49% idle\n"
    " PID COMMAND                   CPU(ms) CPU(%)  USED/STACK PRIO(BASE) STATE FD\n"
    "   0 Idle Task                  812432 39.493   260/  512   0 (  0)  READY  3\n"
    " 441 ekf2                       193821 11.902  3588/ 4976 237 (237)  w:sem  4\n"
    " 498 mc_rate_control             81422  5.021  1532/ 1984 255 (255)  w:sem  4\n"
)


def _write_perf(writer: ULogWriter, key: str, text: str) -> None:
    for index in range(0, len(text), _PERF_CHUNK):
        writer.info_multiple("char", key, text[index : index + _PERF_CHUNK], is_continued=index > 0)


def _write_definitions(writer: ULogWriter) -> None:
    writer.flag_bits(compat_flags=bytes([COMPAT_DEFAULT_PARAMETERS]) + bytes(7))
    for name, definition in FORMATS.items():
        writer.format(f"{name}:{definition}")
    for type_name, key, info in INFO:
        writer.info(type_name, key, info)
    _write_perf(writer, "perf_counter_preflight", _PERF_PREFLIGHT)
    _write_perf(writer, "perf_top_preflight", _PERF_TOP)
    for name, value in INITIAL_PARAMETERS.items():
        writer.parameter(name, value)
    for name, value, default_types in PARAMETER_DEFAULTS:
        writer.parameter_default(name, value, default_types)
