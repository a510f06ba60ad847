"""replay(): a recorded .ulg published as if live, paced or as fast as possible."""

from __future__ import annotations

import asyncio
import contextlib
import json
import struct
import time
from typing import TYPE_CHECKING

import aiomqtt
import pytest
from support.waiting import eventually

from ulogstream.config.sections import MqttSettings
from ulogstream.errors import ConfigError
from ulogstream.live.policy import PublishPolicy
from ulogstream.recorder.replay import replay, replay_to_mqtt
from ulogstream.recorder.wiring import replay_publisher
from ulogstream.ulog.events import DataRows
from ulogstream.ulog.parser import ULogParser
from ulogstream.ulog.writer import ULogWriter

if TYPE_CHECKING:
    from pathlib import Path

    from support.broker import Broker

    from ulogstream.live.outbox import MqttMessage

pytestmark = pytest.mark.timeout(120)

HEADER_US = 2_000_000


class ListSink:
    """An in-memory sink: keeps every message, delivers instantly."""

    def __init__(self) -> None:
        self.messages: list[MqttMessage] = []

    @property
    def pending(self) -> int:
        return 0

    def offer(self, message: MqttMessage) -> None:
        self.messages.append(message)

    async def wait_drained(self) -> None:
        return None


def write_log(path: Path, *, seconds: float, hz: int) -> Path:
    writer = ULogWriter(timestamp_us=HEADER_US)
    writer.flag_bits()
    writer.format("att:uint64_t timestamp;float[4] q;")
    writer.info("char", "sys_name", "PX4")
    msg_id = writer.add_logged_message("att", 0)
    for i in range(int(seconds * hz)):
        writer.data(msg_id, struct.pack("<Q4f", HEADER_US + i * 1_000_000 // hz, i, 0, 0, 1))
    path.write_bytes(writer.getvalue())
    return path


def json_samples(messages: list[MqttMessage]) -> list[MqttMessage]:
    return [m for m in messages if "/json/" in m.topic]


@pytest.mark.asyncio
async def test_paced_replay_takes_the_logs_time_divided_by_speed(tmp_path: Path) -> None:
    path = write_log(tmp_path / "a.ulg", seconds=0.6, hz=50)
    sink = ListSink()
    policy = PublishPolicy(vehicle_id="v", default_rate_hz=0)
    started = time.monotonic()
    stats = await replay(path, policy=policy, sink=sink, speed=2.0)
    elapsed = time.monotonic() - started
    assert stats.log_duration_s == pytest.approx(0.58, abs=0.01)
    assert 0.27 <= elapsed < 1.5
    assert len(json_samples(sink.messages)) == 30


@pytest.mark.asyncio
async def test_unpaced_replay_thins_by_the_logs_own_clock(tmp_path: Path) -> None:
    path = write_log(tmp_path / "a.ulg", seconds=2.0, hz=100)
    sink = ListSink()
    policy = PublishPolicy(vehicle_id="v", default_rate_hz=10)
    started = time.monotonic()
    stats = await replay(path, policy=policy, sink=sink, speed=None)
    assert time.monotonic() - started < 1.0
    samples = json_samples(sink.messages)
    assert 18 <= len(samples) <= 23
    stamps = [json.loads(m.payload)["timestamp"] for m in samples]
    assert stamps == sorted(stamps)
    assert stamps[-1] == HEADER_US + 199 * 10_000  # the final value is flushed at the end
    assert stats.messages == len(sink.messages)
    status = json.loads(
        [m for m in sink.messages if m.topic == "ulogstream/v/meta/status"][-1].payload
    )
    assert status["state"] == "replayed"


@pytest.mark.asyncio
async def test_replay_reports_progress_through_the_whole_file(tmp_path: Path) -> None:
    path = write_log(tmp_path / "a.ulg", seconds=60.0, hz=100)  # ~170 KB: several blocks
    calls: list[tuple[int, int]] = []
    policy = PublishPolicy(vehicle_id="v")
    await replay(
        path, policy=policy, sink=ListSink(), speed=None, progress=lambda *a: calls.append(a)
    )
    size = path.stat().st_size
    assert len(calls) >= 2  # more than one block: the line moves
    assert [done for done, _ in calls] == sorted(done for done, _ in calls)
    assert calls[-1] == (size, size)


@pytest.mark.asyncio
async def test_a_bad_speed_is_refused(tmp_path: Path) -> None:
    path = write_log(tmp_path / "a.ulg", seconds=0.1, hz=10)
    policy = PublishPolicy(vehicle_id="v")
    with pytest.raises(ConfigError, match="replay speed"):
        await replay(path, policy=policy, sink=ListSink(), speed=0.0)


async def collect(
    broker: Broker, topic: str, into: list[aiomqtt.Message], ready: asyncio.Event
) -> None:
    async with aiomqtt.Client(broker.host, broker.port) as client:
        await client.subscribe(topic)
        ready.set()
        async for message in client.messages:
            into.append(message)  # noqa: PERF401  # seen as they arrive, not at the end


@pytest.mark.broker
@pytest.mark.asyncio
async def test_replay_to_mqtt_delivers_every_sample_and_ends_offline(
    mosquitto: Broker, tmp_path: Path
) -> None:
    path = write_log(tmp_path / "a.ulg", seconds=1.0, hz=500)
    received: list[aiomqtt.Message] = []
    ready = asyncio.Event()
    task = asyncio.create_task(collect(mosquitto, "ulogstream/v/#", received, ready))
    try:
        await ready.wait()
        stats = await replay_to_mqtt(
            path,
            publisher=replay_publisher(
                MqttSettings(url=mosquitto.url, vehicle_id="v", default_rate_hz=0), sys_uuid=None
            ),
            speed=None,
        )
        async with asyncio.timeout(10):
            while sum("/json/" in str(m.topic) for m in received) < 500:  # noqa: ASYNC110
                await asyncio.sleep(0.05)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    stamps = [json.loads(m.payload)["timestamp"] for m in received if "/json/" in str(m.topic)]
    assert stamps == [HEADER_US + i * 2_000 for i in range(500)]
    assert stats.events > 0
    statuses = [m for m in received if str(m.topic) == "ulogstream/v/meta/status"]
    assert json.loads(statuses[-1].payload)["online"] is False


@pytest.mark.slow
@pytest.mark.broker
@pytest.mark.asyncio
async def test_a_real_sample_log_replays_to_valid_json_on_every_topic_instance(
    mosquitto: Broker, shared_ulg_files: list[Path]
) -> None:
    [path] = [p for p in shared_ulg_files if p.name == "px4-ulog-rs__esc_status_log.ulg"]
    parser = ULogParser()
    events = [*parser.receive_bytes(path.read_bytes()), *parser.close()]
    instances = {
        f"{e.subscription.name}/{e.subscription.multi_id}"
        for e in events
        if isinstance(e, DataRows) and len(e.rows)
    }
    received: list[aiomqtt.Message] = []
    ready = asyncio.Event()
    task = asyncio.create_task(collect(mosquitto, "ulogstream/sample/#", received, ready))
    try:
        await ready.wait()
        await replay_to_mqtt(
            path,
            publisher=replay_publisher(
                MqttSettings(url=mosquitto.url, vehicle_id="sample"), sys_uuid=None
            ),
            speed=None,
        )

        def seen_instances() -> set[str]:
            return {str(m.topic).split("/json/")[1] for m in received if "/json/" in str(m.topic)}

        await eventually(lambda: seen_instances() == instances, what="every topic instance")
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    def refuse(name: str) -> None:
        msg = f"invalid JSON constant {name}"
        raise ValueError(msg)

    seen: set[str] = set()
    for message in received:
        assert isinstance(message.payload, bytes)
        obj = json.loads(message.payload, parse_constant=refuse)
        topic = str(message.topic)
        if "/json/" in topic:
            seen.add(topic.split("/json/")[1])
            assert isinstance(obj["t"], float)
    assert seen == instances
    info = [m for m in received if str(m.topic) == "ulogstream/sample/meta/info"]
    assert json.loads(info[-1].payload)["sys_name"]


@pytest.mark.asyncio
async def test_a_jump_of_the_logs_clock_is_not_waited_for(tmp_path: Path) -> None:
    writer = ULogWriter(timestamp_us=HEADER_US)
    writer.flag_bits()
    writer.format("att:uint64_t timestamp;float[4] q;")
    msg_id = writer.add_logged_message("att", 0)
    steps = [i * 20_000 for i in range(10)]
    for stamp in [HEADER_US + d for d in steps] + [HEADER_US + 3_600_000_000 + d for d in steps]:
        writer.data(msg_id, struct.pack("<Q4f", stamp, 0, 0, 0, 1))
    path = tmp_path / "jump.ulg"
    path.write_bytes(writer.getvalue())
    sink = ListSink()
    policy = PublishPolicy(vehicle_id="v", default_rate_hz=0)
    started = time.monotonic()
    await replay(path, policy=policy, sink=sink, speed=1.0)
    assert 0.2 <= time.monotonic() - started < 3.0  # 2 x 0.18 s of log, not an hour
    assert len(json_samples(sink.messages)) == 20
