"""float32 values as JSON number text, shortest round-trip form, without numpy.

A ULog ``float`` field is a float32. Its JSON text is the shortest decimal that reads back as
the same float32 (``0.1``, not float64's ``0.10000000149011612``), as numpy >= 2.3 writes a
float32 (``str(np.float32(x))``, and ``astype(str)`` of an array):

- positional for ``1e-4 <= |x| < 1e6`` with at least one digit after the point (``100000.0``,
  ``0.0001234``), scientific otherwise with trailing zeros left out (``1e+06``,
  ``1.756885e+06``, ``-2.5e-38``); ``0.0`` and ``-0.0`` positional;
- of two shortest decimals that read back the same, the one closer to the value;
- NaN and the infinities as ``null`` (JSON has no text for them).

The rate-capped one-row path formats most values here; it runs where numpy is never loaded.
"""

from __future__ import annotations

import struct
from typing import Final

_F32: Final = struct.Struct("<f")
_U32: Final = struct.Struct("<I")

_MANTISSA_MASK: Final = 0x007FFFFF
_SIGN_BIT: Final = 0x80000000

POSITIONAL_LOW: Final = 1e-4
"""Smallest magnitude written positionally (numpy's cutoff)."""

POSITIONAL_HIGH: Final = 1e6
"""Magnitudes from here on are written in scientific form (numpy >= 2.3's float32 cutoff)."""

_POWERS_OF_TEN: Final = tuple(10**n for n in range(120))  # exact values have at most 112 digits


def float32_bits(value: float) -> int:
    """The bits of ``value`` rounded to float32 (the key :func:`float32_json` takes).

    Raises:
        OverflowError: ``|value|`` is finite and beyond :data:`FLOAT32_MAX`'s rounding range.
    """
    (bits,) = _U32.unpack(_F32.pack(value))
    return int(bits)


def float32_value(bits: int) -> float:
    """The float32 with these bits, as a Python float (exactly)."""
    (value,) = _F32.unpack(_U32.pack(bits))
    return float(value)


def _least_bits_from(bound: float) -> int:
    """The bits of the least positive float32 that is ``bound`` or more.

    Positive float32 values order as their bits do, so a magnitude's bits compare with these.
    """
    bits = float32_bits(bound)
    return bits if float32_value(bits) >= bound else bits + 1


FLOAT32_MAX: Final = float32_value(0x7F7FFFFF)
"""The largest finite float32."""

_POSITIONAL_LOW_BITS: Final = _least_bits_from(POSITIONAL_LOW)
_POSITIONAL_HIGH_BITS: Final = _least_bits_from(POSITIONAL_HIGH)


def float32_json(bits: int) -> str:
    """The JSON text of the float32 with these bits (see the module's docstring)."""
    biased = bits >> 23 & 0xFF
    if biased == 0xFF:  # noqa: PLR2004 (all ones: NaN or an infinity)
        return "null"
    sign = "-" if bits & _SIGN_BIT else ""
    mantissa = bits & _MANTISSA_MASK
    if 1 < biased and mantissa:  # noqa: SIM300 (a normal float32, not a power of two: most)
        digits, exponent = _normal_digits(mantissa | 1 << 23, biased)
    elif biased or mantissa:
        digits, exponent = _edge_digits(bits & ~_SIGN_BIT)
    else:
        return sign + "0.0"
    if _POSITIONAL_LOW_BITS <= bits & ~_SIGN_BIT < _POSITIONAL_HIGH_BITS:
        return sign + _positional(digits, exponent)
    head = digits if len(digits) == 1 else f"{digits[0]}.{digits[1:]}"
    return f"{sign}{head}e{exponent:+03d}"


def _normal_digits(mantissa: int, biased: int) -> tuple[str, int]:
    """The shortest digits that read back as this float32, and the first one's exponent.

    Exact integer arithmetic: the value is ``mantissa * 2**(biased - 150)``, that is
    ``exact = mantissa * gap`` units of ``10**-scale``, where ``gap`` is the distance to each
    neighbouring float32. A decimal reads back when it is less than half a gap from the value,
    or just half a gap when the mantissa is even (round half to even). The nearest decimal of
    a length reads back if any of that length does (the gaps are equal on both sides: powers
    of two go to :func:`_edge_digits`). If none of ``n`` digits does, none shorter does, and
    nine always do: most values of a log need seven or eight, so lengths are tried from eight
    down.
    """
    gap, scale, length, ten = _EXACT[biased]
    exact = mantissa * gap
    if exact >= ten:
        length += 1
    closed = not mantissa & 1
    found = 0
    dropped = length - 8 if length > 8 else 0  # noqa: PLR2004 (eight digits first)
    while dropped < length:
        unit = _POWERS_OF_TEN[dropped]
        kept, rest = divmod(exact, unit)
        twice = rest << 1
        if twice > unit or (twice == unit and kept & 1):
            kept += 1
            twice = (unit << 1) - twice
        if twice < gap or (closed and twice == gap):
            found = kept
            dropped += 1
            continue
        if not found:  # eight digits miss: the nearest nine
            unit //= 10
            found = (exact + (unit >> 1)) // unit
        dropped -= 1
        break
    else:
        dropped -= 1
    text = str(found)
    # rounding up may have added a digit (999 -> 1000): the exponent is that of the first
    return text.rstrip("0"), len(text) + dropped - 1 - scale


def _edge_digits(bits: int) -> tuple[str, int]:
    """:func:`_normal_digits` of a subnormal or a power of two (by a slower, general search).

    A subnormal can need fewer digits than its text's length suggests; a power of two has half
    the gap below it, so the nearest decimal may miss where the one on the other side fits.
    """
    biased = bits >> 23
    mantissa = bits & _MANTISSA_MASK
    power = -149  # a subnormal's
    if biased:
        mantissa |= 1 << 23
        power = biased - 150
    if power >= 0:
        exact, gap, scale = mantissa << power, 1 << power, 0
    else:
        gap, scale = 5**-power, -power
        exact = mantissa * gap
    below = 4 if mantissa == 1 << 23 and biased > 1 else 2  # twice the error, vs the gap
    closed = not mantissa & 1
    length = len(str(exact))
    found = exact, 0  # the value itself, when it has fewer digits than tried
    for dropped in range(max(0, length - 9), length):
        unit = _POWERS_OF_TEN[dropped]
        kept, rest = divmod(exact, unit)
        down_error, up_error = below * rest, 2 * (unit - rest)
        down = down_error < gap or (closed and down_error == gap)
        up = up_error < gap or (closed and up_error == gap)
        if up and (not down or 2 * rest > unit or (2 * rest == unit and kept & 1)):
            found = kept + 1, dropped
        elif down:
            found = kept, dropped
        else:
            break
    kept, dropped = found
    text = str(kept)
    return text.rstrip("0") or "0", len(text) + dropped - 1 - scale


def _exact_units(biased: int) -> tuple[int, int, int, int]:
    """A normal exponent's gap in units, the units' scale, and digits of its least value.

    The least value is ``2**23 * gap`` units; the fourth item is the power of ten from which
    the value has one digit more.
    """
    power = biased - 150
    gap, scale = (1 << power, 0) if power >= 0 else (5**-power, -power)
    length = len(str(gap << 23))
    return gap, scale, length, 10**length


def _positional(digits: str, exponent: int) -> str:
    """Significant ``digits`` times 10**``exponent`` written out, at least one decimal."""
    if exponent < 0:
        return "0." + "0" * (-exponent - 1) + digits
    whole = exponent + 1
    if len(digits) <= whole:
        return digits + "0" * (whole - len(digits)) + ".0"
    return f"{digits[:whole]}.{digits[whole:]}"


_EXACT: Final = tuple(_exact_units(max(1, biased)) for biased in range(255))
""":func:`_exact_units` by biased exponent (normal ones: 1 to 254; 0 is never read)."""
