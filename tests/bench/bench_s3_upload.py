"""Benchmark: one large log through S3Target into moto's S3 server on 127.0.0.1.

Run: ``.venv/bin/python tests/bench/bench_s3_upload.py [MB] [part_size_mb]`` (default 200 MB in
8 MiB parts). Prints the upload rate, the growth of this process's resident memory while it ran
(it must stay near three parts, whatever the size of the log) and the longest the event loop
went without running a 10 ms ticker beyond its 10 ms. moto is a Python server: it, not the
uploader, sets the rate, and it takes a core: on 2 loaded cores the ticker then waits tens of ms
for a CPU, as much as when obstore reads the file itself (no Python in the path); an idle loop
on the same machine waits about 3 ms.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout, uninstalled
from ulogstream.config.sections import S3Settings
from ulogstream.upload.info import FinishedLogInfo
from ulogstream.upload.s3 import S3Credentials, S3Target

TICK_S = 0.01


def resident_bytes() -> int:
    """This process's resident memory (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def write_log(path: Path, size: int) -> str:
    """A file of ``size`` random bytes written 1 MiB at a time; its SHA-256."""
    digest = hashlib.sha256()
    with path.open("wb") as file:
        left = size
        while left:
            chunk = os.urandom(min(left, 1 << 20))
            digest.update(chunk)
            file.write(chunk)
            left -= len(chunk)
    return digest.hexdigest()


def start_moto(port: int, log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=out,
            stderr=out,
        )
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        except OSError:
            if time.monotonic() > deadline:
                process.kill()
                raise
            time.sleep(0.05)
        else:
            return process


async def upload(target: S3Target, info: FinishedLogInfo) -> tuple[float, int, float]:
    """Seconds taken, peak growth of resident memory and the longest tick."""
    base = resident_bytes()
    peak = base
    longest = 0.0
    done = False

    async def ticker() -> None:
        nonlocal peak, longest
        last = time.monotonic()
        while not done:
            await asyncio.sleep(TICK_S)
            now = time.monotonic()
            longest = max(longest, now - last)
            last = now
            peak = max(peak, resident_bytes())

    tick = asyncio.create_task(ticker())
    started = time.monotonic()
    await target.upload(info)
    elapsed = time.monotonic() - started
    done = True
    await tick
    return elapsed, peak - base, longest


def main() -> None:
    size_mb = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    part_mb = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "2026-11-25" / "10_00_00.ulg"
        path.parent.mkdir()
        sha256 = write_log(path, size_mb << 20)
        moto = start_moto(port, Path(directory) / "moto.log")
        try:
            request = urllib.request.Request(f"http://127.0.0.1:{port}/bench", method="PUT")
            urllib.request.urlopen(request, timeout=10).close()  # noqa: S310 (http only)
            settings = S3Settings(
                bucket="bench", endpoint_url=f"http://127.0.0.1:{port}", part_size_mb=part_mb
            )
            target = S3Target(settings, credentials=S3Credentials("bench", "bench"))
            info = FinishedLogInfo(
                path=path,
                size=size_mb << 20,
                sha256=sha256,
                sys_uuid=None,
                start_time=None,
                date="2026-11-25",
                vehicle="bench",
                complete=True,
                how="complete",
            )
            elapsed, grown, longest = asyncio.run(upload(target, info))
        finally:
            moto.kill()
            moto.wait()
    print(
        f"{size_mb} MB in {part_mb} MiB parts: {elapsed:.1f} s, {size_mb / elapsed:.1f} MB/s; "
        f"resident memory grew {grown / (1 << 20):.0f} MiB at most; "
        f"longest event-loop stall {longest * 1000 - TICK_S * 1000:.1f} ms"
    )


if __name__ == "__main__":
    main()
