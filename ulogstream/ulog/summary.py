"""The one fold of a log's events that every whole-log reader shares: everything but the rows.

:class:`~ulogstream.ulog.reader.ULogReader` (a whole file into arrays) and the command line's
``info``/``params`` summary (a streaming pass) both need the header, definitions, info,
parameters, logged strings, dropouts and damage of a log; each adds what it does with
subscriptions and rows. The fold lives here once, so both read a log the same way (a continued
'M' value is joined to its first piece in both, for instance).
"""

from __future__ import annotations

import msgspec

from ulogstream.ulog.events import (
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
    ULogEvent,
)
from ulogstream.ulog.problems import Problems


class LogDescription(msgspec.Struct):
    """What a log says besides its rows, folded event by event (see the module docstring).

    Attributes:
        header: The file header (None until it has been read).
        flag_bits: The 'B' message, None in logs older than it.
        formats: Format definitions by name.
        info: 'I' values by key (a later value replaces an earlier one).
        info_multiple: 'M' values by key; each item joins one value's ``is_continued`` pieces.
        initial_parameters: 'P' values of the definitions section.
        changed_parameters: 'P' messages of the data section, stamped with the last data time.
        default_parameters: 'Q' messages in log order.
        logged_messages: 'L' and 'C' messages in log order ('C' have a ``tag``).
        dropouts: 'O' messages.
        problems: Corruption, data without subscription, parser warnings and truncation.
    """

    header: FileHeader | None = None
    flag_bits: FlagBits | None = None
    formats: dict[str, FormatDefined] = msgspec.field(default_factory=dict)
    info: dict[str, InfoValue] = msgspec.field(default_factory=dict)
    info_multiple: dict[str, list[InfoValue]] = msgspec.field(default_factory=dict)
    initial_parameters: dict[str, int | float] = msgspec.field(default_factory=dict)
    changed_parameters: list[Parameter] = msgspec.field(default_factory=list)
    default_parameters: list[ParameterDefault] = msgspec.field(default_factory=list)
    logged_messages: list[LoggedString] = msgspec.field(default_factory=list)
    dropouts: list[Dropout] = msgspec.field(default_factory=list)
    problems: Problems = msgspec.field(default_factory=Problems)

    def add(self, event: ULogEvent) -> bool:
        """Fold ``event`` in; False for the events about rows (subscriptions, data), left over."""
        if type(event) is Parameter:
            if event.timestamp_us is None:
                self.initial_parameters[event.name] = event.value
            else:
                self.changed_parameters.append(event)
            return True
        match event:
            case InfoMultiple(key, _, value, is_continued, _):
                values = self.info_multiple.setdefault(key, [])
                if is_continued and values:
                    values[-1] = join_pieces(values[-1], value)
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
            case _:
                return self.problems.add(event)
        return True


def join_pieces(first: InfoValue, piece: InfoValue) -> InfoValue:
    """An 'M' value extended with its ``is_continued`` piece (text and bytes joined)."""
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
