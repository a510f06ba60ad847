"""Backfill on a real PX4 (SITL): a flight with a 10 s blackout, completed from PX4's SD log.

Run: ``.venv/bin/python tests/bench/bench_backfill_px4.py [--blackout-s 10]`` (about a minute;
needs ``../shared/px4-sitl``).

PX4 SITL logs to its SD card from arming to disarming (SDLOG_MODE 0) and streams on its onboard
link through a relay; ``ulogstream record --while-armed --no-backfill`` records the flight while
the relay blacks the link out for ``--blackout-s`` in the air. Then the relay is taken away and
``ulogstream backfill`` completes the flight's recordings straight from PX4 over its onboard
UDP link. Printed: the recordings, the backfill's time and what it read, and the rows of PX4's
own SD log missing or differing in the completed file (pyulog).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from pyulog import ULog

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from support.processes import Process, recordings  # noqa: E402
from support.px4 import UdpRelay, fly, px4_sitl  # noqa: E402

from ulogstream.cli.demo import free_udp_port  # noqa: E402


def rows(path: Path) -> dict[tuple[str, int], dict[int, bytes]]:
    """Every row of every topic instance, by timestamp."""
    out: dict[tuple[str, int], dict[int, bytes]] = {}
    for data in ULog(str(path)).data_list:
        names = sorted(data.data)
        table = np.rec.fromarrays([data.data[n] for n in names], names=names)  # type: ignore[call-overload]
        out[data.name, data.multi_id] = {
            int(s): table[i].tobytes() for i, s in enumerate(data.data["timestamp"])
        }
    return out


async def main(blackout_s: float) -> None:
    print(f"{time.strftime('%Y-%m-%d %H:%M')} {sys.platform}, python {sys.version.split()[0]}")
    with tempfile.TemporaryDirectory() as temporary:
        work = Path(temporary)
        out = work / "out"
        with px4_sitl(work / "px4", instance=7, log="all", sdlog_mode=0) as px4:
            port = free_udp_port()
            relay = UdpRelay(px4.onboard_port, px4.px4_port, port)
            relaying = asyncio.create_task(relay.run())
            recorder = Process(
                ["record", f"udpin:127.0.0.1:{port}", "--while-armed", "--no-backfill",
                 "--out", str(out), "--no-status"],
                work,
            )  # fmt: skip
            try:
                await asyncio.sleep(3)
                await fly(px4, relay=relay, blackout_s=blackout_s)
                await recorder.await_line("complete; stopped", limit=60)
                recorder.send_signal(signal.SIGINT)
                await recorder.await_exit(limit=60)
            finally:
                relaying.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await relaying
                recorder.kill()
            pieces = recordings(out)
            print(f"recorded: {len(pieces)} file(s), {sum(p.stat().st_size for p in pieces)} B")
            started = time.monotonic()
            done = await asyncio.to_thread(
                subprocess.run,
                [sys.executable, "-m", "ulogstream", "backfill", *map(str, pieces),
                 f"udpin:127.0.0.1:{px4.onboard_port}"],
                capture_output=True, text=True, timeout=600, check=False, cwd=work,
            )  # fmt: skip
            print(f"backfill process: {time.monotonic() - started:.1f} s, exit {done.returncode}")
            for line in done.stdout.splitlines():
                print(f"  {line.split(': ', 1)[-1]}")
            (sd,) = px4.sd_logs()
        completed = pieces[0]  # the others are kept as they were
        truth, ours = rows(sd), rows(completed)
        missing = sum(len(t.keys() - ours.get(k, {}).keys()) for k, t in truth.items())
        differing = sum(
            1
            for k, t in truth.items()
            for s, r in t.items()
            if s in ours.get(k, {}) and ours[k][s] != r
        )
        total = sum(map(len, truth.values()))
        print(f"PX4's SD log: {total} rows; missing in the file {missing}, differing {differing}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--blackout-s", type=float, default=10.0)
    asyncio.run(main(parser.parse_args().blackout_s))
