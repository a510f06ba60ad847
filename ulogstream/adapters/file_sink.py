"""Recording to disk: one ``.ulg`` per log, with a free-space guard and rotation (blocking I/O).

A log is written to ``{out_dir}/{vehicle}/{YYYY-MM-DD}/{HH_MM_SS}.ulg.part`` (UTC, like PX4's SD
card) and renamed to ``.ulg`` once it is complete and fsynced. A log continued in a second file
(the disk was full, or the link was away past the idle timeout while the vehicle streamed on)
is named after the first: ``{HH_MM_SS}_part2.ulg``. A log that ends without one data message
(PX4 ended its stream during the header) is not a flight, and its file is removed.

Every log is written down in the :class:`~ulogstream.adapters.logbook.Logbook` of ``out_dir``;
rotation and :func:`recover_partial_files` touch only the logs written down there (never a
user's file, never through a symlink), and rotation never a log that waits for its upload.
Rotation counts the logs of every vehicle in ``out_dir`` (one disk).

Every method here may block on the disk: the recorder calls them from its file worker thread
only (:mod:`ulogstream.adapters.log_files`), never from the event loop. The caller only hands
over whole ULog messages, so the file on disk always ends on a message boundary except after a
crash mid-``write``; :func:`recover_partial_files` trims such leftovers at start-up.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import itertools
import logging
import mmap
import os
import shutil
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import msgspec

from ulogstream.adapters.logbook import LOG_LAYOUT, Logbook, Tags
from ulogstream.errors import UlogstreamError
from ulogstream.ulog.spec import (
    HEADER_SIZE,
    MAGIC,
    MESSAGE_HEADER_SIZE,
    MessageType,
    unpack_message_header,
)

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping


logger = logging.getLogger("ulogstream")

MB = 1 << 20
"""Bytes per MB in every size setting and message (as ``df -m`` counts)."""

DEFAULT_MAX_BUFFERED = 4 << 20
"""Pending bytes that force an early ``os.write`` (about 8 s at the USB streaming ceiling)."""

SUFFIX = ".ulg"
PART_SUFFIX = ".ulg.part"
CORRUPT_SUFFIX = ".ulg.corrupt"


class DiskUsage(Protocol):
    """What the disk guard reads from :func:`shutil.disk_usage`."""

    @property
    def free(self) -> int:
        """Bytes available to unprivileged users."""
        ...


DiskUsageFunction = Callable[[Path], DiskUsage]


class DiskFullError(UlogstreamError):
    """The log stopped taking data because the disk reached the configured minimum free space.

    Args:
        directory: The directory whose file system is full.
        free_bytes: Free bytes when recording stopped.
        min_free_mb: The configured limit.
        path: The log that was finished early, or None when no log could be started.
    """

    def __init__(
        self, *, directory: Path, free_bytes: int, min_free_mb: int, path: Path | None
    ) -> None:
        super().__init__(
            f"disk full: only {free_bytes // MB} MB free on {directory} "
            f"(recording.min_free_mb = {min_free_mb}); recording goes on once space is freed "
            f"(delete old logs, or set recording.max_logs or max_total_mb to rotate them)"
        )
        self.directory = directory
        self.free_bytes = free_bytes
        self.min_free_mb = min_free_mb
        self.path = path


class StartedLog(msgspec.Struct, frozen=True):
    """A log that was opened, and the old logs rotation deleted to make room for it."""

    path: Path
    """The ``.ulg.part`` file being written."""
    deleted: tuple[Path, ...]
    """Finished logs deleted by ``max_logs`` / ``max_total_mb``, oldest first."""


class DiscardedLog(msgspec.Struct, frozen=True):
    """A log that ended without one data message: not a flight, so its file was removed.

    PX4 ends its stream when an ACKED packet of the header goes unanswered for 2.5 s (a blackout
    at the start); the header and parameters it held come again in the next log.
    """

    part_path: Path
    size: int


class FinishedLog(msgspec.Struct, frozen=True):
    """A log that was closed and renamed to ``.ulg``."""

    path: Path
    size: int
    """Bytes in the file."""
    dropped_bytes: int
    """Bytes handed to :meth:`UlgFileSink.write` that were not written (disk full)."""
    disk_full: DiskFullError | None
    """Why the log was finished early, if it was."""


class RecoveredFile(msgspec.Struct, frozen=True):
    """A ``.ulg.part`` left by an interrupted recording, and what start-up recovery did with it."""

    part_path: Path
    """Where the leftover was."""
    path: Path
    """Where it is now: a ``.ulg``, or a ``.ulg.corrupt`` kept aside."""
    size: int
    """Bytes kept."""
    trimmed: int
    """Bytes cut off the end (an incomplete last message)."""
    corrupt: bool
    """True when the file has no valid ULog header and was kept aside, untouched."""
    tags: Tags
    """What the recorder that wrote it said of it (vehicle, link, system id)."""
    discarded: bool = False
    """True when it held no data message: removed, as a log without data is no flight."""

    @property
    def message(self) -> str:
        """One log line saying what happened."""
        if self.discarded:
            return (
                f"removed {self.part_path} left by an interrupted recording: it holds no data "
                f"message ({self.size} bytes of header and definitions)"
            )
        if self.corrupt:
            return (
                f"kept {self.part_path} aside as {self.path}: it does not start with a ULog "
                f"header ({self.size} bytes)"
            )
        if self.trimmed:
            return (
                f"recovered {self.path} from an interrupted recording: kept {self.size} bytes, "
                f"trimmed {self.trimmed} bytes of an incomplete last message"
            )
        return f"recovered {self.path} from an interrupted recording ({self.size} bytes)"


class _OpenLog(msgspec.Struct):
    fd: int
    part_path: Path
    final_path: Path
    size: int = 0
    dir_synced: bool = False


class _Series(msgspec.Struct):
    """The files of one log: the first one's folder and stem, and how many there are."""

    folder: Path
    stem: str
    files: int = 1


class UlgFileSink:
    """Writes logs to ``out_dir/folder``, one file per log, with a free-space guard and rotation.

    Args:
        out_dir: Root of the recordings, created when missing.
        folder: The vehicle's folder in ``out_dir`` (its vehicle id: one path component);
            None: logs go straight to ``out_dir/{date}/``.
        min_free_mb: Stop a log cleanly before free space would drop below this.
        max_logs: Keep at most this many finished logs in ``out_dir`` (every vehicle's, the new
            one included); 0: no limit. Only logs in the logbook count and are deleted.
        max_total_mb: Keep the finished logs in ``out_dir`` plus the current one under this
            size; 0: no limit.
        max_buffered: Pending bytes that make :meth:`write` flush at once (bounds memory).
        disk_usage: Free-space probe; :func:`shutil.disk_usage` except in tests.
        tags: Written down with each log in the logbook (vehicle, link, system id), and given
            back by recovery.
        upload_pending: Finished logs wait for an upload: rotation leaves them alone until the
            logbook hears :meth:`~ulogstream.adapters.logbook.Logbook.settled`.
    """

    def __init__(
        self,
        out_dir: Path,
        *,
        folder: str | None = None,
        min_free_mb: int = 200,
        max_logs: int = 0,
        max_total_mb: int = 0,
        max_buffered: int = DEFAULT_MAX_BUFFERED,
        disk_usage: DiskUsageFunction = shutil.disk_usage,
        tags: Mapping[str, str | int] | None = None,
        upload_pending: bool = False,
    ) -> None:
        if folder is not None and (folder in {"", ".", ".."} or "/" in folder or "\0" in folder):
            msg = f"the vehicle folder must be one path component, not {folder!r}"
            raise ValueError(msg)
        self.out_dir = out_dir
        self.folder = out_dir if folder is None else out_dir / folder
        """Where this sink's logs go: ``out_dir/folder/{date}/``."""
        self._min_free_mb = min_free_mb
        self._max_logs = max_logs
        self._max_total_bytes = max_total_mb * MB
        self._max_buffered = max_buffered
        self._disk_usage = disk_usage
        self._tags: Tags = dict(tags or {})
        self._upload_pending = upload_pending
        self.logbook = Logbook(out_dir)
        self._log: _OpenLog | None = None
        self._series: _Series | None = None
        self._pending: list[bytes] = []
        self._pending_size = 0
        self._stopped: DiskFullError | None = None
        self._finished_bytes = 0
        """Bytes of the finished logs in the logbook at the last start (``max_total_mb``)."""
        self.bytes_dropped = 0
        """Bytes of the current log discarded after the disk guard stopped it."""

    @property
    def is_open(self) -> bool:
        """True between :meth:`start_log` and :meth:`close`."""
        return self._log is not None

    @property
    def path(self) -> Path | None:
        """The ``.ulg.part`` file being written, if any."""
        return None if self._log is None else self._log.part_path

    @property
    def bytes_written(self) -> int:
        """Bytes of the current log handed to the kernel (``os.write``)."""
        return 0 if self._log is None else self._log.size

    @property
    def bytes_buffered(self) -> int:
        """Bytes of the current log still in memory."""
        return self._pending_size

    @property
    def stopped(self) -> DiskFullError | None:
        """Why the current log stopped taking data, if the disk guard stopped it."""
        return self._stopped

    def start_log(self, *, now_utc: datetime | None = None, continues: bool = False) -> StartedLog:
        """Apply rotation, check free space and create the ``.ulg.part`` of a new log.

        Args:
            now_utc: Start time naming the file (tests); the current UTC time by default.
            continues: The file continues the log of the previous file (which the disk or the
                link cut short): it is named after that one, ``{HH_MM_SS}_part2.ulg``, ...

        Raises:
            DiskFullError: Free space is below the limit; no file is created.
            RuntimeError: A log is already open.
        """
        if self._log is not None:
            msg = f"start_log() while {self._log.part_path} is open; close() it first"
            raise RuntimeError(msg)
        now = datetime.now(UTC) if now_utc is None else now_utc.astimezone(UTC)
        if not continues:
            self._series = None  # a file of a new log: never named after an earlier one
        self.folder.mkdir(parents=True, exist_ok=True)
        deleted = self._rotate()
        free = self._disk_usage(self.folder).free
        if free < self._min_free_mb * MB:
            raise DiskFullError(
                directory=self.folder,
                free_bytes=free,
                min_free_mb=self._min_free_mb,
                path=None,
            )
        suffixes = (SUFFIX, PART_SUFFIX, CORRUPT_SUFFIX)
        series = self._series
        if continues and series is not None:
            series.files += 1
            day_dir = series.folder
            day_dir.mkdir(parents=True, exist_ok=True)
            stem = _unused_stem(day_dir, f"{series.stem}_part{series.files}", suffixes)
        else:
            day_dir = self.folder / now.strftime("%Y-%m-%d")
            day_dir.mkdir(exist_ok=True)
            stem = _unused_stem(day_dir, now.strftime("%H_%M_%S"), suffixes)
            self._series = _Series(day_dir, stem)
        part_path = day_dir / f"{stem}{PART_SUFFIX}"
        self.logbook.started(part_path, self._tags)
        fd = os.open(part_path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        # Held until the file is closed: start-up recovery of another recorder sharing out_dir
        # leaves a .part alone while its writer lives (see recover_partial_files).
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        self._log = _OpenLog(fd=fd, part_path=part_path, final_path=day_dir / f"{stem}{SUFFIX}")
        self._stopped = None
        self.bytes_dropped = 0
        return StartedLog(path=part_path, deleted=tuple(deleted))

    def write(self, data: bytes) -> None:
        """Append whole ULog messages to the current log (in memory: never waits on the disk).

        After the disk guard stopped the log, data is counted in :attr:`bytes_dropped`.

        Raises:
            DiskFullError: Only when more than ``max_buffered`` bytes were pending and the early
                flush reached the free-space limit.
            RuntimeError: No log is open.
        """
        if self._log is None:
            msg = "write() without an open log; call start_log() first"
            raise RuntimeError(msg)
        if self._stopped is not None:
            self.bytes_dropped += len(data)
            return
        self._pending.append(data)
        self._pending_size += len(data)
        if self._pending_size > self._max_buffered:
            self.flush()

    def flush(self) -> list[Path]:
        """Hand every pending byte to the kernel with ``os.write`` now (no fsync).

        The free-space guard runs first: if writing everything would leave less than
        ``min_free_mb``, only the whole messages that fit are written and the log stops taking
        data. Finish it with :meth:`aclose`.

        Returns:
            Finished logs ``max_total_mb`` rotation deleted to make room, oldest first.

        Raises:
            DiskFullError: Once, when the free-space limit stops the log.
            OSError: The disk failed (read-only, EIO, ...): end the log with :meth:`drop`.
        """
        log = self._log
        if log is None or not self._pending:
            return []
        chunks, self._pending, pending_size = self._pending, [], self._pending_size
        self._pending_size = 0
        deleted = self._enforce_total(log.size + pending_size) if self._max_total_bytes else []
        free = self._disk_usage(log.part_path.parent).free
        budget = free - self._min_free_mb * MB
        if pending_size <= budget:
            self._write_chunks(log, chunks)
            return deleted
        fitting: list[bytes] = []
        used = 0
        for chunk in chunks:
            if used + len(chunk) > budget:
                break
            fitting.append(chunk)
            used += len(chunk)
        self._write_chunks(log, fitting)
        self._stop(log, dropped=pending_size - used, free_bytes=free - used)
        return deleted  # pragma: no cover (_stop raises)

    def fsync(self) -> None:
        """Fsync the current log (and its directory, once): blocking, for a worker thread."""
        if self._log is not None:
            _sync_log(self._log)

    def drop(self) -> Path | None:
        """Let go of the current log after a disk error: close it, keep its ``.ulg.part``.

        Pending bytes are discarded; start-up recovery finishes the ``.part`` later.
        """
        log, self._log = self._log, None
        self._pending, self._pending_size = [], 0
        self._stopped = None
        if log is None:
            return None
        with contextlib.suppress(OSError):
            os.close(log.fd)
        return log.part_path

    def close(self) -> FinishedLog | DiscardedLog:
        """Flush, fsync and rename the current log to ``.ulg`` (or remove it: no data in it).

        The log is let go of first: if fsync or rename fails, its ``.ulg.part`` stays on disk
        for start-up recovery and the next :meth:`start_log` works.

        Raises:
            RuntimeError: No log is open.
            OSError: fsync or rename failed.
        """
        log = self._log
        if log is None:
            msg = "close() without an open log"
            raise RuntimeError(msg)
        with contextlib.suppress(DiskFullError):  # reported through FinishedLog.disk_full
            self.flush()
        dropped, stopped = self.bytes_dropped, self._stopped
        self._log = None
        self._stopped = None
        if not _holds_data(log.fd, log.size):
            os.close(log.fd)
            log.part_path.unlink(missing_ok=True)
            self.logbook.gone(log.part_path)
            if self._series is not None and self._series.stem == log.part_path.name.removesuffix(
                PART_SUFFIX
            ):
                self._series = None  # a later file of this log is named as a first one
            return DiscardedLog(log.part_path, log.size)
        final = _finalise(log)
        self.logbook.finished(log.part_path, final, log.size, upload_pending=self._upload_pending)
        return FinishedLog(path=final, size=log.size, dropped_bytes=dropped, disk_full=stopped)

    def _write_chunks(self, log: _OpenLog, chunks: list[bytes]) -> None:
        data = memoryview(b"".join(chunks))
        written = 0
        try:
            while written < len(data):
                written += os.write(log.fd, data[written:])
        except OSError as err:
            if err.errno != errno.ENOSPC:
                raise
            # Never leave half a message: cut back to the last whole chunk that made it.
            whole = max(
                (end for end in itertools.accumulate(map(len, chunks)) if end <= written),
                default=0,
            )
            os.ftruncate(log.fd, log.size + whole)
            log.size += whole
            self._stop(log, dropped=len(data) - whole, free_bytes=0)
        log.size += written

    def _stop(self, log: _OpenLog, *, dropped: int, free_bytes: int) -> None:
        self.bytes_dropped += dropped
        self._stopped = DiskFullError(
            directory=log.part_path.parent,
            free_bytes=max(0, free_bytes),
            min_free_mb=self._min_free_mb,
            path=log.final_path,
        )
        raise self._stopped

    def _rotate(self) -> list[Path]:
        """Make room for a new log: ``max_logs`` counts it, ``max_total_mb`` starts it at 0."""
        if not self._max_logs and not self._max_total_bytes:
            return []
        deleted = self.logbook.rotate(
            max_logs=self._max_logs, max_total_bytes=self._max_total_bytes, current_size=0
        )
        self._finished_bytes = sum(log.size or 0 for log in self.logbook.finished_logs())
        return deleted

    def _enforce_total(self, current_size: int) -> list[Path]:
        """``max_total_mb`` while a log grows: the logbook is read only once it may be over."""
        if self._finished_bytes + current_size <= self._max_total_bytes:
            return []
        deleted = self.logbook.rotate(
            max_logs=0, max_total_bytes=self._max_total_bytes, current_size=current_size
        )
        self._finished_bytes = sum(log.size or 0 for log in self.logbook.finished_logs())
        return deleted


def recover_partial_files(out_dir: Path, *, upload_pending: bool = False) -> list[RecoveredFile]:
    """Finish the ``.ulg.part`` files an interrupted recording of this program left in ``out_dir``.

    Only the ``.part`` files the logbook has as started and never finished are looked at: a
    user's file, or a ``.part`` copied from elsewhere, is never touched. Each is trimmed to its
    last whole ULog message and renamed to ``.ulg`` (written down as finished, waiting for an
    upload when ``upload_pending``); one without a data message is removed (no flight); one
    without a ULog header is renamed ``.ulg.corrupt`` and left as it was. A ``.part`` that
    another recorder sharing ``out_dir`` is writing (it holds a lock on it) is left alone.
    Run it before any sink of this recorder opens.
    """
    if not out_dir.is_dir():
        return []
    logbook = Logbook(out_dir)
    recovered: list[RecoveredFile] = []
    for entry in logbook.unfinished():
        part = out_dir / entry.path
        if not LOG_LAYOUT.match(entry.path) or not entry.path.endswith(PART_SUFFIX):
            continue
        if _has_symlink(out_dir, entry.path):
            logger.warning("left %s alone: a folder on its path is a symlink", part)
            logbook.gone(part)
            continue
        result = _recover(part, entry.tags)
        if result is None:
            continue
        if result.corrupt or result.discarded:
            logbook.gone(part)
        elif result.size >= 0:
            logbook.finished(part, result.path, result.size, upload_pending=upload_pending)
        recovered.append(result)
    return recovered


def _has_symlink(out_dir: Path, relative: str) -> bool:
    """Whether a folder or the file on ``relative`` (below ``out_dir``) is a symlink."""
    path = out_dir
    for name in relative.split("/"):
        path /= name
        if path.is_symlink():
            return True
    return False


def _holds_data(fd: int, size: int) -> bool:
    """Whether the log in ``fd`` (``size`` bytes) holds one data ('D') message.

    Walks message headers from the start and stops at the first 'D' (a few hundred KB into a
    real log: after its definitions and subscriptions).
    """
    if size <= HEADER_SIZE:
        return False
    with mmap.mmap(fd, size, access=mmap.ACCESS_READ) as mapped, memoryview(mapped) as view:
        pos = HEADER_SIZE
        data = MessageType.DATA
        while pos + MESSAGE_HEADER_SIZE <= size:
            msg_size, msg_type = unpack_message_header(view, pos)
            if msg_type == data:
                return True
            pos += MESSAGE_HEADER_SIZE + msg_size
    return False


def whole_messages_end(data: bytes | bytearray | memoryview) -> int:
    """Offset just past the last whole ULog message in ``data`` (a file starting with its header).

    The walk also stops at a message type that is not an ASCII letter: every ULog type is one,
    and a power cut can leave zero-filled blocks at the end of a file.
    """
    size = len(data)
    pos = HEADER_SIZE
    while pos + MESSAGE_HEADER_SIZE <= size:
        msg_size, msg_type = unpack_message_header(data, pos)
        if not (0x41 <= msg_type <= 0x5A or 0x61 <= msg_type <= 0x7A):  # noqa: PLR2004
            break
        end = pos + MESSAGE_HEADER_SIZE + msg_size
        if end > size:
            break
        pos = end
    return min(pos, size)


def _recover(part: Path, tags: Tags) -> RecoveredFile | None:
    stem = part.name.removesuffix(PART_SUFFIX)
    try:
        file = part.open("r+b")
    except FileNotFoundError:  # its writer finished it meanwhile
        return None
    with file:
        try:
            fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # a live recorder is writing it
            return None
        size = os.fstat(file.fileno()).st_size
        header = file.read(HEADER_SIZE)
        if len(header) < HEADER_SIZE or not header.startswith(MAGIC):
            corrupt_stem = _unused_stem(part.parent, stem, (CORRUPT_SUFFIX,))
            corrupt = part.with_name(f"{corrupt_stem}{CORRUPT_SUFFIX}")
            part.rename(corrupt)
            _fsync_dir(part.parent)
            return RecoveredFile(part, corrupt, size, 0, corrupt=True, tags=tags)
        keep = HEADER_SIZE
        if size > HEADER_SIZE:
            with (
                mmap.mmap(file.fileno(), size, access=mmap.ACCESS_READ) as mapped,
                memoryview(mapped) as view,
            ):
                keep = whole_messages_end(view)
        if keep < size:
            file.truncate(keep)
        if not _holds_data(file.fileno(), keep):
            part.unlink()
            _fsync_dir(part.parent)
            return RecoveredFile(
                part, part, keep, size - keep, corrupt=False, tags=tags, discarded=True
            )
        file.flush()
        os.fsync(file.fileno())
        final = part.with_name(f"{_unused_stem(part.parent, stem, (SUFFIX,))}{SUFFIX}")
        part.rename(final)  # under the lock: no other recorder takes the file meanwhile
    _fsync_dir(part.parent)
    return RecoveredFile(part, final, keep, size - keep, corrupt=False, tags=tags)


def _unused_stem(directory: Path, stem: str, suffixes: Iterable[str]) -> str:
    """``stem``, or ``stem_1``, ``stem_2``... so that no ``stem + suffix`` exists yet."""
    suffixes = tuple(suffixes)
    for index in itertools.count():
        candidate = stem if index == 0 else f"{stem}_{index}"
        if not any((directory / f"{candidate}{suffix}").exists() for suffix in suffixes):
            return candidate
    raise AssertionError  # pragma: no cover (itertools.count() never ends)


def _sync_log(log: _OpenLog) -> None:
    os.fsync(log.fd)
    if not log.dir_synced:
        _fsync_dir(log.part_path.parent)
        log.dir_synced = True


def _finalise(log: _OpenLog) -> Path:
    """fsync, close and rename ``log`` to its ``.ulg`` name; fsync the directory."""
    try:
        os.fsync(log.fd)
    finally:
        os.close(log.fd)
    final = log.final_path
    if final.exists():  # someone else took the name meanwhile: never overwrite
        final = final.with_name(f"{_unused_stem(final.parent, final.stem, (SUFFIX,))}{SUFFIX}")
    log.part_path.rename(final)
    _fsync_dir(final.parent)
    return final


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
