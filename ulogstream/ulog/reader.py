"""Whole-file ULog reading on top of the incremental parser: :func:`read` and :func:`iter_events`.

This module opens files (the parser itself never does I/O); ``read`` gathers every event into
one :class:`ULogData` with each topic instance's rows in a single structured array.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from ulogstream.errors import ULogFormatError, UlogstreamError
from ulogstream.ulog.events import (
    Corruption,
    DataRows,
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
from ulogstream.ulog.spec import TIMESTAMP_FIELD

if TYPE_CHECKING:
    import os
    from collections.abc import Iterator

DEFAULT_CHUNK_SIZE = 1 << 20
"""Bytes read from the file per parser call by :func:`iter_events`."""

READ_CHUNK_SIZE = 1 << 15
"""Bytes per parser call in :func:`read`: small enough that the transient copies of a chunk do
not raise the peak memory above the data itself (pyulog's peak, measured on a 40 MB log).
Every transient stays under glibc's 128 KiB mmap threshold this way; 64 KiB chunks were ~10%
faster but peaked ~0.5-1 MiB higher, above pyulog."""


@dataclass(frozen=True, slots=True)
class TopicData:
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


@dataclass(frozen=True)
class ULogData:
    """Everything in a ULog file, as :func:`read` returns it.

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
    warnings: list[ParserWarning]
    truncated: Truncated | None
    start_timestamp_us: int
    last_timestamp_us: int


def iter_events(
    path: str | os.PathLike[str], *, chunk_size: int = DEFAULT_CHUNK_SIZE
) -> Iterator[ULogEvent]:
    """Stream the events of a ULog file, reading ``chunk_size`` bytes at a time.

    Raises:
        UlogstreamError: The file cannot be opened or read.
        ULogFormatError: The file is not a ULog file (the message names the file).
    """
    parser = ULogParser()
    for events in _event_lists(parser, Path(path), chunk_size):
        yield from events


def read(path: str | os.PathLike[str]) -> ULogData:
    """Read a whole ULog file.

    Raises:
        UlogstreamError: The file cannot be opened or read.
        ULogFormatError: The file is not a ULog file (the message names the file).
    """
    # rows are gathered per topic, so their order among other events does not matter
    parser = ULogParser(ordered=False)
    collector = _Collector()
    add = collector.add
    for events in _event_lists(parser, Path(path), READ_CHUNK_SIZE):
        for event in events:
            add(event)
    return collector.result(parser.last_timestamp_us)


def _event_lists(parser: ULogParser, path: Path, chunk_size: int) -> Iterator[list[ULogEvent]]:
    """The events of each parser call (lists: a generator step per event costs more)."""
    try:
        with path.open("rb") as file:
            while chunk := file.read(chunk_size):
                yield parser.receive_bytes(chunk)
        yield parser.close()
    except ULogFormatError as err:
        reason = str(err).removesuffix(f" (at byte {err.offset})")
        msg = f"{path} is not a readable ULog file: {reason}"
        raise ULogFormatError(msg, offset=err.offset) from None
    except OSError as err:
        msg = f"cannot read ULog file {path}: {err.strerror or err}"
        raise UlogstreamError(msg) from err


class _TopicBuilder:
    """Rows of one topic instance, appended as raw bytes and viewed as an array at the end.

    Rows are kept without the bytes after their last field (trailing padding, which PX4 does
    not log either), so a whole file takes no more memory than its data.
    """

    __slots__ = (
        "dtype",
        "msg_ids",
        "multi_id",
        "name",
        "raw",
        "row_size",
        "timestamps",
        "view_timestamp",
    )

    def __init__(self, subscription: Subscription) -> None:
        self.name = subscription.name
        self.multi_id = subscription.multi_id
        self.msg_ids = [subscription.msg_id]
        self.dtype = _compact(subscription.dtype)
        self.row_size = subscription.dtype.itemsize
        self.raw = bytearray()
        self.timestamps: list[npt.NDArray[np.uint64]] = []
        fields = self.dtype.fields
        spec = None if fields is None else fields.get(TIMESTAMP_FIELD)
        self.view_timestamp = spec is not None and spec[0] == np.dtype("<u8")

    def add(self, rows: npt.NDArray[np.void], timestamps: npt.NDArray[np.uint64]) -> None:
        size = self.dtype.itemsize
        if size == self.row_size:
            self.raw += rows.tobytes()
        else:  # the first ``size`` bytes of each row, viewed in one call
            cut: npt.NDArray[np.uint8] = np.ndarray(
                (len(rows), size), np.uint8, rows, 0, (self.row_size, 1)
            )
            self.raw += cut.tobytes()
        if not self.view_timestamp:
            self.timestamps.append(timestamps)

    def build(self) -> TopicData:
        data: npt.NDArray[np.void] = np.frombuffer(self.raw, self.dtype)
        timestamps: npt.NDArray[np.uint64]
        if self.view_timestamp:
            timestamps = data[TIMESTAMP_FIELD]
        elif self.timestamps:
            timestamps = np.concatenate(self.timestamps)
        else:
            timestamps = np.zeros(len(data), np.uint64)
        return TopicData(
            self.name, self.multi_id, tuple(self.msg_ids), self.dtype, data, timestamps
        )


def _compact(dtype: np.dtype[np.void]) -> np.dtype[np.void]:
    """``dtype`` with its itemsize cut to the end of its last field."""
    fields = dtype.fields
    if not fields:
        return dtype
    end = max(offset + field.itemsize for field, offset, *_ in fields.values())
    if end == dtype.itemsize:
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
    """Folds the event stream into the parts of a :class:`ULogData`."""

    def __init__(self) -> None:
        self.header: FileHeader | None = None
        self.flag_bits: FlagBits | None = None
        self.formats: dict[str, FormatDefined] = {}
        self.info: dict[str, InfoValue] = {}
        self.info_multiple: dict[str, list[InfoValue]] = {}
        self.initial_parameters: dict[str, int | float] = {}
        self.changed_parameters: list[Parameter] = []
        self.default_parameters: list[ParameterDefault] = []
        self.logged_messages: list[LoggedString] = []
        self.dropouts: list[Dropout] = []
        self.topics: dict[tuple[str, int], _TopicBuilder] = {}
        self.by_msg_id: dict[int, _TopicBuilder] = {}
        self.corruption: list[Corruption] = []
        self.warnings: list[ParserWarning] = []
        self.truncated: Truncated | None = None

    def add(self, event: ULogEvent) -> None:
        if type(event) is DataRows:  # the common case first, without a match
            builder = self.by_msg_id.get(event.subscription.msg_id)
            if builder is not None:
                builder.add(event.rows, event.timestamps_us)
            return
        if type(event) is Parameter:
            if event.timestamp_us is None:
                self.initial_parameters[event.name] = event.value
            else:
                self.changed_parameters.append(event)
            return
        match event:
            case Subscription():
                self._subscribe(event)
            case InfoMultiple(key, _, value, is_continued, _):
                values = self.info_multiple.setdefault(key, [])
                if is_continued and values:
                    values[-1] = _join(values[-1], value)
                else:
                    values.append(value)
            case Info(key, _, value, _):
                self.info[key] = value
            case FormatDefined():
                self.formats[event.name] = event
            case ParameterDefault():
                self.default_parameters.append(event)
            case LoggedString():
                self.logged_messages.append(event)
            case Dropout():
                self.dropouts.append(event)
            case FileHeader():
                self.header = event
            case FlagBits():
                self.flag_bits = event
            case Corruption():
                self.corruption.append(event)
            case ParserWarning():
                self.warnings.append(event)
            case Truncated():
                self.truncated = event
            case _:
                pass

    def _subscribe(self, subscription: Subscription) -> None:
        key = (subscription.name, subscription.multi_id)
        builder = self.topics.get(key)
        if builder is None:
            builder = _TopicBuilder(subscription)
            self.topics[key] = builder
        elif builder.dtype != _compact(subscription.dtype):
            text = (
                f"{subscription.name!r} instance {subscription.multi_id} re-subscribed with a "
                f"different format (msg_id {subscription.msg_id}); its rows are left out"
            )
            self.warnings.append(ParserWarning(-1, text))
            self.by_msg_id.pop(subscription.msg_id, None)
            return
        elif subscription.msg_id not in builder.msg_ids:
            builder.msg_ids.append(subscription.msg_id)
        self.by_msg_id[subscription.msg_id] = builder

    def result(self, last_timestamp_us: int) -> ULogData:
        if self.header is None:  # the parser raises before this can happen
            msg = "no ULog file header"
            raise ULogFormatError(msg, offset=0)
        topics = {key: builder.build() for key, builder in self.topics.items()}
        return ULogData(
            header=self.header,
            flag_bits=self.flag_bits,
            formats=self.formats,
            info=self.info,
            info_multiple=self.info_multiple,
            initial_parameters=self.initial_parameters,
            changed_parameters=self.changed_parameters,
            default_parameters=self.default_parameters,
            logged_messages=self.logged_messages,
            dropouts=self.dropouts,
            topics=topics,
            corruption=self.corruption,
            warnings=self.warnings,
            truncated=self.truncated,
            start_timestamp_us=self.header.timestamp_us,
            last_timestamp_us=last_timestamp_us,
        )


def _join(first: InfoValue, piece: InfoValue) -> InfoValue:
    """Extend a multi-info value with its ``is_continued`` piece."""
    if isinstance(first, str) and isinstance(piece, str):
        return first + piece
    if isinstance(first, bytes) and isinstance(piece, bytes):
        return first + piece
    head = first if isinstance(first, tuple) else _as_tuple(first)
    tail = piece if isinstance(piece, tuple) else _as_tuple(piece)
    return head + tail


def _as_tuple(value: InfoValue) -> tuple[int | float | bool, ...]:
    if isinstance(value, str):
        return tuple(value.encode())
    if isinstance(value, bytes):
        return tuple(value)
    if isinstance(value, tuple):
        return value
    return (value,)
