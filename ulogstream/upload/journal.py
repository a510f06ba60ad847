"""The upload queue on disk: one small JSON file per waiting log, so it survives reboots."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from ulogstream.upload.info import FinishedLogInfo

if TYPE_CHECKING:
    from ulogstream.ulog.flight import FlightJson

logger = logging.getLogger(__name__)


class PendingUpload(msgspec.Struct, frozen=True):
    """A log waiting for upload and the attempts already made for it (before a restart too)."""

    info: FinishedLogInfo
    attempts: int = 0


class UploadJournal:
    """The upload queue on disk: one small JSON file per waiting log, so it survives reboots.

    Each entry is written atomically (a temporary file, fsync, rename, fsync of the folder) and
    removed when its log is uploaded or given up. Every method blocks: call them in a thread
    (or at start-up, before the event loop's work begins).

    Args:
        folder: Where the entries are kept (created when the first one is written).
    """

    VERSION = 1
    """The entries' format (``"version"`` in each)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def entry(self, info: FinishedLogInfo) -> Path:
        """The entry of the log ``info`` (named after its path: one entry per log)."""
        key = hashlib.sha256(str(info.path).encode()).hexdigest()[:24]
        return self.folder / f"{key}.json"

    def write(self, pending: PendingUpload) -> None:
        """Write (or rewrite) the entry of ``pending``.

        Raises:
            OSError: It could not be written (the log is still uploaded, but not after a restart).
        """
        info = pending.info
        record = {
            "version": self.VERSION,
            "attempts": pending.attempts,
            "queued": datetime.now(UTC).isoformat(timespec="seconds"),
            **info.as_json(),
            "date": info.date,
        }
        entry = self.entry(info)
        self.folder.mkdir(parents=True, exist_ok=True)
        temporary = entry.with_suffix(".tmp")
        with temporary.open("w", encoding="utf-8") as file:
            json.dump(record, file)
            file.flush()
            os.fsync(file.fileno())
        temporary.replace(entry)
        _sync_folder(self.folder)

    def remove(self, info: FinishedLogInfo) -> None:
        """Remove the entry of ``info`` (uploaded or given up); a missing one is fine."""
        with contextlib.suppress(FileNotFoundError):
            self.entry(info).unlink()
            _sync_folder(self.folder)

    def pending(self) -> list[PendingUpload]:
        """Every readable entry, oldest first; unreadable ones are logged and removed."""
        try:
            names = sorted(self.folder.iterdir())
        except FileNotFoundError:
            return []
        except OSError as err:
            logger.warning("cannot read the upload queue %s: %s", self.folder, err.strerror)
            return []
        found: list[tuple[str, PendingUpload]] = []
        for path in names:
            if path.suffix == ".tmp":  # a write cut short (power loss): never renamed, so void
                path.unlink(missing_ok=True)
                continue
            if path.suffix != ".json":
                continue
            try:
                record = json.loads(path.read_text(encoding="utf-8"))
                found.append((str(record["queued"]), _pending_from(record)))
            except (OSError, ValueError, KeyError, TypeError) as err:
                logger.warning(
                    "upload queue entry %s cannot be read (%s): removed; its log is not uploaded",
                    path,
                    err,
                )
                path.unlink(missing_ok=True)
        found.sort(key=lambda item: item[0])
        return [pending for _, pending in found]


def _pending_from(record: dict[str, object]) -> PendingUpload:
    """The :class:`PendingUpload` of a journal entry's JSON object.

    Raises:
        KeyError: A field is missing.
        TypeError: A field has the wrong type.
    """

    def text(name: str) -> str:
        value = record[name]
        if not isinstance(value, str):
            raise TypeError(name)
        return value

    def optional(name: str) -> str | None:
        return None if record.get(name) is None else text(name)

    size, attempts = record["size"], record["attempts"]
    if not isinstance(size, int) or not isinstance(attempts, int):
        raise TypeError("size")  # noqa: EM101 (never shown alone: the entry's path is)
    info = FinishedLogInfo(
        path=Path(text("path")),
        size=size,
        sha256=optional("sha256"),
        sys_uuid=optional("sys_uuid"),
        start_time=optional("start_time"),
        date=text("date"),
        vehicle=text("vehicle"),
        complete=record.get("complete") is True,
        how=text("how"),
        flight=_flight(record.get("flight")),
    )
    return PendingUpload(info, attempts)


def _flight(value: object) -> FlightJson | None:
    """An entry's flight summary, None when it has none (or an older entry has another)."""
    if not isinstance(value, dict):
        return None
    return {
        str(key): item
        for key, item in value.items()
        if item is None or isinstance(item, str | int | float)
    }


def _sync_folder(folder: Path) -> None:
    """Flush ``folder`` to disk (fsync), so a rename or unlink in it survives a power loss."""
    with contextlib.suppress(OSError):
        descriptor = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
