"""ulogstream: live ULog receiver and recorder for PX4 log streaming over MAVLink."""

from ulogstream.errors import (
    ConfigError,
    LinkError,
    StreamProtocolError,
    ULogFormatError,
    UlogstreamError,
)

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "LinkError",
    "StreamProtocolError",
    "ULogFormatError",
    "UlogstreamError",
    "__version__",
]
