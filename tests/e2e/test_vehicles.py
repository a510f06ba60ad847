"""Several vehicles on one link: one session each, answered at their own address, kept apart."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from typing import TYPE_CHECKING

import msgspec
import pytest
from support.end_to_end import FAST, flight_log, recorder_settings
from support.processes import with_sys_uuid
from support.waiting import eventually

from ulogstream.adapters.udp_transport import UdpTransport
from ulogstream.cli.demo import free_udp_port
from ulogstream.mavlink_codec import MavlinkCodec
from ulogstream.recorder.wiring import build_recorder
from ulogstream.sim.runner import SimSummary, run_vehicle

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from ulogstream.recorder.recorder import Recorder


def files(root: Path, pattern: str, *, depth: int) -> list[Path]:
    """Files matching ``pattern`` exactly ``depth`` levels below ``root``, sorted."""
    return sorted(root.glob("/".join(["*"] * (depth - 1) + [pattern])))


async def record_vehicles(
    recorder: Recorder,
    port: int,
    logs: dict[int, bytes],
    *,
    wait_for: set[int],
    silent: frozenset[int] = frozenset(),
) -> dict[int, SimSummary]:
    """Vehicles with the given sysids stream their log to ``udpin`` ``port``.

    The recorder is stopped once every vehicle in ``wait_for`` delivered its whole log. Those in
    ``silent`` give no AUTOPILOT_VERSION.
    """
    delivered: set[int] = set()
    stop = asyncio.Event()

    def on_delivered(system_id: int) -> Callable[[int], None]:
        def delivered_log(_log_index: int) -> None:
            delivered.add(system_id)
            if wait_for <= delivered:
                recorder.request_stop()

        return delivered_log

    recorder_task = asyncio.create_task(recorder.run())
    await asyncio.sleep(0.05)  # the recorder binds its port before the vehicles send
    vehicles = {
        system_id: asyncio.create_task(
            run_vehicle(
                log,
                await UdpTransport.connect("127.0.0.1", port),
                config=msgspec.structs.replace(
                    FAST, system_id=system_id, autopilot_version=system_id not in silent
                ),
                stop_event=stop,
                on_log_delivered=on_delivered(system_id),
            )
        )
        for system_id, log in logs.items()
    }
    try:
        async with asyncio.timeout(60):
            assert await recorder_task == 0
            stop.set()
            return {system_id: await task for system_id, task in vehicles.items()}
    finally:
        for task in (recorder_task, *vehicles.values()):
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task


@pytest.mark.asyncio
@pytest.mark.timeout(90)
async def test_every_vehicle_on_a_link_is_recorded_apart_under_its_own_id_from_the_start(
    tmp_path: Path,
) -> None:
    uuids = {1: "1" * 36, 2: "2" * 36, 3: "3" * 36}
    logs = {
        1: with_sys_uuid(flight_log(2.0, seed=41), uuids[1]),
        2: with_sys_uuid(flight_log(2.5, seed=42), uuids[2]),
        3: with_sys_uuid(flight_log(1.5, seed=40), uuids[3]),
    }
    port = free_udp_port()
    link = f"udpin:127.0.0.1:{port}"
    # The autopilots' AUTOPILOT_VERSION names them from their first file; sysid 3 gives none,
    # so host, link and sysid stand in for it, and keep standing in: one vehicle, one place.
    stand_in = f"{socket.gethostname().split('.')[0]}-udpin-127.0.0.1-{port}-sysid3"
    expected = {1: uuids[1], 2: uuids[2], 3: stand_in}
    for run in range(2):
        recorder = build_recorder(recorder_settings(link, tmp_path))
        summaries = await record_vehicles(
            recorder, port, logs, wait_for={1, 2, 3}, silent=frozenset({3})
        )
        assert recorder.vehicle_ids == expected, run
        for system_id, log in logs.items():
            recorded = files(tmp_path / expected[system_id], "*.ulg", depth=2)
            assert [path.read_bytes() for path in recorded] == [log] * (run + 1)
        # Each vehicle got its acks and its STOP at its own address (udpin has three peers).
        assert {system_id: s.logs_stopped for system_id, s in summaries.items()} == {
            1: 1,
            2: 1,
            3: 1,
        }
    folders = {p.name for p in tmp_path.iterdir() if not p.name.startswith(".")}  # noqa: ASYNC240
    assert folders == set(expected.values())  # nothing under another id


@pytest.mark.asyncio
@pytest.mark.timeout(90)
async def test_target_sysid_keeps_one_vehicle_and_names_the_others_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="ulogstream")
    logs = {1: flight_log(2.0, seed=43), 2: flight_log(2.0, seed=44)}
    port = free_udp_port()
    recorder = build_recorder(
        recorder_settings(f"udpin:127.0.0.1:{port}", tmp_path, target_sysid=2)
    )
    summaries = await record_vehicles(recorder, port, logs, wait_for={2})
    assert [path.read_bytes() for path in files(tmp_path, "*.ulg", depth=3)] == [logs[2]]
    assert set(recorder.vehicle_ids) == {2}  # no folder, no id for the one not recorded
    assert summaries[1].logs_started == 0  # never asked to stream
    ignored = [r.getMessage() for r in caplog.records if "ignored" in r.getMessage()]
    assert len(ignored) == 1
    assert ignored[0].startswith("vehicle sysid 1 seen on udpin:")


@pytest.mark.asyncio
@pytest.mark.timeout(30)
async def test_another_receiver_with_our_ids_is_warned_about_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="ulogstream")
    port = free_udp_port()
    recorder = build_recorder(recorder_settings(f"udpin:127.0.0.1:{port}", tmp_path))
    task = asyncio.create_task(recorder.run())
    await asyncio.sleep(0.05)
    twin = await UdpTransport.connect("127.0.0.1", port)
    twin_codec = MavlinkCodec(system_id=254, component_id=155)  # the same ids as ours
    try:
        for _ in range(3):
            twin.send(twin_codec.encode_heartbeat())
            await asyncio.sleep(0.05)

        def warned() -> list[str]:
            return [
                r.getMessage() for r in caplog.records if "uses our MAVLink ids" in r.getMessage()
            ]

        await eventually(lambda: bool(warned()), limit=10, what="the warning")
        assert len(warned()) == 1
        assert "(sysid 254, compid 155)" in warned()[0]
        assert recorder.vehicles == {}  # a receiver is no vehicle
    finally:
        recorder.request_stop()
        await asyncio.wait_for(task, 10)
        await twin.aclose()


@pytest.mark.asyncio
@pytest.mark.timeout(90)
async def test_a_lone_vehicle_with_another_sysid_is_the_recorders_own_from_its_first_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="ulogstream")
    uuid = "7" * 36
    log = with_sys_uuid(flight_log(1.5, seed=45), uuid)
    port = free_udp_port()
    first = build_recorder(recorder_settings(f"udpin:127.0.0.1:{port}", tmp_path))
    await record_vehicles(first, port, {7: log}, wait_for={7})
    assert first.vehicle_ids == {7: uuid}
    assert first.pipeline is first.vehicles[7]  # MAV_SYS_ID 7 is the recorder's own vehicle
    assert first.vehicles[7].files.sink.folder == tmp_path / uuid
    assert [path.read_bytes() for path in files(tmp_path / uuid, "*.ulg", depth=2)] == [log]
    lines = [r.getMessage() for r in caplog.records]
    said = f"vehicle sysid 7: vehicle id '{uuid}' ({{sys_uuid}}: the autopilot's GUID"
    assert any(line.startswith(said) for line in lines), lines
