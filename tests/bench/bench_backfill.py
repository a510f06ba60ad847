"""Backfill time for a 10 s gap: a recording with a link cut, completed from the SD card.

Run: ``.venv/bin/python tests/bench/bench_backfill.py [--gap-s 10] [--seconds 30]`` (about a
minute, plus the radio part: ``--radio`` adds a few minutes).

A generated flight of ``--seconds`` is streamed at 1x by ``ulogstream sim --sd-card --rate usb``
with the link cut for ``--gap-s`` seconds mid-flight (``--cut-at``), and recorded by
``ulogstream record --once``: one file with a dropout where the cut was. Then ``ulogstream
backfill`` completes it from the simulator's SD card, over the same simulated USB link and, with
``--radio``, over a 5760 B/s radio with 40 ms each way (a second simulator holding the same log).
Printed: the gap's size, the time and the bytes read over the link; the completed file must be
the flight's log byte for byte.
"""

from __future__ import annotations

import argparse
import io
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from ulogstream.sim.flightlog import generate_flight_log  # noqa: E402

PORT = 14790


def ulogstream(*words: str) -> list[str]:
    return [sys.executable, "-m", "ulogstream", *words]


def backfill(recording: Path, log: Path, sim_words: list[str], label: str) -> None:
    sim = subprocess.Popen(
        ulogstream("sim", str(log), f"udpout:127.0.0.1:{PORT}", "--sd-card", *sim_words),
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        started = time.monotonic()
        done = subprocess.run(
            ulogstream("backfill", str(recording), f"udpin:127.0.0.1:{PORT}"),
            cwd=ROOT, capture_output=True, text=True, timeout=1800, check=False,
        )  # fmt: skip
        wall = time.monotonic() - started
    finally:
        sim.terminate()
        sim.wait(timeout=30)
    same = recording.read_bytes() == log.read_bytes()
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr
    print(f"  {label}: process {wall:.1f} s; {'identical' if same else 'DIFFERENT'}")
    print(f"    {summary.split(': ', 1)[-1]}", flush=True)


def main() -> None:
    """Record a flight with a cut, then backfill it over each link."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--gap-s", type=float, default=10.0)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--radio", action="store_true")
    parser.add_argument(
        "--speed", default="1", help="the simulator's replay speed ('max': as fast as the link)"
    )
    parser.add_argument(
        "--log",
        type=Path,
        help="stream this ULog file (e.g. a real PX4 log from ../shared/data/ulg) instead of a"
        " generated flight",
    )
    args = parser.parse_args()
    print(f"{time.strftime('%Y-%m-%d %H:%M')} {sys.platform}, python {sys.version.split()[0]}")
    with tempfile.TemporaryDirectory() as temporary:
        work = Path(temporary)
        out = io.BytesIO()
        if args.log is not None:
            out.write(args.log.read_bytes())
        else:
            generate_flight_log(out, duration_s=args.seconds, seed=3)
        log = work / "flight.ulg"
        log.write_bytes(out.getvalue())
        frames = int(len(out.getvalue()) / 249 / 3)  # a third into the flight
        sim = subprocess.Popen(
            ulogstream("sim", str(log), f"udpout:127.0.0.1:{PORT}", "--sd-card", "--rate", "usb",
                       "--cut-at", f"{frames}:{args.gap_s}", "--speed", args.speed),
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            subprocess.run(
                ulogstream("record", f"udpin:127.0.0.1:{PORT}", "--once", "--no-status",
                           "--out", str(work / "rec"), "--idle-timeout", "60"),
                cwd=ROOT, capture_output=True, timeout=600, check=True,
            )  # fmt: skip
        finally:
            sim.terminate()
            sim.wait(timeout=30)
        (recording,) = sorted((work / "rec").rglob("*.ulg"))
        missing = len(out.getvalue()) - len(recording.read_bytes())
        print(
            f"flight {len(out.getvalue()) / 1e6:.2f} MB; the recording lacks {missing / 1e3:.1f}"
            f" kB (a {args.gap_s:g} s cut)"
        )
        keep = work / "recording.ulg"
        keep.write_bytes(recording.read_bytes())
        backfill(recording, log, ["--rate", "usb"], "USB (800000 B/s)")
        if args.radio:
            recording.write_bytes(keep.read_bytes())
            backfill(
                recording, log, ["--rate", "radio", "--delay-ms", "40"], "radio (5760 B/s, 40 ms)"
            )


if __name__ == "__main__":
    main()
