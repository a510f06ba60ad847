"""Whole-log ULog reading, sans-IO: :class:`ULogReader` folds a log into one :class:`ULogData`.

Opening files is the shell's part (:func:`ulogstream.adapters.ulog_file.read`); the reader
takes the log's bytes in large blocks and returns each topic instance's rows in one structured
array.

Past 700 lines on purpose: the block framer, the row gather and the growing row buffers are one
hot path (`tests/bench/bench_ulog.py`); what is not rows is folded by
:mod:`ulogstream.ulog.summary`.
"""

from __future__ import annotations

import array
import bisect
import mmap
import struct
from typing import TYPE_CHECKING, Final

import msgspec
import numpy as np
import numpy.typing as npt

from ulogstream.errors import ULogFormatError
from ulogstream.ulog.dtypes import compile_format
from ulogstream.ulog.events import (
    Corruption,
    DataRows,
    DataWithoutSubscription,
    Dropout,
    FileHeader,
    FlagBits,
    FormatDefined,
    Info,
    InfoMultiple,
    InfoValue,
    LoggedString,
    Parameter,
    ParameterDefault,
    ParserWarning,
    Subscription,
    Truncated,
    ULogEvent,
)
from ulogstream.ulog.parser import ULogParser
from ulogstream.ulog.spec import (
    HEADER_SIZE,
    INCOMPAT_DATA_APPENDED,
    TIMESTAMP_FIELD,
    MessageType,
)
from ulogstream.ulog.summary import LogDescription

if TYPE_CHECKING:
    from collections.abc import Callable

BLOCK_SIZE: Final = 1 << 17
"""Bytes per :meth:`ULogReader.feed` call that :func:`~ulogstream.adapters.ulog_file.read`
uses: large enough that the per-topic work of a block is small next to its rows (4x the
block costs 20% less time), small enough that the block and its row offsets add little to
the peak memory (``tests/bench/bench_ulog.py``)."""

_MAPPED_FROM: Final = 1 << 14 if hasattr(mmap, "MAP_PRIVATE") else 1 << 62
"""Bytes of rows above which a topic instance's rows move to a memory mapping of their own
(never where ``mmap`` has no private mappings: Windows). Of 4 to 64 KiB, 8 and 16 KiB gave
the lowest peaks on the v1.15 and v1.17 logs (``tests/bench/bench_ulog.py``)."""
_MAPPED_START: Final = 1 << 18
"""Smallest mapping: room ahead takes address space, not memory, until it is written."""
_PARSER_STEP: Final = 4096
"""Bytes handed to the parser at a time while it resynchronises."""
_D: Final = int(MessageType.DATA)
_B: Final = int(MessageType.FLAG_BITS)
_A: Final = int(MessageType.ADD_LOGGED_MSG)
_R: Final = int(MessageType.REMOVE_LOGGED_MSG)
_KNOWN_TYPES: Final = frozenset(int(t) for t in MessageType)
_STATE_TYPES: Final = frozenset({_A, _R, _B})
"""Messages after which the reader catches up with the parser (subscriptions, flag bits)."""
_ID_AT: Final = {_A: 4, _R: 3}
"""Where the msg_id of an 'A' or 'R' message is, from the message start."""
_ID_END: Final = {_A: 3, _R: 2}
"""Smallest payload holding that msg_id."""
_STAMPED: Final = frozenset({Parameter, Info, InfoMultiple, Dropout})
_unpack_data_header: Callable[[memoryview, int], tuple[int, int, int]] = struct.Struct(
    "<HBH"
).unpack_from


class TopicData(msgspec.Struct, frozen=True):
    """All rows of one topic instance ``(name, multi_id)``, in log order.

    Attributes:
        name: The topic (format) name.
        multi_id: The instance.
        msg_ids: Every msg_id the instance was logged under (usually one).
        dtype: The flattened structured dtype: :attr:`Subscription.dtype` without the room of
            trailing padding (its ``itemsize`` ends with the last field), as PX4 logs rows.
        data: The rows, one structured element per 'D' message.
        timestamps_us: Each row's timestamp in microseconds, wrap-around unrolled.
    """

    name: str
    multi_id: int
    msg_ids: tuple[int, ...]
    dtype: np.dtype[np.void]
    data: npt.NDArray[np.void]
    timestamps_us: npt.NDArray[np.uint64]


class ULogData(msgspec.Struct, frozen=True):
    """Everything in a ULog file, as :meth:`ULogReader.result` returns it.

    Attributes:
        header: The file header.
        flag_bits: The 'B' message, None in logs older than it.
        formats: Format definitions by name.
        info: 'I' values by key (a later value replaces an earlier one).
        info_multiple: 'M' values by key; each item joins one value's ``is_continued`` pieces.
        initial_parameters: 'P' values of the definitions section.
        changed_parameters: 'P' messages of the data section, stamped with the last data time.
        default_parameters: 'Q' messages in log order.
        logged_messages: 'L' and 'C' messages in log order ('C' have a ``tag``).
        dropouts: 'O' messages.
        topics: Rows per topic instance, in subscription order (subscribed instances without
            data have empty arrays).
        corruption: Byte ranges skipped as corrupt.
        data_without_subscription: 'D' messages skipped because their 'A' was lost, per msg_id.
        warnings: What the parser noticed (unknown message types, ignored definitions...).
        truncated: The partial message the file ended in, if any.
        start_timestamp_us: The header timestamp.
        last_timestamp_us: The largest data timestamp (the header timestamp without data).
    """

    header: FileHeader
    flag_bits: FlagBits | None
    formats: dict[str, FormatDefined]
    info: dict[str, InfoValue]
    info_multiple: dict[str, list[InfoValue]]
    initial_parameters: dict[str, int | float]
    changed_parameters: list[Parameter]
    default_parameters: list[ParameterDefault]
    logged_messages: list[LoggedString]
    dropouts: list[Dropout]
    topics: dict[tuple[str, int], TopicData]
    corruption: list[Corruption]
    data_without_subscription: dict[int, int]
    warnings: list[ParserWarning]
    truncated: Truncated | None
    start_timestamp_us: int
    last_timestamp_us: int


class ULogReader:
    """Reads a whole log, fed in large blocks, into one :class:`ULogData` (sans-IO).

    Feed the log's bytes in order with :meth:`feed`; it returns how many bytes of the block it
    used, and the rest must open the next block. The reader frames messages in a tight loop
    and only notes where each well-formed 'D' message of a subscription with a 64-bit (or no)
    timestamp starts; at the end of each block it copies those rows out per topic instance
    with one numpy gather. Every other message (definitions, strings, parameters, anything
    damaged) goes to a :class:`ULogParser` that sees the log without those 'D' messages, so
    the parser stays the one owner of every decoding and recovery rule: the reader hands it
    all bytes whenever it holds some back (a partial or damaged message, a resynchronisation)
    and frames by itself again only where the parser stands at a message boundary. Values
    stamped with the last data timestamp (changed parameters, info, dropouts) get the rows
    the parser did not see added back in, and offsets in its reports are mapped back to file
    offsets. A log with appended data ('B' incompat flag) goes through the parser whole.

    Memory: the rows themselves (each topic instance's in one buffer the result views, see
    :class:`_Rows`), plus the block and its row offsets (8 bytes each, in an ``array``, not
    int objects).

    Args:
        gather: False hands every byte to the parser (the reference that tests compare with).
    """

    def __init__(self, *, gather: bool = True) -> None:
        self._parser = ULogParser(ordered=False, remember_keys=False)
        self._collector = _Collector()
        self._sizes: list[int] = []
        """``2 + wire size`` of each msg_id whose rows this reader gathers itself, else -1
        (up to the largest msg_id subscribed)."""
        self._offsets: list[array.array[int] | None] = []
        """Block offsets of the gathered 'D' messages of each msg_id, not yet copied out."""
        self._lanes: dict[int, _Lane] = {}
        self._synced: dict[int, Subscription] = {}
        """The parser's subscription of each msg_id when the reader last looked."""
        self._base = 0
        """File offset of the block being fed."""
        self._fed_to_parser = 0
        self._parser_end = 0
        """File offset just after the last byte handed to the parser."""
        self._segment_starts = array.array("q", [0])
        self._segment_files = array.array("q", [0])
        """Where each stretch of the parser's stream lies in the file (parallel lists)."""
        self._started = False
        self._whole = not gather
        """Everything goes to the parser (a log with appended data)."""
        self._deferred: list[Parameter | Info | InfoMultiple | Dropout] = []
        """Events stamped with the last data timestamp, held until their block's rows are in."""
        self._cutoffs: list[int] = []
        """File offset of the bytes each deferred event came from (ascending)."""
        self._bases: list[int] = []
        """The largest timestamp logged before each deferred event, known so far."""
        self._gathered_max = 0
        """The largest timestamp of the rows gathered (copied out) so far."""
        self._finished = False

    @property
    def offset(self) -> int:
        """File offset of the next block."""
        return self._base

    def feed(self, block: bytes | bytearray | memoryview, *, final: bool = False) -> int:
        """Read ``block``, the log's bytes from :attr:`offset`; return how many were used.

        The unused rest (a partial message) must start the next block. With ``final`` the
        block ends the log: all of it is used.

        Raises:
            ULogFormatError: The log cannot be parsed (no ULog header, unknown incompat flags).
            RuntimeError: Fed after the final block.
        """
        if self._finished:
            msg = "feed() after the final block"
            raise RuntimeError(msg)
        view = memoryview(block)
        try:
            used = self._feed(view, final=final)
        except ULogFormatError as err:
            reason = str(err).removesuffix(f" (at byte {err.offset})")
            raise ULogFormatError(reason, offset=self._file_offset(err.offset)) from None
        finally:
            view.release()
        self._base += used
        self._finished = final
        return used

    def result(self) -> ULogData:
        """The log read so far (call after the final block)."""
        last = max(self._parser.last_timestamp_us, self._gathered_max)
        return self._collector.result(last)

    def _feed(self, block: memoryview, *, final: bool) -> int:
        end = len(block)
        pos = 0
        pending = -1
        """Start of the messages walked but not yet handed to the parser (-1: none)."""
        if not self._started:
            if end < HEADER_SIZE and not final:
                return 0
            self._started = True
            pending, pos = 0, min(HEADER_SIZE, end)
        if self._whole:
            self._to_parser(block, 0, end)
            return self._end_block(block, end, final=final)
        if self._parser.buffered:
            pos = self._through_parser(block, pos)
        sizes = self._sizes
        offsets = self._offsets
        unpack = _unpack_data_header
        data_type = _D
        limit = end - 5
        while True:
            try:
                while pos <= limit:
                    size, msg_type, msg_id = unpack(block, pos)
                    nxt = pos + 3 + size
                    if nxt > end:
                        break
                    if msg_type == data_type and sizes[msg_id] == size:
                        if pending >= 0:
                            self._to_parser(block, pending, pos)
                            pending = -1
                            if self._parser.buffered:
                                pos = self._through_parser(block, pos)
                                continue
                            # the parser's events may have changed the subscription
                            if sizes[msg_id] != size:
                                continue
                        offsets[msg_id].append(pos)  # type: ignore[union-attr]
                        pos = nxt
                        continue
                    if pending < 0:
                        pending = pos
                    pos = nxt
                    if msg_type == data_type or msg_type not in _KNOWN_TYPES or not size:
                        # damaged, or data the parser decides on: it takes over until it
                        # stands at a message boundary again (this walk would follow a
                        # damaged size off course)
                        self._to_parser(block, pending, pos)
                        pending = -1
                        if self._parser.buffered:
                            pos = self._through_parser(block, pos)
                    elif msg_type in _STATE_TYPES:  # the parser's state changes: catch up with it
                        self._to_parser(block, pending, pos)
                        pending = -1
                        if self._parser.buffered:
                            pos = self._through_parser(block, pos)
                        elif msg_type == _B:
                            self._whole = self._appended_data()
                            if self._whole:
                                self._to_parser(block, pos, end)
                                return self._end_block(block, end, final=final)
                        elif size >= _ID_END[msg_type]:  # the msg_id is in the message
                            at = nxt - 3 - size + _ID_AT[msg_type]
                            self._sync(block, block[at] | block[at + 1] << 8)
                break
            except IndexError:  # a 'D' message for a msg_id above every subscription
                if pending < 0:
                    pending = pos
                nxt = pos + 3 + (block[pos] | block[pos + 1] << 8)
                self._to_parser(block, pending, nxt)
                pending = -1
                pos = self._through_parser(block, nxt)
        if final:
            self._to_parser(block, pos if pending < 0 else pending, end)
            return self._end_block(block, end, final=True)
        if pending >= 0:
            self._to_parser(block, pending, pos)
            if self._parser.buffered:
                pos = self._through_parser(block, pos)
        return self._end_block(block, pos, final=False)

    def _appended_data(self) -> bool:
        flag_bits = self._collector.description.flag_bits
        return flag_bits is not None and bool(flag_bits.incompat_flags[0] & INCOMPAT_DATA_APPENDED)

    def _through_parser(self, block: memoryview, pos: int) -> int:
        """Hand the parser bytes from ``pos`` until it holds none back; return where it stands.

        Each step completes the message the parser holds (when its header is in this block),
        so that it can end at a message boundary.
        """
        parser = self._parser
        end = len(block)
        while parser.buffered and pos < end:
            start = pos - parser.buffered
            target = pos + _PARSER_STEP
            if start >= 0 and start + 2 <= end:
                complete = start + 3 + (block[start] | block[start + 1] << 8)
                if complete > pos:
                    target = complete
            target = min(target, end)
            self._to_parser(block, pos, target)
            pos = target
        if not parser.buffered:
            subscriptions = parser.subscriptions
            changed = [m for m, s in self._synced.items() if subscriptions.get(m) is not s]
            changed += [m for m, s in subscriptions.items() if self._synced.get(m) is not s]
            for msg_id in changed:
                self._sync(block, msg_id)
        return pos

    def _to_parser(self, block: memoryview, start: int, stop: int) -> None:
        """Hand ``block[start:stop]`` to the parser and take in its events."""
        if stop <= start:
            return
        file_start = self._base + start
        if file_start != self._parser_end:
            self._segment_starts.append(self._fed_to_parser)
            self._segment_files.append(file_start)
        events = self._parser.receive_bytes(block[start:stop])
        self._fed_to_parser += stop - start
        self._parser_end = self._base + stop
        self._take(events, block, file_start)

    def _take(self, events: list[ULogEvent], block: memoryview, cutoff: int) -> None:
        """Collect the parser's events; ``cutoff``: file offset of the bytes they came from."""
        collector = self._collector
        for event in events:
            kind = type(event)
            if kind is DataRows:
                builder = collector.by_msg_id.get(event.subscription.msg_id)  # type: ignore[union-attr]
                if builder is not None:
                    for lane in builder.lanes:  # rows gathered before these come first
                        self._gather(lane, block)
                collector.add(event)
            elif kind in _STAMPED and event.timestamp_us is not None:  # type: ignore[union-attr]
                # the rows gathered so far all precede ``cutoff``; the rest are seen in _gather
                self._deferred.append(event)  # type: ignore[arg-type]
                self._cutoffs.append(cutoff)
                self._bases.append(self._gathered_max)
            elif isinstance(event, ParserWarning):  # its text may name the offset too
                mapped = self._file_offset(event.offset)
                text = event.text.replace(f"(at byte {event.offset})", f"(at byte {mapped})")
                collector.add(ParserWarning(mapped, text))
            elif isinstance(event, Corruption | Truncated | DataWithoutSubscription):
                mapped = self._file_offset(event.offset)
                collector.add(msgspec.structs.replace(event, offset=mapped))
            else:
                collector.add(event)

    def _file_offset(self, offset: int) -> int:
        """The file offset of an offset in the parser's stream."""
        i = bisect.bisect_right(self._segment_starts, offset) - 1
        return self._segment_files[i] + offset - self._segment_starts[i]

    def _sync(self, block: memoryview, msg_id: int) -> None:
        """Follow the parser's subscription of ``msg_id``: gather its rows here or not."""
        lane = self._lanes.pop(msg_id, None)
        if lane is not None:
            self._gather(lane, block)
            lane.builder.lanes.remove(lane)
        if msg_id >= len(self._sizes):
            self._sizes.extend([-1] * (msg_id + 1 - len(self._sizes)))
            self._offsets.extend([None] * (msg_id + 1 - len(self._offsets)))
        self._sizes[msg_id] = -1
        self._offsets[msg_id] = None
        subscription = self._parser.subscriptions.get(msg_id)
        builder = self._collector.by_msg_id.get(msg_id)
        if subscription is None:
            self._synced.pop(msg_id, None)
            return
        self._synced[msg_id] = subscription
        if builder is None:
            return
        try:
            compiled = compile_format(subscription.name, self._parser.formats)
        except ULogFormatError:
            return
        stamp = compiled.timestamp
        if compiled.dtype != subscription.dtype or (stamp is not None and stamp.modulus):
            return  # left to the parser (wrapping timestamps need its running state)
        lane = _Lane(msg_id, builder, array.array("q"), None if stamp is None else stamp.offset)
        self._lanes[msg_id] = lane
        builder.lanes.append(lane)
        self._sizes[msg_id] = compiled.size - compiled.trailing_padding + 2
        self._offsets[msg_id] = lane.offsets

    def _gather(self, lane: _Lane, block: memoryview) -> None:
        """Copy the rows noted in ``lane`` out of ``block`` into its topic instance."""
        offsets = lane.offsets
        count = len(offsets)
        if not count:
            return
        at: npt.NDArray[np.int64] = np.frombuffer(offsets, np.int64)
        builder = lane.builder
        size = builder.size
        # the ``size`` bytes after each offset's header and msg_id, overlapping: indexing
        # this copies the rows out
        spans: npt.NDArray[np.void] = np.ndarray(
            (len(block) - size - 4,), builder.void, block, 5, (1,)
        )
        rows = builder.rows
        start = rows.used
        rows.append(spans[at])
        timestamps: npt.NDArray[np.uint64]
        if lane.timestamp_offset is None:
            timestamps = np.zeros(count, np.uint64)
        else:  # a view: ``rows`` cannot grow until it is dropped, at the end of this call
            timestamps = np.ndarray(
                (count,), "<u8", rows.buffer, start + lane.timestamp_offset, (size,)
            )
        if not builder.view_timestamp:
            timestamps = np.array(timestamps)
            builder.timestamps.append(timestamps)
        if self._deferred and self._cutoffs[-1] > offsets[0] + self._base:  # rows before a stamp
            self._raise_bases(offsets, timestamps)
        del at  # ``offsets`` can only shrink with no view of it left
        del offsets[:]
        self._gathered_max = max(self._gathered_max, int(timestamps.max()))

    def _raise_bases(self, offsets: array.array[int], timestamps: npt.NDArray[np.uint64]) -> None:
        """Raise each deferred event's base to the largest timestamp of the rows before it.

        ``offsets``: the block offsets of the rows just gathered, ``timestamps`` theirs. Few
        events fall between rows (parameters changed in flight, dropouts): a slice's maximum
        per event costs less than a running maximum of every row.
        """
        bases = self._bases
        top, done = 0, 0
        for i, cutoff in enumerate(self._cutoffs):
            before = bisect.bisect_left(offsets, cutoff - self._base)
            if before > done:
                top = max(top, int(timestamps[done:before].max()))
                done = before
            bases[i] = max(bases[i], top)

    def _end_block(self, block: memoryview, used: int, *, final: bool) -> int:
        """Copy out the block's rows and settle the deferred stamps; return ``used``."""
        if final:
            self._take(self._parser.close(), block, self._base + len(block))
        for lane in self._lanes.values():
            self._gather(lane, block)
        self._settle()
        return used

    def _settle(self) -> None:
        """Add the deferred events, each stamped with the largest timestamp logged before it."""
        for event, base in zip(self._deferred, self._bases, strict=True):
            if event.timestamp_us is not None and base > event.timestamp_us:
                event = msgspec.structs.replace(event, timestamp_us=base)  # noqa: PLW2901
            self._collector.add(event)
        self._deferred.clear()
        self._cutoffs.clear()
        self._bases.clear()


class _Lane(msgspec.Struct):
    """The 'D' messages of one msg_id that the reader gathers itself."""

    msg_id: int
    builder: _TopicBuilder
    offsets: array.array[int]
    timestamp_offset: int | None
    """Where the row's 64-bit timestamp is (None: the format has none, timestamps are 0)."""


class _Rows:
    """One topic instance's rows, as bytes, in a buffer that the array views at the end.

    The buffer is a ``bytearray`` while small, then a private anonymous memory mapping of
    their own. A ``bytearray`` that grows moves through ``realloc``; below glibc's mmap
    threshold (128 KiB at first, raised by every larger block freed, up to 32 MiB) it lives
    in the heap, where every move leaves a hole that stays resident: a whole log read that
    way took 1-2 MiB more than its rows, and the peak followed the heap's layout. A mapping
    of its own grows through ``mremap``, without a copy; the room ahead takes no memory until
    written, and its pages hold these rows only. Small instances stay in the heap, where they
    share pages (a mapping takes a page at least, and most instances of a modern log hold a
    few KiB).
    """

    __slots__ = ("buffer", "used")

    def __init__(self) -> None:
        self.buffer: bytearray | mmap.mmap = bytearray()
        self.used = 0
        """Bytes of rows (a mapping is longer: room ahead)."""

    def append(self, rows: npt.NDArray[np.void] | npt.NDArray[np.uint8]) -> None:
        """Append the bytes of ``rows`` (C-contiguous)."""
        start = self.used
        end = start + rows.nbytes
        buffer = self._room(end)
        if isinstance(buffer, bytearray):
            buffer.extend(rows)
        else:
            np.ndarray(rows.shape, rows.dtype, buffer, start)[:] = rows
        self.used = end

    def view(self, dtype: np.dtype[np.void]) -> npt.NDArray[np.void]:
        """The rows as an array of ``dtype`` (no more rows can be added while it lives)."""
        buffer = self.buffer
        if isinstance(buffer, mmap.mmap) and len(buffer) > self.used:  # once
            _resize(buffer, self.used)  # the room ahead back to the system
        data: npt.NDArray[np.void] = np.frombuffer(buffer, dtype, self.used // dtype.itemsize)
        return data

    def _room(self, end: int) -> bytearray | mmap.mmap:
        """The buffer, with room for ``end`` bytes."""
        buffer = self.buffer
        if isinstance(buffer, bytearray):
            if end <= _MAPPED_FROM:
                return buffer
            mapped = _mapping(max(2 * end, _MAPPED_START))
            mapped[: self.used] = buffer
            self.buffer = mapped
            return mapped
        if end > len(buffer) and not _resize(buffer, max(2 * len(buffer), end)):
            larger = _mapping(max(2 * len(buffer), end))
            with memoryview(buffer) as view:
                larger[: self.used] = view[: self.used]
            buffer.close()
            self.buffer = buffer = larger
        return buffer


def _mapping(size: int) -> mmap.mmap:
    """A private anonymous mapping of ``size`` bytes (pages take memory once written)."""
    return mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE)


def _resize(mapping: mmap.mmap, size: int) -> bool:
    """Resize ``mapping`` in place (``mremap``); False where the system cannot (macOS)."""
    try:
        mapping.resize(size)
    except SystemError:  # "mmap: resizing not available--no mremap()"
        return False
    return True


class _TopicBuilder:
    """Rows of one topic instance, with the format they were logged in.

    Rows are kept without the bytes after their last field (trailing padding, which PX4 does
    not log either); at the end the array is a view of them (see :class:`_Rows`), so a whole
    log takes little more memory than its rows.
    """

    __slots__ = (
        "full",
        "lanes",
        "msg_ids",
        "multi_id",
        "name",
        "row_size",
        "rows",
        "size",
        "timestamps",
        "view_timestamp",
        "void",
    )

    def __init__(self, subscription: Subscription) -> None:
        self.name = subscription.name
        self.multi_id = subscription.multi_id
        self.msg_ids = [subscription.msg_id]
        self.full = subscription.dtype
        """:attr:`Subscription.dtype`; :meth:`build` cuts it to the rows (see :func:`_compact`)
        only at the end, when the block that set the peak memory is gone."""
        self.row_size = self.full.itemsize
        self.size = _compact_size(self.full)
        """Bytes per row kept: up to the end of the last field."""
        self.void: np.dtype[np.void] = np.dtype((np.void, self.size))
        self.rows = _Rows()
        """The rows so far; they can only grow while no array views them."""
        self.timestamps: list[npt.NDArray[np.uint64]] = []
        self.lanes: list[_Lane] = []
        """The msg_ids whose rows :class:`ULogReader` gathers into this instance itself."""
        fields = self.full.fields
        spec = None if fields is None else fields.get(TIMESTAMP_FIELD)
        self.view_timestamp = spec is not None and spec[0] == np.dtype("<u8")

    def add(self, rows: npt.NDArray[np.void], timestamps: npt.NDArray[np.uint64]) -> None:
        """Append a parser batch (full-size rows, of which the first bytes are kept)."""
        size = self.size
        if size == self.row_size:
            self.rows.append(rows)
        else:
            self.rows.append(
                np.ndarray((len(rows), size), np.uint8, rows, 0, (self.row_size, 1)).copy()
            )
        if not self.view_timestamp:
            self.timestamps.append(timestamps)

    def build(self, dtype: np.dtype[np.void]) -> TopicData:
        """The instance's rows, viewed as ``dtype`` (:func:`_compact` of :attr:`full`)."""
        data = self.rows.view(dtype)
        timestamps: npt.NDArray[np.uint64]
        if self.view_timestamp:
            timestamps = data[TIMESTAMP_FIELD]
        elif self.timestamps:
            timestamps = np.concatenate(self.timestamps)
        else:
            timestamps = np.zeros(len(data), np.uint64)
        return TopicData(self.name, self.multi_id, tuple(self.msg_ids), dtype, data, timestamps)


def _compact_size(dtype: np.dtype[np.void]) -> int:
    """Where the last field of ``dtype`` ends."""
    fields = dtype.fields
    if not fields:
        return dtype.itemsize
    return max(offset + field.itemsize for field, offset, *_ in fields.values())


def _compact(dtype: np.dtype[np.void]) -> np.dtype[np.void]:
    """``dtype`` with its itemsize cut to the end of its last field."""
    end = _compact_size(dtype)
    fields = dtype.fields
    if not fields or end == dtype.itemsize:
        return dtype
    names = list(fields)
    compact: np.dtype[np.void] = np.dtype(
        {
            "names": names,
            "formats": [fields[n][0] for n in names],
            "offsets": [fields[n][1] for n in names],
            "itemsize": end,
        }
    )
    return compact


class _Collector:
    """Folds the event stream into the parts of a :class:`ULogData`.

    Rows are gathered here; everything else goes to a
    :class:`~ulogstream.ulog.summary.LogDescription`.
    """

    def __init__(self) -> None:
        self.description = LogDescription()
        self.topics: dict[tuple[str, int], _TopicBuilder] = {}
        self.by_msg_id: dict[int, _TopicBuilder] = {}

    def add(self, event: ULogEvent) -> None:
        if type(event) is DataRows:  # the common case first, without a match
            builder = self.by_msg_id.get(event.subscription.msg_id)
            if builder is not None:
                builder.add(event.rows, event.timestamps_us)
        elif type(event) is Subscription:
            self._subscribe(event)
        else:
            self.description.add(event)

    def _subscribe(self, subscription: Subscription) -> None:
        key = (subscription.name, subscription.multi_id)
        builder = self.topics.get(key)
        if builder is None:
            builder = _TopicBuilder(subscription)
            self.topics[key] = builder
        elif builder.full != subscription.dtype and _compact(builder.full) != _compact(
            subscription.dtype
        ):
            text = (
                f"{subscription.name!r} instance {subscription.multi_id} re-subscribed with a "
                f"different format (msg_id {subscription.msg_id}); its rows are left out"
            )
            self.description.problems.warnings.append(ParserWarning(-1, text))
            self.by_msg_id.pop(subscription.msg_id, None)
            return
        elif subscription.msg_id not in builder.msg_ids:
            builder.msg_ids.append(subscription.msg_id)
        self.by_msg_id[subscription.msg_id] = builder

    def result(self, last_timestamp_us: int) -> ULogData:
        log = self.description
        if log.header is None:  # the parser raises before this can happen
            msg = "no ULog file header"
            raise ULogFormatError(msg, offset=0)
        compacts: dict[np.dtype[np.void], np.dtype[np.void]] = {}  # one per format
        topics: dict[tuple[str, int], TopicData] = {}
        for key, builder in self.topics.items():
            compact = compacts.get(builder.full)
            if compact is None:
                compact = compacts[builder.full] = _compact(builder.full)
            topics[key] = builder.build(compact)
        problems = log.problems
        return ULogData(
            header=log.header,
            flag_bits=log.flag_bits,
            formats=log.formats,
            info=log.info,
            info_multiple=log.info_multiple,
            initial_parameters=log.initial_parameters,
            changed_parameters=log.changed_parameters,
            default_parameters=log.default_parameters,
            logged_messages=log.logged_messages,
            dropouts=log.dropouts,
            topics=topics,
            corruption=problems.corruption,
            data_without_subscription=problems.data_without_subscription,
            warnings=problems.warnings,
            truncated=problems.truncated,
            start_timestamp_us=log.header.timestamp_us,
            last_timestamp_us=last_timestamp_us,
        )
