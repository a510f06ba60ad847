"""ulogstream: live ULog receiver and recorder for PX4 log streaming over MAVLink.

The library's front door::

    from ulogstream import read, iter_events

    log = read("flight.ulg")                   # ULogData: one numpy array per topic instance
    attitude = log.topics["vehicle_attitude", 0].data
    for event in iter_events("flight.ulg"):    # or stream the parser's events
        ...

:func:`read`, :func:`iter_events`, :class:`ULogParser` (sans-IO: bytes in at any chunking,
events out), :class:`ULogData` and :class:`ULogWriter`, and every error (catch
:class:`UlogstreamError` for all of them). The reading names load numpy on first use only, so
``import ulogstream`` stays cheap for the recorder's command line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ulogstream.errors import (
    ConfigError,
    ExportError,
    LinkError,
    ReadError,
    StreamProtocolError,
    ULogFormatError,
    UlogstreamError,
    UploadError,
    UploadRejectedError,
)
from ulogstream.lazy import load_lazily

if TYPE_CHECKING:
    from ulogstream.adapters.ulog_file import iter_events, read
    from ulogstream.ulog.parser import ULogParser
    from ulogstream.ulog.reader import ULogData
    from ulogstream.ulog.writer import ULogWriter

__version__ = "0.1.0"

_LAZY = {
    "read": "ulogstream.adapters.ulog_file",
    "iter_events": "ulogstream.adapters.ulog_file",
    "ULogParser": "ulogstream.ulog.parser",
    "ULogData": "ulogstream.ulog.reader",
    "ULogWriter": "ulogstream.ulog.writer",
}
"""Names of the front door whose modules import numpy: loaded when first used."""


def __getattr__(name: str) -> object:
    return load_lazily(globals(), _LAZY, name)


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "ConfigError",
    "ExportError",
    "LinkError",
    "ReadError",
    "StreamProtocolError",
    "ULogData",
    "ULogFormatError",
    "ULogParser",
    "ULogWriter",
    "UlogstreamError",
    "UploadError",
    "UploadRejectedError",
    "__version__",
    "iter_events",
    "read",
]
