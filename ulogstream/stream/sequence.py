"""Wrap-around arithmetic for the ``uint16`` sequence numbers of LOGGING_DATA packets.

The distance ``d = (current - last) mod 65536`` classifies a packet (protocol.md, "Per packet" 3):
0 is a duplicate, 1..32767 is new with ``d - 1`` packets lost in between, and the other half of
the circle (32768..65535) is an older packet arriving late.
"""

from __future__ import annotations

from ulogstream.stream.packets import SEQUENCE_MODULO

SEQUENCE_MASK = SEQUENCE_MODULO - 1
"""``x & SEQUENCE_MASK`` is ``x mod 65536`` for any int, negative ones included."""

NEWER_LIMIT = SEQUENCE_MODULO // 2
"""Distances below this (and above 0) are newer packets; the rest are older ones."""


def sequence_distance(last: int, current: int) -> int:
    """The forward distance from ``last`` to ``current`` on the uint16 circle (0..65535)."""
    return (current - last) & SEQUENCE_MASK


def sequence_gap(last: int, current: int) -> int | None:
    """Count the packets missing between ``last`` and ``current``.

    Args:
        last: Sequence number of the newest packet accepted so far.
        current: Sequence number of the packet that just arrived.

    Returns:
        The number skipped (0 when consecutive), or None for a duplicate or older packet.
    """
    distance = (current - last) & SEQUENCE_MASK
    if distance == 0 or distance >= NEWER_LIMIT:
        return None
    return distance - 1


def next_sequence(sequence: int, step: int = 1) -> int:
    """The sequence number ``step`` packets after ``sequence``, wrapped to uint16."""
    return (sequence + step) & SEQUENCE_MASK
