"""Benchmark: flight log generation and CSV export (ours vs pyulog's ulog2csv).

Run: ``.venv/bin/python tests/cli/bench_cli.py``; prints seconds (best of 3) and throughput.
"""

from __future__ import annotations

import contextlib
import io
import shutil
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from pyulog.ulog2csv import convert_ulog2csv

from ulogstream.cli.files import summarize
from ulogstream.export.csv import export_csv
from ulogstream.sim.flightlog import generate_flight_log

if TYPE_CHECKING:
    from collections.abc import Callable

SAMPLE = Path(__file__).resolve().parents[2].parent / "shared/data/ulg/pyulog__sample.ulg"


def best_of(runs: int, action: Callable[[], object]) -> float:
    """The fastest of ``runs`` timings of ``action``, in seconds."""
    timings = []
    for _ in range(runs):
        start = time.perf_counter()
        action()
        timings.append(time.perf_counter() - start)
    return min(timings)


def bench_export(log: Path, work: Path) -> None:
    """Time our CSV export and ulog2csv on ``log``."""
    size_mb = log.stat().st_size / 1e6

    def ours() -> None:
        shutil.rmtree(work / "ours", ignore_errors=True)
        export_csv(log, work / "ours")

    def theirs() -> None:
        shutil.rmtree(work / "pyulog", ignore_errors=True)
        (work / "pyulog").mkdir()
        with contextlib.redirect_stdout(io.StringIO()):
            convert_ulog2csv(str(log), None, str(work / "pyulog"), ",", None, None)

    for name, action in (("export_csv", ours), ("ulog2csv", theirs)):
        seconds = best_of(3, action)
        print(f"{name:>10} {log.name}: {seconds:.3f} s ({size_mb / seconds:.1f} MB/s)")
    seconds = best_of(3, lambda: summarize(log))
    print(f"{'info':>10} {log.name}: {seconds:.3f} s ({size_mb / seconds:.1f} MB/s)")


def main() -> None:
    """Print the figures."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        log = work / "flight.ulg"
        seconds = best_of(3, lambda: generate_flight_log(log))
        size = log.stat().st_size
        print(f"generate_flight_log 60 s: {seconds:.3f} s, {size} bytes ({size / 60:.0f} B/s)")
        bench_export(log, work)
        if SAMPLE.is_file():
            bench_export(SAMPLE, work)


if __name__ == "__main__":
    main()
