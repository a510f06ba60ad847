"""Incremental sans-IO ULog parser: bytes in (any chunking), events out, bounded memory.

The parser frames messages, decodes definitions, info, parameters and log strings into event
values, and decodes 'D' payloads with numpy in batches: within one :meth:`ULogParser.
receive_bytes` call, consecutive 'D' messages are grouped per subscription into one
:class:`DataRows` (or :class:`UndecodedRows`, see :class:`RowSelection`), and a batch is closed
before any other event so events keep their order.

Corruption (a message that cannot be valid) is skipped: when the message after it is
plausible only that message is dropped, otherwise the parser scans forward for the next sync
message or the next pair of plausible messages. Both are reported as :class:`Corruption`.

One module past 700 lines on purpose: framing, resynchronisation and batching share the
buffer and the per-subscription state of one hot loop, which reads (and profiles) best whole.
"""

from __future__ import annotations

import enum
import re
import struct
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Final

from ulogstream.errors import ULogFormatError
from ulogstream.ulog.dtypes import CompiledFormat, TimestampField, compile_format, parse_format
from ulogstream.ulog.events import (
    Corruption,
    DataRows,
    DataWithoutSubscription,
    DefinitionsEnd,
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
    Sync,
    Truncated,
    ULogEvent,
    UndecodedRows,
    Unsubscription,
)
from ulogstream.ulog.events import Dropout as DropoutEvent
from ulogstream.ulog.spec import (
    FLAG_BITS_SIZE,
    HEADER_SIZE,
    INCOMPAT_DATA_APPENDED,
    MAGIC,
    MAX_MESSAGE_SIZE,
    MESSAGE_HEADER_SIZE,
    SUPPORTED_VERSION,
    SYNC_MAGIC,
    TIMESTAMP_FIELD,
    TYPE_SIZES,
    TYPE_STRUCT_CODES,
    MessageType,
    unpack_file_header,
    unpack_message_header,
)

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

DEFAULT_MAX_BUFFERED: Final = 1 << 20
"""Default bound on the bytes held back between calls (a partial message or a resync window)."""

MIN_MAX_BUFFERED: Final = 2 * (MESSAGE_HEADER_SIZE + MAX_MESSAGE_SIZE) + HEADER_SIZE
"""Resynchronisation checks two whole messages, so the bound must hold two of the largest."""

MAX_FORMATS: Final = 4096
"""Distinct format names kept; more are ignored with a warning (PX4 logs have about 200)."""

_D: Final = int(MessageType.DATA)
_P: Final = int(MessageType.PARAMETER)
_M: Final = int(MessageType.INFO_MULTIPLE)
_I: Final = int(MessageType.INFO)
_Q: Final = int(MessageType.PARAMETER_DEFAULT)
_F: Final = int(MessageType.FORMAT)
_B: Final = int(MessageType.FLAG_BITS)
_A: Final = int(MessageType.ADD_LOGGED_MSG)
_R: Final = int(MessageType.REMOVE_LOGGED_MSG)
_S: Final = int(MessageType.SYNC)
_L: Final = int(MessageType.LOGGING)
_C: Final = int(MessageType.LOGGING_TAGGED)
_KNOWN_TYPES: Final = frozenset(int(t) for t in MessageType)
_LOG_LEVELS: Final = frozenset(b"01234567")
_STAMPED_TYPES: Final = frozenset(
    {MessageType.INFO, MessageType.INFO_MULTIPLE, MessageType.PARAMETER, MessageType.DROPOUT}
)
"""Messages stamped with the last data timestamp: pending rows are decoded before them."""
_FEW_ROWS: Final = 32
"""Below this many rows, a Python max() over tolist() is faster than ndarray.max()."""
_HEADER_STATE, _MESSAGE_STATE, _ERROR_STATE, _CLOSED_STATE = range(4)

_UnpackFrom = Callable[[bytes, int], tuple[int, ...]]
_UnpackScalar = Callable[[bytes, int], tuple[int | float, ...]]
_unpack_data_header: _UnpackFrom = struct.Struct("<HBH").unpack_from
_unpack_u16: _UnpackFrom = struct.Struct("<H").unpack_from
_unpack_add: _UnpackFrom = struct.Struct("<BH").unpack_from
_unpack_logging: _UnpackFrom = struct.Struct("<BQ").unpack_from
_unpack_tagged: _UnpackFrom = struct.Struct("<BHQ").unpack_from
_unpack_offsets: _UnpackFrom = struct.Struct("<3Q").unpack_from
_unpack_u64: _UnpackFrom = struct.Struct("<Q").unpack_from

_CANDIDATE_TYPE = re.compile(b"[" + bytes(sorted(_KNOWN_TYPES - {MessageType.FLAG_BITS})) + b"]")
"""Type bytes a resynchronisation target can have ('B' is only valid as the first message)."""
_KEY_RE = re.compile(rb"[a-z0-9_]+(\[\d+\])? [^\x00- ]+")
_FORMAT_START_RE = re.compile(rb"[A-Za-z_][\w/]*:")
_TYPE_RE = re.compile(r"^(\w+)(?:\[(\d+)\])?$")
_SCALAR_UNPACKERS: Final[dict[str, Callable[[bytes], tuple[int | float | bool]]]] = {
    name: struct.Struct("<" + code).unpack for name, code in TYPE_STRUCT_CODES.items()
}
_SCALAR_UNPACK_FROM: Final[dict[str, _UnpackScalar]] = {
    name: struct.Struct("<" + code).unpack_from for name, code in TYPE_STRUCT_CODES.items()
}


class RowSelection(enum.Enum):
    """Which rows of a subscription the parser decodes (every 'D' message is framed and counted).

    ``ALL`` decodes every row (the default). ``NEWEST`` is for a rate-capped live consumer,
    which publishes at most the newest row of each batch (the last 'D' message of the
    subscription in one :meth:`ULogParser.receive_bytes` call): a batch becomes one
    :class:`UndecodedRows` with the payloads as logged, and the consumer decodes what it
    publishes (a ``timestamp`` of a wrapping type still needs every row: there the newest row
    comes decoded as :class:`DataRows`). ``NONE`` decodes nothing and emits no rows: a recorder
    without live consumers only counts. In both, the counts of :meth:`ULogParser.topic_counts`
    still cover every row, and the data timestamp that stamps later info, parameter and dropout
    events is the newest row's rather than the largest one of the batch (they differ only where
    a topic's timestamps go back).
    """

    ALL = "all"
    NEWEST = "newest"
    NONE = "none"


RowSelector = Callable[[Subscription], RowSelection]
"""Chooses a subscription's :class:`RowSelection` when the parser meets its 'A' message."""


def _all_rows(_subscription: Subscription) -> RowSelection:
    return RowSelection.ALL


def no_rows(_subscription: Subscription) -> RowSelection:
    """The :data:`RowSelector` of a reader that wants messages framed and counted, no rows."""
    return RowSelection.NONE


class TopicCount:
    """'D' messages framed for one subscription: how many, and their first and last timestamp.

    Attributes:
        subscription: The subscription (its msg_id may have been reused since).
        samples: Rows framed (decoded or not).
        first_timestamp_us: Timestamp of the first row (0 before any).
        last_timestamp_us: Timestamp of the newest row (the largest of a batch when decoded).
    """

    __slots__ = ("first_timestamp_us", "last_timestamp_us", "samples", "subscription")

    def __init__(self, subscription: Subscription) -> None:
        self.subscription = subscription
        self.samples = 0
        self.first_timestamp_us = 0
        self.last_timestamp_us = 0


class _BadMessageError(Exception):
    """A framed message whose content cannot be valid (handled as corruption, never escapes)."""


class _Topic:
    """Decoding state of one subscription (msg_id)."""

    __slots__ = (
        "compiled",
        "count",
        "last_raw",
        "padding",
        "plain_timestamp",
        "selection",
        "subscription",
        "timestamp",
        "timestamp_offset",
        "wire",
        "wraps",
    )

    def __init__(
        self, subscription: Subscription, compiled: CompiledFormat, selection: RowSelection
    ) -> None:
        self.subscription = subscription
        self.selection = selection
        self.count = TopicCount(subscription)
        self.compiled = compiled
        self.wire = compiled.size - compiled.trailing_padding
        self.padding = bytes(compiled.trailing_padding)
        self.timestamp: TimestampField | None = compiled.timestamp
        self.plain_timestamp = self.timestamp is not None and self.timestamp.type_name == "uint64_t"
        self.timestamp_offset = 0 if self.timestamp is None else self.timestamp.offset
        self.last_raw: int | None = None
        self.wraps = 0


class ULogParser:
    """Turns ULog bytes, fed in any chunking, into :data:`ULogEvent` values.

    Malformed input that makes the log unusable (no ULog header, an unknown incompat flag)
    raises :class:`ULogFormatError` and leaves the parser in an error state; everything else
    (corruption, unknown message types, truncation) is reported as an event. No other
    exception escapes for any input.

    Args:
        max_buffered: Most bytes held back between calls (a partial message, or the window of
            a resynchronisation after corruption); at least :data:`MIN_MAX_BUFFERED`.
        ordered: Close a data batch before every other event, so rows and events keep their
            log order (the default). With False, for whole-file readers, batches run on across
            events that carry no data timestamp (sync, log strings, subscriptions, warnings...)
            until the end of the call: rows stay in order per subscription, and every event
            stamped with the last data timestamp (info, parameter, dropout) still sees all rows
            before it.
        rows: Which rows of each subscription to decode (see :class:`RowSelection`); every
            row by default.
        remember_keys: Add the keys of 'P' messages to the process-wide cache that decodes
            a key seen before faster (the default: logs of one firmware repeat them). False
            for a one-off read of a whole file, which sees each key once: the cache would
            only hold memory (about 150 bytes per parameter). Keys already cached are used
            either way.
    """

    def __init__(
        self,
        *,
        max_buffered: int = DEFAULT_MAX_BUFFERED,
        ordered: bool = True,
        rows: RowSelector | None = None,
        remember_keys: bool = True,
    ) -> None:
        if max_buffered < MIN_MAX_BUFFERED:
            msg = f"max_buffered must be at least {MIN_MAX_BUFFERED} bytes, not {max_buffered}"
            raise ValueError(msg)
        self._max_buffered = max_buffered
        self._ordered = ordered
        self._remember_keys = remember_keys
        self._select_rows = _all_rows if rows is None else rows
        self._counts: list[TopicCount] = []
        self.decoded_rows = 0
        """Rows decoded into :class:`DataRows` so far (all of them unless ``rows`` says less)."""
        self._state = _HEADER_STATE
        self._error: tuple[str, int] | None = None
        self._tail = b""
        self._base = 0
        self._first_message = True
        self._in_data = False
        self._appended: list[int] = []
        self._resync_start: int | None = None
        self._resync_scan = 0
        self._resync_reason = ""
        self._formats: dict[str, FormatDefined] = {}
        self._subscriptions: dict[int, Subscription] = {}
        self._topics: dict[int, _Topic] = {}
        self._wire: dict[int, int] = {}
        self._sizes: list[int] = []
        """``_wire`` as a list indexed by msg_id (-1: not subscribed), up to the largest
        msg_id subscribed: indexing it is cheaper than a dict lookup in the 'D' loop."""
        self._ignored_ids: set[int] = set()
        self._unknown_types: set[int] = set()
        self._last_timestamp = 0
        self._batch: defaultdict[int, list[bytes]] = defaultdict(list)
        """'D' payloads (trailing padding cut) per msg_id, not yet decoded; empty between calls."""

    @property
    def formats(self) -> Mapping[str, FormatDefined]:
        """Formats defined so far, by name."""
        return MappingProxyType(self._formats)

    @property
    def subscriptions(self) -> Mapping[int, Subscription]:
        """Current subscriptions, by msg_id."""
        return MappingProxyType(self._subscriptions)

    def topic_counts(self) -> list[TopicCount]:
        """Every subscription of the log so far (removed ones too) with its framed rows.

        Rows still held back in a partial message are not counted yet.
        """
        return list(self._counts)

    @property
    def offset(self) -> int:
        """Stream offset up to which bytes are parsed (the rest is held back)."""
        return self._base

    @property
    def buffered(self) -> int:
        """Bytes held back: a partial message or a resynchronisation window."""
        return len(self._tail)

    @property
    def last_timestamp_us(self) -> int:
        """The largest data timestamp seen so far (the header timestamp before any data)."""
        return self._last_timestamp

    def receive_bytes(self, data: bytes | bytearray | memoryview) -> list[ULogEvent]:
        """Parse ``data``, the next bytes of the stream, and return the events it completes.

        Raises:
            ULogFormatError: The log cannot be parsed (also on every call after that).
            RuntimeError: Called after :meth:`close`.
        """
        if self._state != _MESSAGE_STATE:
            self._check_open("receive_bytes")
        if not data:
            return []
        tail = self._tail
        buf = tail + data if tail else bytes(data)
        events: list[ULogEvent] = []
        if self._state != _MESSAGE_STATE:
            pos = self._run(buf, events, final=False)
        elif self._resync_start is not None or self._appended:
            pos = self._messages(buf, 0, events, final=False)
        else:
            # the common case, kept out of _messages: well-formed 'D' messages up to a partial
            # message (a live stream's chunks cut messages anywhere)
            end = len(buf)
            batch = self._batch
            sizes = self._sizes
            unpack = _unpack_data_header
            pos = 0
            partial = False
            try:
                while True:
                    if pos + 5 > end:
                        partial = pos + 3 > end
                        if not partial:
                            size = buf[pos] | buf[pos + 1] << 8
                            partial = pos + 3 + size > end and size != 0 and buf[pos + 2] != 0
                        break
                    size, msg_type, msg_id = unpack(buf, pos)
                    nxt = pos + 3 + size
                    if nxt > end:
                        partial = size != 0 and msg_type != 0
                        break
                    if msg_type != _D or sizes[msg_id] != size:
                        break
                    batch[msg_id].append(buf[pos + 5 : nxt])
                    pos = nxt
            except IndexError:
                pass  # a msg_id above every subscription: _messages handles it
            if not partial:
                pos = self._messages(buf, pos, events, final=False)
            elif batch:
                self._flush(events)
        self._base += pos
        self._tail = buf[pos:]
        return events

    def close(self) -> list[ULogEvent]:
        """End of stream: parse what is held back; a partial message is reported as Truncated.

        Raises:
            ULogFormatError: The stream ended inside the file header, or the parser failed.
            RuntimeError: Called twice.
        """
        self._check_open("close")
        events: list[ULogEvent] = []
        buf = self._tail
        pos = self._run(buf, events, final=True)
        if self._state == _HEADER_STATE:
            self._state = _CLOSED_STATE
            msg = f"stream ended after {len(buf)} bytes, inside the {HEADER_SIZE}-byte file header"
            raise ULogFormatError(msg, offset=len(buf))
        end = self._base + len(buf)
        if self._resync_start is not None:
            reason = f"{self._resync_reason}; no valid message followed"
            events.append(Corruption(self._resync_start, end - self._resync_start, reason))
            self._resync_start = None
        elif pos < len(buf):
            events.append(Truncated(self._base + pos, len(buf) - pos))
        self._base = end
        self._tail = b""
        self._state = _CLOSED_STATE
        return events

    def _check_open(self, method: str) -> None:
        if self._state == _CLOSED_STATE:
            msg = f"{method}() after close()"
            raise RuntimeError(msg)
        if self._error is not None:
            message, offset = self._error
            msg = f"parser failed earlier: {message}"
            raise ULogFormatError(msg, offset=offset)

    def _fail(self, message: str, offset: int) -> ULogFormatError:
        self._error = (message, offset)
        self._state = _ERROR_STATE
        self._tail = b""
        self._batch.clear()
        return ULogFormatError(message, offset=offset)

    def _run(self, buf: bytes, events: list[ULogEvent], *, final: bool) -> int:
        """Parse ``buf`` (held-back bytes plus new ones); return how many bytes were used."""
        pos = 0
        if self._state == _HEADER_STATE:
            pos = self._header(buf, events)
            if pos == 0:
                return 0
        return self._messages(buf, pos, events, final=final)

    def _header(self, buf: bytes, events: list[ULogEvent]) -> int:
        if buf[: len(MAGIC)] != MAGIC[: len(buf)]:
            msg = "not a ULog stream: the file magic 'ULog\\x01\\x12\\x35' is missing"
            raise self._fail(msg, 0)
        if len(buf) < HEADER_SIZE:
            return 0
        _, version, timestamp = unpack_file_header(buf, 0)
        events.append(FileHeader(version, timestamp))
        if version > SUPPORTED_VERSION:
            text = f"file format version {version} is newer than {SUPPORTED_VERSION}; parsed as 1"
            events.append(ParserWarning(len(MAGIC), text))
        self._last_timestamp = timestamp
        self._state = _MESSAGE_STATE
        return HEADER_SIZE

    def _messages(self, buf: bytes, pos: int, events: list[ULogEvent], *, final: bool) -> int:
        """The message loop: a tight path for well-formed 'D', everything else in _one()."""
        end = len(buf)
        batch = self._batch
        wire = self._wire
        unpack = _unpack_data_header
        data_type = _D
        while True:
            if self._resync_start is not None:
                pos = self._resync(buf, pos, events, final=final)
                if self._resync_start is not None:
                    break
            limit = end
            if self._appended and self._appended[0] - self._base < end:
                limit = max(self._appended[0] - self._base, pos)
            while pos + 5 <= limit:
                size, msg_type, msg_id = unpack(buf, pos)
                nxt = pos + 3 + size
                if msg_type == data_type and wire.get(msg_id) == size and nxt <= limit:
                    batch[msg_id].append(buf[pos + 5 : nxt])
                    pos = nxt
                    continue
                break
            if limit == end and not final and not self._appended:
                if pos + 3 > end:
                    break
                size, msg_type = unpack_message_header(buf, pos)
                if pos + 3 + size > end and size != 0 and msg_type != 0:
                    break  # wait for the rest of the message
            new_pos = self._one(buf, pos, limit, events, final=final)
            if new_pos < 0:
                break
            pos = new_pos
        self._flush(events)
        return pos

    def _one(
        self,
        buf: bytes,
        pos: int,
        limit: int,
        events: list[ULogEvent],
        *,
        final: bool,
    ) -> int:
        """Handle the message (or boundary) at ``pos``; return the next position, -1 to stop."""
        base = self._base
        at_boundary = False
        if self._appended:
            if base + pos >= self._appended[0]:
                self._appended.pop(0)
                return pos
            at_boundary = limit < len(buf) or self._appended[0] - base == limit
        if pos + 3 > limit:
            if at_boundary and pos < limit:
                return self._cut(pos, limit, events)
            return -1
        size, msg_type = unpack_message_header(buf, pos)
        nxt = pos + 3 + size
        if size == 0 or msg_type == 0:
            return self._bad(pos, "message header with a zero type or size")
        if nxt > limit:
            if at_boundary:
                return self._cut(pos, limit, events)
            return -1
        if msg_type == _D:
            return self._data(buf, pos, nxt, events, final=final)
        if msg_type not in _KNOWN_TYPES:
            return self._unknown(buf, pos, nxt, events, final=final)
        if self._ordered or msg_type in _STAMPED_TYPES:
            self._flush(events)
        try:
            self._dispatch(msg_type, buf[pos + 3 : nxt], base + pos, events)
        except _BadMessageError as err:
            return self._bad_or_wait(buf, pos, nxt, str(err), events, final=final)
        return nxt

    def _cut(self, pos: int, limit: int, events: list[ULogEvent]) -> int:
        if self._ordered:
            self._flush(events)
        boundary = self._base + limit
        reason = f"message cut short by data appended at byte {boundary}"
        events.append(Corruption(self._base + pos, limit - pos, reason))
        return limit

    def _data(
        self,
        buf: bytes,
        pos: int,
        nxt: int,
        events: list[ULogEvent],
        *,
        final: bool,
    ) -> int:
        size = nxt - pos - 3
        if size < 2:  # noqa: PLR2004
            return self._bad_or_wait(
                buf, pos, nxt, "'D' message without a msg_id", events, final=final
            )
        (msg_id,) = _unpack_u16(buf, pos + 3)
        topic = self._topics.get(msg_id)
        if topic is None:
            if msg_id in self._ignored_ids:
                return nxt
            following = self._plausible(buf, nxt)
            if following == -2 and not final:  # noqa: PLR2004
                return -1
            if following == -1:  # not a message after all: damage
                reason = f"'D' message for msg_id {msg_id}, which has no subscription"
                return self._bad(pos, reason)
            if self._ordered:
                self._flush(events)
            events.append(DataWithoutSubscription(self._base + pos, msg_id))
            return nxt
        if size - 2 in (topic.wire, topic.compiled.size):
            self._batch[msg_id].append(buf[pos + 5 : pos + 5 + topic.wire])
            return nxt
        reason = (
            f"'D' payload of {size - 2} bytes for {topic.subscription.name!r} (msg_id {msg_id}), "
            f"whose format has {topic.compiled.size} ({topic.wire} without trailing padding)"
        )
        return self._bad_or_wait(buf, pos, nxt, reason, events, final=final)

    def _unknown(
        self,
        buf: bytes,
        pos: int,
        nxt: int,
        events: list[ULogEvent],
        *,
        final: bool,
    ) -> int:
        """A type this parser does not know: a future message if the next one is plausible."""
        msg_type = buf[pos + 2]
        size = nxt - pos - 3
        reason = f"unknown message type {msg_type} with {size} bytes"
        if not 0x41 <= (msg_type & 0xDF) <= 0x5A:  # noqa: PLR2004 (not an ASCII letter)
            return self._bad(pos, reason)
        following = self._plausible(buf, nxt)
        if following == -2 and not final:  # noqa: PLR2004
            return -1
        if following == -1:
            return self._bad(pos, reason)
        if msg_type not in self._unknown_types:
            self._unknown_types.add(msg_type)
            if self._ordered:
                self._flush(events)
            text = f"skipping messages of unknown type {chr(msg_type)!r} ({msg_type})"
            events.append(ParserWarning(self._base + pos, text))
        return nxt

    def _bad_or_wait(
        self, buf: bytes, pos: int, nxt: int, reason: str, events: list[ULogEvent], *, final: bool
    ) -> int:
        """Drop one bad message if the next is plausible, else resynchronise."""
        following = self._plausible(buf, nxt)
        if following == -2 and not final:  # noqa: PLR2004
            return -1
        if following == -1:
            return self._bad(pos, reason)
        if self._ordered:
            self._flush(events)
        events.append(Corruption(self._base + pos, nxt - pos, reason))
        return nxt

    def _bad(self, pos: int, reason: str) -> int:
        """Start resynchronising after the bad message at ``pos``."""
        self._resync_start = self._base + pos
        self._resync_scan = self._base + pos + 1
        self._resync_reason = reason
        return pos

    def _resync(self, buf: bytes, pos: int, events: list[ULogEvent], *, final: bool) -> int:
        """Scan for where valid messages start again; return the position to continue from.

        Candidates are tried in stream order (see :meth:`_candidates`), and a candidate that
        needs more bytes is waited for, so every chunking of the stream resumes at the same
        place. While still scanning, the returned position keeps a few bytes before the next
        candidate so that a sync magic across two chunks is still found.
        """
        end = len(buf)
        scan = self._resync_scan - self._base
        start = self._resync_start
        floor = pos if start is None else max(pos, start - self._base + 1)
        limit = end
        if self._appended and self._appended[0] - self._base <= end:
            limit = max(self._appended[0] - self._base, scan)
        for candidate in _candidates(buf, scan, max(floor, scan - len(SYNC_MAGIC)), limit):
            found = self._chain(buf, candidate, final=final)
            if found is None:
                self._resync_scan = self._base + candidate
                return max(pos, candidate - len(SYNC_MAGIC))
            if found:
                return self._resynced(candidate, events)
        if limit < end:
            return self._resynced(limit, events)
        if final:
            return end
        self._resync_scan = self._base + max(scan, end - 2)
        return max(pos, end - 2 - len(SYNC_MAGIC))

    def _resynced(self, pos: int, events: list[ULogEvent]) -> int:
        start = self._resync_start
        if start is not None:
            skipped = self._base + pos - start
            if self._ordered:
                self._flush(events)
            events.append(Corruption(start, skipped, self._resync_reason))
        self._resync_start = None
        return pos

    def _chain(self, buf: bytes, pos: int, *, final: bool) -> bool | None:
        """Whether a plausible message starts at ``pos`` and is followed by one (None: wait)."""
        following = self._plausible(buf, pos)
        if following == -2:  # noqa: PLR2004
            return False if final else None
        if following < 0:
            return False
        if buf[pos + 2] == MessageType.SYNC:
            return True
        after = self._plausible(buf, following)
        if after == -2:  # noqa: PLR2004
            return True if final else None
        return after >= 0

    def _plausible(self, buf: bytes, pos: int) -> int:
        """End of a plausible message at ``pos``; -1 when it cannot be one, -2 when cut off."""
        end = len(buf)
        if pos + 3 > end:
            return -2
        size, msg_type = unpack_message_header(buf, pos)
        nxt = pos + 3 + size
        if msg_type == _D:
            if pos + 5 > end:
                return -2
            (msg_id,) = _unpack_u16(buf, pos + 3) if size >= 2 else (-1,)  # noqa: PLR2004
            topic = self._topics.get(msg_id)
            if topic is not None:
                ok = size - 2 in (topic.wire, topic.compiled.size)
            else:
                ok = msg_id in self._ignored_ids
            return nxt if ok else -1
        if msg_type not in _KNOWN_TYPES or msg_type == MessageType.FLAG_BITS or size == 0:
            return -1
        if nxt > end:
            return -2
        payload = buf[pos + 3 : nxt]
        ok = False
        match msg_type:
            case MessageType.SYNC:
                ok = payload == SYNC_MAGIC
            case MessageType.DROPOUT | MessageType.REMOVE_LOGGED_MSG:
                ok = size == 2  # noqa: PLR2004
            case MessageType.LOGGING:
                ok = size >= 9 and payload[0] in _LOG_LEVELS  # noqa: PLR2004
            case MessageType.LOGGING_TAGGED:
                ok = size >= 11 and payload[0] in _LOG_LEVELS  # noqa: PLR2004
            case MessageType.ADD_LOGGED_MSG:
                ok = payload[3:].decode(errors="replace") in self._formats
            case MessageType.FORMAT:
                ok = _FORMAT_START_RE.match(payload) is not None
            case MessageType.INFO | MessageType.PARAMETER:
                ok = _KEY_RE.fullmatch(payload, 1, 1 + payload[0]) is not None
            case _:  # 'M' and 'Q': one byte before the key
                ok = size > 1 and _KEY_RE.fullmatch(payload, 2, 2 + payload[1]) is not None
        return nxt if ok else -1

    def _flush(self, events: list[ULogEvent]) -> None:
        """Count the batched 'D' payloads; decode the chosen rows (one event per msg_id)."""
        batch = self._batch
        if not batch:
            return
        topics = self._topics
        append = events.append
        last = self._last_timestamp
        every_row = RowSelection.ALL
        no_row = RowSelection.NONE
        decoded = self.decoded_rows
        for msg_id, parts in batch.items():
            topic = topics[msg_id]
            count = topic.count
            selection = topic.selection
            rows: npt.NDArray[np.void]
            timestamps: npt.NDArray[np.uint64]
            number = len(parts)
            if selection is not every_row and topic.plain_timestamp:
                # Framed, not decoded: the timestamps are read from the raw rows.
                offset = topic.timestamp_offset
                newest = parts[-1]
                (top,) = _unpack_u64(newest, offset)
                if not count.samples:
                    (count.first_timestamp_us,) = _unpack_u64(parts[0], offset)
                count.samples += number
                count.last_timestamp_us = top
                if top > last:  # noqa: PLR1730 (a builtin call costs more in this loop)
                    last = top
                if selection is not no_row:  # the consumer decodes the newest row if it needs it
                    append(UndecodedRows(topic.subscription, parts, top))
                    decoded += 1
                continue
            import numpy as np  # noqa: PLC0415 (not imported until a row is decoded)

            if not topic.plain_timestamp:
                rows, timestamps, top = self._decode(topic, parts)
            elif number == 1:  # most batches of a live stream
                raw = parts[0] + topic.padding
                rows = np.frombuffer(raw, topic.compiled.dtype)
                timestamps = rows[TIMESTAMP_FIELD]
                (top,) = _unpack_u64(raw, topic.timestamp_offset)
            else:
                if topic.padding:
                    parts.append(b"")  # the last row's padding too
                rows = np.frombuffer(topic.padding.join(parts), topic.compiled.dtype)
                timestamps = rows[TIMESTAMP_FIELD]
                # tolist() then max() beats ndarray.max() for the few rows of a live stream
                top = max(timestamps.tolist()) if number < _FEW_ROWS else int(timestamps.max())
            if not count.samples:
                count.first_timestamp_us = int(timestamps[0])
            count.samples += number
            count.last_timestamp_us = top
            if top > last:  # noqa: PLR1730 (a builtin call costs more in this loop)
                last = top
            if selection is not every_row:  # a wrapping timestamp: unrolled over every row
                if selection is no_row:
                    continue
                rows, timestamps = rows[-1:], timestamps[-1:]
            append(DataRows(topic.subscription, rows, timestamps))
            decoded += len(rows)
        self.decoded_rows = decoded
        self._last_timestamp = last
        batch.clear()

    def _decode(
        self, topic: _Topic, parts: list[bytes]
    ) -> tuple[npt.NDArray[np.void], npt.NDArray[np.uint64], int]:
        """(rows, timestamps, largest timestamp) of a topic whose timestamps need work."""
        import numpy as np  # noqa: PLC0415 (not imported until a row is decoded)

        count = len(parts)
        if topic.padding:
            parts.append(b"")
        raw = topic.padding.join(parts)
        rows: npt.NDArray[np.void] = np.frombuffer(raw, topic.compiled.dtype)
        timestamps = self._timestamps(topic, raw, count)
        top = max(timestamps.tolist()) if count < _FEW_ROWS else int(timestamps.max())
        return rows, timestamps, top

    @staticmethod
    def _timestamps(topic: _Topic, raw: bytes, count: int) -> npt.NDArray[np.uint64]:
        import numpy as np  # noqa: PLC0415 (not imported until a row is decoded)

        stamp = topic.timestamp
        if stamp is None:
            return np.zeros(count, np.uint64)
        if stamp.modulus == 0:  # int64_t
            view: npt.NDArray[np.uint64] = np.ndarray(
                (count,), "<u8", raw, stamp.offset, (topic.compiled.size,)
            )
            return view
        return ULogParser._unroll(topic, stamp, raw, count)

    @staticmethod
    def _unroll(
        topic: _Topic, stamp: TimestampField, raw: bytes, count: int
    ) -> npt.NDArray[np.uint64]:
        """Timestamps of a wrapping type, unrolled with the subscription's running state."""
        import numpy as np  # noqa: PLC0415 (not imported until a row is decoded)

        type_str = "<" + TYPE_STRUCT_CODES[stamp.type_name]
        values = np.ndarray((count,), type_str, raw, stamp.offset, (topic.compiled.size,))
        values = values.astype(np.int64)
        previous = int(values[0]) if topic.last_raw is None else topic.last_raw
        steps = np.diff(values, prepend=previous)
        wraps = np.cumsum(steps < -(stamp.modulus // 2)) + topic.wraps
        topic.last_raw = int(values[-1])
        topic.wraps = int(wraps[-1])
        unrolled = (values + wraps * stamp.modulus) * stamp.scale
        result: npt.NDArray[np.uint64] = unrolled.astype(np.uint64)
        return result

    def _dispatch(
        self, msg_type: int, payload: bytes, offset: int, events: list[ULogEvent]
    ) -> None:
        """Decode one non-'D' message into events; raise _BadMessageError when it is invalid."""
        first = self._first_message
        self._first_message = False
        # most frequent first: parameters and info fill the definitions section
        if msg_type == _P:
            key_end = 1 + payload[0]  # _one passes no empty payload
            known = _PARAMETER_KEYS.get(payload[1:key_end])
            if known is not None and len(payload) - key_end == known[1]:
                name = known[0]
                (number,) = known[2](payload, key_end)
            else:
                name, number = _parameter(payload, remember=self._remember_keys)
            events.append(Parameter(name, number, self._last_timestamp if self._in_data else None))
        elif msg_type == _M:
            key_type, key, value = _key_value(payload, 1)
            timestamp = self._last_timestamp if self._in_data else None
            events.append(InfoMultiple(key, key_type, value, bool(payload[0]), timestamp))
        elif msg_type == _I:
            key_type, key, value = _key_value(payload, 0)
            timestamp = self._last_timestamp if self._in_data else None
            events.append(Info(key, key_type, value, timestamp))
        elif msg_type == _Q:
            key_type, key, value = _key_value(payload, 1)
            events.append(ParameterDefault(key, _number(value), payload[0]))
        elif msg_type == _F:
            self._format(payload, offset, events)
        elif msg_type == _B:
            self._flag_bits(payload, offset, events, first=first)
        elif msg_type == _A:
            self._end_definitions(offset, events)
            self._add_logged(payload, offset, events)
        elif msg_type == _R:
            if len(payload) != 2:  # noqa: PLR2004
                msg = f"'R' message of {len(payload)} bytes instead of 2"
                raise _BadMessageError(msg)
            (msg_id,) = _unpack_u16(payload, 0)
            self._remove_logged(msg_id, offset, events)
        elif msg_type in (_L, _C):
            self._end_definitions(offset, events)
            events.append(_logged_string(msg_type, payload))
        elif msg_type == _S:
            if payload != SYNC_MAGIC:
                msg = "'S' message without the sync magic"
                raise _BadMessageError(msg)
            events.append(Sync(offset))
        else:  # MessageType.DROPOUT
            if len(payload) != 2:  # noqa: PLR2004
                msg = f"'O' message of {len(payload)} bytes instead of 2"
                raise _BadMessageError(msg)
            (duration,) = _unpack_u16(payload, 0)
            events.append(DropoutEvent(duration, self._last_timestamp))

    def _end_definitions(self, offset: int, events: list[ULogEvent]) -> None:
        if not self._in_data:
            self._in_data = True
            events.append(DefinitionsEnd(offset))

    def _flag_bits(
        self, payload: bytes, offset: int, events: list[ULogEvent], *, first: bool
    ) -> None:
        if not first:
            text = "flag bits message ('B') after the first message; ignored"
            events.append(ParserWarning(offset, text))
            return
        if len(payload) < FLAG_BITS_SIZE:
            text = f"flag bits message of {len(payload)} bytes, zero-padded to {FLAG_BITS_SIZE}"
            events.append(ParserWarning(offset, text))
            payload = payload.ljust(FLAG_BITS_SIZE, b"\0")
        compat, incompat = payload[:8], payload[8:16]
        unknown = incompat[0] & ~INCOMPAT_DATA_APPENDED or any(incompat[1:])
        if unknown:
            msg = (
                f"unknown incompat_flags bits {incompat.hex()} are set: this log needs a newer "
                "parser"
            )
            raise self._fail(msg, offset)
        appended = _unpack_offsets(payload, 16)
        events.append(FlagBits(compat, incompat, (appended[0], appended[1], appended[2])))
        if incompat[0] & INCOMPAT_DATA_APPENDED:
            here = offset + 3 + len(payload)
            self._appended = sorted(o for o in appended if o >= here)

    def _format(self, payload: bytes, offset: int, events: list[ULogEvent]) -> None:
        try:
            fmt = parse_format(payload.decode(errors="replace"), offset=offset)
        except ULogFormatError as err:
            events.append(ParserWarning(offset, f"format ignored: {err}"))
            return
        if fmt.name not in self._formats and len(self._formats) >= MAX_FORMATS:
            text = f"format {fmt.name!r} ignored: more than {MAX_FORMATS} formats"
            events.append(ParserWarning(offset, text))
            return
        self._formats[fmt.name] = fmt
        events.append(fmt)

    def _add_logged(self, payload: bytes, offset: int, events: list[ULogEvent]) -> None:
        if len(payload) < 4:  # noqa: PLR2004
            msg = f"'A' message of {len(payload)} bytes, too short for a topic name"
            raise _BadMessageError(msg)
        multi_id, msg_id = _unpack_add(payload, 0)
        name = payload[3:].decode(errors="replace")
        self._forget(msg_id, events)
        try:
            compiled = compile_format(name, self._formats)
        except ULogFormatError as err:
            self._ignored_ids.add(msg_id)
            reason = str(err).removesuffix(" (at byte 0)")
            text = f"subscription {name!r} (msg_id {msg_id}) ignored: {reason}"
            events.append(ParserWarning(offset, text))
            return
        if compiled.size == 0:
            self._ignored_ids.add(msg_id)
            text = f"subscription {name!r} (msg_id {msg_id}) ignored: its format has no bytes"
            events.append(ParserWarning(offset, text))
            return
        if compiled.timestamp is None:
            text = f"topic {name!r} has no integer 'timestamp' field; its timestamps read as 0"
            events.append(ParserWarning(offset, text))
        subscription = Subscription(msg_id, multi_id, name, compiled)
        topic = _Topic(subscription, compiled, self._select_rows(subscription))
        self._counts.append(topic.count)
        self._topics[msg_id] = topic
        self._subscriptions[msg_id] = subscription
        self._wire[msg_id] = topic.wire + 2
        if msg_id >= len(self._sizes):
            self._sizes.extend([-1] * (msg_id + 1 - len(self._sizes)))
        self._sizes[msg_id] = topic.wire + 2
        events.append(subscription)

    def _remove_logged(self, msg_id: int, offset: int, events: list[ULogEvent]) -> None:
        if msg_id not in self._subscriptions and msg_id not in self._ignored_ids:
            events.append(ParserWarning(offset, f"'R' for msg_id {msg_id}, never subscribed"))
            return
        self._forget(msg_id, events)
        events.append(Unsubscription(msg_id))

    def _forget(self, msg_id: int, events: list[ULogEvent]) -> None:
        if msg_id in self._batch:  # its rows are decoded with the format they were logged with
            self._flush(events)
        self._topics.pop(msg_id, None)
        self._subscriptions.pop(msg_id, None)
        self._wire.pop(msg_id, None)
        if msg_id < len(self._sizes):
            self._sizes[msg_id] = -1
        self._ignored_ids.discard(msg_id)


def _candidates(buf: bytes, scan: int, magic_from: int, limit: int) -> Iterator[int]:
    """Resynchronisation candidates from ``scan`` in stream order.

    A candidate is a position whose type byte is a known message type (the message there is
    checked by the caller) or the end of a sync magic found at or after ``magic_from`` (a sync
    message whose header was damaged).
    """
    size = len(SYNC_MAGIC)
    magic = buf.find(SYNC_MAGIC, magic_from, limit)
    for match in _CANDIDATE_TYPE.finditer(buf, scan + 2, limit + 2):
        candidate = match.start() - 2
        while magic >= 0 and magic + size <= candidate:
            if magic + size >= scan and magic + size != candidate:
                yield magic + size
            magic = buf.find(SYNC_MAGIC, magic + 1, limit)
        yield candidate
    while magic >= 0:
        if magic + size >= scan:
            yield magic + size
        magic = buf.find(SYNC_MAGIC, magic + 1, limit)


def _key_value(payload: bytes, start: int) -> tuple[str, str, InfoValue]:
    """Decode ``key_len, "type name", value`` at ``start``: (type, name, value)."""
    if len(payload) <= start:
        msg = "key/value message without a key"
        raise _BadMessageError(msg)
    key_end = start + 1 + payload[start]
    if key_end > len(payload):
        msg = f"key of {payload[start]} bytes in a message of {len(payload)}"
        raise _BadMessageError(msg)
    key_type, space, key = payload[start + 1 : key_end].decode(errors="replace").partition(" ")
    if not space or not key:
        msg = f"key {key_type!r} is not 'type name'"
        raise _BadMessageError(msg)
    return key_type, key, _decode_value(key_type, payload[key_end:])


def _decode_value(type_name: str, raw: bytes) -> InfoValue:
    """Decode an info/parameter value by the type in its key.

    ``char[N]`` gives str, ``uint8_t[N]`` bytes, other arrays tuples, scalars int/float/bool;
    a type that is not a basic ULog type gives the raw bytes.

    Raises:
        _BadMessageError: The value's size does not fit the type.
    """
    kind = _VALUE_KINDS.get(type_name)
    if kind is None:
        kind = _value_kind(type_name)
        if kind is None:
            return raw
        if len(_VALUE_KINDS) < 256:  # noqa: PLR2004 (a bound on the cache)
            _VALUE_KINDS[type_name] = kind
    base, size, is_array = kind
    if base == "char":
        return raw.decode(errors="replace")
    if not is_array:
        if len(raw) != size:
            msg = f"{type_name} value of {len(raw)} bytes"
            raise _BadMessageError(msg)
        value: InfoValue = _SCALAR_UNPACKERS[base](raw)[0]
        return value
    if base == "uint8_t":
        return raw
    if len(raw) % size:
        msg = f"{type_name} value of {len(raw)} bytes"
        raise _BadMessageError(msg)
    return tuple(struct.unpack(f"<{len(raw) // size}{TYPE_STRUCT_CODES[base]}", raw))


_VALUE_KINDS: dict[str, tuple[str, int, bool]] = {}
"""Cache of :func:`_value_kind` (a dict lookup is much cheaper than an lru_cache call)."""


def _value_kind(type_name: str) -> tuple[str, int, bool] | None:
    """(basic type, its size, is an array) for ``type`` or ``type[N]``; None for other types."""
    match = _TYPE_RE.match(type_name)
    if match is None or match.group(1) not in TYPE_STRUCT_CODES:
        return None
    base = match.group(1)
    return base, TYPE_SIZES[base], match.group(2) is not None


def _parameter(payload: bytes, *, remember: bool) -> tuple[str, int | float]:
    """Decode a 'P' payload: (name, value); cache a scalar's key if ``remember``."""
    key_type, key, value = _key_value(payload, 0)
    number = _number(value)
    kind = _VALUE_KINDS.get(key_type)
    if remember and kind is not None and not kind[2] and len(_PARAMETER_KEYS) < MAX_FORMATS:
        _PARAMETER_KEYS[payload[1 : 1 + payload[0]]] = (key, kind[1], _SCALAR_UNPACK_FROM[kind[0]])
    return key, number


_PARAMETER_KEYS: dict[bytes, tuple[str, int, _UnpackScalar]] = {}
"""'P' keys (``type name`` bytes) of numeric scalars seen so far: (name, value size, unpacker).

A log repeats its parameter keys (and logs of one firmware share them), so decoding a known
key is a dict lookup and one unpack; the bound on its size is :data:`MAX_FORMATS` keys."""


def _number(value: InfoValue) -> int | float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value
    msg = f"parameter value {value!r} is not a number"
    raise _BadMessageError(msg)


def _logged_string(msg_type: int, payload: bytes) -> LoggedString:
    if msg_type == MessageType.LOGGING:
        if len(payload) < 9:  # noqa: PLR2004
            msg = f"'L' message of {len(payload)} bytes"
            raise _BadMessageError(msg)
        level, timestamp = _unpack_logging(payload, 0)
        return LoggedString(level, None, timestamp, payload[9:].decode(errors="replace"))
    if len(payload) < 11:  # noqa: PLR2004
        msg = f"'C' message of {len(payload)} bytes"
        raise _BadMessageError(msg)
    level, tag, timestamp = _unpack_tagged(payload, 0)
    return LoggedString(level, tag, timestamp, payload[11:].decode(errors="replace"))
