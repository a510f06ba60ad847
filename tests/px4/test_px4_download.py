"""``ulogstream download`` against a real PX4 (SITL): its SD log, byte for byte, lossy or not.

Both ways PX4 serves it: LOG_REQUEST_DATA and MAVLink FTP (``--ftp``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import TYPE_CHECKING

import pytest
from support.processes import Process
from support.px4 import UdpRelay, px4_sitl

from ulogstream.cli.demo import free_udp_port

if TYPE_CHECKING:
    from pathlib import Path

    from support.px4 import Px4

pytestmark = [pytest.mark.px4, pytest.mark.timeout(240)]


def finished_sd_log(px4: Px4, seconds: float) -> Path:
    """Let PX4 log from boot for ``seconds``, then stop its logger: one finished SD log."""
    time.sleep(seconds)
    px4.cmd("logger", "stop")
    (sd,) = px4.sd_logs()
    size = -1
    while sd.stat().st_size != size:  # the logger's last write is on disk
        size = sd.stat().st_size
        time.sleep(0.5)
    return sd


@pytest.mark.asyncio
async def test_download_latest_is_the_sd_log_byte_for_byte_also_over_a_lossy_link(
    tmp_path: Path,
) -> None:
    with px4_sitl(tmp_path / "px4", instance=6, log="file", sdlog_mode=1) as px4:
        sd = finished_sd_log(px4, 5)
        listing = Process(
            ["download", f"udpin:127.0.0.1:{px4.onboard_port}", "--list"], tmp_path, name="ls"
        )
        assert await listing.await_exit(limit=30) == 0, listing.stderr()
        direct = Process(
            ["download", f"udpin:127.0.0.1:{px4.onboard_port}", "--out", str(tmp_path / "a")],
            tmp_path,
            name="direct",
        )
        assert await direct.await_exit(limit=60) == 0, direct.stderr()
        ftp = Process(
            ["download", f"udpin:127.0.0.1:{px4.onboard_port}", "--ftp", "--out",
             str(tmp_path / "c")],
            tmp_path,
            name="ftp",
        )  # fmt: skip
        assert await ftp.await_exit(limit=60) == 0, ftp.stderr()
        # 5 % of the datagrams lost each way, requests included.
        port = free_udp_port()
        relay = UdpRelay(px4.onboard_port, px4.px4_port, port, loss=0.05, seed=2)
        relaying = asyncio.create_task(relay.run())
        try:
            lossy = Process(
                ["download", f"udpin:127.0.0.1:{port}", "--out", str(tmp_path / "b")],
                tmp_path,
                name="lossy",
            )
            assert await lossy.await_exit(limit=120) == 0, lossy.stderr()
            lossy_ftp = Process(
                ["download", f"udpin:127.0.0.1:{port}", "--ftp", "--out", str(tmp_path / "d")],
                tmp_path,
                name="lossy-ftp",
            )
            assert await lossy_ftp.await_exit(limit=120) == 0, lossy_ftp.stderr()
        finally:
            relaying.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await relaying
    truth = sd.read_bytes()
    (entry,) = listing.stdout().splitlines()[1:]
    assert entry.split()[0] == "0"
    assert entry.endswith(f"{len(truth) / 1e6:.1f} MB")
    for out in (tmp_path / "a", tmp_path / "b", tmp_path / "c", tmp_path / "d"):
        (path,) = out.rglob("*.ulg")
        assert path.read_bytes() == truth, out
    assert relay.dropped > 100
    assert "1 request)" not in lossy.stdout()  # lost LOG_DATA were asked for again
    # PX4's own MAVLink FTP server (mavlink_ftp): found in SITL's /log, read in bursts.
    assert "MAVLink FTP)" in ftp.stdout()
    assert "MAVLink FTP)" in lossy_ftp.stdout()
