"""When the recorder lets a burst of datagrams gather.

Only in a log's data phase, never when an ack (or anything but LOGGING_DATA) may be due.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

import pytest
from support.end_to_end import recorder_settings

from ulogstream.mavlink_codec import MAV_AUTOPILOT_PX4, MAV_TYPE_QUADROTOR, MavlinkCodec
from ulogstream.recorder.recorder import DATA_PAUSE_S, HELLO_INTERVAL_S
from ulogstream.recorder.wiring import build_recorder

if TYPE_CHECKING:
    from pathlib import Path

    from ulogstream.recorder.recorder import Recorder


def vehicle(system_id: int = 1) -> MavlinkCodec:
    return MavlinkCodec(system_id=system_id, component_id=1)


def data(sequence: int, *, acked: bool = False, system_id: int = 1) -> bytes:
    return vehicle(system_id).encode_logging_data(sequence, 254, 155, 0, b"x" * 40, acked=acked)


def after(recorder: Recorder, *datagrams: bytes) -> float:
    """The pause the recorder asks for after a burst of ``datagrams``."""
    for datagram in datagrams:
        recorder._route(datagram, 0.0)
    return recorder._burst_pause()


@pytest.mark.asyncio
async def test_only_a_data_phase_lets_bursts_gather(tmp_path: Path) -> None:
    # Another sysid is recorded, so these frames are judged but start no session.
    recorder = build_recorder(recorder_settings("udpin:127.0.0.1:0", tmp_path, target_sysid=9))
    heartbeat = vehicle().encode_heartbeat(mav_type=MAV_TYPE_QUADROTOR, autopilot=MAV_AUTOPILOT_PX4)
    telemetry = vehicle().encode_command_ack(1, 0, 200, 1)  # a COMMAND_ACK: an event
    assert after(recorder) == 0.0  # nothing streamed yet
    assert after(recorder, data(0, acked=True), data(1, acked=True)) == 0.0  # the header
    assert after(recorder, data(2), data(3)) == DATA_PAUSE_S  # the data phase
    assert after(recorder) == DATA_PAUSE_S  # telemetry alone (no message) changes nothing
    assert after(recorder, data(4), heartbeat) == 0.0  # a HEARTBEAT reads on at once...
    assert after(recorder, data(5)) == DATA_PAUSE_S  # ...once
    assert after(recorder, data(6), telemetry) == 0.0
    assert after(recorder, data(7), data(8, acked=True)) == 0.0  # an ack is due
    assert after(recorder, data(9, acked=True)) == 0.0  # and while acked packets go on
    assert after(recorder, data(10)) == DATA_PAUSE_S


@pytest.mark.asyncio
async def test_one_vehicles_data_phase_never_slows_anothers_header(tmp_path: Path) -> None:
    recorder = build_recorder(recorder_settings("udpin:127.0.0.1:0", tmp_path, target_sysid=9))
    assert after(recorder, data(0, system_id=1), data(1, system_id=1)) == DATA_PAUSE_S
    # Vehicle 2 starts a log: its header goes stop-and-wait, one ACKED packet per ack.
    assert after(recorder, data(0, acked=True, system_id=2)) == 0.0
    assert after(recorder, data(2, system_id=1), data(3, system_id=1)) == 0.0  # 2 waits
    assert after(recorder, data(1, acked=True, system_id=2), data(4, system_id=1)) == 0.0
    assert after(recorder, data(2, system_id=2)) == DATA_PAUSE_S  # both stream data now


@pytest.mark.asyncio
async def test_a_deadline_set_by_a_burst_wakes_the_sleeping_timer(tmp_path: Path) -> None:
    # The timer loop sleeps until its earliest deadline (or a long tick): a new vehicle's
    # deadlines, set while it sleeps, must wake it, not wait for its own wake-up.
    recorder = build_recorder(recorder_settings("udpin:127.0.0.1:0", tmp_path))
    now = time.monotonic()
    recorder._hello(now)  # no vehicle yet: our next HEARTBEAT is due in a second
    sleeping = asyncio.ensure_future(recorder._timer_sleep(now + 0.9))
    await asyncio.sleep(0)
    assert after(recorder) == 0.0
    assert recorder._next_deadline() == pytest.approx(now + HELLO_INTERVAL_S)
    await asyncio.sleep(0)
    assert not sleeping.done()  # nothing due before its wake-up: it sleeps on
    heartbeat = vehicle().encode_heartbeat(mav_type=MAV_TYPE_QUADROTOR, autopilot=MAV_AUTOPILOT_PX4)
    recorder._route(heartbeat, time.monotonic())  # the autopilot: its identity is asked for
    deadline = recorder._next_deadline()
    assert deadline is not None
    assert deadline < now + 0.9
    recorder._burst_pause()
    await asyncio.wait_for(sleeping, 0.2)
