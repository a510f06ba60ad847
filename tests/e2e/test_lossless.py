"""Lossless links record byte-identical files: UDP both ways, a real pty, sample logs."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from support.end_to_end import (
    FAST,
    FdTransport,
    PtyPair,
    flight_log,
    read_pyulog,
    record,
    recorder_settings,
)
from support.shared_data import shared_ulg

from ulogstream.adapters.udp_transport import UdpTransport
from ulogstream.cli.demo import free_udp_port
from ulogstream.recorder.pipeline import Pipeline
from ulogstream.recorder.wiring import build_recorder
from ulogstream.sim.vehicle import USB_LINK_RATE, VehicleConfig

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from ulogstream.stream import LoggingData

SAMPLES = (
    "px4-ulog-rs__esc_status_log.ulg",
    "pyulog__sample_log_small.ulg",
    "pyulog__sample_logging_tagged_and_default_params.ulg",
)
"""Whole, untruncated real logs (0.6-1.9 MB) with post-flight perf tails, tagged strings, Q."""

USB = VehicleConfig(link_rate=USB_LINK_RATE, speed=None, stop_accept_delay=0.0)


@pytest.fixture(name="pty_pair")
def fixture_pty_pair() -> Iterator[PtyPair]:
    pair = PtyPair.open()
    yield pair
    pair.close()


def assert_one_identical_file(files: list[Path], log: bytes) -> None:
    assert len(files) == 1
    assert files[0].suffix == ".ulg"
    assert files[0].read_bytes() == log
    assert not list(files[0].parent.glob("*.part"))


@pytest.mark.asyncio
@pytest.mark.timeout(60)
@pytest.mark.parametrize("seed", [1, 2])
async def test_vehicle_on_udpout_to_a_recorder_on_udpin(tmp_path: Path, seed: int) -> None:
    log = flight_log(8.0, seed=seed)
    port = free_udp_port()
    recorder = build_recorder(recorder_settings(f"udpin:127.0.0.1:{port}", tmp_path), once=True)
    run = await record(log, recorder, f"udpout:127.0.0.1:{port}")
    assert run.exit_code == 0
    assert_one_identical_file(run.files, log)
    assert run.summary.logs_started == run.summary.logs_stopped == 1
    counters = run.recorder.pipeline.session.counters if run.recorder.pipeline else None
    assert counters is not None
    assert (counters.gaps, counters.dropouts, counters.mismatches) == (0, 0, 0)
    read_pyulog(run.files[0])


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_recorder_on_udpout_to_a_listening_vehicle(tmp_path: Path) -> None:
    log = flight_log(6.0, seed=4)
    vehicle_link = await UdpTransport.listen("127.0.0.1", 0)
    port = vehicle_link.local_address[1]
    recorder = build_recorder(recorder_settings(f"udpout:127.0.0.1:{port}", tmp_path), once=True)
    run = await record(log, recorder, vehicle_link, config=USB)
    assert run.exit_code == 0
    assert_one_identical_file(run.files, log)


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_serial_pty_at_usb_rate(tmp_path: Path, pty_pair: PtyPair) -> None:
    log = flight_log(6.0, seed=5)
    recorder = build_recorder(recorder_settings(f"{pty_pair.device}:921600", tmp_path), once=True)
    vehicle_link = FdTransport(pty_pair.master, "pty master")
    run = await record(log, recorder, vehicle_link, config=USB)
    assert run.exit_code == 0
    assert_one_identical_file(run.files, log)
    assert run.recorder.pipeline is not None
    assert run.recorder.pipeline.codec.bad_frames == 0


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_serial_pty_unlimited_rate_splits_frames_anywhere(
    tmp_path: Path, pty_pair: PtyPair
) -> None:
    log = flight_log(3.0, seed=6)
    recorder = build_recorder(recorder_settings(pty_pair.device, tmp_path), once=True)
    run = await record(log, recorder, FdTransport(pty_pair.master, "pty master"), config=FAST)
    assert run.exit_code == 0
    assert_one_identical_file(run.files, log)


@pytest.mark.slow
@pytest.mark.shared
@pytest.mark.asyncio
@pytest.mark.timeout(90)
@pytest.mark.parametrize("name", SAMPLES)
async def test_sample_logs_over_udp_are_byte_identical(tmp_path: Path, name: str) -> None:
    log = shared_ulg(name).read_bytes()
    vehicle_link = await UdpTransport.listen("127.0.0.1", 0)
    port = vehicle_link.local_address[1]
    recorder = build_recorder(recorder_settings(f"udpout:127.0.0.1:{port}", tmp_path), once=True)
    run = await record(log, recorder, vehicle_link)
    assert run.exit_code == 0
    assert_one_identical_file(run.files, log)
    read_pyulog(run.files[0])


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_the_data_phase_of_a_real_log_takes_the_fast_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The file is the same either way; the CPU is not: every plain LOGGING_DATA should go from
    # the datagram to the file without a message object (docs/performance.md, issue 25).
    log = shared_ulg("pyulog__sample_logging_tagged_and_default_params.ulg").read_bytes()
    taken = declined = 0
    fast = Pipeline.receive_logging_data

    def counting(pipeline: Pipeline, packet: LoggingData, now: float) -> bool:
        nonlocal taken, declined
        result = fast(pipeline, packet, now)
        taken += result
        declined += not result
        return result

    monkeypatch.setattr(Pipeline, "receive_logging_data", counting)
    port = free_udp_port()
    recorder = build_recorder(recorder_settings(f"udpin:127.0.0.1:{port}", tmp_path), once=True)
    run = await record(log, recorder, f"udpout:127.0.0.1:{port}", config=USB)
    assert_one_identical_file(run.files, log)
    assert run.recorder.pipeline is not None
    counters = run.recorder.pipeline.session.counters
    unacked = counters.packets - counters.acked
    assert taken >= 0.99 * unacked > 1000
    assert declined <= 0.01 * unacked
