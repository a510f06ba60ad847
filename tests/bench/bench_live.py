"""Live pipeline benchmarks: simulated PX4 -> recorder -> mosquitto -> subscriber, real sockets.

Run: ``.venv/bin/python tests/bench/bench_live.py`` (about 2 minutes; ``--help`` for options).
The script starts mosquitto in a temporary directory on a free port and generates a synthetic PX4
flight log (:func:`ulogstream.sim.flightlog.generate_flight_log`, about 52 KB and 210 packets of
log per second of flight). It prints ``uptime`` before and after: the figures depend on the load.

1. Latency at SITL-like load: ``ulogstream sim LOG udpout:... --rate usb --speed 4.3`` (the log
   replayed at 4.3 times real time: about 900 packets/s, 224 KB/s) into a :class:`Recorder` run in
   this process with the default 10 Hz cap per topic instance. The link transport is wrapped to
   stamp each datagram's arrival (``time.monotonic``); an aiomqtt subscriber in a subprocess
   stamps each delivery with the same clock (CLOCK_MONOTONIC). Each published sample is matched by
   (topic, multi_id, timestamp) to the 'D' message in the received stream, and so to the datagram
   that carried its last byte. Latency = delivery - arrival, split into samples published at once
   and samples held by the rate cap (published when their slot opens: up to one period late by
   design), plus the part after the policy (offer to the MQTT outbox -> delivery).
2. Recorder CPU at the USB ceiling: ``python -m ulogstream record udpin:... --mqtt ... --out ...
   --no-status`` as a subprocess, fed by ``ulogstream sim ... --rate usb --speed max`` (the
   logger writes as fast as the 800 KB/s link budget takes it: about 2100 packets/s, lossless),
   default 10 Hz cap. CPU from /proc/PID/stat (utime + stime) over a steady window, packets from
   the retained ``meta/status`` counters.
   2b is the same recorder at the SITL-like 900 packets/s of 1 (paced datagrams, not bursts).
3. The same with decimation off (``--mqtt-rate 0``): messages/s the subscriber receives, the
   recorder's CPU, the ``mqtt_dropped`` counter, and samples recorded but never delivered.

``--flush-on-receive`` patches ``Pipeline.receive`` in this process only (run 1) to also flush
held samples whose slot has opened after each chunk: it shows what a fix of the timer loop, which
sleeps past deadlines that appear while it sleeps, would do to the held samples' latency.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import getpass
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar
from unittest import mock

import aiomqtt
import msgspec

from ulogstream.adapters import connection
from ulogstream.config.loader import load_settings
from ulogstream.mavlink_codec import MavlinkCodec
from ulogstream.recorder import decoding
from ulogstream.recorder import recorder as recorder_module
from ulogstream.recorder.pipeline import Pipeline
from ulogstream.recorder.wiring import build_recorder
from ulogstream.sim.flightlog import generate_flight_log
from ulogstream.stream.packets import LoggingPacket
from ulogstream.ulog.events import DataRows
from ulogstream.ulog.parser import ULogParser
from ulogstream.ulog.spec import HEADER_SIZE, MessageType

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from ulogstream.adapters.transport import Transport
    from ulogstream.config.values import ConnectionSpec
    from ulogstream.live.outbox import MqttMessage

ROOT = Path(__file__).resolve().parents[2]
VEHICLE_ID = "bench"
JSON_PREFIX = f"ulogstream/{VEHICLE_ID}/json/"
STATUS_TOPIC = f"ulogstream/{VEHICLE_ID}/meta/status"
SITL_SPEED = 4.3
"""Replay speed of the flight log for the latency run: about 900 packets/s."""
LOG_BYTES_PER_S = 52_000
"""Bytes per second of flight in the generated log (its PX4-like topic mix)."""
USB_PACKETS_PER_S = 2100
PACKET_DATA = 249
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
_TIMESTAMP_KEY = b',"timestamp":'
_unpack_header = struct.Struct("<HB").unpack_from
_unpack_data_head = struct.Struct("<HQ").unpack_from
_unpack_subscription = struct.Struct("<BH").unpack_from

Sample = tuple[str, int, int]
"""(topic name, multi_id, ULog timestamp) of one published sample."""


# -- helpers ----------------------------------------------------------------------------------


def free_port(kind: socket.SocketKind = socket.SOCK_STREAM) -> int:
    with socket.socket(socket.AF_INET, kind) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def cpu_seconds(pid: int) -> float:
    """CPU seconds (utime + stime) of process ``pid`` (its threads included) from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


def percentiles(values: Sequence[float]) -> str:
    """p50/p99/max in milliseconds."""
    if not values:
        return "no samples"
    ordered = sorted(values)
    p50 = ordered[len(ordered) // 2]
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    return f"p50 {1e3 * p50:6.2f}  p99 {1e3 * p99:6.2f}  max {1e3 * ordered[-1]:7.2f} ms"


@contextlib.contextmanager
def mosquitto(
    directory: Path, *, max_queued_messages: int | None = 100_000
) -> Iterator[tuple[int, int]]:
    """A local anonymous broker on a free port: yields (port, pid).

    ``max_queued_messages`` per client (None: mosquitto's stock limit, as a user's broker has).
    """
    binary = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
    port = free_port()
    config = directory / "mosquitto.conf"
    queued = "" if max_queued_messages is None else f"max_queued_messages {max_queued_messages}\n"
    config.write_text(
        f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n"
        f"{queued}user {getpass.getuser()}\n"
    )
    with (directory / "mosquitto.log").open("wb") as log:
        process = subprocess.Popen([binary, "-c", str(config)], stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise
                time.sleep(0.05)
        yield port, process.pid
    finally:
        process.kill()
        process.wait()


# -- the subscriber (a subprocess: `bench_live.py subscribe PORT OUT`) --------------------------


async def subscriber(port: int, out: Path) -> None:
    """Stamp every JSON sample and status delivered; write them to ``out`` on SIGTERM."""
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    received: list[tuple[float, str, int]] = []
    statuses: list[tuple[float, bytes]] = []
    monotonic = time.monotonic
    prefix_length = len(JSON_PREFIX)

    async def collect(client: aiomqtt.Client) -> None:
        async for message in client.messages:
            now = monotonic()
            topic = message.topic.value
            payload = message.payload
            assert isinstance(payload, bytes)
            if topic.startswith(JSON_PREFIX):
                start = payload.find(_TIMESTAMP_KEY) + len(_TIMESTAMP_KEY)
                end = payload.find(b",", start)
                stamp = int(payload[start : end if end > 0 else -1])
                received.append((now, topic[prefix_length:], stamp))
            elif topic == STATUS_TOPIC:
                statuses.append((now, payload))

    async with aiomqtt.Client("127.0.0.1", port, identifier=f"bench-sub-{os.getpid()}") as client:
        await client.subscribe(f"{JSON_PREFIX}#")
        await client.subscribe(STATUS_TOPIC)
        print("ready", flush=True)
        task = asyncio.create_task(collect(client))
        await stop.wait()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    with out.open("w") as file:
        for now, topic, stamp in received:
            file.write(f"S {now:.6f} {topic} {stamp}\n")
        for now, payload in statuses:
            file.write(f"T {now:.6f} {payload.decode()}\n")


class Delivered(msgspec.Struct):
    """What the subscriber saw."""

    samples: list[tuple[float, Sample]] = msgspec.field(default_factory=list)
    statuses: list[tuple[float, dict[str, object]]] = msgspec.field(default_factory=list)
    cpu: float = 0.0


class Subscriber:
    """The subscriber subprocess."""

    def __init__(self, port: int, out: Path) -> None:
        self.port = port
        self.out = out
        self.process: asyncio.subprocess.Process | None = None

    async def start(self) -> int:
        self.process = await asyncio.create_subprocess_exec(
            sys.executable, __file__, "subscribe", str(self.port), str(self.out),
            stdout=asyncio.subprocess.PIPE, cwd=ROOT,
        )  # fmt: skip
        assert self.process.stdout is not None
        line = await asyncio.wait_for(self.process.stdout.readline(), 20)
        if line.strip() != b"ready":
            msg = f"subscriber did not start: {line!r}"
            raise RuntimeError(msg)
        return self.process.pid

    async def finish(self) -> Delivered:
        assert self.process is not None
        result = Delivered()
        with contextlib.suppress(OSError):
            result.cpu = cpu_seconds(self.process.pid)
        self.process.send_signal(signal.SIGTERM)
        await asyncio.wait_for(self.process.wait(), 30)
        for line in self.out.read_text().splitlines():
            kind, stamp, rest = line.split(" ", 2)
            if kind == "S":
                topic, timestamp = rest.rsplit(" ", 1)
                name, _, multi_id = topic.rpartition("/")
                result.samples.append((float(stamp), (name, int(multi_id), int(timestamp))))
            else:
                result.statuses.append((float(stamp), json.loads(rest)))
        return result


# -- 1. latency at SITL-like load (recorder in this process) -------------------------------------


class TimedTransport:
    """A transport that stamps each chunk's arrival before the recorder sees it."""

    def __init__(self, inner: Transport, arrivals: list[tuple[float, bytes]]) -> None:
        self.inner = inner
        self.arrivals = arrivals

    @property
    def dropped_sends(self) -> int:
        return self.inner.dropped_sends

    async def receive(self) -> bytes:
        data = await self.inner.receive()
        self.arrivals.append((time.monotonic(), data))
        return data

    def send(self, data: bytes) -> None:
        self.inner.send(data)

    async def aclose(self) -> None:
        await self.inner.aclose()

    def describe(self) -> str:
        return self.inner.describe()


class StreamTiming(msgspec.Struct):
    """The received stream rebuilt from the stamped datagrams."""

    stream: bytes
    completed_at: dict[Sample, float]
    data_packets: int
    data_seconds: float


def rebuild_stream(arrivals: list[tuple[float, bytes]], sysid: int, compid: int) -> StreamTiming:
    """Each 'D' message's completion time: the arrival of the packet holding its last byte."""
    codec = MavlinkCodec(system_id=sysid, component_id=compid)
    starts: list[int] = []
    times: list[float] = []
    chunks: list[bytes] = []
    seen: set[int] = set()
    size = 0
    unacked: list[float] = []
    for now, data in arrivals:
        for message in codec.decode(data):
            if type(message) is not LoggingPacket or message.sequence in seen:
                continue  # resends of acked packets carry the same sequence
            seen.add(message.sequence)
            starts.append(size)
            times.append(now)
            chunks.append(message.data)
            size += len(message.data)
            if not message.needs_ack:
                unacked.append(now)
    stream = b"".join(chunks)
    names: dict[int, tuple[str, int]] = {}
    completed: dict[Sample, float] = {}
    offset = HEADER_SIZE
    while offset + 3 <= len(stream):
        length, msg_type = _unpack_header(stream, offset)
        end = offset + 3 + length
        if end > len(stream):
            break
        if msg_type == MessageType.ADD_LOGGED_MSG:
            multi_id, msg_id = _unpack_subscription(stream, offset + 3)
            names[msg_id] = (stream[offset + 6 : end].decode(), multi_id)
        elif msg_type == MessageType.DATA:
            msg_id, stamp = _unpack_data_head(stream, offset + 3)
            name, multi_id = names[msg_id]
            completed[name, multi_id, stamp] = times[bisect.bisect_right(starts, end - 1) - 1]
        offset = end
    span = unacked[-1] - unacked[0] if len(unacked) > 1 else 0.0
    return StreamTiming(stream, completed, len(unacked), span)


def receive_and_flush(pipeline: Pipeline, data: bytes, now: float) -> None:
    """``Pipeline.receive``, then held samples whose slot has opened (a possible daemon fix)."""
    RECEIVE(pipeline, data, now)
    publisher = pipeline.publisher
    if publisher is not None:
        deadline = publisher.policy.next_deadline()
        if deadline is not None and deadline <= now:
            held = publisher.policy.flush_due(now)
            if held:
                publisher.offer(held)


RECEIVE = Pipeline.receive


async def latency_run(log: Path, broker: int, tmp: Path, *, flush_on_receive: bool) -> None:
    out_dir = tmp / "rec-latency"
    link_port = free_port(socket.SOCK_DGRAM)
    settings = load_settings(
        None,
        {
            "link.connection": f"udpin:127.0.0.1:{link_port}",
            "recording.out_dir": out_dir,
            "mqtt.url": f"mqtt://127.0.0.1:{broker}",
            "mqtt.vehicle_id": VEHICLE_ID,
        },
    )
    arrivals: list[tuple[float, bytes]] = []
    offers: list[tuple[float, MqttMessage]] = []
    slots: dict[int, float] = {}  # id of a held sample's message -> when its slot opened
    open_transport = connection.open_transport

    async def open_timed(spec: ConnectionSpec) -> Transport:
        return TimedTransport(await open_transport(spec), arrivals)

    sub = Subscriber(broker, tmp / "sub-latency.txt")
    await sub.start()
    with mock.patch.object(recorder_module, "open_transport", open_timed):
        recorder = build_recorder(settings)
        make_publisher = recorder.parts.publisher
        assert make_publisher is not None
        publisher = make_publisher(VEHICLE_ID)  # the one vehicle's, timed below
        recorder.parts.publisher = lambda _vehicle_id: publisher
        sink, policy = publisher.sink, publisher.policy
        offer, offer_all, flush_due = sink.offer, sink.offer_all, policy.flush_due

        def timed_offer(message: MqttMessage) -> None:
            if message.topic.startswith(JSON_PREFIX):
                offers.append((time.monotonic(), message))
            offer(message)

        def timed_offer_all(messages: list[MqttMessage]) -> None:
            now = time.monotonic()
            offers.extend((now, m) for m in messages if m.topic.startswith(JSON_PREFIX))
            offer_all(messages)

        def marked_flush(now: float) -> list[MqttMessage]:
            opened: dict[str, float] = {}
            for deadline, _, msg_id in policy._heap:
                inst = policy._instances.get(msg_id)
                if deadline <= now and inst is not None and inst.held_deadline == deadline:
                    opened[inst.json_topic] = deadline
            messages = flush_due(now)
            for message in messages:
                if message.topic in opened:
                    slots[id(message)] = opened[message.topic]
            return messages

        receive = receive_and_flush if flush_on_receive else RECEIVE
        with (
            mock.patch.object(sink, "offer", timed_offer),
            mock.patch.object(sink, "offer_all", timed_offer_all),
            mock.patch.object(policy, "flush_due", marked_flush),
            mock.patch.object(Pipeline, "receive", receive),
        ):
            running = asyncio.create_task(recorder.run())
            await asyncio.sleep(0.3)  # the link opens; MQTT connects at the vehicle's contact
            sim_log = (tmp / "sim-latency.log").open("wb")
            sim = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "ulogstream", "sim", str(log),
                f"udpout:127.0.0.1:{link_port}", "--rate", "usb", "--speed", str(SITL_SPEED),
                stderr=sim_log, cwd=ROOT,
            )  # fmt: skip
            samples: list[tuple[float, float, int]] = []  # (monotonic, process CPU, packets)
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline:
                await asyncio.sleep(0.5)
                pipeline = recorder.pipeline
                packets = 0 if pipeline is None else pipeline.session.counters.packets
                samples.append((time.monotonic(), time.process_time(), packets))
                if len(samples) > 3 and packets and samples[-3][2] == packets:
                    break  # no data for a second: the flight is streamed, the tail waits for STOP
            recorder.request_stop()
            await asyncio.wait_for(running, 30)
            await asyncio.wait_for(sim.wait(), 15)
            sim_log.close()
    await asyncio.sleep(0.3)
    delivered = await sub.finish()

    timing = rebuild_stream(arrivals, settings.link.sysid, settings.link.compid)
    recorded = b"".join(path.read_bytes() for path in sorted(out_dir.rglob("*.ulg")))
    offered = {sample_key(message): (now, slots.get(id(message))) for now, message in offers}
    total: list[float] = []  # arrival -> delivery
    at_once: list[float] = []  # the same, samples published as they arrived
    from_hold: list[float] = []  # the same, samples held by the cap until their slot opened
    flush_late: list[float] = []  # slot opened -> held sample offered to the outbox
    slot_to_delivery: list[float] = []  # slot opened -> held sample delivered
    after_policy: list[float] = []  # offered to the outbox -> delivered
    unmatched = 0
    for received_at, sample in delivered.samples:
        arrived = timing.completed_at.get(sample)
        offer_info = offered.get(sample)
        if arrived is None or offer_info is None:
            unmatched += 1
            continue
        offered_at, slot = offer_info
        latency = received_at - arrived
        total.append(latency)
        after_policy.append(received_at - offered_at)
        if slot is None:
            at_once.append(latency)
        else:
            from_hold.append(latency)
            flush_late.append(offered_at - slot)
            slot_to_delivery.append(received_at - slot)
    first = next(s for s in samples if s[2])
    last = next(s for s in samples if s[2] == samples[-1][2])
    rate = timing.data_packets / timing.data_seconds if timing.data_seconds else 0.0
    variant = ", bench patch: held samples also flushed on receive" if flush_on_receive else ""
    print(
        f"1. latency, datagram arrival -> broker delivery to a subscriber "
        f"(sim --rate usb --speed {SITL_SPEED}, recorder in-process, 10 Hz cap{variant})"
    )
    print(
        f"   data phase: {timing.data_packets} packets in {timing.data_seconds:.1f} s = "
        f"{rate:.0f} packets/s, {rate * PACKET_DATA / 1e3:.0f} KB/s; "
        f"stream == recorded file: {timing.stream == recorded}"
    )
    print(
        f"   {len(delivered.samples)} samples delivered "
        f"({len(delivered.samples) / timing.data_seconds:.0f}/s), "
        f"{len(total)} matched, {unmatched} unmatched"
    )
    print(f"   arrival -> delivery, all samples:   {percentiles(total)}")
    print(f"     published on arrival ({len(at_once):5d}): {percentiles(at_once)}")
    print(f"     held by the cap      ({len(from_hold):5d}): {percentiles(from_hold)}")
    print(f"   held: slot opened -> offered:       {percentiles(flush_late)}")
    print(f"   held: slot opened -> delivery:      {percentiles(slot_to_delivery)}")
    print(f"   pipeline (on arrival + held from slot): {percentiles(at_once + slot_to_delivery)}")
    print(f"   offered to the outbox -> delivery:  {percentiles(after_policy)}")
    print(
        f"   recorder CPU (in-process, bench stamps included): "
        f"{100 * (last[1] - first[1]) / (last[0] - first[0]):.1f} % of one core"
    )


def sample_key(message: MqttMessage) -> Sample:
    name, _, multi_id = message.topic[len(JSON_PREFIX) :].rpartition("/")
    payload = message.payload
    start = payload.find(_TIMESTAMP_KEY) + len(_TIMESTAMP_KEY)
    end = payload.find(b",", start)
    return name, int(multi_id), int(payload[start : end if end > 0 else -1])


# -- 2 and 3. recorder subprocess at the USB ceiling ---------------------------------------------


class Point(msgspec.Struct):
    """One ``meta/status`` update with the processes' CPU seconds read when it arrived."""

    COUNTERS: ClassVar = ("packets", "packets_lost", "mqtt_dropped")

    time: float
    packets: int
    lost: int
    dropped: int
    cpu: dict[str, float]


async def watch_status(port: int, pids: dict[str, int], points: list[Point]) -> None:
    async with aiomqtt.Client("127.0.0.1", port, identifier=f"bench-watch-{os.getpid()}") as client:
        await client.subscribe(STATUS_TOPIC)
        async for message in client.messages:
            payload = message.payload
            assert isinstance(payload, bytes)
            status = json.loads(payload)
            now = time.monotonic()
            cpu = {}
            for name, pid in pids.items():
                with contextlib.suppress(OSError):
                    cpu[name] = cpu_seconds(pid)
            packets, lost, dropped = (int(status.get(key) or 0) for key in Point.COUNTERS)
            points.append(Point(now, packets, lost, dropped, cpu))


async def subprocess_run(
    log: Path,
    broker: int,
    broker_pid: int,
    tmp: Path,
    *,
    title: str,
    speed: str,
    full_rate: bool,
    window: float,
) -> None:
    tag = f"{speed}-{'full' if full_rate else 'capped'}"
    out_dir = tmp / f"rec-{tag}"
    link_port = free_port(socket.SOCK_DGRAM)
    sub = Subscriber(broker, tmp / f"sub-{tag}.txt")
    sub_pid = await sub.start()
    record = [
        sys.executable, "-m", "ulogstream", "record", f"udpin:127.0.0.1:{link_port}",
        "--mqtt", f"mqtt://127.0.0.1:{broker}", "--out", str(out_dir), "--no-status",
        "--vehicle-id", VEHICLE_ID, *(["--mqtt-rate", "0"] if full_rate else []),
    ]  # fmt: skip
    recorder_log = tmp / f"recorder-{tag}.log"
    with recorder_log.open("wb") as file:
        recorder = await asyncio.create_subprocess_exec(*record, stderr=file, cwd=ROOT)
    deadline = time.monotonic() + 20
    while b"listening on" not in recorder_log.read_bytes() and time.monotonic() < deadline:  # noqa: ASYNC110 (polling the recorder's log file)
        await asyncio.sleep(0.05)
    with (tmp / f"sim-{tag}.log").open("wb") as file:
        sim = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "ulogstream", "sim", str(log), f"udpout:127.0.0.1:{link_port}",
            "--rate", "usb", "--speed", speed, stderr=file, cwd=ROOT,
        )  # fmt: skip
    pids = {"recorder": recorder.pid, "sim": sim.pid, "mosquitto": broker_pid, "sub": sub_pid}
    points: list[Point] = []
    watcher = asyncio.create_task(watch_status(broker, pids, points))
    warmup = 3.0
    start: Point | None = None
    end: Point | None = None
    deadline = time.monotonic() + window + 60
    while end is None and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
        streaming = [p for p in points if p.packets]
        if start is None and streaming and streaming[-1].time >= streaming[0].time + warmup:
            start = streaming[-1]
        if start is not None and points[-1].time >= start.time + window:
            end = points[-1]
    recorder.send_signal(signal.SIGINT)
    await asyncio.wait_for(recorder.wait(), 30)
    try:
        await asyncio.wait_for(sim.wait(), 10)
    except TimeoutError:
        sim.kill()
        await sim.wait()
    watcher.cancel()
    with contextlib.suppress(asyncio.CancelledError, aiomqtt.MqttError):
        await watcher
    delivered = await sub.finish()
    rate = "--mqtt-rate 0 (every sample)" if full_rate else "default 10 Hz cap"
    print(f"{title} (sim --rate usb --speed {speed}), {rate}")
    if start is None or end is None:
        print(f"   no steady window found ({len(points)} status updates); see {recorder_log}")
        return
    seconds = end.time - start.time
    packets = end.packets - start.packets
    cpu = {name: end.cpu[name] - start.cpu[name] for name in end.cpu if name in start.cpu}
    in_window = sum(1 for stamp, _ in delivered.samples if start.time <= stamp <= end.time)
    print(
        f"   window {seconds:.1f} s: {packets / seconds:.0f} packets/s; recorder "
        f"{100 * cpu['recorder'] / seconds:.1f} % of one core, "
        f"{1e6 * cpu['recorder'] / packets:.0f} us/packet"
    )
    print(
        "   others: "
        + ", ".join(
            f"{name} {100 * cpu[name] / seconds:.0f} %" for name in cpu if name != "recorder"
        )
    )
    print(f"   subscriber received {in_window / seconds:.0f} samples/s in the window")
    recorded = sorted(out_dir.rglob("*.ulg"))
    rows = count_rows(recorded)
    last = points[-1]
    delivered_count = len(delivered.samples)
    missing = f"{rows - delivered_count} missing" if full_rate else "decimated"
    print(
        f"   whole run: {rows} samples recorded, {delivered_count} delivered ({missing}); "
        f"mqtt_dropped {last.dropped} ({end.dropped - start.dropped} in the window); "
        f"packets lost {last.lost}; recorder exit {recorder.returncode}"
    )


def count_rows(paths: list[Path]) -> int:
    rows = 0
    for path in paths:
        parser = ULogParser()
        events = parser.receive_bytes(path.read_bytes()) + parser.close()
        rows += sum(len(e.rows) for e in events if type(e) is DataRows)
    return rows


# -- main -----------------------------------------------------------------------------------------


async def run_all(
    tmp: Path,
    broker: int,
    broker_pid: int,
    window: float,
    *,
    flush_on_receive: bool,
    parts: Sequence[str] = ("1", "2", "2b", "3"),
) -> None:
    latency_log = tmp / "sitl.ulg"
    usb_log = tmp / "usb.ulg"
    flight = 22 * SITL_SPEED
    generate_flight_log(latency_log, duration_s=flight)
    usb_seconds = (window + 12) * USB_PACKETS_PER_S * PACKET_DATA / LOG_BYTES_PER_S
    generate_flight_log(usb_log, duration_s=usb_seconds)
    print(
        f"logs: {flight:.0f} s flight ({latency_log.stat().st_size / 1e6:.1f} MB) for 1, "
        f"{usb_seconds:.0f} s flight ({usb_log.stat().st_size / 1e6:.1f} MB) for 2 and 3"
    )
    if "1" in parts:
        await latency_run(latency_log, broker, tmp, flush_on_receive=flush_on_receive)
    for part, title, speed, full_rate in (
        ("2", "2. recorder subprocess at the USB ceiling", "max", False),
        ("2b", "2b. recorder subprocess at SITL-like load", str(SITL_SPEED), False),
        ("3", "3. recorder subprocess at the USB ceiling", "max", True),
    ):
        if part not in parts:
            continue
        await subprocess_run(
            usb_log,
            broker,
            broker_pid,
            tmp,
            title=title,
            speed=speed,
            full_rate=full_rate,
            window=window,
        )


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "subscribe":
        asyncio.run(subscriber(int(sys.argv[2]), Path(sys.argv[3])))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window", type=float, default=20.0, help="CPU window in s (>= 20)")
    parser.add_argument(
        "--flush-on-receive",
        action="store_true",
        help="in 1, also flush held samples after each received chunk (tries a daemon fix)",
    )
    parser.add_argument("--keep", action="store_true", help="keep and print the temp directory")
    parser.add_argument(
        "--parts", nargs="+", choices=["1", "2", "2b", "3"], default=["1", "2", "2b", "3"]
    )
    parser.add_argument(
        "--decode-delay",
        type=float,
        help="in 1, seconds the recorder lets written rows wait before decoding them "
        f"(decoding.DECODE_DELAY_S, default {decoding.DECODE_DELAY_S})",
    )
    args = parser.parse_args()
    if args.decode_delay is not None:
        decoding.DECODE_DELAY_S = args.decode_delay
    print(f"before: {uptime()}")
    tmp = Path(tempfile.mkdtemp(prefix="bench_live-"))
    try:
        with mosquitto(tmp) as (port, pid):
            asyncio.run(
                run_all(
                    tmp,
                    port,
                    pid,
                    args.window,
                    flush_on_receive=args.flush_on_receive,
                    parts=args.parts,
                )
            )
    finally:
        if args.keep:
            print(f"temp directory kept: {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"after:  {uptime()}")


if __name__ == "__main__":
    main()
