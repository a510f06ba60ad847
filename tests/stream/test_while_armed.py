"""``while_armed``: a session streams each flight, from arming to just after disarming."""

from __future__ import annotations

from typing import TypeVar

from support.packetize import make_ulog, packetize, written

from ulogstream.stream.packets import (
    MAV_CMD_LOGGING_START,
    MAV_CMD_LOGGING_STOP,
    MAV_MODE_FLAG_SAFETY_ARMED,
    CommandAck,
    Heartbeat,
    MavResult,
)
from ulogstream.stream.reassembler import LogEnded, LogEndReason, LogStarted
from ulogstream.stream.session import (
    DEFAULT_SYSTEM_ID,
    LoggingSession,
    SendCommand,
    SessionOutput,
    SessionState,
    StreamEnded,
)

T = TypeVar("T")
ME = (DEFAULT_SYSTEM_ID, 155)
START = SendCommand(MAV_CMD_LOGGING_START, 1, 1)
STOP = SendCommand(MAV_CMD_LOGGING_STOP, 1, 1)
ULOG = make_ulog(300)
PACKETS = packetize(ULOG)


def beat(*, armed: bool) -> Heartbeat:
    return Heartbeat(1, 1, 2, 12, base_mode=MAV_MODE_FLAG_SAFETY_ARMED if armed else 0)


def ack(command: int, result: int, target: tuple[int, int] = ME) -> CommandAck:
    return CommandAck(command, result, 1, 1, *target)


def of_type(outputs: list[SessionOutput], kind: type[T]) -> list[T]:
    return [o for o in outputs if isinstance(o, kind)]


def state(session: LoggingSession) -> SessionState:
    return session.state


def run_timers(session: LoggingSession, until: float) -> list[SessionOutput]:
    out: list[SessionOutput] = []
    while (deadline := session.next_deadline()) is not None and deadline <= until:
        out += session.handle_timer(deadline)
    return out


def fly(session: LoggingSession, armed_at: float) -> list[SessionOutput]:
    """Arm at ``armed_at``: START accepted, the whole log streamed (10 ms per packet)."""
    out = session.receive(beat(armed=True), armed_at)
    assert of_type(out, SendCommand) == [START]
    out += session.receive(ack(MAV_CMD_LOGGING_START, MavResult.ACCEPTED), armed_at + 0.01)
    for number, packet in enumerate(PACKETS):
        out += session.receive(packet, armed_at + 0.02 + number * 0.01)
    return out


def land(session: LoggingSession, disarmed_at: float) -> list[SessionOutput]:
    """Disarm at ``disarmed_at``; answer the STOP; let the end of the log go quiet."""
    out = session.receive(beat(armed=False), disarmed_at)
    out += run_timers(session, disarmed_at + 1.99)
    assert of_type(out, SendCommand) == []  # the landing's last samples still come
    out += run_timers(session, disarmed_at + 2.0)
    assert of_type(out, SendCommand) == [STOP]
    out += session.receive(ack(MAV_CMD_LOGGING_STOP, MavResult.ACCEPTED), disarmed_at + 2.1)
    out += run_timers(session, disarmed_at + 4.0)
    return out


def test_nothing_is_asked_for_until_the_vehicle_arms() -> None:
    session = LoggingSession(while_armed=True, disarm_delay=2.0)
    session.start(0.0)
    assert of_type(session.receive(beat(armed=False), 0.5), SendCommand) == []
    assert state(session) is SessionState.WAITING_FOR_ARMING
    assert of_type(run_timers(session, 30.0), SendCommand) == []  # heartbeats only


def test_each_flight_is_one_log_from_arming_to_after_disarming() -> None:
    session = LoggingSession(while_armed=True, disarm_delay=2.0)
    session.start(0.0)
    session.receive(beat(armed=False), 0.1)
    outputs: list[SessionOutput] = []
    for armed_at in (1.0, 20.0):
        flight = fly(session, armed_at)
        flight += land(session, armed_at + 10.0)
        assert len(of_type(flight, LogStarted)) == 1
        assert of_type(flight, LogEnded) == [LogEnded(LogEndReason.STOPPED, complete=True)]
        assert of_type(flight, StreamEnded) == []  # the session waits for the next flight
        assert state(session) is SessionState.WAITING_FOR_ARMING
        assert written(flight) == ULOG
        outputs += flight
    assert len(of_type(outputs, LogStarted)) == 2


def test_arming_again_before_the_delay_keeps_the_same_log() -> None:
    session = LoggingSession(while_armed=True, disarm_delay=2.0)
    session.start(0.0)
    session.receive(beat(armed=False), 0.1)
    fly(session, 1.0)
    session.receive(beat(armed=False), 10.0)
    session.receive(beat(armed=True), 11.0)  # a touch-and-go
    out = run_timers(session, 20.0)
    assert of_type(out, SendCommand) == []
    assert of_type(out, LogEnded) == []
    assert session.log_open


def test_with_once_the_first_flight_ends_the_session() -> None:
    session = LoggingSession(while_armed=True, restart_after_foreign_stop=False)
    session.start(0.0)
    fly(session, 1.0)
    out = land(session, 10.0)
    assert out[-1] == StreamEnded()
    assert state(session) is SessionState.ENDED


def test_a_gcs_stop_on_disarm_ends_the_flight_and_the_session_waits_for_the_next() -> None:
    session = LoggingSession(while_armed=True)
    session.start(0.0)
    fly(session, 1.0)
    session.receive(beat(armed=False), 10.0)
    out = session.receive(ack(MAV_CMD_LOGGING_STOP, MavResult.ACCEPTED, target=(255, 190)), 10.1)
    assert of_type(out, LogEnded) == [LogEnded(LogEndReason.STOPPED_BY_OTHER_CLIENT, complete=True)]
    assert of_type(out, SendCommand) == []
    assert state(session) is SessionState.WAITING_FOR_ARMING
    assert of_type(run_timers(session, 20.0), SendCommand) == []


def test_a_users_stop_mid_flight_ends_the_session_after_the_stop() -> None:
    session = LoggingSession(while_armed=True)
    session.start(0.0)
    fly(session, 1.0)
    session.receive(beat(armed=False), 10.0)
    assert session.stop(10.5) == [STOP]
    session.receive(ack(MAV_CMD_LOGGING_STOP, MavResult.ACCEPTED), 10.6)
    out = run_timers(session, 20.0)
    assert out[-1] == StreamEnded()
    assert state(session) is SessionState.ENDED


def test_already_armed_at_first_contact_starts_at_once() -> None:
    session = LoggingSession(while_armed=True)
    session.start(0.0)
    assert of_type(session.receive(beat(armed=True), 0.5), SendCommand) == [START]


def test_always_mode_ignores_arming() -> None:
    session = LoggingSession()
    session.start(0.0)
    assert of_type(session.receive(beat(armed=False), 0.5), SendCommand) == [START]
