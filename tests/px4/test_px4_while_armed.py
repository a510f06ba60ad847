"""``record --while-armed`` against a real PX4 (SITL): two flights in one run, one file each."""

from __future__ import annotations

import asyncio
import signal
from typing import TYPE_CHECKING

import pytest
from pyulog import ULog
from support.processes import Process, recordings
from support.px4 import fly, px4_sitl

if TYPE_CHECKING:
    from pathlib import Path


pytestmark = [pytest.mark.px4, pytest.mark.timeout(240)]


def span_s(path: Path) -> tuple[float, float]:
    """The first and last vehicle_status timestamp of a log, in seconds of boot time."""
    status = ULog(str(path), ["vehicle_status"]).get_dataset("vehicle_status")
    stamps = status.data["timestamp"]
    return float(stamps[0]) / 1e6, float(stamps[-1]) / 1e6


@pytest.mark.asyncio
async def test_two_flights_in_one_run_give_two_files_each_its_flight(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with px4_sitl(tmp_path / "px4", instance=5, log="all", sdlog_mode=0) as px4:
        recorder = Process(
            ["record", f"udpin:127.0.0.1:{px4.onboard_port}", "--while-armed", "--out", str(out),
             "--no-status", "--no-backfill"],  # the streams alone (test_px4_backfill: with it)
            tmp_path,
        )  # fmt: skip
        try:
            await asyncio.sleep(4)
            assert not recordings(out)  # on the ground, disarmed: nothing is streamed
            await fly(px4)
            await recorder.await_line("log finished", limit=30)
            await asyncio.sleep(3)
            await fly(px4)
            await recorder.await_line("log finished", count=2, limit=30)
            await asyncio.sleep(2)
            recorder.send_signal(signal.SIGINT)
            assert await recorder.await_exit(limit=30) == 0
        finally:
            recorder.kill()
        sd_logs = px4.sd_logs()
    files = recordings(out)
    assert len(files) == 2
    # The vehicle is named by its AUTOPILOT_VERSION GUID from its first file on. SITL's GUID is
    # its instance then zeros; its logs carry no sys_uuid, so nothing else could name it.
    guid = bytes([px4.instance]).hex() + "00" * 17
    assert {path.parent.parent for path in files} == {out / guid}
    assert len(sd_logs) == 2  # PX4's own logs: one per flight (SDLOG_MODE 0)
    assert "2 logs recorded" in recorder.stdout()
    # Each file is its flight: it spans PX4's own log of that flight and no part of the other.
    # Its data begins seconds after arming: the arming is seen in the next HEARTBEAT (1 Hz),
    # then PX4 sends the header and definitions stop-and-wait before any data, at SITL's pace
    # (2.5 s after arming measured on a quiet machine, 4.05 s under CI's second worker); the
    # backfill fetches that start from the SD log (test_px4_backfill.py).
    for ours, truth in zip(files, sd_logs, strict=True):
        ours_start, ours_end = span_s(ours)
        sd_start, sd_end = span_s(truth)
        assert sd_start - 0.5 <= ours_start <= sd_start + 6.0
        assert ours_end >= sd_end - 0.5
    assert span_s(files[0])[1] < span_s(sd_logs[1])[0]
