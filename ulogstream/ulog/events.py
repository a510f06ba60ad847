"""What the ULog parser reports: frozen slotted values, one per message (data rows in batches)."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import msgspec

if TYPE_CHECKING:
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


def type_code(type_str: str) -> str:
    """A numpy type string of :attr:`RowLayout.types` without its byte order (``<f4``: ``f4``)."""
    return type_str.lstrip("<>|=")


class RowLayout(msgspec.Struct, frozen=True, dict=True):
    """The flattened fields of a row: what a structured dtype says, without numpy.

    Attributes:
        names: The flattened field names (pyulog's), padding left out.
        types: Their numpy type strings (``<f4``, ``u1``, ``?``, ``S6``; byte order optional).
        offsets: Their byte offsets in the row.
        size: The full struct size in bytes (``dtype.itemsize``).
    """

    names: tuple[str, ...]
    types: tuple[str, ...]
    offsets: tuple[int, ...]
    size: int

    @functools.cached_property
    def dtype(self) -> np.dtype[np.void]:
        """The structured dtype of these fields (numpy imported and the dtype built once)."""
        import numpy as np  # noqa: PLC0415 (a recorder that decodes no row never loads numpy)

        dtype: np.dtype[np.void] = np.dtype(
            {
                "names": list(self.names),
                "formats": list(self.types),
                "offsets": list(self.offsets),
                "itemsize": self.size,
            }
        )
        return dtype

    @classmethod
    def of(cls, dtype: np.dtype[np.void] | RowLayout) -> RowLayout:
        """The layout of a structured dtype (a layout as it is)."""
        if isinstance(dtype, RowLayout):
            return dtype
        specs = list((dtype.fields or {}).items())
        return cls(
            tuple(name for name, _ in specs),
            tuple(spec[0].str for _, spec in specs),
            tuple(spec[1] for _, spec in specs),
            dtype.itemsize,
        )


class Subscription:
    """'A': topic instance ``(name, multi_id)`` now logged under ``msg_id``.

    ``dtype`` is the format flattened to named scalar fields (pyulog's names: ``field``,
    ``arr[i]``, ``nested.sub``, ``nested[i].sub``; ``char[N]`` as one ``S{N}`` field), padding
    left out but its room kept, so ``itemsize`` is the full struct size.

    A frozen value like the other events. The parser gives the fields as a :class:`RowLayout`,
    whose dtype is built at the first read of :attr:`dtype`: a recorder that decodes no row,
    or only through :attr:`layout`, never builds one (nor imports numpy).
    """

    __slots__ = ("_fields", "msg_id", "multi_id", "name")
    __match_args__ = ("msg_id", "multi_id", "name", "dtype")

    msg_id: int
    multi_id: int
    name: str
    _fields: np.dtype[np.void] | RowLayout

    def __init__(
        self, msg_id: int, multi_id: int, name: str, dtype: np.dtype[np.void] | RowLayout
    ) -> None:
        for attribute, value in (
            ("msg_id", msg_id),
            ("multi_id", multi_id),
            ("name", name),
            ("_fields", dtype),
        ):
            object.__setattr__(self, attribute, value)

    @property
    def dtype(self) -> np.dtype[np.void]:
        """The flattened dtype (built at the first read when given as a layout)."""
        fields = self._fields
        return fields.dtype if isinstance(fields, RowLayout) else fields

    @property
    def layout(self) -> RowLayout:
        """The flattened fields without numpy (when the parser made this subscription)."""
        return RowLayout.of(self._fields)

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


class UndecodedRows(msgspec.Struct, frozen=True):
    """'D' messages of one subscription in one batch, framed and counted but not decoded.

    What the parser emits for a consumer that publishes at most the newest row of a batch (a
    rate cap): no numpy array is built. Each payload is the message after its msg_id, as
    logged: the top-level trailing padding may be left out (:meth:`newest` puts it back).
    ``timestamp_us`` is the newest row's (a ``uint64_t`` timestamp, read from its bytes).
    """

    subscription: Subscription
    payloads: list[bytes]
    timestamp_us: int

    def newest(self) -> DataRows:
        """The newest row decoded, as :class:`DataRows` (imports numpy)."""
        import numpy as np  # noqa: PLC0415 (only consumers that need an array load numpy)

        dtype = self.subscription.dtype
        row = self.payloads[-1]
        rows: npt.NDArray[np.void] = np.frombuffer(row + bytes(dtype.itemsize - len(row)), dtype)
        timestamps: npt.NDArray[np.uint64] = np.array([self.timestamp_us], np.uint64)
        return DataRows(self.subscription, rows, timestamps)


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
    | UndecodedRows
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
