"""Format strings -> flattened numpy dtypes: nested types, arrays, char strings, padding."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from ulogstream.errors import ULogFormatError
from ulogstream.ulog.dtypes import (
    TimestampField,
    compile_format,
    decode_row,
    field_names,
    nested_dtype,
    parse_format,
    row_dict,
    string_fields,
)
from ulogstream.ulog.events import FieldDefinition, FormatDefined


def formats(*texts: str) -> dict[str, FormatDefined]:
    parsed = [parse_format(t) for t in texts]
    return {f.name: f for f in parsed}


def test_parse_format_fields() -> None:
    fmt = parse_format("vehicle_gps:uint64_t timestamp;float[3] v;char[10] s;inner x;")
    assert fmt == FormatDefined(
        "vehicle_gps",
        (
            FieldDefinition("uint64_t", None, "timestamp"),
            FieldDefinition("float", 3, "v"),
            FieldDefinition("char", 10, "s"),
            FieldDefinition("inner", None, "x"),
        ),
    )


def test_parse_format_tolerates_missing_final_semicolon_and_spaces() -> None:
    assert parse_format("t: uint8_t a ;uint8_t b").fields == (
        FieldDefinition("uint8_t", None, "a"),
        FieldDefinition("uint8_t", None, "b"),
    )


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("no colon", "has no valid 'name:' prefix"),
        (":uint8_t a;", "has no valid 'name:' prefix"),
        ("t:uint8_t;", "malformed field 'uint8_t'"),
        ("t:uint8_t[x] a;", "malformed field"),
        ("t:uint8_t a b;", "malformed field"),
        ("t:uint8_t[999999] a;", "array of 999999 elements"),
    ],
)
def test_parse_format_errors(text: str, error: str) -> None:
    with pytest.raises(ULogFormatError, match=error) as info:
        parse_format(text, offset=77)
    assert info.value.offset == 77


def test_flattened_names_offsets_and_padding() -> None:
    compiled = compile_format(
        "outer",
        formats(
            "outer:uint64_t timestamp;inner[2] in;uint8_t[1] _padding0;int16_t[2] a;char[3] s;"
            "uint8_t[5] _padding1;",
            "inner:bool ok;uint8_t[3] _padding0;float f;",
        ),
    )
    dtype = compiled.dtype
    assert field_names(dtype) == (
        "timestamp",
        "in[0].ok",
        "in[0].f",
        "in[1].ok",
        "in[1].f",
        "a[0]",
        "a[1]",
        "s",
    )
    assert dtype.fields is not None
    assert [dtype.fields[n][1] for n in field_names(dtype)] == [0, 8, 12, 16, 20, 25, 27, 29]
    assert compiled.size == dtype.itemsize == 8 + 16 + 1 + 4 + 3 + 5
    assert compiled.trailing_padding == 5
    assert dtype["in[0].f"] == np.dtype("<f4")
    assert dtype["in[0].ok"] == np.dtype("?")
    assert dtype["s"] == np.dtype("S3")
    assert string_fields(dtype) == ("s",)
    assert compiled.timestamp == TimestampField(0, "uint64_t", 0, 1)


def test_all_basic_types_little_endian() -> None:
    types = ["int8_t", "uint8_t", "int16_t", "uint16_t", "int32_t", "uint32_t", "int64_t"]
    types += ["uint64_t", "float", "double", "bool", "char"]
    text = "t:" + "".join(f"{t} f{i};" for i, t in enumerate(types))
    dtype = compile_format("t", formats(text)).dtype
    assert [dtype[i].str for i in range(len(types))] == [
        "|i1",
        "|u1",
        "<i2",
        "<u2",
        "<i4",
        "<u4",
        "<i8",
        "<u8",
        "<f4",
        "<f8",
        "|b1",
        "|S1",
    ]


def test_timestamp_anywhere_and_of_small_types() -> None:
    compiled = compile_format("t", formats("t:float x;uint8_t timestamp;"))
    assert compiled.timestamp == TimestampField(4, "uint8_t", 256, 1000)
    compiled = compile_format("t", formats("t:float timestamp;"))
    assert compiled.timestamp is None
    compiled = compile_format("t", formats("t:uint32_t[2] timestamp;"))
    assert compiled.timestamp is None


def test_nested_padding_field_and_zero_length_arrays() -> None:
    compiled = compile_format(
        "t",
        formats(
            "t:uint64_t timestamp;pad _padding0;char[0] empty;uint8_t[0] none;", "pad:uint32_t x;"
        ),
    )
    assert field_names(compiled.dtype) == ("timestamp",)
    assert compiled.size == 12
    assert compiled.trailing_padding == 0  # the zero-size fields after the padding end it


def test_compiled_formats_are_cached() -> None:
    defs = formats("c:uint64_t timestamp;uint8_t x;")
    assert compile_format("c", defs) is compile_format("c", dict(defs))


@pytest.mark.parametrize(
    ("defs", "error"),
    [
        (["t:missing m;"], "format 't' uses the undefined type 'missing'"),
        (["a:b x;", "b:a y;"], "nests deeper than 32 levels"),
        (["t:uint64_t[9000] big;"], "larger than any message"),
        (["t:u[300] a;", "u:uint8_t[300] b;"], "larger than any message"),
        (["t:uint8_t a;int16_t a;"], "format 't' has two fields named 'a'"),
    ],
)
def test_compile_errors(defs: list[str], error: str) -> None:
    with pytest.raises(ULogFormatError, match=error):
        compile_format(defs[0].split(":")[0], formats(*defs))


def test_decode_row_zero_pads_missing_trailing_padding() -> None:
    compiled = compile_format("t", formats("t:uint64_t timestamp;int8_t x;uint8_t[7] _padding0;"))
    row = decode_row(struct.pack("<Qb", 5, -2), compiled.dtype)
    assert row["timestamp"] == 5
    assert row["x"] == -2
    assert row_dict(row) == {"timestamp": 5, "x": -2}


def test_row_dict_plain_python_values() -> None:
    dtype = compile_format("t", formats("t:uint64_t timestamp;char[4] s;bool b;float f;")).dtype
    row = decode_row(struct.pack("<Q4sBf", 1, b"ab\0c", 1, 0.5), dtype)
    values = row_dict(row)
    assert values == {"timestamp": 1, "s": "ab", "b": True, "f": 0.5}
    assert all(type(v) in {int, float, bool, str} for v in values.values())


NESTED = (
    (
        "outer:uint64_t timestamp;inner[2] in;char[3] s;char c;uint8_t _padding0;int16_t[2] v;"
        "uint8_t[3] _padding1;"
    ),
    "inner:uint16_t a;uint8_t[2] _padding0;float b;",
)


def test_nested_dtype_keeps_the_nesting_and_the_flat_layout() -> None:
    defined = formats(*NESTED)
    nested = nested_dtype("outer", defined)
    flat = compile_format("outer", defined).dtype
    assert nested.itemsize == flat.itemsize == 8 + 16 + 3 + 1 + 1 + 4 + 3
    assert nested.names == ("timestamp", "in", "s", "c", "v")
    assert nested.fields is not None
    assert flat.fields is not None
    assert nested.fields["in"][0].shape == (2,)
    assert nested.fields["v"][1] == flat.fields["v[0]"][1]
    assert nested.fields["s"][0] == np.dtype("S3")
    assert nested.fields["c"][0] == np.dtype("u1")  # a lone char is a byte
    payload = bytes(range(flat.itemsize))
    row = np.frombuffer(payload, dtype=flat)
    viewed = row.view(nested)[0]
    assert viewed["in"][1]["a"] == row["in[1].a"][0]
    assert viewed["v"].tolist() == [row["v[0]"][0], row["v[1]"][0]]


def test_nested_dtype_can_end_before_the_trailing_padding_as_px4_writes_data() -> None:
    defined = formats(*NESTED)
    assert nested_dtype("outer", defined, strip_trailing_padding=True).itemsize == 36 - 3
    assert nested_dtype("inner", defined, strip_trailing_padding=True).itemsize == 8


def test_nested_dtype_refuses_undefined_types() -> None:
    with pytest.raises(ULogFormatError, match="undefined type 'inner'"):
        nested_dtype("outer", formats(NESTED[0]))
