"""Benchmark: the whole live pipeline on one core, ack latency at the USB ceiling, memory over time.

Run: ``.venv/bin/python tests/bench/bench_pipeline.py [--full]`` (about 1.5 minutes; ``--full``
streams an hour's worth of packets in part (c), about 6 minutes).

(a) Throughput of :meth:`~ulogstream.recorder.pipeline.Pipeline.receive` on one core (pinned)
    over the recorded stream of ``bench_receive.py`` (a sample log, datagram by datagram): decode,
    ack, reassemble, file (:class:`UlgFileSink`), incremental ULog parsing of every message and
    the MQTT publish policy at its default 10 Hz cap per topic instance feeding a real
    :class:`MqttSink` outbox (no broker: the outbox is bounded and drops the oldest, so the CPU
    of the producer side is all there is to measure). The receive clock advances 1/2100 s per
    datagram, as at the USB ceiling, so the rate cap sees real time. Target >= 20000 packets/s.
(b) Ack latency: ``python -m ulogstream record udpout:... --once`` as a subprocess (the product,
    recording to a file, pinned to one CPU) against the simulated PX4 in this process (on the
    other CPU) streaming a log whose data section carries an 'M' message every 40 packets, so
    acked packets are interleaved with the stream as PX4 does with load output. Twice: paced by
    the log's timestamps at about 1900 packets/s (PX4 sends as its 16-deep queue fills), and at
    ``speed=max`` where the simulator sends each 100 ms window's budget (210 packets at the USB
    ceiling) in one burst. The vehicle's socket stamps each first send of a LOGGING_DATA_ACKED
    and the arrival of its LOGGING_ACK (``time.perf_counter``): p50, p99 and max of the round
    trip, an upper bound of the ack latency inside the recorder. A control run replaces the
    recorder by a bare acking loop: the floor this machine's scheduling sets. Target p99 < 2 ms.
(c) Memory: part (a)'s pipeline fed the recorded stream again and again for the packet count of
    ten minutes (``--full``: an hour) at the USB ceiling; each pass is a new log (its header
    time differs), finished logs are rotated away (``max_logs = 2``). RSS at start and end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # run from a checkout, uninstalled
sys.path.insert(0, str(ROOT / "tests"))

from bench.bench_receive import MB, load_log, recorded_stream  # noqa: E402

from ulogstream.adapters.file_sink import UlgFileSink  # noqa: E402
from ulogstream.adapters.log_files import LogFiles  # noqa: E402
from ulogstream.adapters.udp_transport import UdpTransport  # noqa: E402
from ulogstream.config.sections import MqttSettings  # noqa: E402
from ulogstream.mavlink_codec import MavlinkCodec  # noqa: E402
from ulogstream.recorder.pipeline import Pipeline  # noqa: E402
from ulogstream.recorder.status import RecorderStatus  # noqa: E402
from ulogstream.recorder.wiring import build_publisher  # noqa: E402
from ulogstream.sim.runner import run_vehicle  # noqa: E402
from ulogstream.sim.vehicle import USB_LINK_RATE, VehicleConfig  # noqa: E402
from ulogstream.stream.packets import LoggingAck, LoggingPacket  # noqa: E402
from ulogstream.stream.session import LoggingSession  # noqa: E402
from ulogstream.ulog.writer import ULogWriter  # noqa: E402

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ulogstream.adapters.foxglove_sink import FoxgloveSink
    from ulogstream.adapters.transport import Transport
    from ulogstream.recorder.decoding import Publisher

USB_PACKETS_PER_S = 2100
TIMER_EVERY = USB_PACKETS_PER_S // 10
"""Datagrams between calls of :meth:`Pipeline.timer` (every 100 ms of the simulated clock)."""
YIELD_EVERY = 64
"""Datagrams between turns of the event loop, as the UDP transport reads at most 64 in a row
(file syncs and closes run then, and the parser decodes what was written meanwhile)."""
LOGGING_DATA_ACKED = 267
PACED_SPEED = 1.4
"""Replay speed at which :func:`ack_heavy_log` streams at about 1950 packets/s (just under the
ceiling: faster, the vehicle's 16-deep queue overflows behind the stop-and-wait 'M' packets)."""


class NullTransport:
    """The link of parts (a) and (c): acks and commands are encoded, then go nowhere."""

    dropped_sends = 0

    async def receive(self) -> bytes:
        return b""

    def send(self, data: bytes) -> None:
        pass

    async def aclose(self) -> None:
        pass

    def describe(self) -> str:
        return "null"


def pipeline_on_files(
    sink: UlgFileSink, *, publisher: Publisher | None = None, foxglove: FoxgloveSink | None = None
) -> Pipeline:
    """A receiver's pipeline for sysid 1 writing into ``sink``, its file thread started.

    The file thread reports to the pipeline it serves, as the recorder wires them.
    """
    pipelines: list[Pipeline] = []
    files = LogFiles(sink, lambda event: pipelines[0].file_event(event))  # noqa: PLW0108 (made below)
    pipeline = Pipeline(
        codec=MavlinkCodec(system_id=254, component_id=155),
        session=LoggingSession(target_system=1),
        files=files,
        status=RecorderStatus(),
        publisher=publisher,
        foxglove=foxglove,
    )
    pipelines.append(pipeline)
    files.start()
    return pipeline


def make_pipeline(out_dir: Path, *, max_logs: int = 0) -> tuple[Pipeline, Publisher]:
    mqtt = MqttSettings(url="mqtt://127.0.0.1:1883", vehicle_id="bench")
    publisher = build_publisher(mqtt, vehicle_id="bench", link="bench")
    assert publisher is not None
    pipeline = pipeline_on_files(
        UlgFileSink(out_dir, min_free_mb=0, max_logs=max_logs), publisher=publisher
    )
    pipeline.attach(NullTransport().send, 0.0, restored=False)
    return pipeline, publisher


async def finish(pipeline: Pipeline) -> None:
    """End the open log and wait until every file is finished (fsync, rename)."""
    pipeline.abandon(0.0)
    await pipeline.files.aclose()
    await asyncio.sleep(0)  # the worker's last events reach the pipeline


async def feed(pipeline: Pipeline, datagrams: Sequence[bytes], now: float) -> float:
    """Every datagram through :meth:`Pipeline.receive`, timers and loop turns as the daemon does."""
    receive, timer = pipeline.receive, pipeline.timer
    for number, datagram in enumerate(datagrams, 1):
        now += 1 / USB_PACKETS_PER_S
        receive(datagram, now)
        if number % TIMER_EVERY == 0:
            timer(now)
        if number % YIELD_EVERY == 0:
            await asyncio.sleep(0)
    return now


def recordings(directory: Path) -> list[Path]:
    """The finished logs under ``directory`` (by date and time: oldest first)."""
    return sorted(directory.rglob("*.ulg"), key=lambda path: (path.parent.name, path.name))


def offered(publisher: Publisher) -> int:
    sink = publisher.sink
    return sink.pending + sink.dropped + sink.published


async def part_a(datagrams: Sequence[bytes], log: bytes, passes: int) -> None:
    best = float("inf")
    messages = 0
    for _ in range(passes):
        with tempfile.TemporaryDirectory() as tmp:
            pipeline, publisher = make_pipeline(Path(tmp))
            pipeline.start(0.0)
            started = time.process_time()
            await feed(pipeline, datagrams, 0.0)
            await finish(pipeline)
            cpu = time.process_time() - started
            (path,) = recordings(Path(tmp))
            if path.read_bytes() != log:
                msg = "part (a): the pipeline did not record the log byte for byte"
                raise SystemExit(msg)
            messages = offered(publisher)
        best = min(best, cpu)
    rate = len(datagrams) / best
    print(
        f"(a) whole pipeline, one core: {rate:.0f} packets/s ({1e6 / rate:.1f} us/packet, "
        f"{best / (len(log) / MB):.4f} CPU s/MB), {messages} MQTT messages offered per pass; "
        f"best of {passes}; target >= 20000: {'met' if rate >= 20000 else 'MISSED'}"
    )


# ---------------------------------------------------------------------------------------------
# (b) ack latency


def ack_heavy_log(seconds: float) -> bytes:
    """About ``seconds`` of streaming at the USB ceiling; an 'M' message every 40 packets."""
    writer = ULogWriter(timestamp_us=1000)
    writer.flag_bits()
    writer.format("sensor_combined:uint64_t timestamp;float[24] values;")
    writer.format("vehicle_attitude:uint64_t timestamp;float[4] q;float[8] pad;")
    writer.info("char", "sys_name", "PX4")
    writer.parameter("SDLOG_BACKEND", 3)
    sensor = writer.add_logged_message("sensor_combined")
    attitude = writer.add_logged_message("vehicle_attitude")
    target = seconds * USB_PACKETS_PER_S * 249
    timestamp = 1_000_000
    next_load = 40 * 249
    while writer.size < target:
        timestamp += 500
        writer.data(sensor, struct.pack("<Q24f", timestamp, *range(24)))
        writer.data(attitude, struct.pack("<Q12f", timestamp, *range(12)))
        if writer.size >= next_load:
            next_load += 40 * 249
            writer.info_multiple("char", "perf_top_load", f"load at {timestamp}: " + "x" * 80)
    return writer.getvalue()


class AckTimer:
    """The vehicle's transport, stamping first sends of ACKED frames and arrivals of their acks."""

    def __init__(self, inner: Transport) -> None:
        self.inner = inner
        self.codec = MavlinkCodec(system_id=1, component_id=1)
        self.sent: dict[int, float] = {}
        self.round_trips: list[float] = []

    @property
    def dropped_sends(self) -> int:
        return self.inner.dropped_sends

    async def receive(self) -> bytes:
        data = await self.inner.receive()
        arrived = time.perf_counter()
        for message in self.codec.decode(data):
            if isinstance(message, LoggingAck):
                sent = self.sent.pop(message.sequence, None)
                if sent is not None:
                    self.round_trips.append(arrived - sent)
        return data

    def send(self, data: bytes) -> None:
        self.inner.send(data)
        if len(data) > 11 and data[7] | data[8] << 8 | data[9] << 16 == LOGGING_DATA_ACKED:
            sequence = data[10] | data[11] << 8
            self.sent.setdefault(sequence, time.perf_counter())

    async def aclose(self) -> None:
        await self.inner.aclose()

    def describe(self) -> str:
        return self.inner.describe()


BASELINE_ACKER = """
import socket, sys
from ulogstream.mavlink_codec import MavlinkCodec
codec = MavlinkCodec(system_id=254, component_id=155)
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
vehicle = ("127.0.0.1", int(sys.argv[1]))
sock.sendto(codec.encode_command_long(2510, 0.0, 1, 1), vehicle)
while True:
    data = sock.recv(65535)
    if len(data) > 11 and data[7] == 11 and data[8] == 1 and data[9] == 0:  # LOGGING_DATA_ACKED
        sock.sendto(codec.encode_logging_ack(data[10] | data[11] << 8, 1, 1), vehicle)
"""
"""The control of part (b): a receiver that only acks (recvfrom, check the id, sendto)."""


def finished_logs(out_dir: Path, count: int) -> None:
    """``count`` small finished logs under ``out_dir``, 100 a day, as months of flights leave."""
    for number in range(count):
        day = out_dir / f"2026-{1 + number // 3000:02d}-{1 + number // 100 % 28:02d}"
        day.mkdir(parents=True, exist_ok=True)
        (day / f"{number:06d}.ulg").write_bytes(b"ULog\x01\x125\x01" + bytes(8))


async def ack_round_trips(
    log: bytes,
    speed: float | None,
    *,
    baseline: bool = False,
    rotation: int = 0,
    extra: Sequence[str] = (),
) -> tuple[list[float], int, float, int]:
    """Stream ``log`` to a recorder process; the sorted round trips, frames, seconds, resends.

    The recorder runs on one CPU, the vehicle (this process) on the other. ``rotation``: that
    many finished logs wait in the output directory with ``max_logs`` set to keep that many, so
    the log start scans them all and deletes the oldest while PX4 waits for acks. ``extra``:
    more arguments of ``record`` (bench_foxglove.py adds ``--foxglove``).
    """
    cpus = sorted(os.sched_getaffinity(0))
    with tempfile.TemporaryDirectory() as tmp:
        link = await UdpTransport.listen("127.0.0.1", 0)
        port = str(link.local_address[1])
        timer = AckTimer(link)
        if baseline:
            command = ["-c", BASELINE_ACKER, port]
        elif rotation:
            finished_logs(Path(tmp) / "out", rotation)
            config_file = Path(tmp) / "ulogstream.toml"
            config_file.write_text(
                f'[link]\nconnection = "udpout:127.0.0.1:{port}"\n'
                f'[recording]\nout_dir = "{tmp}/out"\nmin_free_mb = 0\nmax_logs = {rotation}\n'
                "[systemd]\nwatchdog = false\n"
            )
            command = ["-m", "ulogstream", "run", "--config", str(config_file)]
        else:
            command = [
                "-m", "ulogstream", "record", f"udpout:127.0.0.1:{port}", "--once",
                "--no-status", "--out", tmp, "--min-free-mb", "0", *extra,
            ]  # fmt: skip
        process = await asyncio.create_subprocess_exec(
            sys.executable, *command, stderr=asyncio.subprocess.DEVNULL
        )
        if len(cpus) > 1:
            os.sched_setaffinity(process.pid, {cpus[0]})
            os.sched_setaffinity(0, {cpus[1]})
        stop = asyncio.Event()

        def delivered(_: int) -> None:
            if baseline:
                stop.set()
            else:
                process.terminate()  # STOP handshake, then exit

        config = VehicleConfig(link_rate=USB_LINK_RATE, speed=speed)
        started = time.perf_counter()
        summary = await run_vehicle(
            log, timer, config=config, on_log_delivered=delivered, stop_event=stop
        )
        duration = time.perf_counter() - started
        if baseline:
            process.kill()
        await process.wait()
        os.sched_setaffinity(0, set(cpus))
        if rotation:
            kept = recordings(Path(tmp) / "out")
            if len(kept) != rotation or kept[-1].read_bytes() != log:
                msg = f"part (b): rotation kept {len(kept)} logs, not {rotation} with the new one"
                raise SystemExit(msg)
        elif not baseline:
            (path,) = recordings(Path(tmp))
            if path.read_bytes() != log and not summary.stats.queue_drops:
                msg = "part (b): the recorder did not record the log byte for byte"
                raise SystemExit(msg)
    if summary.stats.queue_drops:
        print(f"    (the vehicle's queue overflowed {summary.stats.queue_drops} times)")
    return sorted(timer.round_trips), summary.delivered, duration, summary.stats.resends


async def part_b(seconds: float) -> None:
    log = ack_heavy_log(seconds)
    runs = (
        (PACED_SPEED, False, 0, "recorder, paced by log time (as PX4's 16-deep queue fills)"),
        (None, False, 0, "recorder, speed=max (each 100 ms budget of 210 packets in one burst)"),
        (PACED_SPEED, False, 5000, "recorder, paced, 5000 finished logs, max_logs rotation on"),
        (PACED_SPEED, True, 0, "control: a bare acking loop instead of the recorder, paced"),
    )
    for speed, baseline, rotation, how in runs:
        trips, frames, duration, resends = await ack_round_trips(
            log, speed, baseline=baseline, rotation=rotation
        )
        p99 = trips[int(len(trips) * 0.99)]
        print(
            f"(b) ack round trip, {how}: {frames / duration:.0f} packets/s, {len(trips)} acked "
            f"packets, {resends} resends: p50 {statistics.median(trips) * 1e3:.3f} ms, "
            f"p99 {p99 * 1e3:.3f} ms, max {trips[-1] * 1e3:.3f} ms"
            + ("" if baseline else f"; target p99 < 2 ms: {'met' if p99 < 0.002 else 'MISSED'}")
        )


# ---------------------------------------------------------------------------------------------
# (c) memory


def rss_mb() -> float:
    with Path("/proc/self/statm").open() as statm:
        pages = int(statm.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / (1 << 20)


def with_header_time(datagrams: Sequence[bytes], timestamp_us: int) -> list[bytes]:
    """The stream with packet 0's header time changed (a new log), frame re-encoded."""
    (first,) = MavlinkCodec(system_id=254, component_id=155).decode(datagrams[0])
    if not isinstance(first, LoggingPacket):
        msg = "the stream does not begin with a logging packet"
        raise TypeError(msg)
    data = first.data[:8] + struct.pack("<Q", timestamp_us) + first.data[16:]
    codec = MavlinkCodec(system_id=1, component_id=1)
    frame = codec.encode_logging_data(0, 254, 155, first.first_message_offset, data, acked=True)
    return [frame, *datagrams[1:]]


async def part_c(datagrams: Sequence[bytes], minutes: float) -> None:
    total = int(minutes * 60 * USB_PACKETS_PER_S)
    passes = max(1, total // len(datagrams))
    with tempfile.TemporaryDirectory() as tmp:
        pipeline, publisher = make_pipeline(Path(tmp), max_logs=2)
        pipeline.start(0.0)
        now = await feed(pipeline, with_header_time(datagrams, 1), 0.0)  # warm-up: one log
        start_rss = rss_mb()
        samples = [start_rss]
        started = time.process_time()
        for number in range(passes):
            now = await feed(pipeline, with_header_time(datagrams, 2 + number), now)
            if number % max(1, passes // 4) == 0:
                samples.append(rss_mb())
        cpu = time.process_time() - started
        await finish(pipeline)
        end_rss = rss_mb()
        logs_left = len(recordings(Path(tmp)))
    finished = len(pipeline.status.finished)
    if finished != passes + 1:
        msg = f"part (c): {passes + 1} logs streamed but {finished} files finished"
        raise SystemExit(msg)
    recorded = pipeline.session.counters.bytes_written
    packets = passes * len(datagrams)
    print(
        f"(c) memory over {packets} packets ({packets / USB_PACKETS_PER_S / 60:.0f} "
        f"min at the USB ceiling, {passes} logs, {recorded / 1e9:.2f} GB recorded, "
        f"{logs_left} left after rotation, {cpu:.0f} CPU s): RSS start {start_rss:.1f} MB, "
        f"end {end_rss:.1f} MB, samples {', '.join(f'{s:.1f}' for s in samples)} MB; "
        f"MQTT outbox {publisher.sink.pending} pending, {publisher.sink.dropped} dropped"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--log", type=Path, help="ULog file for (a) and (c) (default: sample)")
    parser.add_argument("--passes", type=int, default=3, help="passes of (a) (default 3)")
    parser.add_argument("--ack-seconds", type=float, default=10.0, help="length of (b) in s")
    parser.add_argument("--full", action="store_true", help="(c) over an hour of packets")
    args = parser.parse_args()
    cpu = max(os.sched_getaffinity(0))
    log, name = load_log(args.log)
    datagrams = recorded_stream(log)
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    print(f"stream: {name}, {len(log) / MB:.2f} MB, {len(datagrams)} datagrams; load {load}")
    os.sched_setaffinity(0, {cpu})
    print(f"pinned to CPU {cpu} for (a) and (c)")
    await part_a(datagrams, log, args.passes)
    os.sched_setaffinity(0, set(range(os.cpu_count() or 1)))
    await part_b(args.ack_seconds)
    os.sched_setaffinity(0, {cpu})
    await part_c(datagrams, 60.0 if args.full else 10.0)


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())
