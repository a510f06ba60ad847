"""Connection strings (``udpin:0.0.0.0:14550``, ``/dev/ttyACM0:921600``...) and opening them."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, NoReturn

from ulogstream.adapters.serial_transport import SerialTransport
from ulogstream.adapters.tcp_transport import TcpServerTransport, TcpTransport
from ulogstream.adapters.udp_transport import UdpTransport
from ulogstream.config import DEFAULT_BAUD
from ulogstream.errors import ConfigError
from ulogstream.mavlink_codec import parse_signing_key

if TYPE_CHECKING:
    from pathlib import Path

    from ulogstream.adapters.transport import Transport

EXPECTED_FORMS = (
    "udpin:HOST:PORT, udpout:HOST:PORT, udp:HOST:PORT (= udpin), tcp:HOST:PORT, tcpin:HOST:PORT, "
    "or a serial device such as /dev/ttyACM0, /dev/ttyUSB0:921600 or /dev/ttyUSB0,921600"
)
"""What a connection string may look like, quoted in every parse error."""

_MAX_PORT = 65535


@enum.unique
class LinkKind(enum.StrEnum):
    """The kinds of link a connection string names."""

    UDP_IN = "udpin"
    """Listen on HOST:PORT; reply to the last sender (mavutil's ``udpin``)."""
    UDP_OUT = "udpout"
    """Send to HOST:PORT from an ephemeral port."""
    TCP = "tcp"
    """Connect to a TCP server."""
    TCP_IN = "tcpin"
    """Listen for one TCP client (the vehicle simulator's side)."""
    SERIAL = "serial"
    """A serial device (USB CDC or UART)."""


_NETWORK_PREFIXES = {
    "udpin": LinkKind.UDP_IN,
    "udp": LinkKind.UDP_IN,
    "udpout": LinkKind.UDP_OUT,
    "tcp": LinkKind.TCP,
    "tcpin": LinkKind.TCP_IN,
}
_LISTENING = frozenset({LinkKind.UDP_IN, LinkKind.TCP_IN})


@dataclass(frozen=True, slots=True)
class ConnectionSpec:
    """A parsed connection string: a network endpoint or a serial device.

    ``host``/``port`` are set for network kinds, ``device``/``baud`` for serial.
    """

    kind: LinkKind
    host: str | None = None
    port: int | None = None
    device: str | None = None
    baud: int | None = None

    def __str__(self) -> str:
        if self.kind is LinkKind.SERIAL:
            return f"{self.device}:{self.baud}"
        host = f"[{self.host}]" if self.host is not None and ":" in self.host else self.host
        return f"{self.kind}:{host}:{self.port}"


def parse_connection(text: str, *, default_baud: int = DEFAULT_BAUD) -> ConnectionSpec:
    """Parse a connection string.

    Args:
        text: ``udpin:HOST:PORT``, ``udpout:HOST:PORT``, ``udp:HOST:PORT`` (``udpin``),
            ``tcp:HOST:PORT``, ``tcpin:HOST:PORT``, or a serial device path with an optional
            baud rate after ``:`` or ``,``. IPv6 hosts go in brackets.
            Port 0 (any free port) is allowed for the listening kinds only.
        default_baud: The serial rate when ``text`` names none (``link.baud``, ``--baud``).

    Raises:
        ConfigError: ``text`` is none of these; the message quotes it and the expected forms.
    """
    stripped = text.strip()
    if stripped.startswith("/"):
        return _parse_serial(text, stripped, default_baud)
    prefix, sep, rest = stripped.partition(":")
    kind = _NETWORK_PREFIXES.get(prefix.lower())
    if not sep or kind is None:
        _fail(text, f"unknown link type {prefix!r}" if sep else "no link type or device path")
    host, sep, port_text = rest.rpartition(":")
    if not sep:
        _fail(text, "HOST:PORT is missing")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not host or any(char.isspace() for char in host):
        _fail(text, "the host is empty or contains spaces")
    port = _number(text, port_text, "port")
    lowest = 0 if kind in _LISTENING else 1
    if not lowest <= port <= _MAX_PORT:
        _fail(text, f"port {port} is outside {lowest}-{_MAX_PORT}")
    return ConnectionSpec(kind=kind, host=host, port=port)


def _parse_serial(text: str, stripped: str, default_baud: int) -> ConnectionSpec:
    device, baud_text = stripped, ""
    if "," in stripped:
        device, _, baud_text = stripped.rpartition(",")
        if not baud_text:
            _fail(text, "the baud rate after ',' is missing")
    else:
        # /dev/serial/by-path names contain colons: only digits after the last one are a rate.
        head, _, tail = stripped.rpartition(":")
        if head and tail.isascii() and tail.isdigit():
            device, baud_text = head, tail
    if device in {"", "/"} or device.endswith("/") or any(char.isspace() for char in device):
        _fail(text, f"{device!r} is not a device path")
    baud = _number(text, baud_text, "baud rate") if baud_text else default_baud
    if baud <= 0:
        _fail(text, f"baud rate {baud} must be positive")
    return ConnectionSpec(kind=LinkKind.SERIAL, device=device, baud=baud)


def _number(text: str, digits: str, what: str) -> int:
    if not digits.isascii() or not digits.isdigit():
        _fail(text, f"{what} {digits!r} is not a number")
    return int(digits)


def _fail(text: str, problem: str) -> NoReturn:
    msg = f"connection {text!r} is not valid ({problem}); expected {EXPECTED_FORMS}"
    raise ConfigError(msg)


async def open_transport(spec: ConnectionSpec) -> Transport:
    """Open the link ``spec`` names.

    Raises:
        LinkError: The device is missing or busy, the port is in use, the server refuses...
    """
    match spec:
        case ConnectionSpec(kind=LinkKind.SERIAL, device=str(device), baud=int(baud)):
            return SerialTransport.open(device, baud)
        case ConnectionSpec(kind=LinkKind.UDP_IN, host=str(host), port=int(port)):
            return await UdpTransport.listen(host, port)
        case ConnectionSpec(kind=LinkKind.UDP_OUT, host=str(host), port=int(port)):
            return await UdpTransport.connect(host, port)
        case ConnectionSpec(kind=LinkKind.TCP, host=str(host), port=int(port)):
            return await TcpTransport.connect(host, port)
        case ConnectionSpec(kind=LinkKind.TCP_IN, host=str(host), port=int(port)):
            return await TcpServerTransport.listen(host, port)
    msg = f"incomplete connection spec {spec!r}"
    raise ValueError(msg)


def load_signing_key(path: Path) -> bytes:
    """Read a MAVLink 2 signing key file: 32 raw bytes or 64 hex digits.

    Raises:
        ConfigError: The file cannot be read or holds no valid key.
    """
    try:
        raw = path.read_bytes()
    except OSError as err:
        msg = f"cannot read signing key file {path}: {err.strerror or err}"
        raise ConfigError(msg) from err
    return parse_signing_key(raw, source=str(path))
