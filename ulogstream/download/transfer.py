"""One log's bytes from the vehicle: ranges asked for, lost LOG_DATA asked again by range.

The vehicle serves one LOG_REQUEST_DATA at a time: it sends the range in order, 90 bytes per
LOG_DATA, and a new request replaces the one in progress (PX4's ``mavlink_log_handler``,
ArduPilot's ``AP_Logger_MAVLinkLogTransfer``). Nothing is acknowledged, so a lost LOG_DATA shows
only as a hole. :class:`LogTransfer` asks for the first missing range to its end; when that
range's last byte has come (or the data stops), it asks for the next missing range. Holes close
together are asked for in one range when re-receiving the bytes between them costs less than
another round trip (both measured as the transfer runs): on a fast link one sweep and a few
repairs, on a radio one request per hole. Bytes already held (a resumed download) are never
asked for.
"""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING, Final

import msgspec

from ulogstream.download.packets import LOG_DATA_CHUNK, LogData, LogRequestData

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

RESPONSE_TIMEOUT_S: Final = 1.5
"""A request that brings no data within this is asked again (a 5760 B/s radio answers in
well under a second)."""

IDLE_FLOOR_S: Final = 0.1
"""Silence mid-range after which the range counts as over (at least; longer on slow links)."""

IDLE_INTERVALS: Final = 8
"""Silence mid-range of this many mean LOG_DATA intervals ends the range."""

REQUEST_TRIES: Final = 5
"""Requests in a row that bring nothing before the transfer fails."""

SMOOTHING: Final = 0.25
"""Weight of the newest sample in the rate, interval and round-trip averages."""

RATE_WINDOW_S: Final = 0.05
"""The rate and the LOG_DATA interval are sampled over windows this long."""


class WriteLogData(msgspec.Struct, frozen=True):
    """Write ``data`` at byte ``ofs`` of the log's file (new bytes only)."""

    ofs: int
    data: bytes


class TransferDone(msgspec.Struct, frozen=True):
    """Every byte of the log has come."""

    size: int


class TransferFailed(msgspec.Struct, frozen=True):
    """The vehicle stopped answering: ``missing`` bytes are not held, the first at ``ofs``.

    ``reason`` says why when the vehicle refused (MAVLink FTP); empty: it went silent.
    """

    ofs: int
    missing: int
    tries: int
    reason: str = ""


TransferOutput = LogRequestData | WriteLogData | TransferDone | TransferFailed


class ByteRanges:
    """Disjoint, merged ``[start, end)`` ranges of held bytes, in order."""

    def __init__(self, ranges: Iterable[tuple[int, int]] = ()) -> None:
        self._starts: list[int] = []
        self._ends: list[int] = []
        self.total = 0
        """Bytes held."""
        for start, end in ranges:
            self.add(start, end)

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return zip(self._starts, self._ends, strict=True)

    def extend(self, start: int, end: int) -> bool:
        """Hold ``[start, end)`` if it continues the last range (then all of it is new)."""
        ends = self._ends
        if ends and ends[-1] == start:
            ends[-1] = end
            self.total += end - start
            return True
        return False

    def add(self, start: int, end: int) -> list[tuple[int, int]]:
        """Hold ``[start, end)``; returns the parts of it that were new, in order."""
        if end <= start:
            return []
        starts, ends = self._starts, self._ends
        if starts and start == ends[-1]:  # the common case: data in order, after the last range
            ends[-1] = end
            self.total += end - start
            return [(start, end)]
        # Ranges that touch or overlap [start, end): from the first ending at or after start
        # to the last starting at or before end.
        first = bisect.bisect_left(ends, start)
        last = bisect.bisect_right(starts, end)
        new: list[tuple[int, int]] = []
        cursor = start
        for index in range(first, last):
            if starts[index] > cursor:
                new.append((cursor, min(starts[index], end)))
            cursor = max(cursor, ends[index])
        if cursor < end:
            new.append((cursor, end))
        if first < last:
            start = min(start, starts[first])
            end = max(end, ends[last - 1])
        starts[first:last] = [start]
        ends[first:last] = [end]
        self.total += sum(b - a for a, b in new)
        return new

    def missing(self, size: int, start: int = 0) -> Iterator[tuple[int, int]]:
        """The ``[start, end)`` ranges of ``[start, size)`` not held, in order."""
        cursor = start
        index = bisect.bisect_right(self._ends, start)
        for range_start, range_end in zip(self._starts[index:], self._ends[index:], strict=True):
            if range_start >= size:
                break
            if range_start > cursor:
                yield cursor, range_start
            cursor = max(cursor, range_end)
        if cursor < size:
            yield cursor, size


class LogTransfer:
    """Downloads log ``log_id`` of ``size`` bytes; holds which bytes came, asks for the rest.

    Args:
        log_id: The log's id in the vehicle's listing.
        size: Its size from LOG_ENTRY.
        held: Ranges already on disk (a resumed download): never asked for.
        response_timeout_s: Wait for a request's first data before asking again.
        tries: Requests in a row without data before :class:`TransferFailed`.
    """

    def __init__(
        self,
        *,
        log_id: int,
        size: int,
        held: Iterable[tuple[int, int]] = (),
        response_timeout_s: float = RESPONSE_TIMEOUT_S,
        tries: int = REQUEST_TRIES,
    ) -> None:
        self.log_id = log_id
        self.size = size
        self.held = ByteRanges((a, min(b, size)) for a, b in held if a < size)
        self._response_timeout_s = response_timeout_s
        self._tries_allowed = tries
        self.requests = 0
        """LOG_REQUEST_DATA messages sent."""
        self.received = 0
        """Bytes of LOG_DATA received for this log (resent and duplicate bytes included)."""
        self.rate = 0.0
        """Received bytes per second, averaged (0 until measured)."""
        self.round_trip_s = 0.0
        """Request to first data, averaged (0 until measured)."""
        self._interval_s = 0.0
        self._idle_s = IDLE_FLOOR_S
        self._window_at = 0.0
        self._window_bytes = 0
        self._window_count = 0
        self._range_end = 0
        self._sent_at = 0.0
        self._last_data_at: float | None = None
        self._tries = 0
        self._deadline: float | None = None
        self._finished = False

    @property
    def finished(self) -> bool:
        """Whether :class:`TransferDone` or :class:`TransferFailed` was returned."""
        return self._finished

    def start(self, now: float) -> list[TransferOutput]:
        """Ask for the first missing range (or finish at once: everything is held)."""
        return self._next_request(now)

    def receive(self, message: LogData, now: float) -> list[TransferOutput]:
        """Take one LOG_DATA: its new bytes to write, then the next request if its range is over."""
        if self._finished or message.id != self.log_id:
            return []
        data = message.data
        ofs = message.ofs
        end = min(ofs + len(data), self.size)
        out: list[TransferOutput] = []
        if end > ofs:
            self._measure(end - ofs, now)
            for start, stop in self.held.add(ofs, end):
                out.append(WriteLogData(start, data[start - ofs : stop - ofs]))
        self._tries = 0
        if end >= self._range_end or len(data) < LOG_DATA_CHUNK:
            out += self._next_request(now)  # this range is over: its last byte has come
        else:
            self._deadline = now + self._idle_s
        return out

    def next_deadline(self) -> float | None:
        """When :meth:`handle_timer` must run next (None: finished)."""
        return self._deadline

    def handle_timer(self, now: float) -> list[TransferOutput]:
        """A range went silent: ask for what is missing, or give up after silent tries."""
        if self._deadline is None or now < self._deadline:
            return []
        if self._last_data_at is None or self._last_data_at < self._sent_at:
            self._tries += 1  # this request brought nothing
            if self._tries >= self._tries_allowed:
                self._finished = True
                self._deadline = None
                ofs, _ = next(self.held.missing(self.size))
                return [TransferFailed(ofs, self.size - self.held.total, self._tries)]
        return self._next_request(now)

    def receive_next(self, ofs: int, data: bytes, now: float) -> bool:
        """The common case of :meth:`receive`, taken whole or not at all.

        A full LOG_DATA of this log that continues the last held range, mid-range (no request
        is due).

        Returns:
            True when taken: ``data`` is new and belongs at ``ofs`` (the caller writes it, as
            :meth:`receive` would have said with :class:`WriteLogData`). False: nothing changed;
            hand the message to :meth:`receive`.
        """
        end = ofs + LOG_DATA_CHUNK
        last = self._last_data_at
        if (
            len(data) != LOG_DATA_CHUNK
            or end >= self._range_end
            or last is None
            or last < self._sent_at  # a request's first data: a round trip to measure
            or self._finished
            or not self.held.extend(ofs, end)
        ):
            return False
        self.received += LOG_DATA_CHUNK
        self._window_bytes += LOG_DATA_CHUNK
        self._window_count += 1
        if now - self._window_at >= RATE_WINDOW_S:
            self._sample(now)
        self._last_data_at = now
        self._tries = 0
        self._deadline = now + self._idle_s
        return True

    def _measure(self, count: int, now: float) -> None:
        self.received += count
        last = self._last_data_at
        if last is None or last < self._sent_at:
            sample = now - self._sent_at  # the first data of this request: a round trip
            self.round_trip_s = (
                sample if not self.round_trip_s else _smooth(self.round_trip_s, sample)
            )
            self._window_at = now
            self._window_bytes = self._window_count = 0
        else:
            self._window_bytes += count
            self._window_count += 1
            if now - self._window_at >= RATE_WINDOW_S:
                self._sample(now)
        self._last_data_at = now

    def _sample(self, now: float) -> None:
        """Fold the window's rate and mean interval into the averages; start a new window."""
        span = now - self._window_at
        rate = self._window_bytes / span
        interval = span / self._window_count
        self.rate = _smooth(self.rate, rate) if self.rate else rate
        self._interval_s = _smooth(self._interval_s, interval) if self._interval_s else interval
        self._idle_s = max(IDLE_FLOOR_S, IDLE_INTERVALS * self._interval_s)
        self._window_at = now
        self._window_bytes = self._window_count = 0

    def _merge_gap(self) -> int:
        """Held bytes worth re-receiving instead of another request: a round trip's worth."""
        return max(4 * LOG_DATA_CHUNK, int(self.rate * self.round_trip_s))

    def _next_request(self, now: float) -> list[TransferOutput]:
        if self._window_count and now > self._window_at:
            self._sample(now)  # a range shorter than a window still measures the rate
        gaps = self.held.missing(self.size)
        first = next(gaps, None)
        if first is None:
            self._finished = True
            self._deadline = None
            return [TransferDone(self.size)]
        start, end = first
        merge_gap = self._merge_gap()
        for gap_start, gap_end in gaps:
            if gap_start - end > merge_gap:
                break
            end = gap_end
        self._range_end = end
        self._sent_at = now
        self._deadline = now + self._response_timeout_s
        self.requests += 1
        return [LogRequestData(self.log_id, start, end - start)]


def _smooth(average: float, sample: float) -> float:
    return average + SMOOTHING * (sample - average)
