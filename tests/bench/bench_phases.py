"""Where a ``record`` process spends its CPU: start-up, the stream, the end; trees alternated.

Run: ``.venv/bin/python tests/bench/bench_phases.py [--log NAME] [--rate B/S] [--runs N]
[--before DIR] [--floor] [--mqtt]`` (about ``runs x trees x 25`` seconds; needs
``../shared/data/ulg``, and mosquitto for ``--mqtt``).

``ulogstream record --once`` listens on UDP; once it says so (and 0.3 s later, its start-up done)
its CPU is read from ``/proc``; the simulated PX4 (``ulogstream sim``, a process of its own)
streams the log at ``--rate`` (default 315000 B/s: SITL pace in ``bench_real.py``) with the
log's time ignored; when it has sent all, the CPU is read again; then the recorder finishes the
log (stop, checksum, flight index) and exits (``wait4``). Printed per run: start-up, stream and
end CPU seconds, and the stream's user and system time. With ``--before DIR`` the checkout DIR
runs in turn with this one (DIR under /work, so that ``../shared`` is found from it).
``--floor`` runs ``floor_receiver.py`` instead (the least a receiver can cost); ``--mqtt``
runs ``record --mqtt`` (default 10 Hz) with a mosquitto started here. The whole-process
ratios against PX4's script are ``bench_real.py``'s; this one says which phase moved.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT.parent / "shared" / "data" / "ulg"
FLOOR = Path(__file__).with_name("floor_receiver.py")
TICKS = os.sysconf("SC_CLK_TCK")

sys.path.insert(0, str(ROOT / "tests"))
from bench.bench_live import mosquitto  # noqa: E402


def cpu(pid: int) -> tuple[float, float]:
    """User and system CPU seconds of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) / TICKS, int(fields[12]) / TICKS


def run(tree: Path, log: Path, rate: str, port: int, *, floor: bool, broker: int | None) -> str:
    """One recording of ``log`` (published to ``broker`` when given); the line of figures."""
    with tempfile.TemporaryDirectory() as out:
        if floor:
            words = [sys.executable, str(FLOOR), f"udpin:127.0.0.1:{port}", f"{out}/stream.bin"]
        else:
            words = [
                sys.executable, "-m", "ulogstream", "record", f"udpin:127.0.0.1:{port}", "--once",
                "--no-status", "--out", out, "--min-free-mb", "0",
            ]  # fmt: skip
            if broker is not None:
                words += ["--mqtt", f"mqtt://127.0.0.1:{broker}", "--vehicle-id", "bench"]
        receiver = subprocess.Popen(
            words, cwd=tree, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        assert receiver.stderr is not None
        if not floor:
            for line in receiver.stderr:
                if "listening on" in line:
                    break
        time.sleep(0.3 if not floor else 0.5)
        user0, system0 = cpu(receiver.pid)
        subprocess.run(
            [sys.executable, "-m", "ulogstream", "sim", str(log), f"udpout:127.0.0.1:{port}",
             "--rate", rate, "--speed", "max"],
            cwd=ROOT, capture_output=True, check=True,
        )  # fmt: skip
        user1, system1 = cpu(receiver.pid)
        if floor:
            receiver.terminate()
        receiver.stderr.read()
        _, status, usage = os.wait4(receiver.pid, 0)  # its own CPU: the simulator's is not in it
        receiver.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    total = usage.ru_utime + usage.ru_stime
    start, stream = user0 + system0, user1 + system1 - user0 - system0
    return (
        f"start-up {start:.2f}  stream {stream:.2f} (user {user1 - user0:.2f}, system "
        f"{system1 - system0:.2f})  end {total - user1 - system1:.2f}  total {total:.2f} CPU s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--log", default="px4-ulog-rs__corrupt_format_not_utf8.ulg")
    parser.add_argument("--rate", default="315000")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--before", type=Path, help="another checkout, run in turn with this one")
    parser.add_argument("--floor", action="store_true", help="time floor_receiver.py instead")
    parser.add_argument("--mqtt", action="store_true", help="record --mqtt to a local mosquitto")
    args = parser.parse_args()
    log = DATA / args.log
    if not log.is_file():
        sys.exit(f"{log} is missing: this benchmark needs ../shared/data/ulg")
    trees = [ROOT] if args.before is None else [args.before.resolve(), ROOT]
    print(time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), f"nproc {os.cpu_count()}", log.name)
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        broker = stack.enter_context(mosquitto(Path(tmp)))[0] if args.mqtt else None
        for number in range(args.runs):
            for tree in trees:
                port = 47000 + (os.getpid() + number) % 2000
                name = "before" if tree != ROOT else "this tree"
                line = run(tree, log, args.rate, port, floor=args.floor, broker=broker)
                print(f"{name:10s} {line}", flush=True)


if __name__ == "__main__":
    main()
