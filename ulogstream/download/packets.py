"""The log download messages as plain values: what the codec hands the cores, and back."""

from __future__ import annotations

import enum
from typing import Final

import msgspec

LOG_DATA_CHUNK: Final = 90
"""Bytes in one LOG_DATA message's ``data`` (a full one; the log's last may be shorter)."""

LAST_LOG_ID: Final = 0xFFFF
"""LOG_REQUEST_LIST ``end`` meaning "to the last log" (the field is uint16)."""


class LogEntry(msgspec.Struct, frozen=True):
    """LOG_ENTRY: one log on the vehicle's storage, in answer to LOG_REQUEST_LIST.

    Attributes:
        id: The log's id for LOG_REQUEST_DATA (PX4 counts from 0, ArduPilot from 1; ids change
            when logs are deleted, so a log is known again by ``time_utc`` and ``size``).
        num_logs: How many logs the vehicle has (0: none; the entry itself is then empty).
        last_log_num: The highest id of the listing (PX4 fills it loosely: not relied on).
        time_utc: The file's time, UTC seconds (PX4: its last write; 0 when the vehicle had no
            clock).
        size: The log's size in bytes.
        system_id: The vehicle that sent it.
    """

    id: int
    num_logs: int
    last_log_num: int
    time_utc: int
    size: int
    system_id: int = 1


class LogData(msgspec.Struct, frozen=True):
    """LOG_DATA: ``data`` at byte ``ofs`` of log ``id`` (up to 90 bytes; 0 past its end)."""

    id: int
    ofs: int
    data: bytes
    system_id: int = 1


class LogRequestList(msgspec.Struct, frozen=True):
    """Ask for the LOG_ENTRYs of ids ``start`` to ``end`` (LAST_LOG_ID: all)."""

    start: int = 0
    end: int = LAST_LOG_ID


class LogRequestData(msgspec.Struct, frozen=True):
    """Ask for ``count`` bytes of log ``id`` from byte ``ofs``.

    The vehicle answers with LOG_DATA messages in order; a later request replaces this one (PX4
    and ArduPilot serve one at a time).
    """

    id: int
    ofs: int
    count: int


class LogRequestEnd(msgspec.Struct, frozen=True):
    """End the download: the vehicle stops sending and closes the file (ArduPilot logs again)."""


FTP_DATA_MAX: Final = 239
"""Bytes of data in one MAVLink FTP payload (FILE_TRANSFER_PROTOCOL's 251 less its header)."""


class FtpOpcode(enum.IntEnum):
    """MAVLink FTP opcodes (https://mavlink.io/en/services/ftp.html), the ones used here."""

    TERMINATE_SESSION = 1
    RESET_SESSIONS = 2
    LIST_DIRECTORY = 3
    OPEN_FILE_RO = 4
    READ_FILE = 5
    BURST_READ_FILE = 15
    ACK = 128
    NAK = 129


class FtpError(enum.IntEnum):
    """The first data byte of a NAK."""

    FAIL = 1
    FAIL_ERRNO = 2
    INVALID_DATA_SIZE = 3
    INVALID_SESSION = 4
    NO_SESSIONS_AVAILABLE = 5
    EOF = 6
    UNKNOWN_COMMAND = 7
    FILE_EXISTS = 8
    FILE_PROTECTED = 9
    FILE_NOT_FOUND = 10


class FtpMessage(msgspec.Struct, frozen=True):
    """FILE_TRANSFER_PROTOCOL's payload: a MAVLink FTP request or reply.

    Attributes:
        seq: The sequence number (a reply carries its request's plus one; a burst counts on).
        session: The open file's session.
        opcode: A request's :class:`FtpOpcode`, or ACK / NAK.
        req_opcode: In a reply, the request it answers.
        burst_complete: The last reply of a burst.
        offset: A file or directory offset.
        data: Up to :data:`FTP_DATA_MAX` bytes (its length is the payload's ``size``).
        size: The payload's ``size`` when it differs from ``len(data)`` (a read request's
            wanted bytes).
        system_id: The system that sent it.
    """

    seq: int
    session: int
    opcode: int
    req_opcode: int = 0
    burst_complete: bool = False
    offset: int = 0
    data: bytes = b""
    size: int | None = None
    system_id: int = 1

    @property
    def error(self) -> int:
        """A NAK's error code (0 when there is none)."""
        return self.data[0] if self.opcode == FtpOpcode.NAK and self.data else 0
