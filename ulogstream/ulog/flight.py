"""A flight's summary from its finished log: the flight index of a fleet.

:func:`summarize_flight` reads a ULog file once, decoding only the rows of the few topics it
needs (every other topic's messages are framed and skipped), and returns a
:class:`FlightSummary`: when the log runs (UTC from its first GPS fix), how long, how long armed,
takeoff and landing, the highest point above home, the distance flown, the lowest battery, how
many warnings and errors the vehicle logged, where home is, and what flew with which firmware.
A value the log does not hold (no GPS, no battery topic, a log older than a field) is None:
never guessed.

PX4's topics and fields, as its logger writes them (``logged_topics.cpp``; the ``msg/``
definitions): ``vehicle_status.arming_state`` (2: armed) and ``vehicle_type`` (1 rotary wing,
2 fixed wing, 3 rover) with ``is_vtol``; ``vehicle_land_detected.landed``;
``vehicle_local_position`` (NED metres from its reference: altitude is ``-z``) with
``xy_valid``/``z_valid``; ``home_position`` (``lat``, ``lon``, ``alt``, and ``z`` in the local
frame); ``battery_status`` (``voltage_v``, ``remaining`` 0-1, ``connected``); logged strings at
levels ``'0'``-``'7'`` (syslog's: 4 warning, 3 and below errors).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Final

import numpy as np

from ulogstream.ulog.events import DataRows, FileHeader, Info, LoggedString
from ulogstream.ulog.gps_time import GPS_UTC_TOPICS, first_gps_fix
from ulogstream.ulog.parser import RowSelection, ULogParser

if TYPE_CHECKING:
    from pathlib import Path

    import numpy.typing as npt

    from ulogstream.ulog.events import Subscription

    Topics = dict[str, tuple[npt.NDArray[np.void], npt.NDArray[np.float64]]]
    """Each decoded topic's rows and their timestamps in seconds."""

TOPICS: Final = frozenset(
    {
        "vehicle_status",
        "vehicle_land_detected",
        "vehicle_local_position",
        "home_position",
        "battery_status",
        *GPS_UTC_TOPICS,
    }
)
"""The topics whose rows a summary decodes (instance 0 of each)."""

ARMING_STATE_ARMED: Final = 2
VEHICLE_TYPES: Final = {1: "rotary wing", 2: "fixed wing", 3: "rover"}
"""``vehicle_status.vehicle_type`` in words (``is_vtol`` makes any of them ``vtol``)."""
LEVEL_WARNING: Final = 4
"""syslog's warning level: 4; 0-3 are errors (emergency, alert, critical, error)."""
DISTANCE_STEP_S: Final = 1.0
"""Positions this far apart are summed into the distance flown, so that estimator noise at
50 Hz does not add up to metres on the ground."""
_CHUNK: Final = 1 << 20
FlightJson = dict[str, str | int | float | None]
"""A :class:`FlightSummary` as JSON (:meth:`FlightSummary.as_json`)."""
_RELEASE: Final = 255
_RELEASE_KINDS: Final = ("dev", "alpha", "beta", "rc")
"""``ver_sw_release``'s last byte: 0 dev, 64 alpha, 128 beta, 192 rc, 255 a release."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FlightSummary:
    """What a finished log tells of its flight; None where the log does not say.

    Attributes:
        start_time: UTC of the log's start (its header's timestamp, as pyulog and Flight Review
            take it), ISO 8601, from the first GPS fix.
        end_time: UTC of its last data.
        duration_s: From the start to the last data.
        armed_s: Time armed (``vehicle_status.arming_state``).
        takeoff_time: UTC of the first takeoff (``vehicle_land_detected``), ISO 8601.
        landing_time: UTC of the last landing.
        takeoff_s: The first takeoff, seconds after the log's start.
        landing_s: The last landing, seconds after the log's start.
        max_altitude_m: Highest point above home (``vehicle_local_position``).
        distance_m: Horizontal distance flown (positions 1 s apart).
        min_battery_v: Lowest battery voltage while connected.
        min_battery_remaining: Lowest remaining charge, 0-1.
        warnings: Logged strings at warning level.
        errors: Logged strings at error level or worse.
        home_lat: Home latitude in degrees.
        home_lon: Home longitude in degrees.
        home_alt_m: Home altitude (AMSL) in metres.
        vehicle_type: ``rotary wing``, ``fixed wing``, ``rover``, ``vtol``.
        firmware: PX4's release (``v1.15.2``), else its git hash (``ver_sw``).
    """

    start_time: str | None = None
    end_time: str | None = None
    duration_s: float | None = None
    armed_s: float | None = None
    takeoff_time: str | None = None
    landing_time: str | None = None
    takeoff_s: float | None = None
    landing_s: float | None = None
    max_altitude_m: float | None = None
    distance_m: float | None = None
    min_battery_v: float | None = None
    min_battery_remaining: float | None = None
    warnings: int = 0
    errors: int = 0
    home_lat: float | None = None
    home_lon: float | None = None
    home_alt_m: float | None = None
    vehicle_type: str | None = None
    firmware: str | None = None

    def as_json(self) -> FlightJson:
        """The summary as a JSON object (the sidecar, ``meta/log_finished``'s ``flight``)."""
        return asdict(self)


def _wanted(subscription: Subscription) -> RowSelection:
    """Decode instance 0 of :data:`TOPICS`; frame and skip everything else."""
    if subscription.name in TOPICS and subscription.multi_id == 0:
        return RowSelection.ALL
    return RowSelection.NONE


def summarize_flight(path: Path) -> FlightSummary:
    """The flight summary of the ULog file at ``path`` (blocking: reads it once).

    Raises:
        OSError: It cannot be read.
        ULogFormatError: It is not a ULog file.
    """
    parser = ULogParser(rows=_wanted)
    rows: dict[str, list[DataRows]] = {}
    info: dict[str, object] = {}
    warnings = errors = 0
    first_us: int | None = None
    last_us = 0
    with path.open("rb") as file:
        while chunk := file.read(_CHUNK):
            for event in parser.receive_bytes(chunk):
                kind = type(event)
                if kind is DataRows:
                    assert isinstance(event, DataRows)  # noqa: S101 (for the type checker)
                    rows.setdefault(event.subscription.name, []).append(event)
                elif kind is LoggedString:
                    assert isinstance(event, LoggedString)  # noqa: S101
                    level = event.level - 48 if event.level >= ord("0") else event.level
                    warnings += level == LEVEL_WARNING
                    errors += level < LEVEL_WARNING
                elif kind is Info:
                    assert isinstance(event, Info)  # noqa: S101
                    info[event.key] = event.value
                elif kind is FileHeader:
                    assert isinstance(event, FileHeader)  # noqa: S101
                    first_us = event.timestamp_us
    counted = [count.last_timestamp_us for count in parser.topic_counts() if count.samples]
    last_us = max([*counted, first_us or 0])  # every topic's rows are counted, decoded or not
    topics = {name: _joined(parts) for name, parts in rows.items()}
    return _summary(
        topics, info, first_us=first_us, last_us=last_us, warnings=warnings, errors=errors
    )


def _joined(parts: list[DataRows]) -> tuple[npt.NDArray[np.void], npt.NDArray[np.float64]]:
    """One topic's rows and their timestamps in seconds."""
    table = np.concatenate([part.rows for part in parts])
    seconds = np.concatenate([part.timestamps_us for part in parts]).astype(np.float64) / 1e6
    return table, seconds


def _summary(
    topics: Topics,
    info: dict[str, object],
    *,
    first_us: int | None,
    last_us: int,
    warnings: int,
    errors: int,
) -> FlightSummary:
    start_s = None if first_us is None else first_us / 1e6
    utc_offset_s = _utc_offset_s(topics)

    def utc(seconds: float | None) -> str | None:
        if seconds is None or utc_offset_s is None:
            return None
        moment = datetime.fromtimestamp(seconds + utc_offset_s, UTC)
        return moment.isoformat(timespec="seconds").replace("+00:00", "Z")

    def since_start(seconds: float | None) -> float | None:
        return None if seconds is None or start_s is None else round(seconds - start_s, 3)

    takeoff, landing = _takeoff_and_landing(topics)
    home = _home(topics)
    battery = _battery(topics)
    return FlightSummary(
        start_time=utc(start_s),
        end_time=utc(last_us / 1e6) if start_s is not None else None,
        duration_s=None if first_us is None else round((last_us - first_us) / 1e6, 3),
        armed_s=_armed_s(topics),
        takeoff_time=utc(takeoff),
        landing_time=utc(landing),
        takeoff_s=since_start(takeoff),
        landing_s=since_start(landing),
        max_altitude_m=_max_altitude_m(topics),
        distance_m=_distance_m(topics),
        min_battery_v=battery[0],
        min_battery_remaining=battery[1],
        warnings=warnings,
        errors=errors,
        home_lat=home[0],
        home_lon=home[1],
        home_alt_m=home[2],
        vehicle_type=_vehicle_type(topics),
        firmware=_firmware(info),
    )


def _field(
    topics: Topics, topic: str, name: str
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]] | None:
    """The values of ``topic``'s field ``name`` (as floats) and their times (None: not logged)."""
    found = topics.get(topic)
    if found is None or found[0].dtype.names is None or name not in found[0].dtype.names:
        return None
    table, seconds = found
    return table[name].astype(np.float64), seconds


def _utc_offset_s(topics: Topics) -> float | None:
    """UTC minus boot time in seconds, from the first GPS fix (None: no fix logged)."""
    for topic in sorted(GPS_UTC_TOPICS):
        found = topics.get(topic)
        if found is None:
            continue
        table, seconds = found
        fix = first_gps_fix(table, (seconds * 1e6).round().astype(np.uint64))
        if fix is not None:
            utc_us, boot_us = fix
            return (utc_us - boot_us) / 1e6
    return None


def _armed_s(topics: Topics) -> float | None:
    found = _field(topics, "vehicle_status", "arming_state")
    if found is None or len(found[1]) == 0:
        return None
    states, seconds = found
    armed = states[:-1] == ARMING_STATE_ARMED
    return round(float(np.sum(np.diff(seconds)[armed])), 3)


def _takeoff_and_landing(topics: Topics) -> tuple[float | None, float | None]:
    """The first takeoff and the last landing (``vehicle_land_detected.landed`` changing)."""
    found = _field(topics, "vehicle_land_detected", "landed")
    if found is None or len(found[1]) < 2:  # noqa: PLR2004
        return None, None
    landed, seconds = found
    landed = landed.astype(bool)
    changes = np.flatnonzero(landed[1:] != landed[:-1]) + 1
    takeoffs = [i for i in changes if not landed[i]]
    landings = [i for i in changes if landed[i]]
    takeoff = float(seconds[takeoffs[0]]) if takeoffs else None
    landing = float(seconds[landings[-1]]) if landings else None
    return takeoff, landing


def _max_altitude_m(topics: Topics) -> float | None:
    """The highest point above home: ``home.z - z`` (NED), home the first valid z without it."""
    z = _field(topics, "vehicle_local_position", "z")
    valid = _field(topics, "vehicle_local_position", "z_valid")
    if z is None:
        return None
    heights = z[0].astype(np.float64)
    if valid is not None:
        heights = heights[valid[0].astype(bool)]
    heights = heights[np.isfinite(heights)]
    if len(heights) == 0:
        return None
    home_z = _field(topics, "home_position", "z")
    ground = float(home_z[0][-1]) if home_z is not None and len(home_z[0]) else float(heights[0])
    return round(float(ground - heights.min()), 2)


def _distance_m(topics: Topics) -> float | None:
    """Horizontal distance through positions :data:`DISTANCE_STEP_S` apart (valid ones)."""
    x = _field(topics, "vehicle_local_position", "x")
    y = _field(topics, "vehicle_local_position", "y")
    if x is None or y is None:
        return None
    seconds = x[1]
    keep = np.isfinite(x[0]) & np.isfinite(y[0])
    valid = _field(topics, "vehicle_local_position", "xy_valid")
    if valid is not None:
        keep &= valid[0].astype(bool)
    xs, ys, seconds = x[0][keep].astype(np.float64), y[0][keep].astype(np.float64), seconds[keep]
    if len(seconds) < 2:  # noqa: PLR2004
        return None if len(seconds) == 0 else 0.0
    steps = np.floor((seconds - seconds[0]) / DISTANCE_STEP_S)
    picked = np.flatnonzero(np.diff(steps, prepend=-1.0) > 0)
    picked = np.append(picked, len(seconds) - 1) if picked[-1] != len(seconds) - 1 else picked
    return round(float(np.sum(np.hypot(np.diff(xs[picked]), np.diff(ys[picked])))), 1)


def _battery(topics: Topics) -> tuple[float | None, float | None]:
    """The lowest voltage and remaining charge while a battery is connected."""
    voltage = _field(topics, "battery_status", "voltage_v")
    remaining = _field(topics, "battery_status", "remaining")
    connected = _field(topics, "battery_status", "connected")
    keep: npt.NDArray[np.bool_] | None = None
    if connected is not None:
        keep = connected[0].astype(bool)
    lowest_v = lowest_remaining = None
    if voltage is not None:
        values = voltage[0].astype(np.float64)
        ok = np.isfinite(values) & (values > 0)
        if keep is not None:
            ok &= keep
        if ok.any():
            lowest_v = round(float(values[ok].min()), 3)
    if remaining is not None:
        values = remaining[0].astype(np.float64)
        ok = np.isfinite(values) & (values >= 0) & (values <= 1)
        if keep is not None:
            ok &= keep
        if ok.any():
            lowest_remaining = round(float(values[ok].min()), 3)
    return lowest_v, lowest_remaining


def _home(topics: Topics) -> tuple[float | None, float | None, float | None]:
    """The last home position logged: latitude, longitude (degrees), altitude (m AMSL)."""
    values = []
    for name in ("lat", "lon", "alt"):
        found = _field(topics, "home_position", name)
        value = float(found[0][-1]) if found is not None and len(found[0]) else None
        values.append(None if value is None or not math.isfinite(value) else value)
    lat, lon, alt = values
    if lat == 0.0 and lon == 0.0:  # never set
        return None, None, None
    return (
        None if lat is None else round(lat, 7),
        None if lon is None else round(lon, 7),
        None if alt is None else round(alt, 2),
    )


def _vehicle_type(topics: Topics) -> str | None:
    vtol = _field(topics, "vehicle_status", "is_vtol")
    if vtol is not None and len(vtol[0]) and bool(vtol[0][-1]):
        return "vtol"
    kind = _field(topics, "vehicle_status", "vehicle_type")
    if kind is None or len(kind[0]) == 0:
        return None
    return VEHICLE_TYPES.get(int(kind[0][-1]))


def _firmware(info: dict[str, object]) -> str | None:
    """PX4's release from ``ver_sw_release`` (0xMMmmppTT), else ``ver_sw``."""
    release = info.get("ver_sw_release")
    if isinstance(release, int) and release:
        major, minor, patch, kind = (release >> shift & 255 for shift in (24, 16, 8, 0))
        return f"v{major}.{minor}.{patch}" + (
            "" if kind == _RELEASE else f"-{_RELEASE_KINDS[kind // 64]}"
        )
    software = info.get("ver_sw")
    return software if isinstance(software, str) and software else None
