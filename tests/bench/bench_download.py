"""Log download throughput and CPU: ``ulogstream download`` against pymavlink's loop.

Run: ``.venv/bin/python tests/bench/bench_download.py [--rounds 2] [--log-seconds 20]
[--radio-seconds 2]`` (a few minutes: the reference is slow; needs ``../shared/px4-sitl`` for
the first part).

1. **Full-rate UDP, real PX4.** A PX4 SITL (instance 7, SD log from boot) logs for
   ``--log-seconds``, then its logger is stopped: one finished SD log. Each round downloads it
   with ``python -m ulogstream download`` and with ``pymavlink_download.py`` (the usual script:
   ``recv_match``, the first missing range asked again after 0.5 s of silence), in turn, over the
   onboard link. Both files must equal the SD log. ``download --ftp`` (MAVLink FTP bursts)
   runs in the same rounds.
2. **A 5760 B/s radio.** PX4 SITL's log handler does not keep to a UDP instance's ``-r`` rate
   (its whole log comes at loopback speed; on a real radio the serial port paces it), so this
   part uses ulogstream's simulated vehicle: its SD card sends at 5760 wire bytes/s, 40 ms each
   way, 2 % of LOG_DATA lost (``sim --sd-card``), a generated flight of ``--radio-seconds``.
   The ceiling is 90 of every 109 wire bytes: 4756 log bytes/s (MAVLink FTP: 239 of 266,
   5175 log bytes/s).

Figures: the transfer's rate (from the request to the last byte, as each tool reports it), and
each whole process's wall time and CPU (start-up, heartbeat, listing, transfer, exit).
"""

from __future__ import annotations

import argparse
import io
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from ulogstream.sim.flightlog import generate_flight_log  # noqa: E402

SITL = ROOT.parent / "shared" / "px4-sitl" / "px4-sitl"
INSTANCE = 7
BENCH = Path(__file__).parent
RADIO_RATE = 5760
RADIO_CEILING = RADIO_RATE * 90 / 109
RADIO_FTP_CEILING = RADIO_RATE * 239 / 266


def child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(words: list[str], timeout: float) -> tuple[str, float, float]:
    """``words`` as a process: its stdout, wall seconds and CPU seconds."""
    cpu, wall = child_cpu(), time.monotonic()
    done = subprocess.run(
        words, capture_output=True, text=True, timeout=timeout, check=False, cwd=ROOT
    )
    wall, cpu = time.monotonic() - wall, child_cpu() - cpu
    if done.returncode:
        print(f"    {words[1]} exited {done.returncode}: {done.stderr[-400:]}", flush=True)
    return done.stdout, wall, cpu


def ours(link: str, out: Path, *, ftp: bool = False) -> tuple[float, float, float, int]:
    """``ulogstream download [--ftp]``: transfer seconds, wall, CPU, requests."""
    words = [sys.executable, "-m", "ulogstream", "download", link, "--out", str(out)]
    stdout, wall, cpu = run([*words, *(["--ftp"] if ftp else [])], 1800)
    # Its line ends "in SECONDS s (RATE MB/s, N requests[, MAVLink FTP])".
    seconds = float(stdout.rsplit(" in ", 1)[1].split()[0])
    requests = int(stdout.rsplit(" request", 1)[0].rsplit(" ", 1)[1])
    if ftp and "MAVLink FTP" not in stdout:
        print("    --ftp fell back to LOG_REQUEST_DATA", flush=True)
    return seconds, wall, cpu, requests


def ours_ftp(link: str, out: Path) -> tuple[float, float, float, int]:
    """``ulogstream download --ftp``."""
    return ours(link, out, ftp=True)


def reference(link: str, out: Path) -> tuple[float, float, float, int]:
    """``pymavlink_download.py``: transfer seconds, wall, CPU, requests."""
    stdout, wall, cpu = run(
        [sys.executable, str(BENCH / "pymavlink_download.py"), link, str(out / "ref.ulg")], 1800
    )
    _size, seconds, requests = stdout.split()
    return float(seconds), wall, cpu, int(requests)


def compare(label: str, truth: bytes, link: str, *, rounds: int, work: Path) -> None:
    size = len(truth)
    for round_number in range(rounds):
        for name, tool in (("ulogstream", ours), ("--ftp", ours_ftp), ("pymavlink", reference)):
            out = work / f"{label}-{name}-{round_number}"
            out.mkdir()
            seconds, wall, cpu, requests = tool(link, out)
            (path,) = out.rglob("*.ulg")
            same = path.read_bytes() == truth
            print(
                f"  {label} round {round_number + 1} {name:>10}: {size / seconds / 1e3:8.1f} kB/s"
                f" ({seconds:6.2f} s, {requests} requests); process {wall:6.2f} s wall,"
                f" {cpu:5.2f} s CPU; {'identical' if same else 'DIFFERENT'}",
                flush=True,
            )


def px4_part(rounds: int, log_seconds: float, work: Path) -> None:
    if not SITL.exists():
        print(f"no PX4 SITL at {SITL}: part 1 skipped")
        return
    directory = work / "px4"
    subprocess.run(
        [str(SITL), "start", str(directory), "-i", str(INSTANCE), "--log", "file",
         "--sdlog-mode", "1"],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    try:
        time.sleep(log_seconds)
        subprocess.run([str(SITL), "cmd", str(directory), "logger", "stop"], check=True,
                       capture_output=True, timeout=30)  # fmt: skip
        time.sleep(2)
        (sd,) = sorted((directory / "log").rglob("*.ulg"))
        truth = sd.read_bytes()
        print(f"PX4 SITL SD log: {len(truth) / 1e6:.2f} MB; onboard link, full rate")
        compare("px4", truth, f"udpin:127.0.0.1:{14540 + INSTANCE}", rounds=rounds, work=work)
    finally:
        subprocess.run([str(SITL), "stop", str(directory)], capture_output=True, timeout=60,
                       check=False)  # fmt: skip


def radio_part(rounds: int, radio_seconds: float, work: Path) -> None:
    log = io.BytesIO()
    generate_flight_log(log, duration_s=radio_seconds, seed=1)
    truth = log.getvalue()
    path = work / "radio.ulg"
    path.write_bytes(truth)
    port = 14760
    sim = subprocess.Popen(
        [sys.executable, "-m", "ulogstream", "sim", str(path), f"udpout:127.0.0.1:{port}",
         "--sd-card", "--rate", str(RADIO_RATE), "--delay-ms", "40", "--loss", "0.02"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        print(
            f"simulated radio: {len(truth) / 1e3:.1f} kB log, {RADIO_RATE} B/s wire (ceiling "
            f"{RADIO_CEILING / 1e3:.2f} kB/s of log, {RADIO_FTP_CEILING / 1e3:.2f} by FTP), 40 ms"
            " each way, 2 % of LOG_DATA and FTP data lost"
        )
        compare("radio", truth, f"udpin:127.0.0.1:{port}", rounds=rounds, work=work)
    finally:
        sim.terminate()
        sim.wait(timeout=30)


def main() -> None:
    """Run both parts and print one line per download."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--log-seconds", type=float, default=20.0)
    parser.add_argument("--radio-seconds", type=float, default=2.0)
    parser.add_argument("--only", choices=("px4", "radio"))
    args = parser.parse_args()
    print(f"{time.strftime('%Y-%m-%d %H:%M')} {sys.platform}, python {sys.version.split()[0]}")
    with tempfile.TemporaryDirectory() as temporary:
        work = Path(temporary)
        if args.only in {None, "px4"}:
            px4_part(args.rounds, args.log_seconds, work)
        if args.only in {None, "radio"}:
            radio_part(args.rounds, args.radio_seconds, work)


if __name__ == "__main__":
    main()
