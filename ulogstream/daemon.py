"""The composition root: wires link, session, file, parser and MQTT together and runs them.

Everything that awaits lives here or in ``ulogstream.adapters``; the two cores (the logging
session and the ULog parser) are called synchronously and their outputs carried out with
``match``. The ack path is :meth:`Pipeline.receive`: decoded packets go to the session and
every ``SendAck`` is sent before anything else of that chunk is done (file, parser, MQTT).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import shutil
import signal
import time
from collections import deque
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING, TextIO

from ulogstream.adapters.connection import load_signing_key, open_transport, parse_connection
from ulogstream.adapters.file_sink import (
    FinishedLog,
    RecoveredFile,
    UlgFileSink,
    recover_partial_files,
)
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
from ulogstream.adapters.logbook import Logbook
from ulogstream.adapters.sd_notify import Notifier, watchdog_interval
from ulogstream.adapters.serial_transport import SerialTransport
from ulogstream.adapters.udp_transport import UdpTransport
from ulogstream.adapters.upload import FinishedLogInfo, LogShipper, recalled_sys_uuid
from ulogstream.config import MqttSettings, Settings, link_name, mqtt_password
from ulogstream.errors import ConfigError, LinkError, ULogFormatError
from ulogstream.mavlink_codec import MavlinkCodec
from ulogstream.stream import (
    FramingMismatch,
    Heartbeat,
    LogEnded,
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
from ulogstream.stream.packets import MAV_COMP_ID_AUTOPILOT1
from ulogstream.ulog.parser import RowSelection, ULogParser, no_rows
from ulogstream.ulog.spec import encode_dropouts

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine, Sequence
    from pathlib import Path

    from ulogstream.adapters.foxglove_sink import FoxgloveSink
    from ulogstream.adapters.mqtt_sink import MqttSink, MqttSinkSettings
    from ulogstream.adapters.transport import Transport
    from ulogstream.publish import MqttMessage, PublishPolicy, PublishSettings
    from ulogstream.ulog.events import Subscription, ULogEvent

logger = logging.getLogger("ulogstream")

RECONNECT_BACKOFF = (0.5, 1.0, 2.0, 5.0)
"""Seconds between attempts to open a link that is not there (the last one repeats)."""

REJECTED_RETRY_S = 30.0
"""After the vehicle refused to stream, the daemon asks again this much later."""

STATUS_INTERVAL_S = 0.5
"""Refresh period of the terminal status line and the MQTT status counters."""

STATUS_LOG_INTERVAL_S = 60.0
"""Period of the key=value status line logged when there is no terminal status line."""

STOP_PROGRESS_LOG_S = 5.0
"""Period of the 'stopping: ...' progress line in the log while a stop waits for the vehicle."""

HELLO_INTERVAL_S = 1.0
"""Period of our HEARTBEAT on a link where no vehicle has been heard yet."""

TIMER_TICK_S = 0.05
"""Longest sleep of the timer loop: deadlines set while it sleeps are late by at most this."""

LOSS_WARNING_INTERVAL_S = 5.0
"""Least seconds between two packet-loss warnings in the log (the counters keep the rest)."""

SYS_UUID_FILE = ".sys_uuid-{link}-sysid{sysid}"
"""In ``recording.out_dir``: the ``sys_uuid`` of the autopilot with that system id on that link,
from its newest finished log (per link and system id: recorders on one host share out_dir)."""
UPLOAD_QUEUE_FOLDER = ".upload-queue"
"""In ``recording.out_dir``: the logs waiting for upload, one JSON file each (survives reboots)."""

FINISHED_LOGS_KEPT = 100
"""Finished logs remembered in the status (the newest); the count goes on."""

DECODE_DELAY_S = 0.01
"""With MQTT, the longest a written row waits before it is decoded (and maybe published).

Several datagrams are decoded in one go instead of one callback per datagram. On real PX4 logs
at the USB ceiling (``tests/bench/bench_real.py --paces usb``) 5 ms let the vehicle's ack round
trip reach 5-11 ms at its worst; 10 ms keeps it under 2 ms at the same CPU, and 25 ms under 1 ms
but pushes the arrival-to-publish p99 past 20 ms (``tests/bench/bench_live.py --parts 1
--decode-delay S``)."""

DECODE_SLICE_S = 0.0005
"""Longest piece of decoding and publishing work before the loop serves the link again."""

DECODE_SLICE_BYTES = 1024
"""Bytes handed to the parser in a log's first call; the work of one slice is checked between
calls, and the size then follows :func:`next_slice_bytes`."""

DECODE_SLICE_BYTES_RANGE = (256, 16384)
"""Least and most bytes per parser call."""

FRAMING_BATCH_BYTES = 16384
"""Without a live consumer, the backlog is framed (for the counters) once it holds this much."""

ANNOUNCE_WAIT_S = 3.0
"""At a stop, the longest wait for the last finished logs' checksums and announcements."""

UPLOAD_WAIT_S = 5.0
"""At a stop, the longest wait for uploads still running or queued (the files stay if not).

Short: the systemd unit allows 15 s for a whole stop (TimeoutStopSec), the stream's end first."""

DISK_RETRY_S = 5.0
"""While the disk is full, how often a new file is tried for the log that goes on streaming."""

RESTART_BACKOFF = (1.0, 2.0, 5.0, 10.0, 30.0)
"""Seconds before a failed side task (status, MQTT) is started again (the last one repeats)."""

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""Signals that stop a recording with the handshake: SIGHUP too (a closed terminal, a dropped
SSH session), which would otherwise end the process at once and leave the ``.part``."""

RECOVERED_HOW = "incomplete: recovered after an interrupted recording"
"""How a log recovered at start-up ended, for its announcement and upload."""


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


class Publisher:
    """Parser events through the pure publish policy into the bounded MQTT outbox."""

    def __init__(self, policy: PublishPolicy, sink: MqttSink) -> None:
        self.policy = policy
        self.sink = sink

    def offer(self, messages: list[MqttMessage]) -> None:
        """Queue retained or status messages."""
        self.sink.offer_all(messages)


def next_slice_bytes(size: int, spent: float) -> int:
    """Bytes for the next parser call after one of ``size`` bytes took ``spent`` seconds.

    Half after a call over half of :data:`DECODE_SLICE_S`, double after one under an eighth,
    within :data:`DECODE_SLICE_BYTES_RANGE`: a piece of a real log's definitions ('F' and 'A'
    messages, formats compiled for the first time) takes up to 1.7 ms per 4 KiB, rows far less,
    so the size follows what the bytes cost and no call holds the loop much past a slice.
    """
    least, most = DECODE_SLICE_BYTES_RANGE
    if spent > DECODE_SLICE_S / 2:
        return max(least, size // 2)
    if spent < DECODE_SLICE_S / 8:
        return min(most, size * 2)
    return size


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
        on_log_ended: Callable[[LogEnded], None] | None = None,
    ) -> None:
        self.codec = codec
        self.session = session
        self.files = files
        self.peer: tuple[str, int] | None = None
        """The vehicle's UDP address that sends go to (None: the link's one peer)."""
        self.status = status
        self.publisher = publisher
        self.foxglove = foxglove
        self._on_log_ended = on_log_ended
        self._send: Callable[[bytes], None] = _drop
        self._parser: ULogParser | None = None
        self._decode_backlog: list[bytes] = []
        self._backlog_bytes = 0
        self._slice_bytes = DECODE_SLICE_BYTES
        self._rows_decoded = 0
        """Rows decoded by the parsers of finished logs."""
        self._pending_events: deque[ULogEvent] = deque()
        """Parser events not yet offered to the publisher (a slice ran out of time)."""
        self._decode_scheduled = False
        self._decode_now = 0.0
        """Receive time of the newest backlog chunk: the publish policy's clock for it."""
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
                else:
                    later.append(output)
        if later:
            self.execute(later, now)

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

    def timer(self, now: float) -> None:
        """Run what is due: session timers, file hand-over, held MQTT samples, a full disk."""
        deadline = self.session.next_deadline()
        if deadline is not None and now >= deadline:
            self.execute(self.session.handle_timer(now), now)
        if self._disk_retry_at is not None and now >= self._disk_retry_at:
            self._disk_retry_at = None
            self._continue_after_disk_full(now)
        self.files.flush_due(now)
        self._flush_held(now)

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

    def _flush_held(self, now: float, *, due_only: bool = False) -> None:
        """Held samples of paused topics and pending status updates to the live outlets.

        MQTT's go to Foxglove too: those of the instances it serves from MQTT's samples.
        """
        for outlet in (self.publisher, self.foxglove):
            if outlet is None:
                continue
            policy = outlet.policy
            if due_only:
                due = policy.next_deadline()
                if due is None or due > now:
                    continue
            held = policy.flush_due(now)
            if held:
                outlet.offer(held)
                if outlet is self.publisher and self.foxglove is not None:
                    self.foxglove.mirror(held)

    def next_deadline(self) -> float | None:
        """The earliest time :meth:`timer` has something to do."""
        deadlines = [
            self.session.next_deadline(),
            self.files.next_flush_deadline(),
            self._disk_retry_at,
        ]
        if self.publisher is not None:
            deadlines.append(self.publisher.policy.next_deadline())
        if self.foxglove is not None:
            deadlines.append(self.foxglove.policy.next_deadline())
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
        if self._parser is None:
            return
        self._decode_backlog.append(data)
        self._backlog_bytes += len(data)
        self._decode_now = now
        # Decoding never runs per datagram: with a live consumer it runs DECODE_DELAY_S after
        # the first undecoded write, so the backlog of many datagrams is framed and decoded in
        # one go (fewer, larger batches per topic) and the acks that arrive meanwhile go first;
        # without one only the status counters need the framing, once enough bytes are waiting.
        if not self._decode_scheduled:
            if self.publisher is not None:
                self._schedule_decode(DECODE_DELAY_S)
            elif self._backlog_bytes >= FRAMING_BATCH_BYTES:
                self._schedule_decode()

    def _schedule_decode(self, delay: float = 0.0) -> None:
        self._decode_scheduled = True
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # driven without an event loop (benchmarks): decode at once
            self._decode_scheduled = False
            self._drain_backlog()
            return
        if delay > 0:
            loop.call_later(delay, self.decode_backlog)
        else:
            loop.call_soon(self.decode_backlog)

    def decode_backlog(self) -> None:
        """Feed the bytes written so far to the parser and their events onward, in slices.

        A call stops after about :data:`DECODE_SLICE_S` of work and asks the loop to call it
        again, so datagrams (and their acks) that arrive meanwhile go first.
        """
        self._decode_scheduled = False
        if not self._decode_some(time.perf_counter() + DECODE_SLICE_S):
            self._schedule_decode()

    def _drain_backlog(self) -> None:
        """Decode everything written so far at once (the end of a log, status counters)."""
        self._decode_some(math.inf)

    def _decode_some(self, deadline: float) -> bool:
        """Work through pending events and the backlog until ``deadline``; True when done."""
        clock = time.perf_counter
        while True:
            if self._pending_events and not self._offer_events(deadline):
                return False
            parser = self._parser
            if parser is None or not self._decode_backlog:
                self._decode_backlog.clear()
                self._backlog_bytes = 0
                return True
            chunk = self._take_slice()
            started = clock()
            try:
                events = parser.receive_bytes(chunk)
            except ULogFormatError as err:
                # Keep recording: the file is the truth; only live decoding stops for this log.
                self._count()
                self._rows_decoded += parser.decoded_rows
                self._parser = None
                self.status.parser_errors += 1
                logger.error("live decoding stopped for this log: %s (recording goes on)", err)  # noqa: TRY400 (one line, no traceback: the input is bad, not the code)
                continue
            if (self.publisher is not None or self.foxglove is not None) and events:
                self._pending_events.extend(events)
            finished = clock()
            self._slice_bytes = next_slice_bytes(self._slice_bytes, finished - started)
            if finished >= deadline:
                return not self._pending_events and not self._decode_backlog

    def _take_slice(self) -> bytes:
        """The oldest written bytes, up to about ``_slice_bytes``."""
        backlog = self._decode_backlog
        wanted = self._slice_bytes
        if self._backlog_bytes <= wanted:
            chunk = backlog[0] if len(backlog) == 1 else b"".join(backlog)
            backlog.clear()
            self._backlog_bytes = 0
            return chunk
        size = 0
        for taken, data in enumerate(backlog, 1):  # noqa: B007 (taken is used after the loop)
            size += len(data)
            if size >= wanted:
                break
        chunk = b"".join(backlog[:taken])
        del backlog[:taken]
        self._backlog_bytes -= size
        return chunk

    def _offer_events(self, deadline: float) -> bool:
        """Pending parser events to the publisher until ``deadline``; True when none are left."""
        publisher = self.publisher
        foxglove = self.foxglove
        pending = self._pending_events
        if publisher is None and foxglove is None:
            pending.clear()
            return True
        now = self._decode_now
        clock = time.perf_counter
        popleft = pending.popleft
        if foxglove is None:
            assert publisher is not None  # noqa: S101 (both None returned above)
            select, offer_all = publisher.policy.select, publisher.sink.offer_all
            while pending:
                messages = select(popleft(), now)
                if messages:
                    offer_all(messages)
                if clock() >= deadline:
                    break
        else:
            # The Foxglove view takes the same events after MQTT (one decoding for both), with
            # MQTT's messages: the samples both choose alike are chosen and encoded once.
            show = foxglove.event
            if publisher is None:
                while pending:
                    show(popleft(), now)
                    if clock() >= deadline:
                        break
            else:
                select, offer_all = publisher.policy.select, publisher.sink.offer_all
                while pending:
                    event = popleft()
                    messages = select(event, now)
                    if messages:
                        offer_all(messages)
                    show(event, now, messages)
                    if clock() >= deadline:
                        break
        # Held samples of paused topics come due between timer ticks: send them now.
        self._flush_held(now, due_only=True)
        return not pending

    def _new_parser(self) -> ULogParser:
        """A parser for a new log: it decodes only rows MQTT or Foxglove can send (none without)."""
        selectors = [o.policy.rows_for for o in (self.publisher, self.foxglove) if o is not None]
        if not selectors:
            return ULogParser(rows=no_rows)
        if len(selectors) == 1:
            return ULogParser(rows=selectors[0])
        return ULogParser(rows=partial(_widest_rows, selectors))

    def _close_parser(self, now: float) -> None:
        """Decode what is left of the current log, then end its parser."""
        self._drain_backlog()
        parser = self._parser
        if parser is None:
            return
        events = parser.close()
        self._count()
        self._rows_decoded += parser.decoded_rows
        self._parser = None
        if self.publisher is not None or self.foxglove is not None:
            self._pending_events.extend(events)
            self._decode_now = now
            self._offer_events(math.inf)

    def _count(self) -> None:
        """The status's topic counters from the parser's framing (every row, decoded or not)."""
        parser = self._parser
        if parser is None:
            return
        self.status.rows_decoded = self._rows_decoded + parser.decoded_rows
        topics = self.status.topics
        topics.clear()
        for count in parser.topic_counts():
            if not count.samples:
                continue
            sub = count.subscription
            key = (sub.name, sub.multi_id)
            stats = topics.get(key)
            if stats is None:
                topics[key] = TopicStats(
                    count.samples, count.first_timestamp_us, count.last_timestamp_us
                )
            else:  # the instance was subscribed again under another msg_id
                stats.samples += count.samples
                stats.last_timestamp_us = count.last_timestamp_us

    def _log_started(self, timestamp_us: int, now: float, *, continued: bool = False) -> None:
        self._close_parser(now)
        self.status.topics.clear()
        self._parser = self._new_parser()
        # The file is created by the worker, in order. A log cut short by a full disk gets its
        # new file here too: with the head the session writes first, a new file takes it all.
        self._disk_retry_at = None
        self._log_id = self.files.start_log(continues=continued)
        self._log_timestamp_us = timestamp_us
        # Now, before any of the log is decoded: the file's name comes later from the worker,
        # and a policy reset then would forget the topics already subscribed. One wall-clock
        # anchor for both outlets: their samples carry the same ``t``.
        if self.foxglove is not None:
            self.foxglove.follow(None if self.publisher is None else self.publisher.policy)
        wall_time = time.time()
        for outlet in (self.publisher, self.foxglove):
            if outlet is not None:
                outlet.offer(
                    outlet.policy.log_started(
                        wall_time=wall_time, now=now, first_timestamp_us=timestamp_us or None
                    )
                )
        self.status.state = "streaming"
        self.status.log_path = None

    def _log_ended(self, ended: LogEnded, now: float) -> None:
        self._close_parser(now)
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
                    status.log_path = path
                    self._publish_log_started(path)
            case LogDiscarded(_, discarded):
                status.logs_discarded += 1
                logger.info(
                    "no log file kept for %s: the stream ended before any data (the vehicle "
                    "stopped it during the header; its parameters come again in the next log)",
                    discarded.part_path.name,
                )
                if status.log_path == discarded.part_path:
                    status.log_path = None
            case LogFinished(_, finished, how):
                self._finished_dropped += finished.dropped_bytes
                status.finished.append(finished)
                status.logs_finished += 1
                if status.log_path == finished.path.with_name(finished.path.name + ".part"):
                    status.log_path = None
                logger.info("log finished: %s (%d bytes, %s)", finished.path, finished.size, how)
                if self.on_log_finished is not None:
                    self.on_log_finished(finished, how)
            case LogFailed(_, path, error) | FinishFailed(_, path, error):
                kept = "" if path is None else f"; {path.name} is kept and recovered at start-up"
                status.error = f"{error}{kept}; recording goes on with the next log"
                logger.error("%s", status.error)
                if current:
                    status.log_path = None
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
                    status.log_path = None
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
        status.packets = counters.packets
        status.gaps = counters.gaps
        status.packets_lost = counters.packets_lost
        status.late = counters.late
        status.stale = counters.stale
        status.dropouts = counters.dropouts
        status.mismatches = counters.mismatches
        status.bytes_total = counters.bytes_written
        status.log_bytes = self.files.log_bytes if self.files.log_open else 0
        files = self.files
        status.bytes_not_written = (
            files.bytes_dropped + files.bytes_unwritten + self._finished_dropped
        )
        status.bad_frames = self.codec.bad_frames
        if self._parser is not None:
            # Frame what the counters have not seen, within one slice (the rest comes soon).
            if not self._decode_scheduled and not self._decode_some(
                time.perf_counter() + DECODE_SLICE_S
            ):
                self._schedule_decode()
            self._count()
        if self.publisher is not None:
            sink = self.publisher.sink
            status.mqtt_connected = sink.connected
            status.mqtt_published = sink.published
            status.mqtt_dropped = sink.dropped
            status.mqtt_unpublishable = sink.unpublishable
            status.mqtt_reconnects = sink.reconnects
            status.mqtt_capped = sink.capped


_ROW_SELECTION_WIDTH = {RowSelection.NONE: 0, RowSelection.NEWEST: 1, RowSelection.ALL: 2}


def _widest_rows(
    selectors: Sequence[Callable[[Subscription], RowSelection]], subscription: Subscription
) -> RowSelection:
    """The rows every one of ``selectors`` needs: one decoding serves MQTT and Foxglove."""
    choices = [select(subscription) for select in selectors]
    widest: RowSelection = max(choices, key=lambda choice: _ROW_SELECTION_WIDTH[choice])
    return widest


def _drop(_data: bytes) -> None:
    """Where sends go while no link is open."""


def sys_uuid_file(out_dir: Path, link: str, system_id: int) -> Path:
    """Where the ``sys_uuid`` of autopilot ``system_id`` on ``link`` is remembered."""
    return out_dir / SYS_UUID_FILE.format(link=link_name(link), sysid=system_id)


def last_recorded_sysid(out_dir: Path, link: str) -> int | None:
    """The system id of the autopilot whose ``sys_uuid`` was remembered last on ``link``.

    A recorder without ``--target-sysid`` takes it as its own vehicle (its Last Will, client id
    and start-up line), so a vehicle whose ``MAV_SYS_ID`` is not 1 keeps its identity.
    """
    prefix = SYS_UUID_FILE.format(link=link_name(link), sysid="")
    newest: tuple[float, int] | None = None
    with contextlib.suppress(OSError):
        for state in out_dir.glob(f"{prefix}*"):
            digits = state.name.removeprefix(prefix)
            if not digits.isdigit():
                continue
            with contextlib.suppress(OSError):
                stamp = (state.stat().st_mtime, int(digits))
                if newest is None or stamp > newest:
                    newest = stamp
    return None if newest is None else newest[1]


def _sys_uuid_note(mqtt: MqttSettings, sys_uuid: str | None) -> str:
    """How ``{sys_uuid}`` was filled in, for the start-up line."""
    if not mqtt.uses_sys_uuid:
        return ""
    if sys_uuid is None:
        return "; sys_uuid not known yet: host name, link and sysid stand in until a log shows it"
    return f"; sys_uuid {sys_uuid} from the last log"


def _announce(publisher: Publisher, info: FinishedLogInfo) -> None:
    """Publish ``{root}/{vehicle}/meta/log_finished`` (not retained: an event) for ``info``."""
    from ulogstream.publish import MqttMessage  # noqa: PLC0415 (numpy: MQTT only)

    settings = publisher.policy.settings
    publisher.offer(
        [
            MqttMessage(
                f"{settings.root}/{info.vehicle}/meta/log_finished",
                json.dumps(info.as_json(), separators=(",", ":")).encode(),
                qos=max(1, settings.qos),
                content_type="application/json",
            )
        ]
    )


def publish_settings(
    mqtt: MqttSettings, *, link: str = "replay", sysid: int = 1, sys_uuid: str | None = None
) -> PublishSettings:
    """The publish policy's settings from the ``[mqtt]`` configuration.

    Args:
        mqtt: The ``[mqtt]`` settings.
        link: ``link.connection`` for the vehicle id's ``{link}``.
        sysid: The autopilot's system id for the vehicle id's ``{sysid}``.
        sys_uuid: The autopilot's ``sys_uuid`` if known, for ``{sys_uuid}``.
    """
    from ulogstream.publish import PublishSettings  # noqa: PLC0415 (numpy: MQTT only)

    return PublishSettings(
        vehicle_id=mqtt.effective_vehicle_id(link=link, sysid=sysid, sys_uuid=sys_uuid),
        root=mqtt.root,
        rate_hz=mqtt.default_rate_hz,
        topic_rates=dict(mqtt.rates),
        include=mqtt.include or ("*",),
        exclude=mqtt.exclude,
        encode_json="json" in mqtt.encodings,
        encode_msgpack="msgpack" in mqtt.encodings,
        encode_raw="ulog" in mqtt.encodings,
        qos=mqtt.qos,
        param_topics=mqtt.param_topics,
    )


def sink_settings(mqtt: MqttSettings, *, client_id: str | None = None) -> MqttSinkSettings:
    """The MQTT sink's settings from the ``[mqtt]`` configuration (URL must be set).

    The password is read here, once: a missing file fails now, with the key named, rather than
    at the first connect.

    Args:
        mqtt: The ``[mqtt]`` settings.
        client_id: The filled-in client id (None: a unique one per run).

    Raises:
        ConfigError: The URL is not set, or the password cannot be read.
    """
    from ulogstream.adapters.mqtt_sink import MqttSinkSettings  # noqa: PLC0415 (aiomqtt: MQTT only)

    brokers = mqtt.broker_urls()
    if not brokers:
        msg = "mqtt.url is not set"
        raise ConfigError(msg)
    return MqttSinkSettings(
        url=brokers[0],
        fallback_urls=brokers[1:],
        client_id=client_id,
        keepalive=mqtt.keepalive_s,
        session_expiry=mqtt.session_expiry_s,
        retained_resend_per_s=mqtt.retained_resend_per_s,
        max_messages_per_s=mqtt.max_messages_per_s,
        protocol=5 if mqtt.protocol == "5" else 4,
        ca_file=mqtt.tls_ca_file,
        cert_file=mqtt.tls_cert_file,
        key_file=mqtt.tls_key_file,
        username=mqtt.username,
        password=mqtt_password(mqtt),
        max_outbox=mqtt.outbox_size,
    )


def build_publisher(
    mqtt: MqttSettings,
    *,
    link: str = "replay",
    sysid: int = 1,
    sys_uuid: str | None = None,
    vehicle_id: str | None = None,
) -> Publisher | None:
    """The MQTT side, or None when no broker is configured.

    Args:
        mqtt: The ``[mqtt]`` settings.
        link: ``link.connection`` for ``{link}`` in the vehicle and client ids.
        sysid: The home autopilot's system id for ``{sysid}`` in the vehicle id.
        sys_uuid: The home autopilot's ``sys_uuid`` if known, for ``{sys_uuid}``.
        vehicle_id: The vehicle id already filled in (the recorder's); None: from the above.

    Raises:
        ConfigError: A setting cannot be used (bad URL, missing password file, ...).
    """
    if not mqtt.broker_urls():
        return None
    settings = publish_settings(mqtt, link=link, sysid=sysid, sys_uuid=sys_uuid)
    if vehicle_id is not None:
        settings = replace(settings, vehicle_id=vehicle_id)
    from ulogstream.publish import PublishPolicy  # noqa: PLC0415 (numpy: MQTT only)

    policy = PublishPolicy(settings)
    client_id = mqtt.effective_client_id(policy.settings.vehicle_id, link=link)
    from ulogstream.adapters.mqtt_sink import MqttSink  # noqa: PLC0415 (aiomqtt: MQTT only)

    sink = MqttSink(sink_settings(mqtt, client_id=client_id), will=policy.last_will())
    return Publisher(policy, sink)


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


def final_status(pipeline: Pipeline, publisher: Publisher) -> list[MqttMessage]:
    """The retained end-of-run status of a vehicle: offline, its last counters and last file."""
    pipeline.refresh_status()
    status = pipeline.status
    fields = status_fields(status)
    if status.log_path is None and status.finished:
        fields["log_file"] = str(status.finished[-1].path)
    now = time.monotonic()
    publisher.policy.update_status(now, fields=fields)
    return [publisher.policy.offline_status(now)]


class _FatalLinkError(Exception):
    """Carries the LinkError of a link that will not open out of the task group.

    ``record --once`` with no link, or a path that is never a serial port.
    """

    def __init__(self, error: LinkError) -> None:
        super().__init__(str(error))
        self.error = error


def _state_text(state: SessionState, current: str) -> str:
    """The status line's state for a session state (the streaming text is set by the log)."""
    if state is SessionState.STREAMING:
        return current if current in {"streaming", "idle"} else "streaming"
    return str(state.value)


class Recorder:
    """Records every log streamed on one link, publishing live, until stopped.

    Args:
        settings: Everything configurable.
        once: Return after the first log ends (``record --once``).
        status_stream: Where a live status line is drawn (a terminal), or None.
        notifier: systemd notifications (READY, STATUS, WATCHDOG); a no-op outside systemd.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        once: bool = False,
        status_stream: TextIO | None = None,
        notifier: Notifier | None = None,
    ) -> None:
        self.settings = settings
        self.once = once
        self.status = RecorderStatus(link=settings.link.connection)
        self._status_stream = status_stream
        self._notifier = notifier or Notifier({})
        self._stop_requested = asyncio.Event()
        self._abandon_requested = asyncio.Event()
        self._stop_hint_shown = False
        self.exit_code = 0
        self.pipeline: Pipeline | None = None
        """The first vehicle's pipeline (the status line's); every one is in :attr:`vehicles`."""
        self.vehicles: dict[int, Pipeline] = {}
        """One pipeline (session, files, parser, publisher) per autopilot system id."""
        self._ignored_systems: set[int] = set()
        self._impostor_warned = False
        link, mqtt = settings.link, settings.mqtt
        self.vehicle_ids: dict[int, str] = {}
        """Each vehicle's id (topics, folder under ``out_dir``, uploads), fixed for the run."""
        home = link.target_sysid
        if home is None and mqtt.uses_sys_uuid:
            home = last_recorded_sysid(settings.recording.out_dir, link.connection)
        self._home = home or 1
        """The system id of the recorder's own vehicle: ``--target-sysid``, else the last one
        recorded on this link, else 1 (PX4's default)."""
        vehicle_id, sys_uuid = self._identify(self._home)
        self.publisher = build_publisher(
            mqtt, link=link.connection, sysid=self._home, vehicle_id=vehicle_id
        )
        client = (
            "" if self.publisher is None else f", MQTT client id {self.publisher.sink.client_id!r}"
        )
        configured = "default" if mqtt.vehicle_id is None else repr(mqtt.vehicle_id)
        self._identity_line = (
            f"vehicle id {vehicle_id!r} (mqtt.vehicle_id {configured}"
            f"{_sys_uuid_note(mqtt, sys_uuid)}): recording into "
            f"{settings.recording.out_dir / vehicle_id}{client}"
        )
        """Logged once the link is open (a link that cannot open is the one error line)."""
        self.logbook = Logbook(settings.recording.out_dir)
        self.shipper = LogShipper(
            settings.upload,
            journal=settings.recording.out_dir / UPLOAD_QUEUE_FOLDER,
            on_settled=self.logbook.settled,
            withheld_env=() if mqtt.password_env is None else (mqtt.password_env,),
        )
        self._watch_armed = settings.upload.only_when_disarmed and self.shipper.uploads
        """Whether autopilot HEARTBEATs tell the shipper armed or disarmed."""
        self.foxglove: FoxgloveSink | None = None
        """The Foxglove live view of the first vehicle (``[foxglove]``), or None."""
        if settings.foxglove.enabled:
            from ulogstream.adapters.foxglove_sink import build_foxglove  # noqa: PLC0415 (the SDK: Foxglove only)

            self.foxglove = build_foxglove(settings.foxglove)
        self._spec = parse_connection(settings.link.connection, default_baud=settings.link.baud)
        key_file = settings.link.signing_key_file
        self._signing_key = None if key_file is None else load_signing_key(key_file)
        self._codec = self._make_codec()
        self._send: Callable[[bytes], None] = _drop
        self._udp: UdpTransport | None = None
        self._next_hello = 0.0
        self._link_codec: MavlinkCodec | None = None
        """The open link's codec (None while no link is open)."""
        self.sink = self._vehicle_sink(self._home, vehicle_id)

    def _vehicle_sink(self, system_id: int, vehicle_id: str) -> UlgFileSink:
        """The file sink of a vehicle: its folder, and what the logbook says of its logs."""
        return UlgFileSink.from_settings(
            self.settings.recording,
            folder=vehicle_id,
            tags={"vehicle": vehicle_id, "link": self.settings.link.connection, "sysid": system_id},
            upload_pending=self.shipper.uploads,
        )

    def request_stop(self) -> None:
        """Stop streaming with the handshake, finish the file and return from :meth:`run`.

        A second request while the stop waits for the vehicle abandons the wait.
        """
        if self._stop_requested.is_set():
            self._abandon_requested.set()
        self._stop_requested.set()

    async def run(self) -> int:
        """Run until stopped; the exit code is 0 unless the stream could not be recorded."""
        if self.foxglove is not None:
            self.foxglove.start()  # a port in use fails here, before anything is recorded
        out_dir = self.settings.recording.out_dir
        recovered = await asyncio.to_thread(
            recover_partial_files, out_dir, upload_pending=self.shipper.uploads
        )
        for log in recovered:
            logger.warning("%s", log.message)
            if not log.corrupt and not log.discarded:
                self._recovered(log)
        loop = asyncio.get_running_loop()
        with contextlib.suppress(NotImplementedError, RuntimeError):
            for signum in STOP_SIGNALS:
                loop.add_signal_handler(signum, self.request_stop)
        self._notifier.ready(f"recording from {self.settings.link.connection}")
        try:
            async with asyncio.TaskGroup() as group:
                side_tasks = [group.create_task(self._supervised("status", self._status_loop))]
                if self.publisher is not None:
                    side_tasks.append(
                        group.create_task(self._supervised("MQTT", self.publisher.sink.run))
                    )
                side_tasks.append(group.create_task(self._supervised("upload", self.shipper.run)))
                link = group.create_task(self._link_loop())
                await self._timer_loop()
                link.cancel()
                for pipeline in self.vehicles.values():
                    pipeline.refresh_status()  # the last counters, for the caller and MQTT
                    await pipeline.files.aclose()  # every file finished (fsync, rename) first
                await self._finish_shipping()
                for pipeline in self.vehicles.values():
                    if pipeline.publisher is not None:
                        pipeline.publisher.offer(final_status(pipeline, pipeline.publisher))
                if self.foxglove is not None:
                    self.foxglove.offer([self.foxglove.policy.offline_status(time.monotonic())])
                if self.publisher is not None:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self.publisher.sink.wait_drained(), 2.0)
                for task in side_tasks:
                    task.cancel()
        except* _FatalLinkError as errors:
            first = errors.exceptions[0]
            assert isinstance(first, _FatalLinkError)  # noqa: S101 (the except* type)
            raise first.error from None
        finally:
            self._notifier.stopping()
            for pipeline in self.vehicles.values():
                await pipeline.files.aclose()
            if self.foxglove is not None:
                self.foxglove.stop()
            with contextlib.suppress(NotImplementedError, RuntimeError):
                for signum in STOP_SIGNALS:
                    loop.remove_signal_handler(signum)
            self._draw_status(final=True)
        for pipeline in self.vehicles.values():
            if pipeline.rejected is not None and self.once:
                self.exit_code = 1
        return self.exit_code

    def _count_uploads(self, status: RecorderStatus) -> None:
        """Copy the (recorder-wide) upload counters into ``status``."""
        shipper = self.shipper
        status.uploads = shipper.uploaded
        status.upload_failures = shipper.failed
        status.upload_backlog = shipper.backlog
        status.upload_held = shipper.held

    async def _finish_shipping(self) -> None:
        """Let finished logs be announced, and uploads end, for a bounded time before stopping."""
        shipper = self.shipper
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(shipper.wait_described(), ANNOUNCE_WAIT_S)
        if shipper.backlog and not shipper.paused:
            logger.info(
                "waiting up to %.0f s for %d upload(s) before stopping",
                UPLOAD_WAIT_S,
                shipper.backlog,
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(shipper.wait_settled(), UPLOAD_WAIT_S)
        for pipeline in self.vehicles.values():  # the final status shows how uploads went
            self._count_uploads(pipeline.status)

    def _make_codec(self) -> MavlinkCodec:
        link = self.settings.link
        return MavlinkCodec(
            system_id=link.sysid, component_id=link.compid, signing_key=self._signing_key
        )

    def _identify(self, system_id: int) -> tuple[str, str | None]:
        """The id of the vehicle ``system_id`` (kept in :attr:`vehicle_ids`) and its ``sys_uuid``.

        The ``sys_uuid`` is the one remembered from its last log (None: not known or not used).

        The id is fixed for the run: a ``sys_uuid`` a log shows is remembered and used from
        the next start, so topics, Last Will and folder never move under a running flight.
        A vehicle other than the home one whose filled-in template names neither ``{sysid}``
        nor ``{sys_uuid}`` (or names an id taken on this link) gets ``-sysid{N}`` appended.
        """
        settings = self.settings
        mqtt, link = settings.mqtt, settings.link.connection
        sys_uuid = None
        if mqtt.uses_sys_uuid:  # a small read, once per vehicle
            sys_uuid = recalled_sys_uuid(sys_uuid_file(settings.recording.out_dir, link, system_id))
        vehicle_id = mqtt.effective_vehicle_id(link=link, sysid=system_id, sys_uuid=sys_uuid)
        home = system_id == self._home
        template = mqtt.vehicle_id or ""
        distinct = mqtt.uses_sys_uuid or "{sysid}" in template
        if (not home and not distinct) or vehicle_id in self.vehicle_ids.values():
            vehicle_id = f"{vehicle_id}-sysid{system_id}"
        self.vehicle_ids[system_id] = vehicle_id
        return vehicle_id, sys_uuid

    def _new_vehicle(self, system_id: int, now: float) -> Pipeline:
        """A pipeline for the autopilot ``system_id``, heard for the first time on the link.

        The recorder's own vehicle (``--target-sysid``, else the one last recorded on this link,
        else sysid 1: PX4's default) uses the recorder's sink and publisher; any other sysid
        gets its own vehicle id (see :meth:`_identify`), folder ``out_dir/{vehicle}`` and MQTT
        tree, so vehicles never mix.
        """
        home = system_id == self._home
        foxglove = None
        if home:
            sink, publisher, foxglove = self.sink, self.publisher, self.foxglove
            vehicle_id = self.vehicle_ids[system_id]
        else:
            vehicle_id, _ = self._identify(system_id)
            sink = self._vehicle_sink(system_id, vehicle_id)
            publisher = None
            if self.publisher is not None:
                mqtt, link = self.settings.mqtt, self.settings.link.connection
                settings = replace(
                    publish_settings(mqtt, link=link, sysid=system_id), vehicle_id=vehicle_id
                )
                from ulogstream.publish import PublishPolicy  # noqa: PLC0415 (numpy: MQTT only)

                publisher = Publisher(PublishPolicy(settings), self.publisher.sink)
            logger.info("vehicle sysid %d: vehicle id %r", system_id, vehicle_id)
        where = sink.folder
        status = self.status if self.pipeline is None else RecorderStatus(link=self.status.link)
        pipeline = Pipeline(
            codec=self._codec,
            session=self._new_session(system_id),
            files=LogFiles(sink, partial(self._file_event, system_id)),
            status=status,
            publisher=publisher,
            foxglove=foxglove,
            on_log_ended=self._log_ended,
        )
        pipeline.on_log_finished = partial(self._log_finished, pipeline, system_id)
        self.vehicles[system_id] = pipeline
        if self.pipeline is None:
            self.pipeline = pipeline
        logger.info("vehicle sysid %d: recording into %s", system_id, where)
        pipeline.files.start()
        pipeline.attach(self._vehicle_send(pipeline), now, restored=False)
        pipeline.start(now)
        return pipeline

    def _recovered(self, log: RecoveredFile) -> None:
        """A log an interrupted recording left: announced and uploaded like any finished one."""
        tags = log.tags
        vehicle = tags.get("vehicle")
        if not isinstance(vehicle, str):
            vehicle = log.path.parent.parent.name
        link, sysid = tags.get("link"), tags.get("sysid")
        state = None
        if self.settings.mqtt.uses_sys_uuid and isinstance(link, str) and isinstance(sysid, int):
            state = sys_uuid_file(self.settings.recording.out_dir, link, sysid)
        publisher = self.publisher
        self.shipper.offer(
            log.path,
            log.size,
            vehicle=vehicle,
            how=RECOVERED_HOW,
            announce=None if publisher is None else partial(_announce, publisher),
            sys_uuid_file=state,
        )

    def _log_finished(
        self, pipeline: Pipeline, system_id: int, finished: FinishedLog, how: str
    ) -> None:
        """Announce ``finished`` on MQTT and queue its upload (both off the event loop's path)."""
        publisher, settings = pipeline.publisher, self.settings
        state = None
        if settings.mqtt.uses_sys_uuid:
            state = sys_uuid_file(settings.recording.out_dir, settings.link.connection, system_id)
        self.shipper.offer(
            finished.path,
            finished.size,
            vehicle=self.vehicle_ids[system_id],
            how=how,
            announce=partial(self._announce, publisher, system_id),
            sys_uuid_file=state,
        )

    def _announce(self, publisher: Publisher | None, system_id: int, info: FinishedLogInfo) -> None:
        """Publish ``meta/log_finished``; say when a newly seen ``sys_uuid`` changes the id."""
        if publisher is not None:
            _announce(publisher, info)
        mqtt = self.settings.mqtt
        if not mqtt.uses_sys_uuid or info.sys_uuid is None:
            return
        now = self.vehicle_ids[system_id]
        link = self.settings.link.connection
        then = mqtt.effective_vehicle_id(link=link, sysid=system_id, sys_uuid=info.sys_uuid)
        if then != now and not now.startswith(f"{then}-sysid"):
            logger.info(
                "autopilot sys_uuid %s (in %s): the vehicle id becomes %r at the next start "
                "(%r until then)",
                info.sys_uuid,
                info.path.name,
                then,
                now,
            )

    def _file_event(self, system_id: int, event: FileEvent) -> None:
        self.vehicles[system_id].file_event(event)

    def _new_session(self, system_id: int) -> LoggingSession:
        link = self.settings.link
        return LoggingSession(
            system_id=link.sysid,
            component_id=link.compid,
            target_system=system_id,
            restart_after_foreign_stop=not self.once,
            reorder_packets=link.reorder_packets,
            reorder_time=link.reorder_window_s,
            data_timeout=self.settings.recording.idle_timeout_s,
        )

    async def _supervised(
        self, name: str, run: Callable[[], Coroutine[object, object, None]]
    ) -> None:
        """Run a side task for ever: a failure is logged with its cause and it starts again."""
        failures = 0
        while True:
            started = time.monotonic()
            try:
                await run()
            except Exception as err:  # noqa: BLE001 (any fault of a side task is logged, then retried)
                if time.monotonic() - started > RESTART_BACKOFF[-1]:
                    failures = 0
                delay = RESTART_BACKOFF[min(failures, len(RESTART_BACKOFF) - 1)]
                failures += 1
                logger.error(  # noqa: TRY400 (one line with the cause; the loop goes on)
                    "%s stopped: %s: %s; restarting it in %.0f s",
                    name,
                    type(err).__name__,
                    err,
                    delay,
                )
            else:
                return
            await asyncio.sleep(delay)

    async def _link_loop(self) -> None:
        """Open the link, read it until it fails, and open it again, for ever."""
        attempt = 0
        last_error = ""
        opened_before = False
        while True:
            try:
                transport = await open_transport(self._spec)
            except LinkError as err:
                if err.permanent or (self.once and not opened_before):
                    # No link to wait for (record --once), or one that can never open (a
                    # regular file as the serial port): one clear error, exit non-zero.
                    raise _FatalLinkError(err) from None
                if str(err) != last_error:
                    how = "" if last_error else " (Ctrl-C or SIGTERM stops)"
                    logger.warning("%s; retrying until it opens%s", err, how)
                    last_error = str(err)
                await asyncio.sleep(RECONNECT_BACKOFF[min(attempt, len(RECONNECT_BACKOFF) - 1)])
                attempt += 1
                continue
            if opened_before:
                self.status.link_reconnects += 1
                logger.info("link %s is back", transport.describe())
            else:
                logger.info("listening on %s", transport.describe())
                logger.info("%s", self._identity_line)
                self.status.state = "waiting for autopilot"
            opened_before = True
            attempt, last_error = 0, ""
            self._codec = self._link_codec = self._make_codec()  # fresh per opening
            self._udp = transport if isinstance(transport, UdpTransport) else None
            self._send = transport.send
            now = time.monotonic()
            self._hello(now)
            for pipeline in self.vehicles.values():
                pipeline.codec = self._codec
                pipeline.attach(self._vehicle_send(pipeline), now, restored=True)
            try:
                await self._receive_loop(transport)
            except LinkError as err:
                logger.warning("%s; the open log waits for it to come back", err)
            finally:
                self._send = _drop
                self._udp = self._link_codec = None
                for pipeline in self.vehicles.values():
                    pipeline.detach()
                await transport.aclose()

    async def _receive_loop(self, transport: Transport) -> None:
        """Route what ``transport`` receives until it closes (a :class:`LinkError` then)."""
        route = self._route
        monotonic = time.monotonic
        if isinstance(transport, UdpTransport):  # datagrams handled in the reader callback

            def handle(data: bytes) -> None:
                route(data, monotonic())

            await transport.pump(handle)
        else:
            codec = self._codec
            # A serial port wakes the loop once a frame can be whole, not for every piece.
            wake_after = transport.wake_after if isinstance(transport, SerialTransport) else None
            while data := await transport.receive():
                route(data, monotonic())
                if wake_after is not None:
                    wake_after(codec.bytes_wanted())
        msg = f"link {transport.describe()} was closed"
        raise LinkError(msg)

    def _route(self, data: bytes, now: float) -> None:
        """Decode one chunk and hand each vehicle its messages (acks go out inside)."""
        messages = self._codec.decode(data)
        if not messages:
            return
        system_id = messages[0].system_id
        groups: dict[int, list[MavlinkMessage]]
        if all(message.system_id == system_id for message in messages):
            groups = {system_id: messages}  # the common case: one vehicle per chunk
        else:
            groups = {}
            for message in messages:
                groups.setdefault(message.system_id, []).append(message)
        for system_id, group in groups.items():
            pipeline = self.vehicles.get(system_id)
            if pipeline is None:
                pipeline = self._first_contact(system_id, group, now)
                if pipeline is None:
                    continue
            elif self._udp is not None and pipeline.peer != self._udp.peer:
                pipeline.attach(self._vehicle_send(pipeline), now, restored=False)
            pipeline.receive_messages(group, now)
            if self._watch_armed:
                self._heard_armed(system_id, group)

    def _heard_armed(self, system_id: int, messages: list[MavlinkMessage]) -> None:
        """Tell the shipper whether the autopilot ``system_id`` is armed (its HEARTBEAT)."""
        for message in messages:
            if type(message) is Heartbeat and message.component_id == MAV_COMP_ID_AUTOPILOT1:
                self.shipper.set_armed(message.armed, system_id)

    def _first_contact(
        self, system_id: int, messages: list[MavlinkMessage], now: float
    ) -> Pipeline | None:
        """A new vehicle on the link when one of ``messages`` is its autopilot's HEARTBEAT."""
        link = self.settings.link
        heartbeats = [m for m in messages if type(m) is Heartbeat]
        if not any(m.component_id == MAV_COMP_ID_AUTOPILOT1 for m in heartbeats):
            ours = system_id == link.sysid and any(
                m.component_id == link.compid for m in heartbeats
            )
            if ours and not self._impostor_warned:
                self._impostor_warned = True
                logger.warning(
                    "another receiver on %s uses our MAVLink ids (sysid %d, compid %d): both "
                    "would take one log stream; give one of them other ids (--sysid)",
                    link.connection,
                    link.sysid,
                    link.compid,
                )
            return None
        target = link.target_sysid
        if target is not None and system_id != target:
            if system_id not in self._ignored_systems:
                self._ignored_systems.add(system_id)
                logger.info(
                    "vehicle sysid %d seen on %s and ignored: recording sysid %d only "
                    "(--target-sysid)",
                    system_id,
                    link.connection,
                    target,
                )
            return None
        return self._new_vehicle(system_id, now)

    def _vehicle_send(self, pipeline: Pipeline) -> Callable[[bytes], None]:
        """How ``pipeline`` sends: to its own vehicle's address on a UDP link that has several."""
        udp = self._udp
        if udp is None or udp.peer is None:
            pipeline.peer = None
            return self._send
        peer = pipeline.peer = udp.peer
        send: Callable[[bytes], None] = partial(udp.send_to, peer=peer)
        return send

    async def _timer_loop(self) -> None:
        """Drive every vehicle's timers until all have ended (stopped, or given up)."""
        stopping = False
        next_progress_log = 0.0
        while True:
            now = time.monotonic()
            vehicles = list(self.vehicles.values())
            if stopping and all(p.ended.is_set() for p in vehicles):
                return
            if not stopping and self._stop_requested.is_set():
                stopping = True
                next_progress_log = now + STOP_PROGRESS_LOG_S
                if self._status_stream is None:  # a terminal shows this on its status line
                    logger.info("stopping: %s", self._stop_text())
                for pipeline in vehicles:
                    pipeline.stop(now)
                continue
            if not vehicles:
                if stopping:
                    return  # no vehicle was ever heard: nothing to stop
                if now >= self._next_hello:
                    self._hello(now)
            for pipeline in vehicles:
                if pipeline.ended.is_set():
                    continue
                if stopping:
                    if self._abandon_requested.is_set():
                        logger.warning("stop abandoned: the end of the log is not recorded")
                        pipeline.abandon(now)
                        continue
                    progress = pipeline.session.stop_progress(now)
                    pipeline.status.state = (
                        "stopping" if progress is None else f"stopping: {progress}"
                    )
                    if progress is not None and now >= next_progress_log:
                        logger.info("stopping: %s", progress)
                elif pipeline.rejected is not None:
                    self._rejected(pipeline, now)
                elif pipeline.disk_full:
                    pipeline.status.state = "disk full"
                else:
                    pipeline.status.state = _state_text(
                        pipeline.session.state, pipeline.status.state
                    )
                pipeline.timer(now)
            if stopping and now >= next_progress_log:
                next_progress_log = now + STOP_PROGRESS_LOG_S
            deadlines = [d for p in vehicles if (d := p.next_deadline()) is not None]
            delay = TIMER_TICK_S
            if deadlines:
                delay = min(delay, max(0.0, min(deadlines) - time.monotonic()))
            wake = self._abandon_requested if stopping else self._stop_requested
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), delay)

    def _stop_text(self) -> str:
        """What a stop does now: the handshake, or nothing to stop."""
        if not self.vehicles:
            return "no vehicle was heard, so there is no stream to stop"
        if self._link_codec is None:
            return (
                "the link is down, so LOGGING_STOP cannot reach the vehicle; the open log is "
                "finished when the stop times out (a second SIGINT or SIGTERM ends at once)"
            )
        return "LOGGING_STOP sent; a second SIGINT or SIGTERM ends at once (the .part is kept)"

    def _hello(self, now: float) -> None:
        """Send our HEARTBEAT while no vehicle is known: a udpout peer learns our address from it.

        Each vehicle's session sends its own once it exists.
        """
        self._send(self._codec.encode_heartbeat())
        self._next_hello = now + HELLO_INTERVAL_S

    def _rejected(self, pipeline: Pipeline, now: float) -> None:
        """The vehicle refused to stream: ask again later (or give up with --once)."""
        if self.once:
            self._stop_requested.set()
        elif pipeline.rejected_at is None:
            pipeline.rejected_at = now
            logger.warning("asking again in %.0f s", REJECTED_RETRY_S)
        elif now - pipeline.rejected_at >= REJECTED_RETRY_S:
            system_id = pipeline.session.autopilot_system
            pipeline.rejected = pipeline.rejected_at = None
            pipeline.session = self._new_session(system_id or 1)
            pipeline.start(now)

    def _log_ended(self, _ended: LogEnded) -> None:
        if self.once:
            self._stop_requested.set()

    async def _status_loop(self) -> None:
        watchdog = watchdog_interval() if self.settings.systemd.watchdog else None
        next_watchdog = 0.0
        next_notify = 0.0
        started = time.monotonic()
        next_log = started + STATUS_LOG_INTERVAL_S
        last_bytes, last_time = 0, started
        hint_after = self.settings.link.hint_after_s
        # The open link is checked once, hint_after after it opened, for any valid MAVLink.
        watched: MavlinkCodec | None = None
        watched_since = started
        while True:
            now = time.monotonic()
            codec = self._link_codec
            if codec is not watched:
                watched, watched_since = codec, now
            elif codec is not None and hint_after and now - watched_since >= hint_after:
                hint = self.link_hint(codec)
                if hint is not None:
                    logger.warning("%s", hint)
                watched_since = float("inf")  # one look per link opening
            pipeline = self.pipeline
            for vehicle in self.vehicles.values():
                vehicle.refresh_status()
                self._count_uploads(vehicle.status)
                if vehicle.publisher is not None:
                    vehicle.publisher.offer(
                        vehicle.publisher.policy.update_status(
                            now, state=vehicle.status.state, fields=status_fields(vehicle.status)
                        )
                    )
                if vehicle.foxglove is not None:
                    vehicle.foxglove.offer(
                        vehicle.foxglove.policy.update_status(
                            now,
                            state=vehicle.status.state,
                            fields={
                                **status_fields(vehicle.status),
                                **vehicle.foxglove.counters(),
                            },
                        )
                    )
            elapsed = now - last_time
            if elapsed >= 1.0:
                self.status.bytes_per_s = (self.status.bytes_total - last_bytes) / elapsed
                last_bytes, last_time = self.status.bytes_total, now
            self._draw_status()
            if watchdog is not None and now >= next_watchdog:
                self._notifier.watchdog()
                next_watchdog = now + watchdog
            if now >= next_notify:
                self._notifier.status(self.status_text())
                next_notify = now + 5.0
            if self._status_stream is None and pipeline is not None and now >= next_log:
                # No terminal (the journal, a pipe): the counters as one key=value line.
                fields = " ".join(
                    f"{k}={json.dumps(v)}" for k, v in status_fields(self.status).items()
                )
                logger.info("status state=%s %s", self.status.state.replace(" ", "_"), fields)
                next_log = now + STATUS_LOG_INTERVAL_S
            await asyncio.sleep(STATUS_INTERVAL_S)

    def link_hint(self, codec: MavlinkCodec) -> str | None:
        """What is likely wrong with a link on which ``codec`` found no valid MAVLink yet.

        Returns:
            One line for the log, or None when a valid MAVLink frame has arrived.
        """
        if codec.valid_frames:
            return None
        spec = self._spec
        serial = spec.device is not None
        if codec.skipped_bytes or codec.buffered or codec.bad_frames:
            if self._signing_key is not None and codec.bad_frames:
                why = "is the signing key PX4's?"
            elif serial:
                why = "wrong baud rate? try 921600 or 57600, PX4's TELEM2 and TELEM1 defaults"
            else:
                why = "is it another program's port? does the sender speak MAVLink 2?"
            return f"bytes arrive on {spec} but no valid MAVLink ({why})"
        if serial:
            why = "wrong port? is PX4's MAV_x_CONFIG set for this port?"
        else:
            why = "wrong address or port? is a PX4 MAVLink instance sending to it?"
        return f"nothing arrives on {spec} ({why})"

    def status_text(self) -> str:
        """One line: state, file, bytes, rate, packets, gaps, dropouts (MQTT, uploads)."""
        status = self.status
        name = "-" if status.log_path is None else status.log_path.name
        gaps = "1 gap" if status.gaps == 1 else f"{status.gaps} gaps"
        dropouts = "1 dropout" if status.dropouts == 1 else f"{status.dropouts} dropouts"
        rate = "-" if status.bytes_per_s is None else f"{status.bytes_per_s / 1e3:.0f}"
        text = (
            f"{status.state}: {name} {status.log_bytes / 1e6:.2f} MB "
            f"{rate} KB/s, {status.packets} packets, "
            f"{gaps} ({status.packets_lost} lost, {status.late} late), {dropouts}"
        )
        if len(self.vehicles) > 1:
            text += f" (first of {len(self.vehicles)} vehicles)"
        if self.publisher is not None:
            link = "up" if status.mqtt_connected else "down"
            text += f", mqtt {link} {status.mqtt_published} sent {status.mqtt_dropped} dropped"
        if self.foxglove is not None:
            text += f", foxglove {self.foxglove.url} {self.foxglove.sent} sent"
        shipper = self.shipper
        if shipper.uploads and (shipper.backlog or shipper.uploaded or shipper.failed):
            text += f", uploads {shipper.uploaded} done {shipper.backlog} waiting"
            if shipper.failed:
                text += f" {shipper.failed} failed"
            if shipper.held:
                text += " (held: armed)"
        return text

    def _draw_status(self, *, final: bool = False) -> None:
        stream = self._status_stream
        if stream is None:
            return
        text = ""
        if not final:
            if self._stop_requested.is_set() and not self._stop_hint_shown:
                self._stop_hint_shown = True
                text = self._stop_text() if not self.vehicles else "Ctrl-C again ends at once"
                stream.write(f"\r\x1b[Kstopping: {text}\n")
            text = fit_line(self.status_text(), terminal_width(stream))
        stream.write("\r\x1b[K" + text)
        stream.flush()


def terminal_width(stream: TextIO) -> int:
    """Columns of the terminal ``stream`` writes to (``$COLUMNS`` or 80 when it cannot tell)."""
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (OSError, ValueError, AttributeError):
        return shutil.get_terminal_size().columns


def fit_line(text: str, width: int) -> str:
    """``text`` cut to fit in ``width`` columns without wrapping (the last column stays free)."""
    room = max(width - 1, 1)
    return text if len(text) <= room else text[: room - 1] + "~"
