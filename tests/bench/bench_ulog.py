"""Benchmark: ulogstream's ULog reader and incremental parser against pyulog.

Run: ``.venv/bin/python tests/bench/bench_ulog.py [--repeat N] [--large-mb 40]``.

Prints, on the same files in one run: whole-file read throughput (MB/s, data rows/s) of
ulogstream and pyulog on every sample in ../shared/data/ulg, with aggregates for the old logs
(few, large messages) and the modern ones (PX4 v1.15/v1.17: ~100 topic instances, ~60 bytes
per message), and on two generated large files (the data section of an old and of a modern
sample repeated with shifted timestamps); then peak memory of both readers on the modern
logs and the large files in fresh processes (VmHWM over the imports and VmHWM itself; not
tracemalloc's peak, which does not see our rows: they are in memory mappings) next to the
size of the rows, the floor for both; then the cost of one 'P' message and incremental
throughput fed 249-byte chunks.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import math
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec
from pyulog import ULog

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout, uninstalled
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.installed import compile_package

from ulogstream.adapters.ulog_file import read
from ulogstream.ulog.dtypes import compile_format, parse_format
from ulogstream.ulog.parser import ULogParser
from ulogstream.ulog.writer import ULogWriter

if TYPE_CHECKING:
    from ulogstream.ulog.events import FormatDefined

SAMPLES = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "ulg"
LARGE_SOURCES = {"old": "pyulog__sample.ulg", "modern": "pyulog__sample_px4_events.ulg"}
MODERN = {
    "px4-ulog-rs__corrupt_actuator_armed_wrong_size.ulg",
    "px4-ulog-rs__corrupt_format_not_utf8.ulg",
    "px4-ulog-rs__corrupt_unregistered_msg_id.ulg",
    "pyulog__sample_px4_events.ulg",
}
"""The issue's modern logs: PX4 v1.17 (px4-ulog-rs) and v1.15 (pyulog's events sample)."""
CHUNK = 249


def count_rows(path: Path) -> int:
    """Data rows in the log as our reader reads it (a framing walk miscounts damaged logs)."""
    return sum(len(topic.data) for topic in read(path).topics.values())


def best_time(func: object, repeat: int) -> float:
    """The fastest of ``repeat`` calls of ``func`` (the machine is shared: min is stable)."""
    assert callable(func)
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        func()
        best = min(best, time.perf_counter() - start)
    return best


def read_pyulog(path: Path) -> None:
    """Read with pyulog, silencing its prints."""
    with contextlib.redirect_stdout(io.StringIO()):
        ULog(str(path))


def feed_chunks(data: bytes, chunk: int = CHUNK) -> int:
    """Feed ``data`` to a parser ``chunk`` bytes at a time; return the events it gave."""
    parser = ULogParser()
    count = 0
    receive = parser.receive_bytes
    for start in range(0, len(data), chunk):
        count += len(receive(data[start : start + chunk]))
    return count + len(parser.close())


def build_parameters(target: Path, count: int) -> None:
    """Write a log of ``count`` 'P' messages (int32 and float, 1500 names repeated)."""
    w = ULogWriter()
    for i in range(count):
        if i % 2:
            w.parameter(f"PARAM_{i % 1500}", float(i))
        else:
            w.parameter(f"IPARAM_{i % 1500}", i)
    target.write_bytes(w.getvalue())


def build_large(source: Path, target: Path, min_bytes: int) -> None:
    """Write ``source`` followed by copies of its 'D'/'L'/'O' data with shifted timestamps."""
    data = source.read_bytes()
    pos = 16
    formats: dict[str, FormatDefined] = {}
    ts_offset: dict[int, int] = {}
    body: list[tuple[int, int, bytes]] = []  # (type, msg_id or -1, whole message)
    first = last = None
    while pos + 3 <= len(data):
        size, msg_type = struct.unpack_from("<HB", data, pos)
        message = data[pos : pos + 3 + size]
        if len(message) < 3 + size:
            break
        payload = message[3:]
        if msg_type == ord("F"):
            fmt = parse_format(payload.decode())
            formats[fmt.name] = fmt
        elif msg_type == ord("A"):
            msg_id = struct.unpack_from("<H", payload, 1)[0]
            stamp = compile_format(payload[3:].decode(), formats).timestamp
            assert stamp is not None
            ts_offset[msg_id] = stamp.offset
        elif msg_type == ord("D"):
            msg_id = struct.unpack_from("<H", payload, 0)[0]
            ts = struct.unpack_from("<Q", payload, 2 + ts_offset[msg_id])[0]
            first = ts if first is None else min(first, ts)
            last = ts if last is None else max(last, ts)
            body.append((msg_type, msg_id, message))
        elif msg_type in {ord("L"), ord("O")}:
            body.append((msg_type, -1, message))
        pos += 3 + size
    assert first is not None
    assert last is not None
    span = last - first + 1_000_000
    with target.open("wb") as out:
        out.write(data)
        written, copy = len(data), 1
        while written < min_bytes:
            shift = span * copy
            for msg_type, msg_id, message in body:
                buf = bytearray(message)
                if msg_type == ord("D"):
                    at = 5 + ts_offset[msg_id]
                    struct.pack_into("<Q", buf, at, struct.unpack_from("<Q", buf, at)[0] + shift)
                elif msg_type == ord("L"):
                    struct.pack_into("<Q", buf, 4, struct.unpack_from("<Q", buf, 4)[0] + shift)
                out.write(buf)
                written += len(buf)
            copy += 1


_PEAK_SCRIPT = """
import contextlib, io, sys
reader, path, root = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path.insert(0, root)
import numpy
from pyulog import ULog
from ulogstream.adapters.ulog_file import read

def hwm():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM"))

base = hwm()
if reader == "u":
    result = read(path)
else:
    with contextlib.redirect_stdout(io.StringIO()):
        result = ULog(path)
print(base, hwm())
"""
READERS = {"ulogstream": "u", "pyulog": "p"}
"""One letter each: both children get the same argv and environment, so the same heap."""


class PeakMemory(msgspec.Struct, frozen=True):
    """Peak memory of reading one file whole, in KiB (medians over fresh processes)."""

    rss_over_imports: int
    """VmHWM at the end minus VmHWM after the imports (both readers are imported)."""
    rss: int
    """VmHWM at the end: the same imports in both processes, so directly comparable."""


def peak_memory(reader: str, path: Path, runs: int) -> PeakMemory:
    """Peak memory of ``reader`` ('ulogstream' or 'pyulog') reading ``path`` whole.

    Each run is a fresh process that imports numpy, pyulog and ulogstream, notes VmHWM, reads
    the file and notes VmHWM again (VmHWM is per address space, so unlike ru_maxrss it does
    not inherit this process's peak). Run ``i`` of both readers has hash seed ``i`` and
    environment and argv padded by the same ``i``-given sizes, so both start from the same
    heap. The runs vary its layout, which alone moved a figure by a few hundred KiB on a 3 MB
    log and up to 1 MiB on the large files while rows grew in the heap (the sizes of argv and
    the environment shift every allocation); the median is of those layouts.
    """
    root = str(Path(__file__).resolve().parents[2])

    def child(seed: int) -> list[int]:
        argv = [READERS[reader], str(path), root, "x" * (seed * 331 % 2048)]
        out = subprocess.run(
            [sys.executable, "-c", _PEAK_SCRIPT, *argv],
            check=True,
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONHASHSEED": str(seed), "BENCH_PAD": "x" * (seed * 509 % 4096)},
        ).stdout.split()
        return [int(word) for word in out]

    runs_kib = [child(seed) for seed in range(1, runs + 1)]
    return PeakMemory(
        int(statistics.median(end - base for base, end in runs_kib)),
        int(statistics.median(end for _, end in runs_kib)),
    )


def compare_memory(path: Path, label: str, runs: int) -> tuple[PeakMemory, PeakMemory]:
    """Print one line comparing both readers' peak memory on ``path``; return both."""
    ours = peak_memory("ulogstream", path, runs)
    theirs = peak_memory("pyulog", path, runs)
    rows = sum(topic.data.nbytes for topic in read(path).topics.values()) / 1024
    print(
        f"  {label[:40]:40s} rows {rows:8.0f}  RSS over imports {ours.rss_over_imports:6d} vs "
        f"{theirs.rss_over_imports:6d} ({ours.rss_over_imports / theirs.rss_over_imports:.3f}),"
        f" peak {ours.rss:6d} vs {theirs.rss:6d} ({ours.rss / theirs.rss:.3f})"
    )
    return ours, theirs


def main() -> None:
    """Run every measurement and print the tables."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement (best kept)")
    parser.add_argument("--large-mb", type=int, default=40, help="size of the generated files")
    parser.add_argument(
        "--memory-runs", type=int, default=9, help="fresh processes per memory figure (median)"
    )
    args = parser.parse_args()
    # The memory figures' processes import ulogstream before their baseline: a module compiled
    # there (a stale .pyc under PYTHONDONTWRITEBYTECODE) would raise ours and flatter the ratio.
    compile_package()
    files = sorted(SAMPLES.glob("*.ulg"))
    if not files:
        print(f"no sample logs in {SAMPLES}; nothing to measure")
        return

    print(f"{'file':52s} {'MB':>6s} {'rows':>7s} {'ours MB/s':>10s} {'pyulog':>8s} {'x':>5s}")
    groups: dict[str, list[tuple[int, int, float, float]]] = {"old": [], "modern": []}
    for path in files:
        size = path.stat().st_size
        msgs = count_rows(path)
        ours = best_time(lambda p=path: read(p), args.repeat)
        theirs = best_time(lambda p=path: read_pyulog(p), args.repeat)
        groups["modern" if path.name in MODERN else "old"].append((size, msgs, ours, theirs))
        print(
            f"{path.name[:52]:52s} {size / 1e6:6.2f} {msgs:7d} {size / ours / 1e6:10.1f} "
            f"{size / theirs / 1e6:8.1f} {theirs / ours:5.2f}"
        )
    for name, rows in groups.items():
        if not rows:
            continue
        size = sum(r[0] for r in rows)
        msgs = sum(r[1] for r in rows)
        ours = sum(r[2] for r in rows)
        theirs = sum(r[3] for r in rows)
        geomean = math.exp(sum(math.log(r[3] / r[2]) for r in rows) / len(rows))
        print(
            f"{'aggregate of ' + name + ' logs':52s} {size / 1e6:6.2f} {msgs:7d} "
            f"{size / ours / 1e6:10.1f} {size / theirs / 1e6:8.1f} {theirs / ours:5.2f}"
            f"  (geometric mean of the ratios {geomean:.2f}; rows/s: ours "
            f"{msgs / ours:,.0f}, pyulog {msgs / theirs:,.0f})"
        )

    with tempfile.TemporaryDirectory() as tmp:
        larges: list[tuple[Path, str]] = []
        for kind, source in LARGE_SOURCES.items():
            if (SAMPLES / source).exists():
                large = Path(tmp) / f"large_{kind}.ulg"
                build_large(SAMPLES / source, large, args.large_mb * 1_000_000)
                measure_large(large, f"{kind} log {source}", args.repeat)
                larges.append((large, f"large {kind} ({large.stat().st_size / 1e6:.1f} MB)"))

        print(
            f"\npeak memory, KiB, ours vs pyulog (ratio), medians of {args.memory_runs} fresh "
            f"processes each (hash seeds 1..{args.memory_runs}, environments of different sizes):"
        )
        measured = [(path, path.name) for path in files if path.name in MODERN] + larges
        for path, label in measured:
            compare_memory(path, label, args.memory_runs)

        params = Path(tmp) / "params.ulg"
        build_parameters(params, 20_000)
        ours = best_time(lambda: read(params), args.repeat)
        theirs = best_time(lambda: read_pyulog(params), args.repeat)
        print(
            f"'P' messages (20000, read whole): ours {ours / 20_000 * 1e6:.2f} us each, pyulog "
            f"{theirs / 20_000 * 1e6:.2f} us"
        )

    all_bytes = [path.read_bytes() for path in files]
    chunked = best_time(lambda: [feed_chunks(d) for d in all_bytes], args.repeat)
    print(
        f"incremental, {CHUNK}-byte chunks, all samples: "
        f"{sum(map(len, all_bytes)) / chunked / 1e6:.1f} MB/s"
    )


def measure_large(large: Path, source: str, repeat: int) -> None:
    """Speed and 249-byte incremental feeding on one generated large file."""
    size = large.stat().st_size
    msgs = count_rows(large)
    ours = best_time(lambda: read(large), repeat)
    theirs = best_time(lambda: read_pyulog(large), repeat)
    print(
        f"\nlarge file ({size / 1e6:.1f} MB, {msgs} data rows, from the {source}):\n"
        f"  read: ours {size / ours / 1e6:.1f} MB/s ({msgs / ours:,.0f} rows/s), "
        f"pyulog {size / theirs / 1e6:.1f} MB/s ({msgs / theirs:,.0f} rows/s), "
        f"speed-up {theirs / ours:.2f}x"
    )
    data = large.read_bytes()
    chunked = best_time(lambda: feed_chunks(data), 1)
    print(f"  incremental, {CHUNK}-byte chunks: {size / chunked / 1e6:.1f} MB/s")


if __name__ == "__main__":
    main()
