"""Backfill against an in-memory SD log: gaps, start and end put back byte for byte."""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ulogstream.download.backfill import (
    BackfillError,
    BackfillResult,
    Fetch,
    apply_patches,
    backfill,
    merge_recordings,
    plan_backfill,
)
from ulogstream.download.transfer import ByteRanges
from ulogstream.sim.flightlog import generate_flight_log
from ulogstream.ulog.spec import HEADER_SIZE, MESSAGE_HEADER_SIZE, encode_dropouts

if TYPE_CHECKING:
    from collections.abc import Generator

LOG = io.BytesIO()
generate_flight_log(LOG, duration_s=30, seed=4)
FLIGHT = LOG.getvalue()


def boundaries(log: bytes) -> list[int]:
    """Offsets of every message of ``log``, and its end."""
    out = []
    position = HEADER_SIZE
    while position + MESSAGE_HEADER_SIZE <= len(log):
        out.append(position)
        position += MESSAGE_HEADER_SIZE + (log[position] | log[position + 1] << 8)
    out.append(position)
    return out


BOUNDS = boundaries(FLIGHT)
FIRST_DATA = next(b for b in BOUNDS if FLIGHT[b + 2] not in b"BFIMPQA")


def run(
    steps: Generator[Fetch, bytes, BackfillResult], sd: bytes, fetched: list[Fetch] | None = None
) -> BackfillResult:
    try:
        fetch = next(steps)
        while True:
            if fetched is not None:
                fetched.append(fetch)
            fetch = steps.send(sd[fetch.start : fetch.end])
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


def recording_with_gaps(cuts: list[tuple[int, int]], *, start_cut: int = 0) -> bytes:
    """FLIGHT with each cut's messages ``[BOUNDS[a], BOUNDS[b])`` replaced by a dropout.

    Its first ``start_cut`` data messages are missing too.
    """
    out = bytearray(FLIGHT[:FIRST_DATA])
    position = BOUNDS.index(FIRST_DATA) + start_cut
    for a, b in sorted(cuts):
        out += FLIGHT[BOUNDS[position] : BOUNDS[a]]
        out += encode_dropouts(150)
        position = b
    out += FLIGHT[BOUNDS[position] :]
    return bytes(out)


def test_every_gap_and_the_start_come_back_byte_for_byte() -> None:
    first = BOUNDS.index(FIRST_DATA)
    cuts = [(first + 500, first + 800), (first + 5000, first + 5001), (first + 9000, first + 12000)]
    recording = recording_with_gaps(cuts, start_cut=300)
    plan = plan_backfill(recording)
    assert len(plan.gaps) == 3
    fetched: list[Fetch] = []
    result = run(backfill(plan, len(FLIGHT)), FLIGHT, fetched)
    assert result.found
    assert result.unfilled == []
    assert len(result.filled) == 4
    assert apply_patches(recording, result.patches) == FLIGHT
    rows = sum(1 for b in BOUNDS[:-1] if FLIGHT[b + 2] == ord("D"))
    assert result.rows_streamed + result.rows_backfilled == rows
    assert result.rows_backfilled > 3000
    # Only what was missing, the anchors' search and the SD log's head were read (each byte
    # once: the shell caches what it fetched): far less than the whole log.
    missing = len(FLIGHT) - len(recording) + 3 * len(encode_dropouts(150))
    read = ByteRanges((f.start, f.end) for f in fetched).total
    assert read < missing + 600_000 < len(FLIGHT)


@settings(max_examples=30, deadline=None)
@given(
    cuts=st.lists(st.tuples(st.integers(0, 10**6), st.integers(1, 400)), min_size=1, max_size=6),
    start_cut=st.integers(0, 50),
)
def test_any_gaps_come_back_or_stay_marked(cuts: list[tuple[int, int]], start_cut: int) -> None:
    first = BOUNDS.index(FIRST_DATA) + start_cut + 1
    usable = len(BOUNDS) - 2 - first
    spans: list[tuple[int, int]] = []
    for at, length in cuts:
        a = first + at % usable
        b = min(a + length, len(BOUNDS) - 2)
        if all(b + 2 < x or a > y + 2 for x, y in spans):
            spans.append((a, b))
    recording = recording_with_gaps(spans, start_cut=start_cut)
    result = run(backfill(plan_backfill(recording), len(FLIGHT)), FLIGHT)
    assert result.found
    completed = apply_patches(recording, result.patches)
    if not result.unfilled:
        assert completed == FLIGHT
    else:  # a run between two gaps too short to anchor on: that gap keeps its marker
        assert all("not found" in why for why in result.unfilled)
        assert len(completed) <= len(FLIGHT)


def test_the_end_is_put_back_only_when_asked() -> None:
    cut = BOUNDS[-2000]
    recording = FLIGHT[:cut]
    plan = plan_backfill(recording)
    assert run(backfill(plan, len(FLIGHT)), FLIGHT).patches == []
    result = run(backfill(plan, len(FLIGHT), fill_end=True), FLIGHT)
    assert apply_patches(recording, result.patches) == FLIGHT


def test_an_sd_log_of_another_flight_changes_nothing() -> None:
    other = io.BytesIO()
    generate_flight_log(other, duration_s=10, seed=9)
    first = BOUNDS.index(FIRST_DATA)
    recording = recording_with_gaps([(first + 100, first + 200)])
    result = run(backfill(plan_backfill(recording), len(other.getvalue())), other.getvalue())
    assert not result.found
    assert result.patches == []


def test_the_sd_log_may_hold_more_before_and_after_the_recording() -> None:
    """An SD log from boot: the recording's bytes lie deep inside it."""
    first = BOUNDS.index(FIRST_DATA)
    begin, gap, stop = first + 4000, first + 9000, len(BOUNDS) - 4000
    recording = (
        FLIGHT[:FIRST_DATA]
        + FLIGHT[BOUNDS[begin] : BOUNDS[gap]]
        + encode_dropouts(900)
        + FLIGHT[BOUNDS[gap + 700] : BOUNDS[stop]]
    )
    result = run(backfill(plan_backfill(recording), len(FLIGHT), fill_start=False), FLIGHT)
    assert result.unfilled == []
    assert apply_patches(recording, result.patches) == (
        FLIGHT[:FIRST_DATA] + FLIGHT[BOUNDS[begin] : BOUNDS[stop]]
    )


def test_a_file_that_is_not_a_log_is_refused() -> None:
    with pytest.raises(BackfillError, match="not a ULog file"):
        plan_backfill(b"hello")
    with pytest.raises(BackfillError, match="no data messages"):
        plan_backfill(FLIGHT[:FIRST_DATA])


def test_a_restarted_streams_recordings_merge_into_the_flight() -> None:
    """PX4 ended its stream in a blackout and a new one began: two recordings, one flight."""
    first = BOUNDS.index(FIRST_DATA)
    piece1 = FLIGHT[: BOUNDS[first + 6000]]
    piece2 = FLIGHT[:FIRST_DATA] + FLIGHT[BOUNDS[first + 9000] :]  # its own header first
    merged = merge_recordings([piece1, piece2])
    plan = plan_backfill(merged)
    assert len(plan.gaps) == 1
    result = run(backfill(plan, len(FLIGHT)), FLIGHT)
    assert result.unfilled == []
    assert apply_patches(merged, result.patches) == FLIGHT


def test_new_subscriptions_of_a_restarted_stream_go_before_its_gap() -> None:
    first = BOUNDS.index(FIRST_DATA)
    subscription = bytes([5, 0, ord("A"), 0, 77, 0]) + b"xy"  # msg_id 77
    subscription = bytes([len(subscription) - 3, 0]) + subscription[2:]
    piece1 = FLIGHT[: BOUNDS[first + 100]]
    piece2 = FLIGHT[:FIRST_DATA] + subscription + FLIGHT[BOUNDS[first + 200] :]
    merged = merge_recordings([piece1, piece2])
    assert merged.startswith(piece1 + subscription)
    gap = plan_backfill(merged).gaps[0]
    assert gap.offset == len(piece1)  # the gap takes the subscription with it


def test_a_recording_whose_data_begins_with_a_gap_gets_its_start_back() -> None:
    """PX4 SITL loses a few packets right after the header on every run."""
    first = BOUNDS.index(FIRST_DATA)
    recording = FLIGHT[:FIRST_DATA] + encode_dropouts(20) + FLIGHT[BOUNDS[first + 40] :]
    plan = plan_backfill(recording)
    assert plan.gaps == ()
    assert plan.start_length == len(encode_dropouts(20))
    result = run(backfill(plan, len(FLIGHT)), FLIGHT)
    assert apply_patches(recording, result.patches) == FLIGHT


def test_what_the_sd_log_lacks_too_stays_lacking_with_the_sd_logs_own_dropout() -> None:
    """PX4's SD logger drops data too (a full buffer): its dropout comes with the bytes."""
    first = BOUNDS.index(FIRST_DATA)
    sd = (
        FLIGHT[: BOUNDS[first + 1000]]
        + encode_dropouts(70)
        + FLIGHT[BOUNDS[first + 1100] :]  # 100 messages the SD log lost too
    )
    recording = recording_with_gaps([(first + 950, first + 1200)])
    result = run(backfill(plan_backfill(recording), len(sd)), sd)
    assert result.unfilled == []
    completed = apply_patches(recording, result.patches)
    assert completed == sd  # the SD log's own dropout marks what neither has
