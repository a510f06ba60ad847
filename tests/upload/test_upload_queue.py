"""The on-disk upload queue: logs waiting for upload survive a restart (and a reboot)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from typing import TYPE_CHECKING

import msgspec
import pytest
from support.review_server import ReviewServer
from support.waiting import eventually, running

from ulogstream.config.sections import (
    FlightReviewSettings,
    LinkSettings,
    MqttSettings,
    RecordingSettings,
    Settings,
    UploadSettings,
)
from ulogstream.recorder.wiring import build_recorder
from ulogstream.upload.info import FinishedLogInfo
from ulogstream.upload.journal import PendingUpload, UploadJournal
from ulogstream.upload.shipper import LogShipper

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.timeout(60)

WAIT = 15.0
DATA = b"ULog\x01\x12\x35" + bytes(range(256)) * 64


def finished_log(out: Path, name: str = "12_34_56.ulg") -> Path:
    path = out / "2026-11-25" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(DATA)
    return path


def to_review(url: str, **upload: float) -> UploadSettings:
    review = FlightReviewSettings(url=url)
    values: dict[str, float] = {"backoff_s": 0.01, **upload}
    return UploadSettings(target="flight_review", flight_review=review, **values)  # type: ignore[arg-type]


def info_of(path: Path) -> FinishedLogInfo:
    return FinishedLogInfo(
        path=path, size=len(DATA), sha256=None, sys_uuid=None, start_time=None,
        date="2026-11-25", vehicle="uav-1", complete=True, how="complete",
    )  # fmt: skip


def entries(journal: Path) -> list[Path]:
    return sorted(journal.glob("*")) if journal.exists() else []


@pytest.mark.asyncio
async def test_a_waiting_log_survives_a_restart_and_is_uploaded_once(tmp_path: Path) -> None:
    log = finished_log(tmp_path / "out")
    journal = tmp_path / "out" / ".upload-queue"
    async with ReviewServer("plot_app", answers=[503]) as down:
        first = LogShipper(to_review(down.url, backoff_s=600.0), journal=journal)
        async with running(first.run()):
            first.offer(log, len(DATA), vehicle="uav-1", how="complete")
            await eventually(lambda: first.paused, what="no first attempt, then a backoff")
        # stopped while waiting for the retry: the log waits on disk
    (entry,) = entries(journal)
    assert json.loads(entry.read_text())["attempts"] == 1

    async with ReviewServer("plot_app") as server:
        second = LogShipper(to_review(server.url), journal=journal)
        assert (second.resumed, second.backlog) == (1, 1)
        async with running(second.run()):
            await asyncio.wait_for(second.wait_idle(), WAIT)
        third = LogShipper(to_review(server.url), journal=journal)

    assert list(server.stored.values()) == [DATA]
    assert (second.uploaded, third.backlog) == (1, 0)
    assert entries(journal) == []


@pytest.mark.asyncio
async def test_the_attempts_made_before_a_restart_count(tmp_path: Path) -> None:
    log = finished_log(tmp_path)
    journal = tmp_path / "queue"
    UploadJournal(journal).write(PendingUpload(info_of(log), attempts=2))
    async with ReviewServer("plot_app", answers=[500, 500, 500]) as server:
        shipper = LogShipper(to_review(server.url, attempts=3), journal=journal)
        async with running(shipper.run()):
            await asyncio.wait_for(shipper.wait_idle(), WAIT)

    assert [u.status for u in server.received] == [500]
    assert (shipper.uploaded, shipper.failed) == (0, 1)
    assert entries(journal) == []  # given up: not retried at every start
    assert log.exists()


@pytest.mark.asyncio
async def test_a_refused_log_leaves_the_queue(tmp_path: Path) -> None:
    log = finished_log(tmp_path)
    journal = tmp_path / "queue"
    async with ReviewServer("api", answers=[400]) as server:
        shipper = LogShipper(to_review(server.url), journal=journal)
        async with running(shipper.run()):
            shipper.offer(log, len(DATA), vehicle="uav-1", how="complete")
            await asyncio.wait_for(shipper.wait_idle(), WAIT)

    assert shipper.failed == 1
    assert entries(journal) == []


def test_waiting_logs_whose_file_is_gone_are_dropped_with_one_line_each(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    journal = UploadJournal(tmp_path / "queue")
    kept = finished_log(tmp_path, "10_00_00.ulg")
    gone = [tmp_path / "2026-11-25" / f"0{i}_00_00.ulg" for i in range(2)]
    part = finished_log(tmp_path, "11_00_00.ulg.part")
    for path in [*gone, kept, part]:
        journal.write(PendingUpload(info_of(path)))

    with caplog.at_level(logging.INFO, logger="ulogstream.upload"):
        shipper = LogShipper(to_review("http://127.0.0.1:9"), journal=journal.folder)

    lines = [r.getMessage() for r in caplog.records]
    dropped = [line for line in lines if "dropped" in line]
    assert sorted(dropped) == sorted(
        [f"queued upload of {path} dropped: the file no longer exists" for path in gone]
        + [f"queued upload of {part} dropped: the file is not a finished log"]
    )
    assert (shipper.resumed, shipper.backlog, shipper.skipped) == (1, 1, 3)
    assert [p.info.path for p in journal.pending()] == [kept]
    assert part.read_bytes() == DATA  # never touched


def test_more_waiting_logs_than_the_queue_holds_stay_on_disk_for_the_next_start(
    tmp_path: Path,
) -> None:
    journal = UploadJournal(tmp_path / "queue")
    logs = [finished_log(tmp_path, f"0{i}_00_00.ulg") for i in range(3)]
    for log in logs:
        journal.write(PendingUpload(info_of(log)))

    shipper = LogShipper(to_review("http://127.0.0.1:9", queue_size=2), journal=journal.folder)

    assert (shipper.resumed, shipper.backlog) == (2, 2)
    assert len(journal.pending()) == 3


def test_a_cut_short_write_and_a_damaged_entry_are_cleared(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "queue"
    journal = UploadJournal(folder)
    log = finished_log(tmp_path)
    journal.write(PendingUpload(info_of(log), attempts=1))
    (folder / "0123.tmp").write_text('{"version": 1, "pa')
    (folder / "4567.json").write_text("[]")

    with caplog.at_level(logging.WARNING, logger="ulogstream.upload"):
        waiting = journal.pending()

    assert waiting == [PendingUpload(info_of(log), attempts=1)]
    assert [p.name for p in entries(folder)] == [journal.entry(info_of(log)).name]
    (line,) = [r.getMessage() for r in caplog.records]
    assert line.startswith(f"upload queue entry {folder / '4567.json'} cannot be read")


@pytest.mark.asyncio
async def test_a_part_file_is_never_offered(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    part = finished_log(tmp_path, "12_00_00.ulg.part")
    journal = tmp_path / "queue"
    shipper = LogShipper(UploadSettings(command="false {path}"), journal=journal)

    with caplog.at_level(logging.ERROR, logger="ulogstream.upload"):
        shipper.offer(part, len(DATA), vehicle="v", how="complete")

    assert shipper.skipped == 1
    assert shipper.backlog == 0
    assert entries(journal) == []
    assert [r.getMessage() for r in caplog.records] == [
        f"{part} is still being written: neither announced nor uploaded"
    ]


@pytest.mark.asyncio
async def test_a_stop_need_not_wait_out_a_backoff_with_the_log_in_the_queue(
    tmp_path: Path,
) -> None:
    log = finished_log(tmp_path)
    journal = tmp_path / "queue"
    async with ReviewServer("plot_app", answers=[503]) as server:
        shipper = LogShipper(to_review(server.url, backoff_s=600.0), journal=journal)
        async with running(shipper.run()):
            shipper.offer(log, len(DATA), vehicle="uav-1", how="complete")
            await asyncio.wait_for(shipper.wait_settled(), WAIT)  # not 600 s
            assert (shipper.backlog, shipper.paused) == (1, True)

    assert len(entries(journal)) == 1


@pytest.mark.asyncio
async def test_a_queue_that_cannot_be_written_still_lets_the_log_be_uploaded(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = finished_log(tmp_path)
    journal = tmp_path / "queue"
    journal.write_text("a file where the folder should be")
    async with ReviewServer("plot_app") as server:
        with caplog.at_level(logging.WARNING, logger="ulogstream.upload"):
            shipper = LogShipper(to_review(server.url), journal=journal)
            async with running(shipper.run()):
                shipper.offer(log, len(DATA), vehicle="uav-1", how="complete")
                await asyncio.wait_for(shipper.wait_idle(), WAIT)

    assert shipper.uploaded == 1
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0].startswith(f"cannot read the upload queue {journal}: ")
    assert lines[1].startswith(f"upload queue {journal}: ")
    assert lines[1].endswith(f"for {log} (it is uploaded now, but not after a restart)")


@pytest.mark.asyncio
async def test_the_upload_command_never_sees_the_mqtt_password(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 21 item 9: rclone, aws or any tool gets what it needs, not the broker's password."""
    monkeypatch.setenv("FLEET_MQTT_PASSWORD", "s3cret")
    monkeypatch.setenv("RCLONE_CONFIG_PASS", "the tool's own")
    log = finished_log(tmp_path / "out")
    dump = tmp_path / "environment.json"
    script = tmp_path / "upload.py"
    script.write_text(
        "import json, os, sys\n"
        f"open({str(dump)!r}, 'w').write(json.dumps(dict(os.environ)))\n"
        "print('done', sys.argv[1])\n"
    )
    settings = Settings(
        link=LinkSettings(connection="udpin:127.0.0.1:14550"),
        recording=RecordingSettings(out_dir=tmp_path / "out"),
        mqtt=MqttSettings(
            url="mqtt://127.0.0.1:1",
            username="fleet",
            password_env="FLEET_MQTT_PASSWORD",  # noqa: S106 (the variable's name)
        ),
        upload=UploadSettings(command=f"{sys.executable} {script} {{path}}"),
    )
    recorder = build_recorder(settings)
    target = recorder.shipper.target
    assert target is not None
    assert (await target.upload(info_of(log))).location == f"done {log}"
    environment = json.loads(dump.read_text())
    assert "FLEET_MQTT_PASSWORD" not in environment
    assert environment["RCLONE_CONFIG_PASS"] == "the tool's own"  # noqa: S105 (a test value)
    assert environment["PATH"] == os.environ["PATH"]


def test_a_journal_entry_keeps_the_flight_summary(tmp_path: Path) -> None:
    log = tmp_path / "2026-11-25" / "12_34_56.ulg"
    flight: dict[str, str | int | float | None] = {"duration_s": 61.5, "firmware": "v1.15.2"}
    info = msgspec.structs.replace(info_of(log), flight={**flight, "takeoff_time": None})
    journal = UploadJournal(tmp_path / "queue")
    journal.write(PendingUpload(info, attempts=1))

    (pending,) = journal.pending()
    assert pending.info == info
