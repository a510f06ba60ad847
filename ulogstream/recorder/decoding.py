"""Live decoding: written bytes decoded in slices, their events fanned out to the outlets."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import deque
from functools import partial
from typing import TYPE_CHECKING

from ulogstream.errors import ULogFormatError
from ulogstream.recorder.status import RecorderStatus, TopicStats

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from ulogstream.adapters.foxglove_sink import FoxgloveSink
    from ulogstream.adapters.mqtt_sink import MqttSink
    from ulogstream.live.outbox import MqttMessage
    from ulogstream.live.policy import PublishPolicy
    from ulogstream.ulog.events import Subscription, ULogEvent
    from ulogstream.ulog.parser import RowSelection, ULogParser

logger = logging.getLogger("ulogstream")


DECODE_DELAY_S = 0.01
"""With a live outlet (MQTT, the Foxglove view), the longest a written row waits to be decoded.

Several datagrams are decoded in one go instead of one callback per datagram. On real PX4 logs
at the USB ceiling (``tests/bench/bench_real.py --paces usb``) 5 ms let the vehicle's ack round
trip reach 5-11 ms at its worst; 10 ms keeps it under 2 ms at the same CPU, and 25 ms under 1 ms
but pushes the arrival-to-publish p99 past 20 ms (``tests/bench/bench_live.py --parts 1
--decode-delay S``)."""


DECODE_EARLY_S = 0.006
"""How much sooner than :data:`DECODE_DELAY_S` a wake-up of the loop for received datagrams
decodes the backlog (:meth:`LiveDecoder.decode_if_due`), so the decoding needs no wake-up of its
own. PX4 sends a clump of datagrams every 4-5 ms, so at the 10 ms delay nearly every clump
starts a pending decode within its window: on a real PX4 with MQTT on this took the loop's
wake-ups from 413 to 256-310 a second (``strace -c``), with 7 % more, smaller batches."""

DECODE_SLICE_S = 0.0005
"""Longest piece of decoding and publishing work before the loop serves the link again."""


DECODE_SLICE_BYTES = 1024
"""Bytes handed to the parser in a log's first call; the work of one slice is checked between
calls, and the size then follows :func:`next_slice_bytes`."""


DECODE_SLICE_BYTES_RANGE = (256, 16384)
"""Least and most bytes per parser call."""


ACKS_FIRST_S = 0.02
"""After an ack goes out, how long decoding and publishing wait for the link to go quiet.

PX4 sends a log's header, and a topic subscribed late, stop-and-wait: each LOGGING_DATA_ACKED
comes one round trip after the ack of the one before (a millisecond or less), so work done in
between delays the next ack. A real log's 86 subscriptions took 5.8 ms in one parser call, and the
parameters' first MQTT messages 1-3 ms per piece: the ack round trip's worst at the USB ceiling
with MQTT on. Acked packets 20 ms apart are no longer stop-and-wait."""


ACKS_FIRST_MAX_S = 0.5
"""The longest a run of acked packets holds decoding and publishing back (a header takes about
0.3 s): a stream of nothing but acked packets is still decoded."""


FRAMING_BATCH_BYTES = 16384
"""Counting topics without a live outlet (the demo), the backlog is framed once it holds this
much."""


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


_ROW_SELECTION_WIDTH = {"none": 0, "newest": 1, "all": 2}
"""How many rows of a batch each :class:`~ulogstream.ulog.parser.RowSelection` decodes, by value."""


def _widest_rows(
    selectors: Sequence[Callable[[Subscription], RowSelection]], subscription: Subscription
) -> RowSelection:
    """The rows every one of ``selectors`` needs: one decoding serves MQTT and Foxglove."""
    choices = [select(subscription) for select in selectors]
    widest: RowSelection = max(choices, key=lambda choice: _ROW_SELECTION_WIDTH[choice.value])
    return widest


class Publisher:
    """Parser events through the pure publish policy into the bounded MQTT outbox."""

    def __init__(self, policy: PublishPolicy, sink: MqttSink) -> None:
        self.policy = policy
        self.sink = sink

    def offer(self, messages: list[MqttMessage]) -> None:
        """Queue retained or status messages."""
        self.sink.offer_all(messages)


class LiveDecoder:
    """Decodes what a vehicle's log writes, for the live outlets (MQTT, the Foxglove view).

    Decoding never runs per datagram: with a live outlet the written bytes wait
    :data:`DECODE_DELAY_S`, then are framed and decoded in slices of about
    :data:`DECODE_SLICE_S`, so acks that arrive meanwhile go first and rows go in few, large
    batches. Without one nothing is framed (the file needs only the stream's bytes), unless
    ``count_topics`` asks for the rows of each topic instance: then the backlog is framed once
    :data:`FRAMING_BATCH_BYTES` wait. One decoding serves both outlets: MQTT's policy chooses and
    encodes the samples, and the Foxglove view takes the same events after it.

    Args:
        status: Where the topic and row counters go.
        publisher: The MQTT side, or None.
        foxglove: The Foxglove live view, or None.
        count_topics: Count each topic instance's rows in ``status.topics`` (the demo's view).
    """

    def __init__(
        self,
        *,
        status: RecorderStatus,
        publisher: Publisher | None = None,
        foxglove: FoxgloveSink | None = None,
        count_topics: bool = False,
    ) -> None:
        self.status = status
        self.publisher = publisher
        self.foxglove = foxglove
        self.count_topics = count_topics
        self._parser: ULogParser | None = None
        self._decode_backlog: list[bytes] = []
        self._backlog_bytes = 0
        self._slice_bytes = DECODE_SLICE_BYTES
        self._rows_decoded = 0
        """Rows decoded by the parsers of finished logs."""
        self._pending_events: deque[ULogEvent] = deque()
        """Parser events not yet offered to the publisher (a slice ran out of time)."""
        self._decode_scheduled = False
        self._decode_timer: asyncio.TimerHandle | None = None
        """The loop's timer of a delayed decode (:data:`DECODE_DELAY_S`), while it waits."""
        self._decode_now = 0.0
        """Receive time of the newest backlog chunk: the publish policy's clock for it."""
        self._acked_at = -math.inf
        """When the last ack went out (``time.monotonic``)."""
        self._acks_since = -math.inf
        """When the run of acks that ``_acked_at`` ends began."""

    @property
    def live(self) -> bool:
        """Whether an outlet takes what is decoded."""
        return self.publisher is not None or self.foxglove is not None

    def write(self, data: bytes, now: float) -> None:
        """Take bytes just written to the log (whole messages) for decoding."""
        if self._parser is None:
            return
        self._decode_backlog.append(data)
        self._backlog_bytes += len(data)
        self._decode_now = now
        if not self._decode_scheduled:
            if self.live:
                self._schedule(DECODE_DELAY_S)
            elif self._backlog_bytes >= FRAMING_BATCH_BYTES:
                self._schedule()

    def acked(self, now: float) -> None:
        """An ack went out: the vehicle may be sending stop-and-wait (see :data:`ACKS_FIRST_S`).

        What acked packets carry (definitions, a new subscription) costs the most to decode, so
        the parser's slices start small again: grown on cheap rows to 16 KiB, the first slice of
        a header's definitions held the loop for 15-18 ms.
        """
        if now - self._acked_at >= ACKS_FIRST_S:
            self._acks_since = now
        self._acked_at = now
        self._slice_bytes = DECODE_SLICE_BYTES

    def _acks_first_until(self) -> float:
        """Until when live work waits for the next acked packet of a stop-and-wait run."""
        return min(self._acked_at + ACKS_FIRST_S, self._acks_since + ACKS_FIRST_MAX_S)

    def _acks_first(self, now: float) -> bool:
        """Whether live work waits now (see :meth:`_acks_first_until`)."""
        return now < self._acks_first_until()

    def log_started(self, timestamp_us: int, now: float) -> None:
        """A new log (or a file going on with one): a new parser, and the outlets told."""
        self.close_parser(now)
        self.status.topics.clear()
        if not self.live and not self.count_topics:
            return  # nobody reads what a parser would find
        self._parser = self._new_parser()
        # Now, before any of the log is decoded: a policy reset later would forget the topics
        # already subscribed. One wall-clock anchor for both outlets: their samples carry the
        # same ``t``.
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

    def next_deadline(self) -> float | None:
        """When :meth:`flush_held` has held samples or status updates to send.

        Not before a stop-and-wait run lets it (:meth:`_acks_first_until`).
        """
        deadlines = [o.policy.next_deadline() for o in (self.publisher, self.foxglove) if o]
        due = [d for d in deadlines if d is not None]
        if not due:
            return None
        return max(min(due), self._acks_first_until())

    def refresh(self) -> None:
        """Frame what the counters have not seen (within one slice) and update them."""
        if self._parser is not None:
            if not self._decode_scheduled and not self.decode_some(
                time.perf_counter() + DECODE_SLICE_S
            ):
                self._schedule()
            self.count()

    def flush_held(self, now: float, *, due_only: bool = False) -> None:
        """Held samples of paused topics and pending status updates to the live outlets.

        MQTT's go to Foxglove too: those of the instances it serves from MQTT's samples. Not
        while the link goes stop-and-wait (:data:`ACKS_FIRST_S`).
        """
        if self._acks_first(now):
            return
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

    def _schedule(self, delay: float = 0.0) -> None:
        self._decode_scheduled = True
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # driven without an event loop (benchmarks): decode at once
            self._decode_scheduled = False
            self.drain()
            return
        if delay > 0:
            self._decode_timer = loop.call_later(delay, self.decode_backlog)
        else:
            loop.call_soon(self.decode_backlog)

    def decode_backlog(self) -> None:
        """Feed the bytes written so far to the parser and their events onward, in slices.

        A call stops after about :data:`DECODE_SLICE_S` of work and asks the loop to call it
        again, so datagrams (and their acks) that arrive meanwhile go first.
        """
        self._decode_scheduled = False
        self._decode_timer = None
        try:
            if self._acks_first(time.monotonic()):
                self._schedule(ACKS_FIRST_S)  # the next acked packet first
            elif not self.decode_some(time.perf_counter() + DECODE_SLICE_S):
                self._schedule()
        except Exception:  # a fault of the live path: see below
            # This runs in the link's reader callback too (decode_if_due), where an exception
            # would end the link's loop: a fault of the live outlets must not stop recording.
            # Live decoding ends for this log, as after a parser error; the next log has its own.
            logger.exception("live decoding stopped for this log (recording goes on)")
            self._end_parser()
            self._decode_backlog.clear()
            self._backlog_bytes = 0
            self._pending_events.clear()

    def decode_if_due(self, now: float) -> None:
        """Decode now if a delayed decode is due within :data:`DECODE_EARLY_S` (its timer off).

        Called when the loop woke for received datagrams, after they were handled: the decode
        that would have woken it again soon runs in this wake-up instead.
        """
        timer = self._decode_timer
        if timer is not None and now >= timer.when() - DECODE_EARLY_S:  # the loop's clock
            timer.cancel()
            self.decode_backlog()

    def drain(self) -> None:
        """Decode everything written so far at once (the end of a log, status counters)."""
        self.decode_some(math.inf)

    def decode_some(self, deadline: float) -> bool:
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
                self._end_parser()
                self.status.parser_errors += 1
                logger.error("live decoding stopped for this log: %s (recording goes on)", err)  # noqa: TRY400 (one line, no traceback: the input is bad, not the code)
                continue
            if (self.publisher is not None or self.foxglove is not None) and events:
                self._pending_events.extend(events)
            finished = clock()
            self._slice_bytes = next_slice_bytes(self._slice_bytes, finished - started)
            if finished >= deadline:
                return not self._pending_events and not self._decode_backlog

    def _end_parser(self) -> None:
        """Live decoding ends for this log; what the parser framed stays counted."""
        parser = self._parser
        if parser is not None:
            self.count()
            self._rows_decoded += parser.decoded_rows
            self._parser = None

    def _take_slice(self) -> bytes:
        """The oldest written bytes, at most ``_slice_bytes``.

        A write can be far larger than a slice: a damaged log's garbage "messages" are up to
        64 KiB each, and the parser's search for the next message through 58 KiB of them held
        the loop for 3 ms (the ack round trip's worst at the USB ceiling, 10-17 ms). The parser
        takes bytes in any pieces, so a large write is cut.
        """
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
        if size > wanted:  # the last write taken goes on in the next slice
            backlog.insert(0, chunk[wanted:])
            chunk = chunk[:wanted]
            size = wanted
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
        self.flush_held(now, due_only=True)
        return not pending

    def _new_parser(self) -> ULogParser:
        """A parser for a new log: it decodes only rows MQTT or Foxglove can send (none without)."""
        from ulogstream.ulog.parser import ULogParser, no_rows  # noqa: PLC0415 (a file-only record frames nothing: the parser is not loaded)

        selectors = [o.policy.rows_for for o in (self.publisher, self.foxglove) if o is not None]
        if not selectors:
            return ULogParser(rows=no_rows)
        if len(selectors) == 1:
            return ULogParser(rows=selectors[0])
        return ULogParser(rows=partial(_widest_rows, selectors))

    def close_parser(self, now: float) -> None:
        """Decode what is left of the current log, then end its parser."""
        self.drain()
        parser = self._parser
        if parser is None:
            return
        events = parser.close()
        self.count()
        self._rows_decoded += parser.decoded_rows
        self._parser = None
        if self.publisher is not None or self.foxglove is not None:
            self._pending_events.extend(events)
            self._decode_now = now
            self._offer_events(math.inf)

    def count(self) -> None:
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
