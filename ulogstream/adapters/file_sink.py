"""Recording to disk: one ``.ulg`` per log, with a free-space guard and rotation (blocking I/O).

A log is written to ``{out_dir}/{vehicle}/{YYYY-MM-DD}/{HH_MM_SS}.ulg.part`` (UTC, like PX4's SD
card) and renamed to ``.ulg`` once it is complete and fsynced; rotation counts the logs of every
vehicle in ``out_dir`` (one disk). Every method here may block on the disk:
the recorder calls them from its file worker thread only
(:mod:`ulogstream.adapters.log_files`), never from the event loop. The caller only hands over
whole ULog messages, so the file on disk always ends on a message boundary except after a crash
mid-``write``; :func:`recover_partial_files` trims such leftovers at start-up.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import itertools
import mmap
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ulogstream.errors import UlogstreamError
from ulogstream.ulog.spec import HEADER_SIZE, MAGIC, MESSAGE_HEADER_SIZE, unpack_message_header

if TYPE_CHECKING:
    from collections.abc import Iterable

    from ulogstream.config import RecordingSettings

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
    """Recording stopped because the disk reached the configured minimum free space.

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
            f"recording stopped: only {free_bytes // MB} MB free on {directory} "
            f"(min_free_mb = {min_free_mb}); free space or lower the limit"
        )
        self.directory = directory
        self.free_bytes = free_bytes
        self.min_free_mb = min_free_mb
        self.path = path


@dataclass(frozen=True, slots=True)
class StartedLog:
    """A log that was opened, and the old logs rotation deleted to make room for it."""

    path: Path
    """The ``.ulg.part`` file being written."""
    deleted: tuple[Path, ...]
    """Finished logs deleted by ``max_logs`` / ``max_total_mb``, oldest first."""


@dataclass(frozen=True, slots=True)
class FinishedLog:
    """A log that was closed and renamed to ``.ulg``."""

    path: Path
    size: int
    """Bytes in the file."""
    dropped_bytes: int
    """Bytes handed to :meth:`UlgFileSink.write` that were not written (disk full)."""
    disk_full: DiskFullError | None
    """Why the log was finished early, if it was."""


@dataclass(frozen=True, slots=True)
class RecoveredFile:
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

    @property
    def message(self) -> str:
        """One log line saying what happened."""
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


@dataclass(slots=True)
class _OpenLog:
    fd: int
    part_path: Path
    final_path: Path
    size: int = 0
    dir_synced: bool = False


class UlgFileSink:
    """Writes logs to ``out_dir/folder``, one file per log, with a free-space guard and rotation.

    Args:
        out_dir: Root of the recordings, created when missing.
        folder: The vehicle's folder in ``out_dir`` (its vehicle id: one path component);
            None: logs go straight to ``out_dir/{date}/``.
        min_free_mb: Stop a log cleanly before free space would drop below this.
        max_logs: Keep at most this many finished logs in ``out_dir`` (every vehicle's, the new
            one included); 0: no limit.
        max_total_mb: Keep the finished logs in ``out_dir`` plus the current one under this
            size; 0: no limit.
        max_buffered: Pending bytes that make :meth:`write` flush at once (bounds memory).
        disk_usage: Free-space probe; :func:`shutil.disk_usage` except in tests.
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
        self._log: _OpenLog | None = None
        self._pending: list[bytes] = []
        self._pending_size = 0
        self._stopped: DiskFullError | None = None
        self._finished: list[tuple[Path, int]] = []
        self.bytes_dropped = 0
        """Bytes of the current log discarded after the disk guard stopped it."""

    @classmethod
    def from_settings(
        cls, recording: RecordingSettings, *, folder: str | None = None
    ) -> UlgFileSink:
        """A sink configured by the ``[recording]`` settings, writing into ``out_dir/folder``."""
        return cls(
            recording.out_dir,
            folder=folder,
            min_free_mb=recording.min_free_mb,
            max_logs=recording.max_logs,
            max_total_mb=recording.max_total_mb,
        )

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

    def start_log(self, *, now_utc: datetime | None = None) -> StartedLog:
        """Apply rotation, check free space and create the ``.ulg.part`` of a new log.

        Args:
            now_utc: Start time naming the file (tests); the current UTC time by default.

        Raises:
            DiskFullError: Free space is already below the limit; no file is created.
            RuntimeError: A log is already open.
        """
        if self._log is not None:
            msg = f"start_log() while {self._log.part_path} is open; close() it first"
            raise RuntimeError(msg)
        now = datetime.now(UTC) if now_utc is None else now_utc.astimezone(UTC)
        self.folder.mkdir(parents=True, exist_ok=True)
        self._finished = _finished_logs(self.out_dir)
        deleted = self._rotate()
        free = self._disk_usage(self.folder).free
        if free < self._min_free_mb * MB:
            raise DiskFullError(
                directory=self.folder,
                free_bytes=free,
                min_free_mb=self._min_free_mb,
                path=None,
            )
        day_dir = self.folder / now.strftime("%Y-%m-%d")
        day_dir.mkdir(exist_ok=True)
        stem = _unused_stem(
            day_dir, now.strftime("%H_%M_%S"), (SUFFIX, PART_SUFFIX, CORRUPT_SUFFIX)
        )
        part_path = day_dir / f"{stem}{PART_SUFFIX}"
        fd = os.open(part_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
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

    def close(self) -> FinishedLog:
        """Flush, fsync and rename the current log to ``.ulg``.

        The log is let go of first: if fsync or rename fails, its ``.ulg.part`` stays on disk
        for start-up recovery and the next :meth:`start_log` works.

        Raises:
            RuntimeError: No log is open.
            OSError: fsync or rename failed.
        """
        log, closing = self._detach()
        return closing(_finalise(log))

    def _detach(self) -> tuple[_OpenLog, Callable[[Path], FinishedLog]]:
        """Flush the current log and let go of it; the callable makes its :class:`FinishedLog`."""
        log = self._log
        if log is None:
            msg = "close() without an open log"
            raise RuntimeError(msg)
        with contextlib.suppress(DiskFullError):  # reported through FinishedLog.disk_full
            self.flush()
        dropped, stopped = self.bytes_dropped, self._stopped
        self._log = None
        self._stopped = None

        def closing(path: Path) -> FinishedLog:
            return FinishedLog(path=path, size=log.size, dropped_bytes=dropped, disk_full=stopped)

        return log, closing

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
        deleted: list[Path] = []
        if self._max_logs:
            while self._finished and len(self._finished) > self._max_logs - 1:
                deleted.append(self._delete_oldest())
        if self._max_total_bytes:
            deleted.extend(self._enforce_total(0))
        return deleted

    def _enforce_total(self, current_size: int) -> list[Path]:
        deleted: list[Path] = []
        total = current_size + sum(size for _, size in self._finished)
        while self._finished and total > self._max_total_bytes:
            total -= self._finished[0][1]
            deleted.append(self._delete_oldest())
        return deleted

    def _delete_oldest(self) -> Path:
        path, _ = self._finished.pop(0)
        path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):  # the day's directory still holds other logs
            path.parent.rmdir()
        return path


def recover_partial_files(out_dir: Path) -> list[RecoveredFile]:
    """Finish the ``.ulg.part`` files an interrupted recording left in ``out_dir``.

    Both layouts are searched: per vehicle ``{out_dir}/{vehicle}/{date}/`` and the older
    ``{out_dir}/{date}/``.

    Each is trimmed to its last whole ULog message and renamed to ``.ulg``; a file without a
    ULog header is renamed ``.ulg.corrupt`` and left as it was. A ``.part`` that another
    recorder sharing ``out_dir`` is writing (it holds a lock on it) is left alone. Run it
    before any sink of this recorder opens.
    """
    if not out_dir.is_dir():
        return []
    parts = [path for pattern in _LOG_PATTERNS for path in out_dir.glob(pattern + PART_SUFFIX)]
    return [recovered for part in sorted(parts) if (recovered := _recover(part)) is not None]


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


def _recover(part: Path) -> RecoveredFile | None:
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
            return RecoveredFile(part, corrupt, size, 0, corrupt=True)
        keep = HEADER_SIZE
        if size > HEADER_SIZE:
            with (
                mmap.mmap(file.fileno(), size, access=mmap.ACCESS_READ) as mapped,
                memoryview(mapped) as view,
            ):
                keep = whole_messages_end(view)
        if keep < size:
            file.truncate(keep)
        file.flush()
        os.fsync(file.fileno())
        final = part.with_name(f"{_unused_stem(part.parent, stem, (SUFFIX,))}{SUFFIX}")
        part.rename(final)  # under the lock: no other recorder takes the file meanwhile
    _fsync_dir(part.parent)
    return RecoveredFile(part, final, keep, size - keep, corrupt=False)


_LOG_PATTERNS = ("*/*/*", "*/*")
"""Where logs are in ``out_dir`` (with a suffix): ``{vehicle}/{date}/``, and ``{date}/`` as
written before vehicle folders."""


def _finished_logs(out_dir: Path) -> list[tuple[Path, int]]:
    """Finished logs under ``out_dir`` (every vehicle's), oldest first, with their sizes."""
    found: list[tuple[float, Path, int]] = []
    for path in (path for pattern in _LOG_PATTERNS for path in out_dir.glob(pattern + SUFFIX)):
        try:
            stat = path.stat()
        except FileNotFoundError:
            continue
        found.append((stat.st_mtime, path, stat.st_size))
    found.sort()
    return [(path, size) for _, path, size in found]


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
