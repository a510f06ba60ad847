"""The per-vehicle ack path: session outputs carried out in order, acks before anything else.

:meth:`Pipeline.receive_messages` hands decoded packets to the session and sends every
``SendAck`` before anything else of that chunk is done (file, decoding, MQTT).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from ulogstream.adapters.log_files import (
    DiskFull,
    FileEvent,
    FinishFailed,
    LogDiscarded,
    LogFailed,
    LogFiles,
    LogFinished,
    LogOpened,
)
from ulogstream.recorder.decoding import LiveDecoder, Publisher
from ulogstream.recorder.status import SESSION_COUNTERS, RecorderStatus
from ulogstream.stream import (
    FramingMismatch,
    LogEnded,
    LoggingData,
    LoggingSession,
    LogStarted,
    MavlinkMessage,
    MavResult,
    NotAtLogStart,
    PacketsLost,
    SendAck,
    SendCommand,
    SendHeartbeat,
    SessionOutput,
    SessionState,
    StreamEnded,
    StreamRejected,
    WriteUlog,
)
from ulogstream.ulog.spec import encode_dropouts

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from ulogstream.adapters.file_sink import (
        FinishedLog,
    )
    from ulogstream.adapters.foxglove_sink import FoxgloveSink
    from ulogstream.mavlink_codec import MavlinkCodec
    from ulogstream.recorder.status import RecorderStatus

logger = logging.getLogger("ulogstream")


LOSS_WARNING_INTERVAL_S = 5.0
"""Least seconds between two packet-loss warnings in the log (the counters keep the rest)."""


DISK_RETRY_S = 5.0
"""While the disk is full, how often a new file is tried for the log that goes on streaming."""


class Pipeline:
    """The receive path of one vehicle: session, files, parser and publisher.

    It lives as long as the recorder, across link outages and reopened devices: the session (and
    the open log) outlives any one transport (:meth:`attach`, :meth:`detach`). The recorder
    decodes the link and hands each vehicle its messages (:meth:`receive_messages`).

    Args:
        codec: Our MAVLink codec (our sysid/compid).
        session: The logging session core.
        files: The recording thread's handle (every disk call happens there).
        status: Counters shared with the status line.
        publisher: The MQTT side, or None.
        foxglove: The Foxglove live view, or None; offered the events after MQTT.
        count_topics: Count each topic instance's rows in ``status.topics`` (the demo).
        on_log_ended: Called with the finished log (``--once`` uses it).
    """

    def __init__(
        self,
        *,
        codec: MavlinkCodec,
        session: LoggingSession,
        files: LogFiles,
        status: RecorderStatus,
        publisher: Publisher | None = None,
        foxglove: FoxgloveSink | None = None,
        count_topics: bool = False,
        on_log_ended: Callable[[LogEnded], None] | None = None,
    ) -> None:
        self.codec = codec
        self.session = session
        self.files = files
        self.peer: tuple[str, int] | None = None
        """The vehicle's UDP address that sends go to (None: the link's one peer)."""
        self.status = status
        self._on_log_ended = on_log_ended
        self._send: Callable[[bytes], None] = _drop
        self.live = LiveDecoder(
            status=status, publisher=publisher, foxglove=foxglove, count_topics=count_topics
        )
        """Decoding for the live outlets, and the counters' framing."""
        self._log_id = 0
        self._log_timestamp_us = 0
        self._last_loss_warning = -LOSS_WARNING_INTERVAL_S
        self.rejected: StreamRejected | None = None
        self.rejected_at: float | None = None
        self.ended = asyncio.Event()
        """Set when the session is over (after :meth:`stop`)."""
        self._disk_full_since: float | None = None
        """When a full disk ended the log's file (None: the disk takes data)."""
        self._disk_retry_at: float | None = None
        self._finished_dropped = 0
        """Bytes the disk guard dropped from logs already finished."""
        self.on_log_finished: Callable[[FinishedLog, str], None] | None = None
        """Called with each finished log and how it ended (announcement and upload)."""

    # -- the ack path --------------------------------------------------------------------

    def receive(self, data: bytes, now: float) -> None:
        """Decode one chunk from a link with this vehicle alone on it (benchmarks, tests)."""
        self.receive_messages(self.codec.decode(data), now)

    def receive_messages(self, messages: list[MavlinkMessage], now: float) -> None:
        """Handle this vehicle's messages of one chunk: acks go out first, then the rest."""
        session_receive, send = self.session.receive, self._send
        encode_ack = self.codec.encode_logging_ack
        later: list[SessionOutput] = []
        for message in messages:
            for output in session_receive(message, now):
                if type(output) is SendAck:
                    send(encode_ack(output.sequence, output.target_system, output.target_component))
                    self.live.acked(now)
                else:
                    later.append(output)
        if later:
            self.execute(later, now)

    def receive_logging_data(self, packet: LoggingData, now: float) -> bool:
        """The data phase's common case (no ack due): its bytes written at once.

        Returns:
            Whether the session took it (:meth:`LoggingSession.receive_logging_data`); if not,
            nothing was done: hand it to :meth:`receive_messages` as a message.
        """
        chunk = self.session.receive_logging_data(packet, now)
        if chunk is None:
            return False
        if chunk:
            self._write(chunk, now)
        return True

    # -- the link ------------------------------------------------------------------------

    def attach(self, send: Callable[[bytes], None], now: float, *, restored: bool) -> None:
        """Send with ``send`` from now on; ``restored``: a reopened link, so probe the stream."""
        self._send = send
        if restored:
            self.execute(self.session.link_restored(now), now)

    def detach(self) -> None:
        """The link is gone: send nothing until :meth:`attach` (the session and log stay)."""
        self._send = _drop

    # -- everything else -----------------------------------------------------------------

    def start(self, now: float) -> None:
        """Start the session (heartbeat, LOGGING_START once the autopilot is known)."""
        self.execute(self.session.start(now), now)

    def stop(self, now: float) -> None:
        """Stop streaming with the handshake; :attr:`ended` is set when it is over."""
        if self.session.state is SessionState.IDLE:  # no link was ever open: nothing to stop
            self.ended.set()
            return
        self.execute(self.session.stop(now), now)

    def abandon(self, now: float) -> None:
        """End a stop at once, without waiting for the end of the log (a second Ctrl-C)."""
        self.execute(self.session.abandon(), now)

    def received(self, now: float) -> None:
        """The loop woke for received datagrams: decode now what would wake it soon (live)."""
        self.live.decode_if_due(now)

    def timer(self, now: float) -> None:
        """Run what is due: session timers, file hand-over, held MQTT samples, a full disk."""
        deadline = self.session.next_deadline()
        if deadline is not None and now >= deadline:
            self.execute(self.session.handle_timer(now), now)
        if self._disk_retry_at is not None and now >= self._disk_retry_at:
            self._disk_retry_at = None
            self._continue_after_disk_full(now)
        self.files.flush_due(now)
        self.live.flush_held(now)

    @property
    def publisher(self) -> Publisher | None:
        """The MQTT side, or None."""
        return self.live.publisher

    @property
    def foxglove(self) -> FoxgloveSink | None:
        """The Foxglove live view, or None."""
        return self.live.foxglove

    @property
    def disk_full(self) -> bool:
        """Whether a full disk ended the log's file and no new one could be opened yet."""
        return self._disk_full_since is not None

    def _continue_after_disk_full(self, now: float) -> None:
        """Try a new file for the log that streams on: its head, a dropout, then its data."""
        since = self._disk_full_since
        if since is None or self.files.log_open:
            return
        if not self.session.log_open:  # that log ended meanwhile: the next one tries the disk
            self._disk_full_since = None
            self.status.disk_full = False
            return
        head = self.session.log_head
        if head is None:  # still in its definitions: a dropout cannot go there yet
            self._disk_retry_at = now + DISK_RETRY_S
            return
        self._log_id = self.files.start_log(continues=True)
        self.files.write(head)
        self.files.write(encode_dropouts(round((now - since) * 1000)))

    def next_deadline(self) -> float | None:
        """The earliest time :meth:`timer` has something to do."""
        deadlines = [
            self.session.next_deadline(),
            self.files.next_flush_deadline(),
            self._disk_retry_at,
            self.live.next_deadline(),
        ]
        due = [d for d in deadlines if d is not None]
        return min(due) if due else None

    def execute(self, outputs: list[SessionOutput], now: float) -> None:
        """Carry out session outputs in order."""
        for output in outputs:
            match output:
                case SendAck(sequence, target_system, target_component):
                    self._send(
                        self.codec.encode_logging_ack(sequence, target_system, target_component)
                    )
                case WriteUlog(data):
                    self._write(data, now)
                case SendCommand(command, target_system, target_component, param1):
                    self._send(
                        self.codec.encode_command_long(
                            command, param1, target_system, target_component
                        )
                    )
                case SendHeartbeat():
                    self._send(self.codec.encode_heartbeat())
                case LogStarted(timestamp_us, continued):
                    self._log_started(timestamp_us, now, continued=continued)
                case LogEnded():
                    self._log_ended(output, now)
                case PacketsLost(sequence, count):
                    if now - self._last_loss_warning >= LOSS_WARNING_INTERVAL_S:
                        self._last_loss_warning = now
                        counters = self.session.counters
                        logger.warning(
                            "lost %d logging packet(s) before #%d (%d gaps, %d packets so far)",
                            count,
                            sequence,
                            counters.gaps,
                            counters.packets_lost,
                        )
                case FramingMismatch():
                    logger.warning("%s", output.error())
                case NotAtLogStart():
                    logger.warning("%s", output.error())
                case StreamRejected(result, reason):
                    self.rejected = output
                    self.status.error = reason
                    level = logging.ERROR if result == MavResult.DENIED else logging.WARNING
                    logger.log(level, "%s", reason)
                case StreamEnded():
                    self.ended.set()

    def _write(self, data: bytes, now: float) -> None:
        self.files.write(data)
        self.live.write(data, now)

    def _log_started(self, timestamp_us: int, now: float, *, continued: bool = False) -> None:
        self.live.log_started(timestamp_us, now)
        # The file is created by the worker, in order; its name comes later (file_event). A log
        # cut short by a full disk gets its new file here too: with the head the session writes
        # first, a new file takes it all.
        self._disk_retry_at = None
        self._log_id = self.files.start_log(continues=continued)
        self._log_timestamp_us = timestamp_us
        self.status.state = "streaming"
        self.status.log_file = None

    def _log_ended(self, ended: LogEnded, now: float) -> None:
        self.live.close_parser(now)
        how = "complete" if ended.complete else "incomplete: the stream stopped unannounced"
        self.files.finish_log(f"{how}; {ended.reason}")
        self.status.state = "idle"
        if self._on_log_ended is not None:
            self._on_log_ended(ended)

    def file_event(self, event: FileEvent) -> None:
        """What the file worker reports (called on the loop)."""
        status = self.status
        current = event.log_id == self._log_id and self.files.log_open
        match event:
            case LogOpened(_, path, deleted):
                for old in deleted:
                    logger.info("rotation deleted %s", old)
                logger.info("recording %s", path)
                if current:
                    if self._disk_full_since is not None:
                        logger.info("disk space is back: the log goes on in %s", path.name)
                        self._disk_full_since = None
                        status.disk_full = False
                        status.error = None
                    status.log_file = path
                    self._publish_log_started(path)
            case LogDiscarded(_, discarded):
                status.logs_discarded += 1
                logger.info(
                    "no log file kept for %s: the stream ended before any data (the vehicle "
                    "stopped it during the header; its parameters come again in the next log)",
                    discarded.part_path.name,
                )
                if status.log_file == discarded.part_path:
                    status.log_file = None
            case LogFinished(_, finished, how):
                self._finished_dropped += finished.dropped_bytes
                status.finished.append(finished)
                status.logs += 1
                if status.log_file == finished.path.with_name(finished.path.name + ".part"):
                    status.log_file = None
                logger.info("log finished: %s (%d bytes, %s)", finished.path, finished.size, how)
                if self.on_log_finished is not None:
                    self.on_log_finished(finished, how)
            case LogFailed(_, path, error) | FinishFailed(_, path, error):
                kept = "" if path is None else f"; {path.name} is kept and recovered at start-up"
                status.error = f"{error}{kept}; recording goes on with the next log"
                logger.error("%s", status.error)
                if current:
                    status.log_file = None
                    if path is None:
                        self._publish_log_started(None)
            case DiskFull(log_id, error):
                # Only the log's file ends; the stream goes on being acked (never a STOP), and
                # a new file takes it up once space is freed (rotation may make room).
                now = time.monotonic()
                if self._disk_full_since is None:
                    logger.error("%s", error)
                    self._disk_full_since = now
                status.error = str(error)
                status.disk_full = True
                status.state = "disk full"
                if log_id == self._log_id and self.files.log_open:
                    self.files.finish_log("incomplete: disk full")
                    status.log_file = None
                if self._disk_retry_at is None:
                    self._disk_retry_at = now + DISK_RETRY_S

    def _publish_log_started(self, path: Path | None) -> None:
        """The worker opened the log's file (or could not): its name goes into the status."""
        log_file = None if path is None else str(path)
        for outlet in (self.publisher, self.foxglove):
            if outlet is not None:
                outlet.offer(
                    outlet.policy.update_status(time.monotonic(), fields={"log_file": log_file})
                )

    def refresh_status(self) -> None:
        """Copy the counters of the session, codec, sink and MQTT into :attr:`status`."""
        counters = self.session.counters
        status = self.status
        for name in SESSION_COUNTERS:
            setattr(status, name, getattr(counters, name))
        status.bytes_total = counters.bytes_written
        status.log_bytes = self.files.log_bytes if self.files.log_open else 0
        files = self.files
        status.bytes_not_written = (
            files.bytes_dropped + files.bytes_unwritten + self._finished_dropped
        )
        status.bad_frames = self.codec.bad_frames
        self.live.refresh()  # within one slice: the rest of the framing comes soon
        if self.publisher is not None:
            sink = self.publisher.sink
            status.mqtt_connected = sink.connected
            status.mqtt_published = sink.published
            status.mqtt_dropped = sink.dropped
            status.mqtt_unpublishable = sink.unpublishable
            status.mqtt_reconnects = sink.reconnects
            status.mqtt_capped = sink.capped


def _drop(_data: bytes) -> None:
    """Where sends go while no link is open."""
