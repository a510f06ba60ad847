"""Fault injection: each fault does what it says, seeded and repeatable."""

from __future__ import annotations

import itertools
import struct

import pytest

from ulogstream.errors import ConfigError
from ulogstream.mavlink_codec import MavlinkCodec
from ulogstream.sim.faults import MAX_BACKLOG, DelayLine, Draw, FaultConfig, FaultRng, corrupt_frame
from ulogstream.sim.vehicle import (
    LinkCut,
    LogStreamEnded,
    LogStreamStarted,
    SendCommandAck,
    SendGarbage,
    SendLoggingData,
    SendVehicleHeartbeat,
    SimVehicle,
    VehicleConfig,
    VehicleOutput,
    delivered_packet,
)
from ulogstream.stream.packets import (
    MAV_CMD_LOGGING_START,
    MAV_CMD_LOGGING_STOP,
    CommandLong,
    LoggingAck,
    LoggingPacket,
)
from ulogstream.ulog.spec import MAGIC
from ulogstream.ulog.writer import ULogWriter

FAST = VehicleConfig(link_rate=None, speed=None, stop_accept_delay=0.0)
GCS = (255, 190)


def make_log(samples: int = 600) -> bytes:
    writer = ULogWriter(timestamp_us=1)
    writer.info("char", "sys_name", "PX4")
    writer.format("sensor:uint64_t timestamp;uint8_t[120] values;")
    for index in range(40):
        writer.parameter(f"PARAM_{index}", index)
    topic = writer.add_logged_message("sensor")
    for sample in range(samples):
        writer.data(topic, struct.pack("<Q", 1000 + sample * 1000) + bytes([sample % 251]) * 120)
    writer.info_multiple("char", "perf_counter_postflight", "logger: 1 event")
    return writer.getvalue()


LOG = make_log()


class Run:
    """Drive a vehicle with a fake clock; the receiver acks every intact acked frame at once."""

    def __init__(
        self, faults: FaultConfig, *, config: VehicleConfig = FAST, log: bytes = LOG
    ) -> None:
        self.vehicle = SimVehicle(log, now=0.0, config=config, faults=faults)
        self.now = 0.0
        self.log: list[tuple[float, VehicleOutput]] = []
        self.feed(self.vehicle.receive(self._command(MAV_CMD_LOGGING_START), 0.0))

    @staticmethod
    def _command(command: int) -> CommandLong:
        return CommandLong(command, 0.0, GCS[0], GCS[1], 1, 1)

    def feed(self, outputs: list[VehicleOutput]) -> None:
        pending = list(outputs)
        while pending:
            output = pending.pop(0)
            self.log.append((self.now, output))
            if not isinstance(output, SendLoggingData) or output.corrupt is not None:
                continue
            if output.packet.needs_ack:
                sequence = output.packet.sequence
                pending.extend(self.vehicle.receive(LoggingAck(sequence, *GCS, 1, 1), self.now))

    def run_until(self, end: float) -> None:
        while (deadline := self.vehicle.next_deadline()) is not None and deadline <= end:
            self.now = max(self.now, deadline)
            self.feed(self.vehicle.handle_timer(self.now))
        self.now = end

    def finish(self) -> Run:
        self.run_until(5.0)
        self.feed(self.vehicle.receive(self._command(MAV_CMD_LOGGING_STOP), self.now))
        self.run_until(self.now + 5.0)
        return self

    def frames(self) -> list[SendLoggingData]:
        return [o for _, o in self.log if isinstance(o, SendLoggingData)]

    def intact(self) -> list[LoggingPacket]:
        return [o.packet for o in self.frames() if o.corrupt is None]

    def unique(self) -> dict[int, LoggingPacket]:
        return {p.sequence: p for p in self.intact()}

    def published(self) -> int:
        return self.vehicle.stats.packets_published


def clean_packets() -> dict[int, LoggingPacket]:
    return Run(FaultConfig()).finish().unique()


# -- configuration and RNG -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"loss": 1.5}, "loss must be between 0 and 1"),
        ({"corrupt": -0.1}, "corrupt must be between 0 and 1"),
        ({"duplicate": float("nan")}, "duplicate"),
        ({"reboot_at": -1}, "reboot_at must be a packet index"),
        ({"cut_at": 3, "cut_seconds": -1.0}, "cut_seconds must be >= 0"),
        ({"sitl_gap": -2}, "sitl_gap"),
        ({"delay": -0.01}, "delay must be >= 0 seconds"),
        ({"jitter": float("inf")}, "jitter must be >= 0 seconds"),
        ({"bandwidth": 0.0}, "bandwidth must be a positive number of B/s"),
    ],
)
def test_bad_fault_settings_are_config_errors(kwargs: dict[str, float], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        FaultConfig(**kwargs)  # type: ignore[arg-type]


def test_rng_is_keyed_not_sequential() -> None:
    rng = FaultRng(7)
    first = [rng.uniform(Draw.LOSS, 0, seq, 1) for seq in range(50)]
    again = FaultRng(7)
    assert [again.uniform(Draw.LOSS, 0, seq, 1) for seq in reversed(range(50))] == first[::-1]
    assert first != [FaultRng(8).uniform(Draw.LOSS, 0, seq, 1) for seq in range(50)]
    assert first != [rng.uniform(Draw.DUPLICATE, 0, seq, 1) for seq in range(50)]
    assert all(0.0 <= value < 1.0 for value in first)
    assert 0.3 < sum(first) / len(first) < 0.7
    assert not rng.chance(0.0, Draw.LOSS, 1)
    assert rng.chance(1.0, Draw.LOSS, 1)


def test_garbage_never_holds_a_mavlink_start_byte() -> None:
    rng = FaultRng(3)
    bursts = [rng.garbage(0, seq, 1) for seq in range(500)]
    assert all(1 <= len(burst) <= 32 for burst in bursts)
    assert not any(0xFD in burst or 0xFE in burst for burst in bursts)
    assert rng.garbage(0, 5, 1) == FaultRng(3).garbage(0, 5, 1)


def test_corrupted_frame_fails_its_crc_and_the_next_frame_survives() -> None:
    vehicle = MavlinkCodec(system_id=1, component_id=1)
    receiver = MavlinkCodec(system_id=255, component_id=190)
    first = vehicle.encode_logging_data(5, 255, 190, 0, MAGIC + bytes(100), acked=False)
    second = vehicle.encode_logging_data(6, 255, 190, 255, bytes(range(200)), acked=True)
    for position in (0, 3, 200, 10**12):
        damaged = corrupt_frame(first, position)
        assert damaged[:10] == first[:10]
        assert sum(a != b for a, b in zip(damaged, first, strict=True)) == 1
        decoded = receiver.decode(damaged + second)
        assert [m.sequence for m in decoded if isinstance(m, LoggingPacket)] == [6]
    assert receiver.bad_frames >= 4  # rescanning may find false starts inside the damage
    with pytest.raises(ValueError, match="longer than 10 bytes"):
        corrupt_frame(b"\xfd\x00", 1)


# -- link faults -----------------------------------------------------------------------------


def test_loss_is_seeded_and_acked_packets_are_recovered_by_resends() -> None:
    clean = clean_packets()
    run = Run(FaultConfig(seed=1, loss=0.2)).finish()
    again = Run(FaultConfig(seed=1, loss=0.2)).finish()
    other = Run(FaultConfig(seed=2, loss=0.2)).finish()
    lost = set(clean) - set(run.unique())
    assert lost == set(clean) - set(again.unique())
    assert lost != set(clean) - set(other.unique())
    assert 0.1 * len(clean) < len(lost) < 0.3 * len(clean)
    assert all(not clean[seq].needs_ack for seq in lost)
    assert run.vehicle.stats.resends > 0
    assert all(run.unique()[seq] == packet for seq, packet in clean.items() if seq not in lost)


def test_duplicates_repeat_a_frame_right_away() -> None:
    clean = clean_packets()
    run = Run(FaultConfig(seed=4, duplicate=0.1)).finish()
    sequences = [p.sequence for p in run.intact()]
    repeats = [a for a, b in itertools.pairwise(sequences) if a == b]
    assert len(repeats) >= run.vehicle.stats.duplicated > 0
    assert run.unique() == clean


def test_reorder_swaps_a_frame_with_a_later_one() -> None:
    clean = clean_packets()
    run = Run(FaultConfig(seed=5, reorder=0.05)).finish()
    sequences = [p.sequence for p in run.intact() if not p.needs_ack]
    backwards = [(a, b) for a, b in itertools.pairwise(sequences) if b < a]
    # A held acked frame is resent before it is released, so it never shows as backwards.
    assert 0 < len(backwards) <= run.vehicle.stats.reordered
    assert all(a == b + 1 for a, b in backwards)
    assert run.unique() == clean


def test_lost_acks_cause_resends_but_no_loss() -> None:
    clean = clean_packets()
    run = Run(FaultConfig(seed=6, lost_acks=0.3)).finish()
    stats = run.vehicle.stats
    assert stats.acks_lost > 0
    assert stats.resends == stats.acks_lost
    assert run.unique() == clean


def test_corruption_marks_frames_that_do_not_count_as_delivered() -> None:
    clean = clean_packets()
    run = Run(FaultConfig(seed=8, corrupt=0.1)).finish()
    corrupted = [o for o in run.frames() if o.corrupt is not None]
    assert len(corrupted) == run.vehicle.stats.corrupted > 0
    assert all(delivered_packet(o, 0.0) is None for o in corrupted)
    missing = set(clean) - set(run.unique())
    assert missing <= {o.packet.sequence for o in corrupted}
    assert all(not clean[seq].needs_ack for seq in missing)


def test_garbage_goes_out_before_a_frame() -> None:
    run = Run(FaultConfig(seed=9, garbage=0.1)).finish()
    outputs = [o for _, o in run.log]
    garbage = [i for i, o in enumerate(outputs) if isinstance(o, SendGarbage)]
    assert len(garbage) == run.vehicle.stats.garbage > 0
    assert all(isinstance(outputs[i + 1], SendLoggingData) for i in garbage)
    assert run.unique() == clean_packets()


def test_link_cut_silences_both_directions_then_resumes() -> None:
    config = VehicleConfig(link_rate=100_000, speed=None, stop_accept_delay=0.0)
    run = Run(FaultConfig(cut_at=60, cut_seconds=0.5), config=config)
    run.run_until(3.0)
    times = [t for t, o in run.log if isinstance(o, SendLoggingData | SendVehicleHeartbeat)]
    cut_start = max(t for t in times if t <= times[60])
    silent = [t for t in times if cut_start < t < cut_start + 0.5]
    assert not silent
    assert any(t >= cut_start + 0.5 for t in times)
    assert run.vehicle.stats.cut_drops > 0
    # An ack arriving during a cut is lost too.
    vehicle = SimVehicle(LOG, now=0.0, config=FAST, faults=FaultConfig(cut_at=0, cut_seconds=1.0))
    outputs = vehicle.receive(CommandLong(MAV_CMD_LOGGING_START, 0.0, *GCS, 1, 1), 0.0)
    assert not any(isinstance(o, SendLoggingData) for o in outputs)
    assert vehicle.receive(LoggingAck(0, *GCS, 1, 1), 0.5) == []
    assert vehicle.stats.acks_lost == 1


def test_long_cut_in_the_acked_phase_tears_the_stream_down() -> None:
    run = Run(FaultConfig(cut_at=2, cut_seconds=3.0))
    run.run_until(4.0)
    assert LogStreamEnded(0, "ack-timeout") in [o for _, o in run.log]


# -- vehicle faults --------------------------------------------------------------------------


def test_reboot_restarts_at_sequence_0_with_the_header_as_a_new_log() -> None:
    run = Run(FaultConfig(reboot_at=100)).finish()
    events = [o for _, o in run.log if isinstance(o, LogStreamStarted | LogStreamEnded)]
    assert events[:3] == [
        LogStreamStarted(0, *GCS),
        LogStreamEnded(0, "reboot"),
        LogStreamStarted(1, *GCS),
    ]
    frames = run.frames()
    first_log = [o.packet.sequence for o in frames if o.log_index == 0]
    assert first_log == list(range(100))
    second = [o.packet for o in frames if o.log_index == 1]
    assert second[0].sequence == 0
    assert second[0].data.startswith(MAGIC)
    assert b"".join(p.data for p in second) == LOG
    acks = [o for _, o in run.log if isinstance(o, SendCommandAck)]
    assert len([a for a in acks if a.command == MAV_CMD_LOGGING_START]) == 1


def test_sitl_gap_loses_packets_right_after_the_definitions() -> None:
    clean = clean_packets()
    run = Run(FaultConfig(sitl_gap=5)).finish()
    sequences = sorted(run.unique())
    first_unacked = min(seq for seq, p in clean.items() if not p.needs_ack)
    assert set(clean) - set(sequences) == set(range(first_unacked, first_unacked + 5))
    assert run.vehicle.stats.sitl_gap_drops == 5


# -- the wire: latency, jitter, rate ------------------------------------------------------------


def test_delay_line_delays_in_order_without_jitter() -> None:
    line: DelayLine[int] = DelayLine(FaultConfig(delay=0.04), direction=0)
    for item in range(5):
        assert line.push(item, 267, now=item * 0.001)
    assert line.next_due() == pytest.approx(0.04)
    assert line.pop_due(0.0399) == []
    assert line.pop_due(0.0425) == [0, 1, 2]
    assert line.pop_due(1.0) == [3, 4]
    assert line.next_due() is None


def test_jitter_reorders_within_delay_plus_minus_jitter() -> None:
    faults = FaultConfig(seed=5, delay=0.04, jitter=0.015)
    line: DelayLine[int] = DelayLine(faults, direction=0)
    due: dict[int, float] = {}
    for item in range(2000):
        line.push(item, 267, now=item * 0.0005)
        due[item] = item * 0.0005
    arrived: list[tuple[int, float]] = []
    now = 0.0
    while (next_due := line.next_due()) is not None:
        now = next_due
        arrived.extend((item, now) for item in line.pop_due(now))
    order = [item for item, _ in arrived]
    assert sorted(order) == list(range(2000))
    assert order != list(range(2000))  # frames overtook each other
    latencies = [when - due[item] for item, when in arrived]
    assert min(latencies) >= 0.025 - 1e-9
    assert max(latencies) <= 0.055 + 1e-9
    # The same seed draws the same latencies however the calls are timed.
    again: DelayLine[int] = DelayLine(faults, direction=0)
    for item in range(2000):
        again.push(item, 267, now=item * 0.0005)
    assert [again.pop_due(10.0)] == [order]


def test_bandwidth_queues_frames_behind_each_other_and_drops_a_full_backlog() -> None:
    line: DelayLine[int] = DelayLine(FaultConfig(delay=0.04, bandwidth=5700.0), direction=0)
    for item in range(3):
        line.push(item, 285, now=0.0)  # 50 ms each on the wire
    times = []
    while (next_due := line.next_due()) is not None:
        times.append(next_due)
        line.pop_due(next_due)
    assert times == pytest.approx([0.09, 0.14, 0.19])
    full: DelayLine[int] = DelayLine(FaultConfig(bandwidth=5700.0), direction=0)
    pushed = [full.push(item, 285, now=0.0) for item in range(int(MAX_BACKLOG / 0.05) + 5)]
    assert pushed.count(False) == full.backlog_drops > 0
    assert all(pushed[: int(MAX_BACKLOG / 0.05)])


def test_a_cut_tells_the_runner_how_long_the_link_is_down() -> None:
    run = Run(FaultConfig(cut_at=60, cut_seconds=0.5))
    run.run_until(3.0)
    assert [o for _, o in run.log if isinstance(o, LinkCut)] == [LinkCut(0.5)]
