"""Opening the link a connection string names (parsed by :mod:`ulogstream.config.values`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ulogstream.adapters.serial_transport import SerialTransport
from ulogstream.adapters.tcp_transport import TcpServerTransport, TcpTransport
from ulogstream.adapters.udp_transport import DEFAULT_RECEIVE_BUFFER, UdpTransport
from ulogstream.config.values import ConnectionSpec, LinkKind
from ulogstream.errors import ConfigError
from ulogstream.mavlink_codec import parse_signing_key

if TYPE_CHECKING:
    from pathlib import Path

    from ulogstream.adapters.transport import Transport


async def open_transport(spec: ConnectionSpec, *, receive_buffer: int | None = None) -> Transport:
    """Open the link ``spec`` names.

    Args:
        spec: The link.
        receive_buffer: A UDP socket's kernel receive buffer, bytes (capped by the system's
            ``net.core.rmem_max``); None: the transport's default.

    Raises:
        LinkError: The device is missing or busy, the port is in use, the server refuses...
    """
    buffer = DEFAULT_RECEIVE_BUFFER if receive_buffer is None else receive_buffer
    match spec:
        case ConnectionSpec(kind=LinkKind.SERIAL, device=str(device), baud=int(baud)):
            return SerialTransport.open(device, baud)
        case ConnectionSpec(kind=LinkKind.UDP_IN, host=str(host), port=int(port)):
            return await UdpTransport.listen(host, port, receive_buffer=buffer)
        case ConnectionSpec(kind=LinkKind.UDP_OUT, host=str(host), port=int(port)):
            return await UdpTransport.connect(host, port, receive_buffer=buffer)
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
