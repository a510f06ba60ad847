"""What the recorder shows, under one set of counter names (status line, MQTT, journal, exit)."""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

import msgspec

from ulogstream.stream import SessionState

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

    from ulogstream.adapters.file_sink import FinishedLog
    from ulogstream.config.values import ConnectionSpec
    from ulogstream.mavlink_codec import MavlinkCodec


FINISHED_LOGS_KEPT = 100
"""Finished logs remembered in the status (the newest); the count goes on."""


class TopicStats(msgspec.Struct):
    """Samples of one topic instance seen in the current log."""

    samples: int = 0
    first_timestamp_us: int = 0
    last_timestamp_us: int = 0


class RecorderStatus(msgspec.Struct):
    """What the status line, the MQTT status, the journal and the exit summary show.

    A counter has one name everywhere: the fields named in :data:`STATUS_FIELDS` are published
    and logged under their own names; the session's counters keep theirs too
    (:data:`SESSION_COUNTERS`).
    """

    state: str = "starting"
    link: str = ""
    log_file: Path | None = None
    """The file being written (``.part``), None between logs."""
    log_bytes: int = 0
    logs: int = 0
    """Logs finished (files kept)."""
    bytes_total: int = 0
    bytes_per_s: float | None = None
    """Recording rate over the last second; None until a second has been measured."""
    packets: int = 0
    gaps: int = 0
    packets_lost: int = 0
    packets_late: int = 0
    stale: int = 0
    dropouts: int = 0
    mismatches: int = 0
    bad_frames: int = 0
    link_reconnects: int = 0
    bytes_not_written: int = 0
    """Bytes of the stream that are not on disk: the disk was full (or far too slow)."""
    disk_full: bool = False
    """The log's file was ended by a full disk; recording goes on once space is freed."""
    logs_discarded: int = 0
    """Logs that ended without data (PX4 stopped its stream during the header): no file."""
    parser_errors: int = 0
    rows_decoded: int = 0
    """Logged rows decoded for live consumers (none when only recording)."""
    mqtt_connected: bool = False
    mqtt_published: int = 0
    mqtt_dropped: int = 0
    mqtt_unpublishable: int = 0
    """Messages no broker takes (a bad topic): dropped one by one, never the sink."""
    mqtt_reconnects: int = 0
    mqtt_capped: int = 0
    """Samples dropped to keep under ``mqtt.max_messages_per_s``."""
    uploads: int = 0
    """Finished logs uploaded (recorder-wide, as are the three below)."""
    upload_failures: int = 0
    upload_backlog: int = 0
    """Logs waiting for (or in) their upload, those resumed from the on-disk queue included."""
    upload_held: bool = False
    """Uploads wait for the vehicle to disarm (``upload.only_when_disarmed``)."""
    flights_backfilled: int = 0
    """Flights completed from the vehicle's SD log (``--while-armed`` with backfill)."""
    rows_backfilled: int = 0
    """Data rows those backfills put back."""
    backfill_bytes_read: int = 0
    """Bytes of the SD log read over the link by backfills (the one running included)."""
    topics: dict[tuple[str, int], TopicStats] = msgspec.field(default_factory=dict)
    finished: deque[FinishedLog] = msgspec.field(
        default_factory=lambda: deque(maxlen=FINISHED_LOGS_KEPT)
    )
    """The newest finished logs (at most :data:`FINISHED_LOGS_KEPT`)."""
    error: str | None = None


SESSION_COUNTERS = (
    "packets",
    "gaps",
    "packets_lost",
    "packets_late",
    "stale",
    "dropouts",
    "mismatches",
)
"""Counters of :class:`~ulogstream.stream.StreamCounters` shown under the same name."""

STATUS_FIELDS = (
    "log_file",
    "log_bytes",
    "logs",
    "packets",
    "gaps",
    "packets_lost",
    "packets_late",
    "dropouts",
    "bad_frames",
    "link_reconnects",
    "mqtt_dropped",
    "mqtt_unpublishable",
    "mqtt_capped",
    "uploads",
    "upload_failures",
    "upload_backlog",
    "upload_held",
    "flights_backfilled",
    "rows_backfilled",
    "backfill_bytes_read",
    "error",
)
"""The fields of :class:`RecorderStatus` in MQTT ``meta/status`` and the journal's lines."""


def status_fields(status: RecorderStatus) -> dict[str, str | int | float | bool | None]:
    """The :data:`STATUS_FIELDS` of ``status`` by name (a path as text)."""
    fields: dict[str, str | int | float | bool | None] = {}
    for name in STATUS_FIELDS:
        value = getattr(status, name)
        fields[name] = (
            value if value is None or isinstance(value, str | int | float) else str(value)
        )
    return fields


def _plural(count: int, noun: str) -> str:
    return f"1 {noun}" if count == 1 else f"{count} {noun}s"


def status_line(
    status: RecorderStatus,
    *,
    vehicles: int,
    mqtt: bool,
    foxglove: tuple[str, Mapping[str, int]] | None,
    uploads: bool,
) -> str:
    """One line: state, file, bytes, rate, packets, gaps, dropouts (MQTT, Foxglove, uploads).

    Args:
        status: The first vehicle's status (uploads are recorder-wide).
        vehicles: How many vehicles are recorded.
        mqtt: Whether MQTT publishing is on.
        foxglove: The live view's URL and its counters, when it is on.
        uploads: Whether finished logs are uploaded.
    """
    name = "-" if status.log_file is None else status.log_file.name
    rate = "-" if status.bytes_per_s is None else f"{status.bytes_per_s / 1e3:.0f}"
    text = (
        f"{status.state}: {name} {status.log_bytes / 1e6:.2f} MB "
        f"{rate} KB/s, {status.packets} packets, "
        f"{_plural(status.gaps, 'gap')} ({status.packets_lost} lost, {status.packets_late} late),"
        f" {_plural(status.dropouts, 'dropout')}"
    )
    if vehicles > 1:
        text += f" (first of {vehicles} vehicles)"
    if mqtt:
        link = "up" if status.mqtt_connected else "down"
        text += f", mqtt {link} {status.mqtt_published} sent {status.mqtt_dropped} dropped"
    if foxglove is not None:
        url, counts = foxglove
        text += (
            f", foxglove {url} {_plural(counts['foxglove_viewers'], 'viewer')}"
            f" {counts['foxglove_sent']} sent"
        )
        if counts["foxglove_outbox_full"]:
            text += f" (a viewer fell behind {counts['foxglove_outbox_full']}x)"
    if uploads and (status.upload_backlog or status.uploads or status.upload_failures):
        text += f", uploads {status.uploads} done {status.upload_backlog} waiting"
        if status.upload_failures:
            text += f" {status.upload_failures} failed"
        if status.upload_held:
            text += " (held: armed)"
    return text


def link_hint(codec: MavlinkCodec, *, connection: ConnectionSpec, signed: bool) -> str | None:
    """What is likely wrong with a link on which ``codec`` found no valid MAVLink yet.

    Returns:
        One line for the log, or None when a valid MAVLink frame has arrived.
    """
    if codec.valid_frames:
        return None
    serial = connection.device is not None
    if codec.skipped_bytes or codec.buffered or codec.bad_frames:
        if signed and codec.bad_frames:
            why = "is the signing key PX4's?"
        elif serial:
            why = "wrong baud rate? try 921600 or 57600, PX4's TELEM2 and TELEM1 defaults"
        else:
            why = "is it another program's port? does the sender speak MAVLink 2?"
        return f"bytes arrive on {connection} but no valid MAVLink ({why})"
    if serial:
        why = "wrong port? is PX4's MAV_x_CONFIG set for this port?"
    else:
        why = "wrong address or port? is a PX4 MAVLink instance sending to it?"
    return f"nothing arrives on {connection} ({why})"


def state_text(state: SessionState, current: str) -> str:
    """The status line's state for a session state (the streaming text is set by the log)."""
    if state is SessionState.STREAMING:
        return current if current in {"streaming", "idle"} else "streaming"
    return str(state.value)
