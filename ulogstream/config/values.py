"""The one parser of each kind of string a setting holds, and the checks the sections share.

Connection strings, broker URLs, listen addresses, S3 endpoints and buckets, templates with
placeholders, the upload command, vehicle ids and passwords: each is read here and nowhere
else, so a value the configuration accepts is one every part can use.
"""

from __future__ import annotations

import enum
import os
import re
import shlex
import socket
import string
from typing import TYPE_CHECKING, NoReturn
from urllib.parse import SplitResult, urlsplit

import msgspec

from ulogstream.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

MQTT_DEFAULT_PORTS = {"mqtt": 1883, "mqtts": 8883}
"""``mqtt://host[:1883]`` plain TCP, ``mqtts://host[:8883]`` TLS (IANA ports)."""


MAX_MAVLINK_ID = 0xFF


MAX_PORT = 0xFFFF


DEFAULT_BAUD = 921600
"""Serial rate unless the connection string or ``link.baud`` names one: PX4's TELEM2 default.

USB CDC ports (a Pixhawk's USB) run at USB speed whatever the rate.
"""


TOPIC_FORBIDDEN = re.compile(r"[+#\x00]")


LEVEL_FORBIDDEN = re.compile(r"[/+#\x00]")


VEHICLE_PLACEHOLDERS = ("hostname", "link", "sysid", "sys_uuid")
"""What ``mqtt.vehicle_id`` may name: this machine's host name (without domain), the link
(``link.connection`` as one topic level), the autopilot's MAVLink system id and its ``sys_uuid``
(from the newest finished log, remembered across restarts; until one is known,
:data:`SYS_UUID_STAND_IN` stands in for it)."""


DEFAULT_VEHICLE_ID = "{sys_uuid}"
"""The vehicle id unless configured: the autopilot's own ``sys_uuid``, unique in a fleet."""


SYS_UUID_STAND_IN = "{hostname}-{link}-sysid{sysid}"
"""What ``{sys_uuid}`` is until a log has shown it: host name, link and system id, unique on a
host (one link has one recorder, one system id one autopilot on it)."""


MAX_VEHICLE_ID_LENGTH = 128
"""Longest vehicle id (a topic level and a folder name; file systems allow 255 bytes)."""


CLIENT_ID_PLACEHOLDERS = ("hostname", "link", "vehicle")
"""What ``mqtt.client_id`` may name: host name, link and the (filled-in) vehicle id."""


FLIGHT_INDEX_SUFFIX = ".json"
"""A finished log's flight index (``upload.sidecar``) is its file name with this appended
(``12_34_56.ulg.json``); rotation deletes it with its log."""

DEFAULT_CLIENT_ID = "ulogstream-{vehicle}"
"""The MQTT client id unless configured: stable across restarts, unique per vehicle id."""


class SettingError(ValueError):
    """A value no setting of that key can take; the loader adds the source to the message.

    Args:
        key: The dotted key, e.g. ``mqtt.qos``.
        problem: What is wrong, phrased to follow the key ("must be 0, 1 or 2, not 3").
    """

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"{key} {problem}")
        self.key = key


def require(condition: bool, key: str, problem: str) -> None:  # noqa: FBT001
    """Raise :class:`SettingError` for ``key`` unless ``condition`` holds."""
    if not condition:
        raise SettingError(key, problem)


def check_id(key: str, value: int) -> None:
    """``key`` must hold a MAVLink system or component id (1-255)."""
    require(1 <= value <= MAX_MAVLINK_ID, key, f"must be a MAVLink id from 1 to 255, not {value}")


def check_non_negative(key: str, value: float, unit: str) -> None:
    """``key`` must not be negative (``unit`` follows the number in the message)."""
    require(value >= 0, key, f"must be >= 0{unit}, not {value}")


FOXGLOVE_DEFAULT_PORT = 8765
"""The Foxglove WebSocket port Foxglove's "Open connection" dialog suggests."""


class ListenAddress(msgspec.Struct, frozen=True):
    """Where a server listens (from :func:`parse_listen`)."""

    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def parse_listen(text: str, key: str = "foxglove.listen") -> ListenAddress:
    """``[HOST:]PORT`` (host 127.0.0.1 when left out; ``[::1]:PORT`` for IPv6); port 0: any.

    Raises:
        SettingError: ``text`` is not such an address (the key is ``key``).
    """
    host, sep, port = text.strip().rpartition(":")
    if not sep:
        host = "127.0.0.1"
    host = host.removeprefix("[").removesuffix("]") if host.startswith("[") else host
    require(
        port.isdigit() and 0 <= int(port) <= MAX_PORT,
        key,
        f"must be [HOST:]PORT with a port from 0 to 65535 (e.g. 127.0.0.1:8765), not {text!r}",
    )
    require(bool(host) and " " not in host, key, f"has an empty or invalid host in {text!r}")
    return ListenAddress(host, int(port))


UPLOAD_PLACEHOLDERS = ("path", "name", "stem", "vehicle", "date", "sha256")
"""What ``upload.command`` may name: the finished ``.ulg`` file's path, its file name, the name
without ``.ulg``, the vehicle id, the log's UTC date (``YYYY-MM-DD``) and its SHA-256 in hex."""


S3_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


S3_REGION = re.compile(r"^[a-z0-9][a-z0-9-]*$")


IPV4_ADDRESS = re.compile(r"^\d+\.\d+\.\d+\.\d+$")


CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f]")


def check_s3_bucket(bucket: str, key: str = "upload.s3.bucket") -> None:
    """Check ``bucket`` against S3's bucket naming rules.

    Raises:
        SettingError: 3 to 63 characters of lower-case letters, digits, dots and hyphens,
            beginning and ending with a letter or digit, not an IP address.
    """
    require(
        bool(S3_BUCKET.match(bucket)) and ".." not in bucket and not IPV4_ADDRESS.match(bucket),
        key,
        "must be an S3 bucket name (3 to 63 lower-case letters, digits, dots and hyphens, "
        f"beginning and ending with a letter or digit), not {bucket!r}",
    )


def parse_s3_endpoint(url: str, key: str = "upload.s3.endpoint_url") -> str:
    """The one reading of ``upload.s3.endpoint_url``: ``http(s)://HOST[:PORT]``.

    Returns:
        The URL without a trailing slash.

    Raises:
        SettingError: Not such a URL, or credentials in it.
    """
    server_url(
        url,
        key,
        schemes=("http", "https"),
        credentials="put the keys in AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY or "
        "upload.s3.credentials_file",
        only=" (the bucket is upload.s3.bucket)",
    )
    return url.rstrip("/")


def server_url(
    url: str, key: str, *, schemes: tuple[str, ...], credentials: str, only: str = ""
) -> tuple[SplitResult, int | None]:
    """``url`` split and checked as ``SCHEME://HOST[:PORT]`` with a scheme of ``schemes``.

    A user name or password is refused (``credentials`` says where they go instead): a URL is
    logged and shown.

    Returns:
        Its parts and its port (None: the scheme's default).

    Raises:
        SettingError: Anything else in it, or no host (``key`` names the setting).
    """
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as err:
        raise SettingError(key, f"is not a valid URL ({err}): {url!r}") from None
    prefixes = " or ".join(f"{scheme}://" for scheme in schemes)
    require(parts.scheme in schemes, key, f"must start with {prefixes}, not {url!r}")
    require(
        parts.username is None and parts.password is None,
        key,
        f"must not contain a user name or password; {credentials}",
    )
    require(bool(parts.hostname), key, f"has no host name: {url!r}")
    require(port is None or port >= 1, key, f"has port {port}, which is not from 1 to 65535")
    require(
        parts.path in {"", "/"} and not parts.query and not parts.fragment,
        key,
        f"must be only scheme, host and port{only}, not {url!r}",
    )
    return parts, port


DESCRIPTION_PLACEHOLDERS = ("vehicle", "date", "name", "stem", "sys_uuid")
"""What ``upload.flight_review.description`` may name (see :data:`UPLOAD_PLACEHOLDERS`)."""


def upload_command(command: str) -> list[str]:
    """``upload.command`` split into words (placeholders still in them), checked.

    Raises:
        SettingError: Unbalanced quotes, an empty command, a placeholder not in
            :data:`UPLOAD_PLACEHOLDERS`, or no ``{path}``.
    """
    key = "upload.command"
    try:
        words = shlex.split(command)
    except ValueError as err:
        raise SettingError(key, f"cannot be split into words ({err}): {command!r}") from None
    require(bool(words), key, "must not be empty; unset it for no upload")
    names: set[str] = set()
    for word in words:
        names |= placeholders_of(key, word, UPLOAD_PLACEHOLDERS)
    require("path" in names, key, f"must name the log with {{path}}: {command!r}")
    return words


def placeholders_of(key: str, template: str, allowed: tuple[str, ...]) -> set[str]:
    """The ``{name}`` placeholders of ``template``, each checked against ``allowed``."""
    choices = ", ".join(f"{{{name}}}" for name in allowed)
    try:
        fields = list(string.Formatter().parse(template))
    except ValueError as err:
        problem = f"is not a valid template ({err}; write {{{{ and }}}} for braces): {template!r}"
        raise SettingError(key, problem) from None
    names: set[str] = set()
    for _, name, spec, conversion in fields:
        if name is None:
            continue
        require(
            name in allowed and not spec and conversion is None,
            key,
            f"has an unknown placeholder {{{name}}}; use {choices}",
        )
        names.add(name)
    return names


def check_template(key: str, template: str | None, allowed: tuple[str, ...]) -> None:
    """``template`` (if set) may name only the ``allowed`` placeholders."""
    if template is not None:
        placeholders_of(key, template, allowed)


def host_name() -> str:
    """This machine's host name without its domain (``{hostname}``)."""
    return socket.gethostname().split(".")[0] or "host"


def link_name(connection: str) -> str:
    """``link.connection`` as one topic level (``{link}``).

    ``/dev/pixhawk`` -> ``pixhawk``, ``udpin:0.0.0.0:14550`` -> ``udpin-0.0.0.0-14550``.
    """
    name = connection.removeprefix("/dev/")
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-") or "link"


def safe_vehicle_id(text: str) -> str:
    """``text`` as a vehicle id that is one MQTT topic level and one safe path component.

    Anything but ASCII letters, digits, ``_``, ``-`` and ``.`` becomes ``_``, a leading ``.``
    too (no hidden folder, no ``..``), and the id is cut to :data:`MAX_VEHICLE_ID_LENGTH`.
    """
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", text)[:MAX_VEHICLE_ID_LENGTH]
    if safe.startswith("."):
        safe = "_" + safe[1:]
    return safe or "vehicle"


class BrokerAddress(msgspec.Struct, frozen=True):
    """Where the MQTT broker is (from :func:`parse_mqtt_url`).

    Attributes:
        host: Host name or IP address (IPv6 without brackets).
        port: TCP port (the scheme's default when the URL names none).
        tls: Whether the URL was ``mqtts://``.
    """

    host: str
    port: int
    tls: bool


def parse_mqtt_url(url: str, *, key: str = "mqtt.url") -> BrokerAddress:
    """The one reading of ``mqtt.url``: ``mqtt://HOST[:PORT]`` or ``mqtts://HOST[:PORT]``.

    Credentials are refused, the user name too: they belong in ``mqtt.username`` and
    ``mqtt.password_file``/``mqtt.password_env``, not in a URL that is logged and shown.

    Raises:
        SettingError: ``url`` is not such a URL (``key`` names the setting).
    """
    parts, port = server_url(
        url,
        key,
        schemes=tuple(MQTT_DEFAULT_PORTS),
        credentials="use mqtt.username and mqtt.password_file or mqtt.password_env",
    )
    return BrokerAddress(
        host=parts.hostname or "",
        port=MQTT_DEFAULT_PORTS[parts.scheme] if port is None else port,
        tls=parts.scheme == "mqtts",
    )


def read_password(
    password_file: Path | None,
    password_env: str | None,
    environ: Mapping[str, str] = os.environ,
) -> str | None:
    """The MQTT password: the first line of ``password_file``, or ``$password_env``.

    Returns:
        The password, or None when neither source is set.

    Raises:
        ConfigError: Both are set, the file cannot be read or the variable is not set.
    """
    if password_file is not None and password_env is not None:
        msg = "mqtt.password_env cannot be set together with mqtt.password_file; choose one"
        raise ConfigError(msg)
    if password_file is not None:
        try:
            text = password_file.read_text(encoding="utf-8")
        except OSError as err:
            msg = f"mqtt.password_file {password_file} cannot be read: {err.strerror}"
            raise ConfigError(msg) from err
        return text.splitlines()[0] if text else ""
    if password_env is not None:
        if password_env not in environ:
            msg = f"mqtt.password_env names ${password_env}, which is not set"
            raise ConfigError(msg)
        return environ[password_env]
    return None


# -- connection strings ------------------------------------------------------------------

EXPECTED_FORMS = (
    "udpin:HOST:PORT, udpout:HOST:PORT, udp:HOST:PORT (= udpin), tcp:HOST:PORT, tcpin:HOST:PORT, "
    "or a serial device such as /dev/ttyACM0, /dev/ttyUSB0:921600 or /dev/ttyUSB0,921600"
)
"""What a connection string may look like, quoted in every parse error."""


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


class ConnectionSpec(msgspec.Struct, frozen=True):
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
    if not lowest <= port <= MAX_PORT:
        _fail(text, f"port {port} is outside {lowest}-{MAX_PORT}")
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


class ConnectionStringError(ConfigError):
    """A connection string that is none of the expected forms; ``problem`` says why."""

    def __init__(self, text: str, problem: str) -> None:
        super().__init__(f"connection {text!r} is not valid ({problem}); expected {EXPECTED_FORMS}")
        self.text = text
        self.problem = problem


def _fail(text: str, problem: str) -> NoReturn:
    raise ConnectionStringError(text, problem)
