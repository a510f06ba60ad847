"""Payloads of decoded rows and log values: flat JSON, MessagePack, ROS 2 CDR, JSON schemas.

Every outlet encodes with these: MQTT's samples and the Foxglove view's messages have the same
keys, named as pyulog and ``ulog2csv`` name them, with NaN as null and float32 values in their
shortest round-trip form. An encoder is built once per format and encodes a batch of rows in one
pass.
"""

from __future__ import annotations

import json
import math
import operator
import struct
from typing import TYPE_CHECKING

from ulogstream.live.float_text import FLOAT32_MAX, float32_bits, float32_json, float32_value
from ulogstream.ulog.events import RowLayout, type_code
from ulogstream.ulog.spec import PADDING_PREFIX, TIMESTAMP_FIELD, TYPE_SIZES

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    import numpy as np
    import numpy.typing as npt

    from ulogstream.ulog.events import (
        FieldDefinition,
        FormatDefined,
        InfoValue,
    )


JSON_CONTENT_TYPE = "application/json"


MSGPACK_CONTENT_TYPE = "application/msgpack"


RAW_CONTENT_TYPE = "application/octet-stream"


CDR_CONTENT_TYPE = "application/cdr"


CDR_HEADER = b"\x00\x01\x00\x00"
"""A CDR payload's encapsulation: plain CDR, little endian, no options (as ROS 2 writes it)."""


JsonValue = str | int | float | bool | None | list["JsonValue"] | dict[str, "JsonValue"]


class RowEncoder:
    """Builds flat JSON and MessagePack objects for rows of one structured dtype.

    One row (what a rate cap publishes) is read with ``struct`` from its bytes, without numpy.
    For batches, numeric fields of one type are gathered from the raw bytes with a single fancy
    index and formatted by numpy (float32 in its shortest round-trip form, as one row's are).
    """

    def __init__(self, dtype: np.dtype[np.void] | RowLayout) -> None:
        row_layout = RowLayout.of(dtype)
        layout = _field_layout(row_layout)
        self.itemsize = row_layout.size
        self.keys = self.keys_of(row_layout)
        # Batches: (kind, gather dtype) -> (byte index into a row, output columns); kind: f, i
        # or b. One row (what a rate cap publishes): (offset, column, struct code, size) of each
        # kind, read by a struct of its own (float32 as its bits, the key of the text cache),
        # then put in key order by one itemgetter.
        groups: dict[tuple[str, str], tuple[list[int], list[int]]] = {}
        by_kind: dict[str, list[tuple[int, int, str, int]]] = {
            "f32": [],
            "f64": [],
            "int": [],
            "bool": [],
        }
        self.char_fields: list[tuple[str, int]] = []
        for column, name in enumerate(self.keys):
            dtype_str, offset, size = layout[name]
            kind = _kind(dtype_str)
            if kind == "S":
                self.char_fields.append((name, column))
                continue
            key = (
                ("b", "|u1") if kind == "b" else ("f" if kind == "f" else "i", _ordered(dtype_str))
            )
            index, columns = groups.setdefault(key, ([], []))
            index.extend(range(offset, offset + size))
            columns.append(column)
            code = _STRUCT_CODES[kind, size]
            if code == "f":
                by_kind["f32"].append((offset, column, "I", size))
            else:
                group = "f64" if code == "d" else "bool" if code == "?" else "int"
                by_kind[group].append((offset, column, code, size))
        self._group_lists = groups
        self._groups: list[
            tuple[str, np.dtype[np.void], npt.NDArray[np.intp], npt.NDArray[np.intp]]
        ] = []
        key_part = "".join(f",{json.dumps(k).replace('%', '%%')}:%s" for k in self.keys)
        self.template = '{"t":%s,"timestamp":%d' + key_part + "}"
        structs: list[struct.Struct | None] = []
        order: list[int] = []
        for fields in by_kind.values():
            codes, position = ["<"], 0
            for offset, column, code, size in sorted(fields):
                codes.append(f"{offset - position}x{code}")
                position = offset + size
                order.append(column)
            structs.append(struct.Struct("".join(codes)) if fields else None)
        self._f32_bits, self._f64s, self._ints, self._bools = structs
        self.char_slices = [
            (layout[name][1], layout[name][1] + layout[name][2]) for name, _ in self.char_fields
        ]
        order += [column for _, column in self.char_fields]
        # order[i] is the key column of the i-th value read: the getter wants the inverse
        position_of = {column: i for i, column in enumerate(order)}
        in_key_order = [position_of[column] for column in range(len(self.keys))]
        self._in_key_order: Callable[[list[object]], tuple[object, ...]] = (
            operator.itemgetter(*in_key_order) if len(in_key_order) > 1 else tuple
        )

    @staticmethod
    def keys_of(dtype: np.dtype[np.void] | RowLayout) -> list[str]:
        """The keys of a row's object after ``t`` and ``timestamp``, in payload order."""
        return [name for name in RowLayout.of(dtype).names if name != TIMESTAMP_FIELD]

    @property
    def groups(
        self,
    ) -> list[tuple[str, np.dtype[np.void], npt.NDArray[np.intp], npt.NDArray[np.intp]]]:
        """Per kind and type: (kind, gather dtype, byte index into a row, output columns)."""
        if not self._groups and self._group_lists:
            import numpy as np  # noqa: PLC0415 (one row at a time needs none: built at the first batch)

            self._groups = [
                (kind, np.dtype(gdt), np.array(index, np.intp), np.array(columns, np.intp))
                for (kind, gdt), (index, columns) in self._group_lists.items()
            ]
        return self._groups

    def columns(self, rows: npt.NDArray[np.void]) -> list[list[object]]:
        """Each row's values in key order, formatted as JSON text (numbers, null, strings)."""
        count = len(rows)
        if count == 1:
            return [self.row_values(rows.tobytes())]
        import numpy as np  # noqa: PLC0415 (one row at a time needs none)

        table = np.empty((count, len(self.keys)), dtype=object)
        raw = np.ascontiguousarray(rows).view(np.uint8).reshape(count, self.itemsize)
        for kind, gather_dtype, index, columns in self.groups:
            values = raw.take(index, axis=1).view(gather_dtype)
            if kind == "f":
                text = values.astype(str)
                bad = ~np.isfinite(values)
                if bad.any():
                    text[bad] = "null"
                table[:, columns] = text
            elif kind == "b":
                table[:, columns] = np.where(values != 0, "true", "false")
            else:
                table[:, columns] = values
        for name, column in self.char_fields:
            table[:, column] = [json.dumps(_cut_at_nul(v)) for v in rows[name].tolist()]
        rows_out: list[list[object]] = table.tolist()
        return rows_out

    def row_values(self, row: bytes) -> list[object]:
        """One row's values in key order, as :meth:`columns` formats them, without numpy."""
        return list(self._row_texts(row))

    def _row_texts(self, row: bytes) -> tuple[object, ...]:
        """:meth:`row_values` as a tuple, for the template.

        A rate cap publishes one row at a time, where numpy's per-call cost is most of the
        work. Float32 texts come from a cache shared by every encoder, keyed by the value's
        bits (so -0.0 and each NaN have their own): about 60 % of the values of a real log's
        rows at 10 Hz are the ones the previous row sent, and half are zeros.
        """
        values: list[object] = []
        if self._f32_bits is not None:
            get = _FLOAT32_TEXTS.get
            values = [get(bits) or _float32_text(bits) for bits in self._f32_bits.unpack_from(row)]
        if self._f64s is not None:
            values += [_float64_text(value) for value in self._f64s.unpack_from(row)]
        if self._ints is not None:
            values += self._ints.unpack_from(row)
        if self._bools is not None:
            values += ["true" if value else "false" for value in self._bools.unpack_from(row)]
        for start, end in self.char_slices:
            values.append(json.dumps(_cut_at_nul(row[start:end])))
        return self._in_key_order(values)

    def json_payload(self, row: bytes, stamp: int, time: str) -> bytes:
        """The flat JSON object of one row given as its bytes (trailing padding may be left out)."""
        return (self.template % (time, stamp, *self._row_texts(row))).encode()

    def json_payloads(
        self, rows: npt.NDArray[np.void], stamps: list[int], times: list[str]
    ) -> list[bytes]:
        """One flat JSON object per row."""
        if len(rows) == 1:  # what a rate cap publishes
            return [self.json_payload(rows.tobytes(), stamps[0], times[0])]
        template = self.template
        return [
            (template % (t, stamp, *values)).encode()
            for t, stamp, values in zip(times, stamps, self.columns(rows), strict=True)
        ]

    def msgpack_payloads(
        self, rows: npt.NDArray[np.void], stamps: list[int], times: list[float | None]
    ) -> list[bytes]:
        """The same objects as MessagePack (NaN/Inf as nil, char arrays as strings)."""
        import msgpack  # noqa: PLC0415 (only the msgpack format loads it: 15 ms of start-up)

        keys = self.keys
        payloads: list[bytes] = []
        for t, stamp, row in zip(times, stamps, rows[keys].tolist(), strict=True):
            obj: dict[str, object] = {"t": t, "timestamp": stamp}
            for key, value in zip(keys, row, strict=True):
                obj[key] = _plain_value(value)
            packed: bytes = msgpack.packb(obj)
            payloads.append(packed)
        return payloads


class CdrEncoder:
    """ROS 2 CDR messages of rows of one format: the MCAP export's ``px4_ulog/msg`` types.

    The message's fields are the row's, padding left out, in order, nested formats and arrays
    laid out element by element; each primitive is aligned to its size (at most 8) from the
    start of the message, ``bool`` is one byte 0 or 1, and ``char[N]`` is a ``string`` (a
    ``uint32`` length with the NUL, the text cut at its first NUL, the NUL). Without strings the
    layout is fixed: a batch is one byte gather from the rows into zeroed messages. With
    strings each row is laid out in turn.
    """

    def __init__(self, dtype: np.dtype[np.void]) -> None:
        import numpy as np  # noqa: PLC0415 (CDR is not the default encoding)

        self.itemsize = dtype.itemsize
        leaves = [
            (_kind(dtype_str), offset, size)
            for name, (dtype_str, offset, size) in _field_layout(RowLayout.of(dtype)).items()
            if not _is_padding_key(name)
        ]
        self._leaves = leaves
        self._has_strings = any(kind == "S" for kind, _, _ in leaves)
        src: list[int] = []
        dst: list[int] = []
        bools: list[int] = []
        position = 0
        for kind, offset, size in [] if self._has_strings else leaves:
            position = _aligned(position, size)
            src.extend(range(offset, offset + size))
            dst.extend(range(position, position + size))
            if kind == "b":
                bools.append(position)
            position += size
        if not leaves:
            position = 1  # ROS 2's empty message: one uint8 member, 0
        self.size = position
        """Bytes of each message after the header (formats without strings)."""
        self._src = np.array(src, dtype=np.intp)
        self._dst = np.array(dst, dtype=np.intp)
        self._bools = np.array(bools, dtype=np.intp)

    def payloads(self, rows: npt.NDArray[np.void]) -> list[bytes]:
        """One CDR message (with its encapsulation header) per row."""
        import numpy as np  # noqa: PLC0415 (CDR is not the default encoding)

        count = len(rows)
        raw = np.ascontiguousarray(rows).view(np.uint8).reshape(count, self.itemsize)
        if self._has_strings:
            return [self._row_with_strings(row) for row in raw]
        out = np.zeros((count, len(CDR_HEADER) + self.size), dtype=np.uint8)
        out[:, : len(CDR_HEADER)] = np.frombuffer(CDR_HEADER, dtype=np.uint8)
        body = out[:, len(CDR_HEADER) :]
        body[:, self._dst] = raw[:, self._src]
        if len(self._bools):
            body[:, self._bools] = body[:, self._bools] != 0
        data = out.tobytes()
        step = out.shape[1]
        return [data[i : i + step] for i in range(0, len(data), step)]

    def _row_with_strings(self, row: npt.NDArray[np.uint8]) -> bytes:
        data = row.tobytes()
        out = bytearray()
        for kind, offset, size in self._leaves:
            value = data[offset : offset + size]
            if kind == "S":
                text = value.split(b"\0", 1)[0].decode("utf-8", "replace").encode()
                out += bytes(_aligned(len(out), 4) - len(out))
                out += (len(text) + 1).to_bytes(4, "little") + text + b"\0"
                continue
            out += bytes(_aligned(len(out), size) - len(out))
            out += b"\x01" if kind == "b" and value != b"\0" else value
        return CDR_HEADER + bytes(out)


def _aligned(position: int, size: int) -> int:
    """``position`` moved up to CDR's alignment of a primitive of ``size`` bytes."""
    align = min(size, 8)
    return -(-position // align) * align


def _is_padding_key(name: str) -> bool:
    """Whether a flat field name is (inside) padding: ``_padding0``, ``esc[0]._padding0``."""
    return name.startswith(PADDING_PREFIX) or f".{PADDING_PREFIX}" in name


_JSON_TYPES: dict[str, str] = {
    "f": "number",  # NaN and Inf are sent as null (see row_json_schema)
    "b": "boolean",
    "S": "string",  # char[N], cut at the first NUL
}

_NOT_FINITE = "null where the logged value is NaN or infinite"


def row_json_schema(name: str, dtype: np.dtype[np.void] | RowLayout) -> dict[str, JsonValue]:
    """A JSON Schema of the JSON sample objects :class:`RowEncoder` builds for ``dtype``.

    The same keys in the same order: ``t`` (wall-clock seconds), ``timestamp`` (vehicle time in
    microseconds), then every field as pyulog flattens it (``q[0]``, ``nested.sub``). Each
    ``type`` is one name, never a list: the Foxglove lineage's viewers (Foxglove, Lichtblick)
    refuse a channel whose schema has ``["number", "null"]``, so a float field is ``"number"``
    and says in its description that NaN and infinities are sent as null.
    """
    properties: dict[str, JsonValue] = {
        "t": {"type": "number", "description": "wall-clock time of the sample, epoch seconds"},
        TIMESTAMP_FIELD: {"type": "integer", "description": "vehicle time, microseconds"},
    }
    layout = _field_layout(RowLayout.of(dtype))
    for key in RowEncoder.keys_of(dtype):
        kind = _kind(layout[key][0])
        field: dict[str, JsonValue] = {"type": _JSON_TYPES.get(kind, "integer")}
        if kind == "f":
            field["description"] = _NOT_FINITE
        properties[key] = field
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": name,
        "type": "object",
        "properties": properties,
        "required": list(properties),
    }


def json_sample_time(payload: bytes) -> float:
    """The ``t`` of a JSON sample payload of :class:`RowEncoder` (its first key), unparsed.

    Raises:
        ValueError: ``payload`` is not such a sample.
    """
    if not payload.startswith(b'{"t":'):
        msg = "not a JSON sample payload"
        raise ValueError(msg)
    return float(payload[5 : payload.index(b",", 5)])


def _field_layout(layout: RowLayout) -> dict[str, tuple[str, int, int]]:
    """Each field of a row: ``name -> (numpy type string, offset, itemsize)``."""
    return {
        name: (type_str, offset, _size(type_str))
        for name, type_str, offset in zip(layout.names, layout.types, layout.offsets, strict=True)
    }


def _kind(type_str: str) -> str:
    """The numpy kind of a type string: ``f``, ``u``, ``i``, ``b`` (bool) or ``S``."""
    code = type_code(type_str)
    return "b" if code == "?" else code[0]


def _size(type_str: str) -> int:
    """The bytes of a scalar numpy type string (``<f4``: 4, ``?``: 1, ``S6``: 6)."""
    code = type_code(type_str)
    return 1 if code == "?" else int(code[1:])


def _ordered(type_str: str) -> str:
    """A type string with its byte order (``<`` for multi-byte types, ``|`` for one byte)."""
    code = type_code(type_str)
    return f"|{code}" if code == "?" or _size(code) == 1 else f"<{code}"


_STRUCT_CODES: dict[tuple[str, int], str] = {
    ("f", 4): "f",
    ("f", 8): "d",
    ("b", 1): "?",
    ("u", 1): "B",
    ("u", 2): "H",
    ("u", 4): "I",
    ("u", 8): "Q",
    ("i", 1): "b",
    ("i", 2): "h",
    ("i", 4): "i",
    ("i", 8): "q",
}
"""``struct`` codes of the numeric ULog types, by numpy kind and size."""


_FLOAT32_TEXTS: dict[int, str] = {}
"""Texts of float32 values already formatted, by their bits (at most :data:`FLOAT_TEXT_CACHE`)."""


FLOAT_TEXT_CACHE = 1 << 16
"""Most float32 texts kept; the cache starts over when full."""


def _float32_text(bits: int) -> str:
    """The float32 of ``bits`` as JSON text (:func:`float32_json`), kept in the cache."""
    text = float32_json(bits)
    if len(_FLOAT32_TEXTS) >= FLOAT_TEXT_CACHE:
        _FLOAT32_TEXTS.clear()
    _FLOAT32_TEXTS[bits] = text
    return text


def _float64_text(value: float) -> str:
    """A float64 value as numpy writes it (Python's shortest round trip is the same text)."""
    return repr(value) if math.isfinite(value) else "null"


def _cut_at_nul(value: object) -> str:
    if isinstance(value, bytes):
        return value.split(b"\0", 1)[0].decode("utf-8", "replace")
    return str(value)


def _plain_value(value: object) -> object:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, bytes):
        return _cut_at_nul(value)
    return value


def _json_number(value: float) -> str:
    """A parameter or info number as JSON: float32-exact values in their shortest form."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if not math.isfinite(value):
        return "null"
    if abs(value) <= FLOAT32_MAX:
        bits = float32_bits(value)
        if float32_value(bits) == value:
            return float32_json(bits)
    return repr(value)


def _info_json(value: InfoValue) -> JsonValue:
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, tuple):
        return [_info_json(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _format_string(fmt: FormatDefined) -> str:
    parts = "".join(
        f"{f.type_name}{'' if f.array_length is None else f'[{f.array_length}]'} {f.name};"
        for f in fmt.fields
    )
    return f"{fmt.name}:{parts}"


def _flat_fields(
    name: str, formats: Mapping[str, FormatDefined], prefix: str = "", depth: int = 0
) -> list[list[str]]:
    """``[flat name, type]`` pairs as pyulog names them; unknown nested types are kept whole."""
    fmt = formats.get(name)
    if fmt is None or depth > len(formats):
        return []
    out: list[list[str]] = []
    for f in fmt.fields:
        if f.name.startswith(PADDING_PREFIX):
            continue
        out.extend(_flat_field(f, formats, prefix, depth))
    return out


def _flat_field(
    f: FieldDefinition, formats: Mapping[str, FormatDefined], prefix: str, depth: int
) -> list[list[str]]:
    base = f"{prefix}{f.name}"
    if f.type_name == "char" and f.array_length is not None:
        return [[base, f"char[{f.array_length}]"]]
    names = [base] if f.array_length is None else [f"{base}[{i}]" for i in range(f.array_length)]
    if f.type_name in TYPE_SIZES or f.type_name not in formats:
        return [[n, f.type_name] for n in names]
    return [sub for n in names for sub in _flat_fields(f.type_name, formats, f"{n}.", depth + 1)]


def _nested_formats(
    name: str, formats: Mapping[str, FormatDefined], seen: dict[str, str]
) -> dict[str, str]:
    fmt = formats.get(name)
    if fmt is None or name in seen:
        return seen
    seen[name] = _format_string(fmt)
    for f in fmt.fields:
        if f.type_name not in TYPE_SIZES:
            _nested_formats(f.type_name, formats, seen)
    return seen


def _dumps(obj: Mapping[str, object]) -> bytes:
    return json.dumps(obj, allow_nan=False, separators=(",", ":")).encode()
