"""A fleet on one broker: N vehicles, one ``ulogstream record`` each, into one mosquitto.

Run: ``.venv/bin/python tests/bench/bench_fleet.py [--vehicles 8] [--log NAME] [--speed 1]``
(about a minute with the default log; needs ``../shared/data/ulg`` and mosquitto).

As a fleet runs: one companion computer per vehicle, so one recorder process per vehicle, each
with default settings (``record udpin:... --once --out DIR --mqtt URL``: 10 Hz per topic
instance, JSON), all publishing into one broker started here. Each vehicle is a
``ulogstream sim`` process streaming a real PX4 log (by default
``pyulog__sample_px4_events.ulg``: PX4 v1.15, 84 subscriptions, 31 s, 50 KB/s) at the log's own
pace (``--speed 1``) over the default UDP link budget, with PX4's default system id 1 (every
vehicle its own recorder; until a log has shown their ``sys_uuid`` the recorders name them by
host, link and sysid).

Measured, per vehicle:

- messages/s and bytes/s (topic + payload) arriving at a subscriber on ``#`` in this process,
  over the vehicle's streaming time (first to last message of its tree);
- the recorder's CPU (user + system, start-up and shutdown included, from ``wait4``) over the
  flight's duration, and the broker's CPU over the run (``/proc/PID/stat``);
- nothing lost: each recording byte-identical to the flight, every topic instance of the log
  present on MQTT, its sample count as the default publish policy predicts (run here on the
  log's own time), and
  ``mqtt_dropped`` 0 in each final ``meta/status``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import aiomqtt
import msgspec

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # run from a checkout, uninstalled
sys.path.insert(0, str(ROOT / "tests"))

from bench.bench_live import mosquitto  # noqa: E402

from ulogstream.adapters.ulog_file import read  # noqa: E402
from ulogstream.live.policy import PublishPolicy  # noqa: E402
from ulogstream.ulog.parser import ULogParser  # noqa: E402
from ulogstream.ulog.spec import HEADER_SIZE, MESSAGE_HEADER_SIZE, unpack_message_header  # noqa: E402

if TYPE_CHECKING:
    from ulogstream.live.outbox import MqttMessage

DATA = ROOT.parent / "shared" / "data" / "ulg"
DEFAULT_LOG = "pyulog__sample_px4_events.ulg"
DEFAULT_RATE_HZ = 10.0
"""``mqtt.default_rate_hz``: the cap each topic instance is published at by default."""
COUNT_TOLERANCE = 0.25
"""A topic instance's sample count may differ this much (and by two) from the prediction: PX4
writes a topic's samples in bursts from its buffer, not in time order, so they arrive up to a
packet's worth later than logged and fall into other 100 ms windows of the rate cap."""
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


class Tree(msgspec.Struct):
    """What the subscriber saw of one vehicle's tree."""

    messages: int = 0
    bytes: int = 0
    first: float = 0.0
    last: float = 0.0
    samples: Counter[str] = msgspec.field(default_factory=Counter)
    """JSON samples per ``topic/multi_id``."""
    final_status: dict[str, object] | None = None


class Child(msgspec.Struct):
    """A subprocess reaped by ``wait4`` (its own CPU, not the sum of every child's)."""

    process: subprocess.Popen[bytes]
    stderr: Path
    exit_code: int | None = None
    cpu_s: float = 0.0
    done: threading.Event = msgspec.field(default_factory=threading.Event)

    def reap(self) -> None:
        _, status, usage = os.wait4(self.process.pid, 0)
        self.exit_code = os.waitstatus_to_exitcode(status)
        self.process.returncode = self.exit_code
        self.cpu_s = usage.ru_utime + usage.ru_stime
        self.done.set()


def spawn(argv: list[str], stderr: Path) -> Child:
    with stderr.open("wb") as err:
        process = subprocess.Popen(
            [sys.executable, "-m", "ulogstream", *argv],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
            cwd=ROOT,
        )
    child = Child(process, stderr)
    threading.Thread(target=child.reap, daemon=True).start()
    return child


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    with socket.socket(socket.AF_INET, kind) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def cpu_of(pid: int) -> float:
    """CPU seconds (user + system) a live process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


async def wait_for_line(child: Child, text: str, limit: float = 30.0) -> None:
    deadline = time.monotonic() + limit
    while text not in child.stderr.read_text(errors="replace"):
        if child.done.is_set() or time.monotonic() > deadline:
            msg = f"no {text!r} from {child.process.args!r}:\n{child.stderr.read_text()}"
            raise RuntimeError(msg)
        await asyncio.sleep(0.05)


async def subscribe(port: int, trees: dict[str, Tree], ready: asyncio.Event) -> None:
    """Count every message on ``#`` per vehicle (the second topic level)."""
    clock = time.monotonic
    async with aiomqtt.Client("127.0.0.1", port, identifier="bench-fleet-sub") as client:
        await client.subscribe("#")
        ready.set()
        async for message in client.messages:
            now = clock()
            topic = message.topic.value
            levels = topic.split("/", 3)
            if len(levels) < 3:
                continue
            tree = trees.get(levels[1])
            if tree is None:
                tree = trees[levels[1]] = Tree(first=now)
            payload = message.payload
            size = len(payload)
            tree.messages += 1
            tree.bytes += len(topic) + size
            tree.last = now
            if levels[2] == "json" and len(levels) == 4:
                tree.samples[levels[3]] += 1
            elif topic.endswith("/meta/status") and isinstance(payload, bytes):
                status = json.loads(payload)
                if isinstance(status, dict) and status.get("online") is False:
                    tree.final_status = status


def expected_samples(log: Path) -> tuple[dict[str, int], float]:
    """JSON samples per ``topic/multi_id`` the default publish policy sends, and the duration.

    The policy runs here on the log's own time, as if each message arrived when it was logged.
    """
    flight = log.read_bytes()
    policy = PublishPolicy(vehicle_id="v", default_rate_hz=DEFAULT_RATE_HZ)
    parser = ULogParser(rows=policy.rows_for)
    counts: Counter[str] = Counter()
    prefix = "ulogstream/v/json/"

    def count(messages: list[MqttMessage]) -> None:
        for message in messages:
            if message.topic.startswith(prefix):
                counts[message.topic.removeprefix(prefix)] += 1

    now = 0.0
    count(policy.log_started(wall_time=0.0, now=now))
    pos = 0
    while pos < len(flight):  # the header, then one ULog message at a time
        end = HEADER_SIZE
        if pos:
            size, kind = unpack_message_header(flight, pos)
            end = pos + MESSAGE_HEADER_SIZE + size
            if kind == ord("D"):  # msg_id, then the sample's timestamp: when PX4 logged it
                (stamp,) = struct.unpack_from("<Q", flight, pos + MESSAGE_HEADER_SIZE + 2)
                now = max(now, stamp / 1e6)
        for event in parser.receive_bytes(flight[pos:end]):
            count(policy.select(event, now))
        count(policy.flush_due(now))
        pos = end
    for event in parser.close():
        count(policy.select(event, now))
    while (due := policy.next_deadline()) is not None and due <= now + 1.0:
        count(policy.flush_due(now + 1.0))
    data = read(log)
    return dict(counts), (data.last_timestamp_us - data.start_timestamp_us) / 1e6


def vehicle_of(stderr: str) -> str:
    """The vehicle id the recorder's start-up line names."""
    marker = "vehicle id '"
    start = stderr.index(marker) + len(marker)
    return stderr[start : stderr.index("'", start)]


async def fleet(
    log: Path, *, vehicles: int, speed: str, port: int, broker_pid: int, work: Path
) -> int:
    trees: dict[str, Tree] = {}
    ready = asyncio.Event()
    listener = asyncio.create_task(subscribe(port, trees, ready))
    await asyncio.wait_for(ready.wait(), 10)
    url = f"mqtt://127.0.0.1:{port}"
    links = [free_port(socket.SOCK_DGRAM) for _ in range(vehicles)]
    outs = [work / f"vehicle{i}" for i in range(vehicles)]  # one companion computer each
    recorders = []
    for i, (link, out) in enumerate(zip(links, outs, strict=True)):
        argv = ["record", f"udpin:127.0.0.1:{link}", "--once", "--out", str(out), "--mqtt", url]
        recorders.append(spawn([*argv, "--no-status"], work / f"record{i}.err"))
    for recorder in recorders:
        await wait_for_line(recorder, "listening on")  # MQTT: at first contact
    broker_cpu = cpu_of(broker_pid)
    started = time.monotonic()
    sims = [
        spawn(
            ["sim", str(log), f"udpout:127.0.0.1:{link}", "--speed", speed],
            work / f"sim{i}.err",
        )
        for i, link in enumerate(links)
    ]
    for child in (*recorders, *sims):
        await asyncio.to_thread(child.done.wait)
    elapsed = time.monotonic() - started
    broker_cpu = cpu_of(broker_pid) - broker_cpu
    await asyncio.sleep(1.0)  # the last messages through the broker
    listener.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await listener
    return report(
        log,
        recorders=recorders,
        sims=sims,
        outs=outs,
        trees=trees,
        elapsed=elapsed,
        broker_cpu=broker_cpu,
    )


def report(
    log: Path,
    *,
    recorders: list[Child],
    sims: list[Child],
    outs: list[Path],
    trees: dict[str, Tree],
    elapsed: float,
    broker_cpu: float,
) -> int:
    flight = log.read_bytes()
    expected, duration = expected_samples(log)
    expected_total = sum(expected.values())
    problems: list[str] = []
    rows = []
    for i, (recorder, sim, out) in enumerate(zip(recorders, sims, outs, strict=True)):
        text = recorder.stderr.read_text(errors="replace")
        if recorder.exit_code != 0 or sim.exit_code != 0:
            problems.append(f"vehicle {i}: exit codes record {recorder.exit_code}, "
                            f"sim {sim.exit_code}:\n{text[-2000:]}")  # fmt: skip
            continue
        vehicle = vehicle_of(text)
        recordings = sorted(out.rglob("*.ulg"))
        identical = len(recordings) == 1 and recordings[0].read_bytes() == flight
        if not identical:
            problems.append(f"vehicle {i}: recordings {recordings} not byte-identical")
        if recordings and recordings[0].parent.parent.name != vehicle:
            problems.append(f"vehicle {i}: {recordings[0]} is not in the folder {vehicle}")
        tree = trees.get(vehicle, Tree())
        missing = sorted(set(expected) - set(tree.samples))
        if missing:
            problems.append(f"vehicle {i}: no samples of {missing}")
        off = [
            f"{key} {tree.samples[key]}/{count}"
            for key, count in expected.items()
            if abs(tree.samples[key] - count) > COUNT_TOLERANCE * count + 2
        ]
        if off:
            problems.append(f"vehicle {i}: sample counts off the prediction: {off}")
        status = tree.final_status or {}
        if status.get("mqtt_dropped") != 0:
            problems.append(f"vehicle {i}: final status {status or 'missing'}")
        streaming = max(tree.last - tree.first, 1e-9)
        rows.append(
            (
                vehicle,
                tree.messages / streaming,
                tree.bytes / streaming / 1000,
                sum(tree.samples.values()),
                100 * recorder.cpu_s / duration,
                100 * sim.cpu_s / duration,
                identical,
            )
        )
    print(
        f"{len(recorders)} vehicles x {log.name} ({len(flight)} bytes, {duration:.1f} s, "
        f"{len(flight) / duration / 1000:.1f} KB/s); {len(expected)} topic instances, "
        f"{expected_total} samples predicted at 10 Hz; whole run {elapsed:.1f} s"
    )
    print(
        f"{'vehicle':<40} {'msg/s':>7} {'KB/s':>7} {'samples':>8} {'rec CPU':>8} "
        f"{'sim CPU':>8}  identical"
    )
    for vehicle, rate, kbps, samples, cpu, sim_cpu, identical in rows:
        print(
            f"{vehicle:<40} {rate:7.0f} {kbps:7.1f} {samples:8d} {cpu:7.1f}% {sim_cpu:7.1f}%  "
            f"{identical}"
        )
    if rows:
        count = len(rows)
        mean_rate = sum(r[1] for r in rows) / count
        mean_kbps = sum(r[2] for r in rows) / count
        mean_cpu = sum(r[4] for r in rows) / count
        print(
            f"{'mean per vehicle':<40} {mean_rate:7.0f} {mean_kbps:7.1f} {'':>8} "
            f"{mean_cpu:7.1f}%\nbroker (mosquitto) CPU: {100 * broker_cpu / elapsed:.1f}% of "
            f"one core over {elapsed:.0f} s for {count} vehicles"
        )
        print(
            f"1,000 vehicles: {1000 * mean_rate:,.0f} msg/s, "
            f"{1000 * mean_kbps * 8 / 1000:,.0f} Mbit/s into the broker"
        )
    print(
        f"machine: {platform.machine()} {os.cpu_count()} CPUs, {platform.python_implementation()} "
        f"{platform.python_version()}, Linux {platform.release()}, "
        f"{time.strftime('%Y-%m-%d', time.gmtime())}"
    )
    for problem in problems:
        print("PROBLEM:", problem)
    print("nothing lost" if not problems else f"{len(problems)} problem(s)")
    return 1 if problems else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vehicles", type=int, default=8)
    parser.add_argument("--log", default=DEFAULT_LOG, help=f"a log in {DATA}")
    parser.add_argument("--speed", default="1", help="the sim's --speed (default 1: real time)")
    args = parser.parse_args()
    log = DATA / args.log
    if not log.is_file():
        print(f"skipped: {log} is absent (the shared real PX4 logs are not checked out)")
        return
    if shutil.which("mosquitto") is None and not Path("/usr/sbin/mosquitto").exists():
        print("skipped: mosquitto is not installed (Debian package 'mosquitto')")
        return
    with (
        tempfile.TemporaryDirectory() as tmp,
        mosquitto(Path(tmp), max_queued_messages=None) as (port, pid),  # stock limits
    ):
        run = fleet(
            log, vehicles=args.vehicles, speed=args.speed, port=port, broker_pid=pid, work=Path(tmp)
        )
        code = asyncio.run(run)
    sys.exit(code)


if __name__ == "__main__":
    main()
