"""The file lifecycle: every disk call in the worker thread, and a disk fault ends one log only."""

from __future__ import annotations

import asyncio
import errno
import os
import struct
import threading
from pathlib import Path

import pytest

from ulogstream.adapters import file_sink
from ulogstream.adapters.file_sink import UlgFileSink
from ulogstream.adapters.log_files import (
    FileEvent,
    FinishFailed,
    LogFailed,
    LogFiles,
    LogFinished,
    LogOpened,
)
from ulogstream.ulog.writer import ULogWriter


def sample_log(rows: int = 50) -> bytes:
    writer = ULogWriter(timestamp_us=1_000)
    writer.flag_bits()
    writer.format("sample:uint64_t timestamp;float x;")
    msg_id = writer.add_logged_message("sample")
    for row in range(rows):
        writer.data(msg_id, struct.pack("<Qf", row * 1_000, row / 2))
    return writer.getvalue()


class Events:
    """Collects what the worker reports, on the loop."""

    def __init__(self) -> None:
        self.events: list[FileEvent] = []

    def __call__(self, event: FileEvent) -> None:
        self.events.append(event)

    def of(self, kind: type[FileEvent]) -> list[FileEvent]:
        return [event for event in self.events if isinstance(event, kind)]


async def record_logs(files: LogFiles, logs: list[bytes]) -> None:
    for log in logs:
        files.start_log()
        files.write(log)
        files.finish_log("complete")
    await files.aclose()


@pytest.mark.asyncio
async def test_every_disk_call_runs_in_the_worker_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads: set[int] = set()
    for name in ("open", "write", "fsync", "rename", "mkdir"):
        real = getattr(os, name)

        def spy(*args: object, _real: object = real, **kwargs: object) -> object:
            threads.add(threading.get_ident())
            return _real(*args, **kwargs)  # type: ignore[operator]

        monkeypatch.setattr(os, name, spy)
    events = Events()
    files = LogFiles(UlgFileSink(tmp_path, min_free_mb=0), events)
    files.start()
    log = sample_log()
    await record_logs(files, [log, log])
    finished = events.of(LogFinished)
    assert [e.finished.path.read_bytes() for e in finished] == [log, log]  # type: ignore[union-attr]
    assert threads
    assert threading.get_ident() not in threads


@pytest.mark.asyncio
async def test_a_failed_finalise_keeps_the_part_and_the_next_log_is_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_finalise = file_sink._finalise
    calls = 0

    def failing_once(log: object) -> Path:
        nonlocal calls
        calls += 1
        if calls == 1:
            os.close(log.fd)  # type: ignore[attr-defined]
            raise OSError(errno.EIO, "Input/output error")
        return real_finalise(log)  # type: ignore[arg-type]

    monkeypatch.setattr(file_sink, "_finalise", failing_once)
    events = Events()
    files = LogFiles(UlgFileSink(tmp_path, min_free_mb=0), events)
    files.start()
    first, second = sample_log(10), sample_log(20)
    await record_logs(files, [first, second])
    (failed,) = events.of(FinishFailed)
    assert isinstance(failed, FinishFailed)
    assert failed.path.name.endswith(".ulg.part")
    assert failed.path.read_bytes() == first  # kept for start-up recovery
    (finished,) = events.of(LogFinished)
    assert isinstance(finished, LogFinished)
    assert finished.finished.path.read_bytes() == second


@pytest.mark.asyncio
async def test_a_write_error_ends_that_log_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_write = os.write
    failing = True

    def read_only_once(fd: int, data: bytes) -> int:
        nonlocal failing
        if failing and str(Path(f"/proc/self/fd/{fd}").readlink()).endswith(".ulg.part"):
            failing = False
            raise OSError(errno.EROFS, "Read-only file system")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", read_only_once)
    events = Events()
    files = LogFiles(UlgFileSink(tmp_path, min_free_mb=0), events)
    files.start()
    first, second = sample_log(10), sample_log(20)
    await record_logs(files, [first, second])
    (failed,) = events.of(LogFailed)
    assert isinstance(failed, LogFailed)
    assert "Read-only file system" in failed.error
    assert failed.path is not None
    assert failed.path.exists()  # the .part stays for recovery
    (finished,) = events.of(LogFinished)
    assert isinstance(finished, LogFinished)
    assert finished.finished.path.read_bytes() == second


@pytest.mark.asyncio
async def test_a_log_that_cannot_start_is_reported_and_the_next_one_tries_again(
    tmp_path: Path,
) -> None:
    blocked = tmp_path / "recordings"
    blocked.write_text("a file where the directory should be")
    events = Events()
    files = LogFiles(UlgFileSink(blocked, min_free_mb=0), events)
    files.start()
    files.start_log()
    files.write(sample_log())
    files.finish_log("complete")
    for _ in range(500):
        if events.of(LogFailed):
            break
        await asyncio.sleep(0.01)
    (failed,) = events.of(LogFailed)
    assert isinstance(failed, LogFailed)
    assert failed.path is None
    assert "cannot start a log file" in failed.error
    blocked.unlink()
    await record_logs(files, [sample_log(5)])
    assert [type(e) for e in events.events] == [LogFailed, LogOpened, LogFinished]


@pytest.mark.asyncio
async def test_backlog_is_bounded_when_the_disk_stalls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stalled = threading.Event()
    real_flush = UlgFileSink.flush

    def stalling_flush(self: UlgFileSink) -> list[Path]:
        stalled.wait(10)
        return real_flush(self)

    monkeypatch.setattr(UlgFileSink, "flush", stalling_flush)
    events = Events()
    files = LogFiles(
        UlgFileSink(tmp_path, min_free_mb=0), events, max_pending=1000, max_backlog=10_000
    )
    files.start()
    files.start_log()
    log = sample_log(60)  # a little over 1000 bytes, with data: the rest are zero-size messages
    chunk = bytes(1000)
    files.write(log)
    for _ in range(50):
        files.write(chunk)
    assert files.backlog <= 10_000 + 1000
    assert files.bytes_dropped >= len(log) + 50 * 1000 - 11_000 - len(log)
    stalled.set()
    files.finish_log("complete")
    await files.aclose()
    (finished,) = events.of(LogFinished)
    assert isinstance(finished, LogFinished)
    assert finished.finished.size + files.bytes_dropped == len(log) + 50 * 1000


@pytest.mark.asyncio
async def test_the_next_log_starts_while_the_previous_one_is_finished(tmp_path: Path) -> None:
    events = Events()
    files = LogFiles(UlgFileSink(tmp_path, min_free_mb=0), events)
    files.start()
    logs = [sample_log(rows) for rows in (5, 6, 7)]
    for log in logs:
        files.start_log()  # never waits for the previous file's fsync and rename
        files.write(log)
        files.finish_log("complete")
    await asyncio.wait_for(files.aclose(), 10)
    finished = [e for e in events.events if isinstance(e, LogFinished)]
    assert [e.finished.path.read_bytes() for e in finished] == logs
