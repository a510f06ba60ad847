"""Whole-process CPU of each receiver on a real PX4 (SITL) streaming at full rate, alternated.

Run: ``.venv/bin/python tests/bench/bench_px4.py [--seconds 30] [--rounds 3] [--receivers ...]``
(about ``rounds x receivers x (seconds + 10)`` seconds; needs ``../shared/px4-sitl``, and
mosquitto for ``record --mqtt``).

One PX4 SITL (instance 0, MAV_SYS_ID 1, logger backends SD card and MAVLink) runs for the whole
benchmark. In each round every receiver in turn is started on PX4's onboard link
(``udpin:127.0.0.1:14540``, where PX4 sends it), left ``--seconds`` to start the
stream and record, then sent SIGTERM; its CPU is the whole process (start-up, the header phase at
PX4's ack pace, the data phase at about 900 packets/s, the stop and the exit), from
``getrusage(RUSAGE_CHILDREN)`` around it. The receivers:

- ``script``: ``px4_script.py``, built like PX4's ``Tools/mavlink_ulog_streaming.py``;
- ``floor``: ``floor_receiver.py``, the least a Python receiver can do (no CRC, no sequence, no
  ULog framing): no receiver that keeps its promises costs less;
- ``record``: ``python -m ulogstream record ... --once``, file only;
- ``record --mqtt``: the same, publishing to a mosquitto started here (default 10 Hz);
- ``before:record``, ``before:record --mqtt``: the same from another checkout (``--before DIR``);
- ``free:json record --mqtt``, ``free:policy record --mqtt``: one part of the live path made free
  (``free_part.py``), to weigh that part.

The order of the receivers rotates from round to round, and each figure is printed as a ratio to
the script's CPU in the same round (lower is better): the machine is shared and its speed drifts.
ulogstream's recordings are checked to be valid logs with the data of the whole run. With
``--startup N`` it also times ``record``'s start-up alone, N times: CPU from exec until it has
handled its first packet (a HEARTBEAT).
"""

from __future__ import annotations

import argparse
import compileall
import os
import resource
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # run from a checkout, uninstalled
sys.path.insert(0, str(ROOT / "tests"))

from bench import free_part  # noqa: E402
from bench.bench_live import mosquitto  # noqa: E402
from bench.installed import compile_package  # noqa: E402

from ulogstream.adapters.ulog_file import read  # noqa: E402

SITL = ROOT.parent / "shared" / "px4-sitl" / "px4-sitl"
PEER_PORT = 14540
"""Where PX4 sends instance 0's onboard link (4 MB/s: the logger streams at full rate). PX4 keeps
sending to the first address it heard from, so every receiver listens here in turn."""
RECEIVERS = ("script", "floor", "record", "record --mqtt")
BENCH = Path(__file__).parent


def child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def command(receiver: str, out: Path, broker: int) -> list[str]:
    link = f"udpin:127.0.0.1:{PEER_PORT}"
    if receiver == "script":
        return [sys.executable, str(BENCH / "px4_script.py"), link, str(out / "script.ulg")]
    if receiver == "floor":
        return [sys.executable, str(BENCH / "floor_receiver.py"), link, str(out / "floor.bin")]
    words = [
        sys.executable, *free_part.program(receiver), "record", link, "--once", "--no-status",
        "--out", str(out), "--min-free-mb", "0",
    ]  # fmt: skip
    if "--mqtt" in receiver.split():
        words += ["--mqtt", f"mqtt://127.0.0.1:{broker}", "--vehicle-id", "bench"]
    return words


def run_one(receiver: str, seconds: float, out: Path, broker: int, before: Path | None) -> float:
    """The CPU seconds of one receiver process over ``seconds`` of PX4's stream and its stop.

    ``before:record`` runs ``record`` from the checkout ``before`` (``--before``).
    """
    out.mkdir(parents=True)
    tree = ROOT
    if receiver.startswith("before:"):
        assert before is not None
        receiver, tree = receiver.removeprefix("before:"), before
    cpu_before = child_cpu()
    process = subprocess.Popen(
        command(receiver, out, broker),
        cwd=tree,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(seconds)
    process.send_signal(signal.SIGTERM)
    try:
        _, stderr = process.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        _, stderr = process.communicate()
    cpu = child_cpu() - cpu_before
    if process.returncode not in {0, -signal.SIGTERM}:
        print(f"    {receiver} exited {process.returncode}: {stderr[-400:]}", flush=True)
    return cpu


def recorded(out: Path) -> str:
    """What ulogstream's file holds: rows and seconds of log time (a check the run recorded)."""
    files = sorted(out.rglob("*.ulg"))
    if len(files) != 1:
        return f"{len(files)} FILES"
    data = read(files[0])
    rows = sum(len(topic.timestamps_us) for topic in data.topics.values())
    stamps = [
        t
        for topic in data.topics.values()
        if len(topic.timestamps_us)
        for t in topic.timestamps_us[[0, -1]]
    ]
    span = (max(stamps) - min(stamps)) / 1e6 if stamps else 0.0
    return f"{rows} rows over {span:.1f} s of log, {len(data.topics)} topic instances"


def startup_cpu(repeat: int, tree: Path = ROOT) -> list[float]:
    """CPU seconds ``record`` spends from exec until it has handled its first packet.

    The packet is an autopilot's HEARTBEAT sent once ``record`` listens; it is handled when
    ``record`` says it records that vehicle (first contact: its session, files and LOGGING_START).
    The process is then killed, so the figure holds no stop. ``tree``: the checkout to run.
    """
    from ulogstream.cli.demo import free_udp_port  # noqa: PLC0415
    from ulogstream.mavlink_codec import MAV_AUTOPILOT_PX4, MAV_TYPE_QUADROTOR, MavlinkCodec  # noqa: PLC0415

    heartbeat = MavlinkCodec(system_id=1, component_id=1).encode_heartbeat(
        mav_type=MAV_TYPE_QUADROTOR, autopilot=MAV_AUTOPILOT_PX4
    )
    figures = []
    for _ in range(repeat):
        port = free_udp_port()
        with tempfile.TemporaryDirectory() as tmp, socket.socket(type=socket.SOCK_DGRAM) as sock:
            words = [
                sys.executable, "-m", "ulogstream", "record", f"udpin:127.0.0.1:{port}", "--once",
                "--no-status", "--out", tmp, "--min-free-mb", "0",
            ]  # fmt: skip
            before = child_cpu()
            process = subprocess.Popen(
                words, cwd=tree, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
            )
            assert process.stderr is not None
            for line in process.stderr:
                if "listening on" in line:
                    sock.sendto(heartbeat, ("127.0.0.1", port))
                if "vehicle sysid 1: recording into" in line:
                    break
            process.send_signal(signal.SIGKILL)  # the CPU up to here, not a stop's
            process.communicate()
            figures.append(child_cpu() - before)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--receivers", nargs="+", default=list(RECEIVERS))
    parser.add_argument("--startup", type=int, default=0, help="time record's start-up N times")
    parser.add_argument(
        "--before",
        type=Path,
        help='another checkout, for receivers named "before:record" (a before/after comparison)',
    )
    args = parser.parse_args()
    if any(r.startswith("before:") for r in args.receivers) and args.before is None:
        parser.error('"before:" receivers need --before DIR')
    if args.before is not None:
        compileall.compile_dir(args.before / "ulogstream", quiet=1)
    if not SITL.exists():
        msg = f"bench_px4: no PX4 SITL at {SITL} (needs ../shared beside the clone)"
        raise SystemExit(msg)
    print(time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), f"nproc {os.cpu_count()}", flush=True)
    compile_package()
    if args.startup:
        trees = (
            {"record": ROOT}
            if args.before is None
            else {"record": ROOT, "before:record": args.before}
        )
        figures: dict[str, list[float]] = {name: [] for name in trees}
        for _ in range(args.startup):  # alternated, one run at a time
            for name, tree in trees.items():
                figures[name] += startup_cpu(1, tree)
        for name, values in figures.items():
            print(
                f"{name} start-up to its first packet handled: median "
                f"{statistics.median(values):.3f} CPU s "
                f"(min {min(values):.3f}, {len(values)} runs)",
                flush=True,
            )
    if not args.rounds:
        return
    receivers = list(args.receivers)
    ratios: dict[str, list[float]] = {name: [] for name in receivers}
    with tempfile.TemporaryDirectory() as tmp, mosquitto(Path(tmp)) as (broker, _pid):
        px4_dir = Path(tmp) / "px4"
        started = subprocess.run(
            [str(SITL), "start", str(px4_dir), "-i", "0", "--log", "all", "--sdlog-mode", "1"],
            capture_output=True, text=True, check=False, timeout=120,
        )  # fmt: skip
        if started.returncode != 0:
            msg = f"bench_px4: PX4 SITL did not start: {started.stderr[-400:]}"
            raise SystemExit(msg)
        try:
            time.sleep(5.0)  # PX4's boot (estimator, logger) settles
            for number in range(args.rounds):
                order = receivers[number % len(receivers) :] + receivers[: number % len(receivers)]
                cpu: dict[str, float] = {}
                print(f"round {number + 1}:", flush=True)
                for receiver in order:
                    out = Path(tmp) / f"{number}-{receiver.replace(' ', '_').replace(':', '_')}"
                    cpu[receiver] = run_one(receiver, args.seconds, out, broker, args.before)
                    check = "" if receiver in {"script", "floor"} else f"  {recorded(out)}"
                    print(f"  {receiver:<16} CPU {cpu[receiver]:5.2f} s{check}", flush=True)
                    time.sleep(3.0)  # PX4 ends the stream (a STOP or the receiver gone)
                script = cpu.get("script")
                if script:
                    line = ", ".join(f"{r} {cpu[r] / script:.2f}" for r in receivers if r in cpu)
                    print(f"  CPU / script's: {line}", flush=True)
                    for receiver in receivers:
                        ratios[receiver].append(cpu[receiver] / script)
        finally:
            subprocess.run([str(SITL), "stop", str(px4_dir)], capture_output=True, check=False)
    if "script" in receivers:
        print("median CPU / script's over the rounds (lower is better):")
        for receiver in receivers:
            values = ratios[receiver]
            print(
                f"  {receiver:<16} {statistics.median(values):.2f} "
                f"({min(values):.2f}-{max(values):.2f})"
            )


if __name__ == "__main__":
    main()
