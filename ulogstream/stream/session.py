"""LoggingSession: the log-streaming state machine around the reassembler (sans-IO).

Values in (decoded MAVLink messages, the time ``now``), outputs out, in the order to carry them
out; timers through :meth:`LoggingSession.next_deadline` and :meth:`LoggingSession.handle_timer`.

States and what moves between them (protocol.md, "What a correct receiver does")::

    WAITING_FOR_AUTOPILOT --first HEARTBEAT from compid 1--> STARTING
    STARTING --ACCEPTED, or packet 0--> STREAMING
    STARTING --TEMPORARILY_REJECTED (first time)--> RESTARTING (STOP sent)
    STARTING --TEMPORARILY_REJECTED again, DENIED, UNSUPPORTED, FAILED--> REJECTED
    RESTARTING --STOP answered--> STARTING (START sent)
    STREAMING --no LOGGING_DATA for data_timeout--> LINK_LOST (log ended, incomplete)
    STREAMING --data not at a log start--> RESTARTING
    STREAMING --another client's STOP accepted--> STARTING (log ended)
    LINK_LOST --HEARTBEAT from the autopilot--> RESTARTING
    any --stop()--> STOPPING --STOP answered or stop_timeout--> ENDED

Every LOGGING_DATA_ACKED copy from the autopilot addressed to us is acked first, in every state.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ulogstream.errors import StreamProtocolError
from ulogstream.stream.packets import (
    MAV_AUTOPILOT_INVALID,
    MAV_CMD_LOGGING_START,
    MAV_CMD_LOGGING_STOP,
    MAV_COMP_ID_AUTOPILOT1,
    MAV_COMP_ID_LOG,
    MAV_STATE_ACTIVE,
    MAV_TYPE_ONBOARD_CONTROLLER,
    CommandAck,
    Heartbeat,
    LoggingPacket,
    MavlinkMessage,
    MavResult,
)
from ulogstream.stream.reassembler import (
    LogEndReason,
    LogStreamReassembler,
    ReassemblerOutput,
    StreamCounters,
)

DEFAULT_SYSTEM_ID = 254
"""Our default MAVLink system id: not 255, which GCSs (QGC, MAVProxy) take by convention, so
routers and GCSs do not mistake the stream addressed to us for theirs; not 1, the vehicle's."""

MAX_CONFIRMATION = 255
"""COMMAND_LONG ``confirmation`` is a uint8 counting retransmissions."""

_MAX_ID = 255
_UNKNOWN = -1
"""Autopilot system id before one is configured or heard (matches no sender)."""


class SessionState(enum.Enum):
    """Where a :class:`LoggingSession` is (see the module docstring for the transitions)."""

    IDLE = "idle"
    WAITING_FOR_AUTOPILOT = "waiting for autopilot"
    STARTING = "starting"
    RESTARTING = "restarting"
    STREAMING = "streaming"
    LINK_LOST = "link lost"
    REJECTED = "rejected"
    STOPPING = "stopping"
    ENDED = "ended"


_IDLE = SessionState.IDLE
_STREAMING = SessionState.STREAMING
_LOGGING_STATES = frozenset({SessionState.STARTING, SessionState.STREAMING})
"""States in which packet 0 of a new log may open a file: our START is out or accepted."""
_COMMAND_STATES = frozenset({SessionState.STARTING, SessionState.RESTARTING, SessionState.STOPPING})
"""States with a command out that is resent until answered."""


@dataclass(frozen=True, slots=True)
class SendCommand:
    """Send COMMAND_LONG ``command`` (LOGGING_START or LOGGING_STOP) to the autopilot.

    ``confirmation`` counts retransmissions of the same command (0 for the first).
    """

    command: int
    target_system: int
    target_component: int
    param1: float = 0.0
    confirmation: int = 0


@dataclass(frozen=True, slots=True)
class SendHeartbeat:
    """Send our HEARTBEAT: an onboard controller, never a GCS (that would mask link-loss)."""

    mav_type: int = MAV_TYPE_ONBOARD_CONTROLLER
    autopilot: int = MAV_AUTOPILOT_INVALID
    system_status: int = MAV_STATE_ACTIVE


@dataclass(frozen=True, slots=True)
class StreamRejected:
    """The vehicle refused to stream (``result`` is its MAV_RESULT); the session retries no more.

    The session keeps acking and sending heartbeats; call :meth:`LoggingSession.stop` to end it.
    """

    result: int
    reason: str


@dataclass(frozen=True, slots=True)
class NotAtLogStart:
    """Logging data arrived that is not the start of a log (we joined a stream mid-way).

    Nothing was written; the session sends LOGGING_STOP and then LOGGING_START.
    """

    sequence: int

    def error(self) -> StreamProtocolError:
        """The report as an exception value, for the shell to log."""
        msg = "logging data without a ULog header (sequence 0 with the magic); restarting"
        return StreamProtocolError(msg, sequence=self.sequence)


@dataclass(frozen=True, slots=True)
class StreamEnded:
    """The session is over after :meth:`LoggingSession.stop`; it sends nothing more."""


SessionOutput = (
    ReassemblerOutput | SendCommand | SendHeartbeat | StreamRejected | NotAtLogStart | StreamEnded
)
"""Everything a :class:`LoggingSession` returns."""

_TEMPORARILY_REJECTED_AGAIN = (
    "LOGGING_START was rejected again after LOGGING_STOP: the logger's MAVLink backend is off "
    "(SDLOG_BACKEND bit 1) or another client owns the stream"
)
_DENIED = (
    "LOGGING_START was denied: the link's configured MAVLink rate is below 5000 B/s, "
    "too slow for log streaming (a telemetry radio?)"
)


def _check_id(name: str, value: int, low: int) -> None:
    if not low <= value <= _MAX_ID:
        msg = f"{name} must be in {low}..255, not {value}"
        raise ValueError(msg)


def _check_positive(name: str, value: float) -> None:
    if not value > 0:
        msg = f"{name} must be positive, not {value}"
        raise ValueError(msg)


class LoggingSession:
    """Requests PX4's log stream, acks and reassembles it, and watches it (sans-IO).

    Args:
        system_id: Our MAVLink system id.
        component_id: Our component id (never 0: PX4 addresses the stream to it).
        target_system: The autopilot's system id; None picks the first HEARTBEAT from
            ``target_component``.
        target_component: The autopilot's component id.
        heartbeat_interval: Seconds between our heartbeats.
        command_retry_interval: Seconds before an unanswered LOGGING_START/STOP is resent.
        data_timeout: Seconds without LOGGING_DATA after which a stream counts as lost.
        stop_timeout: Seconds :meth:`stop` waits for LOGGING_STOP to be answered.
        start_grace: Seconds after LOGGING_START is accepted during which packets that are not a
            log start are dropped quietly (leftovers of an earlier stream) before they count as
            joining a stream mid-way.

    Raises:
        ValueError: An id is out of range or a time is not positive.
    """

    def __init__(
        self,
        *,
        system_id: int = DEFAULT_SYSTEM_ID,
        component_id: int = MAV_COMP_ID_LOG,
        target_system: int | None = None,
        target_component: int = MAV_COMP_ID_AUTOPILOT1,
        heartbeat_interval: float = 1.0,
        command_retry_interval: float = 1.0,
        data_timeout: float = 3.0,
        stop_timeout: float = 5.0,
        start_grace: float = 1.0,
    ) -> None:
        _check_id("system_id", system_id, 1)
        _check_id("component_id", component_id, 1)
        _check_id("target_component", target_component, 1)
        if target_system is not None:
            _check_id("target_system", target_system, 1)
        _check_positive("heartbeat_interval", heartbeat_interval)
        _check_positive("command_retry_interval", command_retry_interval)
        _check_positive("data_timeout", data_timeout)
        _check_positive("stop_timeout", stop_timeout)
        if start_grace < 0:
            msg = f"start_grace must not be negative, not {start_grace}"
            raise ValueError(msg)
        self._system_id = system_id
        self._component_id = component_id
        self._accepted_systems = (system_id, 0)
        self._accepted_components = (component_id, 0)
        self._autopilot_system = _UNKNOWN if target_system is None else target_system
        self._autopilot_component = target_component
        self._heartbeat_interval = heartbeat_interval
        self._retry_interval = command_retry_interval
        self._data_timeout = data_timeout
        self._stop_timeout = stop_timeout
        self._start_grace = start_grace
        self._reassembler = LogStreamReassembler()
        self._state = SessionState.IDLE
        self._next_heartbeat = 0.0
        self._command = MAV_CMD_LOGGING_START
        self._confirmation = 0
        self._retry_at: float | None = None
        self._last_data_time = 0.0
        self._grace_end = 0.0
        self._stop_deadline = 0.0
        self._rejected_once = False
        self._set_state(SessionState.IDLE)

    @property
    def state(self) -> SessionState:
        """Where the session is."""
        return self._state

    @property
    def counters(self) -> StreamCounters:
        """Running totals (packets, acked, duplicates, gaps, packets lost, dropouts, bytes...)."""
        return self._reassembler.counters

    @property
    def autopilot_system(self) -> int | None:
        """The autopilot's system id, once configured or heard."""
        return None if self._autopilot_system == _UNKNOWN else self._autopilot_system

    @property
    def log_open(self) -> bool:
        """True while a log is being written (between LogStarted and LogEnded)."""
        return self._reassembler.log_open

    def start(self, now: float) -> list[SessionOutput]:
        """Begin: send a heartbeat and, once the autopilot is known, LOGGING_START.

        Raises:
            RuntimeError: The session was started before.
        """
        if self._state is not SessionState.IDLE:
            msg = "start() called twice"
            raise RuntimeError(msg)
        out: list[SessionOutput] = [SendHeartbeat()]
        self._next_heartbeat = now + self._heartbeat_interval
        if self._autopilot_system == _UNKNOWN:
            self._set_state(SessionState.WAITING_FOR_AUTOPILOT)
        else:
            self._send_start(now, out)
        return out

    def receive(self, message: MavlinkMessage, now: float) -> list[SessionOutput]:
        """Take one decoded MAVLink message received at ``now``; return the outputs in order.

        Raises:
            RuntimeError: Called before :meth:`start`.
        """
        if self._state is _IDLE:
            msg = "receive() called before start()"
            raise RuntimeError(msg)
        out: list[SessionOutput] = []
        if type(message) is LoggingPacket:
            # The hot path: keep it to attribute tests and one call.
            if (
                message.system_id != self._autopilot_system
                or message.component_id != self._autopilot_component
                or message.target_system not in self._accepted_systems
                or message.target_component not in self._accepted_components
            ):
                self._reassembler.counters.filtered += 1
                return out
            self._last_data_time = now
            reassembler = self._reassembler
            ignored = reassembler.counters.ignored
            reassembler.receive_packet_into(message, now, out)
            if self._state is not _STREAMING or not reassembler.log_open:
                self._after_packet(message.sequence, ignored, now, out)
            return out
        match message:
            case CommandAck():
                self._receive_command_ack(message, now, out)
            case Heartbeat():
                self._receive_heartbeat(message, now, out)
            case _:
                pass  # COMMAND_LONG and LOGGING_ACK are for vehicles
        return out

    def stop(self, now: float) -> list[SessionOutput]:
        """Stop streaming: send LOGGING_STOP and keep acking and writing until it is answered.

        The log ends (:class:`LogEnded`, then :class:`StreamEnded`) when the vehicle answers
        ACCEPTED or after ``stop_timeout``; at once when no stream of ours can be running.

        Raises:
            RuntimeError: Called before :meth:`start`.
        """
        out: list[SessionOutput] = []
        match self._state:
            case SessionState.IDLE:
                msg = "stop() called before start()"
                raise RuntimeError(msg)
            case SessionState.WAITING_FOR_AUTOPILOT | SessionState.REJECTED:
                self._finish(LogEndReason.STOPPED, complete=True, out=out)
            case SessionState.STOPPING | SessionState.ENDED:
                pass
            case _:
                self._send_command(MAV_CMD_LOGGING_STOP, now, out)
                self._stop_deadline = now + self._stop_timeout
                self._set_state(SessionState.STOPPING)
        return out

    def next_deadline(self) -> float | None:
        """When :meth:`handle_timer` must next be called, or None when never."""
        state = self._state
        if state is SessionState.IDLE or state is SessionState.ENDED:
            return None
        deadline = self._next_heartbeat
        if self._retry_at is not None:
            deadline = min(deadline, self._retry_at)
        if state is SessionState.STREAMING:
            deadline = min(deadline, self._last_data_time + self._data_timeout)
        elif state is SessionState.STOPPING:
            deadline = min(deadline, self._stop_deadline)
        return deadline

    def handle_timer(self, now: float) -> list[SessionOutput]:
        """Do what is due at ``now``: heartbeat, command retry, data and stop timeouts."""
        out: list[SessionOutput] = []
        state = self._state
        if state is SessionState.IDLE or state is SessionState.ENDED:
            return out
        if now >= self._next_heartbeat:
            out.append(SendHeartbeat())
            self._next_heartbeat += self._heartbeat_interval
            if self._next_heartbeat <= now:  # late: do not send a burst to catch up
                self._next_heartbeat = now + self._heartbeat_interval
        if self._retry_at is not None and now >= self._retry_at:
            self._confirmation = min(self._confirmation + 1, MAX_CONFIRMATION)
            self._retry_at = now + self._retry_interval
            out.append(self._command_output())
        if state is SessionState.STREAMING and now >= self._last_data_time + self._data_timeout:
            self._reassembler.end_log(LogEndReason.DATA_TIMEOUT, complete=False, out=out)
            self._set_state(SessionState.LINK_LOST)
        elif state is SessionState.STOPPING and now >= self._stop_deadline:
            self._finish(LogEndReason.STOP_TIMEOUT, complete=False, out=out)
        return out

    def _set_state(self, state: SessionState) -> None:
        self._state = state
        self._reassembler.accept_new_logs = state in _LOGGING_STATES
        if state not in _COMMAND_STATES:
            self._retry_at = None

    def _command_output(self) -> SendCommand:
        return SendCommand(
            self._command,
            self._autopilot_system,
            self._autopilot_component,
            confirmation=self._confirmation,
        )

    def _send_command(self, command: int, now: float, out: list[SessionOutput]) -> None:
        self._command = command
        self._confirmation = 0
        self._retry_at = now + self._retry_interval
        out.append(self._command_output())

    def _send_start(self, now: float, out: list[SessionOutput]) -> None:
        self._send_command(MAV_CMD_LOGGING_START, now, out)
        self._set_state(SessionState.STARTING)

    def _restart(self, now: float, out: list[SessionOutput]) -> None:
        """STOP first (a stream of ours may still run), START when it is answered."""
        self._send_command(MAV_CMD_LOGGING_STOP, now, out)
        self._set_state(SessionState.RESTARTING)

    def _enter_streaming(self, now: float) -> None:
        self._set_state(SessionState.STREAMING)
        self._rejected_once = False
        self._last_data_time = now
        self._grace_end = now + self._start_grace

    def _finish(self, reason: LogEndReason, *, complete: bool, out: list[SessionOutput]) -> None:
        self._reassembler.end_log(reason, complete=complete, out=out)
        out.append(StreamEnded())
        self._set_state(SessionState.ENDED)

    def _after_packet(
        self, sequence: int, ignored: int, now: float, out: list[SessionOutput]
    ) -> None:
        """State changes a packet causes outside the common case (streaming into an open log)."""
        state = self._state
        if state is SessionState.STARTING:
            if self._reassembler.log_open:  # packet 0 overtook the ack of our START
                self._enter_streaming(now)
        elif (
            state is SessionState.STREAMING
            and self._reassembler.counters.ignored != ignored
            and now >= self._grace_end
        ):
            out.append(NotAtLogStart(sequence))
            self._restart(now, out)

    def _receive_command_ack(self, ack: CommandAck, now: float, out: list[SessionOutput]) -> None:
        if ack.system_id != self._autopilot_system or ack.component_id != self._autopilot_component:
            return
        if ack.target_system != self._system_id or ack.target_component != self._component_id:
            # COMMAND_ACKs go out on every link. Another client's accepted STOP ends the
            # vehicle's only stream, which is ours while we stream: restart it.
            if (
                ack.command == MAV_CMD_LOGGING_STOP
                and ack.result == MavResult.ACCEPTED
                and self._state is SessionState.STREAMING
            ):
                self._reassembler.end_log(
                    LogEndReason.STOPPED_BY_OTHER_CLIENT, complete=True, out=out
                )
                self._send_start(now, out)
            return
        if ack.command == MAV_CMD_LOGGING_START:
            self._receive_start_ack(ack.result, now, out)
        elif ack.command == MAV_CMD_LOGGING_STOP:
            self._receive_stop_ack(ack.result, now, out)

    def _receive_start_ack(self, result: int, now: float, out: list[SessionOutput]) -> None:
        if self._state is not SessionState.STARTING:
            return  # e.g. the answer to a retry sent before the first answer arrived
        match result:
            case MavResult.ACCEPTED:
                self._enter_streaming(now)
            case MavResult.IN_PROGRESS:
                self._retry_at = now + self._retry_interval
            case MavResult.TEMPORARILY_REJECTED if not self._rejected_once:
                # A stream runs already: ours from before a crash, or another client's.
                self._rejected_once = True
                self._restart(now, out)
            case MavResult.TEMPORARILY_REJECTED:
                self._reject(result, _TEMPORARILY_REJECTED_AGAIN, out)
            case MavResult.DENIED:
                self._reject(result, _DENIED, out)
            case _:
                self._reject(result, f"LOGGING_START failed: {_result_name(result)}", out)

    def _receive_stop_ack(self, result: int, now: float, out: list[SessionOutput]) -> None:
        state = self._state
        if state is SessionState.RESTARTING:
            if result == MavResult.IN_PROGRESS:
                self._retry_at = now + self._retry_interval
            else:
                self._send_start(now, out)
        elif state is SessionState.STOPPING:
            if result == MavResult.IN_PROGRESS:
                self._retry_at = None  # heard: wait for ACCEPTED, bounded by stop_timeout
            else:
                self._finish(LogEndReason.STOPPED, complete=result == MavResult.ACCEPTED, out=out)

    def _reject(self, result: int, reason: str, out: list[SessionOutput]) -> None:
        out.append(StreamRejected(result, reason))
        self._set_state(SessionState.REJECTED)

    def _receive_heartbeat(
        self, heartbeat: Heartbeat, now: float, out: list[SessionOutput]
    ) -> None:
        if heartbeat.component_id != self._autopilot_component:
            return
        if self._autopilot_system == _UNKNOWN:
            self._autopilot_system = heartbeat.system_id
            if self._state is SessionState.WAITING_FOR_AUTOPILOT:
                self._send_start(now, out)
        elif heartbeat.system_id == self._autopilot_system and (
            self._state is SessionState.LINK_LOST
        ):
            self._restart(now, out)  # heard again: a new file for a new stream


def _result_name(result: int) -> str:
    try:
        return MavResult(result).name
    except ValueError:
        return f"MAV_RESULT {result}"
