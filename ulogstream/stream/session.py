"""LoggingSession: the log-streaming state machine around the reassembler (sans-IO).

Values in (decoded MAVLink messages, the time ``now``), outputs out, in the order to carry them
out; timers through :meth:`LoggingSession.next_deadline` and :meth:`LoggingSession.handle_timer`.

States and what moves between them (protocol.md, "What a correct receiver does")::

    WAITING_FOR_AUTOPILOT --first HEARTBEAT from compid 1--> STARTING
    STARTING --ACCEPTED, or packet 0--> STREAMING
    STARTING --TEMPORARILY_REJECTED (first time)--> RESTARTING (STOP sent)
    STARTING --TEMPORARILY_REJECTED again, DENIED, UNSUPPORTED, FAILED--> REJECTED
    RESTARTING --STOP answered--> STARTING (START sent)
    STREAMING --no LOGGING_DATA for outage_after--> OUTAGE (the log stays open)
    STREAMING --no log and no data for data_timeout--> STARTING (START again)
    STREAMING --data not at a log start--> RESTARTING
    STREAMING --another client's STOP accepted--> STARTING (log ended)
    OUTAGE --data of the same log (a dropout is written) or packet 0 of a new log--> STREAMING
    OUTAGE --link back (HEARTBEAT or link_restored()) and no data for probe_delay--> START probe:
        TEMPORARILY_REJECTED keeps the log (PX4 still streams it); ACCEPTED ends it (a new log)
    OUTAGE --no data of the log for data_timeout--> STARTING (log ended, incomplete, resumable)
    STARTING (resumable) --data of the ended log--> STREAMING (the log goes on in a new file)
    STARTING (resumable) --TEMPORARILY_REJECTED--> STARTING: PX4 still streams that log, which
        comes back with the link; STOP/START only if none of it arrives for data_timeout
    any --stop()--> STOPPING --ACCEPTED then quiet for stop_quiet, or silent stop_timeout--> ENDED
    STOPPING --abandon()--> ENDED (log ended, incomplete)

Every LOGGING_DATA_ACKED copy from the autopilot addressed to us is acked first, in every state.
Link outages never STOP a stream: PX4 keeps streaming a log through any outage shorter than its
2.5 s ack timeout, and a STOP/START would cut the vehicle's log and block its logger
(protocol.md, "What a correct receiver does" 7 and 8). An outage past ``data_timeout`` finishes
the open log's file, but the log stays resumable: PX4 streams on through any blackout without
ACKED packets, and its data, when it comes back, continues the log in a new file. A COMMAND_ACK
IN_PROGRESS to a STOP means wait: it is not resent every second.
"""

from __future__ import annotations

import enum

import msgspec

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
    LoggingData,
    LoggingPacket,
    MavlinkMessage,
    MavResult,
)
from ulogstream.stream.reassembler import (
    DEFAULT_REORDER_PACKETS,
    DEFAULT_REORDER_TIME,
    LogEndReason,
    LogStreamReassembler,
    ReassemblerOutput,
    StreamCounters,
)

DEFAULT_SYSTEM_ID = 254
"""Our default MAVLink system id: not 255, which GCSs (QGC, MAVProxy) take by convention, so
routers and GCSs do not mistake the stream addressed to us for theirs; not 1, the vehicle's."""

_QUIET_LIMIT = 10.0
"""Longest silence (seconds) a stop waits for after ACCEPTED, however slow the link."""

_STOP_LIMIT = 12
"""An unanswered STOP is given up after this many stop timeouts even while data flows."""

MAX_CONFIRMATION = 255
"""COMMAND_LONG ``confirmation`` is a uint8 counting retransmissions."""

_MAX_ID = 255
_UNKNOWN = -1
"""Autopilot system id before one is configured or heard (matches no sender)."""


class SessionState(enum.Enum):
    """Where a :class:`LoggingSession` is (see the module docstring for the transitions)."""

    IDLE = "idle"
    WAITING_FOR_AUTOPILOT = "waiting for autopilot"
    WAITING_FOR_ARMING = "waiting for arming"
    STARTING = "starting"
    RESTARTING = "restarting"
    STREAMING = "streaming"
    OUTAGE = "link lost"
    REJECTED = "rejected"
    STOPPING = "stopping"
    ENDED = "ended"


_IDLE = SessionState.IDLE
_STREAMING = SessionState.STREAMING
_OUTAGE = SessionState.OUTAGE
_LOGGING_STATES = frozenset({SessionState.STARTING, SessionState.STREAMING, SessionState.OUTAGE})
"""States in which packet 0 of a new log may open a file: our START is out or accepted."""
_FLIGHT_STATES = frozenset(
    {SessionState.STARTING, SessionState.STREAMING, SessionState.OUTAGE, SessionState.RESTARTING}
)
"""States in which a flight's stream is asked for or runs (``while_armed``)."""
_COMMAND_STATES = frozenset(
    {SessionState.STARTING, SessionState.RESTARTING, SessionState.STOPPING, SessionState.OUTAGE}
)
"""States with a command out that is resent until answered."""


class SendCommand(msgspec.Struct, frozen=True):
    """Send COMMAND_LONG ``command`` (LOGGING_START or LOGGING_STOP) to the autopilot.

    ``confirmation`` counts retransmissions of the same command (0 for the first).
    """

    command: int
    target_system: int
    target_component: int
    param1: float = 0.0
    confirmation: int = 0


class SendHeartbeat(msgspec.Struct, frozen=True):
    """Send our HEARTBEAT: an onboard controller, never a GCS (that would mask link-loss)."""

    mav_type: int = MAV_TYPE_ONBOARD_CONTROLLER
    autopilot: int = MAV_AUTOPILOT_INVALID
    system_status: int = MAV_STATE_ACTIVE


class StreamRejected(msgspec.Struct, frozen=True):
    """The vehicle refused to stream (``result`` is its MAV_RESULT); the session retries no more.

    The session keeps acking and sending heartbeats; call :meth:`LoggingSession.stop` to end it.
    """

    result: int
    reason: str


class NotAtLogStart(msgspec.Struct, frozen=True):
    """Logging data arrived that is not the start of a log (we joined a stream mid-way).

    Nothing was written; the session sends LOGGING_STOP and then LOGGING_START.
    """

    sequence: int

    def error(self) -> StreamProtocolError:
        """The report as an exception value, for the shell to log."""
        msg = "logging data without a ULog header (sequence 0 with the magic); restarting"
        return StreamProtocolError(msg, sequence=self.sequence)


class StreamEnded(msgspec.Struct, frozen=True):
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
        data_timeout: Seconds without data of the open log (an outage) after which it is finished
            as incomplete and a new stream is requested; longer than PX4's 2.5 s ack timeout.
        stop_timeout: Seconds without any answer or packet after LOGGING_STOP before giving up.
        start_grace: Seconds after LOGGING_START is accepted during which packets that are not a
            log start are dropped quietly (leftovers of an earlier stream) before they count as
            joining a stream mid-way.
        outage_after: Seconds without LOGGING_DATA after which the status says the link is lost
            (the log stays open for ``data_timeout``).
        probe_delay: Seconds after the link is back without data before LOGGING_START is sent
            to ask whether the vehicle still streams the open log.
        stop_quiet: Seconds of silence after STOP was accepted before the log counts as
            complete (PX4 sends the end of the log after ACCEPTED); scaled up by the measured
            command round trip on slow links.
        reorder_packets: Reorder window size in packets (see :class:`LogStreamReassembler`).
        reorder_time: Reorder window length in seconds.
        restart_after_foreign_stop: After another client's STOP ended our stream (a GCS that
            stops logging on disarm), ask for a new one, and with ``while_armed`` wait for the
            next flight; False ends the session instead (one log, or one flight, only).
        while_armed: Stream only while the vehicle is armed (its HEARTBEAT's ``base_mode``):
            LOGGING_START when it arms, LOGGING_STOP ``disarm_delay`` after it disarms (the
            landing's last samples and PX4's end of log are kept), one log per flight.
        disarm_delay: Seconds after disarming before the flight's stream is stopped; arming
            again meanwhile keeps it going.

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
        data_timeout: float = 30.0,
        stop_timeout: float = 5.0,
        start_grace: float = 1.0,
        outage_after: float = 2.0,
        probe_delay: float = 1.0,
        stop_quiet: float = 1.0,
        reorder_packets: int = DEFAULT_REORDER_PACKETS,
        reorder_time: float = DEFAULT_REORDER_TIME,
        restart_after_foreign_stop: bool = True,
        while_armed: bool = False,
        disarm_delay: float = 2.0,
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
        _check_positive("outage_after", outage_after)
        _check_positive("probe_delay", probe_delay)
        _check_positive("stop_quiet", stop_quiet)
        if disarm_delay < 0:
            msg = f"disarm_delay must not be negative, not {disarm_delay}"
            raise ValueError(msg)
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
        self._outage_after = min(outage_after, data_timeout)
        self._probe_delay = probe_delay
        self._stop_quiet = stop_quiet
        self._restart_after_foreign_stop = restart_after_foreign_stop
        self._while_armed = while_armed
        self._disarm_delay = disarm_delay
        self._armed = False
        """Whether the autopilot's last HEARTBEAT said it is armed."""
        self._disarmed_at: float | None = None
        """When the vehicle disarmed during a flight's stream (None: armed, or not streaming)."""
        self._flight_stop = False
        """The STOP under way ends a flight (while_armed): afterwards, wait for the next one."""
        self._reassembler = LogStreamReassembler(
            reorder_packets=reorder_packets, reorder_time=reorder_time
        )
        self._state = SessionState.IDLE
        self._next_heartbeat = 0.0
        self._command = MAV_CMD_LOGGING_START
        self._confirmation = 0
        self._retry_at: float | None = None
        self._last_data_time = 0.0
        self._grace_end = 0.0
        self._stop_sent = 0.0
        self._stop_accepted: float | None = None
        self._stop_packets = 0
        self._command_sent: float | None = None
        self._round_trip = 0.0
        """Longest measured command round trip (send to COMMAND_ACK) so far, in seconds."""
        self._probe_at: float | None = None
        self._probed = False
        self._rejected_once = False
        self._resume_rejected_at: float | None = None
        """When PX4 first said it still streams the log the outage timeout ended (None: not)."""
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

    @property
    def log_head(self) -> bytes | None:
        """The open log's header, definitions and subscriptions, to go on with it in a new file.

        None before the log's data section began. A file that starts with these bytes, then a
        dropout, then what the session writes next, is a valid log (see
        :attr:`~ulogstream.stream.reassembler.LogStreamReassembler.head`).
        """
        return self._reassembler.head

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
        elif self._while_armed:
            self._set_state(SessionState.WAITING_FOR_ARMING)
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

    def receive_logging_data(self, packet: LoggingData, now: float) -> bytes | None:
        """The data phase's common case: a plain LOGGING_DATA of the log being streamed.

        Taken while streaming into an open log, from our autopilot and addressed to us, when the
        reassembler takes it as the next packet (:meth:`LogStreamReassembler.receive_next`).
        Its effect is then exactly :meth:`receive`'s, which would have returned at most one
        :class:`WriteUlog`: its bytes are returned instead (b"": nothing to write yet).

        Returns:
            The bytes to write, or None: nothing was done (pass the packet to :meth:`receive`).
        """
        system_id, component_id, target_system, target_component, sequence, offset, data = packet
        if (
            self._state is not _STREAMING
            or system_id != self._autopilot_system
            or component_id != self._autopilot_component
            or target_system not in self._accepted_systems
            or target_component not in self._accepted_components
        ):
            return None
        chunk = self._reassembler.receive_next(sequence, offset, data, now)
        if chunk is not None:
            self._last_data_time = now
        return chunk

    def stop(self, now: float) -> list[SessionOutput]:
        """Stop streaming: send LOGGING_STOP and keep acking and writing until it is answered.

        The log ends (:class:`LogEnded`, then :class:`StreamEnded`) when the vehicle answers
        ACCEPTED or after ``stop_timeout``; at once when no stream of ours can be running.

        Raises:
            RuntimeError: Called before :meth:`start`.
        """
        out: list[SessionOutput] = []
        self._flight_stop = False  # the user's stop ends the session, flight or not
        self._disarmed_at = None
        match self._state:
            case SessionState.IDLE:
                msg = "stop() called before start()"
                raise RuntimeError(msg)
            case (
                SessionState.WAITING_FOR_AUTOPILOT
                | SessionState.WAITING_FOR_ARMING
                | SessionState.REJECTED
            ):
                self._finish(LogEndReason.STOPPED, complete=True, out=out)
            case SessionState.STOPPING | SessionState.ENDED:
                pass
            case _:
                self._send_command(MAV_CMD_LOGGING_STOP, now, out)
                self._stop_sent = now
                self._stop_accepted = None
                self._stop_packets = 0
                self._set_state(SessionState.STOPPING)
        return out

    def abandon(self) -> list[SessionOutput]:
        """End at once, without waiting for the vehicle (a second Ctrl-C while stopping)."""
        out: list[SessionOutput] = []
        if self._state is not SessionState.ENDED and self._state is not _IDLE:
            self._finish(LogEndReason.ABANDONED, complete=False, out=out)
        return out

    def link_restored(self, now: float) -> list[SessionOutput]:
        """The shell reopened the link (a device plugged back): say hello, probe if silent."""
        if self._state is _IDLE or self._state is SessionState.ENDED:
            return []
        self._schedule_probe(now)
        return [SendHeartbeat()]

    def stop_progress(self, now: float) -> str | None:
        """What a stop is waiting for, for a progress line; None when not stopping."""
        if self._state is not SessionState.STOPPING:
            return None
        if self._stop_accepted is None:
            return f"waiting for the vehicle to answer LOGGING_STOP ({now - self._stop_sent:.0f} s)"
        quiet = now - max(self._last_data_time, self._stop_accepted)
        return (
            f"receiving the end of the log ({self._stop_packets} packets since STOP, "
            f"quiet for {max(quiet, 0.0):.1f} of {self._quiet():.1f} s)"
        )

    def next_deadline(self) -> float | None:
        """When :meth:`handle_timer` must next be called, or None when never."""
        state = self._state
        if state is SessionState.IDLE or state is SessionState.ENDED:
            return None
        deadline = self._next_heartbeat
        if self._retry_at is not None:
            deadline = min(deadline, self._retry_at)
        if state is _STREAMING:
            silence = self._outage_after if self._reassembler.log_open else self._data_timeout
            deadline = min(deadline, self._last_data_time + silence)
        elif state is _OUTAGE:
            deadline = min(deadline, self._last_data_time + self._data_timeout)
            if self._probe_at is not None:
                deadline = min(deadline, self._probe_at)
        elif state is SessionState.STOPPING:
            deadline = min(deadline, self._stop_end())
        if self._disarmed_at is not None:
            deadline = min(deadline, self._disarmed_at + self._disarm_delay)
        held = self._reassembler.next_deadline()
        return deadline if held is None else min(deadline, held)

    def handle_timer(self, now: float) -> list[SessionOutput]:
        """Do what is due at ``now``: heartbeat, command retry, reorder window, timeouts."""
        out: list[SessionOutput] = []
        state = self._state
        if state is SessionState.IDLE or state is SessionState.ENDED:
            return out
        self._reassembler.handle_timer(now, out)
        if now >= self._next_heartbeat:
            out.append(SendHeartbeat())
            self._next_heartbeat += self._heartbeat_interval
            if self._next_heartbeat <= now:  # late: do not send a burst to catch up
                self._next_heartbeat = now + self._heartbeat_interval
        if self._retry_at is not None and now >= self._retry_at:
            self._confirmation = min(self._confirmation + 1, MAX_CONFIRMATION)
            self._retry_at = now + self._retry_interval
            self._command_sent = now
            out.append(self._command_output())
        # Compare with the same sums next_deadline() returns, or rounding could loop the shell.
        last = self._last_data_time
        if state is _STREAMING:
            if self._reassembler.log_open:
                if now >= last + self._outage_after:
                    self._set_state(_OUTAGE)  # the log stays open: PX4 streams on
            elif now >= last + self._data_timeout:
                self._send_start(now, out)  # START was accepted but no stream came
        elif state is _OUTAGE:
            if now >= last + self._data_timeout:
                # The file is finished, but PX4 may stream on: its data continues the log.
                self._reassembler.end_log(
                    LogEndReason.DATA_TIMEOUT, complete=False, out=out, resumable=True
                )
                self._send_start(now, out)
            elif self._probe_at is not None and now >= self._probe_at:
                self._probe_at = None
                self._send_command(MAV_CMD_LOGGING_START, now, out)
        if self._disarmed_at is not None and now >= self._disarmed_at + self._disarm_delay:
            self._end_flight(now, out)
        elif state is SessionState.STOPPING and now >= self._stop_end():
            if self._stop_accepted is None:
                self._finish(LogEndReason.STOP_TIMEOUT, complete=False, out=out)
            else:
                self._finish(LogEndReason.STOPPED, complete=True, out=out)
        return out

    def _quiet(self) -> float:
        """Silence after an accepted STOP that ends the log, scaled to the link's round trip."""
        return max(self._stop_quiet, min(4.0 * self._round_trip, _QUIET_LIMIT))

    def _stop_end(self) -> float:
        """When a stop is over: quiet after ACCEPTED, or stop_timeout without any sign of life."""
        last = max(self._last_data_time, self._stop_sent)
        if self._stop_accepted is None:
            return min(
                last + self._stop_timeout, self._stop_sent + _STOP_LIMIT * self._stop_timeout
            )
        return max(last, self._stop_accepted) + self._quiet()

    def _schedule_probe(self, now: float) -> None:
        """In an outage, START once the link is back, unless data resumes first."""
        if self._state is _OUTAGE and not self._probed:
            self._probed = True
            self._probe_at = now + self._probe_delay

    def _set_state(self, state: SessionState) -> None:
        if state is not _OUTAGE:
            self._probe_at = None
            self._probed = False
        elif self._state is not _OUTAGE:
            self._reassembler.resync()  # the stream goes on while nothing arrives
        if state is not SessionState.STARTING:
            self._resume_rejected_at = None
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
        self._command_sent = now
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
        if self._flight_stop and self._restart_after_foreign_stop:
            self._flight_stop = False
            self._set_state(SessionState.WAITING_FOR_ARMING)  # the stream is over: next flight
            return
        out.append(StreamEnded())
        self._set_state(SessionState.ENDED)

    def _end_flight(self, now: float, out: list[SessionOutput]) -> None:
        """The vehicle stayed disarmed ``disarm_delay``: STOP, and the flight's log ends."""
        self._disarmed_at = None
        if self._state in _FLIGHT_STATES:
            self._flight_stop = True
            self._send_command(MAV_CMD_LOGGING_STOP, now, out)
            self._stop_sent = now
            self._stop_accepted = None
            self._stop_packets = 0
            self._set_state(SessionState.STOPPING)

    def _after_packet(
        self, sequence: int, ignored: int, now: float, out: list[SessionOutput]
    ) -> None:
        """State changes a packet causes outside the common case (streaming into an open log)."""
        state = self._state
        if state is _OUTAGE:
            if self._reassembler.log_open:  # the log's data is back (a dropout marks the gap)
                self._reassembler.resync_done()
                self._set_state(_STREAMING)
        elif state is SessionState.STOPPING:
            self._stop_packets += 1
        elif state is SessionState.STARTING:
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
                if self._restart_after_foreign_stop:
                    self._reassembler.end_log(
                        LogEndReason.STOPPED_BY_OTHER_CLIENT, complete=True, out=out
                    )
                    if self._while_armed and not self._armed:
                        self._disarmed_at = None  # a GCS ended the flight's log on disarm
                        self._set_state(SessionState.WAITING_FOR_ARMING)
                    else:
                        self._send_start(now, out)
                else:  # one log only (record --once): the vehicle ended it, nothing of ours runs
                    self._finish(LogEndReason.STOPPED_BY_OTHER_CLIENT, complete=True, out=out)
            return
        if ack.command == self._command and self._command_sent is not None:
            self._round_trip = now - self._command_sent  # the first answer to the last send
            self._command_sent = None
        if ack.command == MAV_CMD_LOGGING_START:
            self._receive_start_ack(ack.result, now, out)
        elif ack.command == MAV_CMD_LOGGING_STOP:
            self._receive_stop_ack(ack.result, now, out)

    def _receive_start_ack(self, result: int, now: float, out: list[SessionOutput]) -> None:
        if self._state is _OUTAGE and self._command == MAV_CMD_LOGGING_START:
            # The answer to our probe: TEMPORARILY_REJECTED means PX4 still streams the open log
            # (keep it); ACCEPTED means its stream had ended and a new log begins.
            if result == MavResult.IN_PROGRESS:
                self._retry_at = now + self._retry_interval
            elif result == MavResult.ACCEPTED:
                self._reassembler.end_log(LogEndReason.STREAM_GONE, complete=False, out=out)
                self._enter_streaming(now)
            else:
                self._retry_at = None
            return
        if self._state is not SessionState.STARTING:
            return  # e.g. the answer to a retry sent before the first answer arrived
        reassembler = self._reassembler
        match result:
            case MavResult.ACCEPTED:
                reassembler.forget_resumable()  # PX4's stream had ended: a new log begins
                self._enter_streaming(now)
            case MavResult.IN_PROGRESS:
                self._retry_at = now + self._retry_interval
            case MavResult.TEMPORARILY_REJECTED if (
                reassembler.resumable and not self._rejected_once
            ):
                # PX4 still streams the log the outage timeout ended: its data comes back with
                # the link and continues it. A STOP here would cut the vehicle's log (and its
                # SD log), so ask again, and only after data_timeout without any of it STOP
                # (the end of the log PX4 sends after that STOP still continues it).
                if self._resume_rejected_at is None:
                    self._resume_rejected_at = now
                if now - self._resume_rejected_at < self._data_timeout:
                    self._retry_at = now + self._retry_interval
                else:
                    self._rejected_once = True
                    self._restart(now, out)
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
                # PX4 is sending the end of its log (stop-and-wait): wait for ACCEPTED, and
                # resend only if it has not come within stop_timeout.
                self._retry_at = now + self._stop_timeout
            else:
                self._send_start(now, out)
        elif state is SessionState.STOPPING:
            if result == MavResult.IN_PROGRESS:
                self._retry_at = None  # heard: wait for ACCEPTED, bounded by stop_timeout
            elif result == MavResult.ACCEPTED:
                # PX4 sends the end of the log after this: keep acking until it has gone quiet.
                self._retry_at = None
                if not self._reassembler.log_open:
                    self._finish(LogEndReason.STOPPED, complete=True, out=out)
                elif self._stop_accepted is None:
                    self._stop_accepted = now
            else:
                self._finish(LogEndReason.STOPPED, complete=False, out=out)

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
                if self._while_armed:
                    self._set_state(SessionState.WAITING_FOR_ARMING)
                else:
                    self._send_start(now, out)
        elif heartbeat.system_id != self._autopilot_system:
            return
        elif self._state is _OUTAGE:
            self._schedule_probe(now)  # heard again: does the open log's stream still run?
        self._armed = armed = heartbeat.armed
        if not self._while_armed:
            return
        if armed:
            self._disarmed_at = None
            if self._state is SessionState.WAITING_FOR_ARMING:
                self._send_start(now, out)  # a flight begins: its own log
        elif self._disarmed_at is None and self._state in _FLIGHT_STATES:
            self._disarmed_at = now


def _result_name(result: int) -> str:
    try:
        return MavResult(result).name
    except ValueError:
        return f"MAV_RESULT {result}"
