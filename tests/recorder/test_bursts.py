"""What the recorder does after each burst of datagrams: wake its timer loop if a deadline came."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

import pytest
from support.end_to_end import recorder_settings

from ulogstream.mavlink_codec import MAV_AUTOPILOT_PX4, MAV_TYPE_QUADROTOR, MavlinkCodec
from ulogstream.recorder.recorder import HELLO_INTERVAL_S
from ulogstream.recorder.wiring import build_recorder

if TYPE_CHECKING:
    from pathlib import Path


@pytest.mark.asyncio
async def test_a_deadline_set_by_a_burst_wakes_the_sleeping_timer(tmp_path: Path) -> None:
    # The timer loop sleeps until its earliest deadline (or a long tick): a new vehicle's
    # deadlines, set while it sleeps, must wake it, not wait for its own wake-up.
    recorder = build_recorder(recorder_settings("udpin:127.0.0.1:0", tmp_path))
    now = time.monotonic()
    recorder._hello(now)  # no vehicle yet: our next HEARTBEAT is due in a second
    sleeping = asyncio.ensure_future(recorder._timer_sleep(now + 0.9))
    await asyncio.sleep(0)
    recorder._wake_timer_if_due()  # a burst that set no deadline
    assert recorder._next_deadline() == pytest.approx(now + HELLO_INTERVAL_S)
    await asyncio.sleep(0)
    assert not sleeping.done()  # nothing due before its wake-up: it sleeps on
    autopilot = MavlinkCodec(system_id=1, component_id=1)
    heartbeat = autopilot.encode_heartbeat(mav_type=MAV_TYPE_QUADROTOR, autopilot=MAV_AUTOPILOT_PX4)
    recorder._route(heartbeat, time.monotonic())  # the autopilot: its identity is asked for
    deadline = recorder._next_deadline()
    assert deadline is not None
    assert deadline < now + 0.9
    recorder._wake_timer_if_due()  # the burst's end
    await asyncio.wait_for(sleeping, 0.2)
