"""Settings: typed, frozen configuration loaded from TOML plus command-line overrides.

``configs/ulogstream.toml`` documents every setting with its default; a test keeps the two equal.
Errors name the source (file or command line), the dotted key and what is wrong, and are raised as
:class:`~ulogstream.errors.ConfigError`. Secrets are never inline: the MQTT password comes from a
file or an environment variable.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
import shlex
import socket
import string
import tomllib
import types
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal, get_args, get_origin
from urllib.parse import SplitResult, urlsplit

from ulogstream.errors import ConfigError
from ulogstream.stream.packets import MAV_COMP_ID_LOG
from ulogstream.stream.reassembler import DEFAULT_REORDER_PACKETS, DEFAULT_REORDER_TIME

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

Encoding = Literal["json", "msgpack", "ulog"]
MqttProtocol = Literal["3.1.1", "5"]
LogLevel = Literal["debug", "info", "warning", "error"]

ENCODINGS: tuple[Encoding, ...] = ("json", "msgpack", "ulog")
MQTT_DEFAULT_PORTS = {"mqtt": 1883, "mqtts": 8883}
"""``mqtt://host[:1883]`` plain TCP, ``mqtts://host[:8883]`` TLS (IANA ports)."""

MAX_MAVLINK_ID = 0xFF
MAX_PORT = 0xFFFF

DEFAULT_BAUD = 921600
"""Serial rate unless the connection string or ``link.baud`` names one: PX4's TELEM2 default.

USB CDC ports (a Pixhawk's USB) run at USB speed whatever the rate.
"""

_TOPIC_FORBIDDEN = re.compile(r"[+#\x00]")
_LEVEL_FORBIDDEN = re.compile(r"[/+#\x00]")

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
DEFAULT_CLIENT_ID = "ulogstream-{vehicle}"
"""The MQTT client id unless configured: stable across restarts, unique per vehicle id."""
_NETWORK_LINK = re.compile(r"^(?:udpin|udpout|udp|tcp):(?P<host>.*):(?P<port>[^:]*)$")


class SettingError(ValueError):
    """A value no setting of that key can take; the loader adds the source to the message.

    Args:
        key: The dotted key, e.g. ``mqtt.qos``.
        problem: What is wrong, phrased to follow the key ("must be 0, 1 or 2, not 3").
    """

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"{key} {problem}")
        self.key = key


def _require(condition: bool, key: str, problem: str) -> None:  # noqa: FBT001
    if not condition:
        raise SettingError(key, problem)


def _check_id(key: str, value: int) -> None:
    _require(1 <= value <= MAX_MAVLINK_ID, key, f"must be a MAVLink id from 1 to 255, not {value}")


def _check_non_negative(key: str, value: float, unit: str) -> None:
    _require(value >= 0, key, f"must be >= 0{unit}, not {value}")


@dataclass(frozen=True, kw_only=True, slots=True)
class LinkSettings:
    """The MAVLink link to the vehicle and our identity on it.

    Attributes:
        connection: A serial device (``/dev/pixhawk``), ``udpin:HOST:PORT`` or ``udpout:HOST:PORT``.
        baud: Serial baud rate, unless ``connection`` names one (``/dev/ttyUSB0:57600``); USB CDC
            ports ignore it (they run at USB speed).
        sysid: Our MAVLink system id.
        compid: Our MAVLink component id (never 0; 155 is MAV_COMP_ID_LOG).
        target_sysid: Record only the autopilot with this system id; None records every
            autopilot (HEARTBEAT from compid 1) on the link, each in its own session.
        signing_key_file: A file holding the 32-byte MAVLink 2 signing key; None: no signing.
        hint_after_s: A link without any valid MAVLink message for this long gets one warning
            saying what is likely wrong (baud rate, port, PX4's MAVLink settings); 0: never.
        reorder_packets: Packets held while a missing one may still arrive (networks that
            reorder); 0 declares every gap at once.
        reorder_window_s: Longest time a missing packet is waited for.
    """

    connection: str = "/dev/pixhawk"
    baud: int = DEFAULT_BAUD
    sysid: int = 254
    compid: int = MAV_COMP_ID_LOG
    target_sysid: int | None = None
    signing_key_file: Path | None = None
    hint_after_s: float = 5.0
    reorder_packets: int = DEFAULT_REORDER_PACKETS
    reorder_window_s: float = DEFAULT_REORDER_TIME

    def __post_init__(self) -> None:
        _require(bool(self.connection.strip()), "link.connection", "must not be empty")
        network = _NETWORK_LINK.match(self.connection)
        if network is not None:
            port = network.group("port")
            _require(
                port.isdigit() and 1 <= int(port) <= MAX_PORT,
                "link.connection",
                f"has port {port!r}, which is not from 1 to 65535",
            )
        _require(self.baud > 0, "link.baud", f"must be > 0, not {self.baud}")
        _check_non_negative("link.hint_after_s", self.hint_after_s, " s")
        _check_non_negative("link.reorder_packets", self.reorder_packets, "")
        _check_non_negative("link.reorder_window_s", self.reorder_window_s, " s")
        _check_id("link.sysid", self.sysid)
        _check_id("link.compid", self.compid)
        if self.target_sysid is not None:
            _check_id("link.target_sysid", self.target_sysid)


@dataclass(frozen=True, kw_only=True, slots=True)
class RecordingSettings:
    """Where and how logs are written.

    Attributes:
        out_dir: Logs go to ``{out_dir}/{vehicle}/{YYYY-MM-DD}/{HH_MM_SS}.ulg`` (UTC;
            ``{vehicle}`` is the vehicle id, see ``mqtt.vehicle_id``).
        min_free_mb: Recording stops cleanly before free space drops below this.
        max_logs: Keep at most this many finished logs in ``out_dir`` (every vehicle's), deleting
            the oldest; 0: no limit.
        max_total_mb: Keep all logs in ``out_dir`` (the current one included) under this total
            size by deleting the oldest finished ones; 0: no limit.
        idle_timeout_s: How long an open log waits for its data to come back through a link
            outage (USB unplugged, radio out of range) before it is finished as incomplete and
            a new stream is requested; longer than PX4's 2.5 s ack timeout.
    """

    out_dir: Path = Path("/var/lib/ulogstream")
    min_free_mb: int = 200
    max_logs: int = 0
    max_total_mb: int = 0
    idle_timeout_s: float = 30.0

    def __post_init__(self) -> None:
        _check_non_negative("recording.min_free_mb", self.min_free_mb, " MB")
        _check_non_negative("recording.max_logs", self.max_logs, "")
        _check_non_negative("recording.max_total_mb", self.max_total_mb, " MB")
        _require(
            self.idle_timeout_s > 0,
            "recording.idle_timeout_s",
            f"must be > 0 s, not {self.idle_timeout_s}",
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class MqttSettings:
    """Live publishing to an MQTT broker (topics and payloads: docs/mqtt.md).

    Attributes:
        url: ``mqtt://host[:port]`` or ``mqtts://host[:port]``; None (and no ``urls``): no
            publishing.
        urls: More brokers (same form), tried in turn after ``url`` when one cannot be reached.
        root: First topic level.
        vehicle_id: The vehicle id: second topic level and the recording folder under
            ``recording.out_dir``, a template of :data:`VEHICLE_PLACEHOLDERS`; None:
            :data:`DEFAULT_VEHICLE_ID` (the autopilot's ``sys_uuid``, host name, link and
            system id until a log has shown it). Filled in, it is made one safe path component.
        client_id: MQTT client id, a template of :data:`CLIENT_ID_PLACEHOLDERS`; None:
            :data:`DEFAULT_CLIENT_ID`, the same at every restart (broker ACLs keyed on it work).
        keepalive_s: Seconds between MQTT pings (the broker drops a silent client after 1.5x).
        session_expiry_s: MQTT 5 session expiry in seconds (0: the session ends with the
            connection); on 3.1.1 any value above 0 asks for a persistent session.
        retained_resend_per_s: After a reconnect, retained topics are sent again at most this
            many per second (interleaved with live data), not all at once.
        max_messages_per_s: Cap on messages per second on this connection (e.g. 100 for AWS IoT
            Core); samples over it are dropped (and counted), never status, log or retained
            topics; 0: no cap.
        qos: MQTT QoS of topic data (retained metadata uses the same).
        protocol: MQTT protocol version, ``"3.1.1"`` or ``"5"``.
        tls_ca_file: CA bundle to verify the broker; None: the system's (only with mqtts).
        tls_cert_file: Client certificate for mutual TLS (needs ``tls_key_file``).
        tls_key_file: Private key of ``tls_cert_file``.
        username: Broker user name; None: anonymous.
        password_file: File whose first line is the password (never inline).
        password_env: Environment variable holding the password (never inline).
        encodings: Payload encodings published, each under its own subtree.
        default_rate_hz: Per (topic, multi_id) rate cap; 0: every sample.
        rates: Per-topic rate caps overriding ``default_rate_hz``.
        include: Topic name patterns (fnmatch) to publish; empty: all topics.
        exclude: Topic name patterns never published (applied after ``include``).
        outbox_size: Messages queued for a slow broker before the oldest are dropped.
        param_topics: Also publish each parameter as a retained ``param/NAME`` (the ``params``
            object is always published); false keeps a fleet's broker from holding a thousand
            retained topics per vehicle.
    """

    url: str | None = None
    urls: tuple[str, ...] = ()
    root: str = "ulogstream"
    vehicle_id: str | None = None
    client_id: str | None = None
    keepalive_s: int = 30
    session_expiry_s: int = 0
    retained_resend_per_s: float = 100.0
    max_messages_per_s: float = 0.0
    qos: int = 0
    protocol: MqttProtocol = "3.1.1"
    tls_ca_file: Path | None = None
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    username: str | None = None
    password_file: Path | None = None
    password_env: str | None = None
    encodings: tuple[Encoding, ...] = ("json",)
    default_rate_hz: float = 10.0
    rates: Mapping[str, float] = field(default_factory=dict)
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    outbox_size: int = 10000
    param_topics: bool = True

    def __post_init__(self) -> None:
        if self.url is not None:
            parse_mqtt_url(self.url)
        for url in self.urls:
            parse_mqtt_url(url, key="mqtt.urls")
        brokers = self.broker_urls()
        _require(
            len(set(brokers)) == len(brokers),
            "mqtt.urls",
            f"names a broker twice: {list(brokers)}",
        )
        _check_template("mqtt.vehicle_id", self.vehicle_id, VEHICLE_PLACEHOLDERS)
        _check_template("mqtt.client_id", self.client_id, CLIENT_ID_PLACEHOLDERS)
        _require(
            self.keepalive_s >= 1, "mqtt.keepalive_s", f"must be >= 1 s, not {self.keepalive_s}"
        )
        _check_non_negative("mqtt.session_expiry_s", self.session_expiry_s, " s")
        _require(
            self.retained_resend_per_s > 0,
            "mqtt.retained_resend_per_s",
            f"must be > 0, not {self.retained_resend_per_s}",
        )
        _check_non_negative("mqtt.max_messages_per_s", self.max_messages_per_s, "")
        _require(
            bool(self.root) and not _TOPIC_FORBIDDEN.search(self.root),
            "mqtt.root",
            f"must be a non-empty topic without '+', '#' or NUL, not {self.root!r}",
        )
        _require(
            not self.root.startswith("/") and not self.root.endswith("/"),
            "mqtt.root",
            f"must not start or end with '/', not {self.root!r}",
        )
        if self.vehicle_id is not None:
            _require(
                bool(self.vehicle_id) and not _LEVEL_FORBIDDEN.search(self.vehicle_id),
                "mqtt.vehicle_id",
                "must be one non-empty topic level without '/', '+' or '#', "
                f"not {self.vehicle_id!r}",
            )
        _require(self.qos in {0, 1, 2}, "mqtt.qos", f"must be 0, 1 or 2, not {self.qos}")
        _require(
            (self.tls_cert_file is None) == (self.tls_key_file is None),
            "mqtt.tls_key_file" if self.tls_key_file is None else "mqtt.tls_cert_file",
            "must be set together with "
            + ("mqtt.tls_cert_file" if self.tls_key_file is None else "mqtt.tls_key_file"),
        )
        _require(
            self.password_file is None or self.password_env is None,
            "mqtt.password_env",
            "cannot be set together with mqtt.password_file; choose one",
        )
        if self.password_env is not None:
            _require(bool(self.password_env), "mqtt.password_env", "must name a variable, not ''")
        _require(bool(self.encodings), "mqtt.encodings", "must list at least one encoding")
        _require(
            len(set(self.encodings)) == len(self.encodings),
            "mqtt.encodings",
            f"lists an encoding twice: {list(self.encodings)}",
        )
        # Frozen all the way down: the daemon shares one Settings between its tasks.
        object.__setattr__(self, "rates", types.MappingProxyType(dict(self.rates)))
        _check_non_negative("mqtt.default_rate_hz", self.default_rate_hz, " Hz")
        for topic, rate in self.rates.items():
            _check_non_negative(f"mqtt.rates.{topic}", rate, " Hz")
        _require(self.outbox_size >= 1, "mqtt.outbox_size", f"must be >= 1, not {self.outbox_size}")

    def broker_urls(self) -> tuple[str, ...]:
        """The brokers tried in turn: ``url``, then ``urls`` (empty: no publishing)."""
        return self.urls if self.url is None else (self.url, *self.urls)

    @property
    def uses_sys_uuid(self) -> bool:
        """Whether the vehicle id names the autopilot's ``{sys_uuid}``."""
        return "{sys_uuid}" in (DEFAULT_VEHICLE_ID if self.vehicle_id is None else self.vehicle_id)

    def effective_vehicle_id(
        self, *, link: str = "", sysid: int = 1, sys_uuid: str | None = None
    ) -> str:
        """The vehicle id used in topics: the ``vehicle_id`` template (or the default) filled in.

        Args:
            link: ``link.connection`` (``{link}``: made one topic level, ``/dev/`` dropped).
            sysid: The autopilot's MAVLink system id (``{sysid}``).
            sys_uuid: The autopilot's ``sys_uuid`` (``{sys_uuid}``); None: not known yet, and
                :data:`SYS_UUID_STAND_IN` stands in for it.
        """
        template = DEFAULT_VEHICLE_ID if self.vehicle_id is None else self.vehicle_id
        values = {"hostname": host_name(), "link": link_name(link), "sysid": sysid}
        if sys_uuid is None:
            sys_uuid = SYS_UUID_STAND_IN.format_map(values)
        return safe_vehicle_id(template.format_map({**values, "sys_uuid": sys_uuid}))

    def effective_client_id(self, vehicle_id: str, *, link: str = "") -> str:
        """The MQTT client id: the ``client_id`` template (or the default) filled in."""
        template = DEFAULT_CLIENT_ID if self.client_id is None else self.client_id
        return template.format(hostname=host_name(), link=link_name(link), vehicle=vehicle_id)

    def rate_hz(self, topic: str) -> float:
        """The rate cap of ``topic`` (0: every sample)."""
        return self.rates.get(topic, self.default_rate_hz)


FOXGLOVE_DEFAULT_PORT = 8765
"""The Foxglove WebSocket port Foxglove's "Open connection" dialog suggests."""


@dataclass(frozen=True, slots=True)
class ListenAddress:
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
    _require(
        port.isdigit() and 0 <= int(port) <= MAX_PORT,
        key,
        f"must be [HOST:]PORT with a port from 0 to 65535 (e.g. 127.0.0.1:8765), not {text!r}",
    )
    _require(bool(host) and " " not in host, key, f"has an empty or invalid host in {text!r}")
    return ListenAddress(host, int(port))


@dataclass(frozen=True, kw_only=True, slots=True)
class FoxgloveSettings:
    """Live view in Foxglove over its WebSocket protocol (docs in the README).

    Attributes:
        enabled: Serve the decoded topics; off unless asked for (``record --foxglove``).
        listen: ``[HOST:]PORT`` of the WebSocket server; beyond 127.0.0.1 is an explicit choice.
        tls_cert_file: PEM certificate: serve ``wss://`` only (needs ``tls_key_file``).
        tls_key_file: PEM PKCS#8 private key of ``tls_cert_file``.
        default_rate_hz: Per (topic, multi_id) rate cap; 0: every sample.
        backlog: Messages queued per viewer; a slow viewer loses the oldest beyond this.
    """

    enabled: bool = False
    listen: str = f"127.0.0.1:{FOXGLOVE_DEFAULT_PORT}"
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    default_rate_hz: float = 10.0
    backlog: int = 1024

    def __post_init__(self) -> None:
        parse_listen(self.listen)
        given, missing = ("tls_cert_file", "tls_key_file")
        if self.tls_cert_file is None:
            given, missing = missing, given
        _require(
            (self.tls_cert_file is None) == (self.tls_key_file is None),
            f"foxglove.{given}",
            f"needs foxglove.{missing} too: TLS takes the certificate and its key",
        )
        _check_non_negative("foxglove.default_rate_hz", self.default_rate_hz, " Hz")
        _require(self.backlog >= 1, "foxglove.backlog", f"must be >= 1, not {self.backlog}")

    def address(self) -> ListenAddress:
        """The parsed :attr:`listen`."""
        return parse_listen(self.listen)


UPLOAD_PLACEHOLDERS = ("path", "name", "stem", "vehicle", "date", "sha256")
"""What ``upload.command`` may name: the finished ``.ulg`` file's path, its file name, the name
without ``.ulg``, the vehicle id, the log's UTC date (``YYYY-MM-DD``) and its SHA-256 in hex."""


S3_MIN_PART_MB = 5
"""S3's smallest part of a multipart upload (all but the last), in MiB."""
S3_MAX_PART_MB = 5 * 1024
"""S3's largest part, in MiB."""
_S3_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_S3_REGION = re.compile(r"^[a-z0-9][a-z0-9-]*$")
_IPV4 = re.compile(r"^\d+\.\d+\.\d+\.\d+$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True, kw_only=True, slots=True)
class S3Settings:
    """Uploading each finished log to S3 or an S3-compatible store (MinIO, Ceph, R2, ...).

    The object key is ``{prefix}/{vehicle}/{date}/{name}``. Credentials never stand here: they
    come from ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY`` (and ``AWS_SESSION_TOKEN``) in the
    environment, or from ``credentials_file``.

    Attributes:
        bucket: The bucket to upload to; None: no S3 upload.
        prefix: First part of every key (slashes at either end are ignored); empty: none.
        endpoint_url: ``http(s)://host[:port]`` of an S3-compatible store; None: AWS S3 in
            ``region``.
        region: The region requests are signed for (S3-compatible stores accept ``us-east-1``).
        credentials_file: An AWS shared credentials file (``aws_access_key_id``,
            ``aws_secret_access_key`` under ``[profile]``); None: the environment.
        profile: The section of ``credentials_file`` to use.
        part_size_mb: Logs larger than this go up in parts of this size, two at a time (memory
            held: about three parts); 5 to 5120.
        request_timeout_s: One request (one part) taking longer fails and is retried later;
            allow for the uplink (8 MiB at 1 Mbit/s take 70 s).
        verify_etag: After the upload, compare the object's ETag with the MD5 digest of the log
            (per part for a multipart upload); false for buckets whose ETag is no MD5 (SSE-KMS
            or SSE-C encryption). The size and SHA-256 are checked either way.
    """

    bucket: str | None = None
    prefix: str = ""
    endpoint_url: str | None = None
    region: str = "us-east-1"
    credentials_file: Path | None = None
    profile: str = "default"
    part_size_mb: int = 8
    request_timeout_s: float = 300.0
    verify_etag: bool = True

    def __post_init__(self) -> None:
        if self.bucket is not None:
            check_s3_bucket(self.bucket)
        _require(
            "//" not in self.prefix.strip("/") and not _CONTROL.search(self.prefix),
            "upload.s3.prefix",
            f"must be key levels without empty ones or control characters, not {self.prefix!r}",
        )
        if self.endpoint_url is not None:
            parse_s3_endpoint(self.endpoint_url)
        _require(
            bool(_S3_REGION.match(self.region)),
            "upload.s3.region",
            f"must be a region name such as us-east-1 or eu-central-1, not {self.region!r}",
        )
        _require(bool(self.profile), "upload.s3.profile", "must not be empty (e.g. default)")
        _require(
            S3_MIN_PART_MB <= self.part_size_mb <= S3_MAX_PART_MB,
            "upload.s3.part_size_mb",
            f"must be from {S3_MIN_PART_MB} to {S3_MAX_PART_MB} (S3's limits), "
            f"not {self.part_size_mb}",
        )
        _require(
            self.request_timeout_s > 0,
            "upload.s3.request_timeout_s",
            f"must be > 0 s, not {self.request_timeout_s}",
        )


def check_s3_bucket(bucket: str, key: str = "upload.s3.bucket") -> None:
    """Check ``bucket`` against S3's bucket naming rules.

    Raises:
        SettingError: 3 to 63 characters of lower-case letters, digits, dots and hyphens,
            beginning and ending with a letter or digit, not an IP address.
    """
    _require(
        bool(_S3_BUCKET.match(bucket)) and ".." not in bucket and not _IPV4.match(bucket),
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
    _server_url(
        url,
        key,
        schemes=("http", "https"),
        credentials="put the keys in AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY or "
        "upload.s3.credentials_file",
        only=" (the bucket is upload.s3.bucket)",
    )
    return url.rstrip("/")


def _server_url(
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
    _require(parts.scheme in schemes, key, f"must start with {prefixes}, not {url!r}")
    _require(
        parts.username is None and parts.password is None,
        key,
        f"must not contain a user name or password; {credentials}",
    )
    _require(bool(parts.hostname), key, f"has no host name: {url!r}")
    _require(port is None or port >= 1, key, f"has port {port}, which is not from 1 to 65535")
    _require(
        parts.path in {"", "/"} and not parts.query and not parts.fragment,
        key,
        f"must be only scheme, host and port{only}, not {url!r}",
    )
    return parts, port


UploadTargetName = Literal["command", "flight_review", "s3"]
"""Where ``upload.target`` sends finished logs (``"s3"`` joins with ``[upload.s3]``)."""
UPLOAD_TARGETS: tuple[UploadTargetName, ...] = get_args(UploadTargetName)
FlightReviewApi = Literal["plot_app", "api"]
"""The Flight Review generation: ``plot_app`` (the Python server, ``POST /upload``) or ``api``
(the Rust server, ``POST /api/upload``)."""
FlightReviewType = Literal["personal", "flightreport"]
"""A Flight Review upload's ``type``: personal (unlisted) or a flight report (public list)."""
DESCRIPTION_PLACEHOLDERS = ("vehicle", "date", "name", "stem", "sys_uuid")
"""What ``upload.flight_review.description`` may name (see :data:`UPLOAD_PLACEHOLDERS`)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class FlightReviewSettings:
    """Uploads to a Flight Review server (``upload.target = "flight_review"``).

    Attributes:
        url: The server, ``http(s)://HOST[:PORT][/PATH]`` (without ``/upload``).
        api: Which server generation answers there (:data:`FlightReviewApi`).
        type: ``personal`` or ``flightreport`` (listed publicly; sends wind speed, rating, video).
        description: The log's description; ``{vehicle}``, ``{date}``, ``{name}``, ``{stem}``
            and ``{sys_uuid}`` are filled in.
        email: Where the server mails the link ("" : no mail).
        public: A flight report is listed publicly (``plot_app`` only).
        allow_for_analysis: Let the server's maintainers use the log for statistics.
        wind_speed: The flight report's wind category: -1 not set, 0 calm, 5 breeze, 8 gale,
            10 storm.
        rating: The flight report's rating (``notset``, ``crash_pilot``, ``crash_sw_hw``,
            ``unsatisfactory``, ``good``, ``great``).
        video_url: The flight report's video link ("": none).
    """

    url: str = "https://review.px4.io"
    api: FlightReviewApi = "plot_app"
    type: FlightReviewType = "personal"
    description: str = "{vehicle} {name}"
    email: str = ""
    public: bool = False
    allow_for_analysis: bool = False
    wind_speed: int = -1
    rating: str = "notset"
    video_url: str = ""

    def __post_init__(self) -> None:
        key = "upload.flight_review"
        url_key = f"{key}.url"
        try:
            parts = urlsplit(self.url)
            parts.port  # noqa: B018 (a bad port raises here)
        except ValueError as err:
            raise SettingError(url_key, f"is not a valid URL ({err}): {self.url!r}") from None
        _require(
            parts.scheme in {"http", "https"} and bool(parts.hostname),
            f"{key}.url",
            f"must be http(s)://HOST[:PORT][/PATH], not {self.url!r}",
        )
        _require(
            not parts.query and not parts.fragment and parts.username is None,
            f"{key}.url",
            f"must be only scheme, host, port and path, not {self.url!r}",
        )
        _placeholders(f"{key}.description", self.description, DESCRIPTION_PLACEHOLDERS)
        _require(
            self.wind_speed >= -1,
            f"{key}.wind_speed",
            f"must be -1 (not set), 0 (calm), 5 (breeze), 8 (gale) or 10 (storm), not "
            f"{self.wind_speed}",
        )
        _require(
            bool(self.rating.strip()),
            f"{key}.rating",
            'must not be empty; "notset" leaves it unset',
        )
        _require(
            not self.video_url or self.video_url.startswith(("http://", "https://")),
            f"{key}.video_url",
            f"must be an http(s):// link or empty, not {self.video_url!r}",
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class UploadSettings:
    """Shipping each finished log off the vehicle, to a target (a command, Flight Review, S3).

    Attributes:
        target: Where logs go (:data:`UploadTargetName`): ``command`` runs :attr:`command`
            (unset: no upload), ``flight_review`` posts to :attr:`flight_review`'s server,
            ``s3`` puts objects in :attr:`s3`'s bucket.
        command: Run after every finished log, without a shell: split like a shell would
            (quotes), then :data:`UPLOAD_PLACEHOLDERS` filled into each word, e.g.
            ``rclone copyto {path} remote:logs/{vehicle}/{date}/{name}``; None: no upload.
        timeout_s: An upload (a run, an HTTP exchange) taking longer is stopped and counts as
            failed.
        attempts: Tries per log before it is given up (and reported); 1: no retry.
        backoff_s: Wait before the first retry; doubled after each failure up to 10 minutes.
        queue_size: Finished logs waiting for upload; beyond this new ones are not uploaded
            (and counted), so a dead remote never grows memory or the journal.
        delete_after_upload: Delete the local file once its upload succeeded.
        only_when_disarmed: Upload only while the vehicle is disarmed (HEARTBEAT base_mode);
            logs wait while it is armed.
        flight_review: The ``[upload.flight_review]`` section.
        s3: The ``[upload.s3]`` section.
    """

    target: UploadTargetName = "command"
    command: str | None = None
    timeout_s: float = 600.0
    attempts: int = 5
    backoff_s: float = 10.0
    queue_size: int = 100
    delete_after_upload: bool = False
    only_when_disarmed: bool = False
    flight_review: FlightReviewSettings = field(default_factory=FlightReviewSettings)
    s3: S3Settings = field(default_factory=S3Settings)

    def __post_init__(self) -> None:
        _require(
            self.target in UPLOAD_TARGETS,
            "upload.target",
            f"must be one of {', '.join(map(repr, UPLOAD_TARGETS))}, not {self.target!r}",
        )
        if self.command is not None:
            upload_command(self.command)
            _require(
                self.target == "command",
                "upload.command",
                f'is only run with upload.target = "command", not {self.target!r}; '
                "unset one of them",
            )
        _require(
            self.target != "s3" or self.s3.bucket is not None,
            "upload.s3.bucket",
            'must be set with upload.target = "s3" (the bucket logs go to)',
        )
        _require(self.timeout_s > 0, "upload.timeout_s", f"must be > 0 s, not {self.timeout_s}")
        _require(self.attempts >= 1, "upload.attempts", f"must be >= 1, not {self.attempts}")
        _check_non_negative("upload.backoff_s", self.backoff_s, " s")
        _require(self.queue_size >= 1, "upload.queue_size", f"must be >= 1, not {self.queue_size}")

    @property
    def enabled(self) -> bool:
        """Whether finished logs are uploaded at all (a target other than an unset command)."""
        return self.target != "command" or self.command is not None


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
    _require(bool(words), key, "must not be empty; unset it for no upload")
    names: set[str] = set()
    for word in words:
        names |= _placeholders(key, word, UPLOAD_PLACEHOLDERS)
    _require("path" in names, key, f"must name the log with {{path}}: {command!r}")
    return words


def _placeholders(key: str, template: str, allowed: tuple[str, ...]) -> set[str]:
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
        _require(
            name in allowed and not spec and conversion is None,
            key,
            f"has an unknown placeholder {{{name}}}; use {choices}",
        )
        names.add(name)
    return names


def _check_template(key: str, template: str | None, allowed: tuple[str, ...]) -> None:
    if template is not None:
        _placeholders(key, template, allowed)


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


@dataclass(frozen=True, kw_only=True, slots=True)
class LogSettings:
    """Our own diagnostics.

    Attributes:
        level: Python logging level name.
        status_line: Show a one-line live status (rates, losses, file) on a terminal.
    """

    level: LogLevel = "info"
    status_line: bool = True


@dataclass(frozen=True, kw_only=True, slots=True)
class SystemdSettings:
    """Integration with systemd when started as a service.

    Attributes:
        watchdog: Send WATCHDOG=1 when the unit sets WatchdogSec (no-op outside systemd).
    """

    watchdog: bool = True


@dataclass(frozen=True, kw_only=True, slots=True)
class Settings:
    """Every setting of ulogstream, grouped as in the TOML file."""

    link: LinkSettings = field(default_factory=LinkSettings)
    recording: RecordingSettings = field(default_factory=RecordingSettings)
    mqtt: MqttSettings = field(default_factory=MqttSettings)
    foxglove: FoxgloveSettings = field(default_factory=FoxgloveSettings)
    upload: UploadSettings = field(default_factory=UploadSettings)
    log: LogSettings = field(default_factory=LogSettings)
    systemd: SystemdSettings = field(default_factory=SystemdSettings)


GROUPS: dict[str, type[DataclassInstance]] = {
    "link": LinkSettings,
    "recording": RecordingSettings,
    "mqtt": MqttSettings,
    "foxglove": FoxgloveSettings,
    "upload": UploadSettings,
    "log": LogSettings,
    "systemd": SystemdSettings,
}
"""TOML section name -> settings class."""

_Section = typing.TypeVar("_Section", bound="DataclassInstance")

_S3_KEYS = "use AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY or upload.s3.credentials_file"
_INLINE_SECRETS = {
    "mqtt.password": "use mqtt.password_file or mqtt.password_env",
    "upload.s3.access_key_id": _S3_KEYS,
    "upload.s3.secret_access_key": _S3_KEYS,
}
COMMAND_LINE = "command line"
"""The source named in errors about ``overrides``."""


@dataclass(frozen=True, slots=True)
class BrokerAddress:
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
    parts, port = _server_url(
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


def mqtt_password(mqtt: MqttSettings, environ: Mapping[str, str] = os.environ) -> str | None:
    """Read the MQTT password from ``password_file`` or ``password_env`` (None when neither).

    Raises:
        ConfigError: The file cannot be read or the variable is not set.
    """
    return read_password(mqtt.password_file, mqtt.password_env, environ)


def load_settings(
    path: Path | None, overrides: Mapping[str, object] = types.MappingProxyType({})
) -> Settings:
    """Load ``path`` (None: defaults only), then apply ``overrides``.

    Args:
        path: A TOML file with the sections of :class:`Settings`.
        overrides: Dotted keys (``"mqtt.qos"``, ``"mqtt.rates.vehicle_attitude"``) and values,
            from the command line; they win over the file. None values are skipped.

    Raises:
        ConfigError: Naming the file (or "command line"), the key and what is wrong.
    """
    source = str(path) if path is not None else "defaults"
    raw: dict[str, object] = {}
    if path is not None:
        raw = _read_toml(path)
    sources: dict[str, str] = {}
    groups: dict[str, dict[str, object]] = {}
    for section, table in raw.items():
        if section not in GROUPS:
            msg = f"{source}: unknown section [{section}]{_suggest(section, GROUPS)}"
            raise ConfigError(msg)
        if not isinstance(table, dict):
            msg = f"{source}: {section} must be a table ([{section}]), not {_describe(table)}"
            raise ConfigError(msg)
        for name, value in table.items():
            key = f"{section}.{name}"
            groups.setdefault(section, {})[name] = _convert(key, value, source)
            sources[key] = source
    for key, value in overrides.items():
        if value is None:
            continue
        section, name, entry = _split_key(key, COMMAND_LINE)
        if entry is None:
            groups.setdefault(section, {})[name] = _convert(key, value, COMMAND_LINE)
        else:
            table = groups.setdefault(section, {})
            old = table.get(name, {})
            merged = dict(old) if isinstance(old, dict) else {}
            merged[entry] = _convert_entry(key, value, COMMAND_LINE)
            table[name] = merged
        sources[f"{section}.{name}"] = COMMAND_LINE
    try:
        return Settings(
            link=LinkSettings(**groups.get("link", {})),  # type: ignore[arg-type]
            recording=RecordingSettings(**groups.get("recording", {})),  # type: ignore[arg-type]
            mqtt=MqttSettings(**groups.get("mqtt", {})),  # type: ignore[arg-type]
            foxglove=FoxgloveSettings(**groups.get("foxglove", {})),  # type: ignore[arg-type]
            upload=_build(UploadSettings, groups.get("upload", {})),
            log=LogSettings(**groups.get("log", {})),  # type: ignore[arg-type]
            systemd=SystemdSettings(**groups.get("systemd", {})),  # type: ignore[arg-type]
        )
    except SettingError as err:
        where = sources.get(err.key) or sources.get(err.key.rpartition(".")[0], source)
        msg = f"{where}: {err}"
        raise ConfigError(msg) from None


def _build(cls: type[_Section], values: dict[str, object]) -> _Section:
    """``cls(**values)``, each sub-section's table (``[upload.flight_review]``) built first."""
    built = dict(values)
    for name, hint in typing.get_type_hints(cls).items():
        if _is_section(hint) and isinstance(built.get(name), dict):
            table = typing.cast("dict[str, object]", built[name])
            built[name] = _build(hint, table)
    return cls(**built)


def _is_section(hint: object) -> typing.TypeGuard[type[DataclassInstance]]:
    """Whether a setting's type ``hint`` is a sub-section (a settings dataclass)."""
    return isinstance(hint, type) and dataclasses.is_dataclass(hint)


def parse_override(text: str) -> tuple[str, object]:
    """Parse a ``KEY=VALUE`` command-line option; VALUE is TOML (``5``, ``true``, ``["a"]``).

    Settings that take text (strings, paths, choices) take VALUE as it is, so
    ``link.connection=/dev/ttyACM0`` and ``mqtt.vehicle_id=7`` need no quotes; quoted TOML
    strings are unquoted.

    Raises:
        ConfigError: ``text`` is not ``KEY=VALUE`` or names an unknown key.
    """
    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep or not key:
        msg = f"{COMMAND_LINE}: expected KEY=VALUE (e.g. mqtt.qos=1), not {text!r}"
        raise ConfigError(msg)
    section, name, entry = _split_key(key, COMMAND_LINE)
    try:
        parsed: object = tomllib.loads(f"v = {value}")["v"]
    except tomllib.TOMLDecodeError:
        parsed = value.strip()
    hint = _field_hint(section, name, COMMAND_LINE)
    if entry is not None and _is_section(hint):
        hint = _entry_hint(hint, f"{section}.{name}", entry, COMMAND_LINE)
    elif entry is not None:
        return key, parsed
    if _takes_text(hint):
        return key, parsed if isinstance(parsed, str) else value.strip()
    return key, parsed


def _takes_text(hint: object) -> bool:
    args = [a for a in get_args(hint) if a is not type(None)]
    if get_origin(hint) is types.UnionType and len(args) == 1:
        return _takes_text(args[0])
    if get_origin(hint) is Literal:
        return all(isinstance(a, str) for a in args)
    return hint in {str, Path}


def _read_toml(path: Path) -> dict[str, object]:
    try:
        with path.open("rb") as file:
            return tomllib.load(file)
    except FileNotFoundError:
        msg = f"config file {path} does not exist"
        raise ConfigError(msg) from None
    except OSError as err:
        msg = f"config file {path} cannot be read: {err.strerror}"
        raise ConfigError(msg) from err
    except tomllib.TOMLDecodeError as err:
        msg = f"{path}: invalid TOML: {err}"
        raise ConfigError(msg) from None
    except UnicodeDecodeError as err:
        msg = f"{path}: not UTF-8 text (byte {err.start}); TOML files are UTF-8: save it as UTF-8"
        raise ConfigError(msg) from None


def _split_key(key: str, source: str) -> tuple[str, str, str | None]:
    """Split ``section.name[.entry]``; ``entry`` only for tables (rates, sub-sections)."""
    parts = key.split(".", 2)
    if parts[0] not in GROUPS:
        msg = f"{source}: unknown key {key}{_suggest(key, all_keys(), dotted=True)}"
        raise ConfigError(msg)
    if len(parts) == 1:
        msg = f"{source}: {key} is a section; name a key in it, e.g. {key}.{_names(key)[0]}"
        raise ConfigError(msg)
    section, name = parts[0], parts[1]
    entry = parts[2] if len(parts) == 3 else None  # noqa: PLR2004
    hint = _field_hint(section, name, source)
    if _is_section(hint):
        if entry is None:
            first = dataclasses.fields(hint)[0].name
            msg = f"{source}: {key} is a section; name a key in it, e.g. {key}.{first}"
            raise ConfigError(msg)
        _entry_hint(hint, f"{section}.{name}", entry, source)
        return section, name, entry
    if entry is not None and get_origin(hint) is not Mapping:
        msg = f"{source}: unknown key {key}; {section}.{name} is not a table"
        raise ConfigError(msg)
    if entry is None and get_origin(hint) is Mapping:
        msg = f"{source}: {key} is a table; set one entry, e.g. {key}.vehicle_attitude"
        raise ConfigError(msg)
    return section, name, entry


def _names(section: str) -> list[str]:
    return [f.name for f in dataclasses.fields(GROUPS[section])]


def all_keys() -> list[str]:
    """Every dotted key of :class:`Settings` (``link.connection``, ..., ``systemd.watchdog``).

    A sub-section's keys are named in full (``upload.flight_review.url``).
    """
    keys: list[str] = []
    for section, cls in GROUPS.items():
        hints = typing.get_type_hints(cls)
        for name in _names(section):
            hint = hints[name]
            if _is_section(hint):
                keys += [f"{section}.{name}.{f.name}" for f in dataclasses.fields(hint)]
            else:
                keys.append(f"{section}.{name}")
    return keys


def _entry_hint(cls: type[DataclassInstance], table: str, entry: str, source: str) -> object:
    """The type of the key ``entry`` of the sub-section ``table`` (of settings class ``cls``)."""
    key = f"{table}.{entry}"
    if key in _INLINE_SECRETS:
        msg = f"{source}: {key} is never accepted inline; {_INLINE_SECRETS[key]}"
        raise ConfigError(msg)
    hints = typing.get_type_hints(cls)
    if entry not in hints:
        names = [f.name for f in dataclasses.fields(cls)]
        suggestion = _suggest(entry, names, dotted=True, prefix=f"{table}.")
        msg = f"{source}: unknown key {table}.{entry}{suggestion}"
        raise ConfigError(msg)
    hint: object = hints[entry]
    return hint


def _field_hint(section: str, name: str, source: str) -> object:
    key = f"{section}.{name}"
    if key in _INLINE_SECRETS:
        msg = f"{source}: {key} is never accepted inline; {_INLINE_SECRETS[key]}"
        raise ConfigError(msg)
    hints = typing.get_type_hints(GROUPS[section])
    if name not in hints:
        suggestion = _suggest(name, _names(section), dotted=True, prefix=f"{section}.")
        msg = f"{source}: unknown key {key}{suggestion}"
        raise ConfigError(msg)
    hint: object = hints[name]
    return hint


def _suggest(
    word: str, candidates: Iterable[str], *, dotted: bool = False, prefix: str = ""
) -> str:
    close = difflib.get_close_matches(word, sorted(candidates), n=1, cutoff=0.6)
    if not close:
        return ""
    return f" (did you mean {prefix}{close[0]}?)" if dotted else f" (did you mean [{close[0]}]?)"


def _convert(key: str, value: object, source: str) -> object:
    section, _, name = key.partition(".")
    hint = _field_hint(section, name, source)
    if _is_section(hint):
        if not isinstance(value, dict):
            msg = f"{source}: {key} must be a section ([{key}]), not {_describe(value)}"
            raise ConfigError(msg)
        return {
            str(k): _coerce(f"{key}.{k}", v, _entry_hint(hint, key, str(k), source), source)
            for k, v in value.items()
        }
    if get_origin(hint) is Mapping:
        if not isinstance(value, dict):
            msg = f"{source}: {key} must be a table of numbers, not {_describe(value)}"
            raise ConfigError(msg)
        return {str(k): _convert_entry(f"{key}.{k}", v, source) for k, v in value.items()}
    return _coerce(key, value, hint, source)


def _convert_entry(key: str, value: object, source: str) -> object:
    section, name, entry = key.split(".", 2)
    hint = _field_hint(section, name, source)
    if _is_section(hint):
        return _coerce(key, value, _entry_hint(hint, f"{section}.{name}", entry, source), source)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    msg = f"{source}: {key} must be a number, not {_describe(value)}"
    raise ConfigError(msg)


def _coerce(key: str, value: object, hint: object, source: str) -> object:
    """Check ``value`` against the type ``hint`` (TOML types; Path from str) and convert it."""
    args = get_args(hint)
    origin = get_origin(hint)
    if origin is types.UnionType and type(None) in args:
        if value is None:
            return None
        (hint,) = (a for a in args if a is not type(None))
        return _coerce(key, value, hint, source)
    expected: str
    if hint is bool:
        if isinstance(value, bool):
            return value
        expected = "true or false"
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        expected = "an integer"
    elif hint is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        expected = "a number"
    elif hint is str:
        if isinstance(value, str):
            return value
        expected = "a string"
    elif hint is Path:
        if isinstance(value, str | Path) and str(value):
            return Path(value)
        expected = "a path (a non-empty string)"
    elif origin is Literal:
        if value in args and isinstance(value, str):
            return value
        choices = ", ".join(repr(a) for a in args)
        msg = f"{source}: {key} must be one of {choices}, not {_describe(value)}"
        raise ConfigError(msg)
    elif origin is tuple:
        if isinstance(value, list | tuple):
            return tuple(_coerce(f"{key}[{i}]", v, args[0], source) for i, v in enumerate(value))
        expected = "a list"
    else:  # pragma: no cover (a Settings field of a type this loader does not know)
        msg = f"no TOML conversion for {key} of type {hint!r}"
        raise TypeError(msg)
    msg = f"{source}: {key} must be {expected}, not {_describe(value)}"
    raise ConfigError(msg)


def _describe(value: object) -> str:
    match value:
        case bool():
            return f"a boolean ({str(value).lower()})"
        case int():
            return f"an integer ({value})"
        case float():
            return f"a number ({value})"
        case str():
            return f"a string ({value!r})"
        case list() | tuple():
            return "a list"
        case dict():
            return "a table"
        case _:
            return f"a {type(value).__name__} ({value})"
