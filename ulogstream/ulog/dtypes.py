"""'F' format strings to flattened, packed little-endian numpy dtypes (compiled once, cached).

numpy is imported when a dtype is first built, not with this module: a recorder that decodes no
row (``record`` without MQTT) frames messages with sizes and offsets alone and never loads it.
"""

from __future__ import annotations

import functools
import re
import sys
from collections import Counter
from typing import TYPE_CHECKING, TypeAlias

import msgspec

from ulogstream.errors import ULogFormatError
from ulogstream.ulog.events import FieldDefinition, FormatDefined, RowLayout
from ulogstream.ulog.spec import PADDING_PREFIX, TIMESTAMP_FIELD, TYPE_SIZES

if TYPE_CHECKING:
    from collections.abc import Mapping

    import numpy as np

MAX_ARRAY_LENGTH = 0xFFFF
"""No array in a format can be longer than a message payload."""

MAX_NESTING_DEPTH = 32
"""Nested formats deeper than this are refused (a cycle or a corrupt definition)."""

NUMPY_TYPES: dict[str, str] = {
    "int8_t": "i1",
    "uint8_t": "u1",
    "int16_t": "<i2",
    "uint16_t": "<u2",
    "int32_t": "<i4",
    "uint32_t": "<u4",
    "int64_t": "<i8",
    "uint64_t": "<u8",
    "float": "<f4",
    "double": "<f8",
    "bool": "?",
    "char": "S1",
}
"""Basic ULog types as little-endian numpy type strings (``char[N]`` becomes ``S{N}``)."""

TIMESTAMP_TYPES: dict[str, tuple[int, int]] = {
    "uint64_t": (0, 1),
    "int64_t": (0, 1),
    "uint32_t": (1 << 32, 1),
    "uint16_t": (1 << 16, 1),
    "uint8_t": (1 << 8, 1000),
}
"""Accepted ``timestamp`` types: (wrap-around modulus or 0 for none, factor to microseconds)."""

_FIELD_RE = re.compile(r"^([A-Za-z_]\w*)(?:\[(\d{1,6})\])?$")
_NAME_RE = re.compile(r"^[A-Za-z_][\w/]*$")


class TimestampField(msgspec.Struct, frozen=True):
    """Where a subscription's ``timestamp`` is and how to turn it into microseconds.

    Attributes:
        offset: Byte offset in the row.
        type_name: The ULog type (uint64_t, uint32_t, uint16_t or uint8_t).
        modulus: Wrap-around modulus of the raw value (0: it does not wrap).
        scale: Factor from the raw unit to microseconds (1000 for uint8_t milliseconds).
    """

    offset: int
    type_name: str
    modulus: int
    scale: int


class CompiledFormat(RowLayout, frozen=True, dict=True):
    """A format compiled for decoding 'D' payloads: its flattened :class:`RowLayout` and more.

    Attributes:
        names: The flattened field names (pyulog's), padding left out.
        types: Their little-endian numpy type strings.
        offsets: Their byte offsets in the row.
        size: The full struct size in bytes (``dtype.itemsize``).
        trailing_padding: Bytes of top-level ``_padding`` at the end, which PX4 omits from 'D'.
        timestamp: The top-level ``timestamp`` field, or None when there is no usable one.
    """

    trailing_padding: int
    timestamp: TimestampField | None


def parse_format(text: str, *, offset: int = 0) -> FormatDefined:
    """Parse the text of an 'F' message, ``name:type field;type[N] field;...``.

    Results are cached by text: logs of one firmware repeat the same definitions.

    Args:
        text: The decoded payload.
        offset: Stream offset of the message, for the error.

    Raises:
        ULogFormatError: The text is not a format definition.
    """
    try:
        return _parse_format(text)
    except ValueError as err:
        raise ULogFormatError(str(err), offset=offset) from None


@functools.lru_cache(maxsize=4096)
def _parse_format(text: str) -> FormatDefined:
    name, colon, body = text.partition(":")
    name = name.strip()
    if not colon or not _NAME_RE.match(name):
        msg = f"format definition {text[:60]!r} has no valid 'name:' prefix"
        raise ValueError(msg)
    fields: list[FieldDefinition] = []
    for item in body.split(";"):
        if not item.strip():
            continue
        parts = item.split()
        match = _FIELD_RE.match(parts[0]) if len(parts) == 2 else None  # noqa: PLR2004
        if match is None or not _NAME_RE.match(parts[1]):
            msg = f"format {name!r} has a malformed field {item[:60]!r}"
            raise ValueError(msg)
        length = None if match.group(2) is None else int(match.group(2))
        if length is not None and length > MAX_ARRAY_LENGTH:
            msg = f"format {name!r} field {parts[1]!r} has an array of {length} elements"
            raise ValueError(msg)
        # Type names and many field names (timestamp, x, _padding0) repeat across formats:
        # one string each instead of one per field (about 150 KiB less on a v1.17 log).
        fields.append(FieldDefinition(sys.intern(match.group(1)), length, sys.intern(parts[1])))
    return FormatDefined(name, tuple(fields))


def format_closure(name: str, formats: Mapping[str, FormatDefined]) -> tuple[FormatDefined, ...]:
    """``name``'s format followed by every nested format it uses, each once.

    Raises:
        KeyError: ``name`` or a nested type is not defined; the message names it.
    """
    seen: dict[str, FormatDefined] = {}
    todo = [name]
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        if current not in formats:
            raise KeyError(current)
        fmt = formats[current]
        seen[current] = fmt
        todo.extend(f.type_name for f in fmt.fields if f.type_name not in TYPE_SIZES)
    return tuple(seen.values())


def compile_format(name: str, formats: Mapping[str, FormatDefined]) -> CompiledFormat:
    """Compile format ``name`` (resolving nested formats in ``formats``) for decoding.

    Results are cached by the definitions involved, so each format is compiled once.

    Raises:
        ULogFormatError: A type is undefined, nesting is cyclic or too deep, or the struct
            is larger than a message can carry (``offset`` is 0: the caller knows where).
    """
    try:
        closure = format_closure(name, formats)
    except KeyError as err:
        msg = f"format {name!r} uses the undefined type {err.args[0]!r}"
        raise ULogFormatError(msg, offset=0) from None
    return _compile(closure)


@functools.lru_cache(maxsize=4096)
def _compile(closure: tuple[FormatDefined, ...]) -> CompiledFormat:
    by_name = {fmt.name: fmt for fmt in closure}
    root = closure[0]
    sizes: dict[str, int] = {}
    size = _struct_size(root, by_name, sizes, 0)
    if size > MAX_ARRAY_LENGTH:
        msg = f"format {root.name!r} is {size} bytes, larger than any message"
        raise ULogFormatError(msg, offset=0)
    flat = _Flattener(sizes, by_name)
    flat.flatten(root, "", 0)
    duplicates = [name for name, count in Counter(flat.names).items() if count > 1]
    if duplicates:
        msg = f"format {root.name!r} has two fields named {duplicates[0]!r}"
        raise ULogFormatError(msg, offset=0)
    trailing = 0
    for field in reversed(root.fields):
        if not field.name.startswith(PADDING_PREFIX):
            break
        trailing += _field_size(field, sizes)
    timestamp = _timestamp_field(root, sizes)
    names, types, offsets = tuple(flat.names), tuple(flat.types), tuple(flat.offsets)
    return CompiledFormat(names, types, offsets, size, trailing, timestamp)


def nested_dtype(
    name: str, formats: Mapping[str, FormatDefined], *, strip_trailing_padding: bool = False
) -> np.dtype[np.void]:
    """The packed dtype of format ``name`` with its nesting kept (for exporters and the simulator).

    Nested formats become structured fields and arrays subarrays (:func:`compile_format` flattens
    both instead); ``char[N]`` is ``S{N}`` and a lone ``char`` one byte (``u1``). Padding fields
    get no name but keep their bytes, so ``itemsize`` and every offset are those of the flat
    dtype, and a row decoded by the parser can be viewed with this dtype without a copy.

    Args:
        name: The format.
        formats: Every format, for the nested ones.
        strip_trailing_padding: End the struct before its top-level trailing ``_padding``,
            as PX4's logger does in 'D' messages.

    Raises:
        ULogFormatError: A type is undefined, nesting is cyclic or too deep, or the struct is
            larger than a message can carry.
    """
    import numpy as np  # noqa: PLC0415 (see the module's docstring)

    compiled = compile_format(name, formats)  # validates the whole closure first
    names, types, offsets, size = _nested_fields(name, formats)
    if strip_trailing_padding:
        size -= compiled.trailing_padding
    return np.dtype({"names": names, "formats": types, "offsets": offsets, "itemsize": size})


_TypeSpec: TypeAlias = "str | np.dtype[np.void] | tuple[str | np.dtype[np.void], tuple[int, ...]]"


def _nested_fields(
    name: str, formats: Mapping[str, FormatDefined]
) -> tuple[list[str], list[_TypeSpec], list[int], int]:
    """Names, numpy types and offsets of the named fields of ``name``, and its full size."""
    import numpy as np  # noqa: PLC0415 (see the module's docstring)

    names: list[str] = []
    types: list[_TypeSpec] = []
    offsets: list[int] = []
    offset = 0
    for field in formats[name].fields:
        shape = () if field.array_length is None else (field.array_length,)
        base: str | np.dtype[np.void]
        if field.type_name == "char":
            # char[N] is one string; a lone char is a byte (a ROS char is a uint8)
            base, size, shape = ("u1", 1, ()) if not shape else (f"S{shape[0]}", shape[0], ())
        elif field.type_name in NUMPY_TYPES:
            base, size = NUMPY_TYPES[field.type_name], TYPE_SIZES[field.type_name]
        else:
            sub_names, sub_types, sub_offsets, size = _nested_fields(field.type_name, formats)
            base = np.dtype(
                {"names": sub_names, "formats": sub_types, "offsets": sub_offsets, "itemsize": size}
            )
        if not field.name.startswith(PADDING_PREFIX):
            names.append(field.name)
            types.append((base, shape) if shape else base)
            offsets.append(offset)
        offset += size * (shape[0] if shape else 1)
    return names, types, offsets, offset


def _struct_size(
    fmt: FormatDefined, by_name: Mapping[str, FormatDefined], sizes: dict[str, int], depth: int
) -> int:
    """Size of ``fmt`` in bytes, memoised in ``sizes``; refuses cycles and deep nesting."""
    if fmt.name in sizes:
        return sizes[fmt.name]
    if depth > MAX_NESTING_DEPTH:
        msg = f"format {fmt.name!r} nests deeper than {MAX_NESTING_DEPTH} levels (a cycle?)"
        raise ULogFormatError(msg, offset=0)
    total = 0
    for field in fmt.fields:
        base = TYPE_SIZES.get(field.type_name)
        if base is None:
            base = _struct_size(by_name[field.type_name], by_name, sizes, depth + 1)
        total += base * (1 if field.array_length is None else field.array_length)
        if total > MAX_ARRAY_LENGTH:
            msg = f"format {fmt.name!r} is larger than any message"
            raise ULogFormatError(msg, offset=0)
    sizes[fmt.name] = total
    return total


def _field_size(field: FieldDefinition, sizes: Mapping[str, int]) -> int:
    base = TYPE_SIZES.get(field.type_name)
    if base is None:
        base = sizes[field.type_name]
    return base * (1 if field.array_length is None else field.array_length)


class _Flattener:
    """Collects the named scalar fields of a struct, nested types expanded in place."""

    def __init__(self, sizes: Mapping[str, int], by_name: Mapping[str, FormatDefined]) -> None:
        self.sizes = sizes
        self.by_name = by_name
        self.names: list[str] = []
        self.types: list[str] = []
        self.offsets: list[int] = []

    def add(self, name: str, type_str: str, offset: int) -> None:
        self.names.append(name)
        self.types.append(type_str)
        self.offsets.append(offset)

    def flatten(self, fmt: FormatDefined, prefix: str, offset: int) -> None:
        for field in fmt.fields:
            size = _field_size(field, self.sizes)
            if field.name.startswith(PADDING_PREFIX) or size == 0:
                pass
            elif field.type_name == "char":
                self.add(prefix + field.name, f"S{size}", offset)
            elif field.type_name in NUMPY_TYPES:
                type_str = NUMPY_TYPES[field.type_name]
                if field.array_length is None:
                    self.add(prefix + field.name, type_str, offset)
                else:
                    step = TYPE_SIZES[field.type_name]
                    for i in range(field.array_length):
                        self.add(f"{prefix}{field.name}[{i}]", type_str, offset + i * step)
            elif field.array_length is None:
                self.flatten(self.by_name[field.type_name], f"{prefix}{field.name}.", offset)
            else:
                step = self.sizes[field.type_name]
                for i in range(field.array_length):
                    sub = f"{prefix}{field.name}[{i}]."
                    self.flatten(self.by_name[field.type_name], sub, offset + i * step)
            offset += size


def _timestamp_field(root: FormatDefined, sizes: Mapping[str, int]) -> TimestampField | None:
    offset = 0
    for field in root.fields:
        if field.name == TIMESTAMP_FIELD:
            if field.array_length is not None or field.type_name not in TIMESTAMP_TYPES:
                return None
            modulus, scale = TIMESTAMP_TYPES[field.type_name]
            return TimestampField(offset, field.type_name, modulus, scale)
        offset += _field_size(field, sizes)
    return None


def field_names(dtype: np.dtype[np.void]) -> tuple[str, ...]:
    """The flattened field names of a subscription dtype, in struct order."""
    return () if dtype.names is None else dtype.names


def string_fields(dtype: np.dtype[np.void]) -> tuple[str, ...]:
    """The ``char[N]`` fields (numpy ``S{N}``) of a subscription dtype."""
    fields = dtype.fields
    if fields is None:
        return ()
    return tuple(name for name, spec in fields.items() if spec[0].kind == "S")


def decode_row(payload: bytes, dtype: np.dtype[np.void]) -> np.void:
    """Decode one 'D' payload (without its msg_id), zero-padding a missing trailing padding."""
    import numpy as np  # noqa: PLC0415 (see the module's docstring)

    if len(payload) < dtype.itemsize:
        payload = payload.ljust(dtype.itemsize, b"\0")
    row: np.void = np.frombuffer(payload, dtype=dtype, count=1)[0]
    return row


RowValue = int | float | bool | str
"""A row field as a plain Python value (``char[N]`` as str)."""


def row_dict(row: np.void) -> dict[str, RowValue]:
    """A decoded row as ``{field: value}`` with plain Python values, strings NUL-trimmed."""
    names = row.dtype.names or ()
    out: dict[str, RowValue] = {}
    for name, value in zip(names, row.tolist(), strict=True):
        if isinstance(value, bytes):
            out[name] = value.split(b"\0", 1)[0].decode(errors="replace")
        elif isinstance(value, int | float | bool):
            out[name] = value
        else:
            out[name] = str(value)
    return out
