"""A flight's summary from its finished log: the flight index of a fleet.

:class:`FlightSummarizer` folds a ULog file's bytes once, decoding only the rows of the few
topics it needs (every other topic's messages are framed and skipped), into a
:class:`FlightSummary`: when the log runs (UTC from its first GPS fix), how long, how long armed,
takeoff and landing, the highest point above home, the distance flown, the lowest battery, how
many warnings and errors the vehicle logged, where home is, and what flew with which firmware.
A value the log does not hold (no GPS, no battery topic, a log older than a field) is None:
never guessed. It runs at the end of every log, so it needs neither numpy nor the parser: one
``struct`` call per wanted row.

PX4's topics and fields, as its logger writes them (``logged_topics.cpp``; the ``msg/``
definitions): ``vehicle_status.arming_state`` (2: armed) and ``vehicle_type`` (1 rotary wing,
2 fixed wing, 3 rover) with ``is_vtol``; ``vehicle_land_detected.landed``;
``vehicle_local_position`` (NED metres from its reference: altitude is ``-z``) with
``xy_valid``/``z_valid``; ``home_position`` (``lat``, ``lon``, ``alt``, and ``z`` in the local
frame); ``battery_status`` (``voltage_v``, ``remaining`` 0-1, ``connected``); logged strings at
levels ``'0'``-``'7'`` (syslog's: 4 warning, 3 and below errors).
"""

from __future__ import annotations

import itertools
import math
import struct
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Final

import msgspec

from ulogstream.errors import ULogFormatError
from ulogstream.ulog.dtypes import compile_format, parse_format
from ulogstream.ulog.events import FieldDefinition
from ulogstream.ulog.gps_time import GPS_UTC_FIELD, GPS_UTC_TOPICS, MIN_PLAUSIBLE_UTC_US
from ulogstream.ulog.spec import HEADER_SIZE, MAGIC, MESSAGE_HEADER_SIZE, MessageType

if TYPE_CHECKING:
    from collections.abc import Callable

    from ulogstream.ulog.events import FormatDefined

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
"""The topics whose rows a summary decodes (instance 0 of each; :data:`FIELDS` of them)."""

ARMING_STATE_ARMED: Final = 2
VEHICLE_TYPES: Final = {1: "rotary wing", 2: "fixed wing", 3: "rover"}
"""``vehicle_status.vehicle_type`` in words (``is_vtol`` makes any of them ``vtol``)."""
LEVEL_WARNING: Final = 4
"""syslog's warning level: 4; 0-3 are errors (emergency, alert, critical, error)."""
DISTANCE_STEP_S: Final = 1.0
"""Positions this far apart are summed into the distance flown, so that estimator noise at
50 Hz does not add up to metres on the ground."""
FlightJson = dict[str, str | int | float | None]
"""A :class:`FlightSummary` as JSON (:meth:`FlightSummary.as_json`)."""
_RELEASE: Final = 255
_RELEASE_KINDS: Final = ("dev", "alpha", "beta", "RC")
"""``ver_sw_release``'s last byte: from 0 dev, 64 alpha, 128 beta, 192 RC; 255 a release."""


class FlightSummary(msgspec.Struct, frozen=True, kw_only=True):
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
        dropout_s: Time the log marks as lost (its dropout messages): what is still missing.
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
    dropout_s: float = 0.0
    home_lat: float | None = None
    home_lon: float | None = None
    home_alt_m: float | None = None
    vehicle_type: str | None = None
    firmware: str | None = None

    def as_json(self) -> FlightJson:
        """The summary as a JSON object (the sidecar, ``meta/log_finished``'s ``flight``)."""
        return msgspec.structs.asdict(self)


_NUMPY_TO_STRUCT: Final = {
    "i1": "b",
    "u1": "B",
    "<i2": "h",
    "<u2": "H",
    "<i4": "i",
    "<u4": "I",
    "<i8": "q",
    "<u8": "Q",
    "<f4": "f",
    "<f8": "d",
    "?": "?",
}
"""The scalar types of :class:`~ulogstream.ulog.dtypes.CompiledFormat` as ``struct`` codes."""

FIELDS: Final = {
    "vehicle_status": ("arming_state", "vehicle_type", "is_vtol"),
    "vehicle_land_detected": ("landed",),
    "vehicle_local_position": ("x", "y", "z", "xy_valid", "z_valid"),
    "home_position": ("lat", "lon", "alt", "z"),
    "battery_status": ("voltage_v", "remaining", "connected"),
    "vehicle_gps_position": ("time_utc_usec",),
    "sensor_gps": ("time_utc_usec",),
}
"""The fields a summary reads of each topic in :data:`TOPICS` (those a log has)."""

_unpack_header: Final = struct.Struct("<HB").unpack_from
_unpack_data_prefix: Final = struct.Struct("<HBHQ").unpack_from
"""A message header, then (in a 'D') its msg_id and the row's first field, PX4's timestamp."""
_DATA_PREFIX_SIZE: Final = 13
_unpack_u64: Final = struct.Struct("<Q").unpack_from
_unpack_subscription: Final = struct.Struct("<BH").unpack_from
_unpack_logging: Final = struct.Struct("<BQ").unpack_from
_unpack_tagged: Final = struct.Struct("<BHQ").unpack_from

Row = tuple[float, dict[str, float]]
"""One decoded row: its time in seconds and the fields read."""


class _Decoder(msgspec.Struct):
    """Reads the wanted fields of one subscription's rows."""

    topic: str
    names: tuple[str, ...]
    unpack: Callable[[bytes | memoryview, int], tuple[float, ...]]
    size: int


class FlightSummarizer:
    """Folds a log's bytes, fed in any chunks, into its :class:`FlightSummary` (sans-IO).

    No numpy (this runs at the end of every log): every message is framed by its header, and
    only the rows of the wanted topics are unpacked, each with one ``struct`` call for its
    wanted fields. A message that cannot be framed (a damaged or cut log) ends the fold: the
    summary covers what came before.
    """

    def __init__(self) -> None:
        self.formats: dict[str, FormatDefined] = {}
        self.subscriptions: dict[int, tuple[int, _Decoder | None]] = {}
        """Each msg_id's ``uint64`` timestamp offset in its rows (-1: none usable) and the
        decoder of its wanted fields (None: none wanted)."""
        self._timestamp_only: set[int] = set()
        """The msg_ids subscribed as ``(0, None)``: PX4's layout, nothing wanted. Most topics
        are; their rows take the fold's shortest path."""
        self.rows: dict[str, list[Row]] = {}
        self.info: dict[str, object] = {}
        self.first_us: int | None = None
        self.last_us = 0
        self.warnings = 0
        self.errors = 0
        self.dropout_ms = 0
        self._pending = b""
        self._header = True
        self._damaged = False

    def feed(self, data: bytes) -> None:
        """Take the log's next bytes.

        Raises:
            ULogFormatError: The log does not begin with a ULog header.
        """
        if self._damaged:
            return
        data = self._pending + data if self._pending else data
        if self._header:
            if len(data) < HEADER_SIZE:
                self._pending = data
                return
            if not data.startswith(MAGIC[:7]):
                msg = "not a ULog file (no ULog header)"
                raise ULogFormatError(msg, offset=0)
            (self.first_us,) = _unpack_u64(data, 8)
            self._header = False
            data = data[HEADER_SIZE:]
        used = self._messages(data)
        if used < 0:
            self._damaged = True
            self._pending = b""
        else:
            self._pending = data[used:]

    def _messages(self, data: bytes) -> int:
        """Handle the whole messages in ``data``; the bytes used, -1 at damage.

        One ``struct`` call frames a message and, for a 'D', reads its msg_id and the timestamp
        PX4 puts first in every row; only a wanted row costs another.
        """
        end = len(data)
        pos = 0
        view = memoryview(data)
        subscriptions = self.subscriptions
        timestamp_only = self._timestamp_only
        last = self.last_us
        data_type = MessageType.DATA
        while pos + MESSAGE_HEADER_SIZE <= end:
            if pos + _DATA_PREFIX_SIZE <= end:
                size, kind, msg_id, stamp = _unpack_data_prefix(data, pos)
            else:
                (size, kind), msg_id, stamp = _unpack_header(data, pos), -1, 0
            stop = pos + MESSAGE_HEADER_SIZE + size
            if stop > end:
                break
            if kind == data_type:
                if msg_id in timestamp_only:
                    if stamp > last and size >= _DATA_PREFIX_SIZE - MESSAGE_HEADER_SIZE:
                        last = stamp
                    pos = stop
                    continue
                subscription = subscriptions.get(msg_id)
                if subscription is not None:
                    offset, decoder = subscription
                    if offset != 0:  # the row's timestamp is elsewhere, or unusable (-1)
                        at = pos + _DATA_PREFIX_SIZE - 8 + offset
                        stamp = _unpack_u64(data, at)[0] if offset > 0 and at + 8 <= stop else 0
                    elif size < _DATA_PREFIX_SIZE - MESSAGE_HEADER_SIZE:
                        stamp = 0
                    if stamp > last:  # noqa: PLR1730 (a builtin call costs more in this loop)
                        last = stamp
                    if decoder is not None and size - 2 >= decoder.size:
                        self._row(decoder, view[pos + 5 : stop], stamp)
            elif not self._other(kind, view[pos + MESSAGE_HEADER_SIZE : stop], pos):
                self.last_us = last
                return -1
            pos = stop
        self.last_us = last
        return pos

    def _row(self, decoder: _Decoder, payload: memoryview, stamp: int) -> None:
        values = decoder.unpack(payload, 0)
        self.rows.setdefault(decoder.topic, []).append(
            (stamp / 1e6, dict(zip(decoder.names, values, strict=True)))
        )

    def _other(self, kind: int, payload: memoryview, pos: int) -> bool:
        """Handle a message other than 'D'; False when it cannot be a ULog message."""
        if kind == MessageType.FORMAT:
            text = bytes(payload).decode(errors="replace")
            defined = parse_format(text, offset=pos)
            self.formats[defined.name] = defined
        elif kind == MessageType.ADD_LOGGED_MSG:
            if len(payload) < 3:  # noqa: PLR2004
                return False
            multi_id, msg_id = _unpack_subscription(payload, 0)
            self._subscribe(msg_id, multi_id, bytes(payload[3:]).decode(errors="replace"))
        elif kind == MessageType.DROPOUT and len(payload) >= 2:  # noqa: PLR2004
            self.dropout_ms += payload[0] | payload[1] << 8
        elif kind == MessageType.INFO:
            self._info(bytes(payload))
        elif (kind == MessageType.LOGGING and len(payload) >= 9) or (  # noqa: PLR2004
            kind == MessageType.LOGGING_TAGGED and len(payload) >= 11  # noqa: PLR2004
        ):
            self._level(payload[0])  # 'L' and 'C' both begin with their level
        elif kind not in _KNOWN_TYPES:
            return False
        return True

    def _level(self, level: int) -> None:
        level = level - ord("0") if level >= ord("0") else level
        self.warnings += level == LEVEL_WARNING
        self.errors += level < LEVEL_WARNING

    def _info(self, payload: bytes) -> None:
        if not payload:
            return
        key_end = 1 + payload[0]
        key_type, _, key = payload[1:key_end].decode(errors="replace").partition(" ")
        value = payload[key_end:]
        if key_type.startswith("char"):
            self.info[key] = value.decode(errors="replace").rstrip("\x00")
        elif key_type == "uint32_t" and len(value) >= 4:  # noqa: PLR2004
            self.info[key] = int.from_bytes(value[:4], "little")

    def _subscribe(self, msg_id: int, multi_id: int, name: str) -> None:
        wanted = FIELDS.get(name, ()) if multi_id == 0 else ()
        self._timestamp_only.discard(msg_id)  # a msg_id subscribed again is what it says now
        defined = self.formats.get(name)
        if not wanted and defined is not None and defined.fields[:1] == (_LEADING_TIMESTAMP,):
            self.subscriptions[msg_id] = (0, None)  # PX4's layout: nothing to compile
            self._timestamp_only.add(msg_id)
            return
        try:
            compiled = compile_format(name, self.formats)
        except ULogFormatError:
            self.subscriptions[msg_id] = (-1, None)
            return
        stamp = compiled.timestamp
        offset = stamp.offset if stamp is not None and stamp.type_name == "uint64_t" else -1
        fields = [
            (at, code, field)
            for field, kind, at in zip(
                compiled.names, compiled.types, compiled.offsets, strict=True
            )
            if field in wanted and (code := _NUMPY_TO_STRUCT.get(kind)) is not None
        ]
        decoder = None
        if fields:
            fields.sort()
            layout, end = "<", 0
            for at, code, _ in fields:
                layout += f"{at - end}x{code}" if at > end else code
                end = at + struct.calcsize(f"<{code}")
            names = tuple(field for _, _, field in fields)
            decoder = _Decoder(name, names, struct.Struct(layout).unpack_from, end)
        self.subscriptions[msg_id] = (offset, decoder)

    def summary(self) -> FlightSummary:
        """The summary of the bytes fed so far."""
        return _summary(self)


_KNOWN_TYPES: Final = frozenset(int(kind) for kind in MessageType)
_LEADING_TIMESTAMP: Final = FieldDefinition("uint64_t", None, "timestamp")
"""The first field of every PX4 topic: its rows' timestamps are at offset 0."""


def _summary(walk: FlightSummarizer) -> FlightSummary:
    first_us = walk.first_us
    last_us = max(walk.last_us, first_us or 0)
    start_s = None if first_us is None else first_us / 1e6
    rows = walk.rows
    utc_offset_s = _utc_offset_s(rows)

    def utc(seconds: float | None) -> str | None:
        if seconds is None or utc_offset_s is None:
            return None
        moment = datetime.fromtimestamp(seconds + utc_offset_s, UTC)
        return moment.isoformat(timespec="seconds").replace("+00:00", "Z")

    def since_start(seconds: float | None) -> float | None:
        return None if seconds is None or start_s is None else round(seconds - start_s, 3)

    takeoff, landing = _takeoff_and_landing(rows.get("vehicle_land_detected", []))
    home = _home(rows.get("home_position", []))
    battery = _battery(rows.get("battery_status", []))
    position = rows.get("vehicle_local_position", [])
    return FlightSummary(
        start_time=utc(start_s),
        end_time=utc(last_us / 1e6) if start_s is not None else None,
        duration_s=None if first_us is None else round((last_us - first_us) / 1e6, 3),
        armed_s=_armed_s(rows.get("vehicle_status", [])),
        takeoff_time=utc(takeoff),
        landing_time=utc(landing),
        takeoff_s=since_start(takeoff),
        landing_s=since_start(landing),
        max_altitude_m=_max_altitude_m(position, rows.get("home_position", [])),
        distance_m=_distance_m(position),
        min_battery_v=battery[0],
        min_battery_remaining=battery[1],
        warnings=walk.warnings,
        errors=walk.errors,
        dropout_s=walk.dropout_ms / 1000,
        home_lat=home[0],
        home_lon=home[1],
        home_alt_m=home[2],
        vehicle_type=_vehicle_type(rows.get("vehicle_status", [])),
        firmware=_firmware(walk.info),
    )


def _utc_offset_s(rows: dict[str, list[Row]]) -> float | None:
    """UTC minus boot time in seconds, from the first plausible GPS fix (None: none logged)."""
    for topic in sorted(GPS_UTC_TOPICS):
        for seconds, values in rows.get(topic, []):
            utc_us = values.get(GPS_UTC_FIELD, 0)
            if utc_us >= MIN_PLAUSIBLE_UTC_US:
                return utc_us / 1e6 - seconds
    return None


def _armed_s(status: list[Row]) -> float | None:
    if not status or "arming_state" not in status[0][1]:
        return None
    armed = sum(
        later - seconds
        for (seconds, values), (later, _) in itertools.pairwise(status)
        if values["arming_state"] == ARMING_STATE_ARMED
    )
    return round(armed, 3)


def _takeoff_and_landing(land: list[Row]) -> tuple[float | None, float | None]:
    """The first takeoff and the last landing (``vehicle_land_detected.landed`` changing)."""
    takeoff = landing = None
    for (_, before), (seconds, now) in itertools.pairwise(land):
        if bool(before["landed"]) != bool(now["landed"]):
            if now["landed"]:
                landing = seconds
            elif takeoff is None:
                takeoff = seconds
    return takeoff, landing


def _max_altitude_m(position: list[Row], home: list[Row]) -> float | None:
    """The highest point above home: ``home.z - z`` (NED), home the first valid z without it."""
    heights = [
        values["z"]
        for _, values in position
        if "z" in values and values.get("z_valid", 1) and math.isfinite(values["z"])
    ]
    if not heights:
        return None
    home_z = home[-1][1].get("z") if home else None
    ground = heights[0] if home_z is None or not math.isfinite(home_z) else home_z
    return round(ground - min(heights), 2)


def _distance_m(position: list[Row]) -> float | None:
    """Horizontal distance through positions :data:`DISTANCE_STEP_S` apart (valid ones)."""
    points = [
        (seconds, values["x"], values["y"])
        for seconds, values in position
        if "x" in values
        and "y" in values
        and values.get("xy_valid", 1)
        and math.isfinite(values["x"])
        and math.isfinite(values["y"])
    ]
    if len(points) < 2:  # noqa: PLR2004
        return None if not points else 0.0
    picked = [points[0]]
    for point in points[1:]:
        if point[0] - picked[-1][0] >= DISTANCE_STEP_S:
            picked.append(point)
    if picked[-1] is not points[-1]:
        picked.append(points[-1])
    distance = sum(
        math.hypot(x1 - x0, y1 - y0) for (_, x0, y0), (_, x1, y1) in itertools.pairwise(picked)
    )
    return round(distance, 1)


def _battery(battery: list[Row]) -> tuple[float | None, float | None]:
    """The lowest voltage and remaining charge while a battery is connected."""
    connected = [values for _, values in battery if values.get("connected", 1)]
    volts = [
        v for values in connected if math.isfinite(v := values.get("voltage_v", math.nan)) and v > 0
    ]
    charge = [r for values in connected if 0 <= (r := values.get("remaining", math.nan)) <= 1]
    return (
        round(min(volts), 3) if volts else None,
        round(min(charge), 3) if charge else None,
    )


def _home(home: list[Row]) -> tuple[float | None, float | None, float | None]:
    """The last home position logged: latitude, longitude (degrees), altitude (m AMSL)."""
    if not home:
        return None, None, None
    values = home[-1][1]
    lat, lon, alt = (values.get(name) for name in ("lat", "lon", "alt"))
    if lat is None or lon is None or (lat == 0.0 and lon == 0.0):  # never set
        return None, None, None
    finite = [None if v is None or not math.isfinite(v) else v for v in (lat, lon, alt)]
    return (
        None if finite[0] is None else round(finite[0], 7),
        None if finite[1] is None else round(finite[1], 7),
        None if finite[2] is None else round(finite[2], 2),
    )


def _vehicle_type(status: list[Row]) -> str | None:
    if not status:
        return None
    values = status[-1][1]
    if values.get("is_vtol"):
        return "vtol"
    kind = values.get("vehicle_type")
    return None if kind is None else VEHICLE_TYPES.get(int(kind))


def _firmware(info: dict[str, object]) -> str | None:
    """PX4's release from ``ver_sw_release``, else its git hash (``ver_sw``)."""
    release = info.get("ver_sw_release")
    if isinstance(release, int) and release:
        return version_string(release)
    software = info.get("ver_sw")
    return software if isinstance(software, str) and software else None


def version_string(release: int) -> str:
    """A PX4 ``ver_sw_release`` word as ``vX.Y.Z`` plus its type.

    The low byte is the type: below 64 development, below 128 alpha, below 192 beta,
    below 255 release candidate, 255 release (PX4's ``px4_firmware_version``).
    """
    major, minor, patch, kind = (release >> shift & 255 for shift in (24, 16, 8, 0))
    label = "" if kind == _RELEASE else f" ({_RELEASE_KINDS[kind // 64]})"
    return f"v{major}.{minor}.{patch}{label}"
