"""What is known of a finished log: its description (size, SHA-256, ``sys_uuid``, start time)."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import re
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import msgspec

from ulogstream.errors import ULogFormatError
from ulogstream.ulog.spec import (
    DATA_SECTION_STARTERS,
    HEADER_SIZE,
    MAGIC,
    MESSAGE_HEADER_SIZE,
    MessageType,
    unpack_message_header,
)

if TYPE_CHECKING:
    from pathlib import Path

    from ulogstream.ulog.flight import FlightJson


logger = logging.getLogger(__name__)


_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


_TIME = re.compile(r"^(\d{2})_(\d{2})_(\d{2})")


_HASH_CHUNK = 1 << 20


_HEADER_CHUNK = 1 << 16


class FinishedLogInfo(msgspec.Struct, frozen=True, kw_only=True):
    """What is announced about one finished log (``meta/log_finished``).

    Attributes:
        path: The ``.ulg`` file.
        size: Bytes in it.
        sha256: Its SHA-256 in hex (None when it could not be read).
        sys_uuid: The autopilot's ``sys_uuid`` from the log's information (None: not in it).
        start_time: UTC start of the log from its file name, ISO 8601 (None if not named so).
        date: The UTC date of the log, ``YYYY-MM-DD`` (the ``{date}`` placeholder).
        vehicle: The vehicle id it was recorded for.
        complete: Whether the log ended with the vehicle's end of stream.
        how: How it ended, in words.
        flight: The flight's summary (:class:`~ulogstream.ulog.flight.FlightSummary` as JSON),
            None when the log could not be read for it.
    """

    path: Path
    size: int
    sha256: str | None
    sys_uuid: str | None
    start_time: str | None
    date: str
    vehicle: str
    complete: bool
    how: str
    flight: FlightJson | None = None

    def as_json(self) -> dict[str, str | int | bool | FlightJson | None]:
        """The announcement's JSON object."""
        return {
            "path": str(self.path),
            "name": self.path.name,
            "size": self.size,
            "sha256": self.sha256,
            "sys_uuid": self.sys_uuid,
            "start_time": self.start_time,
            "vehicle": self.vehicle,
            "complete": self.complete,
            "how": self.how,
            "flight": self.flight,
        }


def read_sys_uuid(path: Path) -> str | None:
    """The ``sys_uuid`` information of the ULog file at ``path`` (blocking; reads its header).

    Message headers are walked through the definitions section to the ``sys_uuid`` 'I' message
    (PX4 writes it among the first): a ``char[N]`` value is text and a ``uint8_t[N]`` one
    bytes shown in hex, as the parser decodes them; another type is left to the parser. At the
    end of every log this costs a few hundred microseconds instead of loading the parser.

    Returns:
        The value as text, or None when the header has none or cannot be read.
    """
    try:
        with path.open("rb") as file:  # buffered: each small read below is a copy, no syscall
            if not file.read(HEADER_SIZE).startswith(MAGIC):
                return None
            while len(header := file.read(MESSAGE_HEADER_SIZE)) == MESSAGE_HEADER_SIZE:
                size, msg_type = unpack_message_header(header, 0)
                if msg_type in DATA_SECTION_STARTERS:
                    return None
                payload = file.read(size)
                if len(payload) < size:
                    return None
                if msg_type == MessageType.INFO and payload:
                    key_end = 1 + payload[0]
                    key_type, _, key = payload[1:key_end].decode(errors="replace").partition(" ")
                    if key == "sys_uuid":
                        return _sys_uuid_text(path, key_type, payload[key_end:])
    except OSError:
        return None
    return None


def _sys_uuid_text(path: Path, key_type: str, raw: bytes) -> str | None:
    """``sys_uuid``'s value as text (see :func:`read_sys_uuid`)."""
    if key_type.startswith("char["):
        text = raw.decode(errors="replace")
    elif key_type.startswith("uint8_t["):
        text = raw.hex()
    else:
        return _parsed_sys_uuid(path)
    return text.strip("\x00 ") or None


def _parsed_sys_uuid(path: Path) -> str | None:
    """``sys_uuid`` as the parser reads it (values of types :func:`read_sys_uuid` leaves)."""
    from ulogstream.ulog.events import DefinitionsEnd, Info  # noqa: PLC0415 (rare: start-up time)
    from ulogstream.ulog.parser import ULogParser, no_rows  # noqa: PLC0415

    parser = ULogParser(rows=no_rows)  # the header only: no row decoded, numpy not loaded
    try:
        with path.open("rb") as file:
            while chunk := file.read(_HEADER_CHUNK):
                for event in parser.receive_bytes(chunk):
                    if type(event) is Info and event.key == "sys_uuid":
                        value = event.value
                        text = value.hex() if isinstance(value, bytes) else str(value)
                        return text.strip("\x00 ") or None
                    if type(event) is DefinitionsEnd:
                        return None
    except (OSError, ULogFormatError):
        return None
    return None


def sha256_of(path: Path) -> str:
    """The SHA-256 of the file at ``path`` in hex (blocking: call it in a thread)."""
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while chunk := file.read(_HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def checksum_and_flight(path: Path) -> tuple[str, FlightJson | None]:
    """The SHA-256 of the log at ``path`` and its flight summary, in one read (blocking).

    The summary is None when the file is no ULog log (its checksum is still taken).

    Raises:
        OSError: The file cannot be read.
    """
    from ulogstream.ulog.flight import FlightSummarizer  # noqa: PLC0415 (only at a log's end)

    digest = hashlib.sha256()
    summarizer: FlightSummarizer | None = FlightSummarizer()
    with path.open("rb") as file:
        while chunk := file.read(_HASH_CHUNK):
            digest.update(chunk)
            if summarizer is not None:
                try:
                    summarizer.feed(chunk)
                except ULogFormatError as err:
                    logger.warning("no flight summary of %s: %s", path, err)
                    summarizer = None
    flight = None if summarizer is None else summarizer.summary().as_json()
    return digest.hexdigest(), flight


def describe(path: Path, size: int, *, vehicle: str, how: str) -> FinishedLogInfo:
    """Describe a finished log (blocking: reads the whole file for the checksum and summary)."""
    flight = None
    try:
        sha256, flight = checksum_and_flight(path)
    except OSError as err:
        logger.warning("cannot read %s for its checksum: %s", path, err.strerror)
        sha256 = None
    date = path.parent.name
    start_time = None
    clock = _TIME.match(path.stem)
    if _DATE.match(date) and clock is not None:
        start_time = f"{date}T{clock[1]}:{clock[2]}:{clock[3]}Z"
    else:
        with contextlib.suppress(OSError):
            date = datetime.fromtimestamp(path.stat().st_mtime, UTC).strftime("%Y-%m-%d")
        if not _DATE.match(date):
            date = datetime.now(UTC).strftime("%Y-%m-%d")
    sys_uuid = read_sys_uuid(path)
    return FinishedLogInfo(
        path=path,
        size=size,
        sha256=sha256,
        sys_uuid=sys_uuid,
        start_time=start_time,
        date=date,
        vehicle=vehicle,
        complete=how.startswith("complete"),
        how=how,
        flight=flight,
    )
