"""Backfill: what a streamed log lost, found in the vehicle's own SD log and put back, sans-IO.

PX4 writes the same data to its SD log and to its stream: the streamed log's data section is a
byte-identical slice of the SD log of the same flight (``docs/log-download.md``). So each gap of
a recording (a run of dropout 'O' messages, which PX4 never streams itself: every one in a
recording is ulogstream's) lies between two runs of bytes that are also in the SD log, and the
SD bytes between them are exactly what the link lost. The same holds for the flight's start
(the data before the stream's first data message) and, when asked, for its end.

:func:`plan_backfill` reads a recording and names its gaps by their surrounding bytes (anchors)
and timestamps. :func:`backfill` is a generator: it yields :class:`Fetch` ranges of the SD log
and is sent their bytes, finds each anchor (a binary search on the timestamps of the data
messages it reads, then an exact byte match), and returns the :class:`Patch` list that turns the
recording into the completed log. It never trusts a position it has not matched byte for byte,
and takes SD bytes only as whole ULog messages. The shell fetches (over LOG_REQUEST_DATA),
caches and writes.
"""

from __future__ import annotations

import bisect
import struct
from collections import deque
from typing import TYPE_CHECKING, Final

import msgspec

from ulogstream.errors import UlogstreamError
from ulogstream.ulog.spec import (
    DEFINITION_TYPES,
    HEADER_SIZE,
    MAGIC,
    MESSAGE_HEADER_SIZE,
    MessageType,
    encode_dropouts,
    iter_messages,
)

if TYPE_CHECKING:
    from collections.abc import Generator, Sequence

ANCHOR_BYTES: Final = 64
"""Bytes of a recording matched against the SD log on each side of a gap, in whole messages
(fewer when a run between two gaps is shorter, down to :data:`MIN_ANCHOR_BYTES`)."""

MIN_ANCHOR_BYTES: Final = 13
"""The shortest anchor searched for: one message header, a msg_id and a timestamp."""

_RECENT: Final = 256
"""Message starts remembered while reading a run of data (for the anchor before a gap)."""
PROBE_BYTES: Final = 4096
"""Bytes read at each step of the binary search."""

CLOSE_US: Final = 300_000
"""A probe whose median timestamp is this close to the anchor's ends the binary search."""

WINDOWS: Final = (32 << 10, 128 << 10, 512 << 10, 2 << 20)
NEAR_WINDOWS: Final = (1 << 10, 4 << 10, 16 << 10, 64 << 10)
GAP_REACH_FACTOR: Final = 4.0
GAP_REACH_FLOOR: Final = 64 << 10
"""Bytes after a gap's start searched first for the data after it (a few lost packets)."""
"""Half-widths of the byte windows searched for an anchor, widened in turn."""

_D: Final = MessageType.DATA.value
_A: Final = MessageType.ADD_LOGGED_MSG.value
_O: Final = MessageType.DROPOUT.value
_DEFINITIONS: Final = frozenset(t.value for t in DEFINITION_TYPES)
_TYPES: Final = frozenset(t.value for t in MessageType)
_MAX_MESSAGE: Final = 0xFFFF + MESSAGE_HEADER_SIZE
_unpack_u16: Final = struct.Struct("<H").unpack_from
_unpack_u64: Final = struct.Struct("<Q").unpack_from


class Anchor(msgspec.Struct, frozen=True):
    """Bytes of the recording to find in the SD log, and when they were logged.

    Attributes:
        data: The bytes (they begin or end on a message boundary).
        timestamp_us: A data message's timestamp next to them (0: none known).
    """

    data: bytes
    timestamp_us: int


class Gap(msgspec.Struct, frozen=True):
    """A run of dropout messages in the recording, between two anchors.

    Attributes:
        offset: Where the dropout run starts in the recording.
        length: Its bytes.
        before: The bytes just before it (they end at ``offset``).
        after: The bytes just after it.
    """

    offset: int
    length: int
    before: Anchor
    after: Anchor


class BackfillPlan(msgspec.Struct, frozen=True):
    """What a recording lacks, named by its anchors (:func:`plan_backfill`).

    Attributes:
        size: The recording's size.
        first_data: Where its first data message is (the flight's start goes before it).
        first: The bytes at ``first_data``.
        gaps: Its dropout runs, in order.
        last: Its last bytes (the end of the flight goes after them).
        subscriptions: The msg_ids its 'A' messages define (an SD log's own 'A' for one of
            them is not copied).
        data_sizes: The payload size of each msg_id's 'D' messages (probes are checked with it).
        bytes_per_us: The recording's bytes per microsecond of log time (how far an SD log's
            bytes for a gap of a given duration may reach).
        start_length: Bytes of a dropout run right before ``first_data`` (the recording's data
            began with a gap): the flight's start replaces them.
        rows: Its data rows ('D' messages).
    """

    size: int
    first_data: int
    first: Anchor
    gaps: tuple[Gap, ...]
    last: Anchor
    subscriptions: frozenset[int]
    data_sizes: dict[int, int]
    bytes_per_us: float = 0.0
    start_length: int = 0
    rows: int = 0


class Fetch(msgspec.Struct, frozen=True):
    """Read bytes ``[start, end)`` of the SD log (the shell sends them back, clipped at its end)."""

    start: int
    end: int


class Patch(msgspec.Struct, frozen=True):
    """Replace ``length`` bytes at ``offset`` of the recording with ``data`` (0: insert)."""

    offset: int
    length: int
    data: bytes


class BackfillResult(msgspec.Struct):
    """What the backfill found.

    Attributes:
        patches: The changes, in order of offset.
        filled: Gaps (and the start and end, when filled) put back whole.
        unfilled: Gaps left as they were, and why.
        found: Whether the recording's data was found in this SD log at all.
        gaps_filled: Gaps put back.
        start_bytes: Bytes put back before the recording's first data (the flight's start).
        end_bytes: Bytes put back after its end.
        rows_streamed: Data rows ('D' messages) the recording held.
    """

    patches: list[Patch] = msgspec.field(default_factory=list)
    filled: list[str] = msgspec.field(default_factory=list)
    unfilled: list[str] = msgspec.field(default_factory=list)
    found: bool = False
    gaps_filled: int = 0
    start_bytes: int = 0
    end_bytes: int = 0
    rows_streamed: int = 0

    @property
    def added(self) -> int:
        """Bytes the patches add."""
        return sum(len(p.data) - p.length for p in self.patches)

    @property
    def rows_backfilled(self) -> int:
        """Data rows ('D' messages) the patches put back."""
        return sum(
            1
            for patch in self.patches
            for _o, _s, kind in iter_messages(patch.data, 0)
            if kind == _D
        )


class BackfillError(UlogstreamError):
    """The recording is not a ULog log with a data section (nothing to anchor on)."""


def plan_backfill(log: bytes) -> BackfillPlan:
    """Name the gaps of a recording (and its start and end) by their anchors.

    An anchor is whole messages, at least :data:`ANCHOR_BYTES` of them where the run allows:
    each begins with a message header, and a data message's header is followed by its msg_id
    and timestamp, so an anchor is found once in the SD log, not wherever a constant message
    tail repeats.

    Raises:
        BackfillError: ``log`` is not a ULog file, or has no data message.
    """
    if not log.startswith(MAGIC) or len(log) < HEADER_SIZE:
        msg = "not a ULog file"
        raise BackfillError(msg)
    first_data = -1
    subscriptions: set[int] = set()
    data_sizes: dict[int, int] = {}
    stamps: list[tuple[int, int]] = []  # (offset, timestamp) of each 'D'
    runs: list[list[int]] = []  # [start, end] of each dropout run
    recent: deque[int] = deque(maxlen=_RECENT)  # offsets of the last data-run messages
    befores: list[int] = []  # each run's before-anchor start
    end = HEADER_SIZE
    subscribing: int | None = None  # the start of the run of 'A' messages just read
    for offset, size, kind in iter_messages(log, HEADER_SIZE):
        end = offset + MESSAGE_HEADER_SIZE + size
        if kind == _A:
            subscriptions.add(_unpack_u16(log, offset + MESSAGE_HEADER_SIZE + 1)[0])
            if first_data < 0:
                continue
            if subscribing is None:
                subscribing = offset
        elif kind in _DEFINITIONS and first_data < 0:
            continue
        if first_data < 0:
            first_data = offset
        if kind == _O:
            if runs and runs[-1][1] == offset:
                runs[-1][1] = end
            else:
                # Subscriptions right before a dropout belong to the gap: a merged recording
                # puts a restarted stream's new ones there (the SD log has them in the gap).
                start = offset if subscribing is None else subscribing
                runs.append([start, end])
                befores.append(_anchor_start(deque(o for o in recent if o < start), start))
            recent.clear()
            subscribing = None
            continue
        if kind != _A:
            subscribing = None
        recent.append(offset)
        if kind == _D and size >= 10:  # noqa: PLR2004 (msg_id and a timestamp)
            msg_id = _unpack_u16(log, offset + MESSAGE_HEADER_SIZE)[0]
            data_sizes[msg_id] = size
            stamps.append((offset, _unpack_u64(log, offset + MESSAGE_HEADER_SIZE + 2)[0]))
    if first_data < 0 or not stamps:
        msg = "the log has no data messages"
        raise BackfillError(msg)
    last_start = _anchor_start(recent, end) if recent else end

    def stamp_near(offset: int, *, after: bool) -> int:
        # The nearest data message's timestamp on that side of offset.
        index = bisect.bisect_left(stamps, (offset, -1))
        if after:
            return stamps[index][1] if index < len(stamps) else stamps[-1][1]
        return stamps[index - 1][1] if index > 0 else stamps[0][1]

    def after_anchor(start: int, limit: int) -> bytes:
        # Whole messages from start, at least ANCHOR_BYTES where the run allows.
        position = start
        for offset, size, _kind in iter_messages(log, start):
            position = offset + MESSAGE_HEADER_SIZE + size
            if position - start >= ANCHOR_BYTES or position >= limit:
                break
        return log[start : min(position, limit)]

    gaps: list[Gap] = []
    ends = [run[0] for run in runs[1:]] + ([end] if runs else [])
    for (start, stop), before_start, next_run in zip(runs, befores, ends, strict=True):
        gaps.append(
            Gap(
                start,
                stop - start,
                Anchor(log[before_start:start], stamp_near(start, after=False)),
                Anchor(after_anchor(stop, next_run), stamp_near(stop, after=True)),
            )
        )
    start_length = 0
    if gaps and gaps[0].offset == first_data:
        # No data before the first gap (PX4 SITL loses packets right after the header): the
        # gap is the flight's start, put back from the SD log's data start.
        leading = gaps.pop(0)
        start_length = leading.length
        first_data += leading.length
    first_limit = gaps[0].offset if gaps else end
    return BackfillPlan(
        size=end,
        first_data=first_data,
        first=Anchor(after_anchor(first_data, first_limit), stamp_near(first_data, after=True)),
        gaps=tuple(gaps),
        start_length=start_length,
        rows=len(stamps),
        last=Anchor(log[last_start:end], stamp_near(end, after=False)),
        subscriptions=frozenset(subscriptions),
        data_sizes=data_sizes,
        bytes_per_us=_rate(stamps),
    )


def _rate(stamps: list[tuple[int, int]]) -> float:
    """Bytes per microsecond between the first and last data message (0: one instant)."""
    (first_offset, first_time), (last_offset, last_time) = stamps[0], stamps[-1]
    if last_time <= first_time:
        return 0.0
    return (last_offset - first_offset) / (last_time - first_time)


def _anchor_start(recent: deque[int], end: int) -> int:
    """The latest message start in ``recent`` at least :data:`ANCHOR_BYTES` before ``end``.

    The earliest one when the run is shorter.
    """
    for offset in reversed(recent):
        if end - offset >= ANCHOR_BYTES:
            return offset
    return recent[0] if recent else end


def backfill(
    plan: BackfillPlan, sd_size: int, *, fill_start: bool = True, fill_end: bool = False
) -> Generator[Fetch, bytes, BackfillResult]:
    """Find the recording's gaps in an SD log of ``sd_size`` bytes; return the patches.

    Yields :class:`Fetch` ranges; send each one's bytes back (clipped at the log's end).

    Args:
        plan: The recording's gaps.
        sd_size: The SD log's size (LOG_ENTRY).
        fill_start: Put back the data the SD log has before the recording's first data.
        fill_end: Put back the data the SD log has after the recording's last bytes (its stream
            ended before the flight did).
    """
    result = BackfillResult(rows_streamed=plan.rows)
    sizes = plan.data_sizes
    first = yield from _locate(plan.first, sd_size, sizes, 0, sd_size)
    if first is None:
        result.unfilled.append("the recording's first data is not in this SD log")
        return result
    result.found = True
    if fill_start:
        head = yield from _sd_data_start(sd_size)
        if head is not None and head < first:
            data = yield Fetch(head, first)
            kept = _whole_messages(data, sizes, drop_subscriptions=plan.subscriptions)
            if kept is None:
                result.unfilled.append("start: the SD bytes are not whole messages")
            elif kept:
                start = plan.first_data - plan.start_length
                result.patches.append(Patch(start, plan.start_length, kept))
                result.filled.append(f"start: {len(kept)} bytes")
                result.start_bytes = len(kept)
    # Between gaps the recording is the SD log byte for byte: (sd, rec) pairs an SD offset with
    # the recording's offset of the same byte in the run of data being read.
    sd, rec = first, plan.first_data
    sd_ended = False
    for number, gap in enumerate(plan.gaps):
        if sd_ended:
            # The SD log stopped before the recording did (PX4's SD log ends at disarm when it
            # runs only while armed): the rest of the recording is not on the card.
            result.unfilled.append(
                f"{len(plan.gaps) - number} gap(s) from {gap.offset} on: after the SD log's end"
            )
            break
        expected = sd + (gap.offset - len(gap.before.data) - rec)
        before = yield from _expect(gap.before, expected)
        if before is None:
            before = yield from _locate(gap.before, sd_size, sizes, sd, sd_size)
        if before is None:
            result.unfilled.append(f"gap at {gap.offset}: its data before is not found")
            continue
        start = before + len(gap.before.data)
        # The lost bytes span the gap's time at the log's rate (4x, and 64 kB, for safety).
        lost_us = max(0, gap.after.timestamp_us - gap.before.timestamp_us)
        reach = max(GAP_REACH_FLOOR, int(GAP_REACH_FACTOR * plan.bytes_per_us * lost_us))
        after = yield from _find_after(gap.after, sizes, start, min(sd_size, start + reach))
        if after is None:
            if start + reach >= sd_size:
                sd_ended = True
                result.unfilled.append(f"gap at {gap.offset}: after the SD log's end")
            else:
                result.unfilled.append(f"gap at {gap.offset}: its data after is not found")
            continue
        sd, rec = after, gap.offset + gap.length
        data = yield Fetch(start, after)
        if len(data) != after - start:
            result.unfilled.append(f"gap at {gap.offset}: not read (the byte budget)")
            continue
        kept = _whole_messages(data, sizes)
        if kept is None:
            result.unfilled.append(f"gap at {gap.offset}: the SD bytes are not whole messages")
            continue
        result.patches.append(Patch(gap.offset, gap.length, kept))
        result.filled.append(f"gap at {gap.offset}: {len(kept)} bytes")
        result.gaps_filled += 1
    if fill_end:
        expected = sd + (plan.size - len(plan.last.data) - rec)
        last = yield from _expect(plan.last, expected)
        if last is None:
            last = yield from _locate(plan.last, sd_size, sizes, sd, sd_size)
        if last is not None and last + len(plan.last.data) < sd_size:
            data = yield Fetch(last + len(plan.last.data), sd_size)
            whole = _whole_end_of(data)
            kept = _whole_messages(data[:whole], sizes)
            if kept:
                result.patches.append(Patch(plan.size, 0, kept))
                result.filled.append(f"end: {len(kept)} bytes")
                result.end_bytes = len(kept)
    return result


def _expect(anchor: Anchor, offset: int) -> Generator[Fetch, bytes, int | None]:
    """``offset`` if the SD log holds ``anchor.data`` there (a position worked out, checked)."""
    if offset < 0 or len(anchor.data) < MIN_ANCHOR_BYTES:
        return None
    data = yield Fetch(offset, offset + len(anchor.data))
    return offset if data == anchor.data else None


def _find_after(
    anchor: Anchor, sizes: dict[int, int], start: int, end: int
) -> Generator[Fetch, bytes, int | None]:
    """The first SD offset from ``start`` holding ``anchor.data``.

    Near ``start`` first (most gaps are a few lost packets), then by its timestamp (a blackout).
    """
    if len(anchor.data) < MIN_ANCHOR_BYTES:
        return None
    for width in NEAR_WINDOWS:
        data = yield Fetch(start, min(end, start + width + len(anchor.data)))
        found = data.find(anchor.data)
        if found >= 0:
            return start + found
        if start + width >= end:
            return None
    return (yield from _locate(anchor, end, sizes, start, end))


def _locate(
    anchor: Anchor, sd_size: int, sizes: dict[int, int], lo: int, hi: int
) -> Generator[Fetch, bytes, int | None]:
    """The SD offset of ``anchor.data`` in ``[lo, hi)``, or None."""
    needle = anchor.data
    if len(needle) < MIN_ANCHOR_BYTES:
        return None
    target = anchor.timestamp_us
    center = lo
    if target:
        low, high = lo, hi
        while high - low > 2 * WINDOWS[0]:
            middle = (low + high) // 2
            probe = yield Fetch(middle, min(middle + PROBE_BYTES, sd_size))
            stamps = sorted(_probe_stamps(probe, sizes))
            if not stamps:
                low = middle + len(probe)  # no data messages here (a parameter burst?)
                continue
            median = stamps[len(stamps) // 2]
            if median < target - CLOSE_US:
                low = middle
            elif median > target + CLOSE_US:
                high = middle
            else:
                low = high = middle
        center = (low + high) // 2
    for width in WINDOWS:
        start = max(lo, center - width)
        end = min(hi, center + width + len(needle))
        data = yield Fetch(start, end)
        found = data.find(needle)
        if found >= 0:
            return start + found
        if start == lo and end == hi:
            break
    return None


def _sd_data_start(sd_size: int) -> Generator[Fetch, bytes, int | None]:
    """Where the SD log's data section begins (its first message after the definitions)."""
    length = 64 << 10
    while True:
        data = yield Fetch(0, min(length, sd_size))
        if not data.startswith(MAGIC):
            return None
        for offset, _size, kind in iter_messages(data, HEADER_SIZE):
            if kind not in _DEFINITIONS:
                return offset
        if length >= sd_size or length >= 16 << 20:
            return None
        length *= 4


def _probe_stamps(probe: bytes, sizes: dict[int, int]) -> list[int]:
    """Timestamps of the data messages in a probe, once its message boundaries are found.

    A boundary counts when four messages chain from it, each of a ULog type and every 'D' of
    a known msg_id with that msg_id's size.
    """
    limit = min(len(probe), 2048)
    for start in range(limit):
        stamps: list[int] = []
        chained = 0
        position = start
        ok = True
        while position + MESSAGE_HEADER_SIZE <= len(probe):
            size = probe[position] | probe[position + 1] << 8
            kind = probe[position + 2]
            if kind not in _TYPES:
                ok = False
                break
            end = position + MESSAGE_HEADER_SIZE + size
            if kind == _D:
                if position + MESSAGE_HEADER_SIZE + 10 > len(probe):
                    break
                msg_id = _unpack_u16(probe, position + MESSAGE_HEADER_SIZE)[0]
                if sizes.get(msg_id) != size:
                    ok = False
                    break
                stamps.append(_unpack_u64(probe, position + MESSAGE_HEADER_SIZE + 2)[0])
            chained += 1
            if end > len(probe):
                break
            position = end
        if ok and chained >= 4:  # noqa: PLR2004
            return stamps
    return []


def _whole_end_of(data: bytes) -> int:
    end = 0
    for offset, size, _kind in iter_messages(data, 0):
        end = offset + MESSAGE_HEADER_SIZE + size
    return end


def _whole_messages(
    data: bytes, sizes: dict[int, int], *, drop_subscriptions: frozenset[int] = frozenset()
) -> bytes | None:
    """``data`` if it is a chain of whole ULog messages, else None.

    'D' messages of a known msg_id must have its size; 'A' messages for msg_ids in
    ``drop_subscriptions`` are left out.
    """
    out = bytearray()
    end = 0
    for offset, size, kind in iter_messages(data, 0):
        if kind not in _TYPES or (
            kind == _D
            and sizes.get(_unpack_u16(data, offset + MESSAGE_HEADER_SIZE)[0], size) != size
        ):
            return None
        end = offset + MESSAGE_HEADER_SIZE + size
        if (
            kind == _A
            and _unpack_u16(data, offset + MESSAGE_HEADER_SIZE + 1)[0] in drop_subscriptions
        ):
            continue
        out += data[offset:end]
    if end != len(data):
        return None
    return bytes(out)


def apply_patches(log: bytes, patches: list[Patch]) -> bytes:
    """The recording with ``patches`` applied (whole, in memory: for tests and small logs)."""
    out = bytearray()
    position = 0
    for patch in sorted(patches, key=lambda p: p.offset):
        out += log[position : patch.offset]
        out += patch.data
        position = patch.offset + patch.length
    out += log[position:]
    return bytes(out)


def merge_recordings(logs: Sequence[bytes]) -> bytes:
    """The recordings of one flight (its stream restarted) as one log with gaps between them.

    The first is kept whole; each later one's data section follows a dropout (its duration the
    time between the two, by their data timestamps), preceded by the subscriptions ('A') of its
    head that the log so far lacks. The gaps are then backfilled like any other: a restarted
    stream is a slice of the same SD log.

    Raises:
        BackfillError: One of them is not a ULog file with data.
    """
    merged = bytearray(logs[0])
    first = plan_backfill(logs[0])
    known = set(first.subscriptions)
    last_us = first.last.timestamp_us
    for log in logs[1:]:
        plan = plan_backfill(log)
        for offset, size, kind in iter_messages(log, HEADER_SIZE):
            if offset >= plan.first_data:
                break
            if kind == _A:
                msg_id = _unpack_u16(log, offset + MESSAGE_HEADER_SIZE + 1)[0]
                if msg_id not in known:
                    known.add(msg_id)
                    merged += log[offset : offset + MESSAGE_HEADER_SIZE + size]
        gap_ms = max(0, plan.first.timestamp_us - last_us) // 1000
        merged += encode_dropouts(max(1, gap_ms))
        merged += log[plan.first_data : plan.size]
        last_us = plan.last.timestamp_us
    return bytes(merged)
