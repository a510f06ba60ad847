"""MQTT benchmarks: full-rate publishing to a local mosquitto; policy CPU with default decimation.

Run: ``.venv/bin/python tests/bench/bench_mqtt.py``. A synthetic log shaped like a PX4 stream
(about 8000 samples/s in 50 topic instances of 16 floats each, cut into 249-byte LOGGING_DATA
payloads, about 2100 packets/s) is parsed packet by packet as the daemon would.

Figures printed:
- parser only, and parser + PublishPolicy at the default 10 Hz cap (CPU % of one core for one
  second of stream, and microseconds per sample for the policy alone);
- full rate (decimation off): messages/s through PublishPolicy + MqttSink + aiomqtt into a
  mosquitto started by this script on a free port;
- the paho floor: CPU per message of encoded QoS 0 payloads handed straight to paho under
  aiomqtt, the least a publisher on the required stack pays per message.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import aiomqtt

from ulogstream.adapters.mqtt_sink import MqttSink
from ulogstream.live.policy import PublishPolicy
from ulogstream.ulog.parser import ULogParser
from ulogstream.ulog.writer import ULogWriter

if TYPE_CHECKING:
    from collections.abc import Iterator

PACKET = 249
FIELDS = 16
RATES_HZ = [500] * 8 + [250] * 8 + [100] * 14 + [30] * 20  # about 8000 samples/s


def synthetic_log(seconds: float) -> tuple[bytes, int]:
    """A log of ``seconds`` with the topic mix above, and its number of samples."""
    writer = ULogWriter(timestamp_us=0)
    writer.flag_bits()
    fields = "".join(f"float f{i};" for i in range(FIELDS))
    for index in range(len(RATES_HZ)):
        writer.format(f"topic{index}:uint64_t timestamp;{fields}")
    writer.info("char", "sys_name", "PX4")
    ids = [writer.add_logged_message(f"topic{i}", 0) for i in range(len(RATES_HZ))]
    pack = struct.Struct(f"<Q{FIELDS}f").pack
    schedule = sorted(
        (k * 1_000_000 // hz, msg_id)
        for msg_id, hz in zip(ids, RATES_HZ, strict=True)
        for k in range(int(seconds * hz))
    )
    for stamp, msg_id in schedule:
        writer.data(msg_id, pack(stamp, *(stamp * 1e-6 + i for i in range(FIELDS))))
    return writer.getvalue(), len(schedule)


def packets(data: bytes) -> list[bytes]:
    return [data[i : i + PACKET] for i in range(0, len(data), PACKET)]


def parse_only(chunks: list[bytes]) -> float:
    parser = ULogParser()
    started = time.process_time()
    for chunk in chunks:
        parser.receive_bytes(chunk)
    return time.process_time() - started


def parse_and_select(chunks: list[bytes], seconds: float) -> tuple[float, int]:
    """CPU seconds for parser + policy with injected receive times, and messages produced."""
    parser = ULogParser()
    policy = PublishPolicy(vehicle_id="bench")
    produced = len(policy.log_started(wall_time=1.7e9, now=0.0))
    step = seconds / len(chunks)
    started = time.process_time()
    for index, chunk in enumerate(chunks):
        now = index * step
        for event in parser.receive_bytes(chunk):
            produced += len(policy.select(event, now))
        deadline = policy.next_deadline()
        if deadline is not None and deadline <= now:
            produced += len(policy.flush_due(now))
    return time.process_time() - started, produced


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.contextmanager
def mosquitto(directory: Path) -> Iterator[int]:
    binary = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
    port = free_port()
    config = directory / "mosquitto.conf"
    config.write_text(
        f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n"
        f"user {getpass.getuser()}\n"
    )
    process = subprocess.Popen([binary, "-c", str(config)], stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        yield port
    finally:
        process.kill()
        process.wait()


async def pipeline(
    chunks: list[bytes], port: int, *, rate_hz: float, seconds: float
) -> tuple[int, float, float]:
    """Messages published, wall seconds and CPU seconds for parser + policy + sink + broker."""
    parser = ULogParser()
    policy = PublishPolicy(vehicle_id="bench", default_rate_hz=rate_hz)
    step = seconds / len(chunks)
    sink = MqttSink(urls=(f"mqtt://127.0.0.1:{port}",), client_id="test", outbox_size=100_000)
    runner = asyncio.create_task(sink.run())
    while not sink.connected:  # noqa: ASYNC110  # a plain flag of the sink
        await asyncio.sleep(0.01)
    started, cpu_started = time.perf_counter(), time.process_time()
    sink.offer_all(policy.log_started(wall_time=1.7e9, now=0.0))
    for index, chunk in enumerate(chunks):
        now = index * step
        for event in parser.receive_bytes(chunk):
            sink.offer_all(policy.select(event, now))
        deadline = policy.next_deadline()
        if deadline is not None and deadline <= now:
            sink.offer_all(policy.flush_due(now))
        if index % 20 == 0:
            await asyncio.sleep(0)  # let the sink run as it would between packets
    await sink.wait_drained()
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    runner.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await runner
    if sink.dropped:
        print(f"  (dropped {sink.dropped})")
    return sink.published, elapsed, cpu


async def paho_floor(port: int, count: int = 20_000) -> float:
    """CPU seconds per QoS 0 publish handed straight to paho under aiomqtt.

    The least any publisher on the required stack pays per message: the payload is encoded
    beforehand, 16 go per loop turn as in the sink's bursts, MQTT 5 as the sink's default.
    """
    payload = b'{"timestamp":1700000000000000,' + b'"x":0.123456,' * 20 + b'"y":1}'
    async with aiomqtt.Client("127.0.0.1", port, protocol=aiomqtt.ProtocolVersion.V5) as client:
        paho = client._client
        started = time.process_time()
        for index in range(0, count, 16):
            for offset in range(16):
                paho.publish(f"ulogstream/bench/json/t{(index + offset) % 120}/0", payload)
            await asyncio.sleep(0)  # aiomqtt's writer callback writes them
        while paho.want_write():  # noqa: ASYNC110 (paho's own flag)
            await asyncio.sleep(0.001)
        return (time.process_time() - started) / count


def main() -> None:
    seconds = 10.0
    data, samples = synthetic_log(seconds)
    chunks = packets(data)
    print(
        f"synthetic stream: {seconds:.0f} s, {len(chunks) / seconds:.0f} packets/s, "
        f"{samples / seconds:.0f} samples/s in {len(RATES_HZ)} topic instances"
    )
    parse_cpu = min(parse_only(chunks) for _ in range(3))
    runs = [parse_and_select(chunks, seconds) for _ in range(3)]
    both_cpu, produced = min(r[0] for r in runs), runs[0][1]
    policy_cpu = max(both_cpu - parse_cpu, 0.0)
    print(f"parser only:                  {100 * parse_cpu / seconds:5.1f} % of a core")
    print(
        f"parser + policy (10 Hz cap):  {100 * both_cpu / seconds:5.1f} % of a core, "
        f"{produced / seconds:.0f} messages/s"
    )
    print(f"policy alone: {1e6 * policy_cpu / samples:.2f} us per sample")

    if shutil.which("mosquitto") is None and not Path("/usr/sbin/mosquitto").exists():
        print("mosquitto not installed: full-rate publishing not measured")
        sys.exit(0)
    short = packets(synthetic_log(3.0)[0])
    with tempfile.TemporaryDirectory() as tmp, mosquitto(Path(tmp)) as port:
        capped = asyncio.run(pipeline(chunks, port, rate_hz=10, seconds=seconds))
        published, elapsed, cpu = asyncio.run(pipeline(short, port, rate_hz=0, seconds=3.0))
        floor = min(asyncio.run(paho_floor(port)) for _ in range(3))
    print(
        f"parser + policy + sink + aiomqtt (10 Hz cap): {100 * capped[2] / seconds:5.1f} % of a "
        f"core for 1 s of stream ({capped[0]} messages)"
    )
    print(
        f"full rate (decimation off):   {published / elapsed:.0f} messages/s published "
        f"({published} in {elapsed:.2f} s, {1e6 * cpu / published:.0f} us CPU per message)"
    )
    print(
        f"paho floor (encoded payloads straight to paho, best of 3): {1e6 * floor:.1f} us CPU "
        "per message"
    )


if __name__ == "__main__":
    main()
