"""The exception family: every error ulogstream reports about the outside world.

Catch :class:`UlogstreamError` for all of them; each family carries where it happened (a byte
offset, a packet sequence, a path).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path


class UlogstreamError(Exception):
    """Base of every error ulogstream raises about bad input, a bad link or a bad setting."""


class ULogFormatError(UlogstreamError):
    """ULog bytes that cannot be parsed (or a log this parser must refuse).

    Args:
        message: One sentence saying what is wrong.
        offset: Byte offset in the ULog stream where the problem was found.
    """

    def __init__(self, message: str, *, offset: int) -> None:
        super().__init__(f"{message} (at byte {offset})")
        self.offset = offset


class StreamProtocolError(UlogstreamError):
    """A MAVLink log stream that breaks the streaming protocol.

    Args:
        message: One sentence saying what is wrong.
        sequence: The LOGGING_DATA sequence number of the offending packet.
    """

    def __init__(self, message: str, *, sequence: int) -> None:
        super().__init__(f"{message} (packet #{sequence})")
        self.sequence = sequence


class ConfigError(UlogstreamError):
    """A setting, connection string or configuration file that cannot be used."""


class LinkError(UlogstreamError):
    """A link (serial device, socket, broker) that cannot be opened or used.

    ``permanent``: retrying cannot help (the path names a regular file, not a serial port).
    """

    def __init__(self, message: str, *, permanent: bool = False) -> None:
        super().__init__(message)
        self.permanent = permanent


class ReadError(UlogstreamError):
    """A file that cannot be read: missing, unreadable, or too large to hold in memory.

    A file that is read but is no valid ULog raises :class:`ULogFormatError` instead.

    Args:
        message: One sentence naming the file and what to do.
        path: The file.
    """

    def __init__(self, message: str, *, path: Path) -> None:
        super().__init__(message)
        self.path = path


class ExportError(UlogstreamError):
    """A log that cannot be exported, or an export that cannot be written.

    Args:
        message: One sentence naming what and where.
        path: The file or directory being written, when the problem is one.
    """

    def __init__(self, message: str, *, path: Path | None = None) -> None:
        super().__init__(message)
        self.path = path


class UploadError(UlogstreamError):
    """An upload that failed this time (no answer, HTTP 5xx, a failed command): retried later."""


class UploadRejectedError(UploadError):
    """A remote refused a log for good (an HTTP 400, a bad key): retrying cannot help."""
