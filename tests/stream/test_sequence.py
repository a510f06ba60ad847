from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ulogstream.stream.sequence import next_sequence, sequence_distance, sequence_gap

uint16 = st.integers(0, 0xFFFF)


@given(last=uint16, skipped=st.integers(0, 0x7FFE))
def test_gap_counts_skipped_packets_across_wraparound(last: int, skipped: int) -> None:
    assert sequence_gap(last, (last + skipped + 1) % 0x10000) == skipped


@given(last=uint16)
def test_same_sequence_is_a_duplicate(last: int) -> None:
    assert sequence_gap(last, last) is None
    assert sequence_distance(last, last) == 0


@given(last=uint16, back=st.integers(1, 0x8000))
def test_older_packets_are_stale_across_wraparound(last: int, back: int) -> None:
    assert sequence_gap(last, (last - back) % 0x10000) is None


@pytest.mark.parametrize(
    ("last", "current", "gap"),
    [
        (0xFFFF, 0, 0),
        (0xFFFE, 1, 2),
        (0, 0x7FFF, 0x7FFE),
        (0, 0x8000, None),  # half the circle away: older, not 32767 lost
        (5, 4, None),
        (0, 0xFFFF, None),
    ],
)
def test_gap_at_the_edges(last: int, current: int, gap: int | None) -> None:
    assert sequence_gap(last, current) == gap


@given(sequence=uint16, step=st.integers(0, 0x30000))
def test_next_sequence_wraps_to_uint16(sequence: int, step: int) -> None:
    after = next_sequence(sequence, step)
    assert 0 <= after <= 0xFFFF
    assert sequence_distance(sequence, after) == step % 0x10000
    assert next_sequence(0xFFFF) == 0
