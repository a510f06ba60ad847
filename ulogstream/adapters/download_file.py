"""Logs from the vehicle's SD card on disk: downloads (resumable) and backfilled recordings.

The bytes go to ``{stem}.ulg.download`` at their offsets as they come; every checkpoint fsyncs
them and then replaces ``{stem}.ulg.download.json`` (which log: vehicle, time, size; and the
byte ranges held), so after a crash or Ctrl-C the sidecar names only bytes that are on disk and
the next run asks for the rest. Once every byte is held the file is fsynced and renamed to
``{stem}.ulg``, and the sidecar removed: a ``.ulg`` is always a whole log. A recording
completed by a backfill replaces the original atomically (:func:`write_patched`). Blocking I/O.
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import TYPE_CHECKING, Final

import msgspec

from ulogstream.errors import UlogstreamError

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path
    from typing import BinaryIO

    from ulogstream.download.backfill import Patch

DOWNLOAD_SUFFIX: Final = ".ulg.download"
SIDECAR_SUFFIX: Final = ".ulg.download.json"
WRITE_SIZE: Final = 1 << 16
"""Bytes gathered before one ``pwrite`` (a download sends 90 at a time)."""


class DownloadFileError(UlogstreamError):
    """The download's file cannot be written, or the finished file is not the vehicle's size."""


class LogIdentity(msgspec.Struct, frozen=True):
    """Which log a download holds: the vehicle's system id, the log's time and size.

    Log ids shift when the vehicle deletes logs, so a partial download is matched by these.
    """

    system_id: int
    time_utc: int
    size: int


class DownloadFile:
    """The partial file of one download, opened (or resumed) at ``final`` with ``.download`` added.

    Args:
        final: The finished log's path (``.ulg``).
        identity: The log being downloaded; a partial file of another log there is started over.
    """

    def __init__(self, final: Path, identity: LogIdentity) -> None:
        self.final = final
        self.identity = identity
        self.part = final.with_name(final.name.removesuffix(".ulg") + DOWNLOAD_SUFFIX)
        self.sidecar = final.with_name(final.name.removesuffix(".ulg") + SIDECAR_SUFFIX)
        self._pending = bytearray()
        self._pending_start = 0
        self.held: list[tuple[int, int]] = self._resumable()
        """Byte ranges already on disk (resumed), ``[start, end)``."""
        try:
            final.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.part, os.O_RDWR | os.O_CREAT, 0o644)
            os.ftruncate(self._fd, identity.size)
        except OSError as err:
            msg = f"cannot write {self.part}: {err.strerror or err}"
            raise DownloadFileError(msg) from err
        if not self.held:
            self.checkpoint([])  # the sidecar names the log from the start

    def write(self, ofs: int, data: bytes) -> None:
        """Put ``data`` at byte ``ofs`` (bytes that follow on are gathered into one write)."""
        if ofs != self._pending_start + len(self._pending) or len(self._pending) >= WRITE_SIZE:
            self._flush()
            self._pending_start = ofs
        self._pending += data

    def _flush(self) -> None:
        if not self._pending:
            return
        try:
            os.pwrite(self._fd, self._pending, self._pending_start)
        except OSError as err:
            msg = f"cannot write {self.part}: {err.strerror or err}"
            raise DownloadFileError(msg) from err
        self._pending = bytearray()

    def checkpoint(self, held: list[tuple[int, int]]) -> None:
        """Make the bytes written so far durable, then record ``held`` as on disk."""
        record = {
            "system_id": self.identity.system_id,
            "time_utc": self.identity.time_utc,
            "size": self.identity.size,
            "held": held,
        }
        temporary = self.sidecar.with_name(self.sidecar.name + ".tmp")
        self._flush()
        try:
            os.fsync(self._fd)
            temporary.write_text(json.dumps(record), encoding="utf-8")
            temporary.replace(self.sidecar)
        except OSError as err:
            msg = f"cannot write {self.sidecar}: {err.strerror or err}"
            raise DownloadFileError(msg) from err

    def finish(self) -> Path:
        """fsync, check the size, rename to the ``.ulg`` name, drop the sidecar; returns the path.

        Raises:
            DownloadFileError: The file is not the size the vehicle reported, or cannot be kept.
        """
        self._flush()
        try:
            os.fsync(self._fd)
            size = os.fstat(self._fd).st_size
            if size != self.identity.size:
                msg = f"{self.part} has {size} bytes, the vehicle reported {self.identity.size}"
                raise DownloadFileError(msg)
            os.close(self._fd)
            self._fd = -1
            self.part.replace(self.final)
            self.sidecar.unlink(missing_ok=True)
            _fsync_dir(self.final.parent)
        except OSError as err:
            msg = f"cannot finish {self.final}: {err.strerror or err}"
            raise DownloadFileError(msg) from err
        return self.final

    def close(self) -> None:
        """Let go of the partial file (kept, with its sidecar, for the next run to resume)."""
        self._pending = bytearray()  # not checkpointed: not named by the sidecar either
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = -1

    def _resumable(self) -> list[tuple[int, int]]:
        """The ranges a sidecar of this same log names, if its partial file is there."""
        try:
            record = json.loads(self.sidecar.read_text(encoding="utf-8"))
            if not self.part.exists():
                return []
            same = (record["system_id"], record["time_utc"], record["size"]) == (
                self.identity.system_id,
                self.identity.time_utc,
                self.identity.size,
            )
            held = [(int(start), int(end)) for start, end in record["held"]] if same else []
        except (OSError, ValueError, KeyError, TypeError):
            return []
        return [(start, end) for start, end in held if 0 <= start < end <= self.identity.size]


def already_downloaded(final: Path, size: int) -> bool:
    """Whether ``final`` is there with the log's size (a finished download is only renamed)."""
    try:
        return final.stat().st_size == size
    except OSError:
        return False


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def merge_into(first: Path, others: Sequence[Path], merged: bytes, *, remove: bool) -> None:
    """Replace ``first`` with ``merged`` atomically; with ``remove``, then remove ``others``.

    A power cut before the rename leaves every recording; after it, ``merged`` holds them all,
    so removing the others loses nothing. Only the recorder removes them (its own recordings);
    files a user named are kept.

    Raises:
        DownloadFileError: A file cannot be written or removed.
    """
    temporary = first.with_name(first.name + ".merge")
    try:
        with temporary.open("wb") as target:
            target.write(merged)
            target.flush()
            os.fsync(target.fileno())
        temporary.replace(first)
        _fsync_dir(first.parent)
        for other in others if remove else ():
            other.unlink()
    except OSError as err:
        with contextlib.suppress(OSError):
            temporary.unlink()
        msg = f"cannot merge into {first}: {err.strerror or err}"
        raise DownloadFileError(msg) from err


def write_patched(path: Path, patches: Sequence[Patch]) -> int:
    """Replace ``path`` by itself with ``patches`` applied, atomically; returns its new size.

    The completed log is written beside it (``.backfill``), fsynced and renamed over it: a power
    cut at any moment leaves either the recording or the completed log, never a mix.

    Raises:
        DownloadFileError: It cannot be read or written.
    """
    temporary = path.with_name(path.name + ".backfill")
    try:
        with path.open("rb") as source, temporary.open("wb") as target:
            position = 0
            for patch in sorted(patches, key=lambda p: p.offset):
                _copy(source, target, patch.offset - position)
                target.write(patch.data)
                source.seek(patch.length, os.SEEK_CUR)
                position = patch.offset + patch.length
            _copy(source, target, -1)
            target.flush()
            os.fsync(target.fileno())
            size = target.tell()
        temporary.replace(path)
        _fsync_dir(path.parent)
    except OSError as err:
        with contextlib.suppress(OSError):
            temporary.unlink()
        msg = f"cannot write the completed {path}: {err.strerror or err}"
        raise DownloadFileError(msg) from err
    return size


def _copy(source: BinaryIO, target: BinaryIO, count: int) -> None:
    """Copy ``count`` bytes (-1: the rest) in 1 MiB pieces."""
    while count:
        piece = source.read(1 << 20 if count < 0 else min(count, 1 << 20))
        if not piece:
            return
        target.write(piece)
        if count > 0:
            count -= len(piece)
