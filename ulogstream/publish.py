"""What goes to MQTT: topic names, payloads and rate caps for parser events (pure, time as input).

:class:`PublishPolicy` turns :mod:`ulogstream.ulog.events` values into :class:`MqttMessage`
values as described in ``docs/mqtt.md``. It does no I/O and reads no clock: ``now`` is the
receiver's monotonic clock in seconds, passed in by the caller, and the wall-clock anchor of a log
is given to :meth:`PublishPolicy.log_started`.

Rate caps work per topic instance ``(name, multi_id)`` in receiver time with latest-value
conflation. A batch arriving while the instance's slot is open publishes its newest row at once,
so a steady topic's samples leave the moment they arrive. A batch arriving while the slot is
closed is held (replacing any older held row); the next arrival after the slot opens supersedes
it, and only if none comes within one more period does :meth:`PublishPolicy.flush_due` publish
the held row, so a topic that pauses still shows its latest value, at most two periods late.
(Publishing the held row the instant the slot opens would make every sample of a fast topic wait
up to one arrival interval, phase-locked behind the slot.) A skipped batch costs a dictionary
lookup and a comparison; JSON is only built for rows that are published.
"""

from __future__ import annotations

import fnmatch
import heapq
import json
import math
import re
import socket
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import msgpack
import numpy as np
import numpy.typing as npt

from ulogstream.errors import ConfigError, ULogFormatError
from ulogstream.ulog.dtypes import compile_format
from ulogstream.ulog.events import (
    Corruption,
    DataRows,
    DefinitionsEnd,
    Dropout,
    FieldDefinition,
    FileHeader,
    FormatDefined,
    Info,
    InfoMultiple,
    InfoValue,
    LoggedString,
    Parameter,
    Subscription,
    ULogEvent,
    Unsubscription,
)
from ulogstream.ulog.gps_time import GPS_UTC_TOPICS, first_gps_fix
from ulogstream.ulog.parser import RowSelection
from ulogstream.ulog.spec import PADDING_PREFIX, TIMESTAMP_FIELD, TYPE_SIZES, log_level_name

if TYPE_CHECKING:
    from collections.abc import Mapping

DEFAULT_ROOT = "ulogstream"
"""First level of every topic."""

DEFAULT_RATE_HZ = 10.0
"""Default cap per topic instance; 0 means every sample."""

JSON_CONTENT_TYPE = "application/json"
MSGPACK_CONTENT_TYPE = "application/msgpack"
RAW_CONTENT_TYPE = "application/octet-stream"

MAX_TOPIC_BYTES = 0xFFFF
"""Longest topic name MQTT can carry (a two-byte UTF-8 length)."""

# MQTT 3.1.1 section 1.5.3 and 4.7: no U+0000 and no wildcards in a published topic; control
# characters and non-characters SHOULD NOT appear, and mosquitto drops a client that sends them.
_UNSAFE_IN_TOPIC = re.compile(
    "[+#\x00-\x1f\x7f-\x9f\ud800-\udfff\ufdd0-\ufdef\ufffe\uffff]"
    "|[\U0001fffe-\U0001ffff\U0002fffe-\U0002ffff\U0003fffe-\U0003ffff\U000efffe-\U000effff]"
    "|[\U000ffffe-\U000fffff\U0010fffe-\U0010ffff]"
)

StatusValue = str | int | float | bool | None
"""A value in the ``meta/status`` object."""

JsonValue = str | int | float | bool | None | list["JsonValue"] | dict[str, "JsonValue"]


@dataclass(frozen=True, slots=True)
class MqttMessage:
    """One message for the broker.

    Attributes:
        topic: Full topic name.
        payload: Encoded payload.
        retain: Ask the broker to keep it for late subscribers.
        qos: MQTT quality of service (0, 1 or 2).
        content_type: MQTT v5 content type (ignored on 3.1.1).
        user_properties: MQTT v5 user properties (ignored on 3.1.1).
    """

    topic: str
    payload: bytes
    retain: bool = False
    qos: int = 0
    content_type: str | None = None
    user_properties: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class PublishSettings:
    """What to publish and how often.

    Attributes:
        vehicle_id: Second topic level, e.g. the hostname (see :func:`default_vehicle_id`).
        root: First topic level.
        rate_hz: Default cap per topic instance in messages per second; 0 = every sample.
        topic_rates: Caps per topic name or glob pattern (exact names win, then the first
            matching pattern); 0 = every sample.
        include: Glob patterns of topic names to publish.
        exclude: Glob patterns of topic names never to publish (wins over ``include``).
        encode_json: Publish samples under ``json/``.
        encode_msgpack: Publish the same objects as MessagePack under ``msgpack/``.
        encode_raw: Publish the raw ``D`` payloads under ``ulog/``.
        qos: Quality of service of sample messages (retained ones use it too).
        status_interval: Least seconds between status updates caused by counters, and between
            two ``meta/info`` updates after the definitions (info messages logged mid-log).
        param_topics: Also publish each parameter as a retained ``param/NAME`` (the ``params``
            object is always published); a fleet on one broker may turn them off.
    """

    vehicle_id: str
    root: str = DEFAULT_ROOT
    rate_hz: float = DEFAULT_RATE_HZ
    topic_rates: Mapping[str, float] = field(default_factory=dict)
    include: tuple[str, ...] = ("*",)
    exclude: tuple[str, ...] = ()
    encode_json: bool = True
    encode_msgpack: bool = False
    encode_raw: bool = False
    qos: int = 0
    status_interval: float = 1.0
    param_topics: bool = True

    def __post_init__(self) -> None:
        """Reject settings that would build invalid topics or rates."""
        # The root may have levels of its own (config.MqttSettings allows "site/fleet").
        if not all(valid_topic_level(level) for level in self.root.split("/")):
            msg = f"MQTT root {self.root!r} must be non-empty levels without '+', '#' or NUL"
            raise ConfigError(msg)
        if not valid_topic_level(self.vehicle_id):
            msg = (
                f"MQTT vehicle_id {self.vehicle_id!r} must be non-empty without '/', '+', '#' "
                "or NUL"
            )
            raise ConfigError(msg)
        rates = {"rate_hz": self.rate_hz, **self.topic_rates}
        for name, rate in rates.items():
            if not (rate >= 0 and math.isfinite(rate)):
                msg = f"MQTT rate for {name!r} must be a finite number >= 0, not {rate!r}"
                raise ConfigError(msg)
        if self.qos not in {0, 1, 2}:
            msg = f"MQTT qos must be 0, 1 or 2, not {self.qos!r}"
            raise ConfigError(msg)

    def rate_for(self, topic: str) -> float:
        """The cap in Hz for ``topic`` (0 = every sample)."""
        if topic in self.topic_rates:
            return self.topic_rates[topic]
        for pattern, rate in self.topic_rates.items():
            if fnmatch.fnmatchcase(topic, pattern):
                return rate
        return self.rate_hz

    def publishes(self, topic: str) -> bool:
        """Whether ``topic`` passes the include and exclude patterns."""
        return any(fnmatch.fnmatchcase(topic, p) for p in self.include) and not any(
            fnmatch.fnmatchcase(topic, p) for p in self.exclude
        )


def chooses_alike(a: PublishSettings, b: PublishSettings, name: str) -> bool:
    """Whether policies with settings ``a`` and ``b`` choose the same JSON samples of ``name``.

    Both publish the topic as JSON at the same rate cap: fed the same events at the same times,
    they hold, conflate and publish the same rows (the rate cap's state depends on nothing
    else), so one of them can choose and encode the samples for both.
    """
    return (
        a.encode_json
        and b.encode_json
        and a.publishes(name)
        and b.publishes(name)
        and a.rate_for(name) == b.rate_for(name)
    )


def valid_topic(topic: str) -> bool:
    """Whether a broker takes ``topic`` as the name of a published message.

    Not empty, no wildcard, no NUL or other control character, no surrogate or non-character,
    and at most :data:`MAX_TOPIC_BYTES` in UTF-8.
    """
    if not topic or _UNSAFE_IN_TOPIC.search(topic) is not None:
        return False
    return len(topic.encode()) <= MAX_TOPIC_BYTES


def valid_topic_level(level: str) -> bool:
    """Whether ``level`` can be one level of our topics: a :func:`valid_topic` without ``/``.

    A name with ``/`` would add levels (and an empty name an empty level), breaking the fixed
    depth that ``+`` subscriptions and Telegraf's topic parsing rely on.
    """
    return "/" not in level and valid_topic(level)


def default_vehicle_id() -> str:
    """This host's name made safe as one topic level (the default vehicle id)."""
    name = re.sub(r"[/+#\x00\s]", "_", socket.gethostname())
    return name or "vehicle"


class _RowEncoder:
    """Builds flat JSON and MessagePack objects for rows of one structured dtype.

    Numeric fields of one dtype are gathered from the raw bytes with a single fancy index and
    formatted by numpy per batch (float32 in its shortest round-trip form, like ``repr``).
    """

    def __init__(self, dtype: np.dtype[np.void]) -> None:
        layout = _field_layout(dtype)
        self.itemsize = dtype.itemsize
        self.keys = self.keys_of(dtype)
        # (kind, gather dtype) -> (byte index into a row, output columns); kind: f, i or b
        groups: dict[tuple[str, str], tuple[list[int], list[int]]] = {}
        self.char_fields: list[tuple[str, int]] = []
        for column, name in enumerate(self.keys):
            dtype_str, offset, size = layout[name]
            kind = np.dtype(dtype_str).kind
            if kind == "S":
                self.char_fields.append((name, column))
                continue
            key = ("b", "|u1") if kind == "b" else ("f" if kind == "f" else "i", dtype_str)
            index, columns = groups.setdefault(key, ([], []))
            index.extend(range(offset, offset + size))
            columns.append(column)
        self.groups = [
            (kind, np.dtype(gdt), np.array(index, dtype=np.intp), np.array(columns, dtype=np.intp))
            for (kind, gdt), (index, columns) in groups.items()
        ]
        key_part = "".join(f",{json.dumps(k).replace('%', '%%')}:%s" for k in self.keys)
        self.template = '{"t":%s,"timestamp":%d' + key_part + "}"

    @staticmethod
    def keys_of(dtype: np.dtype[np.void]) -> list[str]:
        """The keys of a row's object after ``t`` and ``timestamp``, in payload order."""
        return [name for name in _field_layout(dtype) if name != TIMESTAMP_FIELD]

    def columns(self, rows: npt.NDArray[np.void]) -> list[list[object]]:
        """Each row's values in key order, formatted as JSON text (numbers, null, strings)."""
        count = len(rows)
        table = np.empty((count, len(self.keys)), dtype=object)
        raw = np.ascontiguousarray(rows).view(np.uint8).reshape(count, self.itemsize)
        for kind, gather_dtype, index, columns in self.groups:
            values = raw.take(index, axis=1).view(gather_dtype)
            if kind == "f":
                text = values.astype(str)
                bad = ~np.isfinite(values)
                if bad.any():
                    text[bad] = "null"
                table[:, columns] = text
            elif kind == "b":
                table[:, columns] = np.where(values != 0, "true", "false")
            else:
                table[:, columns] = values
        for name, column in self.char_fields:
            table[:, column] = [json.dumps(_cut_at_nul(v)) for v in rows[name].tolist()]
        rows_out: list[list[object]] = table.tolist()
        return rows_out

    def json_payloads(
        self, rows: npt.NDArray[np.void], stamps: list[int], times: list[str]
    ) -> list[bytes]:
        """One flat JSON object per row."""
        template = self.template
        return [
            (template % (t, stamp, *values)).encode()
            for t, stamp, values in zip(times, stamps, self.columns(rows), strict=True)
        ]

    def msgpack_payloads(
        self, rows: npt.NDArray[np.void], stamps: list[int], times: list[float | None]
    ) -> list[bytes]:
        """The same objects as MessagePack (NaN/Inf as nil, char arrays as strings)."""
        keys = self.keys
        payloads: list[bytes] = []
        for t, stamp, row in zip(times, stamps, rows[keys].tolist(), strict=True):
            obj: dict[str, object] = {"t": t, "timestamp": stamp}
            for key, value in zip(keys, row, strict=True):
                obj[key] = _plain_value(value)
            packed: bytes = msgpack.packb(obj)
            payloads.append(packed)
        return payloads


_JSON_TYPES: dict[str, JsonValue] = {
    "f": ["number", "null"],  # NaN and Inf are null
    "b": "boolean",
    "S": "string",  # char[N], cut at the first NUL
}


def row_json_schema(name: str, dtype: np.dtype[np.void]) -> dict[str, JsonValue]:
    """A JSON Schema of the JSON sample objects :class:`_RowEncoder` builds for ``dtype``.

    The same keys in the same order: ``t`` (wall-clock seconds), ``timestamp`` (vehicle time in
    microseconds), then every field as pyulog flattens it (``q[0]``, ``nested.sub``).
    """
    properties: dict[str, JsonValue] = {
        "t": {"type": "number", "description": "wall-clock time of the sample, epoch seconds"},
        TIMESTAMP_FIELD: {"type": "integer", "description": "vehicle time, microseconds"},
    }
    layout = _field_layout(dtype)
    for key in _RowEncoder.keys_of(dtype):
        kind = np.dtype(layout[key][0]).kind
        properties[key] = {"type": _JSON_TYPES.get(kind, "integer")}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": name,
        "type": "object",
        "properties": properties,
        "required": list(properties),
    }


def json_sample_time(payload: bytes) -> float:
    """The ``t`` of a JSON sample payload of :class:`_RowEncoder` (its first key), unparsed.

    Raises:
        ValueError: ``payload`` is not such a sample.
    """
    if not payload.startswith(b'{"t":'):
        msg = "not a JSON sample payload"
        raise ValueError(msg)
    return float(payload[5 : payload.index(b",", 5)])


def _field_layout(dtype: np.dtype[np.void]) -> dict[str, tuple[str, int, int]]:
    """Each field of a structured dtype: ``name -> (dtype string, offset, itemsize)``."""
    fields = dtype.fields
    if fields is None:
        return {}
    return {name: (spec[0].str, spec[1], spec[0].itemsize) for name, spec in fields.items()}


def _cut_at_nul(value: object) -> str:
    if isinstance(value, bytes):
        return value.split(b"\0", 1)[0].decode("utf-8", "replace")
    return str(value)


def _plain_value(value: object) -> object:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, bytes):
        return _cut_at_nul(value)
    return value


def _json_number(value: float) -> str:
    """A parameter or info number as JSON: float32-exact values in their shortest form."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if not math.isfinite(value):
        return "null"
    single = np.float32(value)
    if float(single) == value:
        return str(single)
    return repr(value)


def _info_json(value: InfoValue) -> JsonValue:
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, tuple):
        return [_info_json(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


@dataclass(slots=True)
class _Instance:
    """Publishing state of one subscription (topic instance)."""

    name: str
    multi_id: int
    encoder: _RowEncoder
    period: float
    json_topic: str
    msgpack_topic: str
    raw_topic: str
    raw_properties: tuple[tuple[str, str], ...]
    raw_size: int
    next_slot: float = -math.inf
    held: DataRows | None = None
    held_deadline: float = math.inf


def _format_string(fmt: FormatDefined) -> str:
    parts = "".join(
        f"{f.type_name}{'' if f.array_length is None else f'[{f.array_length}]'} {f.name};"
        for f in fmt.fields
    )
    return f"{fmt.name}:{parts}"


def _flat_fields(
    name: str, formats: Mapping[str, FormatDefined], prefix: str = "", depth: int = 0
) -> list[list[str]]:
    """``[flat name, type]`` pairs as pyulog names them; unknown nested types are kept whole."""
    fmt = formats.get(name)
    if fmt is None or depth > len(formats):
        return []
    out: list[list[str]] = []
    for f in fmt.fields:
        if f.name.startswith(PADDING_PREFIX):
            continue
        out.extend(_flat_field(f, formats, prefix, depth))
    return out


def _flat_field(
    f: FieldDefinition, formats: Mapping[str, FormatDefined], prefix: str, depth: int
) -> list[list[str]]:
    base = f"{prefix}{f.name}"
    if f.type_name == "char" and f.array_length is not None:
        return [[base, f"char[{f.array_length}]"]]
    names = [base] if f.array_length is None else [f"{base}[{i}]" for i in range(f.array_length)]
    if f.type_name in TYPE_SIZES or f.type_name not in formats:
        return [[n, f.type_name] for n in names]
    return [sub for n in names for sub in _flat_fields(f.type_name, formats, f"{n}.", depth + 1)]


def _nested_formats(
    name: str, formats: Mapping[str, FormatDefined], seen: dict[str, str]
) -> dict[str, str]:
    fmt = formats.get(name)
    if fmt is None or name in seen:
        return seen
    seen[name] = _format_string(fmt)
    for f in fmt.fields:
        if f.type_name not in TYPE_SIZES:
            _nested_formats(f.type_name, formats, seen)
    return seen


class PublishPolicy:
    """Decides which MQTT messages parser events become, and when (pure; time is an input).

    Call :meth:`log_started` when a log begins (first packet), feed every parser event to
    :meth:`select`, and call :meth:`flush_due` at :meth:`next_deadline` to publish held samples
    and pending status updates.

    Args:
        settings: Topics, encodings and rates.
    """

    def __init__(self, settings: PublishSettings) -> None:
        self.settings = settings
        self._base = f"{settings.root}/{settings.vehicle_id}"
        self.status_topic = f"{self._base}/meta/status"
        """Topic of the retained status object (and of the Last Will)."""
        self._encoders: dict[tuple[str, np.dtype[np.void]], _RowEncoder] = {}
        self._status: dict[str, StatusValue] = {
            "online": True,
            "state": "waiting",
            "skipped_topics": 0,
        }
        self._status_sent_at = -math.inf
        self._status_dirty = False
        self.published_samples = 0
        """Rows turned into messages (each encoding counts once)."""
        self.skipped_samples = 0
        """Rows passed over by a rate cap (conflated) or by include/exclude patterns."""
        self.skipped_topics = 0
        """Messages not built because a parameter or topic name cannot be a topic level
        (``+``, ``#``, ``/``, NUL, control characters, empty); also ``skipped_topics`` in the
        status. The rest of the log publishes as usual."""
        self.reused_samples = 0
        """JSON sample payloads taken from the policy of :meth:`reuse_json_of`, which had just
        encoded the same rows with the same wall clock, instead of encoding them again."""
        self._json_source: PublishPolicy | None = None
        self.last_json: tuple[DataRows, int | None, float, list[bytes]] | None = None
        """The newest JSON encoding: the event, its row (None: all), the time base, payloads."""
        self._reset_log()

    def _reset_log(self) -> None:
        self._formats: dict[str, FormatDefined] = {}
        self._info: dict[str, JsonValue] = {}
        self._info_multiple: dict[str, list[JsonValue]] = {}
        self._params: dict[str, int | float] = {}
        self._params_dirty = False
        self._info_dirty = False
        self._info_sent_at = -math.inf
        self._definitions_done = False
        self._instances: dict[int, _Instance] = {}
        self._excluded: set[int] = set()
        self._schemas_sent: set[str] = set()
        self._heap: list[tuple[float, int, int]] = []
        self._heap_seq = 0
        self._wall_time: float | None = None
        self._offset_s: float | None = None
        self._time_source = "boot"
        self._status.update(dropouts=0, dropout_ms=0, corruptions=0, time_source="boot")

    # -- lifecycle ---------------------------------------------------------------------------

    def log_started(
        self,
        *,
        wall_time: float,
        now: float,
        log_file: str | None = None,
        first_timestamp_us: int | None = None,
    ) -> list[MqttMessage]:
        """Begin a new log: forget the previous one's definitions and anchor the wall clock.

        Args:
            wall_time: The receiver's wall clock (epoch seconds) at the log's first packet.
            now: The receiver's monotonic clock.
            log_file: The file being recorded, shown in the status.
            first_timestamp_us: Vehicle time of the first packet; when None the file header's
                timestamp (the log's start) is used.

        Returns:
            The retained status message.
        """
        self._reset_log()
        self._wall_time = wall_time
        # The anchor itself waits for the file header unless the first timestamp is given.
        self._time_source = "receiver"
        self._status["time_source"] = "receiver"
        if first_timestamp_us is not None:
            self._anchor(first_timestamp_us)
        self._status.update(online=True, state="streaming", log_file=log_file)
        return [self._status_message(now)]

    def update_status(
        self,
        now: float,
        *,
        state: str | None = None,
        fields: Mapping[str, StatusValue] | None = None,
    ) -> list[MqttMessage]:
        """Merge ``state`` and ``fields`` (the daemon's counters) into the status; publish it."""
        if state is not None:
            self._status["state"] = state
        if fields:
            self._status.update(fields)
        return [self._status_message(now)]

    def last_will(self) -> MqttMessage:
        """The retained ``{"online": false}`` the broker publishes when this client vanishes."""
        return MqttMessage(
            self.status_topic,
            b'{"online": false}',
            retain=True,
            qos=max(1, self.settings.qos),
            content_type=JSON_CONTENT_TYPE,
        )

    def offline_status(self, now: float) -> MqttMessage:
        """The retained status for a clean shutdown (``online`` false, last counters kept)."""
        self._status.update(online=False, state="stopped")
        return self._status_message(now)

    def rows_for(self, subscription: Subscription) -> RowSelection:
        """The rows of ``subscription`` :meth:`select` can publish (a parser's row selector).

        A capped topic publishes at most the newest row of each batch, so only that one needs
        decoding; every row at rate 0 and of the GPS topics that anchor the wall clock; none of
        a topic that is not published. Pass it as ``ULogParser(rows=policy.rows_for)``: what is
        published stays the same, only ``skipped_samples`` leaves out the rows never decoded.
        """
        name = subscription.name
        settings = self.settings
        if not settings.publishes(name) or not valid_topic_level(name):
            return RowSelection.NONE
        if name in GPS_UTC_TOPICS or settings.rate_for(name) == 0:
            return RowSelection.ALL
        return RowSelection.NEWEST

    # -- events ------------------------------------------------------------------------------

    def select(self, event: ULogEvent, now: float) -> list[MqttMessage]:
        """The messages ``event`` causes right now (held samples come from :meth:`flush_due`)."""
        match event:
            case DataRows():
                return self._data(event, now)
            case Subscription():
                return self._subscribe(event, now)
            case Unsubscription(msg_id):
                self._drop_instance(msg_id)
                self._excluded.discard(msg_id)
            case LoggedString():
                return [self._logged_string(event)]
            case Parameter(name, value, _):
                self._params[name] = value
                if self._definitions_done:
                    self._params_dirty = True
                    return self._param_messages({name: value})
            case Info(key, _, value, _):
                self._info[key] = _info_json(value)
                self._info_dirty = self._definitions_done  # published once, coalesced
            case InfoMultiple():
                self._add_info_multiple(event)
                self._info_dirty = self._definitions_done
            case FormatDefined(name):
                self._formats[name] = event
            case FileHeader(_, timestamp_us):
                if self._offset_s is None and self._wall_time is not None:
                    self._anchor(timestamp_us)
            case DefinitionsEnd():
                self._definitions_done = True
                self._info_sent_at = now
                return [
                    self._info_message(),
                    *self._param_messages(self._params),
                    self._params_message(),
                ]
            case Dropout(duration_ms, _):
                self._bump("dropouts", 1)
                self._bump("dropout_ms", duration_ms)
            case Corruption():
                self._bump("corruptions", 1)
            case _:
                pass  # Sync, Truncated, ParserWarning, FlagBits, ParameterDefault: not published
        return []

    def flush_due(self, now: float) -> list[MqttMessage]:
        """Publish held samples of paused topics, and pending params/status updates."""
        out: list[MqttMessage] = []
        heap = self._heap
        while heap and heap[0][0] <= now:
            deadline, _, msg_id = heapq.heappop(heap)
            inst = self._instances.get(msg_id)
            if inst is None or inst.held is None or inst.held_deadline != deadline:
                continue  # stale entry: the held row was published or replaced meanwhile
            held = inst.held
            inst.held = None
            inst.held_deadline = math.inf
            self.skipped_samples += len(held.rows) - 1
            self._open_slot(inst, now)
            out.extend(self._encode(inst, held, len(held.rows) - 1))
        if self._params_dirty:
            self._params_dirty = False
            out.append(self._params_message())
        if self._info_dirty and now >= self._info_sent_at + self.settings.status_interval:
            self._info_dirty = False
            self._info_sent_at = now
            out.append(self._info_message())
        if self._status_dirty and now >= self._status_sent_at + self.settings.status_interval:
            out.append(self._status_message(now))
        return out

    def next_deadline(self) -> float | None:
        """When :meth:`flush_due` has something to do next (None: nothing pending)."""
        deadlines: list[float] = []
        if self._heap:
            deadlines.append(self._heap[0][0])
        if self._status_dirty:
            deadlines.append(self._status_sent_at + self.settings.status_interval)
        if self._params_dirty:
            deadlines.append(-math.inf)
        if self._info_dirty:
            deadlines.append(self._info_sent_at + self.settings.status_interval)
        return min(deadlines) if deadlines else None

    # -- data --------------------------------------------------------------------------------

    def _subscribe(self, sub: Subscription, now: float) -> list[MqttMessage]:
        del now
        settings = self.settings
        self._drop_instance(sub.msg_id)
        if not settings.publishes(sub.name):
            self._excluded.add(sub.msg_id)
            return []
        if not valid_topic_level(sub.name):
            self._skip_topic()
            self._excluded.add(sub.msg_id)  # its rows count as skipped samples
            return []
        self._excluded.discard(sub.msg_id)
        key = (sub.name, sub.dtype)
        encoder = self._encoders.get(key)
        if encoder is None:
            encoder = self._encoders[key] = _RowEncoder(sub.dtype)
        rate = settings.rate_for(sub.name)
        suffix = f"{sub.name}/{sub.multi_id}"
        self._instances[sub.msg_id] = _Instance(
            name=sub.name,
            multi_id=sub.multi_id,
            encoder=encoder,
            period=0.0 if rate == 0 else 1.0 / rate,
            json_topic=self.json_topic(sub.name, sub.multi_id),
            msgpack_topic=f"{self._base}/msgpack/{suffix}",
            raw_topic=f"{self._base}/ulog/{suffix}",
            raw_properties=(("ulog_format", sub.name), ("ulog_schema", self._schema_topic(sub))),
            raw_size=sub.dtype.itemsize - self._trailing_padding(sub.name),
        )
        if sub.name in self._schemas_sent:
            return []
        self._schemas_sent.add(sub.name)
        return [self._schema_message(sub)]

    def _trailing_padding(self, name: str) -> int:
        # PX4 leaves top-level trailing padding out of 'D' payloads: so do raw messages.
        try:
            return compile_format(name, self._formats).trailing_padding
        except ULogFormatError:
            return 0

    def _drop_instance(self, msg_id: int) -> None:
        self._instances.pop(msg_id, None)

    def _data(self, event: DataRows, now: float) -> list[MqttMessage]:
        inst = self._instances.get(event.subscription.msg_id)
        if inst is None or len(event.rows) == 0:
            self.skipped_samples += len(event.rows)
            return []
        if self._time_source != "gps" and inst.name in GPS_UTC_TOPICS:
            self._gps_anchor(event)
        period = inst.period
        if period == 0.0:
            return self._encode(inst, event, None)
        held = inst.held
        if now < inst.next_slot:
            # Slot closed: keep only the newest batch (conflation). The next arrival after the
            # slot opens supersedes it; if the topic pauses, flush_due publishes it a period later.
            if held is None:
                inst.held_deadline = inst.next_slot + period
                self._heap_seq += 1
                heapq.heappush(
                    self._heap, (inst.held_deadline, self._heap_seq, event.subscription.msg_id)
                )
            else:
                self.skipped_samples += len(held.rows)
            inst.held = event
            return []
        if held is not None:
            self.skipped_samples += len(held.rows)
        self.skipped_samples += len(event.rows) - 1
        inst.held = None
        inst.held_deadline = math.inf
        self._open_slot(inst, now)
        return self._encode(inst, event, len(event.rows) - 1)

    @staticmethod
    def _open_slot(inst: _Instance, now: float) -> None:
        # Keep the phase so the average rate is the cap; restart it after a pause.
        follow = inst.next_slot + inst.period
        inst.next_slot = follow if now < follow else now + inst.period

    def _encode(self, inst: _Instance, event: DataRows, index: int | None) -> list[MqttMessage]:
        """Messages for row ``index`` of ``event`` (every row when None)."""
        if index is None:
            rows, stamps_arr = event.rows, event.timestamps_us
        else:
            rows, stamps_arr = event.rows[index : index + 1], event.timestamps_us[index : index + 1]
        if len(rows) == 0:
            return []
        stamps: list[int] = stamps_arr.tolist()
        offset = self._offset_s
        if offset is None and self._wall_time is not None:
            self._anchor(stamps[0])
            offset = self._offset_s
        base = 0.0 if offset is None else offset
        settings = self.settings
        qos = settings.qos
        out: list[MqttMessage] = []
        if settings.encode_json:
            payloads = self._reused_json(event, index, base)
            if payloads is None:
                times = [f"{base + s / 1e6:.6f}" for s in stamps]
                payloads = inst.encoder.json_payloads(rows, stamps, times)
            self.last_json = (event, index, base, payloads)
            topic = inst.json_topic
            out.extend(
                MqttMessage(topic, p, qos=qos, content_type=JSON_CONTENT_TYPE) for p in payloads
            )
        if settings.encode_msgpack:
            ftimes: list[float | None] = [round(base + s / 1e6, 6) for s in stamps]
            topic = inst.msgpack_topic
            out.extend(
                MqttMessage(topic, p, qos=qos, content_type=MSGPACK_CONTENT_TYPE)
                for p in inst.encoder.msgpack_payloads(rows, stamps, ftimes)
            )
        if settings.encode_raw:
            data = np.ascontiguousarray(rows).tobytes()
            size, kept = inst.encoder.itemsize, inst.raw_size
            topic, props = inst.raw_topic, inst.raw_properties
            out.extend(
                MqttMessage(topic, data[i : i + kept], False, qos, RAW_CONTENT_TYPE, props)  # noqa: FBT003
                for i in range(0, len(data), size)
            )
        self.published_samples += len(rows)
        return out

    def reuse_json_of(self, source: PublishPolicy | None) -> None:
        """Take JSON payloads from ``source`` when it has just encoded the same rows (None: off).

        For two policies fed the same events one after the other (``source`` first) whose rate
        caps differ: a row both choose, e.g. the newest of a batch ``source`` publishes whole
        at rate 0, is encoded once. The bytes are the same (same row, same time base).
        """
        self._json_source = source

    def _reused_json(self, event: DataRows, index: int | None, base: float) -> list[bytes] | None:
        """The payloads of row ``index`` of ``event`` (all when None) the source just encoded."""
        source = self._json_source
        last = None if source is None else source.last_json
        if last is None or last[0] is not event or last[2] != base:
            return None
        _, last_index, _, payloads = last
        if last_index == index:
            found = payloads
        elif last_index is None and index is not None:
            found = payloads[index : index + 1]
        else:
            return None
        self.reused_samples += len(found)
        return found

    # -- wall clock --------------------------------------------------------------------------

    def observe_time(self, event: DataRows) -> None:
        """Anchor the wall clock on a GPS fix in ``event`` without publishing any of its rows.

        For rows another policy publishes (see :func:`chooses_alike`): this policy's logged
        strings and own samples keep the wall clock that policy's samples carry.
        """
        if self._time_source != "gps" and event.subscription.name in GPS_UTC_TOPICS:
            self._gps_anchor(event)

    def _anchor(self, timestamp_us: int) -> None:
        if self._wall_time is not None:
            self._offset_s = self._wall_time - timestamp_us / 1e6
            self._set_time_source("receiver")

    def _gps_anchor(self, event: DataRows) -> None:
        fix = first_gps_fix(event.rows, event.timestamps_us)
        if fix is not None:
            utc_us, stamp_us = fix
            self._offset_s = (utc_us - stamp_us) / 1e6
            self._set_time_source("gps")

    def _set_time_source(self, source: str) -> None:
        self._time_source = source
        if self._status.get("time_source") != source:
            self._status["time_source"] = source
            self._status_dirty = True

    # -- metadata ----------------------------------------------------------------------------

    def _bump(self, key: str, amount: int) -> None:
        current = self._status.get(key)
        self._status[key] = (current if isinstance(current, int) else 0) + amount
        self._status_dirty = True

    def _status_message(self, now: float) -> MqttMessage:
        self._status_sent_at = now
        self._status_dirty = False
        return self._retained("meta/status", _dumps(dict(self._status)))

    def _retained(self, suffix: str, payload: bytes) -> MqttMessage:
        return MqttMessage(
            f"{self._base}/{suffix}",
            payload,
            retain=True,
            qos=self.settings.qos,
            content_type=JSON_CONTENT_TYPE,
        )

    def _add_info_multiple(self, event: InfoMultiple) -> None:
        pieces = self._info_multiple.setdefault(event.key, [])
        value = _info_json(event.value)
        if event.is_continued and pieces:
            last = pieces[-1]
            if isinstance(last, str) and isinstance(value, str):
                pieces[-1] = last + value
                return
            if isinstance(last, list) and isinstance(value, list):
                pieces[-1] = last + value
                return
        pieces.append(value)

    def _info_message(self) -> MqttMessage:
        info: dict[str, JsonValue] = dict(self._info)
        for key, pieces in self._info_multiple.items():
            info[key] = list(pieces)
        return self._retained("meta/info", _dumps(info))

    def _param_messages(self, params: Mapping[str, float]) -> list[MqttMessage]:
        """One retained ``param/NAME`` per parameter whose name can be a topic level."""
        out: list[MqttMessage] = []
        if not self.settings.param_topics:
            return out
        for name, value in params.items():
            if not valid_topic_level(name):
                self._skip_topic()  # still in the ``params`` object: a JSON key may be anything
                continue
            out.append(
                MqttMessage(
                    f"{self._base}/param/{name}",
                    _json_number(value).encode(),
                    retain=True,
                    qos=self.settings.qos,
                    content_type=JSON_CONTENT_TYPE,
                )
            )
        return out

    def _skip_topic(self) -> None:
        self.skipped_topics += 1
        self._status["skipped_topics"] = self.skipped_topics
        self._status_dirty = True

    def _params_message(self) -> MqttMessage:
        body = ",".join(f"{json.dumps(n)}:{_json_number(v)}" for n, v in self._params.items())
        return self._retained("params", f"{{{body}}}".encode())

    def json_topic(self, name: str, multi_id: int) -> str:
        """The topic of the JSON samples of topic instance ``(name, multi_id)``."""
        return f"{self._base}/json/{name}/{multi_id}"

    @property
    def log_topic(self) -> str:
        """The topic of logged strings."""
        return f"{self._base}/log"

    def _schema_topic(self, sub: Subscription) -> str:
        return f"{self._base}/schema/{sub.name}"

    def _schema_message(self, sub: Subscription) -> MqttMessage:
        formats = _nested_formats(sub.name, self._formats, {})
        fields = _flat_fields(sub.name, self._formats)
        if not fields:  # format unknown: describe the decoded dtype instead
            fields = [[n, spec[0]] for n, spec in _field_layout(sub.dtype).items()]
        schema: dict[str, JsonValue] = {
            "name": sub.name,
            "format": formats.get(sub.name),
            "formats": dict(formats.items()),
            "fields": [list(pair) for pair in fields],
        }
        return MqttMessage(
            self._schema_topic(sub),
            _dumps(schema),
            retain=True,
            qos=self.settings.qos,
            content_type=JSON_CONTENT_TYPE,
        )

    def _logged_string(self, event: LoggedString) -> MqttMessage:
        digit = event.level - ord("0")
        level = digit if 0 <= digit <= 9 else event.level  # noqa: PLR2004
        t = round((self._offset_s or 0.0) + event.timestamp_us / 1e6, 6)
        obj: dict[str, JsonValue] = {
            "t": t,
            "timestamp": event.timestamp_us,
            "level": level,
            "level_name": log_level_name(event.level),
            "tag": event.tag,
            "text": event.text,
        }
        return MqttMessage(
            self.log_topic, _dumps(obj), qos=self.settings.qos, content_type=JSON_CONTENT_TYPE
        )


def _dumps(obj: Mapping[str, object]) -> bytes:
    return json.dumps(obj, allow_nan=False, separators=(",", ":")).encode()
