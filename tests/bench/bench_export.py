"""Benchmark: ULog -> ROS 1 bag and MCAP export of a 40 MB flight log, time and peak memory.

Run: ``.venv/bin/python tests/bench/bench_export.py [size_mb]``. Each export runs in its own
subprocess, which reports its wall time and peak RSS (``ru_maxrss``); a 4 MB log and a bare
import are measured too, so that memory staying flat as the log grows shows the bound. The
logs are generated in subprocesses too: Linux carries ``ru_maxrss`` over fork and exec, so a
parent that held a big log would mask the children's figures.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ulogstream.sim.flightlog import generate_flight_log

BYTES_PER_SECOND = 52_000
"""About what generate_flight_log writes per second of flight."""


def child(kind: str, src: Path, dst: Path) -> None:
    """In the subprocess: export (or only import, for ``kind == "import"``) and report."""
    from ulogstream.export.mcap import export_mcap  # noqa: PLC0415
    from ulogstream.export.rosbag import export_rosbag  # noqa: PLC0415

    start = time.perf_counter()
    messages = 0
    if kind == "generate":
        generate_flight_log(src, duration_s=float(dst.name))
    elif kind != "import":
        exporter = export_rosbag if kind == "rosbag" else export_mcap
        summary = exporter(src, dst)
        messages = summary.data_messages + summary.log_messages + summary.parameter_messages
    seconds = time.perf_counter() - start
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"seconds": seconds, "peak_kb": peak_kb, "messages": messages}))


def measure(kind: str, src: Path, dst: Path) -> dict[str, float]:
    """Run one export (or the log generation) in a fresh interpreter and return its report."""
    out = subprocess.run(
        [sys.executable, __file__, "--child", kind, str(src), str(dst)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    report: dict[str, float] = json.loads(out.splitlines()[-1])
    return report


def main(size_mb: float) -> None:
    """Generate the logs, export each to both formats, print the figures."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        logs = {}
        for label, megabytes in (("small", size_mb / 10), ("large", size_mb)):
            path = work / f"{label}.ulg"
            measure("generate", path, Path(str(megabytes * 1e6 / BYTES_PER_SECOND)))
            logs[label] = path
        base = measure("import", logs["small"], work / "none")
        print(f"python + numpy + rosbags + mcap imported: peak RSS {base['peak_kb'] / 1024:.0f} MB")
        for kind in ("rosbag", "mcap"):
            for label, src in logs.items():
                dst = work / f"{label}.{kind}"
                report = measure(kind, src, dst)
                size = src.stat().st_size / 1e6
                seconds = report["seconds"]
                print(
                    f"{kind:>6} {size:5.1f} MB log -> {dst.stat().st_size / 1e6:5.1f} MB: "
                    f"{seconds:6.2f} s ({size / seconds:4.1f} MB/s, "
                    f"{report['messages'] / seconds / 1000:5.1f} k msgs/s), "
                    f"peak RSS {report['peak_kb'] / 1024:4.0f} MB"
                )


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--child":
        child(sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4]))
    else:
        main(float(sys.argv[1]) if len(sys.argv) > 1 else 40.0)
