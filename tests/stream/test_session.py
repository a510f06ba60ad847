from __future__ import annotations

from typing import TypeVar

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.packetize import definitions_end, make_ulog, messages, packetize, written

from ulogstream.errors import StreamProtocolError
from ulogstream.stream.packets import (
    MAV_CMD_LOGGING_START,
    MAV_CMD_LOGGING_STOP,
    CommandAck,
    CommandLong,
    Heartbeat,
    LoggingAck,
    LoggingPacket,
    MavResult,
)
from ulogstream.stream.reassembler import (
    LogEnded,
    LogEndReason,
    LogStarted,
    PacketsLost,
    SendAck,
    WriteUlog,
)
from ulogstream.stream.session import (
    DEFAULT_SYSTEM_ID,
    LoggingSession,
    NotAtLogStart,
    SendCommand,
    SendHeartbeat,
    SessionOutput,
    SessionState,
    StreamEnded,
    StreamRejected,
)

T = TypeVar("T")
ULOG = make_ulog(1500)
PACKETS = packetize(ULOG)
assert len(PACKETS) > 200
ME = (DEFAULT_SYSTEM_ID, 155)
START = SendCommand(MAV_CMD_LOGGING_START, 1, 1)
STOP = SendCommand(MAV_CMD_LOGGING_STOP, 1, 1)


def ack(
    command: int,
    result: int,
    *,
    target: tuple[int, int] = ME,
    source: tuple[int, int] = (1, 1),
) -> CommandAck:
    return CommandAck(command, result, source[0], source[1], target[0], target[1])


def state(session: LoggingSession) -> SessionState:
    """The session's state, read afresh (mypy would keep a narrowed property)."""
    return session.state


def autopilot(session: LoggingSession) -> int | None:
    return session.autopilot_system


def heartbeat(system_id: int = 1, component_id: int = 1) -> Heartbeat:
    return Heartbeat(system_id, component_id, mav_type=2, autopilot=12)


def of_type(outputs: list[SessionOutput], kind: type[T]) -> list[T]:
    return [o for o in outputs if isinstance(o, kind)]


def streaming_session(now: float = 0.0, **settings: float) -> LoggingSession:
    """A session whose START was accepted at ``now``."""
    session = LoggingSession(target_system=1, **settings)  # type: ignore[arg-type]
    session.start(now)
    session.receive(ack(MAV_CMD_LOGGING_START, MavResult.ACCEPTED), now)
    assert state(session) is SessionState.STREAMING
    return session


def feed(
    session: LoggingSession,
    packets: list[LoggingPacket],
    *,
    start: float,
    step: float = 0.001,
) -> list[SessionOutput]:
    out: list[SessionOutput] = []
    for number, packet in enumerate(packets):
        out += session.receive(packet, start + number * step)
    return out


def run_timers(session: LoggingSession, until: float) -> list[SessionOutput]:
    """Call handle_timer at every deadline up to ``until``, as the shell does."""
    out: list[SessionOutput] = []
    while (deadline := session.next_deadline()) is not None and deadline <= until:
        out += session.handle_timer(deadline)
    return out


# --- start ---------------------------------------------------------------------------------


def test_start_sends_heartbeat_and_start_and_retries_every_second() -> None:
    session = LoggingSession(target_system=1)
    assert session.start(10.0) == [SendHeartbeat(), START]
    assert state(session) is SessionState.STARTING
    assert session.next_deadline() == 11.0
    assert session.handle_timer(10.5) == []
    assert session.handle_timer(11.0) == [
        SendHeartbeat(),
        msgspec.structs.replace(START, confirmation=1),
    ]
    assert session.handle_timer(12.0) == [
        SendHeartbeat(),
        msgspec.structs.replace(START, confirmation=2),
    ]


def test_heartbeat_is_an_onboard_controller_never_a_gcs() -> None:
    beat = SendHeartbeat()
    assert (beat.mav_type, beat.autopilot, beat.system_status) == (18, 8, 4)


def test_autopilot_is_the_first_heartbeat_from_component_one() -> None:
    session = LoggingSession()
    assert session.start(0.0) == [SendHeartbeat()]
    assert state(session) is SessionState.WAITING_FOR_AUTOPILOT
    assert autopilot(session) is None
    assert session.receive(heartbeat(255, 190), 0.1) == []  # a GCS
    assert session.receive(heartbeat(7, 1), 0.2) == [SendCommand(MAV_CMD_LOGGING_START, 7, 1)]
    assert autopilot(session) == 7
    assert session.receive(heartbeat(8, 1), 0.3) == []  # the first one stays chosen
    assert state(session) is SessionState.STARTING


def test_only_acks_from_the_autopilot_addressed_to_us_count() -> None:
    session = LoggingSession(target_system=1)
    session.start(0.0)
    accepted = MavResult.ACCEPTED
    ignored = [
        ack(MAV_CMD_LOGGING_START, accepted, target=(255, 190)),  # to a GCS
        ack(MAV_CMD_LOGGING_START, accepted, target=(DEFAULT_SYSTEM_ID, 0)),
        ack(MAV_CMD_LOGGING_START, accepted, source=(2, 1)),  # another vehicle
        ack(MAV_CMD_LOGGING_START, accepted, source=(1, 100)),  # a camera
        ack(176, accepted),  # some other command
    ]
    for message in ignored:
        assert session.receive(message, 0.1) == []
        assert state(session) is SessionState.STARTING
    assert session.receive(ack(MAV_CMD_LOGGING_START, accepted), 0.2) == []
    assert state(session) is SessionState.STREAMING
    assert of_type(session.handle_timer(1.5), SendCommand) == []  # no more retries


def test_start_in_progress_postpones_the_retry() -> None:
    session = LoggingSession(target_system=1)
    session.start(0.0)
    session.receive(ack(MAV_CMD_LOGGING_START, MavResult.IN_PROGRESS), 0.8)
    assert session.next_deadline() == 1.0  # the heartbeat
    assert session.handle_timer(1.0) == [SendHeartbeat()]
    assert session.handle_timer(1.8) == [msgspec.structs.replace(START, confirmation=1)]


def test_temporarily_rejected_stops_then_starts_once_more() -> None:
    session = LoggingSession(target_system=1)
    session.start(0.0)
    rejected = ack(MAV_CMD_LOGGING_START, MavResult.TEMPORARILY_REJECTED)
    assert session.receive(rejected, 0.1) == [STOP]
    assert state(session) is SessionState.RESTARTING
    assert session.handle_timer(1.1) == [
        SendHeartbeat(),
        msgspec.structs.replace(STOP, confirmation=1),
    ]
    assert session.receive(ack(MAV_CMD_LOGGING_STOP, MavResult.IN_PROGRESS), 1.2) == []
    assert session.receive(ack(MAV_CMD_LOGGING_STOP, MavResult.ACCEPTED), 1.3) == [START]
    assert state(session) is SessionState.STARTING
    assert session.receive(ack(MAV_CMD_LOGGING_START, MavResult.ACCEPTED), 1.4) == []
    assert state(session) is SessionState.STREAMING


def test_rejected_again_reports_backend_off_or_another_owner_and_stops_trying() -> None:
    session = LoggingSession(target_system=1)
    session.start(0.0)
    rejected = ack(MAV_CMD_LOGGING_START, MavResult.TEMPORARILY_REJECTED)
    session.receive(rejected, 0.1)
    session.receive(ack(MAV_CMD_LOGGING_STOP, MavResult.ACCEPTED), 0.2)
    outputs = session.receive(rejected, 0.3)
    assert len(outputs) == 1
    assert isinstance(outputs[0], StreamRejected)
    assert outputs[0].result == MavResult.TEMPORARILY_REJECTED
    assert "backend is off" in outputs[0].reason
    assert "another client owns the stream" in outputs[0].reason
    assert state(session) is SessionState.REJECTED
    assert of_type(run_timers(session, 30.0), SendCommand) == []


def test_denied_says_the_link_is_too_slow_and_never_retries() -> None:
    session = LoggingSession(target_system=1)
    session.start(0.0)
    outputs = session.receive(ack(MAV_CMD_LOGGING_START, MavResult.DENIED), 0.1)
    assert outputs == [StreamRejected(MavResult.DENIED, outputs[0].reason)]  # type: ignore[union-attr]
    assert "too slow" in outputs[0].reason  # type: ignore[union-attr]
    later = run_timers(session, 60.0)
    assert of_type(later, SendCommand) == []
    assert len(of_type(later, SendHeartbeat)) == 60  # still alive, 1 Hz
    assert session.stop(61.0) == [StreamEnded()]
    assert session.next_deadline() is None


@pytest.mark.parametrize(
    ("result", "name"),
    [(MavResult.UNSUPPORTED, "UNSUPPORTED"), (MavResult.FAILED, "FAILED"), (99, "MAV_RESULT 99")],
)
def test_other_start_results_are_reported_by_name(result: int, name: str) -> None:
    session = LoggingSession(target_system=1)
    session.start(0.0)
    outputs = session.receive(ack(MAV_CMD_LOGGING_START, result), 0.1)
    assert outputs == [StreamRejected(result, f"LOGGING_START failed: {name}")]


def test_packet_zero_before_the_start_ack_opens_the_log() -> None:
    session = LoggingSession(target_system=1)
    session.start(0.0)
    outputs = session.receive(PACKETS[0], 0.01)
    assert outputs[:2] == [SendAck(0, 1, 1), LogStarted(123)]
    assert state(session) is SessionState.STREAMING
    assert session.log_open
    # The late answers (to the first START and to a retry) change nothing.
    assert session.receive(ack(MAV_CMD_LOGGING_START, MavResult.ACCEPTED), 0.02) == []
    late = ack(MAV_CMD_LOGGING_START, MavResult.TEMPORARILY_REJECTED)
    assert session.receive(late, 0.03) == []
    assert state(session) is SessionState.STREAMING
    outputs += feed(session, PACKETS[1:], start=0.04)
    assert written(outputs) == ULOG
    assert of_type(session.handle_timer(1.0), SendCommand) == []


# --- packets ----------------------------------------------------------------------------------


def test_lossless_stream_through_the_session_is_byte_identical() -> None:
    session = streaming_session()
    outputs = feed(session, PACKETS, start=0.1)
    assert written(outputs) == ULOG
    counters = session.counters
    assert counters.packets == len(PACKETS)
    assert counters.bytes_written == len(ULOG)
    assert counters.acked == sum(p.needs_ack for p in PACKETS)


def test_every_acked_copy_is_acked_before_any_other_output() -> None:
    session = streaming_session()
    second = packetize(make_ulog(100, seed=9, timestamp_us=999))
    stream = [*PACKETS[:12], PACKETS[11], PACKETS[14], PACKETS[13], *PACKETS[15:40], *second]
    stream = [msgspec.structs.replace(p, needs_ack=True) for p in stream]
    for number, packet in enumerate(stream):
        outputs = session.receive(packet, 0.1 + number * 0.001)
        assert outputs[0] == SendAck(packet.sequence, 1, 1)
        assert of_type(outputs, SendAck) == [outputs[0]]
    assert session.counters.duplicates == 1
    assert (session.counters.packets_lost, session.counters.packets_late) == (1, 0)  # 12 never came


@pytest.mark.parametrize(
    "packet",
    [
        msgspec.structs.replace(PACKETS[0], system_id=2),
        msgspec.structs.replace(PACKETS[0], component_id=100),
        msgspec.structs.replace(PACKETS[0], target_system=255),
        msgspec.structs.replace(PACKETS[0], target_component=190),
    ],
    ids=["other-vehicle", "other-component", "other-system", "other-client"],
)
def test_packets_not_from_the_autopilot_to_us_get_nothing_not_even_an_ack(
    packet: LoggingPacket,
) -> None:
    session = streaming_session()
    assert session.receive(packet, 0.1) == []
    assert session.counters.filtered == 1
    assert not session.log_open


def test_packets_addressed_to_broadcast_are_accepted() -> None:
    session = streaming_session()
    packet = msgspec.structs.replace(PACKETS[0], target_system=0, target_component=0)
    assert session.receive(packet, 0.1)[:2] == [SendAck(0, 1, 1), LogStarted(123)]


def test_losses_are_reported_through_the_session() -> None:
    session = streaming_session()
    outputs = feed(session, [p for p in PACKETS if p.sequence not in {20, 21}], start=0.1)
    assert of_type(outputs, PacketsLost) == [PacketsLost(22, 2)]
    assert session.counters.packets_lost == 2
    assert session.counters.dropouts == 1


def test_other_messages_are_ignored() -> None:
    session = streaming_session()
    assert session.receive(CommandLong(2510, 0.0, 255, 190, 1, 1), 0.1) == []
    assert session.receive(LoggingAck(3, 255, 190, 1, 1), 0.1) == []
    assert session.receive(heartbeat(), 0.1) == []


def test_new_log_mid_session_ends_the_current_log_and_opens_a_new_one() -> None:
    session = streaming_session()
    second_ulog = make_ulog(100, seed=4, timestamp_us=777)
    outputs = feed(session, [*PACKETS[:50], *packetize(second_ulog)], start=0.1)
    ended = outputs.index(LogEnded(LogEndReason.NEW_LOG, complete=False))
    assert outputs[ended + 1] == LogStarted(777)
    assert written(outputs[ended:]) == second_ulog
    assert state(session) is SessionState.STREAMING


def test_data_not_at_a_log_start_restarts_the_stream_after_the_grace_time() -> None:
    session = streaming_session(0.0)
    assert session.receive(PACKETS[30], 0.5) == []  # an old stream's leftover: quiet
    outputs = session.receive(PACKETS[31], 1.5)
    assert outputs == [NotAtLogStart(31), STOP]
    error = outputs[0].error()  # type: ignore[union-attr]
    assert isinstance(error, StreamProtocolError)
    assert error.sequence == 31
    assert "without a ULog header" in str(error)
    assert state(session) is SessionState.RESTARTING
    assert session.receive(PACKETS[32], 1.6) == []  # reported once
    assert session.receive(ack(MAV_CMD_LOGGING_STOP, MavResult.ACCEPTED), 1.7) == [START]
    assert session.counters.bytes_written == 0


# --- stop -------------------------------------------------------------------------------------


def test_stop_keeps_acking_and_writing_until_accepted_and_quiet() -> None:
    session = streaming_session(stop_quiet=1.0)
    outputs = feed(session, PACKETS[:100], start=0.1)
    assert session.stop(1.0) == [STOP]
    assert state(session) is SessionState.STOPPING
    outputs += feed(session, PACKETS[100:150], start=1.01)
    assert session.receive(ack(MAV_CMD_LOGGING_STOP, MavResult.IN_PROGRESS), 1.1) == []
    assert of_type(session.handle_timer(2.5), SendCommand) == []  # heard: no STOP retries
    assert session.receive(ack(MAV_CMD_LOGGING_STOP, MavResult.ACCEPTED), 2.6) == []
    # PX4 sends the end of the log (post-flight perf) as ACKED packets after ACCEPTED.
    for number, packet in enumerate(PACKETS[150:]):
        got = session.receive(msgspec.structs.replace(packet, needs_ack=True), 2.7 + number * 0.01)
        assert got[0] == SendAck(packet.sequence, 1, 1)
        outputs += got
    last = 2.7 + (len(PACKETS) - 151) * 0.01
    progress = session.stop_progress(last + 0.5)
    assert progress is not None
    assert f"{len(PACKETS) - 100} packets since STOP" in progress
    assert of_type(run_timers(session, last + 0.99), LogEnded) == []
    final = run_timers(session, last + 1.0)
    assert of_type(final, LogEnded) == [LogEnded(LogEndReason.STOPPED, complete=True)]
    assert final[-1] == StreamEnded()
    assert written(outputs) == ULOG
    assert state(session) is SessionState.ENDED
    assert session.next_deadline() is None
    assert session.handle_timer(100.0) == []
    assert session.stop(100.0) == []


def test_stop_over_a_slow_link_waits_while_the_end_of_the_log_trickles_in() -> None:
    # A 5.7 KB/s radio: one ACKED packet every 0.3 s for 8 s after ACCEPTED.
    session = streaming_session(stop_quiet=1.0, stop_timeout=5.0)
    outputs = feed(session, PACKETS[:50], start=0.1)
    session.stop(1.0)
    session.receive(ack(MAV_CMD_LOGGING_STOP, MavResult.ACCEPTED), 1.08)
    now = 1.1
    for packet in PACKETS[50:]:
        outputs += run_timers(session, now)
        outputs += session.receive(msgspec.structs.replace(packet, needs_ack=True), now)
        now += 0.3
    assert of_type(outputs, LogEnded) == []
    outputs += run_timers(session, now + 2.0)
    assert of_type(outputs, LogEnded) == [LogEnded(LogEndReason.STOPPED, complete=True)]
    assert written(outputs) == ULOG


def test_quiet_time_scales_with_the_measured_round_trip() -> None:
    session = streaming_session(stop_quiet=0.5)
    feed(session, PACKETS[:5], start=0.1)
    session.stop(1.0)
    session.receive(ack(MAV_CMD_LOGGING_STOP, MavResult.ACCEPTED), 1.5)  # 0.5 s round trip
    assert of_type(run_timers(session, 1.5 + 1.99), LogEnded) == []
    assert of_type(run_timers(session, 1.5 + 2.0), LogEnded) != []


def test_abandon_ends_a_stop_at_once_as_incomplete() -> None:
    session = streaming_session()
    feed(session, PACKETS[:5], start=0.1)
    session.stop(1.0)
    assert session.stop_progress(3.0) == "waiting for the vehicle to answer LOGGING_STOP (2 s)"
    assert session.abandon() == [
        LogEnded(LogEndReason.ABANDONED, complete=False),
        StreamEnded(),
    ]
    assert session.abandon() == []
    assert session.stop_progress(3.0) is None


def test_acks_continue_after_the_stream_ended() -> None:
    session = streaming_session()
    feed(session, PACKETS[:5], start=0.1)
    session.stop(1.0)
    session.receive(ack(MAV_CMD_LOGGING_STOP, MavResult.ACCEPTED), 1.1)
    assert of_type(run_timers(session, 10.0), StreamEnded) == [StreamEnded()]
    late = msgspec.structs.replace(PACKETS[5], needs_ack=True)
    assert session.receive(late, 11.2) == [SendAck(5, 1, 1)]
    assert session.receive(late, 11.3) == [SendAck(5, 1, 1)]
    assert session.receive(PACKETS[6], 11.4) == []


def test_unanswered_stop_is_resent_then_given_up_after_the_stop_timeout() -> None:
    session = streaming_session(stop_timeout=3.0)
    feed(session, PACKETS[:50], start=0.1)
    session.stop(1.0)
    outputs = run_timers(session, 10.0)
    assert of_type(outputs, SendCommand) == [
        msgspec.structs.replace(STOP, confirmation=1),
        msgspec.structs.replace(STOP, confirmation=2),
        msgspec.structs.replace(STOP, confirmation=3),
    ]
    assert outputs[-2:] == [LogEnded(LogEndReason.STOP_TIMEOUT, complete=False), StreamEnded()]


def test_stop_answered_with_an_error_ends_the_log_as_incomplete() -> None:
    session = streaming_session()
    feed(session, PACKETS[:50], start=0.1)
    session.stop(1.0)
    final = session.receive(ack(MAV_CMD_LOGGING_STOP, MavResult.FAILED), 1.1)
    assert final == [LogEnded(LogEndReason.STOPPED, complete=False), StreamEnded()]


def test_stop_before_any_autopilot_ends_at_once() -> None:
    session = LoggingSession()
    session.start(0.0)
    assert session.stop(0.5) == [StreamEnded()]
    assert state(session) is SessionState.ENDED


def test_stop_while_starting_sends_stop() -> None:
    session = LoggingSession(target_system=1)
    session.start(0.0)
    assert session.stop(0.5) == [STOP]
    assert session.receive(ack(MAV_CMD_LOGGING_START, MavResult.ACCEPTED), 0.6) == []
    assert session.receive(PACKETS[0], 0.7) == [SendAck(0, 1, 1)]  # no new log while stopping
    # No log of ours is open, so nothing more can come: ACCEPTED ends the session.
    assert session.receive(ack(MAV_CMD_LOGGING_STOP, MavResult.ACCEPTED), 0.8) == [StreamEnded()]


# --- liveness and restarts ----------------------------------------------------------------


def test_short_outage_keeps_the_log_and_marks_a_measured_dropout() -> None:
    session = streaming_session(outage_after=2.0, data_timeout=30.0)
    outputs = feed(session, PACKETS[:60], start=0.1)
    last = 0.1 + 59 * 0.001
    outputs += run_timers(session, last + 2.0)
    assert state(session) is SessionState.OUTAGE
    assert session.log_open
    # The link comes back 4 s later; PX4 kept streaming, so some packets were lost.
    outputs += feed(session, PACKETS[70:], start=last + 4.0)
    assert state(session) is SessionState.STREAMING
    assert of_type(outputs, LogEnded) == []
    assert of_type(outputs, SendCommand) == []  # never STOP a stream that is still coming
    assert session.counters.logs_started == 1
    assert session.counters.dropouts == 1
    dropout = written(outputs).index(b"\x02\x00O")
    duration = int.from_bytes(written(outputs)[dropout + 3 : dropout + 5], "little")
    assert 3900 <= duration <= 4100


def test_outage_longer_than_the_grace_period_ends_the_log_then_starts() -> None:
    session = streaming_session(data_timeout=10.0)
    feed(session, PACKETS[:100], start=0.1)
    last = 0.1 + 99 * 0.001
    assert of_type(run_timers(session, last + 9.9), LogEnded) == []
    outputs = run_timers(session, last + 10.0)
    assert of_type(outputs, LogEnded) == [LogEnded(LogEndReason.DATA_TIMEOUT, complete=False)]
    assert outputs[-1] == START  # START, never STOP: it is harmless if PX4 still streams
    assert state(session) is SessionState.STARTING
    assert session.receive(ack(MAV_CMD_LOGGING_START, MavResult.ACCEPTED), 11.0) == []
    outputs = feed(session, PACKETS, start=11.1)
    assert outputs[1] == LogStarted(123)
    assert written(outputs) == ULOG
    assert session.counters.logs_started == 2


def test_outage_past_the_timeout_then_the_same_logs_data_continues_it_in_a_new_file() -> None:
    """Issue 21 item 5: a 35 s blackout; PX4 streams on; never STOP, keep the log going."""
    session = streaming_session(data_timeout=30.0)
    before = feed(session, PACKETS[:100], start=0.1)
    last = 0.1 + 99 * 0.001
    ended = run_timers(session, last + 30.0)
    assert of_type(ended, LogEnded) == [LogEnded(LogEndReason.DATA_TIMEOUT, complete=False)]
    assert of_type(ended, SendCommand) == [START]
    # The link is back at 35 s: PX4 answers that it still streams (the log of before).
    rejected = session.receive(ack(MAV_CMD_LOGGING_START, MavResult.TEMPORARILY_REJECTED), 35.0)
    assert rejected == []
    assert of_type(run_timers(session, 36.0), SendCommand) == [
        msgspec.structs.replace(START, confirmation=1)
    ]
    outputs = feed(session, PACKETS[140:], start=36.05)
    assert of_type(outputs, SendCommand) == []  # never a STOP
    assert outputs[0] == LogStarted(123, continued=True)
    assert state(session) is SessionState.STREAMING
    head = ULOG[: definitions_end(ULOG)]  # header, definitions and the subscriptions
    continued = written(outputs)
    assert continued.startswith(head)
    dropout = continued[len(head) : len(head) + 5]
    assert dropout[:3] == b"\x02\x00O"
    assert int.from_bytes(dropout[3:], "little") == pytest.approx(35_950, abs=100)
    rest = continued[len(head) + 5 :]
    assert ULOG.endswith(rest)  # then the log as PX4 sent it, from its next message on
    assert len(ULOG) - len(rest) in {m.start for m in messages(ULOG)}
    assert written(before) + rest != ULOG  # what the outage took is marked, not invented
    assert session.counters.logs_started == 1  # one log, in two files


def test_rejected_while_the_ended_log_may_come_back_stops_only_after_the_data_timeout() -> None:
    session = streaming_session(data_timeout=10.0)
    feed(session, PACKETS[:100], start=0.1)
    run_timers(session, 10.2)
    outputs: list[SessionOutput] = []
    now = 10.5
    while now < 20.4:
        outputs += session.receive(ack(MAV_CMD_LOGGING_START, MavResult.TEMPORARILY_REJECTED), now)
        outputs += run_timers(session, now + 1.0)
        now += 1.0
    assert STOP not in of_type(outputs, SendCommand)  # PX4 says it streams: wait for its data
    outputs = session.receive(ack(MAV_CMD_LOGGING_START, MavResult.TEMPORARILY_REJECTED), 20.6)
    assert outputs == [STOP]  # none of it came for data_timeout: that stream is not ours
    assert state(session) is SessionState.RESTARTING
    # The end of the log that PX4 sends after that STOP (ACKED) still goes on with the log.
    end = msgspec.structs.replace(PACKETS[-1], needs_ack=True)
    tail = session.receive(end, 20.7)
    assert tail[:2] == [SendAck(end.sequence, 1, 1), LogStarted(123, continued=True)]
    assert session.receive(ack(MAV_CMD_LOGGING_STOP, MavResult.ACCEPTED), 20.8) == [START]
    again = session.receive(ack(MAV_CMD_LOGGING_START, MavResult.TEMPORARILY_REJECTED), 20.9)
    (rejected,) = of_type(again, StreamRejected)
    assert "another client owns the stream" in rejected.reason


def test_data_after_an_outage_past_half_the_sequence_circle_is_a_gap_not_stale() -> None:
    session = streaming_session(outage_after=2.0, data_timeout=60.0)
    before = feed(session, PACKETS[:100], start=0.1)
    run_timers(session, 3.0)
    assert state(session) is SessionState.OUTAGE
    # 20 s away at the USB ceiling: 42,000 packets went by, past half the uint16 circle.
    later = [
        msgspec.structs.replace(p, sequence=(p.sequence + 42_000) & 0xFFFF) for p in PACKETS[100:]
    ]
    outputs = feed(session, later, start=20.0)
    assert session.counters.stale == 0
    assert of_type(outputs, PacketsLost) == [PacketsLost(later[0].sequence, 42_000)]
    assert written(before + outputs).endswith(ULOG[-1000:])
    assert state(session) is SessionState.STREAMING


def test_link_back_without_data_probes_with_start_and_keeps_a_rejected_log() -> None:
    session = streaming_session(outage_after=2.0, probe_delay=1.0)
    feed(session, PACKETS[:60], start=0.1)
    run_timers(session, 3.0)
    assert state(session) is SessionState.OUTAGE
    assert session.receive(heartbeat(2, 1), 5.0) == []  # not our autopilot
    assert session.receive(heartbeat(), 5.0) == []
    assert of_type(run_timers(session, 5.99), SendCommand) == []
    assert of_type(run_timers(session, 6.0), SendCommand) == [START]
    # PX4 still streams this log (its packets are just not reaching us yet): keep it.
    assert session.receive(ack(MAV_CMD_LOGGING_START, MavResult.TEMPORARILY_REJECTED), 6.1) == []
    assert state(session) is SessionState.OUTAGE
    assert of_type(run_timers(session, 9.0), SendCommand) == []  # one probe per outage
    outputs = feed(session, PACKETS[60:], start=9.5)
    assert of_type(outputs, LogEnded) == []
    assert state(session) is SessionState.STREAMING


def test_probe_accepted_means_a_new_log_the_old_one_ends() -> None:
    session = streaming_session(outage_after=2.0, probe_delay=1.0)
    feed(session, PACKETS[:60], start=0.1)
    run_timers(session, 3.0)
    assert session.link_restored(4.0) == [SendHeartbeat()]
    assert of_type(run_timers(session, 5.0), SendCommand) == [START]
    outputs = session.receive(ack(MAV_CMD_LOGGING_START, MavResult.ACCEPTED), 5.1)
    assert outputs == [LogEnded(LogEndReason.STREAM_GONE, complete=False)]
    assert state(session) is SessionState.STREAMING
    outputs = feed(session, PACKETS, start=5.2)
    assert outputs[1] == LogStarted(123)
    assert session.counters.logs_started == 2


def test_start_accepted_but_no_data_asks_again_without_a_log_end() -> None:
    session = streaming_session(data_timeout=2.0)
    outputs = run_timers(session, 2.0)
    assert of_type(outputs, LogEnded) == []
    assert of_type(outputs, SendCommand) == [START]
    assert state(session) is SessionState.STARTING


def test_another_clients_stop_ends_our_log_and_restarts_streaming() -> None:
    session = streaming_session()
    feed(session, PACKETS[:50], start=0.1)
    foreign = ack(MAV_CMD_LOGGING_STOP, MavResult.ACCEPTED, target=(255, 190))
    outputs = session.receive(foreign, 1.0)
    assert outputs == [LogEnded(LogEndReason.STOPPED_BY_OTHER_CLIENT, complete=True), START]
    assert state(session) is SessionState.STARTING
    in_progress = ack(MAV_CMD_LOGGING_STOP, MavResult.IN_PROGRESS, target=(255, 190))
    assert session.receive(in_progress, 1.1) == []


def test_one_log_only_another_clients_stop_ends_the_session_without_a_new_start() -> None:
    session = streaming_session(restart_after_foreign_stop=False)
    feed(session, PACKETS[:50], start=0.1)
    foreign = ack(MAV_CMD_LOGGING_STOP, MavResult.ACCEPTED, target=(255, 190))
    outputs = session.receive(foreign, 1.0)
    assert outputs == [LogEnded(LogEndReason.STOPPED_BY_OTHER_CLIENT, complete=True), StreamEnded()]
    assert state(session) is SessionState.ENDED
    assert session.stop(1.1) == []  # nothing of ours runs: no STOP to wait for


def test_restart_stop_in_progress_means_wait_not_resend_every_second() -> None:
    session = LoggingSession(target_system=1, stop_timeout=5.0)
    session.start(0.0)
    session.receive(ack(MAV_CMD_LOGGING_START, MavResult.TEMPORARILY_REJECTED), 0.1)
    session.receive(ack(MAV_CMD_LOGGING_STOP, MavResult.IN_PROGRESS), 0.9)
    for now in (1.1, 1.9, 2.9, 3.9, 4.9, 5.8):
        assert not [o for o in session.handle_timer(now) if isinstance(o, SendCommand)]
    # No ACCEPTED within stop_timeout of IN_PROGRESS: the STOP is sent once more.
    assert session.handle_timer(5.9) == [msgspec.structs.replace(STOP, confirmation=1)]


def test_late_timer_sends_one_heartbeat_not_a_burst() -> None:
    session = LoggingSession()
    session.start(0.0)
    assert session.handle_timer(5.5) == [SendHeartbeat()]
    assert session.next_deadline() == 6.5
    assert len(of_type(run_timers(session, 16.5), SendHeartbeat)) == 11


def test_stray_stop_acks_change_nothing_while_streaming() -> None:
    session = streaming_session()
    assert session.receive(ack(MAV_CMD_LOGGING_STOP, MavResult.ACCEPTED), 0.1) == []
    assert state(session) is SessionState.STREAMING


# --- misuse -----------------------------------------------------------------------------------


def test_calls_before_start_and_twice_are_errors() -> None:
    session = LoggingSession(target_system=1)
    assert session.next_deadline() is None
    assert session.handle_timer(1.0) == []
    with pytest.raises(RuntimeError, match="before start"):
        session.receive(PACKETS[0], 0.0)
    with pytest.raises(RuntimeError, match="before start"):
        session.stop(0.0)
    session.start(0.0)
    with pytest.raises(RuntimeError, match="twice"):
        session.start(0.0)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"component_id": 0}, "component_id must be in 1..255, not 0"),
        ({"system_id": 256}, "system_id must be in 1..255, not 256"),
        ({"target_system": 0}, "target_system must be in 1..255, not 0"),
        ({"data_timeout": 0.0}, "data_timeout must be positive, not 0.0"),
        ({"start_grace": -1.0}, "start_grace must not be negative, not -1.0"),
    ],
)
def test_bad_settings_are_refused(settings: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        LoggingSession(**settings)  # type: ignore[arg-type]


def test_old_stream_data_while_starting_is_acked_and_dropped_quietly() -> None:
    session = LoggingSession(target_system=1)
    session.start(0.0)
    leftover = msgspec.structs.replace(PACKETS[40], needs_ack=True)
    assert session.receive(leftover, 0.1) == [SendAck(40, 1, 1)]
    assert session.receive(PACKETS[41], 2.0) == []
    assert state(session) is SessionState.STARTING
    assert session.counters.ignored == 2


def test_heartbeat_after_the_session_ended_starts_nothing() -> None:
    session = LoggingSession()
    session.start(0.0)
    session.stop(0.1)
    assert session.receive(heartbeat(), 0.2) == []
    assert state(session) is SessionState.ENDED


# --- invariants under any sequence of events ---------------------------------------------------

SMALL = packetize(make_ulog(60, seed=5, timestamp_us=55))
SECOND = packetize(make_ulog(60, seed=6, timestamp_us=66))
RESULTS = st.sampled_from([*MavResult, 42])
EVENTS = st.one_of(
    st.tuples(st.just("packet"), st.integers(0, len(SMALL) - 1), st.booleans()),
    st.tuples(st.just("second"), st.integers(0, len(SECOND) - 1), st.booleans()),
    st.tuples(
        st.just("ack"),
        st.sampled_from([MAV_CMD_LOGGING_START, MAV_CMD_LOGGING_STOP]),
        RESULTS,
        st.booleans(),
    ),
    st.tuples(st.just("heartbeat"), st.sampled_from([1, 2])),
    st.tuples(st.just("wait"), st.floats(0.0, 4.0)),
    st.tuples(st.just("stop")),
)


@settings(max_examples=300, deadline=None)
@given(events=st.lists(EVENTS, max_size=60), configured=st.booleans())
def test_session_invariants_hold_for_any_event_sequence(
    *, events: list[tuple[object, ...]], configured: bool
) -> None:
    session = LoggingSession(target_system=1 if configured else None)
    now = 0.0
    in_log = False
    ended = False
    first_write = False
    history = session.start(now)
    for event in events:
        now += 0.001
        acked_packet: LoggingPacket | None = None
        match event:
            case ("packet" | "second" as which, int(index), bool(needs_ack)):
                packet = (SMALL if which == "packet" else SECOND)[index]
                acked_packet = msgspec.structs.replace(packet, needs_ack=needs_ack)
                outputs = session.receive(acked_packet, now)
            case ("ack", int(command), int(result), bool(ours)):
                target = ME if ours else (255, 190)
                outputs = session.receive(ack(command, result, target=target), now)
            case ("heartbeat", int(system_id)):
                outputs = session.receive(heartbeat(system_id), now)
            case ("wait", float(seconds)):
                outputs = []
                until = now + seconds
                while (deadline := session.next_deadline()) is not None and deadline <= until:
                    step = session.handle_timer(deadline)
                    assert len(of_type(step, SendHeartbeat)) <= 1
                    assert len(of_type(step, SendCommand)) <= 1
                    after = session.next_deadline()
                    assert after is None or after > deadline  # no busy loop in the shell
                    outputs += step
                now = until
            case _:
                outputs = session.stop(now)
        if acked_packet is not None and acked_packet.needs_ack and session.autopilot_system == 1:
            assert outputs[0] == SendAck(acked_packet.sequence, 1, 1)
        if ended:
            assert all(isinstance(o, SendAck) for o in outputs)
        for output in outputs:
            match output:
                case LogStarted():
                    assert not in_log
                    in_log, first_write = True, True
                case LogEnded():
                    assert in_log
                    in_log = False
                case WriteUlog(data):
                    assert in_log
                    assert not first_write or data.startswith(b"ULog\x01\x12\x35")
                    first_write = False
                case StreamEnded():
                    assert not in_log
                    ended = True
                case _:
                    pass
        history += outputs
    assert (session.state is SessionState.ENDED) == ended
