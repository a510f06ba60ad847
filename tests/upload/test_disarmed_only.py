"""``upload.only_when_disarmed``: uploads wait while the vehicle is armed (HEARTBEAT base_mode)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

import pytest
from support.review_server import HANG, ReviewServer
from support.waiting import eventually, holds_for, running

from ulogstream.adapters.udp_transport import UdpTransport
from ulogstream.cli.demo import free_udp_port
from ulogstream.config.sections import (
    FlightReviewSettings,
    LinkSettings,
    RecordingSettings,
    Settings,
    UploadSettings,
)
from ulogstream.mavlink_codec import MAV_AUTOPILOT_PX4, MAV_TYPE_QUADROTOR, MavlinkCodec
from ulogstream.recorder.wiring import build_recorder
from ulogstream.stream.packets import MAV_MODE_FLAG_SAFETY_ARMED
from ulogstream.upload.shipper import LogShipper

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

pytestmark = pytest.mark.timeout(60)

WAIT = 15.0
DATA = b"ULog\x01\x12\x35" + bytes(range(256)) * 64


def finished_log(out: Path) -> Path:
    path = out / "2026-11-25" / "12_34_56.ulg"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(DATA)
    return path


def disarmed_only(url: str, *, only_when_disarmed: bool = True) -> UploadSettings:
    return UploadSettings(
        target="flight_review",
        flight_review=FlightReviewSettings(url=url),
        backoff_s=0.01,
        only_when_disarmed=only_when_disarmed,
    )


@pytest.mark.asyncio
async def test_uploads_wait_while_the_vehicle_is_armed(tmp_path: Path) -> None:
    log = finished_log(tmp_path)
    async with ReviewServer("plot_app") as server:
        shipper = LogShipper(disarmed_only(server.url))
        shipper.set_armed(True)
        async with running(shipper.run()):
            shipper.offer(log, len(DATA), vehicle="uav-1", how="complete")
            await asyncio.wait_for(shipper.wait_described(), WAIT)
            await holds_for(lambda: not server.received, 0.5, what="uploaded while armed")
            assert (shipper.held, shipper.backlog) == (True, 1)
            shipper.set_armed(False)
            await asyncio.wait_for(shipper.wait_idle(), WAIT)

    assert [u.status for u in server.received] == [302]
    assert (shipper.uploaded, shipper.held) == (1, False)


@pytest.mark.asyncio
async def test_arming_stops_an_upload_which_starts_again_once_disarmed(tmp_path: Path) -> None:
    log = finished_log(tmp_path)
    async with ReviewServer("plot_app", answers=[HANG]) as server:
        shipper = LogShipper(disarmed_only(server.url))
        async with running(shipper.run()):
            shipper.offer(log, len(DATA), vehicle="uav-1", how="complete")
            await eventually(lambda: len(server.received) == 1, what="no upload began")
            shipper.set_armed(True, system_id=1)
            shipper.set_armed(False, system_id=2)  # another vehicle's state: sysid 1 holds
            await holds_for(lambda: len(server.received) == 1, 0.3, what="re-sent while armed")
            shipper.set_armed(False, system_id=1)
            await asyncio.wait_for(shipper.wait_idle(), WAIT)

    assert [u.status for u in server.received] == [HANG, 302]
    assert (shipper.uploaded, shipper.failed, shipper.last_error) == (1, 0, None)


@pytest.mark.asyncio
async def test_without_the_setting_an_armed_vehicle_does_not_hold_uploads(tmp_path: Path) -> None:
    log = finished_log(tmp_path)
    async with ReviewServer("plot_app") as server:
        shipper = LogShipper(disarmed_only(server.url, only_when_disarmed=False))
        shipper.set_armed(True)
        async with running(shipper.run()):
            shipper.offer(log, len(DATA), vehicle="uav-1", how="complete")
            await asyncio.wait_for(shipper.wait_idle(), WAIT)

    assert (shipper.uploaded, shipper.held) == (1, False)


@pytest.mark.asyncio
async def test_the_recorder_tells_the_shipper_what_the_autopilot_heartbeat_says(
    tmp_path: Path,
) -> None:
    port = free_udp_port()
    recorder = build_recorder(
        Settings(
            link=LinkSettings(connection=f"udpin:127.0.0.1:{port}", hint_after_s=0),
            recording=RecordingSettings(out_dir=tmp_path, min_free_mb=0),
            upload=UploadSettings(command="true {path}", only_when_disarmed=True),
        )
    )
    autopilot = MavlinkCodec(system_id=1, component_id=1)
    camera = MavlinkCodec(system_id=1, component_id=100)

    def heartbeat(codec: MavlinkCodec, base_mode: int) -> bytes:
        return codec.encode_heartbeat(
            mav_type=MAV_TYPE_QUADROTOR, autopilot=MAV_AUTOPILOT_PX4, base_mode=base_mode
        )

    armed_mode = MAV_MODE_FLAG_SAFETY_ARMED | 1  # custom mode enabled, as PX4 sends
    task = asyncio.create_task(recorder.run())
    link = await UdpTransport.connect("127.0.0.1", port)
    try:

        def send(frame: bytes) -> None:
            link.send(frame)

        async def sent_until(done: Callable[[], bool], frame: bytes) -> None:
            async def repeat() -> None:
                while not done():
                    send(frame)  # repeated: the recorder may not be listening yet
                    await asyncio.sleep(0.05)

            await asyncio.wait_for(repeat(), WAIT)

        async def becomes(frame: bytes, *, armed: bool) -> None:
            await sent_until(lambda: recorder.shipper.armed == armed, frame)

        await sent_until(lambda: 1 in recorder.vehicles, heartbeat(autopilot, 1))
        assert recorder.shipper.armed is False
        await becomes(heartbeat(autopilot, armed_mode), armed=True)
        for _ in range(3):
            send(heartbeat(camera, 0))  # another component's heartbeat says nothing
        send(heartbeat(autopilot, armed_mode))
        await holds_for(lambda: recorder.shipper.armed, 0.3, what="a camera disarmed it")
        await becomes(heartbeat(autopilot, 1), armed=False)
        assert recorder.shipper.held is False
    finally:
        recorder.request_stop()
        recorder.request_stop()  # no vehicle answers the stop handshake: do not wait for it
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(task, WAIT)
        await link.aclose()
