"""Lossy links: the recording is exactly the theoretical maximum of what was delivered.

The oracle (:func:`e2e.support.theoretical_maximum`) works from the simulator's delivery report
and the offline packetisation, so it knows the ground truth of every byte; dropout durations are
measured by the recorder's clock and only checked for range.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from support.end_to_end import (
    FAST,
    deliveries_of,
    flight_log,
    read_pyulog,
    record,
    recorded_items,
    recorder_settings,
    theoretical_maximum,
    vehicle_packets,
)

from ulogstream.adapters.udp_transport import UdpTransport
from ulogstream.recorder.wiring import build_recorder
from ulogstream.sim.faults import FaultConfig
from ulogstream.stream.reassembler import DATA_SECTION_TYPES

if TYPE_CHECKING:
    from pathlib import Path

    from support.end_to_end import Item, Session

MAX_DROPOUT_MS = 5000
"""Longest plausible dropout on loopback (the gaps here last milliseconds)."""


async def record_lossy(log: bytes, tmp_path: Path, faults: FaultConfig) -> Session:
    vehicle_link = await UdpTransport.listen("127.0.0.1", 0)
    port = vehicle_link.local_address[1]
    recorder = build_recorder(recorder_settings(f"udpout:127.0.0.1:{port}", tmp_path), once=True)
    run = await record(log, recorder, vehicle_link, config=FAST, faults=faults)
    assert run.exit_code == 0
    assert len(run.files) == 1
    return run


def first_data_index(items: list[Item]) -> int:
    return next(
        index
        for index, item in enumerate(items)
        if item is not None and item[2] in DATA_SECTION_TYPES
    )


def assert_is_the_theoretical_maximum(run: Session, log: bytes) -> list[Item]:
    expected = theoretical_maximum(log, vehicle_packets(log), deliveries_of(run.summary, 0))
    items, durations = recorded_items(run.files[0].read_bytes())
    assert items == expected
    assert None not in items[: first_data_index(items)]  # no dropout in the definitions
    assert all(0 <= duration <= MAX_DROPOUT_MS for duration in durations)
    read_pyulog(run.files[0])
    return items


@pytest.mark.asyncio
@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("loss", "seed"),
    [(0.05, 1), (0.05, 2), (0.2, 3), (0.2, 4)],
    ids=["5%-a", "5%-b", "20%-a", "20%-b"],
)
async def test_loss_duplicates_and_lost_acks_give_the_theoretical_maximum(
    tmp_path: Path, loss: float, seed: int
) -> None:
    log = flight_log(4.0, seed=seed)
    faults = FaultConfig(seed=seed, loss=loss, duplicate=0.05, lost_acks=0.1)
    run = await record_lossy(log, tmp_path, faults)
    items = assert_is_the_theoretical_maximum(run, log)
    stats = run.summary.stats
    assert stats.link_losses > 0
    assert stats.duplicated > 0
    assert stats.acks_lost > 0  # so acked packets were resent and acked again
    assert run.recorder.pipeline is not None
    counters = run.recorder.pipeline.session.counters
    assert counters.gaps > 0
    assert counters.dropouts == items.count(None) > 0
    assert counters.mismatches == 0
    # Acked packets are resent until acked, so the definitions and the post-flight tail are whole.
    last = items[-1]
    assert last is not None
    assert log.endswith(last)


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_garbage_between_frames_and_corrupted_frames(tmp_path: Path) -> None:
    log = flight_log(4.0, seed=8)
    faults = FaultConfig(seed=8, garbage=0.1, corrupt=0.05)
    run = await record_lossy(log, tmp_path, faults)
    assert_is_the_theoretical_maximum(run, log)
    stats = run.summary.stats
    assert stats.garbage > 0
    assert stats.corrupted > 0
    assert run.recorder.pipeline is not None
    assert run.recorder.pipeline.codec.bad_frames >= 1
    assert run.recorder.pipeline.codec.skipped_bytes > 0


@pytest.mark.slow
@pytest.mark.asyncio
@pytest.mark.timeout(90)
async def test_sequence_wraps_around_in_a_17_mb_log(tmp_path: Path) -> None:
    log = flight_log(330.0, seed=9)
    assert len(log) > 0x10000 * 249
    run = await record_lossy(log, tmp_path, FaultConfig())
    assert run.files[0].read_bytes() == log
    counters = run.recorder.pipeline.session.counters if run.recorder.pipeline else None
    assert counters is not None
    assert counters.packets > 0x10000
    assert (counters.gaps, counters.stale, counters.duplicates, counters.dropouts) == (0, 0, 0, 0)


@pytest.mark.slow
@pytest.mark.asyncio
@pytest.mark.timeout(90)
async def test_losses_across_the_sequence_wrap_give_the_theoretical_maximum(
    tmp_path: Path,
) -> None:
    log = flight_log(330.0, seed=10)
    faults = FaultConfig(seed=10, loss=0.01, duplicate=0.01)
    run = await record_lossy(log, tmp_path, faults)
    assert_is_the_theoretical_maximum(run, log)
    assert run.recorder.pipeline is not None
    counters = run.recorder.pipeline.session.counters
    assert counters.packets > 0x10000
    # Lost acked frames come back as resends; every other lost frame is counted once as lost,
    # before and after the wrap alike (a wrong wrap would add 65536 or turn gaps into "stale").
    assert counters.packets_lost == run.summary.stats.link_losses - run.summary.stats.resends
