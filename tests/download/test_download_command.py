"""``ulogstream download`` over real UDP against the simulated vehicle's SD card."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import signal
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from pyulog import ULog
from support.processes import Process, make_flight, subscriber, with_sys_uuid
from support.rows import missing_and_differing
from support.waiting import eventually

from ulogstream.adapters.download_file import DOWNLOAD_SUFFIX, SIDECAR_SUFFIX
from ulogstream.adapters.udp_transport import UdpTransport
from ulogstream.cli.demo import free_udp_port
from ulogstream.download.backfill import plan_backfill
from ulogstream.errors import LinkError
from ulogstream.mavlink_codec import MavlinkCodec
from ulogstream.recorder.download import LogDownloader
from ulogstream.sim.flightlog import generate_flight_log
from ulogstream.sim.sd_card import split_at_stream_start

if TYPE_CHECKING:
    from support.broker import Broker

pytestmark = pytest.mark.timeout(120)


def vehicle(tmp_path: Path, log: Path, port: int, *extra: str, sd_card: bool = True) -> Process:
    """``ulogstream sim LOG --sd-card`` sending to ``port`` (a downloader's udpin)."""
    return Process(
        ["sim", str(log), f"udpout:127.0.0.1:{port}", *(["--sd-card"] if sd_card else []), *extra],
        tmp_path,
        name="sim",
    )


def flying_vehicle(
    tmp_path: Path,
    log: Path,
    port: int,
    *extra: str,
    sd_card: bool = True,
    sysid: int = 1,
) -> Process:
    """A simulated flight: armed until its log is delivered, 3 % loss, at 4x over USB."""
    return vehicle(
        tmp_path, log, port, "--armed", "--hold-end", "--loss", "0.03", "--speed", "4",
        "--rate", "usb", "--sysid", str(sysid), *extra, sd_card=sd_card,
    )  # fmt: skip


async def record_flight(
    tmp_path: Path,
    flight: Path,
    *extra: str,
    sd_card: bool = True,
    vehicle_words: tuple[str, ...] = (),
) -> Process:
    """``record --while-armed --once`` of one simulated flight (:func:`flying_vehicle`)."""
    port = free_udp_port()
    sim = flying_vehicle(tmp_path, flight, port, *vehicle_words, sd_card=sd_card)
    try:
        record = Process(
            ["record", f"udpin:127.0.0.1:{port}", "--while-armed", "--once", "--out",
             str(tmp_path / "rec"), "--no-status", *extra],
            tmp_path,
            name="record",
        )  # fmt: skip
        assert await record.await_exit(limit=90) == 0, record.stderr()
    finally:
        sim.kill()
    return record


def _ignored_signals(pid: int) -> str:
    """The signals process ``pid`` ignores, as Linux says (``SigIgn``), for a failure's message."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("SigIgn:"):
                return line
    return "SigIgn unknown"


def downloads(out: Path) -> list[Path]:
    return sorted(out.rglob("*.ulg"))


@pytest.mark.asyncio
async def test_latest_is_byte_identical_to_the_sd_card_and_list_names_it(tmp_path: Path) -> None:
    flight = make_flight(tmp_path, duration_s=20)
    port = free_udp_port()
    sim = vehicle(tmp_path, flight.path, port, "--rate", "unlimited")
    try:
        listing = Process(["download", f"udpin:127.0.0.1:{port}", "--list"], tmp_path, name="ls")
        assert await listing.await_exit(limit=30) == 0, listing.stderr()
        lines = listing.stdout().splitlines()
        assert lines[0].split() == ["id", "time", "size"]
        assert lines[1].split()[0] == "0"
        assert lines[1].endswith(f"{len(flight.data) / 1e6:.1f} MB")
        out = tmp_path / "out"
        fetch = Process(["download", f"udpin:127.0.0.1:{port}", "--out", str(out)], tmp_path)
        assert await fetch.await_exit(limit=60) == 0, fetch.stderr()
        # Run again: nothing to fetch.
        again = Process(
            ["download", f"udpin:127.0.0.1:{port}", "--out", str(out)], tmp_path, name="2"
        )
        assert await again.await_exit(limit=30) == 0, again.stderr()
    finally:
        sim.kill()
    assert "is already in" in again.stdout()
    (path,) = downloads(out)
    assert path.read_bytes() == flight.data
    assert str(path) in fetch.stdout()
    assert not list(out.rglob(f"*{DOWNLOAD_SUFFIX}*"))  # no partial file, no sidecar left
    # Named as PX4 names its SD logs: the day's folder, then the time.
    assert path.parent.name.count("-") == 2
    assert path.stem.count("_") == 2


@pytest.mark.asyncio
async def test_lost_log_data_is_asked_for_again_until_the_file_is_whole(tmp_path: Path) -> None:
    flight = make_flight(tmp_path, duration_s=10, seed=3)
    port = free_udp_port()
    # 10 % of the vehicle's frames lost on the wire, and 40 ms each way.
    sim = vehicle(
        tmp_path, flight.path, port, "--rate", "2000000", "--loss", "0.1", "--delay-ms", "40"
    )
    out = tmp_path / "out"
    try:
        fetch = Process(["download", f"udpin:127.0.0.1:{port}", "--out", str(out)], tmp_path)
        assert await fetch.await_exit(limit=90) == 0, fetch.stderr()
    finally:
        sim.kill()
    (path,) = downloads(out)
    assert path.read_bytes() == flight.data
    requests = int(fetch.stdout().rsplit(", ", 1)[1].split()[0])
    assert requests > 1


@pytest.mark.asyncio
@pytest.mark.parametrize("ftp_first", [True, False])
async def test_an_interrupted_download_resumes_where_it_stopped(
    tmp_path: Path, *, ftp_first: bool
) -> None:
    """Either protocol resumes what the other left: the sidecar names bytes, not requests."""
    flight = make_flight(tmp_path, duration_s=30, seed=5)
    port = free_udp_port()
    sim = vehicle(tmp_path, flight.path, port, "--rate", "200000")  # about 8 s of transfer
    out = tmp_path / "out"
    via = ["--ftp"] if ftp_first else ["--no-ftp"]
    then = ["--no-ftp"] if ftp_first else ["--ftp"]
    try:
        first = Process(["download", f"udpin:127.0.0.1:{port}", *via, "--out", str(out)], tmp_path)
        checkpointed = False
        for _ in range(600):  # until a checkpoint names some bytes (30 s for a loaded machine)
            sidecars = list(out.rglob(f"*{SIDECAR_SUFFIX}"))
            if sidecars and json.loads(sidecars[0].read_text())["held"]:
                checkpointed = True
                break
            await asyncio.sleep(0.05)
        assert checkpointed, f"no checkpoint named any bytes: {first.stderr()}"
        ignored = _ignored_signals(first.pid)
        first.send_signal(signal.SIGINT)
        assert await first.await_exit(limit=30) != 0, f"Ctrl-C did nothing ({ignored})"
        assert not downloads(out)
        (sidecar,) = out.rglob(f"*{SIDECAR_SUFFIX}")
        held = sum(end - start for start, end in json.loads(sidecar.read_text())["held"])
        assert 0 < held < len(flight.data)
        second = Process(
            ["download", f"udpin:127.0.0.1:{port}", *then, "--out", str(out)], tmp_path, name="2"
        )
        assert await second.await_exit(limit=60) == 0, second.stderr()
    finally:
        sim.kill()
    (path,) = downloads(out)
    assert path.read_bytes() == flight.data
    assert "MB of it resumed" in second.stdout()
    assert ("MAVLink FTP)" in second.stdout()) is not ftp_first
    assert not sidecar.exists()


@pytest.mark.asyncio
async def test_an_unknown_log_id_is_one_clear_error(tmp_path: Path) -> None:
    flight = make_flight(tmp_path, duration_s=2)
    port = free_udp_port()
    sim = vehicle(tmp_path, flight.path, port)
    try:
        fetch = Process(["download", f"udpin:127.0.0.1:{port}", "--id", "7"], tmp_path)
        assert await fetch.await_exit(limit=30) == 1
    finally:
        sim.kill()
    assert fetch.stderr().strip() == (
        "ulogstream: error: the vehicle has no log 7 (its logs: 0; see --list)"
    )


@pytest.mark.asyncio
async def test_no_vehicle_on_the_link_says_so() -> None:
    port = free_udp_port()
    transport = await UdpTransport.listen("127.0.0.1", port)
    codec = MavlinkCodec(system_id=254, component_id=155)
    with pytest.raises(
        LinkError, match=r"no autopilot HEARTBEAT on udpin:127\.0\.0\.1:\d+ within 0\.3 s"
    ):
        async with LogDownloader(transport=transport, codec=codec, heartbeat_timeout_s=0.3):
            pass
    await transport.aclose()


@pytest.mark.asyncio
async def test_backfill_puts_a_lossy_recordings_gaps_back_byte_for_byte(tmp_path: Path) -> None:
    """Recorded with 3 % loss, then backfilled: the file is the vehicle's log, byte for byte.

    The simulator streams the log and keeps it on its SD card.
    """
    flight = make_flight(tmp_path, duration_s=20, seed=8)
    port = free_udp_port()
    sim = vehicle(tmp_path, flight.path, port, "--loss", "0.03", "--speed", "4", "--rate", "usb")
    try:
        record = Process(
            ["record", f"udpin:127.0.0.1:{port}", "--once", "--out", str(tmp_path / "rec"),
             "--no-status"],
            tmp_path,
            name="record",
        )  # fmt: skip
        assert await record.await_exit(limit=60) == 0, record.stderr()
        (recording,) = downloads(tmp_path / "rec")
        recorded = recording.read_bytes()
        assert len(recorded) < len(flight.data)  # the link lost some
        fill = Process(
            ["backfill", str(recording), f"udpin:127.0.0.1:{port}"], tmp_path, name="backfill"
        )
        assert await fill.await_exit(limit=90) == 0, fill.stderr()
    finally:
        sim.kill()
    assert recording.read_bytes() == flight.data
    assert "gaps put back from SD log 0" in fill.stdout()
    assert "still missing" not in fill.stdout()
    assert "the flight's log is 100.0% complete\n" in fill.stdout()
    assert not list(recording.parent.glob("*.backfill"))


@pytest.mark.asyncio
async def test_backfill_of_a_flight_not_on_the_card_leaves_the_file_alone(tmp_path: Path) -> None:
    other = make_flight(tmp_path, duration_s=3, seed=1)
    flight = make_flight(tmp_path, duration_s=3, seed=2)
    recording = tmp_path / "mine.ulg"
    recording.write_bytes(flight.data)
    port = free_udp_port()
    sim = vehicle(tmp_path, other.path, port)
    try:
        fill = Process(["backfill", str(recording), f"udpin:127.0.0.1:{port}"], tmp_path)
        assert await fill.await_exit(limit=60) == 1
    finally:
        sim.kill()
    assert recording.read_bytes() == flight.data
    assert "its flight is not on the vehicle's SD card" in fill.stdout()


@pytest.mark.asyncio
@pytest.mark.parametrize("backfill", [True, False])
async def test_record_while_armed_completes_each_flight_from_the_sd_card(
    tmp_path: Path, *, backfill: bool
) -> None:
    """Recorded while armed with 3 % loss, the flight's file is the vehicle's log byte for byte.

    The simulator flies once (armed until its log is delivered). Backfill is on by default;
    with --no-backfill the file keeps its dropouts.
    """
    flight = make_flight(tmp_path, duration_s=15, seed=6)
    record = await record_flight(tmp_path, flight.path, *([] if backfill else ["--no-backfill"]))
    (recording,) = downloads(tmp_path / "rec")
    if backfill:
        assert recording.read_bytes() == flight.data
        assert "backfilled" in record.stdout()
        assert "gap(s) from SD log 0 (" in record.stderr()
        assert "the flight's log is 100.0% complete" in record.stderr()
        streamed, backfilled = (
            int(n)
            for n in re.search(
                r"\((\d+) rows streamed, (\d+) backfilled\)", record.stderr()
            ).groups()  # type: ignore[union-attr]
        )
        assert backfilled > 0
        assert streamed + backfilled == sum(
            len(d.data["timestamp"]) for d in ULog(str(recording)).data_list
        )
    else:
        assert len(recording.read_bytes()) < len(flight.data)
        assert "backfill" not in record.stderr()


@pytest.mark.asyncio
@pytest.mark.parametrize("ftp", [True, False])
async def test_ftp_reads_the_log_in_bursts_or_falls_back_where_the_vehicle_has_none(
    tmp_path: Path, *, ftp: bool
) -> None:
    """``--ftp`` with 3 % of the data lost: the SD log byte for byte, either way."""
    flight = make_flight(tmp_path, duration_s=10, seed=4)
    port = free_udp_port()
    words = ["--rate", "usb", "--loss", "0.03", *([] if ftp else ["--no-ftp"])]
    sim = vehicle(tmp_path, flight.path, port, *words)
    out = tmp_path / "out"
    try:
        fetch = Process(
            ["download", f"udpin:127.0.0.1:{port}", "--ftp", "--out", str(out)], tmp_path
        )
        assert await fetch.await_exit(limit=90) == 0, fetch.stderr()
    finally:
        sim.kill()
    (path,) = downloads(out)
    assert path.read_bytes() == flight.data
    if ftp:
        assert "MAVLink FTP)" in fetch.stdout()
        assert "gives no MAVLink FTP" not in fetch.stderr()
    else:
        assert "MAVLink FTP)" not in fetch.stdout()
        assert (
            f"the vehicle on udpin:127.0.0.1:{port} gives no MAVLink FTP (it answers"
            " ListDirectory with UnknownCommand): downloading with LOG_REQUEST_DATA"
        ) in fetch.stderr()


@pytest.mark.asyncio
async def test_a_stream_started_into_the_flight_is_completed_to_every_row_of_the_sd_log(
    tmp_path: Path,
) -> None:
    """As on PX4: the SD log has the flight's first 2 s, and neither log the logger's stall.

    The recording lacks the start and has the link's losses; completed, it holds every row of
    the SD log and nothing the SD log lacks.
    """
    flight = make_flight(tmp_path, duration_s=9, seed=8)
    record = await record_flight(tmp_path, flight.path, vehicle_words=("--stream-lead", "2"))
    (recording,) = downloads(tmp_path / "rec")
    sd = tmp_path / "sd.ulg"
    sd.write_bytes(split_at_stream_start(flight.data, 2.0)[1])
    assert missing_and_differing(sd, recording) == (0, 0)
    assert missing_and_differing(recording, sd) == (0, 0)
    stderr = record.stderr()
    assert "backfilled its start and" in stderr
    assert "the flight's log is 100.0% complete" in stderr


@pytest.mark.asyncio
@pytest.mark.parametrize(("baud", "ftp"), [("", False), (":57600", True), (":57600", False)])
async def test_download_over_a_serial_port_is_byte_identical(
    tmp_path: Path, baud: str, *, ftp: bool
) -> None:
    """A USB autopilot or a radio: the simulator's pseudo-terminal, read as a serial port.

    On a radio's baud rate the log comes over MAVLink FTP unless ``--no-ftp`` says otherwise.
    """
    flight = make_flight(tmp_path, duration_s=8, seed=11)
    device = tmp_path / "ttyACM0"
    sim = Process(
        ["sim", str(flight.path), f"pty:{device}", "--sd-card", "--rate", "usb"],
        tmp_path,
        name="sim",
    )
    try:
        for _ in range(100):
            if device.exists():
                break
            await asyncio.sleep(0.05)
        out = tmp_path / "out"
        words = [] if ftp or not baud else ["--no-ftp"]
        fetch = Process(["download", f"{device}{baud}", *words, "--out", str(out)], tmp_path)
        assert await fetch.await_exit(limit=60) == 0, fetch.stderr()
    finally:
        sim.kill()
    (path,) = downloads(out)
    assert path.read_bytes() == flight.data
    assert ("MAVLink FTP)" in fetch.stdout()) is ftp


@pytest.mark.asyncio
async def test_a_usb_cable_pulled_mid_download_is_waited_for_and_the_download_resumes(
    tmp_path: Path,
) -> None:
    """The autopilot's pseudo-terminal vanishes mid-download and comes back (a replug)."""
    flight = make_flight(tmp_path, duration_s=30, seed=5)
    device = tmp_path / "ttyACM0"
    argv = ["sim", str(flight.path), f"pty:{device}", "--sd-card", "--rate", "200000"]
    sim = Process(argv, tmp_path, name="sim")
    out = tmp_path / "out"
    fetch = None
    try:
        await eventually(device.exists, what="the simulator's device")
        fetch = Process(["download", str(device), "--out", str(out)], tmp_path, name="download")

        def checkpointed() -> bool:
            sidecars = list(out.rglob(f"*{SIDECAR_SUFFIX}"))
            return bool(sidecars) and bool(json.loads(sidecars[0].read_text())["held"])

        await eventually(checkpointed, what="a checkpoint of the download")
        sim.kill()  # unplugged
        await fetch.await_line("to come back", limit=30)
        assert fetch.process.poll() is None  # it waits
        sim = Process(argv, tmp_path, name="sim-again")  # plugged in again
        assert await fetch.await_exit(limit=60) == 0, fetch.stderr()
    finally:
        sim.kill()
        if fetch is not None:
            fetch.kill()
    (path,) = downloads(out)
    assert path.read_bytes() == flight.data
    assert "was it unplugged?" in fetch.stderr()
    assert "MB of it resumed" in fetch.stdout()  # only the rest was asked for


@pytest.mark.asyncio
async def test_a_backfill_budget_stops_it_and_says_so(tmp_path: Path) -> None:
    flight = make_flight(tmp_path, duration_s=10, seed=12)
    data = flight.data
    cut = len(data) // 2
    # A recording missing a stretch in the middle: its dropout where the stretch was.
    plan = plan_backfill(data)
    boundary = plan.first_data
    position = boundary
    while position < cut:
        position += 3 + (data[position] | data[position + 1] << 8)
    end = position
    for _ in range(300):
        end += 3 + (data[end] | data[end + 1] << 8)
    recording = tmp_path / "rec.ulg"
    recording.write_bytes(data[:position] + bytes([2, 0, ord("O"), 100, 0]) + data[end:])
    before = recording.read_bytes()
    port = free_udp_port()
    sim = vehicle(tmp_path, flight.path, port, "--rate", "usb")
    try:
        fill = Process(
            ["backfill", str(recording), f"udpin:127.0.0.1:{port}", "--max-mb", "0.01"], tmp_path
        )
        await fill.await_exit(limit=60)
    finally:
        sim.kill()
    assert "the byte budget (--max-mb) ran out before its flight was found" in fill.stdout()
    assert fill.process.returncode == 1
    assert recording.read_bytes() == before  # nothing half-done


@pytest.mark.asyncio
@pytest.mark.broker
async def test_mqtt_hears_of_the_flight_once_it_is_complete(
    tmp_path: Path, mosquitto: Broker
) -> None:
    """meta/log_finished comes after the backfill, with the completed size.

    meta/status counts the flights and rows the backfill put back.
    """
    flight = make_flight(tmp_path, duration_s=10, seed=13)
    port = free_udp_port()
    sim = flying_vehicle(tmp_path, flight.path, port)
    out = tmp_path / "rec"
    try:
        async with subscriber(mosquitto.host, mosquitto.port, "ulogstream/+/meta/#") as heard:
            record = Process(
                ["record", f"udpin:127.0.0.1:{port}", "--while-armed", "--once", "--out",
                 str(out), "--no-status", "--mqtt", mosquitto.url, "--vehicle-id", "v1"],
                tmp_path,
                name="record",
            )  # fmt: skip
            assert await record.await_exit(limit=90) == 0, record.stderr()
            await asyncio.sleep(0.5)
    finally:
        sim.kill()
    (recording,) = downloads(out)
    assert recording.read_bytes() == flight.data
    finished = [json.loads(m.payload) for m in heard if m.topic.endswith("meta/log_finished")]
    assert [f["size"] for f in finished] == [len(flight.data)]
    assert "backfilled" in finished[0]["how"]
    statuses = [json.loads(m.payload) for m in heard if m.topic.endswith("meta/status")]
    last = statuses[-1]
    assert last["flights_backfilled"] == 1
    assert last["rows_backfilled"] > 0
    assert last["backfill_bytes_read"] > 0


@pytest.mark.asyncio
async def test_a_vehicle_that_serves_no_logs_leaves_the_flight_as_recorded(tmp_path: Path) -> None:
    """No answer to LOG_REQUEST_LIST: one warning, the recording kept as it is, exit 0."""
    flight = make_flight(tmp_path, duration_s=6, seed=14)
    record = await record_flight(tmp_path, flight.path, sd_card=False)
    (recording,) = downloads(tmp_path / "rec")
    assert 0 < len(recording.read_bytes()) < len(flight.data)
    assert "did not answer LOG_REQUEST_LIST" in record.stderr()
    assert "the recording is kept as it is" in record.stderr()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"hello", "{path} is not a ULog file: backfill completes recordings (.ulg)"),
        (None, "cannot read {path}: No such file or directory"),
    ],
)
def test_backfill_of_a_wrong_file_is_one_error_before_any_link(
    tmp_path: Path, content: bytes | None, message: str
) -> None:
    path = tmp_path / "flight.ulg"
    if content is not None:
        path.write_bytes(content)
    fill = Process(["backfill", str(path), "udpin:127.0.0.1:9"], tmp_path)
    assert fill.wait(timeout=30) == 1
    assert fill.stderr().strip() == f"ulogstream: error: {message.format(path=path)}"


@pytest.mark.parametrize("command", ["download", "backfill"])
def test_a_missing_serial_device_is_one_error_naming_it(tmp_path: Path, command: str) -> None:
    device = tmp_path / "ttyACM7"  # no autopilot plugged in
    recording = tmp_path / "flight.ulg"
    generate_flight_log(recording, duration_s=2.0, seed=1)
    kept = recording.read_bytes()
    args = ["--latest", "--out", str(tmp_path / "logs")] if command == "download" else []
    files = [str(recording)] if command == "backfill" else []
    run = Process([command, *files, str(device), *args], tmp_path)
    assert run.wait(timeout=30) == 1
    assert run.stderr().strip() == (
        f"ulogstream: error: serial device {device} does not exist; is the autopilot plugged "
        "in? (list devices with: ls /dev/serial/by-id/)"
    )
    assert recording.read_bytes() == kept  # nothing recorded is touched
    assert not (tmp_path / "logs").exists()


@pytest.mark.asyncio
async def test_backfill_merges_a_flights_recordings_into_the_first_and_keeps_the_others(
    tmp_path: Path,
) -> None:
    flight = make_flight(tmp_path, duration_s=8, seed=15)
    data = flight.data
    first_data = plan_backfill(data).first_data
    cuts = [first_data]
    while len(cuts) < 4000:  # message boundaries of the data section
        cuts.append(cuts[-1] + 3 + (data[cuts[-1]] | data[cuts[-1] + 1] << 8))
    a, b = tmp_path / "a.ulg", tmp_path / "b.ulg"
    a.write_bytes(data[: cuts[1000]])  # the stream PX4 ended in a blackout
    b.write_bytes(data[:first_data] + data[cuts[3000] :])  # the next stream: its own header
    second = b.read_bytes()
    port = free_udp_port()
    sim = vehicle(tmp_path, flight.path, port, "--rate", "usb")
    try:
        fill = Process(["backfill", str(a), str(b), f"udpin:127.0.0.1:{port}"], tmp_path)
        assert await fill.await_exit(limit=60) == 0, fill.stderr()
    finally:
        sim.kill()
    assert a.read_bytes() == data
    assert b.read_bytes() == second  # a file the user named is never removed
    assert f"{b} kept as they are" in fill.stdout()


@pytest.mark.asyncio
async def test_two_vehicles_on_one_link_each_get_their_flight_completed_from_their_own_card(
    tmp_path: Path,
) -> None:
    """MAV_SYS_ID 2 and 3 fly at once over one lossy UDP port; each SD card serves its own."""
    flights = {}
    for sysid, uuid in ((2, "2" * 36), (3, "3" * 36)):
        flight = make_flight(tmp_path, duration_s=12, seed=20 + sysid)
        path = tmp_path / f"vehicle{sysid}.ulg"
        path.write_bytes(with_sys_uuid(flight.data, uuid))
        flights[uuid] = path
    port = free_udp_port()
    out = tmp_path / "rec"
    record = Process(
        ["record", f"udpin:127.0.0.1:{port}", "--while-armed", "--out", str(out), "--no-status"],
        tmp_path,
        name="record",
    )
    sims = []
    try:
        await record.await_line("listening on")
        for sysid, path in zip((2, 3), flights.values(), strict=True):
            sims.append(flying_vehicle(tmp_path, path, port, sysid=sysid))
        await record.await_line("backfilled", count=2, limit=120)
        record.send_signal(signal.SIGINT)
        assert await record.await_exit(limit=60) == 0, record.stderr()
    finally:
        for sim in sims:
            sim.kill()
        record.kill()
    for uuid, path in flights.items():
        (recording,) = downloads(out / uuid)
        assert recording.read_bytes() == path.read_bytes(), uuid  # its own flight, whole
    assert record.stderr().count("gap(s) from SD log 0") == 2  # the link lost some of each
    assert record.stderr().count("% complete") == 2
