"""Live view in Foxglove: parser events served over the Foxglove WebSocket protocol.

The decoded topics go out as Foxglove channels from the Foxglove SDK's WebSocket server
(``foxglove-sdk``), whose Rust core does the socket work on its own threads: logging a message
is a non-blocking hand-over, so a slow or vanished viewer never delays an ack, the file or MQTT.
Each viewer has a bounded backlog (``foxglove.backlog``); when it is full the oldest messages are
dropped for that viewer alone.

What is sent is what MQTT sends: a :class:`~ulogstream.live.policy.PublishPolicy` chooses the rows
and builds the JSON sample objects, so fields, NaN-as-null and wall-clock ``t`` are those of the
MQTT JSON payloads. With MQTT on, a topic instance both publish alike (JSON at the same rate cap:
:func:`~ulogstream.live.policy.chooses_alike`) is served from MQTT's own messages, the very payload
bytes (see :meth:`FoxgloveSink.follow`): one choice and one encoding of each row for both. The
rest (another rate cap, MQTT off) goes through a policy of this sink's own. The sink routes:

- samples of topic instance ``(name, multi_id)`` to a channel named as in the MCAP export
  (``/vehicle_attitude``, ``/sensor_accel_1``), JSON-encoded with a JSON Schema of the row;
  the message's log time is the sample's ``t``, and so is its leading ``header.stamp``.
  With ``foxglove.encoding = "cdr"`` they are ROS 2 messages instead (``cdr``, with the MCAP
  export's ``ros2msg`` schemas), as PlotJuggler's Foxglove client requires;
- logged strings to ``/rosout`` (the MCAP export's log topic) with the well-known
  ``foxglove.Log`` schema, so the Log panel shows them with their levels;
- the recorder's status (file, bytes, packets, gaps, dropouts) to ``/ulogstream/status``.

The log's parameters are served through the server's parameter capability (read-only), and the
server's time (its ``time`` capability) follows the newest sample sent: Foxglove and Lichtblick
stamp each message with the server's time, so a live plot shows the samples at their own times,
not at when the browser received them. Topic instances nobody watches cost nothing: their rows
are not encoded.
"""

from __future__ import annotations

import json
import logging
import re
import ssl
import time
from typing import TYPE_CHECKING, Final

import foxglove
from foxglove.websocket import Capability, ServerListener

from ulogstream.adapters.foxglove_front import FoxgloveFront
from ulogstream.errors import ConfigError, ExportError
from ulogstream.export.rosnames import (
    CDR_ENCODING,
    LOG_TOPIC,
    PARAMETER_TOPIC,
    ROS2_SCHEMA_ENCODING,
    instance_topic,
    message_definition,
    ros_type_name,
)
from ulogstream.live.encode import JsonValue, json_sample_time, row_json_schema
from ulogstream.live.policy import PublishPolicy, Rows, chooses_alike
from ulogstream.ulog.events import (
    DataRows,
    DefinitionsEnd,
    FileHeader,
    FormatDefined,
    Parameter,
    Subscription,
    ULogEvent,
    UndecodedRows,
)
from ulogstream.ulog.gps_time import GPS_UTC_TOPICS

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from foxglove.websocket import ChannelView, Client, WebSocketServer

    from ulogstream.config.values import ListenAddress
    from ulogstream.live.outbox import MqttMessage

logger = logging.getLogger("ulogstream")

SDK_CLIENT_LOGGER: Final = "foxglove.websocket.connected_client"
"""Where the SDK logs what a viewer asked for (the SDK's Rust logs go to Python logging)."""

SDK_LOSSY_LOGGER: Final = f"{SDK_CLIENT_LOGGER}.send_lossy"
"""Where the SDK says that a viewer's outbox is full."""

SDK_WATCHED_LOGGERS: Final = (
    SDK_CLIENT_LOGGER,
    f"{SDK_CLIENT_LOGGER}.poller",
    SDK_LOSSY_LOGGER,
)
"""The SDK's loggers of viewer events (a logger's filters see only its own records)."""

SDK_SETTLE_S: Final = 0.05
"""At a stop, how long the SDK's threads may finish what they started for the viewers just cut,
before its channels are closed (:meth:`FoxgloveSink.stop`)."""

_OUTBOX_FULL = re.compile(r"outbox for client [^ ]*:(\d+) full")
"""The SDK's INFO line, once per episode, when a viewer's outbox overflows (no count given)."""

_UNKNOWN_CHANNEL = re.compile(r"subscribe to unknown channel: (\d+)")

_VIEWER_GONE: Final = ("Connection reset by peer", "without closing handshake")
"""What the SDK logs (as errors) when a viewer leaves without a close frame: a killed browser
tab, a dropped network. The SDK's poller says the first, its sender the second."""

STATUS_TOPIC: Final = "/ulogstream/status"
"""The recorder's status objects (the MQTT ``meta/status`` object)."""

STAMP_PROPERTY: Final[dict[str, JsonValue]] = {
    "type": "object",
    "description": "the sample's time (its t), for the Plot panel's 'header stamp' mode",
    "properties": {
        "stamp": {
            "type": "object",
            "properties": {"sec": {"type": "integer"}, "nsec": {"type": "integer"}},
        }
    },
}
"""The ``header`` every sample sent to a viewer starts with (MQTT's payloads have none)."""


def stamped_schema(schema: dict[str, JsonValue]) -> dict[str, JsonValue]:
    """``schema`` (a row's JSON sample object) with the leading ``header.stamp`` of Foxglove's."""
    properties = schema["properties"]
    assert isinstance(properties, dict)  # noqa: S101 (row_json_schema's shape)
    return {
        **schema,
        "properties": {"header": STAMP_PROPERTY, **properties},
        "required": ["header", *properties],
    }


def json_sample(message: MqttMessage) -> tuple[bytes, int]:
    """A JSON sample message's payload with its ``header.stamp``, and its time in nanoseconds."""
    time_ns = round(json_sample_time(message.payload) * 1e9)
    return stamped(message.payload, time_ns), time_ns


def stamped(payload: bytes, time_ns: int) -> bytes:
    """A JSON sample payload with ``header.stamp`` (``{sec, nsec}`` of ``time_ns``) in front.

    Foxglove's Plot panel can place each point at its message's ``header.stamp``: the sample's
    own time to the nanosecond, whatever the order and moment it arrived in.
    """
    sec, nsec = divmod(time_ns, 1_000_000_000)
    return b'{"header":{"stamp":{"sec":%d,"nsec":%d}},%s' % (sec, nsec, payload[1:])


PENDING_S: Final = 2.0
"""How long a new channel's samples wait for a viewer's subscription (monotonic seconds).

A viewer subscribes to a channel when it is advertised; the samples logged in between would
reach nobody, so a connected viewer would miss each topic's first rows. While a viewer is
connected they are kept, and sent when the first subscription arrives, or dropped after this
long (the viewers do not want that topic)."""

VIEWERS_GRACE_S: Final = 0.5
"""How long a new channel's kept samples wait after its first subscription (monotonic seconds).

The SDK logs a sample to the viewers subscribed at that moment. Two viewers connected as a log
starts (Foxglove on a laptop and a browser on a tablet, say) subscribe to its new channels some
milliseconds apart, and the kept samples, sent at the first subscription, reached the first
viewer only: the second missed up to a second of each topic. Sent this long after the first
subscription, they reach every viewer that subscribed by then; the first viewer's plot starts
this much later, once a log."""

PENDING_BUDGET: Final = 4 << 20
"""Bytes of samples kept for new channels at most (all of them together)."""

QUIET_NS: Final = 1_000_000_000
"""A topic that logs nothing for this long (server time) after a viewer subscribed to it is
quiet: its newest sample is sent then (commands, setpoints, states that change rarely would
show nothing until their next change). Every viewer subscribed to it gets that sample. The wait
starts again where the server's time was unknown at the subscription (nothing sent yet) or goes
back (anchored anew); a new log's topics have no newest sample until they log one."""

CLOCK_STEP_NS: Final = 10_000_000
"""The server's time moves in steps of at least this much sample time (10 ms): at most 100 time
messages a second to each viewer of a live stream, however many samples go out (a flight
replayed faster sends more); ``header.stamp`` keeps each sample's exact time."""

LOG_SCHEMA_NAME: Final = "foxglove.Log"

LOG_SCHEMA: Final[dict[str, JsonValue]] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": LOG_SCHEMA_NAME,
    "type": "object",
    "properties": {
        "timestamp": {
            "type": "object",
            "properties": {"sec": {"type": "integer"}, "nsec": {"type": "integer"}},
        },
        "level": {"type": "integer", "enum": [0, 1, 2, 3, 4, 5]},
        "message": {"type": "string"},
        "name": {"type": "string"},
        "file": {"type": "string"},
        "line": {"type": "integer"},
    },
}
"""Foxglove's ``foxglove.Log`` message as a JSON Schema (levels: 0 unknown, 1 debug, 2 info,
3 warning, 4 error, 5 fatal)."""

STATUS_SCHEMA: Final[dict[str, JsonValue]] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "ulogstream.Status",
    "type": "object",
    "properties": {
        "online": {"type": "boolean"},
        "state": {"type": "string"},
        "log_file": {"type": "string", "description": "the file being written; null between logs"},
        "log_bytes": {"type": "integer"},
        "packets": {"type": "integer"},
        "gaps": {"type": "integer"},
        "packets_lost": {"type": "integer"},
        "dropouts": {"type": "integer"},
    },
}

# PX4's levels are syslog's ('0' emergency .. '7' debug): Foxglove's are 5 fatal .. 1 debug.
_FOXGLOVE_LEVELS: Final = {0: 5, 1: 5, 2: 5, 3: 4, 4: 3, 5: 2, 6: 2, 7: 1}


def foxglove_log(obj: dict[str, JsonValue]) -> tuple[dict[str, JsonValue], int]:
    """A ``foxglove.Log`` object for an MQTT log object (``t``, ``level``, ``tag``, ``text``).

    Returns:
        The object and its time in nanoseconds since the epoch.
    """
    t = obj.get("t")
    level = obj.get("level")
    tag = obj.get("tag")
    seconds = t if isinstance(t, int | float) else 0.0
    nanoseconds = round(seconds * 1e9)
    entry: dict[str, JsonValue] = {
        "timestamp": {"sec": nanoseconds // 1_000_000_000, "nsec": nanoseconds % 1_000_000_000},
        "level": _FOXGLOVE_LEVELS.get(level, 0) if isinstance(level, int) else 0,
        "message": str(obj.get("text", "")),
        "name": "px4" if tag is None else f"px4 tag {tag}",
        "file": "",
        "line": 0,
    }
    return entry, nanoseconds


def foxglove_url(address: ListenAddress, *, tls: bool) -> str:
    """The URL a viewer opens: ``ws://HOST:PORT`` (``wss://`` with TLS)."""
    return f"{'wss' if tls else 'ws'}://{address}"


class _Instance:
    """One topic instance's channel."""

    __slots__ = (
        "advertised_at",
        "anchors",
        "channel",
        "dtype",
        "first_served",
        "multi_id",
        "name",
        "newest",
        "pending",
        "rows_events",
        "shared",
    )

    def __init__(
        self,
        name: str,
        multi_id: int,
        dtype: object,
        channel: foxglove.Channel,
        now: float,
        *,
        watched: bool,
    ) -> None:
        self.name = name
        self.multi_id = multi_id
        self.dtype = dtype
        self.channel = channel
        self.anchors = name in GPS_UTC_TOPICS
        """Its rows anchor the wall clock: this sink's policy sees them even when unwatched."""
        self.shared = False
        """Served from the MQTT policy's samples (see :meth:`FoxgloveSink.follow`)."""
        self.pending: list[tuple[bytes, int]] | None = [] if watched else None
        """Samples kept until a viewer's subscription reaches the new channel (None: no more,
        or no viewer was connected to subscribe)."""
        self.advertised_at = now
        self.first_served = False
        """Its kept samples went to the channel's first subscription: nothing to catch up."""
        self.newest: Rows | None = None
        """The newest rows logged (sent or not), for a viewer that subscribes later."""
        self.rows_events = 0
        """Rows events seen: unchanged for a while after a subscription means a quiet topic."""

    def readvertised(self, channel: foxglove.Channel, now: float) -> None:
        """A new channel for this instance: its first samples wait for the viewer again.

        Samples still kept for the old channel (its subscription failed) stay kept for this one.
        """
        self.channel = channel
        if self.pending is None:
            self.pending = []
        self.advertised_at = now


class FoxgloveSink:
    """Parser events to Foxglove channels; the same interface as the recorder's ``Publisher``.

    Its arguments are named as the ``[foxglove]`` keys and were checked by the configuration.

    Args:
        listen: Where to listen for viewers (``foxglove.listen``, parsed).
        tls_cert_file: Certificate to serve ``wss://`` with (None: plain ``ws://``).
        tls_key_file: The certificate's private key.
        backlog: Messages kept per viewer that reads slowly before the oldest are dropped.
        policy: Chooses and encodes the rows (a policy of this sink's own, for its rate cap),
            in ``encoding``.
        encoding: ``json`` or ``cdr`` (``foxglove.encoding``): the samples' channels.
    """

    def __init__(
        self,
        *,
        listen: ListenAddress,
        tls_cert_file: Path | None = None,
        tls_key_file: Path | None = None,
        backlog: int = 1024,
        policy: PublishPolicy,
        encoding: str = "json",
    ) -> None:
        self.policy = policy
        self._cdr = encoding == "cdr"
        self._formats: dict[str, FormatDefined] = {}
        """The log's formats (the ROS 2 schemas name the nested ones)."""

        self.address = listen
        self._tls_cert_file = tls_cert_file
        self._tls_key_file = tls_key_file
        self._backlog = backlog
        self.url = foxglove_url(self.address, tls=tls_cert_file is not None)
        """Where viewers connect (the port is the bound one once :meth:`start` returned)."""
        self._context = foxglove.Context()
        self._server: WebSocketServer | None = None
        self._front: FoxgloveFront | None = None
        self._by_msg_id: dict[int, _Instance] = {}
        self._by_key: dict[tuple[str, int], _Instance] = {}
        self._by_channel_id: dict[int, _Instance] = {}
        self._by_topic: dict[str, _Instance] = {}
        """Instances by this sink's policy's JSON topic (those not shared with MQTT)."""
        self._shared: PublishPolicy | None = None
        """MQTT's policy, whose JSON samples this sink serves where it chooses alike."""
        self._by_shared_topic: dict[str, _Instance] = {}
        """Instances served from MQTT's samples, by MQTT's JSON topic."""
        self._taken: set[str] = {LOG_TOPIC, PARAMETER_TOPIC, STATUS_TOPIC}
        self._log_channel = self._json_channel(LOG_TOPIC, LOG_SCHEMA_NAME, LOG_SCHEMA)
        self._status_channel = self._json_channel(STATUS_TOPIC, "ulogstream.Status", STATUS_SCHEMA)
        self._params: dict[str, foxglove.Parameter] = {}
        """The log's parameters, as served; the previous log's until the new one's are read."""
        self._new_params: dict[str, foxglove.Parameter] = {}
        self._definitions_done = False
        self._readvertise: set[int] = set()
        """Channels a viewer could not subscribe to (added from the server's threads)."""
        self._sdk_watch = _SdkLogWatch(self._readvertise, self)
        self.outbox_overflows = 0
        """Times a viewer's outbox was found full (messages were dropped for that viewer)."""
        self.readvertised = 0
        """Channels advertised again because a viewer's subscription raced their advertisement."""
        self.sent = 0
        """Messages handed to the server (each reaches every viewer subscribed to it)."""
        self._clock_ns = 0
        """The server's time (the ``time`` capability): the newest sample's, going back only
        when the samples' wall clock is anchored anew (see :meth:`_follow_anchor`)."""
        self._now = 0.0
        """The monotonic time of the newest event."""
        self._pending_bytes = 0
        self._in_grace: dict[_Instance, float] = {}
        """Instances with kept samples and a subscription -> when the first subscription was
        seen: the samples go out :data:`VIEWERS_GRACE_S` later."""
        self._subscribed: set[int] = set()
        self._quiet_watch: dict[int, tuple[int, int]] = {}
        """Subscribed channel id -> (its instance's rows events, server time) at subscription."""
        """Channels a viewer subscribed to (added from the server's threads)."""
        self.resent = 0
        """Samples of quiet topics sent again for a viewer that subscribed later."""
        self._anchors_seen: dict[int, int] = {}
        """Each policy's ``anchors`` when its samples were last sent."""

    # -- the server ----------------------------------------------------------------------------

    def start(self) -> None:
        """Listen for viewers.

        The SDK's server listens on a loopback port of its own, behind a
        :class:`~ulogstream.adapters.foxglove_front.FoxgloveFront` at the configured address,
        so that viewers of either Foxglove WebSocket subprotocol connect.

        Raises:
            ConfigError: The address cannot be listened on (in use, unknown host) or the TLS
                files cannot be read; one line naming the setting.
        """
        tls = None
        if self._tls_cert_file is not None and self._tls_key_file is not None:
            tls = _tls_context(self._tls_cert_file, self._tls_key_file)
        address = self.address
        for name in SDK_WATCHED_LOGGERS:
            logging.getLogger(name).addFilter(self._sdk_watch)
        # its one line when a viewer falls behind is INFO: seen (as a WARNING) at any log level
        logging.getLogger(SDK_LOSSY_LOGGER).setLevel(logging.INFO)
        try:
            self._server = foxglove.start_server(
                name="ulogstream",
                host="127.0.0.1",
                port=0,
                capabilities=[Capability.Parameters, Capability.Time],
                server_listener=_Listener(self),
                context=self._context,
                message_backlog_size=self._backlog,
            )
            self._front = FoxgloveFront(listen=address, upstream_port=self._server.port, tls=tls)
        except (RuntimeError, ValueError, OSError) as err:
            self.stop()
            reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
            msg = (
                f"foxglove.listen {address}: cannot listen for Foxglove viewers: "
                f"{reason.removeprefix('FoxgloveError: ')}; "
                "choose another [HOST:]PORT (record --foxglove, or [foxglove] listen)"
            )
            raise ConfigError(msg) from None
        if address.port == 0:
            self.address = type(address)(address.host, self._front.port)
            self.url = foxglove_url(self.address, tls=tls is not None)
        logger.info("Foxglove live view at %s (Open connection > Foxglove WebSocket)", self.url)

    def stop(self) -> None:
        """Cut the viewers, close every channel and stop the server.

        The viewers go first, and the SDK's threads get a moment to finish what they started
        for them: foxglove-sdk 0.30 calls the listener (Python: it needs the GIL) while holding
        its channel lock, and ``Channel.close`` waits for that lock without releasing the GIL.
        A viewer subscribing while a channel closed hung the process (seen once in CI).
        """
        if self._front is not None:
            self._front.close()
            self._front = None
            time.sleep(SDK_SETTLE_S)  # releases the GIL: a callback under way takes it and ends
        for instance in self._by_key.values():
            instance.channel.close()
        self._log_channel.close()
        self._status_channel.close()
        self._by_topic.clear()
        self._by_shared_topic.clear()
        self._by_msg_id.clear()
        self._by_key.clear()
        self._by_channel_id.clear()
        if self._server is not None:
            self._server.stop()
            self._server = None
        for name in SDK_WATCHED_LOGGERS:
            logging.getLogger(name).removeFilter(self._sdk_watch)

    # -- events (the Publisher interface) -------------------------------------------------------

    def follow(self, mqtt: PublishPolicy | None) -> None:
        """Serve the samples MQTT's ``mqtt`` policy chooses alike from its messages (None: off).

        Takes effect for the topic instances subscribed from then on (the pipeline calls it as
        each log starts). Their rows then reach this sink only as MQTT's JSON messages, passed
        to :meth:`event` and :meth:`mirror`: this sink's policy neither chooses nor encodes them.
        Where the rate caps differ, this sink's policy still takes the payloads of rows MQTT's
        has just encoded (:meth:`~ulogstream.live.policy.PublishPolicy.reuse_json_of`).
        """
        self._shared = mqtt
        self.policy.reuse_json_of(mqtt)

    def event(self, event: ULogEvent, now: float, shared: Sequence[MqttMessage] = ()) -> None:
        """Send what one event causes; ``shared``: what the followed MQTT policy made of it."""
        self._now = now
        if self._subscribed or self._in_grace or self._quiet_watch:
            self._catch_up()
        if isinstance(event, UndecodedRows | DataRows):  # the most frequent: the shortest path
            instance = self._by_msg_id.get(event.subscription.msg_id)
            if instance is not None:
                instance.newest = event
                instance.rows_events += 1
                if instance.shared:
                    if shared:
                        self.mirror(shared)
                    if instance.anchors:
                        self.policy.observe_time(event)
                    return
                if (
                    not instance.anchors
                    and instance.pending is None
                    and not instance.channel.has_sinks()
                ):
                    return  # nobody watches: not encoded at all
        else:
            self._metadata(event)
        if self._readvertise:
            self._advertise_again()
        messages = self.policy.select(event, now)
        if messages:
            self.offer(messages)

    def mirror(self, messages: Sequence[MqttMessage]) -> None:
        """Send the followed MQTT policy's JSON samples of shared instances to their channels.

        The payload bytes are MQTT's own; anything else in ``messages`` is left out.
        """
        if self._readvertise:
            self._advertise_again()
        self._follow_anchor(self._shared)
        by_topic = self._by_shared_topic
        for message in messages:
            instance = by_topic.get(message.topic)
            if instance is not None:
                self._send(instance, *json_sample(message))

    def _sample(self, message: MqttMessage) -> tuple[bytes, int]:
        """What a sample message of this sink's policy sends, and its time in nanoseconds."""
        if self._cdr:  # the time is the message's "t" (see PublishPolicy.cdr_topic)
            return message.payload, round(float(message.user_properties[0][1]) * 1e9)
        return json_sample(message)

    def _send(self, instance: _Instance, payload: bytes, time_ns: int) -> None:
        """Log one sample of ``instance``; a new channel's wait for its first subscription."""
        if time_ns >= self._clock_ns + CLOCK_STEP_NS:
            self._advance_clock(time_ns)
        channel = instance.channel
        pending = instance.pending
        if pending is not None:
            now = self._now
            if not channel.has_sinks():
                if (
                    now - instance.advertised_at < PENDING_S
                    and self._pending_bytes < PENDING_BUDGET
                ):
                    pending.append((payload, time_ns))
                    self._pending_bytes += len(payload)
                    return
                self._release_pending(instance)  # nobody subscribed in time (or left): dropped
            else:
                # Seen here first when its on_subscribe has not reached _catch_up yet.
                subscribed_at = self._in_grace.setdefault(instance, now)
                if now - subscribed_at < VIEWERS_GRACE_S and self._pending_bytes < PENDING_BUDGET:
                    pending.append((payload, time_ns))  # behind the kept ones, in order
                    self._pending_bytes += len(payload)
                    return
                # its on_subscribe may still be on its way to _catch_up: not a late viewer
                self._flush_pending(instance)
                instance.first_served = True
        channel.log(payload, log_time=time_ns)
        self.sent += 1

    def _flush_pending(self, instance: _Instance) -> None:
        """Send a new channel's kept samples (its first subscription has arrived)."""
        pending = self._release_pending(instance)
        for early, early_ns in pending:
            instance.channel.log(early, log_time=early_ns)
        self.sent += len(pending)

    def _release_pending(self, instance: _Instance) -> list[tuple[bytes, int]]:
        """Stop keeping samples for ``instance``; the ones kept so far (off the budget)."""
        pending = instance.pending or []
        self._pending_bytes -= sum(len(early) for early, _ in pending)
        instance.pending = None
        self._in_grace.pop(instance, None)
        return pending

    def _catch_up(self) -> None:
        """Send kept samples whose grace is over, and quiet topics' newest to late viewers."""
        now = self._now
        for channel_id in list(self._subscribed):
            self._subscribed.discard(channel_id)
            instance = self._instance_of(channel_id)
            if instance is None:
                continue
            if instance.pending is not None:  # subscribed within the grace: kept samples go to it
                self._in_grace.setdefault(instance, now)
                continue
            if instance.first_served:
                instance.first_served = False  # this was that first subscription
                continue
            self._quiet_watch[channel_id] = (instance.rows_events, self._clock_ns)
        for instance, subscribed_at in list(self._in_grace.items()):
            if now - subscribed_at >= VIEWERS_GRACE_S:
                self._flush_pending(instance)
        clock_ns = self._clock_ns
        for channel_id, (events, since_ns) in list(self._quiet_watch.items()):
            if clock_ns < since_ns or not since_ns:  # went back (anchored anew), or was unknown
                self._quiet_watch[channel_id] = (events, clock_ns)
                continue
            if clock_ns - since_ns < QUIET_NS:
                continue
            del self._quiet_watch[channel_id]
            instance = self._instance_of(channel_id)
            if instance is None or instance.rows_events != events or instance.newest is None:
                continue  # not quiet: the viewer has had its samples since
            for message in self.policy.sample_of(instance.newest):
                payload, time_ns = self._sample(message)
                instance.channel.log(payload, log_time=time_ns)
                self.resent += 1

    def _instance_of(self, channel_id: int) -> _Instance | None:
        return self._by_channel_id.get(channel_id)

    def _follow_anchor(self, policy: PublishPolicy | None) -> None:
        """Let the server's time go back once when the samples' wall clock was anchored anew.

        A log's first samples carry the receiver's clock until a GPS fix anchors them on UTC;
        a companion computer's clock that is off (no RTC, no network) or a replayed flight
        puts that far from the GPS time, and a clock that only went forward would stand still
        until the samples caught up (the viewers' receive times frozen, for days on a replay).
        """
        if policy is not None and policy.anchors != self._anchors_seen.get(id(policy)):
            self._anchors_seen[id(policy)] = policy.anchors
            self._clock_ns = 0

    def _advance_clock(self, time_ns: int) -> None:
        """Tell the viewers that the server's time is now ``time_ns`` (a newer sample's time).

        A Foxglove-lineage viewer stamps each message it receives with the server's latest time
        (its wall clock without the ``time`` capability), and drops what it buffered when that
        time goes back; so the time follows the newest sample sent, and only forward.
        """
        self._clock_ns = time_ns
        if self._server is not None:
            self._server.broadcast_time(time_ns)

    def offer(self, messages: list[MqttMessage]) -> None:
        """Send this sink's policy's samples, logged strings and status to their channels."""
        self._follow_anchor(self.policy)
        by_topic = self._by_topic
        for message in messages:
            instance = by_topic.get(message.topic)
            if instance is not None:
                self._send(instance, *self._sample(message))
                continue
            if message.topic == self.policy.status_topic:
                self._status_channel.log(message.payload, log_time=time.time_ns())
            elif message.topic == self.policy.log_topic:
                entry, time_ns = foxglove_log(json.loads(message.payload))
                self._log_channel.log(json.dumps(entry).encode(), log_time=time_ns)
            else:
                continue  # schemas, info, retained params: served otherwise or not at all
            self.sent += 1

    @property
    def backlog(self) -> int:
        """Messages queued per viewer (``foxglove.backlog``)."""
        return self._backlog

    def outbox_full(self, upstream_port: int) -> str:
        """Count one overflow of a viewer's outbox; return the viewer's address (server thread).

        The SDK names the connection from the front, whose port the front maps to the viewer.
        """
        self.outbox_overflows += 1
        front = self._front
        return "?" if front is None else front.viewers.get(upstream_port, "?")

    def subscribed(self, channel_id: int) -> None:
        """A viewer subscribed to channel ``channel_id`` (called from the server's threads).

        The server's time goes out first: a viewer stamps each message with the latest time it
        was told, and one that joined since the last step would stamp its first messages 0
        (1970 on a plot by receive time).
        """
        self._subscribed.add(channel_id)  # set.add: atomic under the GIL
        clock_ns = self._clock_ns
        if clock_ns and self._server is not None:
            self._server.broadcast_time(clock_ns)

    def counters(self) -> dict[str, int]:
        """This sink's counters for the status object."""
        return {
            "foxglove_sent": self.sent,
            "foxglove_resent": self.resent,
            "foxglove_viewers": 0 if self._front is None else len(self._front.viewers),
            "foxglove_outbox_full": self.outbox_overflows,
            "foxglove_channels_replaced": self.readvertised,
        }

    def parameters(self, names: list[str]) -> list[foxglove.Parameter]:
        """The log's parameters named ``names`` (all of them when empty)."""
        params = self._params
        if not names:
            return list(params.values())
        return [params[name] for name in names if name in params]

    # -- metadata -------------------------------------------------------------------------------

    def _metadata(self, event: ULogEvent) -> None:
        match event:
            case FileHeader():
                self._new_log()
            case FormatDefined(name):
                self._formats[name] = event
            case Subscription():
                self._subscribe(event)
            case Parameter(name, value, _):
                param = _parameter(name, value)
                if not self._definitions_done:
                    self._new_params[name] = param
                    return
                self._params = {**self._params, name: param}  # replaced whole: read by threads
                if self._server is not None:
                    self._server.publish_parameter_values([param])
            case DefinitionsEnd():
                self._definitions_done = True
                self._params, self._new_params = self._new_params, {}
                if self._server is not None and self._params:
                    self._server.publish_parameter_values(list(self._params.values()))
            case _:
                pass

    def _new_log(self) -> None:
        """A new log: new message ids and parameters.

        Channels stay: a topic instance logged again with the same format keeps its channel, so
        a viewer's subscriptions and plots carry on from one log to the next. Their newest rows
        do not: sent again to a late viewer, the last log's would be a point on this log's clock
        that never happened (see :data:`QUIET_NS`).
        """
        for instance in self._by_key.values():
            instance.newest = None
        self._by_msg_id.clear()
        self._new_params = {}
        self._definitions_done = False
        self._formats = {}

    def _subscribe(self, sub: Subscription) -> None:
        key = (sub.name, sub.multi_id)
        instance = self._by_key.get(key)
        if instance is None or instance.dtype != sub.dtype:
            if instance is not None:  # the same instance again with another format
                instance.channel.close()
            topic = instance.channel.topic() if instance is not None else None
            if topic is None:
                topic = instance_topic(sub.name, sub.multi_id, self._taken)
                self._taken.add(topic)
            channel = self._cdr_channel(topic, sub) if self._cdr else self._row_channel(topic, sub)
            if channel is None:
                return
            watched = self._front is not None and bool(self._front.viewers)
            instance = _Instance(
                sub.name, sub.multi_id, sub.dtype, channel, self._now, watched=watched
            )
            self._by_key[key] = instance
            self._by_channel_id[channel.id()] = instance
        self._route(instance)
        self._by_msg_id[sub.msg_id] = instance

    def _row_channel(self, topic: str, sub: Subscription) -> foxglove.Channel:
        """A JSON channel of ``sub``'s samples, with ``header.stamp`` in front."""
        schema = stamped_schema(row_json_schema(sub.name, sub.dtype))
        return self._json_channel(topic, sub.name, schema)

    def _cdr_channel(self, topic: str, sub: Subscription) -> foxglove.Channel | None:
        """A ROS 2 channel of ``sub``'s samples: the MCAP export's ``ros2msg`` schema.

        None (with a warning) where the format cannot be a ROS 2 type: that topic is not served.
        """
        try:
            typename = ros_type_name(sub.name)
            definition = message_definition(sub.name, self._formats)
        except ExportError as err:
            logger.warning("Foxglove: topic %s is not served as ROS 2 messages: %s", topic, err)
            return None
        return foxglove.Channel(
            topic,
            schema=foxglove.Schema(
                name=typename, encoding=ROS2_SCHEMA_ENCODING, data=definition.encode()
            ),
            message_encoding=CDR_ENCODING,
            context=self._context,
        )

    def _route(self, instance: _Instance) -> None:
        """Serve ``instance`` from MQTT's samples when MQTT chooses them alike, else its own."""
        own_topic = (
            self.policy.cdr_topic(instance.name, instance.multi_id)
            if self._cdr
            else self.policy.json_topic(instance.name, instance.multi_id)
        )
        mqtt = self._shared
        instance.shared = mqtt is not None and chooses_alike(
            mqtt.settings, self.policy.settings, instance.name
        )
        if mqtt is not None and instance.shared:
            self._by_topic.pop(own_topic, None)
            self._by_shared_topic[mqtt.json_topic(instance.name, instance.multi_id)] = instance
        else:
            if mqtt is not None:
                self._by_shared_topic.pop(mqtt.json_topic(instance.name, instance.multi_id), None)
            self._by_topic[own_topic] = instance

    def _advertise_again(self) -> None:
        """Replace the channels a viewer failed to subscribe to: it subscribes to the new one.

        Under load foxglove-sdk 0.30 sometimes loses a channel created while a viewer
        subscribes to others: the viewer got its advertisement, but the server answers its
        subscription with "subscribe to unknown channel" and viewers connecting later are not
        told of it, so the topic would stay empty for good. A new channel (new id) fixes it.
        """
        ids = set(self._readvertise)
        self._readvertise.difference_update(ids)
        for instance in self._by_key.values():
            old = instance.channel
            if old.id() not in ids:
                continue
            schema = old.schema()
            assert schema is not None  # noqa: S101 (every instance channel has one)
            old.close()  # first: the SDK hands out the open channel of an equal topic and schema
            channel = foxglove.Channel(
                old.topic(),
                schema=schema,
                message_encoding=old.message_encoding,
                context=self._context,
            )
            instance.readvertised(channel, self._now)
            self._in_grace.pop(instance, None)  # kept samples wait for a subscription again
            self._by_channel_id[channel.id()] = instance
            self.readvertised += 1

    def _json_channel(
        self, topic: str, schema_name: str, schema: dict[str, JsonValue]
    ) -> foxglove.Channel:
        return foxglove.Channel(
            topic,
            schema=foxglove.Schema(
                name=schema_name, encoding="jsonschema", data=json.dumps(schema).encode()
            ),
            message_encoding="json",
            context=self._context,
        )


class _SdkLogWatch(logging.Filter):
    """Watches the SDK's viewer log: failed subscriptions are noted, handled events not errors.

    A vanished viewer makes the SDK log one error per message it could not send: the first
    "connection reset" says it all, so "Error sending message" records are dropped, and the
    reset itself (a viewer gone without a close frame, :data:`_VIEWER_GONE`) is an INFO line.
    A subscription that raced its channel's advertisement is handled (the channel is advertised
    again and counted in ``foxglove_channels_replaced``): a DEBUG line, not an ERROR.
    """

    def __init__(self, readvertise: set[int], sink: FoxgloveSink) -> None:
        super().__init__()
        self._readvertise = readvertise
        self._sink = sink

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if text.startswith("Error sending message to client"):
            return False
        full = _OUTBOX_FULL.search(text)
        if full is not None:
            viewer = self._sink.outbox_full(int(full.group(1)))
            record.msg = (
                "Foxglove viewer at %s falls behind: its outbox (foxglove.backlog = %d "
                "messages) is full and the oldest are dropped for it alone; a faster link, a "
                "lower foxglove.default_rate_hz or a larger backlog keeps up"
            )
            record.args = (viewer, self._sink.backlog)
            _relevel(record, logging.WARNING)
            return True
        unknown = _UNKNOWN_CHANNEL.search(text)
        if unknown is not None:
            self._readvertise.add(int(unknown.group(1)))  # set.add: atomic under the GIL
            _relevel(record, logging.DEBUG)
        elif any(reset in text for reset in _VIEWER_GONE):
            _relevel(record, logging.INFO)
        return True


def _relevel(record: logging.LogRecord, level: int) -> None:
    """Give ``record`` another level (handlers then judge it by that one)."""
    record.levelno = level
    record.levelname = logging.getLevelName(level)


class _Listener(ServerListener):
    """The server's callbacks (called on its threads): parameters are read-only."""

    def __init__(self, sink: FoxgloveSink) -> None:
        self._sink = sink

    def on_subscribe(self, client: Client, channel: ChannelView) -> None:
        """Note it: a quiet topic's newest sample is sent again (see :data:`QUIET_NS`)."""
        del client
        self._sink.subscribed(channel.id)

    def on_get_parameters(
        self, client: Client, param_names: list[str], request_id: str | None = None
    ) -> list[foxglove.Parameter]:
        del client, request_id
        return self._sink.parameters(param_names)

    def on_set_parameters(
        self, client: Client, parameters: list[foxglove.Parameter], request_id: str | None = None
    ) -> list[foxglove.Parameter]:
        """The log's values stay: a recording's parameters cannot be changed from a viewer."""
        del client, request_id
        return self._sink.parameters([p.name for p in parameters])


def _parameter(name: str, value: int | float) -> foxglove.Parameter:  # noqa: PYI041 (int and float are told apart)
    if isinstance(value, float):
        return foxglove.Parameter(name, value=value, type=foxglove.ParameterType.Float64)
    return foxglove.Parameter(name, value=value)


def _tls_context(cert_file: Path, key_file: Path) -> ssl.SSLContext:
    """A server context for ``wss://`` from the configured files.

    Raises:
        ConfigError: A file cannot be read or is no PEM certificate and key; naming the setting.
    """
    for path, key in ((cert_file, "foxglove.tls_cert_file"), (key_file, "foxglove.tls_key_file")):
        try:
            path.read_bytes()
        except OSError as err:
            msg = f"{key} {path} cannot be read: {err.strerror}"
            raise ConfigError(msg) from None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(cert_file, key_file)
    except ssl.SSLError as err:
        msg = (
            f"foxglove.tls_cert_file {cert_file} and foxglove.tls_key_file {key_file} are no PEM "
            f"certificate and matching private key: {err.reason or err}"
        )
        raise ConfigError(msg) from None
    return context
