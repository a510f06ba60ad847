"""The flight index: a JSON sidecar next to each finished ``.ulg``, ``{name}.json``.

It holds what :mod:`~ulogstream.upload.info` describes of the log (size, SHA-256,
``sys_uuid``, how it ended) with its flight summary (:mod:`~ulogstream.ulog.flight`), and every
upload of it (target, location, Flight Review v2's delete token, when): the one place an
operator finds a flight's numbers and its delete token again, next to the log, without the
broker or the journal. Written atomically (a temporary file, then a rename); rotation deletes it
with its log. Every function blocks: call them in a thread.
"""

from __future__ import annotations

import contextlib
import json
import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Final

from ulogstream.config.values import FLIGHT_INDEX_SUFFIX

if TYPE_CHECKING:
    from pathlib import Path

    from ulogstream.upload.info import FinishedLogInfo
    from ulogstream.upload.targets import Uploaded

logger = logging.getLogger(__name__)

VERSION: Final = 1


def sidecar_path(log: Path) -> Path:
    """Where the sidecar of ``log`` is."""
    return log.with_name(log.name + FLIGHT_INDEX_SUFFIX)


def write_sidecar(info: FinishedLogInfo) -> None:
    """Write the sidecar of ``info``'s log (its uploads so far are kept)."""
    record: dict[str, object] = {"version": VERSION, **info.as_json()}
    record["uploads"] = _read(sidecar_path(info.path)).get("uploads", [])
    _write(sidecar_path(info.path), record)


def add_upload(info: FinishedLogInfo, target: str, uploaded: Uploaded) -> None:
    """Add an upload of ``info``'s log to its sidecar."""
    path = sidecar_path(info.path)
    record = _read(path) or {"version": VERSION, **info.as_json()}
    uploads = record.get("uploads")
    entry: dict[str, object] = {
        "target": target,
        "location": uploaded.location,
        "at": datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
    }
    if uploaded.delete_token is not None:
        entry["delete_token"] = uploaded.delete_token
    record["uploads"] = [*(uploads if isinstance(uploads, list) else []), entry]
    _write(path, record)


def _read(path: Path) -> dict[str, object]:
    try:
        value: object = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _write(path: Path, record: dict[str, object]) -> None:
    temporary = path.with_name(path.name + ".tmp")
    try:
        temporary.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        temporary.replace(path)
    except OSError as err:
        logger.warning("cannot write the flight index %s: %s", path, err.strerror)
        with contextlib.suppress(OSError):
            temporary.unlink()
