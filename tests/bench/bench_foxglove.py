"""Benchmark: what the Foxglove live view adds to the pipeline's CPU, and to the ack round trip.

Run: ``.venv/bin/python tests/bench/bench_foxglove.py [LOG.ulg]`` (about a minute; needs
``npm install`` in ``tests/node`` for the viewers). A modern PX4 log is the measure a user meets:
``../shared/data/ulg/pyulog__sample_logging_tagged_and_default_params.ulg`` (170 instances).

(a) CPU of :meth:`ulogstream.recorder.pipeline.Pipeline.receive` over the recorded stream of
    ``bench_receive.py`` (a real sample log, datagram by datagram at the USB ceiling's clock), as
    in ``bench_pipeline.py`` part (a) but with the MQTT sink running and publishing to a real
    mosquitto (started on a free port; without mosquitto, no broker: the outbox only fills).
    MQTT alone, then MQTT and Foxglove both on at their default 10 Hz caps, with no viewer, with
    a JSON viewer (Foxglove's own protocol client in Node, on the other CPU, subscribed to every
    channel, through the front with the legacy subprotocol as Foxglove Studio 1.x connects) and,
    with ``foxglove.encoding = "cdr"``, with a ROS 2 viewer (the same client filtering and
    decoding as PlotJuggler does). ``time.process_time`` counts every thread of this process: the
    SDK's server threads and the front's copying threads too. Runs alternate; the best of each
    is kept; the ratios are to MQTT alone in the same run. Target: at most 1.2x MQTT alone.
(b) Ack round trip: ``bench_pipeline.py`` part (b)'s paced run (the recorder as a subprocess,
    pinned to one CPU, the simulated PX4 on the other), without and with ``--foxglove`` and a
    viewer subscribed to everything (niced, on the simulated PX4's CPU). p50/p99/max of the
    round trip.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # run from a checkout, uninstalled
sys.path.insert(0, str(ROOT / "tests"))

from bench.bench_mqtt import mosquitto  # noqa: E402
from bench.bench_pipeline import (  # noqa: E402
    PACED_SPEED,
    ack_heavy_log,
    ack_round_trips,
    feed,
    finish,
    make_pipeline,
)
from bench.bench_receive import MB, load_log, recorded_stream  # noqa: E402

from ulogstream.adapters.mqtt_sink import MqttSink  # noqa: E402
from ulogstream.config.sections import FoxgloveSettings  # noqa: E402
from ulogstream.recorder.wiring import foxglove_view  # noqa: E402

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

CLIENT = ROOT / "tests" / "node" / "foxglove_client.mjs"


VIEWER_ARGS: dict[str, list[str]] = {
    "json": ["foxglove.websocket.v1"],
    "ros2": ["foxglove.sdk.v1", "ros2-only"],
}
"""How each kind of viewer connects: Foxglove Studio 1.x's subprotocol; PlotJuggler's, and its
filter (cdr channels only, decoded)."""


@contextlib.contextmanager
def viewer(url: str, cpus: set[int], kind: str = "json") -> Iterator[subprocess.Popen[bytes]]:
    """Foxglove's protocol client subscribed to every channel on ``cpus``, output thrown away.

    A real viewer is another machine: here it runs niced on CPUs the measured side leaves.
    """
    node = shutil.which("node")
    if node is None or not (CLIENT.parent / "node_modules").is_dir():
        msg = "the viewer needs node and `npm install` in tests/node"
        raise SystemExit(msg)
    process = subprocess.Popen(
        [node, str(CLIENT), url, *VIEWER_ARGS[kind]], stdout=subprocess.DEVNULL
    )
    if cpus:
        os.sched_setaffinity(process.pid, cpus)
    os.setpriority(os.PRIO_PROCESS, process.pid, 19)
    try:
        yield process
    finally:
        process.kill()
        process.wait()


async def one_pass(
    datagrams: Sequence[bytes], broker: int | None, *, foxglove: str | None, viewer_kind: str | None
) -> tuple[float, int, int]:
    """CPU seconds of one pass, MQTT messages published and Foxglove messages sent."""
    with tempfile.TemporaryDirectory() as tmp:
        pipeline, publisher = make_pipeline(Path(tmp))
        mqtt: asyncio.Task[None] | None = None
        if broker is not None:
            publisher.sink = MqttSink(
                urls=(f"mqtt://127.0.0.1:{broker}",), client_id="bench", protocol="5"
            )
            mqtt = asyncio.create_task(publisher.sink.run())
            while not publisher.sink.connected:  # noqa: ASYNC110  # a plain flag of the sink
                await asyncio.sleep(0.01)
        sink = None
        if foxglove is not None:
            settings = FoxgloveSettings(enabled=True, listen="127.0.0.1:0", encoding=foxglove)  # type: ignore[arg-type]
            sink = foxglove_view(settings)
            assert sink is not None
            sink.start()
            pipeline.live.foxglove = sink
        with contextlib.ExitStack() as stack:
            if sink is not None and viewer_kind is not None:
                others = set(range(os.cpu_count() or 1)) - os.sched_getaffinity(0)
                stack.enter_context(viewer(sink.url, others, viewer_kind))
                # connected once it subscribed to the status channel (there from the start);
                # it subscribes to the topics' channels as they are advertised
                deadline = time.monotonic() + 30
                while not sink.counters()["foxglove_viewers"] and time.monotonic() < deadline:  # noqa: ASYNC110
                    await asyncio.sleep(0.01)
                await asyncio.sleep(0.5)  # its subscriptions reach the server
            pipeline.start(0.0)
            started = time.process_time()
            await feed(pipeline, datagrams, 0.0)
            await finish(pipeline)
            if mqtt is not None:
                await publisher.sink.wait_drained()
            cpu = time.process_time() - started
        if mqtt is not None:
            mqtt.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await mqtt
        sent = 0
        if sink is not None:
            sent = sink.sent
            sink.stop()
        return cpu, publisher.sink.published, sent


def have_mosquitto() -> bool:
    return shutil.which("mosquitto") is not None or Path("/usr/sbin/mosquitto").exists()


async def part_a(datagrams: Sequence[bytes], log: bytes, passes: int) -> None:
    if not have_mosquitto():
        print("(a) mosquitto not installed: MQTT has no broker, only its outbox fills")
        await part_a_with(datagrams, log, passes, None)
        return
    with tempfile.TemporaryDirectory() as tmp, mosquitto(Path(tmp)) as port:
        await part_a_with(datagrams, log, passes, port)


async def part_a_with(
    datagrams: Sequence[bytes], log: bytes, passes: int, broker: int | None
) -> None:
    cases: dict[str, tuple[str | None, str | None]] = {
        "MQTT alone": (None, None),
        "MQTT + Foxglove, no viewer": ("json", None),
        "MQTT + Foxglove JSON, a Foxglove viewer subscribed to all": ("json", "json"),
        "MQTT + Foxglove CDR, a PlotJuggler-like viewer subscribed to all": ("cdr", "ros2"),
    }
    best = dict.fromkeys(cases, float("inf"))
    sent = dict.fromkeys(cases, (0, 0))
    for _ in range(passes):
        for name, (foxglove, viewer_kind) in cases.items():
            cpu, published, count = await one_pass(
                datagrams, broker, foxglove=foxglove, viewer_kind=viewer_kind
            )
            best[name] = min(best[name], cpu)
            sent[name] = (published, count)
    base = best["MQTT alone"]
    for name, cpu in best.items():
        ratio = cpu / base
        verdict = ""
        if name != "MQTT alone":
            verdict = f"; target <= 1.2x: {'met' if ratio <= 1.2 else 'MISSED'}"
        print(
            f"(a) {name}: {cpu:.3f} CPU s for {len(log) / MB:.2f} MB ({ratio:.2f}x), "
            f"{sent[name][0]} MQTT messages published, {sent[name][1]} Foxglove messages sent; "
            f"best of {passes}{verdict}"
        )


def free_tcp_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


async def part_b(seconds: float) -> None:
    log = ack_heavy_log(seconds)
    port = free_tcp_port()
    runs = (
        ((), False, "recorder, paced, MQTT and Foxglove off"),
        (("--foxglove", f"127.0.0.1:{port}"), True, "recorder, paced, Foxglove on with a viewer"),
    )
    for extra, with_viewer, how in runs:
        viewer_task = None
        if with_viewer:
            viewer_task = asyncio.create_task(connect_viewer_when_up(port))
        trips, frames, duration, resends = await ack_round_trips(log, PACED_SPEED, extra=extra)
        if viewer_task is not None:
            viewer_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await viewer_task
        p99 = trips[int(len(trips) * 0.99)]
        print(
            f"(b) ack round trip, {how}: {frames / duration:.0f} packets/s, {len(trips)} acked "
            f"packets, {resends} resends: p50 {statistics.median(trips) * 1e3:.3f} ms, "
            f"p99 {p99 * 1e3:.3f} ms, max {trips[-1] * 1e3:.3f} ms"
        )


async def connect_viewer_when_up(port: int) -> None:
    """Start a viewer as soon as the recorder's server accepts connections; keep it running."""
    while True:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.01)
            continue
        writer.close()
        break
    # ack_round_trips pinned the recorder to one CPU and this process (the vehicle) to another:
    # the viewer goes with the vehicle, niced, never on the recorder's CPU
    with viewer(f"ws://127.0.0.1:{port}", os.sched_getaffinity(0)):
        await asyncio.Event().wait()


async def main() -> None:
    cpu = max(os.sched_getaffinity(0))
    log, name = load_log(Path(sys.argv[1]) if len(sys.argv) > 1 else None)
    datagrams = recorded_stream(log)
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    print(f"stream: {name}, {len(log) / MB:.2f} MB, {len(datagrams)} datagrams; load {load}")
    os.sched_setaffinity(0, {cpu})
    await part_a(datagrams, log, passes=3)
    os.sched_setaffinity(0, set(range(os.cpu_count() or 1)))
    await part_b(10.0)
    print(json.dumps({"done": True}))


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())
