"""Replay a recorded .ulg to MQTT as if it were live (for dashboards, demos and tests).

The file is fed to the parser in packet-sized chunks, so data arrives in the same small batches as
from a vehicle, and the publish policy sees a clock that follows the log: paced by the log's own
timestamps times ``speed``, or, as fast as possible (``speed=None``), the log's time itself, so
rate caps thin the data the same way at any speed.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import time
from typing import TYPE_CHECKING, Protocol

import msgspec

from ulogstream.errors import ConfigError
from ulogstream.ulog.events import DataRows, FileHeader, LoggedString, ULogEvent, UndecodedRows
from ulogstream.ulog.parser import ULogParser

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from ulogstream.live.outbox import MqttMessage
    from ulogstream.live.policy import PublishPolicy
    from ulogstream.recorder.decoding import Publisher

CHUNK_SIZE = 249
"""Bytes fed to the parser at a time: the payload of one MAVLink LOGGING_DATA packet."""

READ_SIZE = 1 << 16
"""Bytes read from the file at a time."""

CONNECT_LIMIT_S = 15.0
"""Seconds a replay waits for a broker that does not answer before it gives up."""

MAX_GAP_S = 10.0
"""A jump of the log's clock longer than this (a reboot, a corrupt timestamp) is not waited for."""

HIGH_WATER = 2000
"""Unpaced replays wait for the sink to drain when this many messages are pending."""


class ReplaySink(Protocol):
    """Where replayed messages go (the MQTT sink, or a test's collector)."""

    @property
    def pending(self) -> int:
        """Messages offered but not yet delivered."""
        ...

    def offer(self, message: MqttMessage) -> None:
        """Queue one message without waiting."""

    async def wait_drained(self) -> None:
        """Wait until every offered message was delivered."""


class ReplayStats(msgspec.Struct, frozen=True):
    """What a replay did.

    Attributes:
        events: Parser events handled.
        messages: Messages offered to the sink.
        log_duration_s: Vehicle time covered by the log.
        elapsed_s: Receiver time the replay took.
        published: Messages the broker took (:func:`replay_to_mqtt`).
        unsent: Messages still waiting when the replay gave up on the broker.
        broker_error: Why the last connection to the broker failed, if it did.
        gave_up_after_s: Set when no broker was reached in that many seconds (nothing sent).
    """

    events: int
    messages: int
    log_duration_s: float
    elapsed_s: float
    published: int = 0
    unsent: int = 0
    broker_error: str | None = None
    gave_up_after_s: float | None = None


def _event_time_us(event: ULogEvent) -> int | None:
    match event:
        case DataRows(timestamps_us=stamps) if len(stamps):
            last: int = stamps[-1].item()
            return last
        case UndecodedRows(timestamp_us=stamp) | LoggedString(timestamp_us=stamp):
            return stamp
        case FileHeader(timestamp_us=stamp):
            return stamp
        case _:
            return None


async def replay(
    path: Path,
    *,
    policy: PublishPolicy,
    sink: ReplaySink,
    speed: float | None = 1.0,
    chunk_size: int = CHUNK_SIZE,
    clock: Callable[[], float] = time.monotonic,
    wall_clock: Callable[[], float] = time.time,
    progress: Callable[[int, int], None] | None = None,
) -> ReplayStats:
    """Publish the log at ``path`` through ``policy`` into ``sink`` as if it arrived live.

    Args:
        path: A .ulg file.
        policy: Turns events into messages; told that a log started now.
        sink: Receives the messages.
        speed: Multiple of the log's own pace (2.0 = twice as fast); None = as fast as the
            sink takes them (waiting for it to drain, so nothing is dropped).
        chunk_size: Bytes handed to the parser at a time.
        clock: Monotonic clock in seconds.
        wall_clock: Epoch clock in seconds, the log's wall-time anchor.
        progress: Called as ``progress(bytes_done, bytes_total)`` after each block of the file.

    Returns:
        Counts and durations.

    Raises:
        ConfigError: ``speed`` is not a positive finite number or None.
        OSError: The file cannot be read.
        ULogFormatError: The file is not a readable ULog.
    """
    if speed is not None and not (speed > 0 and math.isfinite(speed)):
        msg = f"replay speed must be a positive number or None, not {speed!r}"
        raise ConfigError(msg)
    started = clock()
    offered = 0

    def offer_all(messages: list[MqttMessage]) -> None:
        nonlocal offered
        for message in messages:
            sink.offer(message)
        offered += len(messages)

    offer_all(policy.log_started(wall_time=wall_clock(), now=started, log_file=path.name))
    parser = ULogParser()
    first_us: int | None = None
    last_us = 0
    events_seen = 0
    now = started
    previous_s = skipped_s = 0.0
    done = 0
    with path.open("rb") as file:
        total = os.fstat(file.fileno()).st_size
        while block := file.read(READ_SIZE):
            done += len(block)
            for start in range(0, len(block), chunk_size):
                events = parser.receive_bytes(block[start : start + chunk_size])
                if not events:
                    continue
                events_seen += len(events)
                stamps = [t for t in map(_event_time_us, events) if t is not None]
                if stamps:
                    last_us = max(last_us, *stamps)
                    first_us = min(stamps) if first_us is None else first_us
                log_s = 0.0 if first_us is None else (last_us - first_us) / 1e6
                if log_s - previous_s > MAX_GAP_S:
                    skipped_s += log_s - previous_s
                previous_s = log_s
                log_s -= skipped_s
                if speed is None:
                    now = started + log_s
                    if sink.pending >= HIGH_WATER:
                        await sink.wait_drained()
                else:
                    delay = started + log_s / speed - clock()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    now = clock()
                for event in events:
                    offer_all(policy.select(event, now))
                offer_all(policy.flush_due(now))
            if progress is not None:
                progress(done, total)
            await asyncio.sleep(0)  # let the sink drain between file reads
    for event in parser.close():
        offer_all(policy.select(event, now))
    offer_all(policy.flush_due(math.inf))
    offer_all(policy.update_status(now, state="replayed"))
    return ReplayStats(
        events=events_seen,
        messages=offered,
        log_duration_s=0.0 if first_us is None else (last_us - first_us) / 1e6,
        elapsed_s=clock() - started,
    )


async def replay_to_mqtt(
    path: Path,
    *,
    publisher: Publisher,
    speed: float | None = 1.0,
    drain_timeout: float = 10.0,
    connect_limit: float | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> ReplayStats:
    """Replay ``path`` to the broker in ``mqtt`` (what ``ulogstream replay FILE --mqtt URL`` runs).

    The status ends as ``{"online": false, "state": "stopped"}`` after a clean finish; the Last
    Will says the same if the process dies.

    Args:
        path: A .ulg file.
        publisher: The policy and the MQTT sink (see
            :func:`~ulogstream.recorder.wiring.replay_publisher`).
        speed: Multiple of the log's pace, or None for as fast as the broker takes it.
        drain_timeout: Seconds to wait at the end for unsent messages.
        connect_limit: Seconds to wait for a first connection (None: :data:`CONNECT_LIMIT_S`):
            a replay to a broker that is not there gives up then (nothing published,
            ``broker_error`` says why).
        progress: Called as ``progress(bytes_done, bytes_total)`` as the file is read.

    Raises:
        ConfigError: A setting cannot be used.
        OSError: The file cannot be read.
        ULogFormatError: The file is not a readable ULog.
    """
    policy, sink = publisher.policy, publisher.sink
    limit = CONNECT_LIMIT_S if connect_limit is None else connect_limit
    runner = asyncio.create_task(sink.run())
    replaying = asyncio.create_task(
        replay(path, policy=policy, sink=sink, speed=speed, progress=progress)
    )
    try:
        await asyncio.wait({replaying}, timeout=limit)
        if not replaying.done() and not sink.ever_connected:
            replaying.cancel()  # the broker is not there: give up, say so
            with contextlib.suppress(asyncio.CancelledError):
                await replaying
            return ReplayStats(
                events=0,
                messages=0,
                log_duration_s=0.0,
                elapsed_s=limit,
                broker_error=sink.last_error or "no answer",
                gave_up_after_s=limit,
            )
        stats = await replaying
        sink.offer(policy.offline_status(time.monotonic()))
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(drain_timeout):
                await sink.wait_drained()
    finally:
        replaying.cancel()
        runner.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await runner
    return msgspec.structs.replace(
        stats, published=sink.published, unsent=sink.pending, broker_error=sink.last_error
    )
