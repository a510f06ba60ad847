"""Whole-process CPU and ack latency on real PX4 logs, against a PX4-script-style receiver.

Run: ``.venv/bin/python tests/bench/bench_real.py [--logs NAME ...] [--paces sitl usb]``
(about 2 minutes; needs ``../shared/data/ulg`` and mosquitto). With ``--long-minutes 10`` the
first log's data is repeated (timestamps shifted) into one log that streams that long at the
first pace: the long-flight figure, CPU per MB.

Each real log (by default ``px4-ulog-rs__corrupt_format_not_utf8.ulg``, PX4 v1.17, 121 topic
instances, and ``pyulog__sample_logging_tagged_and_default_params.ulg``, v1.13, 170) is streamed by
the simulated PX4 (:func:`ulogstream.sim.runner.run_vehicle`, the code behind ``ulogstream sim``,
run in this process on one CPU) to each receiver in turn, a subprocess pinned to the other CPU:

- ``script``: ``px4_script.py``, a receiver built like PX4's ``Tools/mavlink_ulog_streaming.py``
  (a pymavlink ``recv_match`` loop that acks ``LOGGING_DATA_ACKED`` and writes each whole ULog
  message to the file), importing nothing from ulogstream. It sends ``LOGGING_START`` at once
  instead of waiting for a heartbeat (our udpout link has no heartbeat to wait for).
- ``record``: ``python -m ulogstream record udpout:... --once`` (file only).
- ``record --mqtt``: the same with a real mosquitto started here, default 10 Hz cap.
- ``floor``: ``floor_receiver.py``, the least a Python receiver can do (standard library only:
  a blocking ``recvfrom``, acks, payloads appended raw; no CRC, sequence or ULog framing). No
  receiver that keeps its promises costs less, so its ratio bounds what the others can reach.
- ``free:json record --mqtt``, ``free:policy record --mqtt`` (not in the default set): the same
  with one part of the live path made free (``free_part.py``), to weigh that part.
- ``record --mqtt-rate 0``: every row published (``--rate0``; not in the default set); a
  subscriber (``bench_live.py subscribe``) counts the samples/s it receives and the recorded
  rows it never got.

Two paces: ``sitl`` (a link budget of about 220 KB/s, as a PX4 SITL logger streams) and ``usb`` (the
800 KB/s USB link, 560 KB/s of log: the ceiling), both with the log's time ignored (the logger
writes as fast as the link takes it); ``2usb`` (twice that link, not in the default set) shows what
``--mqtt-rate 0`` delivers beyond the rows a log holds at the USB ceiling. CPU is the whole receiver
process, start-up and shutdown included: ``resource.getrusage(RUSAGE_CHILDREN)`` before and after
the subprocess is reaped. Ack latency is measured by the vehicle (first send of each
LOGGING_DATA_ACKED to the arrival of its LOGGING_ACK, ``bench_pipeline.AckTimer``): p50, p99 and
max. Every ulogstream recording is compared with the log byte for byte (the v1.17 log's last 5229
bytes start with a damaged message header, type 0 and 8307 bytes long: neither the recorder nor
PX4's script, which waits for the 8310 bytes it announces, writes them). With ``BENCH_PROFILE=DIR``
each ulogstream run is profiled (cProfile dumps in DIR; the CPU figures then include the profiler).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

import msgspec

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # run from a checkout, uninstalled
sys.path.insert(0, str(ROOT / "tests"))

from bench import free_part  # noqa: E402
from bench.bench_live import mosquitto, percentiles  # noqa: E402
from bench.bench_pipeline import AckTimer  # noqa: E402
from bench.bench_ulog import build_large  # noqa: E402
from bench.installed import compile_package  # noqa: E402

from ulogstream.adapters.udp_transport import UdpTransport  # noqa: E402
from ulogstream.adapters.ulog_file import read  # noqa: E402
from ulogstream.live.policy import PublishPolicy  # noqa: E402
from ulogstream.sim.runner import run_vehicle  # noqa: E402
from ulogstream.sim.vehicle import USB_LINK_RATE, VehicleConfig  # noqa: E402
from ulogstream.ulog.parser import RowSelection, RowSelector, ULogParser, no_rows  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "ulg"
DEFAULT_LOGS = (
    "px4-ulog-rs__corrupt_format_not_utf8.ulg",
    "pyulog__sample_logging_tagged_and_default_params.ulg",
)
LOG_SHARE = 0.7
"""Of a link's rate, what PX4's logger takes (the rest is telemetry)."""
SITL_LINK_RATE = 315_000
"""The simulated link's rate for SITL pace: 70 % of it (the logger's share) is about 220 KB/s."""
PACES = {"sitl": SITL_LINK_RATE, "usb": USB_LINK_RATE, "2usb": 2 * USB_LINK_RATE}
RECEIVERS = ("script", "floor", "record", "record --mqtt")
SCRIPT = Path(__file__).with_name("px4_script.py")
FLOOR = Path(__file__).with_name("floor_receiver.py")


# -- the decode path alone (in this process) ----------------------------------------------------


def _all_rows(_subscription: object) -> RowSelection:
    return RowSelection.ALL


def decode_cpu(log: bytes, piece: int, rows: RowSelector | None, rate: float | None) -> float:
    """CPU seconds to parse ``log`` in ``piece``-byte calls (and publish at ``rate`` Hz)."""
    policy = None if rate is None else PublishPolicy(vehicle_id="v", default_rate_hz=rate)
    parser = ULogParser(rows=policy.rows_for if rows is None and policy else rows)
    started = time.process_time()
    now = 0.0
    if policy is not None:
        policy.log_started(wall_time=0.0, now=now)
    for pos in range(0, len(log), piece):
        now += piece / 220_000
        events = parser.receive_bytes(log[pos : pos + piece])
        if policy is not None:
            for event in events:
                policy.select(event, now)
            policy.flush_due(now)
    return time.process_time() - started


def decode_path(log: Path) -> None:
    """What the recorder's decoding costs for ``log``, before and after row selection."""
    data = log.read_bytes()
    figures = [
        ("record-only, every row decoded per datagram (249 B)", 249, _all_rows, None),
        ("record-only, framing only, 16 KB at a time", 16384, no_rows, None),
        ("MQTT 10 Hz, every row decoded (1.1 KB = 5 ms at SITL)", 1100, _all_rows, 10.0),
        ("MQTT 10 Hz, only the rows it can publish (1.1 KB)", 1100, None, 10.0),
    ]
    for what, piece, rows, rate in figures:
        cpu = min(decode_cpu(data, piece, rows, rate) for _ in range(3))
        print(f"  decode path: {what}: {cpu:.3f} CPU s ({cpu / (len(data) / 1e6):.3f} s/MB)")


# -- one run ------------------------------------------------------------------------------------


class Run(msgspec.Struct, frozen=True):
    """One receiver's run over one log at one pace."""

    cpu_s: float
    seconds: float
    packets: int
    round_trips: list[float]
    recording: str
    """How the recording compares with the log."""
    delivered: str = ""
    """For ``--mqtt-rate 0``: samples/s a subscriber received, and how many it missed."""


def child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


async def run_one(log: Path, receiver: str, link_rate: float, broker: int | None, tmp: Path) -> Run:
    """Stream ``log`` to ``receiver`` (a subprocess on one CPU) from the vehicle (on the other)."""
    cpus = sorted(os.sched_getaffinity(0))
    out = tmp / "out"
    out.mkdir()
    link = await UdpTransport.listen("127.0.0.1", 0)
    port = str(link.local_address[1])
    timer = AckTimer(link)
    if receiver == "script":
        command = [str(SCRIPT), f"udpout:127.0.0.1:{port}", str(out / "script.ulg")]
    elif receiver == "floor":
        command = [str(FLOOR), f"udpout:127.0.0.1:{port}", str(out / "floor.bin")]
    else:
        command = [
            *free_part.program(receiver), "record", f"udpout:127.0.0.1:{port}", "--once",
            "--no-status", "--out", str(out), "--min-free-mb", "0",
        ]  # fmt: skip
        # "record --mqtt --mqtt-rate 0": the broker's URL added
        for arg in free_part.command_words(receiver)[1:]:
            command += (
                [arg, f"mqtt://127.0.0.1:{broker}", "--vehicle-id", "bench"]
                if arg == "--mqtt"
                else [arg]
            )
        profile = os.environ.get("BENCH_PROFILE")
        if profile:  # a cProfile dump per ulogstream run, to see where its time goes
            name = receiver.replace(" ", "").replace("-", "_")
            command = ["-m", "cProfile", "-o", f"{profile}/{log.stem}-{name}.prof", *command]
    subscriber = None
    samples = tmp / "samples.txt"
    if "--mqtt-rate 0" in receiver:  # count what reaches a subscriber (reaped after the CPU)
        subscriber = await asyncio.create_subprocess_exec(
            sys.executable, str(ROOT / "tests" / "bench" / "bench_live.py"), "subscribe",
            str(broker), str(samples), stdout=asyncio.subprocess.PIPE, cwd=ROOT,
        )  # fmt: skip
        assert subscriber.stdout is not None
        await asyncio.wait_for(subscriber.stdout.readline(), 30)  # "ready"
    before = child_cpu()
    started = time.perf_counter()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        *command,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
        cwd=ROOT,
    )
    if len(cpus) > 1:
        os.sched_setaffinity(process.pid, {cpus[0]})
        os.sched_setaffinity(0, {cpus[1]})
    stop = asyncio.Event()

    def delivered(_: int) -> None:
        process.terminate()  # the recorder: STOP handshake, then exit; the others: exit
        if receiver in {"script", "floor"}:
            stop.set()

    config = VehicleConfig(link_rate=link_rate, speed=None)
    try:
        summary = await run_vehicle(
            log, timer, config=config, on_log_delivered=delivered, stop_event=stop,
            keep_deliveries=False,
        )  # fmt: skip
        await asyncio.wait_for(process.wait(), 30)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        os.sched_setaffinity(0, set(cpus))
    seconds = time.perf_counter() - started
    cpu = child_cpu() - before
    recordings = sorted(out.rglob("*.ulg"))
    delivered_samples = ""
    if subscriber is not None:
        await asyncio.sleep(1.0)  # the broker's last deliveries
        subscriber.terminate()
        await subscriber.wait()
        delivered_samples = sample_rate(samples, recordings)
    return Run(
        cpu, seconds, summary.delivered, sorted(timer.round_trips), compare(recordings, log),
        delivered_samples,
    )  # fmt: skip


def sample_rate(samples: Path, recordings: list[Path]) -> str:
    """Samples/s the subscriber received over its first to last, and the recorded rows missed."""
    stamps = [float(line.split()[1]) for line in samples.read_text().splitlines() if line[0] == "S"]
    rows = sum(
        len(topic.timestamps_us) for path in recordings for topic in read(path).topics.values()
    )
    if len(stamps) < 2:
        return f"{len(stamps)} samples delivered of {rows} recorded"
    rate = len(stamps) / (stamps[-1] - stamps[0])
    return f"{rate:6.0f} samples/s delivered, {rows - len(stamps)} of {rows} recorded rows missing"


def compare(recordings: list[Path], log: Path) -> str:
    """'identical', or how a recording differs (a log's damaged tail is no whole message)."""
    if len(recordings) != 1:
        return f"{len(recordings)} FILES"
    ours, source = recordings[0].read_bytes(), log.read_bytes()
    if ours == source:
        return "file identical"
    if source.startswith(ours):
        return f"file = the log less its last {len(source) - len(ours)} bytes"
    return "FILE DIFFERS"


def describe(name: str, run: Run, script: Run | None) -> str:
    # ours / the script's, as the issue and the README state it (lower is better)
    ratio = "" if script is None else f"  {run.cpu_s / script.cpu_s:4.2f}x the script's CPU"
    same = "" if name in {"script", "floor"} else f"  {run.recording}"
    if run.delivered:
        same += f"\n  {'':<24} {run.delivered}"
    return (
        f"  {name:<24} CPU {run.cpu_s:5.2f} s ({100 * run.cpu_s / run.seconds:4.1f} % of a core "
        f"over {run.seconds:4.1f} s, {run.packets / run.seconds:5.0f} packets/s){ratio}{same}\n"
        f"  {'':<24} ack round trip {percentiles(run.round_trips)}"
    )


async def bench(
    logs: list[Path], paces: list[str], receivers: list[str], *, decode: bool = True
) -> None:
    with tempfile.TemporaryDirectory() as tmp, mosquitto(Path(tmp)) as (broker, _pid):
        for log in logs:
            megabytes = log.stat().st_size / 1e6
            for pace in paces:
                print(f"{log.name} at {pace} pace ({megabytes:.1f} MB):", flush=True)
                if decode and pace == paces[0]:
                    decode_path(log)
                script: Run | None = None
                for number, receiver in enumerate(receivers):
                    work = Path(tmp) / f"{log.stem}-{pace}-{number}"
                    work.mkdir()
                    run = await run_one(log, receiver, PACES[pace], broker, work)
                    print(describe(receiver, run, script), flush=True)
                    print(f"  {'':<24} {run.cpu_s / megabytes:.4f} CPU s per MB", flush=True)
                    if receiver == "script":
                        script = run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--logs", nargs="+", default=list(DEFAULT_LOGS), help="names in ../shared/data/ulg"
    )
    parser.add_argument("--paces", nargs="+", choices=sorted(PACES), default=["sitl", "usb"])
    parser.add_argument("--rate0", action="store_true", help="also run record --mqtt-rate 0")
    parser.add_argument(
        "--long-minutes",
        type=float,
        help="the long-flight figure: the first log's data repeated (shifted timestamps) to last "
        "this long at the first pace; CPU per MB",
    )
    parser.add_argument(
        "--receivers",
        nargs="+",
        help='instead of the default three, e.g. "record --mqtt --set ..."',
    )
    args = parser.parse_args()
    logs = [DATA / name for name in args.logs]
    missing = [str(p) for p in logs if not p.is_file()]
    if missing:
        msg = f"bench_real: no such log {', '.join(missing)} (needs ../shared/data/ulg)"
        raise SystemExit(msg)
    receivers = args.receivers or [
        *RECEIVERS,
        *(["record --mqtt --mqtt-rate 0"] if args.rate0 else []),
    ]
    print(
        time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        f"nproc {os.cpu_count()},",
        os.uname().machine,
    )
    compile_package()
    if args.long_minutes is None:
        asyncio.run(bench(logs, args.paces, receivers))
        return
    pace = args.paces[0]
    with tempfile.TemporaryDirectory() as tmp:
        long_log = Path(tmp) / f"{logs[0].stem}-{args.long_minutes:g}min.ulg"
        log_rate = LOG_SHARE * PACES[pace]  # bytes of log per second the link carries
        build_large(logs[0], long_log, int(args.long_minutes * 60 * log_rate))
        asyncio.run(bench([long_log], [pace], receivers, decode=False))


if __name__ == "__main__":
    main()
