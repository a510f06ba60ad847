"""LogShipper with real commands and real files: copies, retries, timeouts, announcements."""

from __future__ import annotations

import asyncio
import hashlib
import io
import logging
import shutil
from typing import TYPE_CHECKING

import pytest
from support.shared_data import SHARED_ULG_FILES
from support.waiting import eventually, running

from ulogstream.config.sections import UploadSettings
from ulogstream.recorder.identity import recalled_sys_uuid, remember_sys_uuid
from ulogstream.sim.flightlog import generate_flight_log
from ulogstream.ulog.writer import ULogWriter
from ulogstream.upload.info import FinishedLogInfo, _parsed_sys_uuid, describe, read_sys_uuid
from ulogstream.upload.shipper import LogShipper

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.timeout(60)

WAIT = 15.0


def finished_log(out: Path, data: bytes = b"ULog\x01\x12\x35" + bytes(range(256)) * 40) -> Path:
    """A finished log where the recorder puts one: ``{out}/{date}/{time}.ulg``."""
    path = out / "2026-11-25" / "12_34_56.ulg"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


@pytest.mark.asyncio
async def test_a_real_command_copies_the_log_with_its_placeholders_filled_in(
    tmp_path: Path,
) -> None:
    log = finished_log(tmp_path / "out")
    dest = tmp_path / "remote"
    install = shutil.which("install")
    if install is None:
        pytest.skip("coreutils' install is not on PATH")
    command = f"{install} -D {{path}} {dest}/{{vehicle}}/{{date}}/{{stem}}-{{sha256}}.ulg"
    shipper = LogShipper(UploadSettings(command=command))
    announced: list[FinishedLogInfo] = []

    async with running(shipper.run()):
        shipper.offer(
            log, log.stat().st_size, vehicle="uav-1", how="complete; ok", announce=announced.append
        )
        await asyncio.wait_for(shipper.wait_idle(), WAIT)

    digest = hashlib.sha256(log.read_bytes()).hexdigest()
    copy = dest / "uav-1" / "2026-11-25" / f"12_34_56-{digest}.ulg"
    assert copy.read_bytes() == log.read_bytes()
    assert (shipper.uploaded, shipper.failed, shipper.backlog) == (1, 0, 0)
    (event,) = [info.as_json() for info in announced]
    flight = event.pop("flight")
    assert event == {
        "path": str(log),
        "name": "12_34_56.ulg",
        "size": log.stat().st_size,
        "sha256": digest,
        "sys_uuid": None,
        "start_time": "2026-11-25T12:34:56Z",
        "vehicle": "uav-1",
        "complete": True,
        "how": "complete; ok",
    }
    assert isinstance(flight, dict)  # its flight summary (tests/ulog/test_flight_summary.py)
    assert flight["firmware"] is None  # this log has no version information


@pytest.mark.asyncio
async def test_a_failing_command_is_retried_then_reported_and_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = finished_log(tmp_path)
    script = tmp_path / "upload.sh"
    script.write_text('#!/bin/sh\necho "remote: bucket not found" >&2\nexit 3\n')
    script.chmod(0o755)
    shipper = LogShipper(UploadSettings(command=f"{script} {{path}}", attempts=3, backoff_s=0.01))

    with caplog.at_level(logging.INFO, logger="ulogstream.upload"):
        async with running(shipper.run()):
            shipper.offer(log, 10, vehicle="v", how="incomplete: lost")
            await asyncio.wait_for(shipper.wait_idle(), WAIT)

    assert (shipper.uploaded, shipper.failed) == (0, 1)
    lines = [r.getMessage() for r in caplog.records]
    retries = [line for line in lines if "(attempt" in line]
    assert len(retries) == 2
    assert "exited with 3: remote: bucket not found" in retries[0]
    assert any("failed 3 time(s), given up (the file stays)" in line for line in lines)
    assert shipper.last_error is not None
    assert log.exists()


@pytest.mark.asyncio
async def test_a_command_that_fails_once_succeeds_on_the_retry_and_may_delete(
    tmp_path: Path,
) -> None:
    log = finished_log(tmp_path / "out")
    marker = tmp_path / "tried"
    dest = tmp_path / "copy.ulg"
    script = tmp_path / "flaky.sh"
    script.write_text(
        f'#!/bin/sh\nif [ ! -e {marker} ]; then touch {marker}; exit 1; fi\ncp "$1" {dest}\n'
    )
    script.chmod(0o755)
    data = log.read_bytes()
    settings = UploadSettings(
        command=f"{script} {{path}}", backoff_s=0.01, delete_after_upload=True
    )
    shipper = LogShipper(settings)

    async with running(shipper.run()):
        shipper.offer(log, len(data), vehicle="v", how="complete")
        await asyncio.wait_for(shipper.wait_idle(), WAIT)

    assert (shipper.uploaded, shipper.failed) == (1, 0)
    assert dest.read_bytes() == data
    assert not log.exists()


@pytest.mark.asyncio
async def test_a_command_over_its_timeout_is_killed_and_counts_as_failed(tmp_path: Path) -> None:
    log = finished_log(tmp_path)
    shipper = LogShipper(
        UploadSettings(command="sh -c 'sleep 30' {path}", timeout_s=0.2, attempts=1)
    )

    async with running(shipper.run()):
        shipper.offer(log, 10, vehicle="v", how="complete")
        await asyncio.wait_for(shipper.wait_idle(), WAIT)

    assert shipper.failed == 1
    assert shipper.last_error == "sh took longer than 0.2 s and was killed"


@pytest.mark.asyncio
async def test_a_missing_program_is_reported_not_raised(tmp_path: Path) -> None:
    log = finished_log(tmp_path)
    shipper = LogShipper(
        UploadSettings(command=f"{tmp_path}/no-such-uploader {{path}}", attempts=1)
    )
    async with running(shipper.run()):
        shipper.offer(log, 10, vehicle="v", how="complete")
        await asyncio.wait_for(shipper.wait_idle(), WAIT)

    assert shipper.failed == 1
    assert shipper.last_error is not None
    assert "cannot run" in shipper.last_error


@pytest.mark.asyncio
async def test_a_full_queue_skips_and_counts_instead_of_growing(tmp_path: Path) -> None:
    logs = [finished_log(tmp_path / str(i)) for i in range(4)]
    gate = tmp_path / "gate"
    script = tmp_path / "wait.sh"
    script.write_text(f"#!/bin/sh\nwhile [ ! -e {gate} ]; do sleep 0.02; done\n")
    script.chmod(0o755)
    shipper = LogShipper(UploadSettings(command=f"{script} {{path}}", queue_size=1))

    async with running(shipper.run()):
        for log in logs:
            shipper.offer(log, 10, vehicle="v", how="complete")
            # one at a time through the checksum stage, so the queue sees them in order
            await asyncio.wait_for(shipper.wait_described(), WAIT)
        await eventually(lambda: shipper.skipped == 2, limit=WAIT, what="nothing skipped")
        gate.touch()
        await asyncio.wait_for(shipper.wait_idle(), WAIT)

    assert (shipper.uploaded, shipper.skipped) == (2, 2)


def test_a_log_outside_the_date_folders_gets_its_date_from_the_file(tmp_path: Path) -> None:
    path = tmp_path / "odd-name.ulg"
    path.write_bytes(b"x")

    info = describe(path, 1, vehicle="v", how="incomplete: stream stopped")

    assert info.start_time is None
    assert len(info.date) == len("2026-11-25")
    assert info.complete is False
    assert info.sha256 == hashlib.sha256(b"x").hexdigest()


def test_the_sys_uuid_is_read_from_the_log_header_and_can_be_remembered(tmp_path: Path) -> None:
    out = io.BytesIO()
    generate_flight_log(out, duration_s=1.0, seed=3)
    log = finished_log(tmp_path / "out", out.getvalue())
    state = tmp_path / "out" / ".sys_uuid"
    expected = "000600000000383233333039510700340029"  # the sim's PX4 info

    assert read_sys_uuid(log) == expected
    info = describe(log, len(out.getvalue()), vehicle="v", how="complete")

    assert info.sys_uuid == expected
    assert info.as_json()["sys_uuid"] == expected
    assert recalled_sys_uuid(state) is None
    assert remember_sys_uuid(state, expected)
    assert recalled_sys_uuid(state) == expected
    assert not remember_sys_uuid(state, expected)  # unchanged: not written again
    assert remember_sys_uuid(state, "another")
    assert recalled_sys_uuid(state) == "another"
    assert recalled_sys_uuid(tmp_path / "none") is None
    assert read_sys_uuid(finished_log(tmp_path / "x", b"not a ulog")) is None


@pytest.mark.skipif(not SHARED_ULG_FILES, reason="../shared/data/ulg is only beside a CI checkout")
def test_the_header_walk_reads_the_sys_uuid_the_parser_reads(tmp_path: Path) -> None:
    found = 0
    for path in SHARED_ULG_FILES:
        expected = _parsed_sys_uuid(path)
        assert read_sys_uuid(path) == expected, path.name
        found += expected is not None
        head = path.read_bytes()[:40_000]
        for cut in range(0, len(head), 1999):  # a file cut anywhere in its definitions
            part = tmp_path / "part.ulg"
            part.write_bytes(head[:cut])
            assert read_sys_uuid(part) == _parsed_sys_uuid(part), (path.name, cut)
    assert found >= 5


@pytest.mark.parametrize(
    ("type_name", "value", "expected"),
    [
        ("char[8]", "ab12\0\0\0\0", "ab12"),
        ("uint8_t[4]", b"\x01\x02\xab\x00", "0102ab00"),
        ("uint32_t", 7, "7"),  # another type: the parser's reading
    ],
)
def test_each_type_of_sys_uuid_reads_as_the_parser_reads_it(
    tmp_path: Path, type_name: str, value: str | bytes | int, expected: str
) -> None:
    writer = ULogWriter(timestamp_us=1)
    writer.flag_bits()
    writer.info("char", "sys_name", "PX4")
    writer.info(type_name, "sys_uuid", value)
    writer.format("small:uint64_t timestamp;float x;")
    writer.add_logged_message("small")
    path = tmp_path / "log.ulg"
    path.write_bytes(writer.getvalue())

    assert read_sys_uuid(path) == expected == _parsed_sys_uuid(path)
