"""Zero-gap flights on a real PX4 (SITL): a flight recorded over a lossy link with a blackout.

Backfilled from PX4's own SD log, its one file holds every row of that SD log.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from typing import TYPE_CHECKING

import pytest
from support.processes import Process, recordings
from support.px4 import UdpRelay, fly, px4_sitl
from support.rows import rows

from ulogstream.cli.demo import free_udp_port

if TYPE_CHECKING:
    from pathlib import Path


pytestmark = [pytest.mark.px4, pytest.mark.timeout(300)]


@pytest.mark.asyncio
async def test_a_lossy_flight_recorded_while_armed_holds_every_row_of_the_sd_log(
    tmp_path: Path,
) -> None:
    """Issue 23's done-when: one file per flight, every row of PX4's own SD log, none differing.

    PX4 may end its stream in the blackout (an acked packet unanswered for 2.5 s): then the
    flight has two recordings, and the recorder merges them before it backfills.
    """
    out = tmp_path / "out"
    with px4_sitl(tmp_path / "px4", instance=3, log="all", sdlog_mode=0) as px4:
        port = free_udp_port()
        relay = UdpRelay(px4.onboard_port, px4.px4_port, port, loss=0.05, seed=7)
        relaying = asyncio.create_task(relay.run())
        recorder = Process(
            ["record", f"udpin:127.0.0.1:{port}", "--while-armed", "--out", str(out),
             "--no-status"],
            tmp_path,
        )  # fmt: skip
        try:
            await asyncio.sleep(3)
            await fly(px4, relay=relay, blackout_s=4.0)
            await recorder.await_line("gap(s) from SD log", limit=180)  # the flight's backfill
            recorder.send_signal(signal.SIGINT)
            assert await recorder.await_exit(limit=60) == 0, recorder.stderr()
        finally:
            relaying.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await relaying
            recorder.kill()
        (sd,) = px4.sd_logs()
    (recording,) = recordings(out)  # one file for the flight
    truth = rows(sd)
    after = rows(recording)
    for key, table in truth.items():
        ours = after.get(key, {})
        assert table.keys() <= ours.keys(), (key, len(table.keys() - ours.keys()))
        assert all(ours[stamp] == row for stamp, row in table.items()), key
    assert sum(map(len, truth.values())) > 10_000
    stderr = recorder.stderr()
    assert "backfilled its start and" in stderr
    assert "gap(s) from SD log 0" in stderr
