"""Benchmark: a Flight Review upload of a 10 MB and a 100 MB log to 127.0.0.1, time and memory.

Run: ``.venv/bin/python tests/bench/bench_upload.py [size_mb]``. A server in this process
takes ``POST /upload`` and discards the body (answering 302); each upload runs in its own
subprocess, which reports its wall time and peak RSS (``ru_maxrss``): memory staying flat from
10 MB to ``size_mb`` shows the file is streamed, never held.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from ulogstream.config.sections import FlightReviewSettings
from ulogstream.upload.flight_review import FlightReviewTarget
from ulogstream.upload.info import FinishedLogInfo

_READ = 1 << 20


def child(url: str, path: Path) -> None:
    """In the subprocess: upload ``path`` once and report time and peak memory."""
    target = FlightReviewTarget(FlightReviewSettings(url=url), timeout_s=600.0)
    size = path.stat().st_size
    info = FinishedLogInfo(
        path=path, size=size, sha256=None, sys_uuid=None, start_time=None,
        date="2026-11-25", vehicle="bench", complete=True, how="complete",
    )  # fmt: skip
    start = time.perf_counter()
    page = asyncio.run(target.upload(info)).location
    seconds = time.perf_counter() - start
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"seconds": seconds, "peak_kb": peak_kb, "page": page}))


async def discard(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Read one request, throw its body away, answer like Flight Review does."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while length > 0:
        length -= len(await reader.read(min(_READ, length)))
    writer.write(
        b"HTTP/1.1 302 Found\r\nLocation: /plot_app?log=bench\r\nContent-Length: 0\r\n\r\n"
    )
    await writer.drain()
    writer.close()


def serve() -> str:
    """Start the discarding server in a thread; its base URL."""
    ready = threading.Event()
    address: list[str] = []

    async def main() -> None:
        server = await asyncio.start_server(discard, "127.0.0.1", 0)
        address.append(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}")
        ready.set()
        await server.serve_forever()

    threading.Thread(target=asyncio.run, args=(main(),), daemon=True).start()
    ready.wait()
    return address[0]


def main(size_mb: float) -> None:
    """Upload a 10 MB and a ``size_mb`` MB file, print the figures."""
    url = serve()
    with tempfile.TemporaryDirectory() as tmp:
        for mb in (10.0, size_mb):
            path = Path(tmp) / f"{mb:g}mb.ulg"
            with path.open("wb") as file:
                for _ in range(int(mb)):
                    file.write(os.urandom(1 << 20))
            out = subprocess.run(
                [sys.executable, __file__, "--child", url, str(path)],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            report = json.loads(out.splitlines()[-1])
            rate = mb / report["seconds"]
            print(
                f"{mb:5.0f} MB: {report['seconds']:.2f} s ({rate:.0f} MB/s), "
                f"peak RSS {report['peak_kb'] / 1024:.1f} MB -> {report['page']}"
            )


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], Path(sys.argv[3]))
    else:
        main(float(sys.argv[1]) if len(sys.argv) > 1 else 100.0)
