"""``record`` as a fleet member, end to end: a simulated PX4 over UDP, a real mosquitto.

Finished logs are announced on ``meta/log_finished`` and uploaded by a real command; two
recorders on one host with default settings publish into two trees.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import signal
import socket
from typing import TYPE_CHECKING

import pytest
from support.processes import (
    SIM_SYS_UUID,
    Process,
    make_flight,
    recordings,
    subscriber,
    with_sys_uuid,
)
from support.waiting import eventually

from ulogstream.cli.demo import free_udp_port

if TYPE_CHECKING:
    from pathlib import Path

    from support.broker import Broker

pytestmark = [pytest.mark.broker, pytest.mark.timeout(90)]


def record(
    tmp_path: Path, port: int, out: Path, mosquitto: Broker, *extra: str, name: str = "record"
) -> Process:
    return Process(
        [
            "record", f"udpin:127.0.0.1:{port}", "--once", "--out", str(out),
            "--mqtt", mosquitto.url, "--idle-timeout", "0.5", "--no-status", *extra,
        ],
        tmp_path,
        name=name,
    )  # fmt: skip


def fly(tmp_path: Path, flight: Path, port: int, name: str = "sim", *extra: str) -> Process:
    return Process(
        ["sim", str(flight), f"udpout:127.0.0.1:{port}", "--rate", "usb", *extra],
        tmp_path,
        name=name,
    )


async def fly_to_the_end(
    recorder: Process,
    tmp_path: Path,
    flight: Path,
    port: int,
    processes: list[Process],
    *,
    name: str = "sim",
) -> None:
    """Once ``recorder`` listens, fly ``flight`` to it; both exit 0 (``record --once``)."""
    processes.append(recorder)
    await recorder.await_line("listening on")
    sim = fly(tmp_path, flight, port, name)
    processes.append(sim)
    assert await recorder.await_exit(limit=60) == 0
    assert await sim.await_exit() == 0


@pytest.mark.asyncio
async def test_a_finished_log_is_announced_and_uploaded_by_the_command(
    tmp_path: Path, mosquitto: Broker, processes: list[Process]
) -> None:
    install = shutil.which("install")
    if install is None:
        pytest.skip("coreutils' install is not on PATH")
    flight = make_flight(tmp_path, duration_s=2.0, seed=8)
    port = free_udp_port()
    out, remote = tmp_path / "recordings", tmp_path / "remote"
    command = f"{install} -v -D {{path}} {remote}/{{vehicle}}/{{date}}/{{name}}"
    async with subscriber(mosquitto.host, mosquitto.port, "ulogstream/+/meta/#") as messages:
        recorder = record(
            tmp_path, port, out, mosquitto, "--vehicle-id", "uav7", "--set",
            f"upload.command={command}",
        )  # fmt: skip
        await fly_to_the_end(recorder, tmp_path, flight.path, port, processes)

        def announced() -> list[dict[str, object]]:
            topic = "ulogstream/uav7/meta/log_finished"
            return [json.loads(m.payload) for m in messages if m.topic == topic]

        def uploaded() -> list[dict[str, object]]:
            topic = "ulogstream/uav7/meta/log_uploaded"
            return [json.loads(m.payload) for m in messages if m.topic == topic]

        await eventually(lambda: len(announced()) == 1, what="no meta/log_finished")
        await eventually(lambda: len(uploaded()) == 1, what="no meta/log_uploaded")

    (log,) = recordings(out)
    event = announced()[0]
    assert event["path"] == str(log)
    assert event["size"] == log.stat().st_size
    assert event["sha256"] == hashlib.sha256(log.read_bytes()).hexdigest()
    assert event["vehicle"] == "uav7"
    assert isinstance(event["complete"], bool)
    assert str(event["start_time"]).startswith(log.parent.name + "T")
    copy = remote / "uav7" / log.parent.name / log.name
    assert copy.read_bytes() == log.read_bytes()
    stderr = recorder.stderr()
    assert f"uploaded {log}" in stderr
    assert all(not m.retain for m in messages if m.topic.endswith(("log_finished", "uploaded")))
    copied = uploaded()[0]
    location = str(copied.pop("location"))
    assert copied == {
        "path": str(log),
        "name": log.name,
        "sha256": event["sha256"],
        "target": "install",
    }
    said = f"'{log}' -> '{copy}'"  # what the command printed last (install -v), 200 at most
    assert location == said[:200]
    # The flight index: in the announcement and in the sidecar, with where the log went.
    summary = event["flight"]
    assert isinstance(summary, dict)
    assert 2.0 <= float(str(summary["duration_s"])) < 3.0  # from the header to the last data
    assert summary["firmware"] == "v1.15.2"
    sidecar = json.loads(log.with_name(log.name + ".json").read_text())
    assert sidecar["flight"] == summary
    assert sidecar["sha256"] == event["sha256"]
    assert [(u["target"], u["location"]) for u in sidecar["uploads"]] == [("install", location)]


@pytest.mark.asyncio
async def test_two_recorders_on_one_host_keep_two_vehicles_apart_by_default(
    tmp_path: Path, mosquitto: Broker, processes: list[Process]
) -> None:
    """Default settings, one out_dir: the vehicles never mix in topics or folders.

    Their autopilots' GUIDs (AUTOPILOT_VERSION, PX4's ``sys_uuid``) name them from the first
    file of the first run; MAV_SYS_ID 2 is the recorder's own vehicle from the start too.
    """
    ports = [free_udp_port(), free_udp_port()]
    sysids = [1, 2]
    uuids = ["a" * 36, "b" * 36]
    flights = []
    for i, uuid in enumerate(uuids):
        flight = make_flight(tmp_path, duration_s=2.0, seed=9 + i)
        path = tmp_path / f"vehicle{i}.ulg"
        path.write_bytes(with_sys_uuid(flight.data, uuid))
        flights.append(path)
    out = tmp_path / "recordings"  # shared, as the default out_dir is on one host
    for run in range(2):
        topic = "ulogstream/+/meta/status"
        async with subscriber(mosquitto.host, mosquitto.port, topic) as got:
            recorders = [
                record(tmp_path, port, out, mosquitto, name=f"record{run}-{i}")
                for i, port in enumerate(ports)
            ]
            processes.extend(recorders)
            for recorder in recorders:
                await recorder.await_line("listening on")
            for i, (port, sysid) in enumerate(zip(ports, sysids, strict=True)):
                sim = fly(tmp_path, flights[i], port, f"sim{run}-{i}", "--sysid", str(sysid))
                processes.append(sim)
            for recorder in recorders:
                assert await recorder.await_exit(limit=60) == 0

            def both_trees(trees: frozenset[str] = frozenset(uuids)) -> bool:
                return {m.topic.split("/")[1] for m in got if not m.retain} == trees

            await eventually(both_trees, what="not two vehicle trees")

        for i, (recorder, vehicle) in enumerate(zip(recorders, uuids, strict=True)):
            text = recorder.stderr()
            said = f"sysid {sysids[i]}: vehicle id '{vehicle}' ({{sys_uuid}}: the autopilot's"
            assert said in text
            assert f"client id 'ulogstream-{vehicle}'" in text
            assert text.count("MQTT connected") == 1  # the two never took each other's session
            logs = recordings(out / vehicle)
            assert [log.read_bytes() for log in logs] == [flights[i].read_bytes()] * (run + 1)
    assert {p.name for p in out.iterdir() if not p.name.startswith(".")} == set(uuids)


@pytest.mark.asyncio
async def test_an_autopilot_without_a_guid_keeps_its_stand_in_id_for_good(
    tmp_path: Path, mosquitto: Broker, processes: list[Process]
) -> None:
    """No AUTOPILOT_VERSION: host, link and sysid stand in, remembered, never moved by a log."""
    flight = make_flight(tmp_path, duration_s=1.5, seed=10)
    port = free_udp_port()
    host = socket.gethostname().split(".")[0]
    out = tmp_path / "recordings"
    stand_in = f"px4-{host}-udpin-127.0.0.1-{port}-sysid1"
    async with subscriber(mosquitto.host, mosquitto.port, "ulogstream/+/meta/status") as got:
        for run in range(2):
            recorder = record(
                tmp_path, port, out, mosquitto, "--vehicle-id", "px4-{sys_uuid}", name=f"r{run}"
            )
            processes.append(recorder)
            await recorder.await_line("listening on")
            sim = fly(tmp_path, flight.path, port, f"sim{run}", "--no-autopilot-version")
            processes.append(sim)
            assert await recorder.await_exit(limit=60) == 0
            assert await sim.await_exit() == 0
            assert f"vehicle id '{stand_in}'" in recorder.stderr()
            said = "host, link and sysid stand in" if run == 0 else "the one remembered in"
            assert said in recorder.stderr()
        await eventually(
            lambda: any(m.topic == f"ulogstream/{stand_in}/meta/status" for m in got),
            what="no status under the stand-in id",
        )
        assert {m.topic.split("/")[1] for m in got if not m.retain} == {stand_in}

    remembered = out / f".sys_uuid-udpin-127.0.0.1-{port}-sysid1"
    assert remembered.read_text().strip() == stand_in.removeprefix("px4-")
    assert str(SIM_SYS_UUID).encode() in flight.data  # its logs carry one: it moves nothing
    assert {p.name for p in out.iterdir() if p.is_dir()} == {stand_in}
    assert len(recordings(out / stand_in)) == 2


@pytest.mark.asyncio
async def test_record_keeps_under_the_message_cap_and_counts_what_it_dropped(
    tmp_path: Path, mosquitto: Broker, processes: list[Process]
) -> None:
    cap = 50
    flight = make_flight(tmp_path, duration_s=3.0, seed=11)
    port = free_udp_port()
    out = tmp_path / "recordings"
    async with subscriber(mosquitto.host, mosquitto.port, "ulogstream/capped/#") as got:
        recorder = record(
            tmp_path, port, out, mosquitto, "--vehicle-id", "capped", "--mqtt-rate", "0",
            "--set", f"mqtt.max_messages_per_s={cap}",
        )  # fmt: skip
        await fly_to_the_end(recorder, tmp_path, flight.path, port, processes)

        def final_status() -> dict[str, object] | None:
            statuses = [m for m in got if m.topic == "ulogstream/capped/meta/status"]
            value = json.loads(statuses[-1].payload) if statuses else None
            return value if isinstance(value, dict) and value.get("online") is False else None

        await eventually(lambda: final_status() is not None, what="no final status")

    status = final_status()
    assert status is not None
    assert int(str(status["mqtt_capped"])) > 0
    (log,) = recordings(out)
    assert log.read_bytes() == flight.data  # the cap never touches the recording
    assert any(m.topic == "ulogstream/capped/meta/info" for m in got)  # retained never dropped


@pytest.mark.asyncio
async def test_a_log_recovered_after_a_crash_is_announced_and_uploaded(
    tmp_path: Path, mosquitto: Broker, processes: list[Process]
) -> None:
    """Issue 21 item 2: SIGKILL mid-log (a power cut), restart: the log goes through the finish."""
    install = shutil.which("install")
    if install is None:
        pytest.skip("coreutils' install is not on PATH")
    flight = make_flight(tmp_path, duration_s=40.0, seed=9)
    port = free_udp_port()
    out, remote = tmp_path / "recordings", tmp_path / "remote"
    command = f"{install} -D {{path}} {remote}/{{vehicle}}/{{name}}"
    args = [
        "record", f"udpin:127.0.0.1:{port}", "--out", str(out), "--mqtt", mosquitto.url,
        "--vehicle-id", "uav7", "--no-status", "--set", f"upload.command={command}",
    ]  # fmt: skip
    crashed = Process(args, tmp_path, name="crashed")
    processes.append(crashed)
    await crashed.await_line("listening on")
    sim = fly(tmp_path, flight.path, port, "sim", "--speed", "4")
    processes.append(sim)
    await eventually(lambda: data_on_disk(out), what="no data message on disk")
    crashed.process.send_signal(signal.SIGKILL)
    assert await crashed.await_exit() == -signal.SIGKILL
    sim.kill()
    (part,) = out.rglob("*.ulg.part")
    async with subscriber(mosquitto.host, mosquitto.port, "ulogstream/+/meta/#") as messages:
        restarted = Process(args, tmp_path, name="restarted")
        processes.append(restarted)
        await restarted.await_line("uploaded ")

        def announced() -> list[dict[str, object]]:
            topic = "ulogstream/uav7/meta/log_finished"
            return [json.loads(m.payload) for m in messages if m.topic == topic]

        def uploaded() -> list[dict[str, object]]:
            topic = "ulogstream/uav7/meta/log_uploaded"
            return [json.loads(m.payload) for m in messages if m.topic == topic]

        await eventually(lambda: len(announced()) == 1, what="no meta/log_finished")
        await eventually(lambda: len(uploaded()) == 1, what="no meta/log_uploaded")
    assert restarted.terminate() == 0
    log = part.with_name(part.name.removesuffix(".part"))
    assert f"recovered {log} from an interrupted recording" in restarted.stderr()
    assert (remote / "uav7" / log.name).read_bytes() == log.read_bytes()
    event = announced()[0]
    assert event["path"] == str(log)
    assert event["complete"] is False
    assert event["how"] == "incomplete: recovered after an interrupted recording"
    assert event["vehicle"] == "uav7"


def data_on_disk(out: Path) -> bool:
    """Whether a ``.part`` under ``out`` holds a data message (a log worth recovering)."""
    for part in out.rglob("*.ulg.part"):
        data = part.read_bytes()
        position = 16
        while position + 3 <= len(data):
            size = int.from_bytes(data[position : position + 2], "little")
            if data[position + 2] == ord("D"):
                return True
            position += 3 + size
    return False


@pytest.mark.asyncio
async def test_every_vehicle_the_recorder_served_goes_offline_when_it_is_killed(
    tmp_path: Path, mosquitto: Broker, processes: list[Process]
) -> None:
    """Each vehicle's connection carries its own Last Will (a connection has one)."""
    port = free_udp_port()
    uuids = {2: "2" * 36, 3: "3" * 36}  # MAV_SYS_ID 2 and 3: neither is PX4's default
    recorder = record(tmp_path, port, tmp_path / "out", mosquitto)
    processes.append(recorder)
    await recorder.await_line("listening on")
    async with subscriber(mosquitto.host, mosquitto.port, "ulogstream/+/meta/status") as got:

        def online(vehicle: str) -> bool | None:
            statuses = [m for m in got if m.topic == f"ulogstream/{vehicle}/meta/status"]
            value = json.loads(statuses[-1].payload) if statuses else None
            return value.get("online") if isinstance(value, dict) else None

        for sysid, uuid in uuids.items():
            flight = make_flight(tmp_path, duration_s=30.0, seed=sysid)
            path = tmp_path / f"vehicle{sysid}.ulg"
            path.write_bytes(with_sys_uuid(flight.data, uuid))
            processes.append(fly(tmp_path, path, port, f"sim{sysid}", "--sysid", str(sysid)))
        await eventually(
            lambda: all(online(uuid) for uuid in uuids.values()), what="both vehicles online"
        )
        recorder.process.send_signal(signal.SIGKILL)
        await eventually(
            lambda: all(online(uuid) is False for uuid in uuids.values()),
            what="every vehicle offline after SIGKILL",
        )
    assert {m.topic.split("/")[1] for m in got} == set(uuids.values())  # no phantom tree
