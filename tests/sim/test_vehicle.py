"""The simulated PX4 as a pure model: values in, outputs out, a fake clock."""

from __future__ import annotations

import itertools
import struct
from typing import TYPE_CHECKING

import msgspec
import pytest

from ulogstream.errors import ULogFormatError
from ulogstream.sim.vehicle import (
    ACK_MAX_TRIES,
    ACK_TIMEOUT,
    QUEUE_DEPTH,
    DeliveredPacket,
    LogStreamEnded,
    LogStreamStarted,
    SendCommandAck,
    SendLoggingData,
    SendVehicleHeartbeat,
    SimVehicle,
    VehicleConfig,
    VehicleOutput,
    delivered_packet,
    split_log,
)
from ulogstream.stream.packets import (
    MAV_CMD_LOGGING_START,
    MAV_CMD_LOGGING_STOP,
    NO_MESSAGE_START,
    CommandLong,
    LoggingAck,
    MavResult,
)
from ulogstream.ulog.spec import MAGIC, MessageType
from ulogstream.ulog.writer import ULogWriter

if TYPE_CHECKING:
    from pathlib import Path

GCS = (255, 190)
RECEIVER = (42, 155)
FAST = VehicleConfig(link_rate=None, speed=None, stop_accept_delay=0.0)


def make_log(
    *,
    samples: int = 400,
    payload: int = 100,
    dt_us: int = 1000,
    late_add_at: int | None = 150,
    perf_tail: bool = True,
    params: int = 60,
) -> bytes:
    """A small PX4-like log: definitions, one topic sampled every ``dt_us``, a perf tail."""
    writer = ULogWriter(timestamp_us=1)
    writer.flag_bits()
    writer.info("char", "sys_name", "PX4")
    writer.format(f"sensor:uint64_t timestamp;uint8_t[{payload}] values;")
    for index in range(params):
        writer.parameter(f"PARAM_{index}", index)
    topic = writer.add_logged_message("sensor")
    second = None
    for sample in range(samples):
        if sample == late_add_at:
            second = writer.add_logged_message("sensor", multi_id=1)
        body = struct.pack("<Q", 1_000_000 + sample * dt_us) + bytes([sample % 256]) * payload
        writer.data(topic, body)
        if second is not None:
            writer.data(second, body)
        if sample % 100 == 0:
            writer.logging(ord("6"), 1_000_000 + sample * dt_us, f"sample {sample}")
    if perf_tail:
        writer.info_multiple("char", "perf_counter_postflight", "logger: 12 events")
        writer.info_multiple("char", "perf_counter_postflight", "sensors: 3 events")
    return writer.getvalue()


def start(source: tuple[int, int] = GCS, param1: float = 0.0) -> CommandLong:
    return CommandLong(MAV_CMD_LOGGING_START, param1, source[0], source[1], 1, 1)


def stop(source: tuple[int, int] = GCS) -> CommandLong:
    return CommandLong(MAV_CMD_LOGGING_STOP, 0.0, source[0], source[1], 1, 1)


def ack(sequence: int, source: tuple[int, int] = GCS) -> LoggingAck:
    return LoggingAck(sequence, source[0], source[1], 1, 1)


class Harness(msgspec.Struct):
    """A fake-clock receiver that acks every acked packet at once (unless told not to)."""

    vehicle: SimVehicle
    now: float = 0.0
    ack: bool = True
    log: list[tuple[float, VehicleOutput]] = msgspec.field(default_factory=list)

    def feed(self, outputs: list[VehicleOutput]) -> None:
        pending = list(outputs)
        while pending:
            output = pending.pop(0)
            self.log.append((self.now, output))
            if not self.ack or not isinstance(output, SendLoggingData):
                continue
            if output.packet.needs_ack and output.corrupt is None:
                pending.extend(self.vehicle.receive(ack(output.packet.sequence), self.now))

    def send(self, message: CommandLong | LoggingAck) -> None:
        self.feed(self.vehicle.receive(message, self.now))

    def run_until(self, end: float) -> None:
        while True:
            deadline = self.vehicle.next_deadline()
            assert deadline is not None
            if deadline > end:
                self.now = end
                return
            self.now = max(self.now, deadline)
            self.feed(self.vehicle.handle_timer(self.now))

    def run_until_idle(self, limit: float = 600.0) -> None:
        """Run until the log is out and nothing but heartbeats is left."""
        vehicle = self.vehicle
        while self.now < limit:
            stream = vehicle._stream
            if stream is None or (
                vehicle._writer_done(stream) and not vehicle._queue and vehicle._awaiting is None
            ):
                return
            self.run_until(min(limit, self.now + 0.5))
        pytest.fail("the vehicle did not go idle")

    def packets(self) -> list[SendLoggingData]:
        return [out for _, out in self.log if isinstance(out, SendLoggingData)]

    def acks(self) -> list[SendCommandAck]:
        return [out for _, out in self.log if isinstance(out, SendCommandAck)]

    def events(self) -> list[VehicleOutput]:
        return [out for _, out in self.log if not isinstance(out, SendVehicleHeartbeat)]


def unique_data(packets: list[SendLoggingData]) -> bytes:
    seen: set[tuple[int, int]] = set()
    data = bytearray()
    for send in packets:
        key = (send.log_index, send.packet.sequence)
        if key not in seen and send.corrupt is None:
            seen.add(key)
            data += send.packet.data
    return bytes(data)


def message_starts(log: bytes) -> set[int]:
    starts = {0}
    offset = 16
    while offset < len(log):
        starts.add(offset)
        offset += 3 + struct.unpack_from("<H", log, offset)[0]
    return starts


def full_run(log: bytes, config: VehicleConfig = FAST) -> Harness:
    harness = Harness(SimVehicle(log, now=0.0, config=config))
    harness.send(start())
    harness.run_until_idle()
    harness.send(stop())
    harness.run_until(harness.now + 1.0)
    return harness


# -- the log --------------------------------------------------------------------------------


def test_split_log_keeps_every_byte_and_finds_sections() -> None:
    log = make_log()
    split = split_log(log)
    assert b"".join(m.data for m in split.messages) == log
    assert split.size == len(log)
    definitions = split.messages[1 : split.definitions_end]
    assert {m.msg_type for m in definitions} <= {ord(c) for c in "BFIMPQ"}
    assert split.messages[split.definitions_end].msg_type == MessageType.ADD_LOGGED_MSG
    tail = split.messages[split.tail_start :]
    assert [m.msg_type for m in tail] == [MessageType.INFO_MULTIPLE] * 2
    assert all(m.reliable for m in split.messages[: split.definitions_end])
    data = [m for m in split.messages if m.msg_type == MessageType.DATA]
    assert not any(m.reliable for m in data)
    assert data[-1].due == pytest.approx(0.399)


def test_split_log_rejects_a_file_without_magic() -> None:
    with pytest.raises(ULogFormatError, match="ULog magic") as info:
        split_log(b"not a ulog file at all")
    assert info.value.offset == 0


def test_split_log_synthesizes_perf_only_when_the_log_has_none() -> None:
    bare = split_log(make_log(perf_tail=False), synthesize_perf=True)
    assert bare.messages[-1].msg_type == MessageType.INFO_MULTIPLE
    assert b"perf_counter_postflight" in bare.messages[-1].data
    assert bare.tail_start == len(bare.messages) - 1
    tailed = split_log(make_log(), synthesize_perf=True)
    assert len(tailed.messages) == len(split_log(make_log()).messages)


def test_truncated_last_message_is_still_sent() -> None:
    log = make_log()[:-7]
    harness = full_run(log)
    assert unique_data(harness.packets()) == log


# -- packetisation --------------------------------------------------------------------------


def test_lossless_stream_reproduces_the_file_exactly() -> None:
    log = make_log()
    harness = full_run(log)
    packets = harness.packets()
    assert [p.packet.sequence for p in packets] == list(range(len(packets)))
    assert b"".join(p.packet.data for p in packets) == log
    first = packets[0].packet
    assert first.first_message_offset == 0
    assert first.data.startswith(MAGIC)
    assert first.needs_ack
    assert (first.target_system, first.target_component) == GCS


def test_first_message_offset_points_at_the_first_message_starting_in_the_packet() -> None:
    log = make_log()
    starts = message_starts(log)
    position = 0
    for send in full_run(log).packets():
        packet = send.packet
        inside = sorted(s - position for s in starts if position <= s < position + len(packet.data))
        expected = inside[0] if inside else NO_MESSAGE_START
        assert packet.first_message_offset == expected, packet.sequence
        position += len(packet.data)


def test_unacked_packets_are_full_and_definitions_are_acked() -> None:
    log = make_log()
    split = split_log(log)
    definitions_size = sum(len(m.data) for m in split.messages[: split.definitions_end])
    packets = [p.packet for p in full_run(log).packets()]
    assert all(len(p.data) == 249 for p in packets if not p.needs_ack)
    sent = 0
    for packet in packets:
        if sent < definitions_size:
            assert packet.needs_ack
        sent += len(packet.data)


def test_late_add_goes_acked_and_can_begin_with_best_effort_bytes() -> None:
    log = make_log(late_add_at=150)
    packets = [p.packet for p in full_run(log).packets()]
    first_unacked = next(i for i, p in enumerate(packets) if not p.needs_ack)
    later_acked = [p for p in packets[first_unacked:] if p.needs_ack]
    assert later_acked, "the late 'A' must travel acked"
    # Switching to acked does not flush: the acked packet starts with the unacked bytes.
    add = later_acked[0]
    assert add.first_message_offset not in {0, NO_MESSAGE_START}
    assert add.data[add.first_message_offset + 2] == MessageType.ADD_LOGGED_MSG
    # Leaving acked mode flushes a partial packet.
    assert len(add.data) < 249


# -- stop-and-wait --------------------------------------------------------------------------


def test_acked_packets_are_stop_and_wait_and_resent_every_50_ms() -> None:
    harness = Harness(SimVehicle(make_log(), now=0.0, config=FAST), ack=False)
    harness.send(start())
    packets = harness.packets()
    assert [p.packet.sequence for p in packets] == [0]
    harness.run_until(ACK_TIMEOUT - 0.001)
    assert len(harness.packets()) == 1
    harness.run_until(ACK_TIMEOUT)
    resent = harness.packets()
    assert len(resent) == 2
    assert resent[1].packet == resent[0].packet
    harness.send(ack(7))  # wrong sequence: ignored
    harness.run_until(ACK_TIMEOUT + 0.01)
    assert len(harness.packets()) == 2
    harness.ack = True
    harness.send(ack(0))
    assert [p.packet.sequence for p in harness.packets()][2] == 1


def test_fifty_tries_then_the_stream_is_torn_down() -> None:
    vehicle = SimVehicle(make_log(), now=0.0, config=FAST)
    harness = Harness(vehicle, ack=False)
    harness.send(start())
    harness.run_until(10.0)
    packets = harness.packets()
    assert len(packets) == ACK_MAX_TRIES
    assert {p.packet.sequence for p in packets} == {0}
    assert packets[-1] is not None
    ended = [e for e in harness.events() if isinstance(e, LogStreamEnded)]
    assert ended == [LogStreamEnded(0, "ack-timeout")]
    teardown_time = next(t for t, o in harness.log if isinstance(o, LogStreamEnded))
    assert teardown_time == pytest.approx(ACK_TIMEOUT * ACK_MAX_TRIES)
    assert vehicle.stats.ack_timeouts == 1
    # The vehicle is free again: the next START is a new log from sequence 0.
    harness.ack = True
    harness.send(start())
    assert harness.acks()[-1].result is MavResult.ACCEPTED
    assert vehicle.log_index == 1
    assert harness.packets()[-1].packet.sequence > 0
    assert harness.packets()[len(packets)].packet.sequence == 0


# -- budget and queue ------------------------------------------------------------------------


def test_budget_and_16_deep_queue_make_sequence_gaps() -> None:
    # 250 byte samples every 0.1 ms for 1 s: ~2.6 MB/s of log against 27 packets per 100 ms.
    log = make_log(samples=10_000, payload=240, dt_us=100, late_add_at=None)
    config = VehicleConfig(link_rate=100_000, speed=1.0, stop_accept_delay=0.0)
    vehicle = SimVehicle(log, now=0.0, config=config)
    harness = Harness(vehicle)
    harness.send(start())
    harness.run_until(1.0)
    unacked = [(t, p.packet) for t, p in harness.log if isinstance(p, SendLoggingData)]
    data_phase = [(t, p) for t, p in unacked if not p.needs_ack]
    assert vehicle.stats.queue_drops > 0
    sequences = [p.sequence for _, p in unacked]
    gaps = [b - a for a, b in itertools.pairwise(sequences) if b - a > 1]
    assert gaps, "an overloaded link must show sequence gaps"
    assert sum(g - 1 for g in gaps) == vehicle.stats.queue_drops
    # At most 27 packets (70 % of 100000 B/s in 267-byte frames) per 100 ms window: PX4's
    # windows are fixed, so any sliding 100 ms sees at most two windows' worth.
    times = [t for t, _ in data_phase]
    for index, begin in enumerate(times):
        assert sum(1 for t in times[index:] if t < begin + 0.1 - 1e-9) <= 2 * 27
    assert 9 * 27 <= len(times) <= 11 * 27


def test_lossless_mode_paces_to_the_budget_without_gaps() -> None:
    log = make_log(samples=600, payload=240, dt_us=100, late_add_at=None)
    config = VehicleConfig(link_rate=100_000, speed=None, stop_accept_delay=0.0)
    harness = Harness(SimVehicle(log, now=0.0, config=config))
    harness.send(start())
    harness.run_until_idle()
    packets = harness.packets()
    assert [p.packet.sequence for p in packets] == list(range(len(packets)))
    assert harness.vehicle.stats.queue_drops == 0
    assert harness.now >= (len(packets) / 27 - 1) * 0.1
    assert len(harness.vehicle._queue) <= QUEUE_DEPTH


def test_usb_link_allows_about_2100_packets_per_second() -> None:
    assert VehicleConfig(link_rate=800_000).packets_per_window == 210
    assert VehicleConfig(link_rate=100_000).packets_per_window == 27
    assert VehicleConfig(link_rate=None).packets_per_window is None


def test_speed_replays_log_time() -> None:
    log = make_log(samples=400, dt_us=10_000, late_add_at=None)  # 4 s of log
    for speed, expected in ((1.0, 3.99), (4.0, 3.99 / 4)):
        config = VehicleConfig(link_rate=None, speed=speed, stop_accept_delay=0.0)
        harness = Harness(SimVehicle(log, now=0.0, config=config))
        harness.send(start())
        harness.run_until_idle()
        last = max(t for t, o in harness.log if isinstance(o, SendLoggingData))
        assert last == pytest.approx(expected, abs=0.05)


def test_sequence_wraps_after_65535() -> None:
    writer = ULogWriter()
    writer.format("big:uint64_t timestamp;uint8_t[60000] blob;")
    topic = writer.add_logged_message("big")
    for index in range(275):  # 275 * 60 KB = 16.5 MB: just over 65536 packets
        writer.data(topic, bytes([index % 256]) * 60008)
    log = writer.getvalue()
    vehicle = SimVehicle(log, now=0.0, config=VehicleConfig(link_rate=None, speed=None))
    sequences: list[int] = []
    outputs = vehicle.receive(start(), 0.0)
    now = 0.0
    while vehicle._stream is not None and not vehicle._writer_done(vehicle._stream):
        for output in outputs:
            if isinstance(output, SendLoggingData):
                sequences.append(output.packet.sequence)
                if output.packet.needs_ack:
                    outputs.extend(vehicle.receive(ack(output.packet.sequence), now))
        now += 0.001
        outputs = vehicle.handle_timer(now)
    assert len(sequences) > 65536
    wrap = sequences.index(65535)
    assert sequences[wrap + 1] == 0
    assert sequences == [i % 65536 for i in range(len(sequences))]


# -- commands --------------------------------------------------------------------------------


def test_start_is_acked_to_the_requester_then_packet_0_follows() -> None:
    harness = Harness(SimVehicle(make_log(), now=0.0, config=FAST))
    harness.send(start(RECEIVER))
    events = harness.events()
    assert events[0] == SendCommandAck(MAV_CMD_LOGGING_START, MavResult.ACCEPTED, *RECEIVER)
    assert events[1] == LogStreamStarted(0, *RECEIVER)
    assert isinstance(events[2], SendLoggingData)
    assert events[2].packet.target_system == RECEIVER[0]


def test_packet_0_may_overtake_the_ack() -> None:
    config = VehicleConfig(link_rate=None, speed=None, packet0_before_ack=True)
    harness = Harness(SimVehicle(make_log(), now=0.0, config=config), ack=False)
    harness.send(start())
    events = harness.events()
    assert isinstance(events[1], SendLoggingData)
    assert events[1].packet.sequence == 0
    assert events[2] == SendCommandAck(MAV_CMD_LOGGING_START, MavResult.ACCEPTED, *GCS)


@pytest.mark.parametrize(
    ("config", "command", "result"),
    [
        (FAST, start(param1=1.0), MavResult.UNSUPPORTED),
        (VehicleConfig(backend_off=True), start(), MavResult.TEMPORARILY_REJECTED),
        (VehicleConfig(link_rate=4800), start(), MavResult.DENIED),
        (FAST, CommandLong(400, 1.0, *GCS, 1, 1), MavResult.UNSUPPORTED),
        (FAST, stop(), MavResult.ACCEPTED),
    ],
)
def test_command_answers(config: VehicleConfig, command: CommandLong, result: MavResult) -> None:
    vehicle = SimVehicle(make_log(), now=0.0, config=config)
    outputs = vehicle.receive(command, 0.0)
    assert outputs == [SendCommandAck(command.command, result, *GCS)]
    assert not vehicle.streaming


def test_second_start_is_temporarily_rejected_while_streaming() -> None:
    harness = Harness(SimVehicle(make_log(), now=0.0, config=FAST))
    harness.send(start())
    harness.run_until_idle()
    harness.send(start(RECEIVER))
    assert harness.acks()[-1] == SendCommandAck(
        MAV_CMD_LOGGING_START, MavResult.TEMPORARILY_REJECTED, *RECEIVER
    )


def test_commands_for_another_vehicle_are_ignored() -> None:
    vehicle = SimVehicle(make_log(), now=0.0, config=FAST)
    assert vehicle.receive(CommandLong(MAV_CMD_LOGGING_START, 0.0, *GCS, 7, 1), 0.0) == []
    assert not vehicle.streaming


def test_stray_acks_go_to_another_system_first() -> None:
    config = VehicleConfig(link_rate=None, speed=None, stray_acks=True)
    vehicle = SimVehicle(make_log(), now=0.0, config=config)
    outputs = vehicle.receive(start(RECEIVER), 0.0)
    acks = [o for o in outputs if isinstance(o, SendCommandAck)]
    assert acks == [
        SendCommandAck(MAV_CMD_LOGGING_START, MavResult.DENIED, RECEIVER[0] + 1, RECEIVER[1]),
        SendCommandAck(MAV_CMD_LOGGING_START, MavResult.ACCEPTED, *RECEIVER),
    ]


def test_stop_handshake_in_progress_then_acked_tail_then_accepted() -> None:
    log = make_log()
    config = VehicleConfig(link_rate=None, speed=None, stop_accept_delay=0.19)
    harness = Harness(SimVehicle(log, now=0.0, config=config))
    harness.send(start())
    harness.run_until_idle()
    before = len(harness.log)
    stopped_at = harness.now
    harness.send(stop(RECEIVER))  # any client may stop the stream
    harness.run_until(stopped_at + 1.0)
    after = [(t, o) for t, o in harness.log[before:] if not isinstance(o, SendVehicleHeartbeat)]
    assert after[0][1] == SendCommandAck(MAV_CMD_LOGGING_STOP, MavResult.IN_PROGRESS, *RECEIVER)
    tail = [o for _, o in after if isinstance(o, SendLoggingData)]
    assert tail
    assert all(o.packet.needs_ack for o in tail)
    assert b"perf_counter_postflight" in b"".join(o.packet.data for o in tail)
    accepted_time, accepted = after[-1]
    assert accepted == SendCommandAck(MAV_CMD_LOGGING_STOP, MavResult.ACCEPTED, *RECEIVER)
    assert accepted_time == pytest.approx(stopped_at + 0.19)
    assert LogStreamEnded(0, "stopped") in [o for _, o in after]
    assert unique_data(harness.packets()) == log
    assert not harness.vehicle.streaming


def test_stop_accepted_at_once_then_the_acked_tail() -> None:
    log = make_log()
    config = VehicleConfig(link_rate=None, speed=None, accept_stop_at_once=True)
    harness = Harness(SimVehicle(log, now=0.0, config=config))
    harness.send(start())
    harness.run_until_idle()
    before = len(harness.log)
    harness.send(stop(RECEIVER))
    harness.run_until(harness.now + 1.0)
    after = [o for _, o in harness.log[before:] if not isinstance(o, SendVehicleHeartbeat)]
    assert after[:2] == [
        SendCommandAck(MAV_CMD_LOGGING_STOP, MavResult.IN_PROGRESS, *RECEIVER),
        SendCommandAck(MAV_CMD_LOGGING_STOP, MavResult.ACCEPTED, *RECEIVER),
    ]
    tail = [o for o in after if isinstance(o, SendLoggingData)]
    assert tail
    assert all(o.packet.needs_ack for o in tail)
    assert len([o for o in after if isinstance(o, SendCommandAck)]) == 2  # ACCEPTED only once
    assert LogStreamEnded(0, "stopped") in after
    assert unique_data(harness.packets()) == log


def test_commands_during_the_stop_sequence_wait_for_its_end() -> None:
    config = VehicleConfig(link_rate=None, speed=None, stop_accept_delay=0.19)
    harness = Harness(SimVehicle(make_log(), now=0.0, config=config))
    harness.send(start())
    harness.run_until_idle()
    harness.send(stop())
    harness.send(stop(RECEIVER))  # a retry, or another client
    harness.send(start(RECEIVER))
    harness.run_until(harness.now + 1.0)
    assert [(a.result, a.target_system) for a in harness.acks()[1:]] == [
        (MavResult.IN_PROGRESS, GCS[0]),
        (MavResult.ACCEPTED, GCS[0]),
        (MavResult.ACCEPTED, RECEIVER[0]),
        (MavResult.ACCEPTED, RECEIVER[0]),
    ]
    assert harness.vehicle.log_index == 1


def test_stop_mid_flight_skips_to_the_perf_tail() -> None:
    log = make_log(samples=2000, dt_us=10_000, late_add_at=None)
    config = VehicleConfig(link_rate=None, speed=1.0, stop_accept_delay=0.0)
    harness = Harness(SimVehicle(log, now=0.0, config=config))
    harness.send(start())
    harness.run_until(2.0)
    harness.send(stop())
    harness.run_until(3.0)
    data = unique_data(harness.packets())
    assert len(data) < len(log) / 2
    assert data.endswith(b"sensors: 3 events")
    assert harness.acks()[-1].result is MavResult.ACCEPTED


def test_stop_waits_for_the_tail_acks() -> None:
    harness = Harness(SimVehicle(make_log(), now=0.0, config=FAST))
    harness.send(start())
    harness.run_until_idle()
    harness.ack = False
    harness.send(stop())
    harness.run_until(harness.now + 1.0)
    assert harness.acks()[-1].result is MavResult.IN_PROGRESS
    harness.run_until(harness.now + 2.0)  # 2.5 s without acks: the logger gives up
    assert harness.acks()[-1].result is MavResult.ACCEPTED
    assert LogStreamEnded(0, "ack-timeout") in harness.events()


def test_commands_wait_while_the_logger_is_blocked_on_an_ack() -> None:
    harness = Harness(SimVehicle(make_log(), now=0.0, config=FAST), ack=False)
    harness.send(start())
    harness.send(stop())
    assert [a.result for a in harness.acks()] == [MavResult.ACCEPTED]
    harness.ack = True
    harness.send(ack(0))
    assert [a.result for a in harness.acks()][:2] == [MavResult.ACCEPTED, MavResult.IN_PROGRESS]


def test_a_new_start_after_stop_streams_the_log_again_from_sequence_0() -> None:
    log = make_log()
    harness = full_run(log)
    first = len(harness.packets())
    harness.send(start())
    harness.run_until_idle()
    again = harness.packets()[first:]
    assert again[0].packet.sequence == 0
    assert again[0].log_index == 1
    assert again[0].packet.data.startswith(MAGIC)


def test_heartbeat_every_second() -> None:
    harness = Harness(SimVehicle(make_log(), now=10.0, config=FAST), now=10.0)
    harness.run_until(13.5)
    beats = [t for t, o in harness.log if isinstance(o, SendVehicleHeartbeat)]
    assert beats == [10.0, 11.0, 12.0, 13.0]


def test_unacked_data_flows_on_to_a_dead_receiver() -> None:
    log = make_log(samples=1000, late_add_at=None)
    harness = Harness(SimVehicle(log, now=0.0, config=FAST))
    harness.send(start())
    harness.run_until(0.001)
    # The definitions are through; from here on nobody acks and nothing needs it.
    harness.ack = False
    harness.run_until_idle()
    assert harness.vehicle.streaming
    assert not any(isinstance(o, LogStreamEnded) for o in harness.events())


def test_delivered_packet_records_intact_frames_only() -> None:
    harness = full_run(make_log())
    send = harness.packets()[3]
    record = delivered_packet(send, 1.5)
    assert record == DeliveredPacket(
        0, 3, send.packet.first_message_offset, send.packet.data, send.packet.needs_ack, 1.5
    )
    assert record.to_json()["data"] == send.packet.data.hex()
    corrupt = SendLoggingData(send.packet, 0, corrupt=5)
    assert delivered_packet(corrupt, 1.5) is None


def test_bad_configuration_is_refused() -> None:
    with pytest.raises(ValueError, match="link_rate"):
        VehicleConfig(link_rate=0)
    with pytest.raises(ValueError, match="speed"):
        VehicleConfig(speed=-1.0)


@pytest.mark.slow
def test_every_sample_log_streams_back_byte_identical(shared_ulg_files: list[Path]) -> None:
    for path in shared_ulg_files:
        log = path.read_bytes()
        packets = full_run(log).packets()
        assert b"".join(p.packet.data for p in packets) == log, path.name
        assert [p.packet.sequence for p in packets] == list(range(len(packets))), path.name
