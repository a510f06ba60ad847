"""float32 JSON texts without numpy: the text numpy (>= 2.3) writes, and it reads back exactly."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from ulogstream.live.encode import _json_number
from ulogstream.live.float_text import float32_bits, float32_json, float32_value


def numpy_texts(bits: np.ndarray) -> list[str]:
    values = bits.astype(np.uint32).view(np.float32)
    texts: list[str] = values.astype(str).tolist()
    return [t if np.isfinite(v) else "null" for t, v in zip(texts, values.tolist(), strict=True)]


def edge_bits() -> np.ndarray:
    """Bits where shortest digits go wrong: every exponent's edge mantissas, both signs.

    Also the neighbours of every power of ten and of the positional cutoffs, and subnormals.
    """
    bits = [
        (sign << 31) | (exponent << 23) | mantissa
        for exponent in range(256)
        for mantissa in (0, 1, 2, 3, 0x400000, 0x7FFFFE, 0x7FFFFF)
        for sign in (0, 1)
    ]
    anchors = [10.0**k for k in range(-45, 39)] + [1e-4, 1e6, 0.1, 0.2, 0.3, 1 / 3, 2.0**24]
    for value in anchors:
        (center,) = np.array([value], np.float32).view(np.uint32).tolist()
        bits += [center + step for step in range(-3, 4) if 0 <= center + step < 1 << 32]
    return np.array(bits, dtype=np.uint64)


def test_special_values_have_their_fixed_texts() -> None:
    def text(value: float) -> str:
        return float32_json(float32_bits(value))

    assert text(0.1) == "0.1"  # not float64's 0.10000000149011612
    assert text(0.0) == "0.0"
    assert text(-0.0) == "-0.0"
    assert text(float("nan")) == "null"
    assert text(float("inf")) == "null"
    assert text(-float("inf")) == "null"
    assert text(100000.0) == "100000.0"
    assert text(999999.875) == "999999.9"
    assert text(1e6) == "1e+06"
    assert text(1756885.0) == "1.756885e+06"
    assert text(2.0**24) == "1.6777216e+07"
    assert text(1e-4) == "1e-04"  # the float32 nearest 1e-4 is below it
    assert text(0.0001234) == "0.0001234"
    assert text(1e-45) == "1e-45"  # the least subnormal
    assert text(3.4028235e38) == "3.4028235e+38"
    assert text(-2.5) == "-2.5"


def test_edge_values_read_as_numpy_writes_them() -> None:
    bits = edge_bits()
    assert [float32_json(b) for b in bits.tolist()] == numpy_texts(bits)


@pytest.mark.parametrize("seed", [1, 2])
def test_random_bits_and_sensor_like_values_read_as_numpy_writes_them(seed: int) -> None:
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 1 << 32, 40_000, dtype=np.uint64)
    scales = (1e-3, 1.0, 100.0, 1e4, 1e7)
    sensors = np.concatenate([rng.normal(0, s, 4_000) for s in scales]).astype(np.float32)
    bits = np.concatenate([bits, sensors.view(np.uint32).astype(np.uint64)])
    assert [float32_json(b) for b in bits.tolist()] == numpy_texts(bits)


def test_every_text_reads_back_as_the_same_float32() -> None:
    rng = np.random.default_rng(3)
    bits = np.concatenate([rng.integers(0, 0x7F800000, 20_000, dtype=np.uint64), edge_bits()])
    for b in bits.tolist():
        text = float32_json(b)
        if text == "null":
            continue
        (back,) = struct.unpack("<I", struct.pack("<f", float(text)))
        assert back == b or (b & 0x7FFFFFFF) == 0, (hex(b), text)
        assert "." in text or "e" in text, text  # never an integer: one JSON type per field


def test_parameter_numbers_keep_float32_values_short_and_others_whole() -> None:
    assert _json_number(float32_value(float32_bits(0.1))) == "0.1"
    assert _json_number(0.1) == "0.1"  # a float64 value: its own shortest text
    assert _json_number(1e300) == "1e+300"  # beyond float32: no overflow, float64's text
    assert _json_number(3.4028235677973366e38) == "3.4028235677973366e+38"
    assert _json_number(float("nan")) == "null"
    assert _json_number(7) == "7"
    assert _json_number(True) == "true"  # noqa: FBT003
