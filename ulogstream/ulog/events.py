"""What the ULog parser reports: frozen slotted values, one per message (data rows in batches)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

if TYPE_CHECKING:
    from collections.abc import Callable

    import numpy as np
    import numpy.typing as npt

InfoValue = str | int | float | bool | bytes | tuple[int | float | bool, ...]
"""An 'I'/'M'/'P'/'Q' value decoded by the type in its key: ``char[N]`` gives str,
``uint8_t[N]`` gives bytes, other arrays give tuples, scalars give int/float/bool."""


class FieldDefinition(msgspec.Struct, frozen=True):
    """One field of an 'F' format: ``type_name[array_length] name``."""

    type_name: str
    array_length: int | None
    name: str


class FileHeader(msgspec.Struct, frozen=True):
    """The 16-byte file header."""

    version: int
    timestamp_us: int


class FlagBits(msgspec.Struct, frozen=True):
    """'B': compatibility flags and the offsets of appended data."""

    compat_flags: bytes
    incompat_flags: bytes
    appended_offsets: tuple[int, int, int]


class FormatDefined(msgspec.Struct, frozen=True):
    """'F': a message format, ``name:type field;...``."""

    name: str
    fields: tuple[FieldDefinition, ...]


class Info(msgspec.Struct, frozen=True):
    """'I': one key/value pair; ``timestamp_us`` is None in the definitions section."""

    key: str
    type_name: str
    value: InfoValue
    timestamp_us: int | None


class InfoMultiple(msgspec.Struct, frozen=True):
    """'M': one piece of a multi-valued key; ``is_continued`` pieces extend the previous one."""

    key: str
    type_name: str
    value: InfoValue
    is_continued: bool
    timestamp_us: int | None


class Parameter(msgspec.Struct, frozen=True):
    """'P': a parameter value; in the data section a change, stamped with the last timestamp."""

    name: str
    value: int | float
    timestamp_us: int | None


class ParameterDefault(msgspec.Struct, frozen=True):
    """'Q': a default value; ``default_types`` bit 0: system wide, bit 1: this configuration."""

    name: str
    value: int | float
    default_types: int


class Subscription:
    """'A': topic instance ``(name, multi_id)`` now logged under ``msg_id``.

    ``dtype`` is the format flattened to named scalar fields (pyulog's names: ``field``,
    ``arr[i]``, ``nested.sub``, ``nested[i].sub``; ``char[N]`` as one ``S{N}`` field), padding
    left out but its room kept, so ``itemsize`` is the full struct size.

    A frozen value like the other events. The parser passes a function that builds the dtype,
    called at the first read of :attr:`dtype`: a recorder that decodes no row never builds one
    (nor imports numpy).
    """

    __slots__ = ("_dtype", "msg_id", "multi_id", "name")
    __match_args__ = ("msg_id", "multi_id", "name", "dtype")

    msg_id: int
    multi_id: int
    name: str
    _dtype: np.dtype[np.void] | Callable[[], np.dtype[np.void]]

    def __init__(
        self,
        msg_id: int,
        multi_id: int,
        name: str,
        dtype: np.dtype[np.void] | Callable[[], np.dtype[np.void]],
    ) -> None:
        for attribute, value in (
            ("msg_id", msg_id),
            ("multi_id", multi_id),
            ("name", name),
            ("_dtype", dtype),
        ):
            object.__setattr__(self, attribute, value)

    @property
    def dtype(self) -> np.dtype[np.void]:
        """The flattened dtype (built at the first read when given as a function)."""
        dtype = self._dtype
        if callable(dtype):
            dtype = dtype()
            object.__setattr__(self, "_dtype", dtype)
        return dtype

    def __setattr__(self, name: str, value: object) -> None:
        msg = f"cannot assign to field {name!r}"
        raise AttributeError(msg)

    def __delattr__(self, name: str) -> None:
        msg = f"cannot delete field {name!r}"
        raise AttributeError(msg)

    def __eq__(self, other: object) -> bool:
        if type(other) is not Subscription:
            return NotImplemented
        mine = (self.msg_id, self.multi_id, self.name)
        return mine == (other.msg_id, other.multi_id, other.name) and self.dtype == other.dtype

    def __hash__(self) -> int:
        return hash((self.msg_id, self.multi_id, self.name))

    def __repr__(self) -> str:
        return (
            f"Subscription(msg_id={self.msg_id!r}, multi_id={self.multi_id!r}, "
            f"name={self.name!r}, dtype={self.dtype!r})"
        )


class Unsubscription(msgspec.Struct, frozen=True):
    """'R': ``msg_id`` is no longer logged."""

    msg_id: int


class DataRows(msgspec.Struct, frozen=True):
    """'D' messages of one subscription, in log order, as a structured array.

    ``timestamps_us`` is the ``timestamp`` field in microseconds with wrap-around of small
    timestamp types unrolled (uint8 timestamps are in milliseconds on the wire).
    """

    subscription: Subscription
    rows: npt.NDArray[np.void]
    timestamps_us: npt.NDArray[np.uint64]


class LoggedString(msgspec.Struct, frozen=True):
    """'L' (``tag`` None) or 'C' (tagged): a printf-style message with its level byte."""

    level: int
    tag: int | None
    timestamp_us: int
    text: str


class Sync(msgspec.Struct, frozen=True):
    """'S': a synchronization marker."""

    offset: int


class Dropout(msgspec.Struct, frozen=True):
    """'O': ``duration_ms`` of lost messages, after the last timestamp seen."""

    duration_ms: int
    timestamp_us: int | None


class DefinitionsEnd(msgspec.Struct, frozen=True):
    """The definitions section ended at ``offset`` (first 'A' or 'L' message)."""

    offset: int


class Corruption(msgspec.Struct, frozen=True):
    """Bytes that could not be valid messages, skipped until the parser found its footing again.

    ``offset`` is where the bad message began, ``skipped`` how many bytes were passed over.
    """

    offset: int
    skipped: int
    reason: str


class DataWithoutSubscription(msgspec.Struct, frozen=True):
    """A well-formed 'D' message whose ``msg_id`` has no subscription: its row cannot be read.

    Its 'A' message was lost (damage, a dropout before it); the message is skipped whole, and it
    is no damage of its own: readers count these apart from :class:`Corruption`.
    """

    offset: int
    msg_id: int


class Truncated(msgspec.Struct, frozen=True):
    """The stream ended ``size`` bytes into a message at ``offset``; that tail was discarded."""

    offset: int
    size: int


class ParserWarning(msgspec.Struct, frozen=True):
    """Something a reader may want to know but that does not stop parsing (unknown type, ...)."""

    offset: int
    text: str


ULogEvent = (
    FileHeader
    | FlagBits
    | FormatDefined
    | Info
    | InfoMultiple
    | Parameter
    | ParameterDefault
    | Subscription
    | Unsubscription
    | DataRows
    | LoggedString
    | Sync
    | Dropout
    | DefinitionsEnd
    | Corruption
    | DataWithoutSubscription
    | Truncated
    | ParserWarning
)
"""Everything :meth:`ULogParser.receive_bytes` can return."""
