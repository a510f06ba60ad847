"""The exception family: every error ulogstream reports about the outside world."""

from __future__ import annotations


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


class UploadRejectedError(UlogstreamError):
    """A remote refused a log for good (an HTTP 400, a bad key): retrying cannot help."""
