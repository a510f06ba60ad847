"""The logbook: which files in ``out_dir`` this program wrote, so that nothing else is touched.

Rotation and start-up recovery act on files in a folder that users share with their own files:
a ``crash_investigation.ulg`` kept by hand, logs copied from a vehicle's SD card into folders
named like ours, a symlink to an archive elsewhere. A file name says nothing about who wrote it,
so every log this program starts and finishes is written down in ``{out_dir}/.ulogstream-logbook``
(JSON Lines, appended under a lock, fsynced), and only the logs written down there are ever
recovered or deleted:

- ``started``: a ``.ulg.part`` is about to be created (with the tags the recorder gave: vehicle,
  link, system id), so that recovery after a crash finishes only our own ``.part`` files;
- ``finished``: it was renamed to ``.ulg`` with this size, and whether it waits for an upload;
- ``settled``: its upload is over (uploaded or given up): rotation may delete it now;
- ``deleted`` and ``gone``: rotation deleted it, or the file is no longer there.

A log is deleted only when the logbook has it finished and settled, its path is in our layout
(``[{vehicle}/]{YYYY-MM-DD}/{HH_MM_SS}[_N][_partN].ulg``), every folder on the way is a real
folder (never a symlink: the walk opens each with ``O_NOFOLLOW``), and the file is a regular file
of the size written down. Every method blocks on the disk: call them from a worker thread.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import re
import stat
from typing import TYPE_CHECKING

import msgspec

from ulogstream.config.values import FLIGHT_INDEX_SUFFIX

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping
    from pathlib import Path

logger = logging.getLogger("ulogstream")

LOGBOOK_NAME = ".ulogstream-logbook"
"""The logbook's file in ``out_dir``; ``.lock`` beside it serialises recorders sharing it."""

COMPACT_AFTER_LINES = 1000
"""Lines past which the logbook is rewritten with one line per log it still knows."""

LOG_LAYOUT = re.compile(
    r"^(?:[^/]+/)?\d{4}-\d{2}-\d{2}/\d{2}_\d{2}_\d{2}(?:_\d+)?(?:_part\d+)?\.ulg(?:\.part)?$"
)
"""Where this program writes logs, relative to ``out_dir``: ``{vehicle}/{date}/{time}.ulg``
(and ``{date}/{time}.ulg`` as written before vehicle folders)."""

Tags = dict[str, str | int]
"""What the recorder says about a log when it starts it (vehicle, link, system id)."""


class LoggedFile(msgspec.Struct):
    """One log the logbook knows, by its path relative to ``out_dir``."""

    path: str
    """``{vehicle}/{date}/{time}.ulg`` (the ``.ulg.part`` while it is being written)."""
    tags: Tags = msgspec.field(default_factory=dict)
    size: int | None = None
    """Bytes when finished (None: not finished)."""
    upload_pending: bool = False
    order: int = 0
    """Position in the logbook: finished logs are rotated in this order (oldest first)."""


class _State(msgspec.Struct):
    """The logbook folded from its lines."""

    writing: dict[str, LoggedFile] = msgspec.field(default_factory=dict)
    """Started and not finished, by ``.ulg.part`` path."""
    finished: dict[str, LoggedFile] = msgspec.field(default_factory=dict)
    """Finished and still on disk, by ``.ulg`` path."""
    lines: int = 0


class Logbook:
    """The record of the logs this program wrote in ``out_dir`` (see the module docstring).

    Args:
        out_dir: The recordings folder the paths are relative to.
    """

    def __init__(self, out_dir: Path) -> None:
        self.out_dir = out_dir
        self.path = out_dir / LOGBOOK_NAME

    def relative(self, path: Path) -> str:
        """``path`` as the logbook names it (relative to ``out_dir``, ``/``-separated).

        Raises:
            ValueError: ``path`` is not inside ``out_dir``.
        """
        return path.relative_to(self.out_dir).as_posix()

    # -- writing -------------------------------------------------------------------------

    def started(self, part: Path, tags: Mapping[str, str | int] | None = None) -> None:
        """Write down that ``part`` (a ``.ulg.part``) is about to be created."""
        self._append({"event": "started", "path": self.relative(part), "tags": dict(tags or {})})

    def finished(self, part: Path, final: Path, size: int, *, upload_pending: bool) -> None:
        """Write down that ``part`` became the finished log ``final`` of ``size`` bytes."""
        self._append(
            {
                "event": "finished",
                "part": self.relative(part),
                "path": self.relative(final),
                "size": size,
                "upload": upload_pending,
            }
        )

    def settled(self, final: Path) -> None:
        """Write down that the upload of ``final`` is over: rotation may delete it now."""
        with contextlib.suppress(ValueError):  # not ours: nothing to write down
            self._append({"event": "settled", "path": self.relative(final)})

    def gone(self, path: Path) -> None:
        """Write down that ``path`` (a ``.part`` or a log) is no longer ours to look after."""
        self._append({"event": "gone", "path": self.relative(path)})

    # -- reading -------------------------------------------------------------------------

    def unfinished(self) -> list[LoggedFile]:
        """The ``.ulg.part`` files started and never finished (crash, power cut), oldest first."""
        state = self._read_locked()
        return sorted(state.writing.values(), key=lambda entry: entry.order)

    def finished_logs(self) -> list[LoggedFile]:
        """The finished logs it knows, oldest first (whether or not rotation may delete them)."""
        state = self._read_locked()
        return sorted(state.finished.values(), key=lambda entry: entry.order)

    def _read_locked(self) -> _State:
        """The logbook as it is now; nothing is created where there is none yet."""
        if not self.path.exists():
            return _State()
        with self._locked():
            return self._read()

    # -- rotation ------------------------------------------------------------------------

    def rotate(self, *, max_logs: int, max_total_bytes: int, current_size: int) -> list[Path]:
        """Delete the oldest deletable logs until the limits hold; return them, oldest first.

        ``max_logs`` counts the log being started (so room is made for it); ``max_total_bytes``
        counts ``current_size`` bytes of the log being written. Logs that may not be deleted
        (waiting for upload, not in our layout, changed or replaced on disk) still count, and
        are left alone. 0 turns a limit off.
        """
        deleted: list[Path] = []
        with self._locked():
            state = self._read()
            logs = sorted(state.finished.values(), key=lambda entry: entry.order)
            count = len(logs) + (1 if max_logs else 0)
            total = current_size + sum(entry.size or 0 for entry in logs)
            for entry in logs:
                over_count = bool(max_logs) and count > max_logs
                over_size = bool(max_total_bytes) and total > max_total_bytes
                if not over_count and not over_size:
                    break
                if entry.upload_pending:
                    continue
                outcome = self._delete(entry)
                if outcome is None:
                    continue
                count -= 1
                total -= entry.size or 0
                self._append_locked({"event": outcome, "path": entry.path})
                if outcome == "deleted":
                    deleted.append(self.out_dir / entry.path)
            self._compact_if_long(state)
        return deleted

    def _delete(self, entry: LoggedFile) -> str | None:
        """Delete ``entry``'s file if it is safe: "deleted", "gone" (not there), or None (kept)."""
        if not LOG_LAYOUT.match(entry.path) or entry.path.endswith(".part"):
            return None
        *folders, name = entry.path.split("/")
        try:
            with _folder(self.out_dir, folders) as descriptor:
                info = os.stat(name, dir_fd=descriptor, follow_symlinks=False)
                if not stat.S_ISREG(info.st_mode) or info.st_size != entry.size:
                    logger.warning(
                        "rotation left %s alone: it changed since it was recorded",
                        self.out_dir / entry.path,
                    )
                    self._append_locked({"event": "gone", "path": entry.path})
                    return None
                os.unlink(name, dir_fd=descriptor)
                with contextlib.suppress(OSError):  # its flight index (upload.sidecar) goes too
                    os.unlink(name + FLIGHT_INDEX_SUFFIX, dir_fd=descriptor)
                with contextlib.suppress(OSError):
                    os.fsync(descriptor)
        except FileNotFoundError:
            return "gone"
        except (NotADirectoryError, _NotAFolderError):
            logger.warning(
                "rotation left %s alone: a folder on its path is a symlink or a file",
                self.out_dir / entry.path,
            )
            self._append_locked({"event": "gone", "path": entry.path})
            return None
        except OSError as err:
            logger.warning("rotation cannot delete %s: %s", self.out_dir / entry.path, err.strerror)
            return None
        if folders:  # the day's folder, once it holds nothing more
            with contextlib.suppress(OSError), _folder(self.out_dir, folders[:-1]) as parent:
                os.rmdir(folders[-1], dir_fd=parent)
        return "deleted"

    # -- the file ------------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        lock = os.open(
            self.path.with_name(LOGBOOK_NAME + ".lock"),
            os.O_RDWR | os.O_CREAT | os.O_CLOEXEC,
            0o644,
        )
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield
        finally:
            os.close(lock)

    def _append(self, record: dict[str, object]) -> None:
        with self._locked():
            self._append_locked(record)

    def _append_locked(self, record: dict[str, object]) -> None:
        line = json.dumps(record, separators=(",", ":")) + "\n"
        descriptor = os.open(
            self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644
        )
        try:
            os.write(descriptor, line.encode())
            os.fsync(descriptor)
        finally:
            os.close(descriptor)

    def _read(self) -> _State:
        state = _State()
        try:
            text = self.path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return state
        for order, line in enumerate(text.splitlines()):
            state.lines += 1
            try:
                record = json.loads(line)
            except ValueError:  # a line cut short by a power loss
                continue
            if isinstance(record, dict):
                _fold(state, record, order)
        return state

    def _compact_if_long(self, state: _State) -> None:
        """Rewrite the logbook with one line per log it still knows (under the lock)."""
        if state.lines <= COMPACT_AFTER_LINES:
            return
        writing = sorted(state.writing.values(), key=lambda entry: entry.order)
        finished = sorted(state.finished.values(), key=lambda entry: entry.order)
        lines: list[dict[str, object]] = [
            {"event": "started", "path": entry.path, "tags": entry.tags} for entry in writing
        ]
        lines.extend(
            {
                "event": "finished",
                "part": entry.path,
                "path": entry.path,
                "size": entry.size,
                "upload": entry.upload_pending,
                "tags": entry.tags,
            }
            for entry in finished
        )
        temporary = self.path.with_name(LOGBOOK_NAME + ".tmp")
        try:
            with temporary.open("w", encoding="utf-8") as file:
                file.writelines(json.dumps(line, separators=(",", ":")) + "\n" for line in lines)
                file.flush()
                os.fsync(file.fileno())
            temporary.replace(self.path)
        except OSError as err:
            logger.warning("cannot compact the logbook %s: %s", self.path, err.strerror)


def _fold(state: _State, record: dict[str, object], order: int) -> None:
    """Apply one logbook line to ``state``."""
    path = record.get("path")
    if not isinstance(path, str):
        return
    match record.get("event"):
        case "started":
            tags = record.get("tags")
            state.writing[path] = LoggedFile(
                path, _tags(tags) if isinstance(tags, dict) else {}, order=order
            )
        case "finished":
            part = record.get("part")
            started = state.writing.pop(part, None) if isinstance(part, str) else None
            size = record.get("size")
            tags = record.get("tags")
            # Finished again (a backfill completed it): a new size, the same log and age.
            before = state.finished.get(path)
            if started is None:
                started = before
            state.finished[path] = LoggedFile(
                path,
                started.tags
                if started is not None
                else _tags(tags)
                if isinstance(tags, dict)
                else {},
                size=size if isinstance(size, int) else None,
                upload_pending=record.get("upload") is True,
                order=order if before is None else before.order,
            )
        case "settled":
            entry = state.finished.get(path)
            if entry is not None:
                entry.upload_pending = False
        case "deleted" | "gone":
            state.finished.pop(path, None)
            state.writing.pop(path, None)
        case _:
            pass


def _tags(raw: dict[object, object]) -> Tags:
    return {str(key): value for key, value in raw.items() if isinstance(value, str | int)}


class _NotAFolderError(OSError):
    """A folder on a logbook path is a symlink (ELOOP where O_DIRECTORY does not say ENOTDIR)."""


@contextlib.contextmanager
def _folder(out_dir: Path, folders: list[str]) -> Iterator[int]:
    """A descriptor of ``out_dir/folders...``, walked without following any symlink below it.

    Raises:
        NotADirectoryError: A folder on the way is a symlink or a file.
        OSError: It cannot be opened.
    """
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
    descriptor = os.open(out_dir, flags)
    try:
        for name in folders:
            try:
                child = os.open(name, flags | os.O_NOFOLLOW, dir_fd=descriptor)
            except OSError as err:
                if err.errno == errno.ELOOP:
                    raise _NotAFolderError(err.errno, "a symlink on the way") from None
                raise
            os.close(descriptor)
            descriptor = child
        yield descriptor
    finally:
        os.close(descriptor)
