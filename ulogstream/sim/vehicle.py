"""A simulated PX4 streaming a ULog file over MAVLink: its logger and ``mavlink_ulog``, sans-IO.

The model follows PX4's ``log_writer_mavlink.cpp`` (packing), ``mavlink_ulog.cpp`` (queue,
budget, acks, resends) and ``logger.cpp`` (commands), as described in protocol.md "What PX4 does":

- The logger packs ULog messages into 249-byte packets. ``first_message_offset`` is where the
  first message *starting* in a packet begins (255 if none); packet 0 starts with the file header.
- Header, definitions, and later 'A'/'M' messages are *reliable*: their packets go as
  LOGGING_DATA_ACKED and the logger blocks until the ack (stop-and-wait). Leaving reliable mode
  flushes the partial packet (acked); entering it does not, so an acked packet can begin with
  best-effort bytes. Everything else leaves in full, unacked LOGGING_DATA packets.
- The end of the flight (``stop_at_end``): a GCS with "stop logging on disarm" (QGroundControl's
  option) sends LOGGING_STOP when the vehicle disarms. PX4 answers it IN_PROGRESS, writes the
  post-flight perf data, flushes its last partial packet (acked), answers ACCEPTED (to the GCS,
  on every link) and its stream is over. The receiver thus gets every byte of the log and sees
  the stream end by another client's STOP. Without it the vehicle holds its last partial packet
  and the post-flight tail until a STOP comes, as a PX4 still powered on the bench does.
- Packets queue in a 16-deep uORB queue (a full queue loses its oldest packet: a sequence gap),
  drained by the MAVLink side at most 70 % of the link rate per 100 ms window, and not at all
  while an acked packet waits for its ack (resent every 50 ms; after 50 tries the stream is torn
  down).

Values in (:class:`CommandLong`, :class:`LoggingAck`, ``now``), values out (:data:`VehicleOutput`),
time only as an argument: the runner does the I/O, tests drive it with a fake clock.

One module past 700 lines on purpose: the packer, the queue and the command handling are one
state machine, as they are in PX4; split, each part would need the others' state.
"""

from __future__ import annotations

import math
import struct
from collections import deque
from typing import Final, Literal

import msgspec

from ulogstream.errors import ULogFormatError
from ulogstream.sim.faults import NO_FAULTS, Draw, FaultConfig, FaultRng
from ulogstream.stream.packets import (
    MAV_CMD_LOGGING_START,
    MAV_CMD_LOGGING_STOP,
    MAV_CMD_REQUEST_MESSAGE,
    MAV_COMP_ID_AUTOPILOT1,
    MAVLINK_MSG_ID_AUTOPILOT_VERSION,
    MAX_DATA_LENGTH,
    NO_MESSAGE_START,
    SEQUENCE_MODULO,
    CommandLong,
    LoggingAck,
    LoggingPacket,
    MavlinkMessage,
    MavResult,
)
from ulogstream.ulog.spec import (
    DEFINITION_TYPES,
    HEADER_SIZE,
    MAGIC,
    MESSAGE_HEADER_SIZE,
    MessageType,
    unpack_message_header,
)
from ulogstream.ulog.writer import ULogWriter

ACK_TIMEOUT: Final = 0.05
"""Seconds between resends of an unacknowledged LOGGING_DATA_ACKED (``ulog_stream_ack``)."""

ACK_MAX_TRIES: Final = 50
"""Sends of one acked packet before PX4 tears the stream down."""

QUEUE_DEPTH: Final = 16
"""``ulog_stream`` uORB queue length: older packets are overwritten when the MAVLink side lags."""

RATE_WINDOW: Final = 0.1
"""``mavlink_ulog`` counts packets in windows of this many seconds."""

MAX_RATE_FACTOR: Final = 0.7
"""Share of the link's configured rate log streaming may use."""

LOGGING_DATA_FRAME_SIZE: Final = 267
"""Payload (255) plus MAVLink 2 overhead (12): what PX4 divides the link rate by."""

MIN_LINK_RATE: Final = 5000.0
"""Links configured slower than this (B/s) are DENIED log streaming (telemetry radios)."""

USB_LINK_RATE: Final = 800_000.0
"""PX4's USB CDC link rate (B/s): about 2100 packets/s."""

UDP_LINK_RATE: Final = 100_000.0
"""PX4's default Ethernet/UDP link rate (B/s): about 270 packets/s."""

RADIO_LINK_RATE: Final = 5760.0
"""A telemetry-radio MAVLink instance's configured rate (B/s): above the 5000 B/s streaming
floor, so START is accepted, and about 20 packets/s of budget."""

MAX_REPLAY_GAP: Final = 1.0
"""Seconds of log time: longer jumps between timestamps are replayed as this (corrupt logs)."""

HOLD_TIMEOUT: Final = 0.05
"""A frame held back for reordering goes out after this long if no other frame follows."""

MAV_TYPE_QUADROTOR: Final = 2
MAV_AUTOPILOT_PX4: Final = 12

GCS_SYSTEM_ID: Final = 255
"""System id of the GCS whose STOP on disarm ends the flight's log (QGroundControl's default)."""

GCS_COMPONENT_ID: Final = 190
"""Component id of that GCS (MAV_COMP_ID_MISSIONPLANNER, QGroundControl's)."""

_RELIABLE_DATA_TYPES: Final = frozenset({MessageType.ADD_LOGGED_MSG, MessageType.INFO_MULTIPLE})
_FILE_HEADER_TYPE: Final = 0
_TIMESTAMP_FIELD: Final = "uint64_t timestamp"
_unpack_u16: Final = struct.Struct("<H").unpack_from
_unpack_u64: Final = struct.Struct("<Q").unpack_from


# ---------------------------------------------------------------------------------------------
# The log, split into the messages PX4's logger would write


class LogMessage(msgspec.Struct, frozen=True):
    """One ULog message (or the 16-byte file header) as the logger writes it.

    Attributes:
        data: The message's bytes, 3-byte message header included.
        msg_type: The ULog message type (0 for the file header).
        reliable: Sent in LOGGING_DATA_ACKED packets (header, definitions, 'A', 'M').
        due: Seconds of log time after the first data message (0 in the definitions).
    """

    data: bytes
    msg_type: int
    reliable: bool
    due: float


class SplitLog(msgspec.Struct, frozen=True):
    """A ULog file cut into messages.

    Attributes:
        messages: The file header, then every message, in file order (a truncated last message
            is kept as its remaining bytes).
        definitions_end: Index of the first message after the definitions section.
        tail_start: Index of the trailing run of 'M' messages (post-flight perf data), which the
            vehicle sends only when told to stop; ``len(messages)`` when there is none.
    """

    messages: tuple[LogMessage, ...]
    definitions_end: int
    tail_start: int

    @property
    def size(self) -> int:
        """Bytes in the log."""
        return sum(len(message.data) for message in self.messages)


def log_guid(log: SplitLog) -> bytes:
    """The GUID a PX4 with this log gives in AUTOPILOT_VERSION: its ``sys_uuid`` info's bytes.

    PX4 writes ``sys_uuid`` as ``char[N]`` hex of the GUID's bytes; 18 zero bytes when the log
    has none or it is not hex (PX4's SITL gives its instance and no ``sys_uuid``).
    """
    for message in log.messages[: log.definitions_end]:
        if message.msg_type != MessageType.INFO or len(message.data) <= MESSAGE_HEADER_SIZE:
            continue
        payload = message.data[MESSAGE_HEADER_SIZE:]
        key_end = 1 + payload[0]
        key_type, _, key = payload[1:key_end].decode(errors="replace").partition(" ")
        if key == "sys_uuid" and key_type.startswith("char["):
            try:
                return bytes.fromhex(payload[key_end:].decode(errors="replace").strip("\0 "))
            except ValueError:
                break
    return bytes(GUID_LENGTH)


def _first_field_is_timestamp(payload: bytes) -> tuple[str, bool]:
    text = payload.decode("utf-8", "replace")
    name, _, fields = text.partition(":")
    return name, fields.split(";", 1)[0].strip() == _TIMESTAMP_FIELD


def split_log(log: bytes, *, synthesize_perf: bool = False) -> SplitLog:
    """Cut ``log`` into the messages a PX4 logger would write, with replay times.

    Timestamps come from 'D' messages whose format starts with ``uint64_t timestamp`` (every
    PX4 topic) and from 'L'/'C' messages; others inherit the previous message's time.

    Args:
        log: A whole ULog file.
        synthesize_perf: When the log has no trailing 'M' messages, append one
            ``perf_counter_postflight`` message for the stop handshake to send.

    Raises:
        ULogFormatError: ``log`` does not start with the ULog magic.
    """
    if len(log) < HEADER_SIZE or not log.startswith(MAGIC):
        msg = "simulated vehicle needs a ULog file, but the log does not start with the ULog magic"
        raise ULogFormatError(msg, offset=0)
    messages = [LogMessage(log[:HEADER_SIZE], _FILE_HEADER_TYPE, reliable=True, due=0.0)]
    timed_formats: set[str] = set()
    timed_ids: set[int] = set()
    definitions_end: int | None = None
    first_timestamp: int | None = None
    last_timestamp = 0
    due = 0.0
    offset = HEADER_SIZE
    end = len(log)
    while offset < end:
        if end - offset < MESSAGE_HEADER_SIZE:
            messages.append(LogMessage(log[offset:], 0, reliable=False, due=due))
            break
        size, msg_type = unpack_message_header(log, offset)
        stop = offset + MESSAGE_HEADER_SIZE + size
        data = log[offset:stop]
        payload = data[MESSAGE_HEADER_SIZE:]
        offset = stop
        if definitions_end is None and msg_type not in DEFINITION_TYPES:
            definitions_end = len(messages)
        timestamp: int | None = None
        if len(payload) == size:
            if msg_type == MessageType.FORMAT:
                name, timed = _first_field_is_timestamp(payload)
                if timed:
                    timed_formats.add(name)
            elif msg_type == MessageType.ADD_LOGGED_MSG and size >= 3:  # noqa: PLR2004
                msg_id = _unpack_u16(payload, 1)[0]
                if payload[3:].decode("utf-8", "replace") in timed_formats:
                    timed_ids.add(msg_id)
            elif msg_type == MessageType.DATA and size >= 10:  # noqa: PLR2004
                if _unpack_u16(payload, 0)[0] in timed_ids:
                    timestamp = _unpack_u64(payload, 2)[0]
            elif msg_type == MessageType.LOGGING and size >= 9:  # noqa: PLR2004
                timestamp = _unpack_u64(payload, 1)[0]
            elif msg_type == MessageType.LOGGING_TAGGED and size >= 11:  # noqa: PLR2004
                timestamp = _unpack_u64(payload, 3)[0]
        if timestamp is not None and definitions_end is not None:
            if first_timestamp is None:
                first_timestamp = last_timestamp = timestamp
            elif timestamp > last_timestamp:
                due += min((timestamp - last_timestamp) / 1e6, MAX_REPLAY_GAP)
                last_timestamp = timestamp
        reliable = definitions_end is None or msg_type in _RELIABLE_DATA_TYPES
        messages.append(LogMessage(data, msg_type, reliable=reliable, due=due))
    if definitions_end is None:
        definitions_end = len(messages)
    tail_start = len(messages)
    while (
        tail_start > definitions_end
        and messages[tail_start - 1].msg_type == MessageType.INFO_MULTIPLE
    ):
        tail_start -= 1
    if synthesize_perf and tail_start == len(messages):
        writer = ULogWriter(header=False)
        writer.info_multiple("char", "perf_counter_postflight", "sim_logger: 0 events")
        messages.append(
            LogMessage(writer.getvalue(), MessageType.INFO_MULTIPLE, reliable=True, due=due)
        )
    return SplitLog(tuple(messages), definitions_end, tail_start)


# ---------------------------------------------------------------------------------------------
# Outputs


class SendLoggingData(msgspec.Struct, frozen=True):
    """Send ``packet`` as LOGGING_DATA_ACKED (``packet.needs_ack``) or LOGGING_DATA.

    Attributes:
        packet: The packet; ``system_id``/``component_id`` are the vehicle's.
        log_index: Which log of this vehicle's life the packet belongs to (0, 1, ...).
        corrupt: When not None, flip a byte of the encoded frame with
            :func:`ulogstream.sim.faults.corrupt_frame` at this position draw.
    """

    packet: LoggingPacket
    log_index: int
    corrupt: int | None = None


class SendCommandAck(msgspec.Struct, frozen=True):
    """Send COMMAND_ACK of ``command`` with ``result`` to ``target_system``/``target_component``."""

    command: int
    result: MavResult
    target_system: int
    target_component: int


GUID_LENGTH: Final = 18
"""Bytes of PX4's GUID (AUTOPILOT_VERSION ``uid2``)."""


class SendAutopilotVersion(msgspec.Struct, frozen=True):
    """Send AUTOPILOT_VERSION with ``uid2``: PX4's GUID, which its log spells as ``sys_uuid``."""

    uid2: bytes


class SendVehicleHeartbeat(msgspec.Struct, frozen=True):
    """Send the vehicle's HEARTBEAT (quadrotor, PX4 autopilot).

    The receiver's own heartbeat is :class:`ulogstream.stream.session.SendHeartbeat`.
    """


class SendGarbage(msgspec.Struct, frozen=True):
    """Send ``data``: line noise between frames (never contains a MAVLink start byte)."""

    data: bytes


class LogStreamStarted(msgspec.Struct, frozen=True):
    """Log ``log_index`` started streaming to ``target_system``/``target_component``."""

    log_index: int
    target_system: int
    target_component: int


StreamEndReason = Literal["stopped", "flight-ended", "ack-timeout", "reboot"]


class LogStreamEnded(msgspec.Struct, frozen=True):
    """Log ``log_index`` stopped streaming: on STOP, at the flight's end, on timeout or reboot.

    The flight's end is a GCS's STOP on disarm (``stop_at_end``); the timeout 50 unacked tries.

    The vehicle's side; the receiver's session ending is
    :class:`ulogstream.stream.session.StreamEnded`.
    """

    log_index: int
    reason: StreamEndReason


class LinkCut(msgspec.Struct, frozen=True):
    """The link goes down now for ``seconds`` (the ``cut_at`` fault): a USB cable pulled.

    The vehicle sends and hears nothing meanwhile; a runner serving a pseudo-terminal makes its
    device disappear for as long.
    """

    seconds: float


VehicleOutput = (
    SendLoggingData
    | SendCommandAck
    | SendAutopilotVersion
    | SendVehicleHeartbeat
    | SendGarbage
    | LogStreamStarted
    | LogStreamEnded
    | LinkCut
)
"""Everything :class:`SimVehicle` asks its runner to do or tells it."""


class DeliveredPacket(msgspec.Struct, frozen=True):
    """A LOGGING_DATA frame that left the vehicle intact (not lost, corrupted or cut off).

    Attributes:
        log_index: Which log (0, 1, ...: a reboot or STOP/START begins a new one).
        sequence: The packet's sequence number.
        first_message_offset: Its ``first_message_offset``.
        data: Its ``data[:length]``.
        acked: Sent as LOGGING_DATA_ACKED.
        time: When it was handed to the runner (the vehicle's ``now``).
    """

    log_index: int
    sequence: int
    first_message_offset: int
    data: bytes
    acked: bool
    time: float

    def to_json(self) -> dict[str, int | float | str | bool]:
        """A JSON-ready dict (``data`` as hex) for the delivery report's JSON lines."""
        return {
            "log": self.log_index,
            "seq": self.sequence,
            "fmo": self.first_message_offset,
            "data": self.data.hex(),
            "acked": self.acked,
            "time": round(self.time, 6),
        }


def delivered_packet(output: SendLoggingData, now: float) -> DeliveredPacket | None:
    """The delivery record of ``output`` once sent at ``now``; None for a corrupted frame."""
    if output.corrupt is not None:
        return None
    packet = output.packet
    return DeliveredPacket(
        output.log_index,
        packet.sequence,
        packet.first_message_offset,
        packet.data,
        packet.needs_ack,
        now,
    )


class VehicleStats(msgspec.Struct):
    """Counters of what the simulated vehicle did (read them; the vehicle updates them).

    Attributes:
        logs_started: Logs started (START accepted, or a reboot).
        packets_published: Packets the logger published (sequence numbers used).
        frames_sent: LOGGING_DATA frames handed to the link (resends included).
        resends: LOGGING_DATA_ACKED resends after 50 ms without an ack.
        queue_drops: Packets lost in the 16-deep queue (budget exceeded).
        sitl_gap_drops: Packets dropped by the ``sitl_gap`` fault.
        link_losses: Frames lost by the ``loss`` fault.
        corrupted: Frames sent with a flipped byte.
        duplicated: Frames sent twice.
        reordered: Frames held back behind a later one.
        garbage: Bursts of noise sent.
        cut_drops: Frames (any kind) not sent because the link was cut.
        acks_received: LOGGING_ACKs seen (lost ones excluded).
        acks_lost: LOGGING_ACKs dropped by the ``lost_acks`` fault or a link cut.
        ack_timeouts: Streams torn down after 50 unacknowledged tries.
        reboots: Reboots done.
    """

    logs_started: int = 0
    packets_published: int = 0
    frames_sent: int = 0
    resends: int = 0
    queue_drops: int = 0
    sitl_gap_drops: int = 0
    link_losses: int = 0
    corrupted: int = 0
    duplicated: int = 0
    reordered: int = 0
    garbage: int = 0
    cut_drops: int = 0
    acks_received: int = 0
    acks_lost: int = 0
    ack_timeouts: int = 0
    reboots: int = 0


# ---------------------------------------------------------------------------------------------
# Configuration


class VehicleConfig(msgspec.Struct, frozen=True, kw_only=True):
    """How the simulated vehicle behaves (the faults live in :class:`FaultConfig`).

    Attributes:
        system_id: The vehicle's MAVLink system id.
        component_id: The vehicle's component id (1: autopilot).
        link_rate: The link's configured rate in B/s; streaming uses at most 70 % of it per
            100 ms window. Below 5000 B/s START is DENIED. None: no budget at all.
        speed: Replay speed of the log's timestamps (2.0 = twice real time). None: the logger
            writes as fast as the link takes it and never overflows its queue (fast tests).
        backend_off: The logger's MAVLink backend is off: every START is TEMPORARILY_REJECTED.
        packet0_before_ack: Send packet 0 before the COMMAND_ACK ACCEPTED (it may overtake).
        stray_acks: Before every COMMAND_ACK, also send a misleading one addressed to another
            system, to test that receivers filter acks by target.
        stop_accept_delay: Minimum seconds between COMMAND_ACK IN_PROGRESS and ACCEPTED of a
            STOP (about 0.19 s in SITL).
        accept_stop_at_once: Answer STOP with IN_PROGRESS and ACCEPTED together, before the end
            of the log goes out (protocol.md step 7 describes PX4 so). False: ACCEPTED after the
            end of the log, as PX4's ``logger.cpp`` reads (IN_PROGRESS, then
            ``stop_log_mavlink()`` blocks on each acked packet, then ACCEPTED). A receiver must
            record the whole end of the log either way.
        heartbeat_interval: Seconds between HEARTBEATs.
        synthesize_perf: Append a post-flight perf 'M' message for STOP when the log has none.
        stop_at_end: At the end of the flight, end the log as a GCS's STOP on disarm does: the
            post-flight tail and the last partial packet go out, then COMMAND_ACK ACCEPTED to
            the GCS (:data:`GCS_SYSTEM_ID`). False: hold them until a STOP comes.
        max_batch: Outputs per call before the vehicle yields (it asks to be called back at once).
        autopilot_version: Answer MAV_CMD_REQUEST_MESSAGE for AUTOPILOT_VERSION as PX4 does, its
            ``uid2`` the log's ``sys_uuid`` (zeros when the log has none). False: UNSUPPORTED,
            as an autopilot that gives no unique id.
    """

    system_id: int = 1
    component_id: int = MAV_COMP_ID_AUTOPILOT1
    link_rate: float | None = UDP_LINK_RATE
    speed: float | None = 1.0
    backend_off: bool = False
    packet0_before_ack: bool = False
    stray_acks: bool = False
    stop_accept_delay: float = 0.19
    accept_stop_at_once: bool = False
    heartbeat_interval: float = 1.0
    synthesize_perf: bool = False
    stop_at_end: bool = False
    max_batch: int = 512
    autopilot_version: bool = True

    def __post_init__(self) -> None:
        """Reject rates, speeds and intervals that cannot work."""
        if self.link_rate is not None and not (
            math.isfinite(self.link_rate) and self.link_rate > 0
        ):
            msg = f"link_rate must be a positive number of B/s or None, not {self.link_rate!r}"
            raise ValueError(msg)
        if self.speed is not None and not (math.isfinite(self.speed) and self.speed > 0):
            msg = f"speed must be a positive factor or None, not {self.speed!r}"
            raise ValueError(msg)
        if self.heartbeat_interval <= 0 or self.stop_accept_delay < 0 or self.max_batch < 1:
            msg = "heartbeat_interval and max_batch must be positive, stop_accept_delay >= 0"
            raise ValueError(msg)

    @property
    def packets_per_window(self) -> int | None:
        """Packets ``mavlink_ulog`` may send per 100 ms window (None: unlimited)."""
        if self.link_rate is None:
            return None
        budget = RATE_WINDOW * MAX_RATE_FACTOR * self.link_rate / LOGGING_DATA_FRAME_SIZE
        return max(1, math.ceil(budget))


# ---------------------------------------------------------------------------------------------
# The vehicle


class _Stream(msgspec.Struct):
    """State of one log being streamed (one START to its STOP)."""

    log_index: int
    target_system: int
    target_component: int
    message_index: int = 0
    message_offset: int = 0
    buffer: bytearray = msgspec.field(default_factory=bytearray)
    first_message_offset: int = 0
    reliable: bool = True
    sequence: int = 0
    published: int = 0
    clock_start: float | None = None
    sitl_gap_left: int = 0
    stopping: bool = False
    stop_requester: tuple[int, int] = (0, 0)
    stop_accept_at: float = 0.0
    stop_accepted: bool = False
    flushed: bool = False
    logger_blocked: bool = False
    flight_ended: bool = False


class SimVehicle:
    """PX4's logger and MAVLink log streaming for one ULog file, as a sans-IO state machine.

    Feed it decoded messages with :meth:`receive`, call :meth:`handle_timer` at
    :meth:`next_deadline`, and carry out the returned outputs in order. A START replays the
    log from its beginning; after STOP the vehicle waits for the next START (a new log).

    Args:
        log: The whole ULog file to stream.
        now: The current time in seconds (the first HEARTBEAT is due at once).
        config: Vehicle behaviour.
        faults: What goes wrong on purpose (seeded).

    Raises:
        ULogFormatError: ``log`` is not a ULog file.
    """

    def __init__(
        self,
        log: bytes,
        *,
        now: float,
        config: VehicleConfig | None = None,
        faults: FaultConfig = NO_FAULTS,
    ) -> None:
        self.config = config if config is not None else VehicleConfig()
        self.faults = faults
        self.log = split_log(log, synthesize_perf=self.config.synthesize_perf)
        self.guid = log_guid(self.log)
        """The ``uid2`` of its AUTOPILOT_VERSION: the log's ``sys_uuid`` as bytes."""
        self.stats = VehicleStats()
        self._rng = FaultRng(faults.seed)
        self._per_window = self.config.packets_per_window
        self._stream: _Stream | None = None
        self._next_log_index = 0
        self._rebooted = False
        self._commands: deque[CommandLong] = deque()
        self._queue: deque[LoggingPacket] = deque()
        self._awaiting: LoggingPacket | None = None
        self._tries = 0
        self._sent_at = 0.0
        self._acks_for_awaited = 0
        self._window_end = -math.inf
        self._window_count = 0
        self._next_heartbeat = now
        self._behind = False
        self._now = now
        self._cut_until = -math.inf
        self._held: SendLoggingData | None = None
        self._held_at = 0.0

    # -- public surface ------------------------------------------------------------------------

    @property
    def streaming(self) -> bool:
        """True while a log is being streamed (including its stop handshake)."""
        return self._stream is not None

    @property
    def log_index(self) -> int | None:
        """Index of the log being streamed, or None when idle."""
        return None if self._stream is None else self._stream.log_index

    @property
    def waiting_for_stop(self) -> bool:
        """True when the log up to its post-flight tail is sent and acked: only STOP brings more."""
        stream = self._stream
        return (
            stream is not None
            and not stream.stopping
            and not stream.logger_blocked
            and stream.message_offset == 0
            and stream.message_index >= self.log.tail_start
            and self._awaiting is None
            and self._held is None
            and not self._queue
        )

    def receive(self, message: MavlinkMessage, now: float) -> list[VehicleOutput]:
        """Handle one decoded message from a client (COMMAND_LONG, LOGGING_ACK; others ignored).

        Returns:
            What to send, in order.
        """
        self._now = now
        out: list[VehicleOutput] = []
        if now < self._cut_until:
            if isinstance(message, LoggingAck):
                self.stats.acks_lost += 1
            return out
        match message:
            case CommandLong():
                if message.target_system not in {0, self.config.system_id} or (
                    message.target_component not in {0, self.config.component_id}
                ):
                    return out
                self._receive_command(message, out)
            case LoggingAck(sequence=sequence):
                self._receive_ack(sequence)
            case _:
                return out
        self._pump(now, out)
        return out

    def next_deadline(self) -> float | None:
        """When :meth:`handle_timer` must be called next (never None: heartbeats are periodic)."""
        if self._behind:
            return self._now
        deadline = self._next_heartbeat
        if self._held is not None:
            deadline = min(deadline, self._held_at + HOLD_TIMEOUT)
        stream = self._stream
        if stream is None:
            return deadline
        if self._awaiting is not None:
            return min(deadline, self._sent_at + ACK_TIMEOUT)
        if self._queue and self._window_count >= self._budget():
            deadline = min(deadline, self._window_end)
        if stream.logger_blocked:
            return deadline
        if self._writer_done(stream):
            if stream.stopping and not self._queue:
                deadline = min(deadline, stream.stop_accept_at)
            return deadline
        due = self._due_time(stream)
        if due is not None:
            if self.config.speed is None and len(self._queue) >= QUEUE_DEPTH:
                due = max(due, self._window_end)
            deadline = min(deadline, due)
        return deadline

    def handle_timer(self, now: float) -> list[VehicleOutput]:
        """Do what is due at ``now``: heartbeat, resends, ack timeout, paced log data, stop.

        Returns:
            What to send, in order.
        """
        self._now = now
        self._behind = False
        out: list[VehicleOutput] = []
        if now >= self._next_heartbeat:
            self._emit_other(SendVehicleHeartbeat(), now, out)
            self._next_heartbeat += self.config.heartbeat_interval
            if self._next_heartbeat <= now:
                self._next_heartbeat = now + self.config.heartbeat_interval
        if self._held is not None and now >= self._held_at + HOLD_TIMEOUT:
            self._release_held(now, out)
        awaiting = self._awaiting
        if awaiting is not None and now >= self._sent_at + ACK_TIMEOUT:
            self._tries += 1
            if self._tries > ACK_MAX_TRIES:
                self._teardown(out)
            else:
                self.stats.resends += 1
                self._sent_at = now
                self._emit_packet(awaiting, now, out, copy=self._tries)
        self._pump(now, out)
        return out

    # -- commands ------------------------------------------------------------------------------

    def _receive_command(self, command: CommandLong, out: list[VehicleOutput]) -> None:
        if command.command == MAV_CMD_REQUEST_MESSAGE:
            if command.param1 != MAVLINK_MSG_ID_AUTOPILOT_VERSION or not (
                self.config.autopilot_version
            ):
                self._ack(command, MavResult.UNSUPPORTED, out)
                return
            self._ack(command, MavResult.ACCEPTED, out)
            self._emit_other(SendAutopilotVersion(self.guid), self._now, out)
            return
        if command.command == MAV_CMD_LOGGING_START:
            link_rate = self.config.link_rate
            if link_rate is not None and link_rate < MIN_LINK_RATE:
                # mavlink_receiver answers at once: streaming would swamp a telemetry radio.
                self._ack(command, MavResult.DENIED, out)
                return
        elif command.command != MAV_CMD_LOGGING_STOP:
            self._ack(command, MavResult.UNSUPPORTED, out)
            return
        # The logger handles commands in its loop, which an acked packet blocks: queue them.
        self._commands.append(command)

    def _ack(self, command: CommandLong, result: MavResult, out: list[VehicleOutput]) -> None:
        target = (command.system_id, command.component_id)
        self._ack_to(command.command, result, target, out)

    def _ack_to(
        self,
        command: int,
        result: MavResult,
        target: tuple[int, int],
        out: list[VehicleOutput],
    ) -> None:
        if self.config.stray_acks:
            stray = MavResult.ACCEPTED if result is MavResult.DENIED else MavResult.DENIED
            other_system = target[0] % 255 + 1
            self._emit_other(
                SendCommandAck(command, stray, other_system, target[1]), self._now, out
            )
        self._emit_other(SendCommandAck(command, result, target[0], target[1]), self._now, out)

    def _process_commands(self, now: float, out: list[VehicleOutput]) -> None:
        while self._commands:
            stream = self._stream
            if stream is not None and (stream.logger_blocked or stream.stopping):
                return  # the logger is busy in a blocking write or in its stop sequence
            command = self._commands.popleft()
            if command.command == MAV_CMD_LOGGING_STOP:
                if stream is None:
                    self._ack(command, MavResult.ACCEPTED, out)
                else:
                    # "we need to ack first, as the stop also sends acked messages"
                    self._ack(command, MavResult.IN_PROGRESS, out)
                    if self.config.accept_stop_at_once:
                        self._ack(command, MavResult.ACCEPTED, out)
                        stream.stop_accepted = True
                    stream.stopping = True
                    stream.stop_requester = (command.system_id, command.component_id)
                    stream.stop_accept_at = now + self.config.stop_accept_delay
                continue
            if int(command.param1 + 0.5) != 0:
                self._ack(command, MavResult.UNSUPPORTED, out)
            elif stream is not None or self.config.backend_off:
                self._ack(command, MavResult.TEMPORARILY_REJECTED, out)
            elif self.config.packet0_before_ack:
                self._start_log(command.system_id, command.component_id, out)
                self._stream_data(now, out)
                self._ack(command, MavResult.ACCEPTED, out)
            else:
                self._ack(command, MavResult.ACCEPTED, out)
                self._start_log(command.system_id, command.component_id, out)

    def _start_log(
        self, target_system: int, target_component: int, out: list[VehicleOutput]
    ) -> None:
        stream = _Stream(self._next_log_index, target_system, target_component)
        stream.sitl_gap_left = self.faults.sitl_gap
        self._next_log_index += 1
        self._stream = stream
        self._queue.clear()
        self._awaiting = None
        self.stats.logs_started += 1
        out.append(LogStreamStarted(stream.log_index, target_system, target_component))

    def _end_stream(self, reason: StreamEndReason, out: list[VehicleOutput]) -> None:
        stream = self._stream
        if stream is None:
            return
        self._stream = None
        self._queue.clear()
        self._awaiting = None
        out.append(LogStreamEnded(stream.log_index, reason))
        if stream.stopping and not stream.stop_accepted:
            self._ack_to(MAV_CMD_LOGGING_STOP, MavResult.ACCEPTED, stream.stop_requester, out)

    def _teardown(self, out: list[VehicleOutput]) -> None:
        self.stats.ack_timeouts += 1
        self._end_stream("ack-timeout", out)

    # -- acks ----------------------------------------------------------------------------------

    def _receive_ack(self, sequence: int) -> None:
        awaiting = self._awaiting
        stream = self._stream
        if awaiting is None or stream is None or sequence != awaiting.sequence:
            return
        self._acks_for_awaited += 1
        copy = self._acks_for_awaited
        if self._rng.chance(self.faults.lost_acks, Draw.LOST_ACK, stream.log_index, sequence, copy):
            self.stats.acks_lost += 1
            return
        self.stats.acks_received += 1
        self._awaiting = None
        stream.logger_blocked = False

    # -- the pump: logger writes, MAVLink side sends -------------------------------------------

    def _pump(self, now: float, out: list[VehicleOutput]) -> None:
        while True:
            self._process_commands(now, out)
            stream = self._stream
            if stream is None:
                return
            self._stream_data(now, out)
            if self._flight_over(stream):
                # The GCS's STOP on disarm: handled as any STOP, once the logger is free.
                stream.flight_ended = True
                self._commands.append(
                    CommandLong(
                        MAV_CMD_LOGGING_STOP,
                        0.0,
                        GCS_SYSTEM_ID,
                        GCS_COMPONENT_ID,
                        self.config.system_id,
                        self.config.component_id,
                    )
                )
                continue
            if self._behind or not self._stop_finished(stream, now):
                return
            self._end_stream("flight-ended" if stream.flight_ended else "stopped", out)

    def _flight_over(self, stream: _Stream) -> bool:
        """With ``stop_at_end``: the flight is written up to its post-flight tail, no STOP yet."""
        return (
            self.config.stop_at_end
            and not stream.flight_ended
            and not stream.stopping
            and stream.message_offset == 0
            and stream.message_index >= self.log.tail_start
        )

    def _budget(self) -> int:
        return self._per_window if self._per_window is not None else 1 << 62

    def _stream_data(self, now: float, out: list[VehicleOutput]) -> None:
        limit = self.config.max_batch
        start = len(out)
        while True:
            self._transmit(now, out)
            if len(out) - start >= limit:
                self._behind = True
                return
            if not self._produce(now, out):
                return

    def _transmit(self, now: float, out: list[VehicleOutput]) -> None:
        queue = self._queue
        while self._awaiting is None and queue:
            if now >= self._window_end:
                self._window_end = now + RATE_WINDOW
                self._window_count = 0
            if self._window_count >= self._budget():
                return
            self._window_count += 1
            packet = queue.popleft()
            if packet.needs_ack:
                self._awaiting = packet
                self._tries = 1
                self._sent_at = now
                self._acks_for_awaited = 0
            self._emit_packet(packet, now, out, copy=1)

    def _writer_done(self, stream: _Stream) -> bool:
        end = len(self.log.messages) if stream.stopping else self.log.tail_start
        return stream.message_index >= end and (stream.flushed or not stream.stopping)

    def _due_time(self, stream: _Stream) -> float | None:
        """Wall time the next message is due; None when nothing is left to write for now."""
        messages = self.log.messages
        if stream.message_offset or stream.stopping:
            return self._now
        index = stream.message_index
        if index >= self.log.tail_start:
            return None
        speed = self.config.speed
        if speed is None or index < self.log.definitions_end or stream.clock_start is None:
            return self._now
        return stream.clock_start + messages[index].due / speed

    def _produce(self, now: float, out: list[VehicleOutput]) -> bool:
        """Let the logger write until it publishes one packet; False when it cannot go on."""
        stream = self._stream
        if stream is None or stream.logger_blocked:
            return False
        if self.config.speed is None and len(self._queue) >= QUEUE_DEPTH:
            return False
        messages = self.log.messages
        end = len(messages) if stream.stopping else self.log.tail_start
        buffer = stream.buffer
        while True:
            if stream.message_offset == 0:
                index = stream.message_index
                if stream.stopping and index < self.log.tail_start:
                    # STOP skips the rest of the flight and writes the post-flight perf data.
                    index = stream.message_index = self.log.tail_start
                if index >= end:
                    if stream.stopping and not stream.flushed:
                        # set_need_reliable_transfer(false) after the perf data flushes, acked.
                        stream.flushed = True
                        stream.reliable = True
                        if buffer:
                            self._publish(stream, out)
                            return True
                    return False
                message = messages[index]
                if not stream.stopping and index >= self.log.definitions_end:
                    if stream.clock_start is None:
                        stream.clock_start = now - self._log_seconds(message.due)
                    elif now < stream.clock_start + self._log_seconds(message.due):
                        return False
                if message.reliable != stream.reliable:
                    if stream.reliable and buffer:
                        # Leaving reliable mode flushes the partial packet, still acked.
                        self._publish(stream, out)
                        stream.reliable = False
                        return True
                    stream.reliable = message.reliable
                if stream.first_message_offset == NO_MESSAGE_START:
                    stream.first_message_offset = len(buffer)
            data = messages[stream.message_index].data
            offset = stream.message_offset
            take = min(MAX_DATA_LENGTH - len(buffer), len(data) - offset)
            buffer += data[offset : offset + take]
            offset += take
            if offset == len(data):
                stream.message_index += 1
                stream.message_offset = 0
            else:
                stream.message_offset = offset
            if len(buffer) >= MAX_DATA_LENGTH:
                self._publish(stream, out)
                return True

    def _log_seconds(self, due: float) -> float:
        speed = self.config.speed
        return 0.0 if speed is None else due / speed

    def _publish(self, stream: _Stream, out: list[VehicleOutput]) -> None:
        """``LogWriterMavlink::publish_message``: hand the packet to the queue, next sequence."""
        reboot_at = self.faults.reboot_at
        if reboot_at is not None and not self._rebooted and stream.published == reboot_at:
            self._rebooted = True
            self.stats.reboots += 1
            self._end_stream("reboot", out)
            self._start_log(stream.target_system, stream.target_component, out)
            return
        packet = LoggingPacket(
            sequence=stream.sequence,
            first_message_offset=stream.first_message_offset,
            data=bytes(stream.buffer),
            needs_ack=stream.reliable,
            system_id=self.config.system_id,
            component_id=self.config.component_id,
            target_system=stream.target_system,
            target_component=stream.target_component,
        )
        stream.sequence = (stream.sequence + 1) % SEQUENCE_MODULO
        stream.published += 1
        stream.buffer.clear()
        stream.first_message_offset = NO_MESSAGE_START
        self.stats.packets_published += 1
        if packet.needs_ack:
            stream.logger_blocked = True
        elif stream.sitl_gap_left:
            stream.sitl_gap_left -= 1
            self.stats.sitl_gap_drops += 1
            return
        if len(self._queue) >= QUEUE_DEPTH:
            self._queue.popleft()
            self.stats.queue_drops += 1
        self._queue.append(packet)

    def _stop_finished(self, stream: _Stream, now: float) -> bool:
        return (
            stream.stopping
            and stream.flushed
            and not stream.logger_blocked
            and not self._queue
            and self._awaiting is None
            and now >= stream.stop_accept_at
        )

    # -- the link: faults between the vehicle and the wire --------------------------------------

    def _emit_other(self, output: VehicleOutput, now: float, out: list[VehicleOutput]) -> None:
        if now < self._cut_until:
            self.stats.cut_drops += 1
            return
        out.append(output)

    def _emit_packet(
        self, packet: LoggingPacket, now: float, out: list[VehicleOutput], *, copy: int
    ) -> None:
        stream = self._stream
        log_index = 0 if stream is None else stream.log_index
        faults = self.faults
        frame_index = self.stats.frames_sent
        self.stats.frames_sent += 1
        if frame_index == faults.cut_at:
            self._cut_until = now + faults.cut_seconds
            out.append(LinkCut(faults.cut_seconds))
        if now < self._cut_until:
            self.stats.cut_drops += 1
            return
        rng = self._rng
        keys = (log_index, packet.sequence, copy)
        if rng.chance(faults.loss, Draw.LOSS, *keys):
            self.stats.link_losses += 1
            return
        if rng.chance(faults.garbage, Draw.GARBAGE, *keys):
            self.stats.garbage += 1
            out.append(SendGarbage(rng.garbage(*keys)))
        if rng.chance(faults.corrupt, Draw.CORRUPT, *keys):
            self.stats.corrupted += 1
            corrupt = rng.integer(Draw.CORRUPT_POSITION, *keys)
            out.append(SendLoggingData(packet, log_index, corrupt))
            return
        send = SendLoggingData(packet, log_index)
        if self._held is None and rng.chance(faults.reorder, Draw.REORDER, *keys):
            self.stats.reordered += 1
            self._held = send
            self._held_at = now
            return
        out.append(send)
        if rng.chance(faults.duplicate, Draw.DUPLICATE, *keys):
            self.stats.duplicated += 1
            out.append(send)
        if self._held is not None:
            self._release_held(now, out)

    def _release_held(self, now: float, out: list[VehicleOutput]) -> None:
        held, self._held = self._held, None
        if held is None:
            return
        if now < self._cut_until:
            self.stats.cut_drops += 1
            return
        out.append(held)
