"""The only place that turns :class:`~ulogstream.config.sections.Settings` into parts.

Every part takes keyword-only arguments named as the TOML keys it comes from (or, for an upload
target, its own section), and checks nothing the configuration checked already; a new setting
is two edits: its section, and here. The recorder itself sees :class:`RecorderParts` only.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

import msgspec

from ulogstream.adapters.connection import load_signing_key
from ulogstream.adapters.file_sink import UlgFileSink
from ulogstream.adapters.logbook import Logbook
from ulogstream.config.values import DEFAULT_VEHICLE_ID, parse_connection, read_password
from ulogstream.errors import ConfigError
from ulogstream.mavlink_codec import MavlinkCodec
from ulogstream.recorder.decoding import Publisher
from ulogstream.recorder.identity import VehicleIds, client_id_of, unique_client_id, vehicle_id_of
from ulogstream.stream.router import Router
from ulogstream.stream.session import LoggingSession
from ulogstream.upload.shipper import LogShipper
from ulogstream.upload.targets import make_target

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from ulogstream.adapters.foxglove_sink import FoxgloveSink
    from ulogstream.adapters.mqtt_sink import MqttSink
    from ulogstream.adapters.sd_notify import Notifier
    from ulogstream.config.sections import FoxgloveSettings, MqttSettings, Settings
    from ulogstream.config.values import ConnectionSpec
    from ulogstream.live.outbox import MqttMessage
    from ulogstream.live.policy import PublishPolicy
    from ulogstream.recorder.recorder import Recorder, StatusView

UPLOAD_QUEUE_FOLDER = ".upload-queue"
"""In ``recording.out_dir``: the logs waiting for upload, one JSON file each (survives reboots)."""


class RecorderParts(msgspec.Struct, kw_only=True):
    """Everything a :class:`~ulogstream.recorder.recorder.Recorder` is made of.

    Attributes:
        link: ``link.connection`` as written (log lines, the status).
        connection: The link to open.
        out_dir: ``recording.out_dir`` (recovery at start-up, the logbook).
        codec: Makes the MAVLink codec of each link opening (our ids, the signing key).
        router: Which vehicle each message is for (first contact, ``--target-sysid``).
        session: Makes the logging session of the autopilot with a system id.
        files: Makes the file sink of a vehicle (its system id and vehicle id).
        identity: Each vehicle's id.
        publisher: Makes a vehicle's MQTT side (its id), or None without a broker.
        foxglove: The Foxglove live view of the home vehicle, or None.
        shipper: Describes, announces and uploads finished logs.
        watch_armed: Autopilot HEARTBEATs tell the shipper armed or disarmed.
        backfill_max_bytes: Complete each flight from the SD log, reading at most this
            many bytes (None: no backfill; only with ``recording.mode = while_armed``).
        hint_after_s: ``link.hint_after_s``.
        watchdog: ``systemd.watchdog``.
        identity_line: The start-up line saying how vehicles are named and where they go.
        signed: Frames are signed (``link.signing_key_file``): a link hint names the key.
    """

    link: str
    connection: ConnectionSpec
    out_dir: Path
    codec: Callable[[], MavlinkCodec]
    router: Router
    session: Callable[[int], LoggingSession]
    files: Callable[[int, str], UlgFileSink]
    identity: VehicleIds
    publisher: Callable[[str], Publisher] | None
    foxglove: FoxgloveSink | None
    shipper: LogShipper
    watch_armed: bool
    backfill_max_bytes: int | None
    hint_after_s: float
    watchdog: bool
    identity_line: str
    signed: bool


def recorder_parts(settings: Settings, *, once: bool = False) -> RecorderParts:
    """The parts of a recorder configured by ``settings``.

    Args:
        settings: Everything configurable.
        once: One log only (``record --once``): another client's STOP ends the session.

    Raises:
        ConfigError: A file a setting names cannot be read (signing key, password, TLS files).
    """
    link, recording, mqtt = settings.link, settings.recording, settings.mqtt
    key_file = link.signing_key_file
    signing_key = None if key_file is None else load_signing_key(key_file)
    identity = VehicleIds(
        out_dir=recording.out_dir,
        link=link.connection,
        template=mqtt.vehicle_id,
        target_sysid=link.target_sysid,
    )
    publishers = vehicle_publishers(mqtt, link=link.connection)
    logbook = Logbook(recording.out_dir)
    target = make_target(
        settings.upload, withheld_env=() if mqtt.password_env is None else (mqtt.password_env,)
    )
    shipper = LogShipper(
        settings.upload,
        target,
        journal=recording.out_dir / UPLOAD_QUEUE_FOLDER,
        on_settled=logbook.settled,
    )
    configured = "the default" if mqtt.vehicle_id is None else repr(mqtt.vehicle_id)
    template = mqtt.vehicle_id or DEFAULT_VEHICLE_ID

    def files(system_id: int, vehicle: str) -> UlgFileSink:
        return UlgFileSink(
            recording.out_dir,
            folder=vehicle,
            min_free_mb=recording.min_free_mb,
            max_logs=recording.max_logs,
            max_total_mb=recording.max_total_mb,
            tags={"vehicle": vehicle, "link": link.connection, "sysid": system_id},
            upload_pending=shipper.uploads,
        )

    def session(system_id: int) -> LoggingSession:
        return LoggingSession(
            system_id=link.sysid,
            component_id=link.compid,
            target_system=system_id,
            restart_after_foreign_stop=not once,
            while_armed=recording.mode == "while_armed",
            disarm_delay=recording.disarm_delay_s,
            reorder_packets=link.reorder_packets,
            reorder_time=link.reorder_window_s,
            data_timeout=recording.idle_timeout_s,
        )

    return RecorderParts(
        link=link.connection,
        connection=parse_connection(link.connection, default_baud=link.baud),
        out_dir=recording.out_dir,
        codec=partial(
            MavlinkCodec, system_id=link.sysid, component_id=link.compid, signing_key=signing_key
        ),
        router=Router(
            system_id=link.sysid, component_id=link.compid, target_system=link.target_sysid
        ),
        session=session,
        files=files,
        identity=identity,
        publisher=publishers,
        foxglove=foxglove_view(settings.foxglove),
        shipper=shipper,
        watch_armed=settings.upload.only_when_disarmed and shipper.uploads,
        backfill_max_bytes=(
            int(settings.backfill.max_mb * 1e6)
            if settings.backfill.enabled and recording.mode == "while_armed"
            else None
        ),
        hint_after_s=link.hint_after_s,
        watchdog=settings.systemd.watchdog,
        identity_line=(
            f"each vehicle is named by mqtt.vehicle_id ({configured}: {template!r}), filled in "
            f"at first contact; recording into {recording.out_dir}/<vehicle id>"
        ),
        signed=signing_key is not None,
    )


class LinkParts(msgspec.Struct, frozen=True):
    """What a command that talks to the vehicle without recording needs (``download``).

    Attributes:
        connection: The link to open.
        codec: Our side's MAVLink codec (our ids, the signing key).
    """

    connection: ConnectionSpec
    codec: MavlinkCodec


def link_parts(settings: Settings) -> LinkParts:
    """The link and codec ``settings.link`` configures.

    Raises:
        ConfigError: The connection string is invalid or the signing key cannot be read.
    """
    link = settings.link
    key_file = link.signing_key_file
    return LinkParts(
        connection=parse_connection(link.connection, default_baud=link.baud),
        codec=MavlinkCodec(
            system_id=link.sysid,
            component_id=link.compid,
            signing_key=None if key_file is None else load_signing_key(key_file),
        ),
    )


def publish_policy(mqtt: MqttSettings, vehicle_id: str) -> PublishPolicy:
    """The publish policy of the ``[mqtt]`` section for the vehicle ``vehicle_id``."""
    from ulogstream.live.policy import PublishPolicy  # noqa: PLC0415 (numpy: MQTT only)

    return PublishPolicy(
        vehicle_id=vehicle_id,
        root=mqtt.root,
        default_rate_hz=mqtt.default_rate_hz,
        rates=mqtt.rates,
        include=mqtt.include,
        exclude=mqtt.exclude,
        encodings=mqtt.encodings,
        qos=mqtt.qos,
        param_topics=mqtt.param_topics,
    )


def mqtt_sink(
    mqtt: MqttSettings, *, client_id: str | None = None, will: MqttMessage | None = None
) -> MqttSink:
    """The MQTT sink of the ``[mqtt]`` section (its URL must be set).

    The password is read here, once: a missing file fails now, with the key named, rather than
    at the first connect.

    Args:
        mqtt: The ``[mqtt]`` settings.
        client_id: The filled-in client id (None: a unique one per run).
        will: The Last Will (the publish policy's offline status).

    Raises:
        ConfigError: The URL is not set, or the password or a TLS file cannot be read.
    """
    from ulogstream.adapters.mqtt_sink import MqttSink  # noqa: PLC0415 (aiomqtt: MQTT only)

    urls = mqtt.broker_urls()
    if not urls:
        msg = "mqtt.url is not set"
        raise ConfigError(msg)
    return MqttSink(
        urls=urls,
        client_id=client_id or unique_client_id(),
        protocol=mqtt.protocol,
        tls_ca_file=mqtt.tls_ca_file,
        tls_cert_file=mqtt.tls_cert_file,
        tls_key_file=mqtt.tls_key_file,
        username=mqtt.username,
        password=read_password(mqtt.password_file, mqtt.password_env),
        keepalive_s=mqtt.keepalive_s,
        session_expiry_s=mqtt.session_expiry_s,
        retained_resend_per_s=mqtt.retained_resend_per_s,
        max_messages_per_s=mqtt.max_messages_per_s,
        outbox_size=mqtt.outbox_size,
        will=will,
    )


def build_publisher(mqtt: MqttSettings, *, vehicle_id: str, link: str) -> Publisher | None:
    """The MQTT side of the vehicle ``vehicle_id``, or None when no broker is configured.

    Raises:
        ConfigError: A setting cannot be used (missing password file, TLS files).
    """
    if not mqtt.broker_urls():
        return None
    policy = publish_policy(mqtt, vehicle_id)
    client_id = client_id_of(mqtt.client_id, vehicle_id, link=link)
    return Publisher(policy, mqtt_sink(mqtt, client_id=client_id, will=policy.last_will()))


def vehicle_publishers(mqtt: MqttSettings, *, link: str) -> Callable[[str], Publisher] | None:
    """What makes each vehicle's MQTT side, or None when no broker is configured.

    Every vehicle has a connection of its own: its Last Will is its own retained
    ``meta/status`` offline, so a dashboard sees each vehicle the recorder served go offline
    when the recorder dies (a connection has one Will). Its client id is ``mqtt.client_id``
    filled in with the vehicle id, ``-{vehicle}`` appended when a template names no
    ``{vehicle}`` and another vehicle took it.

    Raises:
        ConfigError: A setting cannot be used (missing password file, TLS files): checked now,
            not at a vehicle's first contact.
    """
    if not mqtt.broker_urls():
        return None
    mqtt_sink(mqtt, client_id="ulogstream-check")  # a missing password or TLS file fails now
    taken: set[str] = set()

    def publisher(vehicle_id: str) -> Publisher:
        client_id = client_id_of(mqtt.client_id, vehicle_id, link=link)
        if client_id in taken:
            client_id = f"{client_id}-{vehicle_id}"
        taken.add(client_id)
        policy = publish_policy(mqtt, vehicle_id)
        return Publisher(policy, mqtt_sink(mqtt, client_id=client_id, will=policy.last_will()))

    return publisher


def replay_publisher(mqtt: MqttSettings, *, sys_uuid: str | None) -> Publisher:
    """The MQTT side of ``ulogstream replay``: the vehicle id filled in with the log's ``sys_uuid``.

    Raises:
        ConfigError: The URL is not set, or a file a setting names cannot be read.
    """
    vehicle_id = vehicle_id_of(mqtt.vehicle_id, link="replay", sysid=1, sys_uuid=sys_uuid)
    policy = publish_policy(mqtt, vehicle_id)
    return Publisher(policy, mqtt_sink(mqtt, will=policy.last_will()))


def foxglove_view(foxglove: FoxgloveSettings) -> FoxgloveSink | None:
    """The Foxglove live view (not yet listening), or None when ``[foxglove]`` is not enabled."""
    if not foxglove.enabled:
        return None
    from ulogstream.adapters.foxglove_sink import FoxgloveSink  # noqa: PLC0415 (the SDK: Foxglove only)
    from ulogstream.live.policy import PublishPolicy  # noqa: PLC0415 (numpy: live outlets only)

    policy = PublishPolicy(
        vehicle_id="foxglove",
        default_rate_hz=foxglove.default_rate_hz,
        encodings=(foxglove.encoding,),
    )
    return FoxgloveSink(
        listen=foxglove.address(),
        tls_cert_file=foxglove.tls_cert_file,
        tls_key_file=foxglove.tls_key_file,
        backlog=foxglove.backlog,
        policy=policy,
        encoding=foxglove.encoding,
    )


def build_recorder(
    settings: Settings,
    *,
    once: bool = False,
    status_view: StatusView | None = None,
    notifier: Notifier | None = None,
) -> Recorder:
    """A recorder configured by ``settings`` (see :class:`~ulogstream.recorder.recorder.Recorder`).

    Raises:
        ConfigError: A file a setting names cannot be read (signing key, password, TLS files).
    """
    from ulogstream.recorder.recorder import Recorder  # noqa: PLC0415 (the recorder imports this module's types)

    return Recorder(
        recorder_parts(settings, once=once), once=once, status_view=status_view, notifier=notifier
    )
