"""UlgFileSink and start-up recovery on real files under tmp_path."""

from __future__ import annotations

import errno
import os
import struct
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace

import pytest
from pyulog import ULog

from ulogstream.adapters.file_sink import (
    MB,
    DiskFullError,
    FinishedLog,
    UlgFileSink,
    recover_partial_files,
    whole_messages_end,
)
from ulogstream.adapters.logbook import LOGBOOK_NAME, Logbook
from ulogstream.ulog.spec import HEADER_SIZE, unpack_message_header
from ulogstream.ulog.writer import ULogWriter

START = datetime(2026, 11, 21, 10, 5, 7, tzinfo=UTC)
DAY = 86_400


def sample_log(samples: int = 50) -> bytes:
    writer = ULogWriter(timestamp_us=1_000)
    writer.flag_bits()
    writer.info("char", "sys_name", "PX4")
    writer.format("sample:uint64_t timestamp;float x;")
    writer.parameter("SYS_AUTOSTART", 4001)
    msg_id = writer.add_logged_message("sample")
    for i in range(samples):
        writer.data(msg_id, struct.pack("<Qf", 1_000 + i * 1_000, i / 2))
    writer.logging(ord("6"), 60_000, "done")
    return writer.getvalue()


def split_messages(log: bytes) -> list[bytes]:
    """The file header, then each ULog message: the units the core hands the sink."""
    parts = [log[:HEADER_SIZE]]
    pos = HEADER_SIZE
    while pos < len(log):
        size, _ = unpack_message_header(log, pos)
        parts.append(log[pos : pos + 3 + size])
        pos += 3 + size
    return parts


class FakeDisk:
    """Free space that shrinks as the sink writes (a real disk would, but cannot be filled here)."""

    def __init__(self, sink_dir: Path, free: int) -> None:
        self.sink_dir = sink_dir
        self.start_free = free

    def __call__(self, _path: Path) -> SimpleNamespace:
        used = sum(p.stat().st_size for p in self.sink_dir.rglob("*.ulg*") if p.is_file())
        return SimpleNamespace(free=self.start_free - used)


def closed(sink: UlgFileSink) -> FinishedLog:
    finished = sink.close()
    assert isinstance(finished, FinishedLog)
    return finished


def recorded_log(
    out: Path,
    age_s: float,
    *,
    folder: str | None = None,
    samples: int = 50,
    upload_pending: bool = False,
) -> Path:
    """A log this program recorded (in the logbook), started ``age_s`` before START."""
    sink = UlgFileSink(out, folder=folder, min_free_mb=0, upload_pending=upload_pending)
    sink.start_log(now_utc=START - timedelta(seconds=age_s))
    sink.write(sample_log(samples))
    return closed(sink).path


def interrupted_log(out: Path, content: bytes, *, folder: str | None = None) -> Path:
    """The ``.part`` a crash left mid-log: started, written to, never finished."""
    sink = UlgFileSink(out, folder=folder, min_free_mb=0, tags={"vehicle": folder or ""})
    part = sink.start_log(now_utc=START).path
    sink.write(content)
    sink.flush()
    sink.drop()
    return part


def user_file(path: Path, content: bytes = b"not ours") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return path


def test_start_log_names_the_part_file_by_utc_start_time(tmp_path: Path) -> None:
    sink = UlgFileSink(tmp_path / "logs", min_free_mb=0)
    local = START.astimezone(timezone(timedelta(hours=2)))

    started = sink.start_log(now_utc=local)

    assert started.path == tmp_path / "logs" / "2026-11-21" / "10_05_07.ulg.part"
    assert started.path.is_file()
    assert sink.is_open
    assert sink.path == started.path
    assert started.deleted == ()


def test_an_existing_name_gets_a_numbered_suffix(tmp_path: Path) -> None:
    (tmp_path / "2026-11-21").mkdir()
    (tmp_path / "2026-11-21" / "10_05_07.ulg").write_bytes(b"older log")
    sink = UlgFileSink(tmp_path, min_free_mb=0)

    first = sink.start_log(now_utc=START).path
    sink.write(sample_log())
    closed(sink)
    second = sink.start_log(now_utc=START).path

    assert first.name == "10_05_07_1.ulg.part"
    assert second.name == "10_05_07_2.ulg.part"
    assert (tmp_path / "2026-11-21" / "10_05_07.ulg").read_bytes() == b"older log"


def test_written_data_reaches_the_file_at_flush(tmp_path: Path) -> None:
    sink = UlgFileSink(tmp_path, min_free_mb=0)
    part = sink.start_log(now_utc=START).path
    header, *messages = split_messages(sample_log())

    sink.write(header)
    assert part.read_bytes() == b""  # write() only appends to memory
    assert sink.flush() == []
    assert part.read_bytes() == header  # another handle sees it: it went through os.write
    sink.write(messages[0])
    assert sink.bytes_buffered == len(messages[0])
    sink.flush()
    assert part.read_bytes() == header + messages[0]
    assert sink.bytes_written == len(header + messages[0])
    assert sink.bytes_buffered == 0


def test_a_large_backlog_is_written_without_waiting_for_the_deadline(tmp_path: Path) -> None:
    sink = UlgFileSink(tmp_path, min_free_mb=0, max_buffered=100)
    part = sink.start_log(now_utc=START).path
    log = sample_log()

    for message in split_messages(log):
        sink.write(message)

    assert sink.bytes_buffered <= 100
    assert len(part.read_bytes()) == sink.bytes_written
    assert part.read_bytes() == log[: sink.bytes_written]


def test_close_fsyncs_the_file_then_renames_it_and_fsyncs_the_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sink = UlgFileSink(tmp_path, min_free_mb=0)
    part = sink.start_log(now_utc=START).path
    log = sample_log()
    sink.write(log)
    synced: list[str] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        synced.append(str(Path(f"/proc/self/fd/{fd}").readlink()))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)

    finished = closed(sink)

    final = part.parent / "10_05_07.ulg"
    assert finished.path == final
    assert finished.size == len(log)
    assert finished.disk_full is None
    assert final.read_bytes() == log
    assert not part.exists()
    # The file, then its folder after the rename, then the logbook saying it is finished.
    assert synced == [str(part), str(part.parent), str(tmp_path / LOGBOOK_NAME)]
    assert not sink.is_open
    assert ULog(str(final)).data_list[0].name == "sample"


def test_misuse_raises_runtime_errors(tmp_path: Path) -> None:
    sink = UlgFileSink(tmp_path, min_free_mb=0)
    with pytest.raises(RuntimeError, match="call start_log"):
        sink.write(b"x")
    with pytest.raises(RuntimeError, match="close\\(\\) without an open log"):
        sink.close()
    sink.start_log(now_utc=START)
    with pytest.raises(RuntimeError, match="close\\(\\) it first"):
        sink.start_log(now_utc=START)


@pytest.mark.parametrize("folder", ["", ".", "..", "a/b"])
def test_a_vehicle_folder_must_be_one_path_component(tmp_path: Path, folder: str) -> None:
    with pytest.raises(ValueError, match="one path component"):
        UlgFileSink(tmp_path, folder=folder)


# --- disk guard ------------------------------------------------------------------------------


def test_start_refuses_when_free_space_is_already_below_the_limit(tmp_path: Path) -> None:
    sink = UlgFileSink(tmp_path, min_free_mb=200, disk_usage=FakeDisk(tmp_path, 10 * MB))

    with pytest.raises(DiskFullError) as info:
        sink.start_log(now_utc=START)

    assert str(info.value) == (
        f"disk full: only 10 MB free on {tmp_path} (recording.min_free_mb = 200); recording "
        "goes on once space is freed (delete old logs, or set recording.max_logs or "
        "max_total_mb to rotate them)"
    )
    assert info.value.path is None
    assert not list(tmp_path.rglob("*.part"))


def test_disk_guard_stops_before_the_message_that_crosses_the_limit(tmp_path: Path) -> None:
    log = sample_log(200)
    messages = split_messages(log)
    headroom = len(log) // 2
    sink = UlgFileSink(tmp_path, min_free_mb=1, disk_usage=FakeDisk(tmp_path, MB + headroom))
    part = sink.start_log(now_utc=START).path

    for message in messages:
        sink.write(message)
    with pytest.raises(DiskFullError) as info:
        sink.flush()
    sink.write(b"after the stop")

    written = part.read_bytes()
    assert len(written) <= headroom
    assert written == log[: len(written)]
    assert whole_messages_end(written) == len(written)  # never half a message
    assert len(written) > headroom - max(map(len, messages))
    assert "disk full: only 1 MB free on" in str(info.value)
    assert "(recording.min_free_mb = 1); recording goes on once space is freed" in str(info.value)
    assert sink.stopped is info.value
    finished = closed(sink)
    assert finished.disk_full is info.value
    assert finished.dropped_bytes == len(log) - len(written) + len(b"after the stop")
    assert finished.path.read_bytes() == written
    assert ULog(str(finished.path)).data_list[0].name == "sample"


def test_close_reports_a_limit_reached_by_its_last_flush(tmp_path: Path) -> None:
    log = sample_log(100)
    sink = UlgFileSink(tmp_path, min_free_mb=1, disk_usage=FakeDisk(tmp_path, MB + 600))
    sink.start_log(now_utc=START)
    for message in split_messages(log):
        sink.write(message)

    finished = closed(sink)

    assert finished.disk_full is not None
    assert 0 < finished.size <= 600
    assert finished.size + finished.dropped_bytes == len(log)
    assert finished.path.suffix == ".ulg"


def test_no_space_left_mid_write_cuts_back_to_a_whole_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A real ENOSPC needs a full file system; os.write is replaced to run out mid-message.
    messages = split_messages(sample_log())
    whole = sum(map(len, messages[:10]))
    limit = whole + 5
    sink = UlgFileSink(tmp_path, min_free_mb=0)
    part = sink.start_log(now_utc=START).path
    real_write = os.write

    def filling_write(fd: int, data: bytes | memoryview) -> int:
        room = limit - os.fstat(fd).st_size
        if room <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, bytes(data[:room]))

    monkeypatch.setattr(os, "write", filling_write)
    for message in messages:
        sink.write(message)

    with pytest.raises(DiskFullError):
        sink.flush()

    assert part.read_bytes() == b"".join(messages[:10])
    assert sink.bytes_written == whole
    assert sink.bytes_dropped == sum(map(len, messages[10:]))


# --- rotation --------------------------------------------------------------------------------


def test_max_logs_deletes_the_oldest_recorded_logs_only(tmp_path: Path) -> None:
    oldest = recorded_log(tmp_path, age_s=3 * DAY)
    middle = recorded_log(tmp_path, age_s=2 * DAY)
    newest = recorded_log(tmp_path, age_s=2 * DAY - 60)
    leftover = interrupted_log(tmp_path, sample_log())
    indexes = [log.with_name(log.name + ".json") for log in (oldest, newest)]
    for index in indexes:  # the flight index (upload.sidecar) goes with its log
        index.write_text("{}")
    sink = UlgFileSink(tmp_path, min_free_mb=0, max_logs=2)

    started = sink.start_log(now_utc=START)

    assert started.deleted == (oldest, middle)
    assert newest.exists()
    assert [index.exists() for index in indexes] == [False, True]
    assert leftover.exists()  # .part files are recovery's business, never rotation's
    assert not oldest.parent.exists()  # the emptied day directory is removed, index and all
    assert middle.parent.exists()


def test_rotation_counts_the_logs_of_every_vehicle_in_the_out_dir(tmp_path: Path) -> None:
    oldest = recorded_log(tmp_path, folder="uav1", age_s=3000)
    older = recorded_log(tmp_path, age_s=2500)  # the layout before vehicle folders
    newer = recorded_log(tmp_path, folder="uav2", age_s=2000)
    sink = UlgFileSink(tmp_path, folder="uav2", min_free_mb=0, max_logs=2)

    started = sink.start_log(now_utc=START)

    assert started.deleted == (oldest, older)
    assert newer.exists()
    assert started.path.parent == tmp_path / "uav2" / "2026-11-21"


def test_max_total_mb_deletes_oldest_logs_also_while_recording(tmp_path: Path) -> None:
    a = recorded_log(tmp_path, age_s=300, samples=26_000)  # 390 kB each
    b = recorded_log(tmp_path, age_s=200, samples=26_000)
    c = recorded_log(tmp_path, age_s=100, samples=26_000)
    sink = UlgFileSink(tmp_path, min_free_mb=0, max_total_mb=1)

    started = sink.start_log(now_utc=START)
    assert started.deleted == (a,)  # 1.17 MB -> 0.78 MB

    sink.write(bytes(300_000))

    assert sink.flush() == [b]  # 0.78 MB + 0.3 MB being recorded > 1 MiB
    assert c.exists()
    assert sink.path is not None
    assert sink.path.exists()


def test_rotation_and_recovery_touch_nothing_but_logs_this_program_recorded(
    tmp_path: Path,
) -> None:
    """The tree of issue 21: user files, foreign dated files, symlinks out of ``--out``."""
    out, elsewhere = tmp_path / "archive", tmp_path / "elsewhere"
    log = sample_log()
    outside = {
        user_file(elsewhere / "2024-07-01" / "09_00_00.ulg", log),
        user_file(elsewhere / "uav1" / "2026-11-19" / "08_00_00.ulg", log),
    }
    foreign = {
        user_file(out / "myflights" / "crash_investigation.ulg", log),
        user_file(out / "2024-05-01" / "10_01_00.ulg", log),
        user_file(out / "somevehicle" / "2024-06-01" / "12_00_00.ulg", log),
        user_file(out / "2024-01-01" / "10_00_00.ulg.part", log[:-5]),
        user_file(out / "uav1" / "2026-11-18" / "07_00_00.ulg", log),  # in our vehicle folder
    }
    (out / "fleetX").symlink_to(elsewhere, target_is_directory=True)
    # A log of ours whose day folder was swapped for a symlink to a folder outside --out.
    swapped = recorded_log(out, folder="uav1", age_s=2 * DAY)
    moved = elsewhere / "swapped" / swapped.parent.name
    moved.mkdir(parents=True)
    swapped.rename(moved / swapped.name)
    swapped.parent.rmdir()
    swapped.parent.symlink_to(moved, target_is_directory=True)
    outside.add(moved / swapped.name)
    waiting = recorded_log(out, folder="uav1", age_s=DAY, upload_pending=True)
    ours = [recorded_log(out, folder="uav1", age_s=age) for age in (7000, 6000, 5000)]
    contents = {path: path.read_bytes() for path in outside | foreign}

    recovered = recover_partial_files(out)
    deleted: list[Path] = []
    for _ in range(3):  # three log starts with room for one
        sink = UlgFileSink(out, folder="uav1", min_free_mb=0, max_logs=1, max_total_mb=1)
        deleted += sink.start_log(now_utc=START).deleted
        sink.write(log)
        closed(sink)

    assert recovered == []
    assert {path: path.read_bytes() for path in outside | foreign} == contents
    assert waiting.exists()  # waits for its upload: kept
    assert set(deleted) == set(ours) | {out / "uav1" / "2026-11-21" / "10_05_07.ulg"}
    assert (out / "fleetX").is_symlink()
    Logbook(out).settled(waiting)
    sink = UlgFileSink(out, folder="uav1", min_free_mb=0, max_logs=1)
    newest = out / "uav1" / "2026-11-21" / "10_05_07.ulg"
    assert sink.start_log(now_utc=START).deleted == (waiting, newest)
    assert {path: path.read_bytes() for path in outside | foreign} == contents


def test_rotation_leaves_alone_a_log_replaced_since_it_was_recorded(tmp_path: Path) -> None:
    replaced = recorded_log(tmp_path, age_s=3000)
    replaced.write_bytes(b"a user's own file under the same name")
    sink = UlgFileSink(tmp_path, min_free_mb=0, max_logs=1)

    assert sink.start_log(now_utc=START).deleted == ()
    assert replaced.read_bytes() == b"a user's own file under the same name"


def test_rotation_deletes_a_backfilled_log_by_its_new_size_and_its_first_age(
    tmp_path: Path,
) -> None:
    """A backfill writes the log down as finished again: its size changes, its age does not."""
    old = recorded_log(tmp_path, age_s=3000)
    newer = recorded_log(tmp_path, age_s=2000)
    old.write_bytes(old.read_bytes() + b"\0" * 100)  # completed from the SD log
    Logbook(tmp_path).finished(
        old.with_name(old.name + ".part"), old, old.stat().st_size, upload_pending=False
    )
    sink = UlgFileSink(tmp_path, min_free_mb=0, max_logs=1)

    assert sink.start_log(now_utc=START).deleted == (old, newer)


# --- recovery --------------------------------------------------------------------------------


def test_recovery_finishes_the_logs_of_every_vehicle_and_of_the_older_layout(
    tmp_path: Path,
) -> None:
    log = sample_log()
    parts = [interrupted_log(tmp_path, log, folder=folder) for folder in (None, "uav1", "uav2")]

    recovered = recover_partial_files(tmp_path)

    assert sorted(r.path for r in recovered) == sorted(
        p.with_name(p.name.removesuffix(".part")) for p in parts
    )
    assert all(r.path.read_bytes() == log for r in recovered)
    assert sorted(str(r.tags["vehicle"]) for r in recovered) == ["", "uav1", "uav2"]
    assert recover_partial_files(tmp_path) == []  # written down as finished
    assert [log.path for log in Logbook(tmp_path).finished_logs()] == [
        r.path.relative_to(tmp_path).as_posix() for r in recovered
    ]


def test_recovery_removes_a_log_without_data(tmp_path: Path) -> None:
    messages = split_messages(sample_log())
    first_row = next(i for i, m in enumerate(messages) if i and m[2:3] == b"D")
    part = interrupted_log(tmp_path, b"".join(messages[:first_row]))

    (recovered,) = recover_partial_files(tmp_path)

    assert recovered.discarded
    assert not part.exists()
    assert not list(tmp_path.rglob("*.ulg"))
    assert "it holds no data message" in recovered.message
    assert recover_partial_files(tmp_path) == []


def test_recovery_trims_a_truncated_tail_and_finishes_the_log(tmp_path: Path) -> None:
    log = sample_log()
    whole = len(log) - len(split_messages(log)[-1])
    part = interrupted_log(tmp_path, log[: whole + 5])

    (recovered,) = recover_partial_files(tmp_path)

    final = tmp_path / "2026-11-21" / "10_05_07.ulg"
    assert recovered.path == final
    assert recovered.part_path == part
    assert (recovered.size, recovered.trimmed, recovered.corrupt) == (whole, 5, False)
    assert final.read_bytes() == log[:whole]
    assert not part.exists()
    assert recovered.message == (
        f"recovered {final} from an interrupted recording: kept {whole} bytes, "
        "trimmed 5 bytes of an incomplete last message"
    )
    assert len(ULog(str(final)).data_list[0].data["x"]) == 50


def test_recovery_cuts_zero_filled_blocks_left_by_a_power_cut(tmp_path: Path) -> None:
    log = sample_log()
    interrupted_log(tmp_path, log + bytes(4096))

    (recovered,) = recover_partial_files(tmp_path)

    assert recovered.path.read_bytes() == log
    assert recovered.trimmed == 4096


def test_recovery_of_a_complete_file_keeps_every_byte(tmp_path: Path) -> None:
    log = sample_log()
    part = interrupted_log(tmp_path, log)
    taken = user_file(part.with_name("10_05_07.ulg"), b"taken")

    (recovered,) = recover_partial_files(tmp_path)

    assert recovered.path == part.with_name("10_05_07_1.ulg")
    assert recovered.path.read_bytes() == log
    assert recovered.trimmed == 0
    assert recovered.message == (
        f"recovered {recovered.path} from an interrupted recording ({len(log)} bytes)"
    )
    assert taken.read_bytes() == b"taken"


@pytest.mark.parametrize("content", [b"not a ULog file at all", b"ULo", b""])
def test_a_part_file_without_a_ulog_header_is_kept_aside_as_corrupt(
    tmp_path: Path, content: bytes
) -> None:
    part = interrupted_log(tmp_path, content)

    (recovered,) = recover_partial_files(tmp_path)

    corrupt = tmp_path / "2026-11-21" / "10_05_07.ulg.corrupt"
    assert recovered.corrupt
    assert recovered.path == corrupt
    assert corrupt.read_bytes() == content
    assert recovered.message == (
        f"kept {part} aside as {corrupt}: it does not start with a ULog header "
        f"({len(content)} bytes)"
    )


def test_recovery_of_a_missing_directory_finds_nothing(tmp_path: Path) -> None:
    assert recover_partial_files(tmp_path / "absent") == []


def test_a_sink_recording_after_recovery_does_not_reuse_recovered_names(tmp_path: Path) -> None:
    sink = UlgFileSink(tmp_path, min_free_mb=0)
    sink.start_log(now_utc=START)
    sink.write(sample_log()[:-3])
    sink.flush()
    sink.drop()  # a crash: the file is let go of as it is
    (recovered,) = recover_partial_files(tmp_path)
    assert not recovered.discarded

    again = UlgFileSink(tmp_path, min_free_mb=0).start_log(now_utc=START)

    assert recovered.path.name == "10_05_07.ulg"
    assert again.path.name == "10_05_07_1.ulg.part"


def test_recovery_leaves_alone_a_part_another_recorder_is_writing(tmp_path: Path) -> None:
    writing = UlgFileSink(tmp_path, folder="uav1", min_free_mb=0)  # a live recorder's log
    started = writing.start_log(now_utc=START)
    writing.write(sample_log())
    writing.flush()

    assert recover_partial_files(tmp_path) == []

    finished = closed(writing)
    assert started.path.with_name("10_05_07.ulg") == finished.path
    assert finished.path.read_bytes() == sample_log()
