"""The settings, one frozen struct per TOML section, named as the TOML keys and checked once.

``configs/ulogstream.toml`` documents every setting with its default; a test keeps the two equal.
A section checks its own values when it is made (:class:`~ulogstream.config.values.SettingError`
names the key); nothing downstream checks them again. Secrets are never inline: the MQTT
password comes from a file or an environment variable.
"""

from __future__ import annotations

import os
import types
from collections.abc import Mapping  # noqa: TC003 (the loader reads the fields' types at run time)
from pathlib import Path
from typing import Literal, get_args
from urllib.parse import urlsplit

import msgspec

from ulogstream.config.values import (
    CLIENT_ID_PLACEHOLDERS,
    CONTROL_CHARACTERS,
    DEFAULT_BAUD,
    DESCRIPTION_PLACEHOLDERS,
    EXPECTED_FORMS,
    FOXGLOVE_DEFAULT_PORT,
    LEVEL_FORBIDDEN,
    S3_REGION,
    TOPIC_FORBIDDEN,
    VEHICLE_PLACEHOLDERS,
    ConnectionStringError,
    ListenAddress,
    SettingError,
    check_id,
    check_non_negative,
    check_s3_bucket,
    check_template,
    parse_connection,
    parse_listen,
    parse_mqtt_url,
    parse_s3_endpoint,
    placeholders_of,
    read_password,
    require,
    upload_command,
)
from ulogstream.stream.packets import MAV_COMP_ID_LOG
from ulogstream.stream.reassembler import DEFAULT_REORDER_PACKETS, DEFAULT_REORDER_TIME

Encoding = Literal["json", "msgpack", "ulog"]

FoxgloveEncoding = Literal["json", "cdr"]
RecordingMode = Literal["always", "while_armed"]
"""When the vehicle's log is streamed: from first contact on, or from each arming (a flight)."""


MqttProtocol = Literal["3.1.1", "5"]


LogLevel = Literal["debug", "info", "warning", "error"]


ENCODINGS: tuple[Encoding, ...] = ("json", "msgpack", "ulog")


class LinkSettings(msgspec.Struct, frozen=True, kw_only=True):
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
        require(bool(self.connection.strip()), "link.connection", "must not be empty")
        require(self.baud > 0, "link.baud", f"must be > 0, not {self.baud}")
        try:  # the one parser of connection strings: what it accepts, every link opens
            parse_connection(self.connection, default_baud=self.baud)
        except ConnectionStringError as err:
            key, problem = "link.connection", f"{err.text!r} is not valid ({err.problem})"
            raise SettingError(key, f"{problem}; expected {EXPECTED_FORMS}") from None
        check_non_negative("link.hint_after_s", self.hint_after_s, " s")
        check_non_negative("link.reorder_packets", self.reorder_packets, "")
        check_non_negative("link.reorder_window_s", self.reorder_window_s, " s")
        check_id("link.sysid", self.sysid)
        check_id("link.compid", self.compid)
        if self.target_sysid is not None:
            check_id("link.target_sysid", self.target_sysid)


class RecordingSettings(msgspec.Struct, frozen=True, kw_only=True):
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
        mode: ``always`` (stream from first contact to the end) or ``while_armed`` (stream from
            each arming to ``disarm_delay_s`` after the disarming: one log per flight).
        disarm_delay_s: With ``while_armed``, seconds after disarming before the flight's
            stream is stopped (the landing's last samples and PX4's end of log are kept).
    """

    out_dir: Path = Path("/var/lib/ulogstream")
    min_free_mb: int = 200
    max_logs: int = 0
    max_total_mb: int = 0
    idle_timeout_s: float = 30.0
    mode: RecordingMode = "always"
    disarm_delay_s: float = 2.0

    def __post_init__(self) -> None:
        check_non_negative("recording.min_free_mb", self.min_free_mb, " MB")
        require(
            self.mode in get_args(RecordingMode),
            "recording.mode",
            f"must be one of {', '.join(get_args(RecordingMode))}, not {self.mode!r}",
        )
        require(
            self.disarm_delay_s >= 0,
            "recording.disarm_delay_s",
            f"must be >= 0 s, not {self.disarm_delay_s}",
        )
        check_non_negative("recording.max_logs", self.max_logs, "")
        check_non_negative("recording.max_total_mb", self.max_total_mb, " MB")
        require(
            self.idle_timeout_s > 0,
            "recording.idle_timeout_s",
            f"must be > 0 s, not {self.idle_timeout_s}",
        )


class MqttSettings(msgspec.Struct, frozen=True, kw_only=True):
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
    rates: Mapping[str, float] = msgspec.field(default_factory=dict)
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
        require(
            len(set(brokers)) == len(brokers),
            "mqtt.urls",
            f"names a broker twice: {list(brokers)}",
        )
        check_template("mqtt.vehicle_id", self.vehicle_id, VEHICLE_PLACEHOLDERS)
        check_template("mqtt.client_id", self.client_id, CLIENT_ID_PLACEHOLDERS)
        require(
            self.keepalive_s >= 1, "mqtt.keepalive_s", f"must be >= 1 s, not {self.keepalive_s}"
        )
        check_non_negative("mqtt.session_expiry_s", self.session_expiry_s, " s")
        require(
            self.retained_resend_per_s > 0,
            "mqtt.retained_resend_per_s",
            f"must be > 0, not {self.retained_resend_per_s}",
        )
        check_non_negative("mqtt.max_messages_per_s", self.max_messages_per_s, "")
        require(
            bool(self.root) and not TOPIC_FORBIDDEN.search(self.root),
            "mqtt.root",
            f"must be a non-empty topic without '+', '#' or NUL, not {self.root!r}",
        )
        require(
            "" not in self.root.split("/"),
            "mqtt.root",
            f"must not start or end with '/' or hold an empty level ('//'), not {self.root!r}",
        )
        if self.vehicle_id is not None:
            require(
                bool(self.vehicle_id) and not LEVEL_FORBIDDEN.search(self.vehicle_id),
                "mqtt.vehicle_id",
                "must be one non-empty topic level without '/', '+' or '#', "
                f"not {self.vehicle_id!r}",
            )
        require(self.qos in {0, 1, 2}, "mqtt.qos", f"must be 0, 1 or 2, not {self.qos}")
        require(
            (self.tls_cert_file is None) == (self.tls_key_file is None),
            "mqtt.tls_key_file" if self.tls_key_file is None else "mqtt.tls_cert_file",
            "must be set together with "
            + ("mqtt.tls_cert_file" if self.tls_key_file is None else "mqtt.tls_key_file"),
        )
        require(
            self.password_file is None or self.password_env is None,
            "mqtt.password_env",
            "cannot be set together with mqtt.password_file; choose one",
        )
        if self.password_env is not None:
            require(bool(self.password_env), "mqtt.password_env", "must name a variable, not ''")
        require(
            self.username is not None or (self.password_file is None and self.password_env is None),
            "mqtt.username",
            "must be set when a password is (mqtt.password_file or mqtt.password_env)",
        )
        require(bool(self.encodings), "mqtt.encodings", "must list at least one encoding")
        require(
            len(set(self.encodings)) == len(self.encodings),
            "mqtt.encodings",
            f"lists an encoding twice: {list(self.encodings)}",
        )
        # Frozen all the way down: the recorder shares one Settings between its tasks.
        msgspec.structs.force_setattr(self, "rates", types.MappingProxyType(dict(self.rates)))
        check_non_negative("mqtt.default_rate_hz", self.default_rate_hz, " Hz")
        for topic, rate in self.rates.items():
            check_non_negative(f"mqtt.rates.{topic}", rate, " Hz")
        require(self.outbox_size >= 1, "mqtt.outbox_size", f"must be >= 1, not {self.outbox_size}")

    def broker_urls(self) -> tuple[str, ...]:
        """The brokers tried in turn: ``url``, then ``urls`` (empty: no publishing)."""
        return self.urls if self.url is None else (self.url, *self.urls)

    def rate_hz(self, topic: str) -> float:
        """The rate cap of ``topic`` (0: every sample)."""
        return self.rates.get(topic, self.default_rate_hz)


class FoxgloveSettings(msgspec.Struct, frozen=True, kw_only=True):
    """Live view in Foxglove over its WebSocket protocol (docs in the README).

    Attributes:
        enabled: Serve the decoded topics; off unless asked for (``record --foxglove``).
        listen: ``[HOST:]PORT`` of the WebSocket server; beyond 127.0.0.1 is an explicit choice.
        tls_cert_file: PEM certificate: serve ``wss://`` only (needs ``tls_key_file``).
        tls_key_file: PEM PKCS#8 private key of ``tls_cert_file``.
        default_rate_hz: Per (topic, multi_id) rate cap; 0: every sample.
        backlog: Messages queued per viewer; a slow viewer loses the oldest beyond this.
        encoding: ``json`` (JSON Schema channels with a ``header.stamp``: Foxglove, Lichtblick)
            or ``cdr`` (ROS 2 channels, the MCAP export's ``ros2msg`` schemas: PlotJuggler,
            and Foxglove or Lichtblick with arrays as arrays).
    """

    enabled: bool = False
    listen: str = f"127.0.0.1:{FOXGLOVE_DEFAULT_PORT}"
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    default_rate_hz: float = 10.0
    backlog: int = 1024
    encoding: FoxgloveEncoding = "json"

    def __post_init__(self) -> None:
        parse_listen(self.listen)
        require(
            self.encoding in get_args(FoxgloveEncoding),
            "foxglove.encoding",
            f"must be one of {', '.join(get_args(FoxgloveEncoding))}, not {self.encoding!r}",
        )
        given, missing = ("tls_cert_file", "tls_key_file")
        if self.tls_cert_file is None:
            given, missing = missing, given
        require(
            (self.tls_cert_file is None) == (self.tls_key_file is None),
            f"foxglove.{given}",
            f"needs foxglove.{missing} too: TLS takes the certificate and its key",
        )
        check_non_negative("foxglove.default_rate_hz", self.default_rate_hz, " Hz")
        require(self.backlog >= 1, "foxglove.backlog", f"must be >= 1, not {self.backlog}")

    def address(self) -> ListenAddress:
        """The parsed :attr:`listen`."""
        return parse_listen(self.listen)


S3_MIN_PART_MB = 5
"""S3's smallest part of a multipart upload (all but the last), in MiB."""


S3_MAX_PART_MB = 5 * 1024
"""S3's largest part, in MiB."""


class S3Settings(msgspec.Struct, frozen=True, kw_only=True):
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
        require(
            "//" not in self.prefix.strip("/") and not CONTROL_CHARACTERS.search(self.prefix),
            "upload.s3.prefix",
            f"must be key levels without empty ones or control characters, not {self.prefix!r}",
        )
        if self.endpoint_url is not None:
            parse_s3_endpoint(self.endpoint_url)
        require(
            bool(S3_REGION.match(self.region)),
            "upload.s3.region",
            f"must be a region name such as us-east-1 or eu-central-1, not {self.region!r}",
        )
        require(bool(self.profile), "upload.s3.profile", "must not be empty (e.g. default)")
        require(
            S3_MIN_PART_MB <= self.part_size_mb <= S3_MAX_PART_MB,
            "upload.s3.part_size_mb",
            f"must be from {S3_MIN_PART_MB} to {S3_MAX_PART_MB} (S3's limits), "
            f"not {self.part_size_mb}",
        )
        require(
            self.request_timeout_s > 0,
            "upload.s3.request_timeout_s",
            f"must be > 0 s, not {self.request_timeout_s}",
        )


UploadTargetName = Literal["command", "flight_review", "s3"]
"""Where ``upload.target`` sends finished logs (``"s3"`` joins with ``[upload.s3]``)."""


UPLOAD_TARGETS: tuple[UploadTargetName, ...] = get_args(UploadTargetName)


FlightReviewApi = Literal["plot_app", "api"]
"""The Flight Review generation: ``plot_app`` (the Python server, ``POST /upload``) or ``api``
(the Rust server, ``POST /api/upload``)."""


FlightReviewType = Literal["personal", "flightreport"]
FLIGHT_REVIEW_RATINGS = (
    "notset",
    "crash_pilot",
    "crash_sw_hw",
    "unsatisfactory",
    "good",
    "great",
)
"""Flight Review v1's ratings (v2 rates 1-5: see the upload target's mapping)."""
"""A Flight Review upload's ``type``: personal (unlisted) or a flight report (public list)."""


class FlightReviewSettings(msgspec.Struct, frozen=True, kw_only=True):
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
            10 storm (``api``: sent as ``calm``, ``breeze``, ``gale``, ``storm``).
        rating: The flight report's rating (``notset``, ``crash_pilot``, ``crash_sw_hw``,
            ``unsatisfactory``, ``good``, ``great``; ``api``: sent as 1-5, or give 1-5).
        video_url: The flight report's video link ("": none).
        feedback: A note to the server's maintainers ("": none).
        pilot_name: ``api`` only: the pilot ("": none).
        location_name: ``api`` only: where the flight was ("": none).
        mission_type: ``api`` only: what the flight was for ("": none).
        tags: ``api`` only: comma-separated tags ("": none).
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
    feedback: str = ""
    pilot_name: str = ""
    location_name: str = ""
    mission_type: str = ""
    tags: str = ""

    def __post_init__(self) -> None:
        key = "upload.flight_review"
        url_key = f"{key}.url"
        try:
            parts = urlsplit(self.url)
            parts.port  # noqa: B018 (a bad port raises here)
        except ValueError as err:
            raise SettingError(url_key, f"is not a valid URL ({err}): {self.url!r}") from None
        require(
            parts.scheme in {"http", "https"} and bool(parts.hostname),
            f"{key}.url",
            f"must be http(s)://HOST[:PORT][/PATH], not {self.url!r}",
        )
        require(
            not parts.query and not parts.fragment and parts.username is None,
            f"{key}.url",
            f"must be only scheme, host, port and path, not {self.url!r}",
        )
        placeholders_of(f"{key}.description", self.description, DESCRIPTION_PLACEHOLDERS)
        require(
            self.wind_speed >= -1,
            f"{key}.wind_speed",
            f"must be -1 (not set), 0 (calm), 5 (breeze), 8 (gale) or 10 (storm), not "
            f"{self.wind_speed}",
        )
        require(
            self.rating in FLIGHT_REVIEW_RATINGS or self.rating in {"1", "2", "3", "4", "5"},
            f"{key}.rating",
            f"must be one of {', '.join(FLIGHT_REVIEW_RATINGS)} or 1-5 (notset leaves it unset), "
            f"not {self.rating!r}",
        )
        require(
            not self.video_url or self.video_url.startswith(("http://", "https://")),
            f"{key}.video_url",
            f"must be an http(s):// link or empty, not {self.video_url!r}",
        )


class BackfillSettings(msgspec.Struct, frozen=True, kw_only=True):
    """Completing each flight's log from the vehicle's SD log (``recording.mode = while_armed``).

    Attributes:
        enabled: After each flight (the vehicle disarmed), merge its recordings and put back
            their start and gaps from the vehicle's own SD log over the same link, before the
            log is announced and uploaded.
        max_mb: MB a flight's backfill may read over the link (a telemetry radio carries about
            4.7 kB/s of log: 5 MB take 18 minutes).
    """

    enabled: bool = True
    max_mb: float = 200.0

    def __post_init__(self) -> None:
        require(self.max_mb > 0, "backfill.max_mb", f"must be > 0 MB, not {self.max_mb}")


class UploadSettings(msgspec.Struct, frozen=True, kw_only=True):
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
    flight_review: FlightReviewSettings = msgspec.field(default_factory=FlightReviewSettings)
    s3: S3Settings = msgspec.field(default_factory=S3Settings)

    def __post_init__(self) -> None:
        require(
            self.target in UPLOAD_TARGETS,
            "upload.target",
            f"must be one of {', '.join(map(repr, UPLOAD_TARGETS))}, not {self.target!r}",
        )
        if self.command is not None:
            upload_command(self.command)
            require(
                self.target == "command",
                "upload.command",
                f'is only run with upload.target = "command", not {self.target!r}; '
                "unset one of them",
            )
        require(
            self.target != "s3" or self.s3.bucket is not None,
            "upload.s3.bucket",
            'must be set with upload.target = "s3" (the bucket logs go to)',
        )
        require(self.timeout_s > 0, "upload.timeout_s", f"must be > 0 s, not {self.timeout_s}")
        require(self.attempts >= 1, "upload.attempts", f"must be >= 1, not {self.attempts}")
        check_non_negative("upload.backoff_s", self.backoff_s, " s")
        require(self.queue_size >= 1, "upload.queue_size", f"must be >= 1, not {self.queue_size}")

    @property
    def enabled(self) -> bool:
        """Whether finished logs are uploaded at all (a target other than an unset command)."""
        return self.target != "command" or self.command is not None


class LogSettings(msgspec.Struct, frozen=True, kw_only=True):
    """Our own diagnostics.

    Attributes:
        level: Python logging level name.
        status_line: Show a one-line live status (rates, losses, file) on a terminal.
    """

    level: LogLevel = "info"
    status_line: bool = True


class SystemdSettings(msgspec.Struct, frozen=True, kw_only=True):
    """Integration with systemd when started as a service.

    Attributes:
        watchdog: Send WATCHDOG=1 when the unit sets WatchdogSec (no-op outside systemd).
    """

    watchdog: bool = True


class Settings(msgspec.Struct, frozen=True, kw_only=True):
    """Every setting of ulogstream, grouped as in the TOML file."""

    link: LinkSettings = msgspec.field(default_factory=LinkSettings)
    recording: RecordingSettings = msgspec.field(default_factory=RecordingSettings)
    mqtt: MqttSettings = msgspec.field(default_factory=MqttSettings)
    foxglove: FoxgloveSettings = msgspec.field(default_factory=FoxgloveSettings)
    backfill: BackfillSettings = msgspec.field(default_factory=BackfillSettings)
    upload: UploadSettings = msgspec.field(default_factory=UploadSettings)
    log: LogSettings = msgspec.field(default_factory=LogSettings)
    systemd: SystemdSettings = msgspec.field(default_factory=SystemdSettings)


GROUPS: dict[str, type[msgspec.Struct]] = {
    "link": LinkSettings,
    "recording": RecordingSettings,
    "mqtt": MqttSettings,
    "foxglove": FoxgloveSettings,
    "backfill": BackfillSettings,
    "upload": UploadSettings,
    "log": LogSettings,
    "systemd": SystemdSettings,
}
"""TOML section name -> settings class."""


def mqtt_password(mqtt: MqttSettings, environ: Mapping[str, str] = os.environ) -> str | None:
    """Read the MQTT password from ``password_file`` or ``password_env`` (None when neither).

    Raises:
        ConfigError: The file cannot be read or the variable is not set.
    """
    return read_password(mqtt.password_file, mqtt.password_env, environ)
