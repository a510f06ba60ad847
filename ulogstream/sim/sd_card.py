"""The simulated vehicle's SD card: its logs, served to LOG_REQUEST_LIST / _DATA / _END, sans-IO.

As PX4's ``mavlink_log_handler``: LOG_REQUEST_LIST answers one LOG_ENTRY per log (ids from 0,
the file's time and size); LOG_REQUEST_DATA streams the range asked for in 90-byte LOG_DATA
messages, in order, and replaces the range in progress; a message past the log's end carries 0
bytes; LOG_REQUEST_END stops it. The link loses LOG_DATA as the faults say. Sending is paced at
``bytes_per_s`` (PX4 sends as fast as its MAVLink instance's buffer drains: about 8 MB/s on
SITL's loopback, the link's rate on a radio).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

from ulogstream.download.packets import (
    LOG_DATA_CHUNK,
    LogData,
    LogEntry,
    LogRequestData,
    LogRequestEnd,
    LogRequestList,
)
from ulogstream.errors import ULogFormatError
from ulogstream.sim.faults import NO_FAULTS, Draw, FaultConfig, FaultRng
from ulogstream.ulog.spec import DEFINITION_TYPES, HEADER_SIZE, MAGIC, MessageType, iter_messages

TICK_S: Final = 0.005
"""The card sends what its rate allows every tick (PX4's MAVLink loop runs at a few ms)."""

DEFAULT_BYTES_PER_S: Final = 2_000_000
"""Wire bytes per second when the link sets no rate."""

LOG_DATA_FRAME: Final = 10 + 97 + 2
"""Wire bytes of one full LOG_DATA frame (MAVLink 2 header, payload, checksum)."""


@dataclass(frozen=True, slots=True)
class SdLog:
    """One log file on the card: its bytes and its time (UTC seconds)."""

    data: bytes
    time_utc: int


SdCardOutput = LogEntry | LogData

LOGGER_STALL_S: Final = 1.5
"""What PX4's logger loses from its SD log at a stream's start: it waits while the stream's
header and definitions are acked (measured on PX4 SITL at full rate; 32-34 s over a 5760 B/s
radio)."""

_DEFINITIONS: Final = frozenset(t.value for t in DEFINITION_TYPES)
_D: Final = MessageType.DATA.value
_A: Final = MessageType.ADD_LOGGED_MSG.value
_unpack_stamp: Final = struct.Struct("<Q").unpack_from
_STAMPED: Final = 2 + 8
"""A data message's msg_id and the timestamp its topic starts with."""


def split_at_stream_start(
    log: bytes, lead_s: float, stall_s: float = LOGGER_STALL_S
) -> tuple[bytes, bytes]:
    """The log a stream started ``lead_s`` into the flight gets, and the SD log of that flight.

    As PX4's logger with both backends: the SD log runs from the flight's start; the stream
    starts ``lead_s`` seconds later, and while its header and definitions are acked the logger
    waits, so neither log has the ``stall_s`` seconds after the stream's start. Both keep every
    subscription ('A'); the stream has its own copy of the header and definitions. After the
    stall both hold the same bytes.

    Returns:
        ``(streamed, on_card)``.

    Raises:
        ULogFormatError: ``log`` is not a ULog file.
    """
    if not log.startswith(MAGIC):
        msg = "not a ULog file: its magic bytes are missing"
        raise ULogFormatError(msg, offset=0)
    data_start: int | None = None
    first_us: int | None = None
    request: int | None = None
    resume = len(log)
    for offset, size, kind in iter_messages(log, HEADER_SIZE):
        if data_start is None:
            if kind in _DEFINITIONS:
                continue
            data_start = offset
        if kind != _D or size < _STAMPED:
            continue
        stamp: int = _unpack_stamp(log, offset + 5)[0]
        if first_us is None:
            first_us = stamp
        if request is None and stamp >= first_us + lead_s * 1e6:
            request = offset
        if request is not None and stamp >= first_us + (lead_s + stall_s) * 1e6:
            resume = offset
            break
    if data_start is None:
        return log, log
    if request is None:  # the stream starts after the flight: only its definitions
        request = len(log)
    lead = log[data_start:request]
    stall = log[request:resume]
    lead_subscriptions = _subscriptions(lead)
    stall_subscriptions = _subscriptions(stall)
    head = log[:data_start]
    rest = log[resume:]
    streamed = head + lead_subscriptions + stall_subscriptions + rest
    on_card = head + lead + stall_subscriptions + rest
    return streamed, on_card


def _subscriptions(data: bytes) -> bytes:
    """The 'A' messages of ``data`` (whole messages), in order."""
    return b"".join(
        data[offset : offset + 3 + size]
        for offset, size, kind in iter_messages(data, 0)
        if kind == _A
    )


class SdCard:
    """The logs on the simulated vehicle's card, and the one download in progress.

    Args:
        system_id: The vehicle's system id (put in the outputs for the shell).
        bytes_per_s: Wire bytes (whole LOG_DATA frames) sent per second at most: a radio's rate.
        faults: Its ``loss`` (and ``seed``) also loses LOG_DATA messages on the link.
    """

    def __init__(
        self,
        *,
        system_id: int = 1,
        bytes_per_s: float = DEFAULT_BYTES_PER_S,
        faults: FaultConfig = NO_FAULTS,
    ) -> None:
        self.system_id = system_id
        self._loss = faults.loss
        self._rng = FaultRng(faults.seed)
        self._sent = 0
        self.lost = 0
        """LOG_DATA messages the link lost (``faults.loss``)."""
        self.logs: list[SdLog] = []
        self._bytes_per_s = bytes_per_s
        self._entries: list[int] = []  # log indexes still to list
        self._sending: tuple[int, int, int] | None = None  # (log id, next ofs, end)
        self._next_tick: float | None = None
        self._credit = 0.0
        self.requests = 0
        """LOG_REQUEST_* messages received."""

    def add(self, log: SdLog) -> int:
        """Put ``log`` on the card; returns its id."""
        self.logs.append(log)
        return len(self.logs) - 1

    def receive(
        self, request: LogRequestList | LogRequestData | LogRequestEnd, now: float
    ) -> list[SdCardOutput]:
        """Take one request; the answers leave from :meth:`handle_timer`."""
        self.requests += 1
        match request:
            case LogRequestList(start, end):
                last = min(end, len(self.logs) - 1)
                self._entries = list(range(start, last + 1)) if self.logs else [-1]
                self._sending = None
            case LogRequestData(log_id, ofs, count) if 0 <= log_id < len(self.logs):
                size = len(self.logs[log_id].data)
                self._sending = (log_id, ofs, min(size, ofs + count))
                self._entries = []
            case LogRequestData():
                return []  # no such log: PX4 ignores it
            case _:
                self._entries = []
                self._sending = None
        if self._next_tick is None:
            self._next_tick = now
            self._credit = LOG_DATA_FRAME  # the first message leaves at once
        return []

    def next_deadline(self) -> float | None:
        """When :meth:`handle_timer` must run next (None: nothing to send)."""
        return self._next_tick if (self._entries or self._sending) else None

    def handle_timer(self, now: float) -> list[SdCardOutput]:
        """Send what the rate allows since the last tick."""
        if self._next_tick is None or now < self._next_tick:
            return []
        out: list[SdCardOutput] = []
        count = len(self.logs)
        for index in self._entries:
            if index < 0:
                out.append(LogEntry(0, 0, 0, 0, 0, system_id=self.system_id))
            else:
                log = self.logs[index]
                out.append(
                    LogEntry(
                        index,
                        count,
                        count - 1,
                        log.time_utc,
                        len(log.data),
                        system_id=self.system_id,
                    )
                )
        self._entries = []
        self._credit = min(self._credit + self._bytes_per_s * TICK_S, self._bytes_per_s)
        if self._sending is not None:
            log_id, ofs, end = self._sending
            data = self.logs[log_id].data
            while self._credit >= LOG_DATA_FRAME:
                chunk = data[ofs : min(ofs + LOG_DATA_CHUNK, end)]
                self._sent += 1
                if self._rng.chance(self._loss, Draw.LOG_DATA_LOSS, self._sent):
                    self.lost += 1
                else:
                    out.append(LogData(log_id, ofs, chunk, system_id=self.system_id))
                self._credit -= LOG_DATA_FRAME
                ofs += len(chunk)
                if len(chunk) < LOG_DATA_CHUNK or ofs >= end:
                    self._sending = None
                    break
            else:
                self._sending = (log_id, ofs, end)
        self._next_tick = now + TICK_S if (self._entries or self._sending) else None
        return out
