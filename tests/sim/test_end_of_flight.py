"""The simulated PX4 at the end of its flight (``stop_at_end``): a GCS's STOP on disarm.

PX4 answers that STOP IN_PROGRESS, sends the post-flight data and its last partial packet
(acked), then ACCEPTED, to the GCS: the receiver gets every byte, then sees another client's STOP.
"""

from __future__ import annotations

from collections import deque

import pytest

from ulogstream.sim.flightlog import generate_flight_log
from ulogstream.sim.vehicle import (
    GCS_COMPONENT_ID,
    GCS_SYSTEM_ID,
    LogStreamEnded,
    SendCommandAck,
    SendLoggingData,
    SimVehicle,
    VehicleConfig,
    VehicleOutput,
)
from ulogstream.stream.packets import (
    MAV_CMD_LOGGING_START,
    MAV_CMD_LOGGING_STOP,
    CommandLong,
    LoggingAck,
    MavResult,
)
from ulogstream.ulog.writer import ULogWriter

RECEIVER = {"system_id": 254, "component_id": 155, "target_system": 1, "target_component": 1}


def _flight() -> bytes:
    import io  # noqa: PLC0415

    out = io.BytesIO()
    generate_flight_log(out, duration_s=2.0, seed=4)
    return out.getvalue()


def _with_perf_tail(log: bytes) -> bytes:
    writer = ULogWriter(header=False)
    writer.info_multiple("char", "perf_counter_postflight", "logger: 12 events")
    return log + writer.getvalue()


def _run_to_the_end(log: bytes, *, stop_at_end: bool) -> tuple[bytes, list[VehicleOutput]]:
    """Everything the vehicle sends to an acking receiver until it goes quiet (no STOP sent)."""
    config = VehicleConfig(link_rate=None, speed=None, stop_at_end=stop_at_end)
    vehicle = SimVehicle(log, now=0.0, config=config)
    start = CommandLong(command=MAV_CMD_LOGGING_START, param1=0.0, **RECEIVER)
    pending: deque[VehicleOutput] = deque(vehicle.receive(start, 0.0))
    sent = bytearray()
    outputs: list[VehicleOutput] = []
    now = 0.0
    while now < 10.0:
        while pending:
            output = pending.popleft()
            outputs.append(output)
            if isinstance(output, SendLoggingData):
                packet = output.packet
                sent += packet.data
                if packet.needs_ack:
                    ack = LoggingAck(sequence=packet.sequence, **RECEIVER)
                    pending.extend(vehicle.receive(ack, now))
        deadline = vehicle.next_deadline()
        now = now if deadline is None else max(now, deadline)
        pending.extend(vehicle.handle_timer(now))
        if not vehicle.streaming and not pending:
            break
    return bytes(sent), outputs


@pytest.mark.parametrize("tail", [False, True], ids=["no-perf-tail", "perf-tail"])
def test_the_flight_ends_with_every_byte_then_accepted_to_the_gcs(*, tail: bool) -> None:
    log = _with_perf_tail(_flight()) if tail else _flight()
    sent, outputs = _run_to_the_end(log, stop_at_end=True)
    assert sent == log
    acks = [
        o for o in outputs if isinstance(o, SendCommandAck) and o.command != MAV_CMD_LOGGING_START
    ]
    gcs = (GCS_SYSTEM_ID, GCS_COMPONENT_ID)
    assert [(a.result, (a.target_system, a.target_component)) for a in acks] == [
        (MavResult.IN_PROGRESS, gcs),
        (MavResult.ACCEPTED, gcs),
    ]
    assert all(a.command == MAV_CMD_LOGGING_STOP for a in acks)
    # ACCEPTED comes after the last packet, and the stream then ends.
    last_packet = max(i for i, o in enumerate(outputs) if isinstance(o, SendLoggingData))
    assert outputs.index(acks[-1]) > last_packet
    assert LogStreamEnded(0, "flight-ended") in outputs


def test_without_stop_at_end_the_last_partial_packet_waits_for_a_stop() -> None:
    log = _flight()
    sent, outputs = _run_to_the_end(log, stop_at_end=False)
    assert log.startswith(sent)
    assert 0 < len(log) - len(sent) < 249
    assert not any(isinstance(o, LogStreamEnded) for o in outputs)
