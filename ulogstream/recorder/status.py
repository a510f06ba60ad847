"""What the recorder shows: one set of counter names for the status line, MQTT and the journal."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ulogstream.stream import (
    SessionState,
)

if TYPE_CHECKING:
    from pathlib import Path

    from ulogstream.adapters.file_sink import (
        FinishedLog,
    )


FINISHED_LOGS_KEPT = 100
"""Finished logs remembered in the status (the newest); the count goes on."""


@dataclass(slots=True)
class TopicStats:
    """Samples of one topic instance seen in the current log."""

    samples: int = 0
    first_timestamp_us: int = 0
    last_timestamp_us: int = 0


@dataclass(slots=True)
class RecorderStatus:
    """What the status line, the MQTT status and the journal show."""

    state: str = "starting"
    link: str = ""
    log_path: Path | None = None
    log_bytes: int = 0
    logs_finished: int = 0
    bytes_total: int = 0
    bytes_per_s: float | None = None
    """Recording rate over the last second; None until a second has been measured."""
    packets: int = 0
    gaps: int = 0
    packets_lost: int = 0
    late: int = 0
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
    topics: dict[tuple[str, int], TopicStats] = field(default_factory=dict)
    finished: deque[FinishedLog] = field(default_factory=lambda: deque(maxlen=FINISHED_LOGS_KEPT))
    """The newest finished logs (at most :data:`FINISHED_LOGS_KEPT`)."""
    error: str | None = None


def status_fields(status: RecorderStatus) -> dict[str, str | int | float | bool | None]:
    """The status counters as MQTT status fields and journal key=value pairs."""
    return {
        "log_file": None if status.log_path is None else str(status.log_path),
        "log_bytes": status.log_bytes,
        "logs": status.logs_finished,
        "packets": status.packets,
        "gaps": status.gaps,
        "packets_lost": status.packets_lost,
        "packets_late": status.late,
        "dropouts": status.dropouts,
        "bad_frames": status.bad_frames,
        "link_reconnects": status.link_reconnects,
        "mqtt_dropped": status.mqtt_dropped,
        "mqtt_unpublishable": status.mqtt_unpublishable,
        "mqtt_capped": status.mqtt_capped,
        "uploads": status.uploads,
        "upload_failures": status.upload_failures,
        "upload_backlog": status.upload_backlog,
        "upload_held": status.upload_held,
        "error": status.error,
    }


def _state_text(state: SessionState, current: str) -> str:
    """The status line's state for a session state (the streaming text is set by the log)."""
    if state is SessionState.STREAMING:
        return current if current in {"streaming", "idle"} else "streaming"
    return str(state.value)
