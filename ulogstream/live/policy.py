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

About 700 lines: topic names, rate caps and the status document are one policy over one state
(per topic instance); the payload encoders are :mod:`~ulogstream.live.encode`.
"""

from __future__ import annotations

import fnmatch
import heapq
import itertools
import json
import math
from typing import TYPE_CHECKING

import msgspec

from ulogstream.errors import ULogFormatError
from ulogstream.live.encode import (
    CDR_CONTENT_TYPE,
    JSON_CONTENT_TYPE,
    MSGPACK_CONTENT_TYPE,
    RAW_CONTENT_TYPE,
    CdrEncoder,
    JsonValue,
    RowEncoder,
    _dumps,
    _field_layout,
    _flat_fields,
    _info_json,
    _json_number,
    _nested_formats,
)
from ulogstream.live.outbox import MqttMessage, valid_topic_level
from ulogstream.ulog.dtypes import compile_format
from ulogstream.ulog.events import (
    Corruption,
    DataRows,
    DefinitionsEnd,
    Dropout,
    FileHeader,
    FormatDefined,
    Info,
    InfoMultiple,
    LoggedString,
    Parameter,
    Subscription,
    ULogEvent,
    UndecodedRows,
    Unsubscription,
)
from ulogstream.ulog.gps_time import GPS_UTC_TOPICS, first_gps_fix, first_gps_fix_of_payloads
from ulogstream.ulog.parser import RowSelection
from ulogstream.ulog.spec import log_level_name

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from ulogstream.ulog.events import RowLayout


DEFAULT_ROOT = "ulogstream"
"""First level of every topic."""


PARAMS_PER_FLUSH = 100
"""``param/NAME`` messages made per :meth:`PublishPolicy.flush_due` call after the definitions
(about 1 ms of work): a log's parameters never hold the loop for long at its start."""


DEFAULT_RATE_HZ = 10.0
"""Default cap per topic instance; 0 means every sample."""


StatusValue = str | int | float | bool | None
"""A value in the ``meta/status`` object."""


Rows = DataRows | UndecodedRows
"""A batch of one topic instance's rows, decoded or not (see :class:`RowSelection`)."""


def _row_count(rows: Rows) -> int:
    return len(rows.payloads) if isinstance(rows, UndecodedRows) else len(rows.rows)


class TopicChoice(msgspec.Struct, frozen=True, kw_only=True):
    """Which topics a policy publishes, how often and how (its ``[mqtt]`` keys, as given).

    Attributes:
        vehicle_id: Second topic level (filled in by the recorder's identity).
        root: First topic level (``mqtt.root``).
        default_rate_hz: Cap per topic instance in messages per second; 0 = every sample.
        rates: Caps per topic name or glob pattern (exact names win, then the first matching
            pattern); 0 = every sample.
        include: Glob patterns of topic names to publish (empty: all).
        exclude: Glob patterns of topic names never to publish (wins over ``include``).
        encodings: ``json`` (samples under ``json/``), ``msgpack`` (the same objects under
            ``msgpack/``), ``ulog`` (raw ``D`` payloads under ``ulog/``).
        qos: Quality of service of sample messages (retained ones use it too).
        param_topics: Also publish each parameter as a retained ``param/NAME`` (the ``params``
            object is always published); a fleet on one broker may turn them off.
        status_interval_s: Least seconds between status updates caused by counters, and
            between two ``meta/info`` updates after the definitions.
    """

    vehicle_id: str
    root: str = DEFAULT_ROOT
    default_rate_hz: float = DEFAULT_RATE_HZ
    rates: Mapping[str, float] = msgspec.field(default_factory=dict)
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    encodings: tuple[str, ...] = ("json",)
    qos: int = 0
    param_topics: bool = True
    status_interval_s: float = 1.0

    def rate_for(self, topic: str) -> float:
        """The cap in Hz for ``topic`` (0 = every sample)."""
        if topic in self.rates:
            return self.rates[topic]
        for pattern, rate in self.rates.items():
            if fnmatch.fnmatchcase(topic, pattern):
                return rate
        return self.default_rate_hz

    def publishes(self, topic: str) -> bool:
        """Whether ``topic`` passes the include and exclude patterns."""
        included = not self.include or any(fnmatch.fnmatchcase(topic, p) for p in self.include)
        return included and not any(fnmatch.fnmatchcase(topic, p) for p in self.exclude)


def chooses_alike(a: TopicChoice, b: TopicChoice, name: str) -> bool:
    """Whether policies choosing ``a`` and ``b`` choose the same JSON samples of ``name``.

    Both publish the topic as JSON at the same rate cap: fed the same events at the same times,
    they hold, conflate and publish the same rows (the rate cap's state depends on nothing
    else), so one of them can choose and encode the samples for both.
    """
    return (
        "json" in a.encodings
        and "json" in b.encodings
        and a.publishes(name)
        and b.publishes(name)
        and a.rate_for(name) == b.rate_for(name)
    )


class _Instance(msgspec.Struct):
    """Publishing state of one subscription (topic instance)."""

    name: str
    multi_id: int
    encoder: RowEncoder
    period: float
    json_topic: str
    msgpack_topic: str
    cdr_topic: str
    cdr_encoder: CdrEncoder | None
    raw_topic: str
    raw_properties: tuple[tuple[str, str], ...]
    raw_size: int
    next_slot: float = -math.inf
    held: Rows | None = None
    held_deadline: float = math.inf


class PublishPolicy:
    """Decides which MQTT messages parser events become, and when (pure; time is an input).

    Call :meth:`log_started` when a log begins (first packet), feed every parser event to
    :meth:`select`, and call :meth:`flush_due` at :meth:`next_deadline` to publish held samples
    and pending status updates.

    The arguments are the ``[mqtt]`` keys of :class:`TopicChoice` (checked by the
    configuration, not again here).
    """

    def __init__(
        self,
        *,
        vehicle_id: str,
        root: str = DEFAULT_ROOT,
        default_rate_hz: float = DEFAULT_RATE_HZ,
        rates: Mapping[str, float] | None = None,
        include: tuple[str, ...] = (),
        exclude: tuple[str, ...] = (),
        encodings: tuple[str, ...] = ("json",),
        qos: int = 0,
        param_topics: bool = True,
        status_interval_s: float = 1.0,
    ) -> None:
        self.settings = settings = TopicChoice(
            vehicle_id=vehicle_id,
            root=root,
            default_rate_hz=default_rate_hz,
            rates=dict(rates or {}),
            include=include,
            exclude=exclude,
            encodings=encodings,
            qos=qos,
            param_topics=param_topics,
            status_interval_s=status_interval_s,
        )
        self._base = f"{settings.root}/{settings.vehicle_id}"
        self._json_only = settings.encodings == ("json",)
        self.status_topic = f"{self._base}/meta/status"
        """Topic of the retained status object (and of the Last Will)."""
        self._encoders: dict[tuple[str, RowLayout], RowEncoder] = {}
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
        self.anchors = 0
        """How often the samples' wall clock (their ``t``) was anchored: once on the receiver's
        clock as each log starts, once more on its first GPS fix. Samples' times may jump
        then, backwards too (a companion computer's clock that is off, a replayed flight)."""
        self._json_source: PublishPolicy | None = None
        self.last_json: tuple[Rows, int | None, float, list[bytes]] | None = None
        """The newest JSON encoding: the event, its row (None: all), the time base, payloads."""
        self._reset_log()

    def _reset_log(self) -> None:
        self._formats: dict[str, FormatDefined] = {}
        self._info: dict[str, JsonValue] = {}
        self._info_multiple: dict[str, list[JsonValue]] = {}
        self._params: dict[str, int | float] = {}
        self._params_dirty = False
        self._params_pending: dict[str, None] = {}
        """Names of the definitions' parameters whose ``param/NAME`` is still to go, in order
        (:meth:`flush_due`)."""
        self._param_texts: dict[str, tuple[str, str]] = {}
        """Each parameter's value as JSON and its ``"name":value`` entry, made once."""
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
        """Merge ``state`` and ``fields`` (the recorder's counters) into the status; publish it."""
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

        A capped topic publishes at most the newest row of each batch: its batches come
        undecoded (:class:`UndecodedRows`), and only a row published is decoded (the GPS topics'
        rows are searched for the first fix from their bytes). Every row at rate 0; none of a
        topic that is not published. Pass it as ``ULogParser(rows=policy.rows_for)``: what is
        published stays the same.
        """
        name = subscription.name
        settings = self.settings
        if not settings.publishes(name) or not valid_topic_level(name):
            return RowSelection.NONE
        if settings.rate_for(name) == 0:
            return RowSelection.ALL
        return RowSelection.NEWEST

    # -- events ------------------------------------------------------------------------------

    def select(self, event: ULogEvent, now: float) -> list[MqttMessage]:
        """The messages ``event`` causes right now (held samples come from :meth:`flush_due`)."""
        match event:
            case UndecodedRows():
                return self._data(event, len(event.payloads), now)
            case DataRows():
                return self._data(event, len(event.rows), now)
            case Subscription():
                return self._subscribe(event, now)
            case Unsubscription(msg_id):
                self._drop_instance(msg_id)
                self._excluded.discard(msg_id)
            case LoggedString():
                return [self._logged_string(event)]
            case Parameter(name, value, _):
                self._params[name] = value
                self._param_texts.pop(name, None)
                if self._definitions_done:
                    self._params_dirty = True
                    self._params_pending.pop(name, None)  # its new value goes now
                    return self._param_messages([name])
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
                # A log's ~1,000 parameters take ~10 ms to turn into messages, while its
                # subscriptions go stop-and-wait: they go from flush_due in pieces instead.
                self._definitions_done = True
                self._info_sent_at = now
                self._params_pending = dict.fromkeys(self._params)
                self._params_dirty = True
                return [self._info_message()]
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
            inst = self._held_instance(deadline, msg_id)
            if inst is None or inst.held is None:
                continue  # stale entry: the held row was published or replaced meanwhile
            held = inst.held
            inst.held = None
            inst.held_deadline = math.inf
            newest = _row_count(held) - 1
            self.skipped_samples += newest
            self._open_slot(inst, now)
            out.extend(self._encode(inst, held, newest))
        pending = self._params_pending
        if pending:
            names = list(itertools.islice(pending, PARAMS_PER_FLUSH))
            for name in names:
                del pending[name]
                self._param_text(name)  # made here, in pieces: the ``params`` object reuses it
            out.extend(self._param_messages(names))
        if self._params_dirty and not pending:
            self._params_dirty = False
            out.append(self._params_message())
        if self._info_dirty and now >= self._info_sent_at + self.settings.status_interval_s:
            self._info_dirty = False
            self._info_sent_at = now
            out.append(self._info_message())
        if self._status_dirty and now >= self._status_sent_at + self.settings.status_interval_s:
            out.append(self._status_message(now))
        return out

    def _held_instance(self, deadline: float, msg_id: int) -> _Instance | None:
        """The instance whose held row a heap entry is for; None when the entry is stale."""
        inst = self._instances.get(msg_id)
        if inst is None or inst.held is None or inst.held_deadline != deadline:
            return None
        return inst

    def next_deadline(self) -> float | None:
        """When :meth:`flush_due` has something to do next (None: nothing pending).

        Stale heap entries at the front are dropped first: most held rows are superseded by
        the next arrival after their slot opens, and each stale deadline would wake the timer
        for nothing (on a real log at 10 Hz, seven of eight of ``flush_due``'s calls).
        """
        deadlines: list[float] = []
        heap = self._heap
        while heap and self._held_instance(heap[0][0], heap[0][2]) is None:
            heapq.heappop(heap)
        if heap:
            deadlines.append(heap[0][0])
        if self._status_dirty:
            deadlines.append(self._status_sent_at + self.settings.status_interval_s)
        if self._params_dirty or self._params_pending:
            deadlines.append(-math.inf)
        if self._info_dirty:
            deadlines.append(self._info_sent_at + self.settings.status_interval_s)
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
        key = (sub.name, sub.layout)
        encoder = self._encoders.get(key)
        if encoder is None:
            encoder = self._encoders[key] = RowEncoder(sub.layout)
        rate = settings.rate_for(sub.name)
        suffix = f"{sub.name}/{sub.multi_id}"
        self._instances[sub.msg_id] = _Instance(
            name=sub.name,
            multi_id=sub.multi_id,
            encoder=encoder,
            period=0.0 if rate == 0 else 1.0 / rate,
            json_topic=self.json_topic(sub.name, sub.multi_id),
            msgpack_topic=f"{self._base}/msgpack/{suffix}",
            cdr_topic=self.cdr_topic(sub.name, sub.multi_id),
            cdr_encoder=CdrEncoder(sub.dtype) if "cdr" in settings.encodings else None,
            raw_topic=f"{self._base}/ulog/{suffix}",
            raw_properties=(("ulog_format", sub.name), ("ulog_schema", self._schema_topic(sub))),
            raw_size=sub.layout.size - self._trailing_padding(sub.name),
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

    def _data(self, event: Rows, count: int, now: float) -> list[MqttMessage]:
        """A batch of ``count`` rows of one topic instance: publish, hold or pass over."""
        inst = self._instances.get(event.subscription.msg_id)
        if inst is None or count == 0:
            self.skipped_samples += count
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
                self.skipped_samples += _row_count(held)
            inst.held = event
            return []
        if held is not None:
            self.skipped_samples += _row_count(held)
        self.skipped_samples += count - 1
        inst.held = None
        inst.held_deadline = math.inf
        self._open_slot(inst, now)
        return self._encode(inst, event, count - 1)

    @staticmethod
    def _open_slot(inst: _Instance, now: float) -> None:
        # Keep the phase so the average rate is the cap; restart it after a pause.
        follow = inst.next_slot + inst.period
        inst.next_slot = follow if now < follow else now + inst.period

    def _encode(self, inst: _Instance, event: Rows, index: int | None) -> list[MqttMessage]:
        """Messages for row ``index`` of ``event`` (every row when None).

        Undecoded rows give only their newest row. As JSON alone (the default) it is encoded
        from its bytes; other encodings decode it with numpy first.
        """
        if type(event) is UndecodedRows:
            if self._json_only:
                return self._newest_json(inst, event)
            return self._encode_rows(inst, event.newest(), 0, event)
        assert type(event) is DataRows  # noqa: S101 (the two kinds of rows)
        return self._encode_rows(inst, event, index, event)

    def _newest_json(self, inst: _Instance, event: UndecodedRows) -> list[MqttMessage]:
        """The JSON message of the newest of undecoded rows, without numpy."""
        stamp = event.timestamp_us
        base = self._time_base(stamp)
        payloads = self._reused_json(event, 0, base)
        if payloads is None:
            time = f"{base + stamp / 1e6:.6f}"
            payloads = [inst.encoder.json_payload(event.payloads[-1], stamp, time)]
        self.last_json = (event, 0, base, payloads)
        self.published_samples += 1
        return [
            MqttMessage(
                inst.json_topic, payloads[0], qos=self.settings.qos, content_type=JSON_CONTENT_TYPE
            )
        ]

    def _encode_rows(
        self, inst: _Instance, event: DataRows, index: int | None, source: Rows
    ) -> list[MqttMessage]:
        """:meth:`_encode` of decoded rows; ``source``: the event they came in (for reuse)."""
        if index is None:
            rows, stamps_arr = event.rows, event.timestamps_us
        else:
            rows, stamps_arr = event.rows[index : index + 1], event.timestamps_us[index : index + 1]
        if len(rows) == 0:
            return []
        stamps: list[int] = stamps_arr.tolist()
        base = self._time_base(stamps[0])
        settings = self.settings
        qos = settings.qos
        out: list[MqttMessage] = []
        if "json" in settings.encodings:
            payloads = self._reused_json(source, index, base)
            if payloads is None:
                times = [f"{base + s / 1e6:.6f}" for s in stamps]
                payloads = inst.encoder.json_payloads(rows, stamps, times)
            self.last_json = (source, index, base, payloads)
            topic = inst.json_topic
            out.extend(
                MqttMessage(topic, p, qos=qos, content_type=JSON_CONTENT_TYPE) for p in payloads
            )
        if "msgpack" in settings.encodings:
            ftimes: list[float | None] = [round(base + s / 1e6, 6) for s in stamps]
            topic = inst.msgpack_topic
            out.extend(
                MqttMessage(topic, p, qos=qos, content_type=MSGPACK_CONTENT_TYPE)
                for p in inst.encoder.msgpack_payloads(rows, stamps, ftimes)
            )
        if inst.cdr_encoder is not None:
            topic = inst.cdr_topic
            out.extend(
                MqttMessage(
                    topic,
                    p,
                    qos=qos,
                    content_type=CDR_CONTENT_TYPE,
                    user_properties=(("t", f"{base + s / 1e6:.6f}"),),
                )
                for p, s in zip(inst.cdr_encoder.payloads(rows), stamps, strict=True)
            )
        if "ulog" in settings.encodings:
            data = rows.tobytes()  # C order, whatever the array's strides
            size, kept = inst.encoder.itemsize, inst.raw_size
            topic, props = inst.raw_topic, inst.raw_properties
            out.extend(
                MqttMessage(topic, data[i : i + kept], False, qos, RAW_CONTENT_TYPE, props)  # noqa: FBT003
                for i in range(0, len(data), size)
            )
        self.published_samples += len(rows)
        return out

    def sample_of(self, event: Rows) -> list[MqttMessage]:
        """The newest row of ``event`` encoded as :meth:`select` would, outside the rate caps.

        For an outlet that sends a quiet topic's newest sample again (a viewer that subscribed
        after it was logged). Nothing when the topic instance is not published.
        """
        inst = self._instances.get(event.subscription.msg_id)
        count = _row_count(event)
        if inst is None or count == 0:
            return []
        return self._encode(inst, event, count - 1)

    def reuse_json_of(self, source: PublishPolicy | None) -> None:
        """Take JSON payloads from ``source`` when it has just encoded the same rows (None: off).

        For two policies fed the same events one after the other (``source`` first) whose rate
        caps differ: a row both choose, e.g. the newest of a batch ``source`` publishes whole
        at rate 0, is encoded once. The bytes are the same (same row, same time base).
        """
        self._json_source = source

    def _reused_json(self, event: Rows, index: int | None, base: float) -> list[bytes] | None:
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

    def observe_time(self, event: Rows) -> None:
        """Anchor the wall clock on a GPS fix in ``event`` without publishing any of its rows.

        For rows another policy publishes (see :func:`chooses_alike`): this policy's logged
        strings and own samples keep the wall clock that policy's samples carry.
        """
        if self._time_source != "gps" and event.subscription.name in GPS_UTC_TOPICS:
            self._gps_anchor(event)

    def _time_base(self, timestamp_us: int) -> float:
        """Seconds from vehicle time to a sample's ``t`` (0.0 without a wall clock).

        Not anchored yet, it anchors on ``timestamp_us``, the receiver's clock for it.
        """
        if self._offset_s is None:
            self._anchor(timestamp_us)
        offset = self._offset_s
        return 0.0 if offset is None else offset

    def _anchor(self, timestamp_us: int) -> None:
        if self._wall_time is not None:
            self._offset_s = self._wall_time - timestamp_us / 1e6
            self.anchors += 1
            self._set_time_source("receiver")

    def _gps_anchor(self, event: Rows) -> None:
        if type(event) is UndecodedRows:
            fix = first_gps_fix_of_payloads(event.subscription.layout, event.payloads)
        else:
            assert type(event) is DataRows  # noqa: S101 (the two kinds of rows)
            fix = first_gps_fix(event.rows, event.timestamps_us)
        if fix is not None:
            utc_us, stamp_us = fix
            self._offset_s = (utc_us - stamp_us) / 1e6
            self.anchors += 1
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

    def _param_messages(self, names: Iterable[str]) -> list[MqttMessage]:
        """One retained ``param/NAME`` per parameter whose name can be a topic level."""
        out: list[MqttMessage] = []
        if not self.settings.param_topics:
            return out
        for name in names:
            if not valid_topic_level(name):
                self._skip_topic()  # still in the ``params`` object: a JSON key may be anything
                continue
            out.append(
                MqttMessage(
                    f"{self._base}/param/{name}",
                    self._param_text(name)[0].encode(),
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

    def _param_text(self, name: str) -> tuple[str, str]:
        """A parameter's value as JSON, and its ``"name":value`` entry of the ``params`` object."""
        texts = self._param_texts.get(name)
        if texts is None:
            value = _json_number(self._params[name])
            texts = self._param_texts[name] = (value, f"{json.dumps(name)}:{value}")
        return texts

    def _params_message(self) -> MqttMessage:
        body = ",".join(self._param_text(name)[1] for name in self._params)
        return self._retained("params", f"{{{body}}}".encode())

    def json_topic(self, name: str, multi_id: int) -> str:
        """The topic of the JSON samples of topic instance ``(name, multi_id)``."""
        return f"{self._base}/json/{name}/{multi_id}"

    def cdr_topic(self, name: str, multi_id: int) -> str:
        """The topic of the ROS 2 CDR samples of ``(name, multi_id)``.

        Their time is their user property ``t``: what the JSON samples' ``t`` is.
        """
        return f"{self._base}/cdr/{name}/{multi_id}"

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
            fields = [[n, spec[0]] for n, spec in _field_layout(sub.layout).items()]
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
