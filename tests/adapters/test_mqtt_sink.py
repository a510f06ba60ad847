"""MqttSink against a real mosquitto: delivery, retained, Last Will, reconnects, TLS and auth."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import math
import operator
import os
import signal
import socket
import ssl
import struct
import sys
import textwrap
import time
from pathlib import Path
from typing import TYPE_CHECKING

import aiomqtt
import msgspec
import numpy as np
import pytest
from support.loop_watch import count_registrations
from support.waiting import eventually, holds_for, running

from ulogstream.adapters.mqtt_sink import MqttSink, tls_probe_context
from ulogstream.config.sections import MqttSettings, mqtt_password
from ulogstream.config.values import BrokerAddress, SettingError
from ulogstream.errors import ConfigError
from ulogstream.live.outbox import MqttMessage
from ulogstream.live.policy import PublishPolicy
from ulogstream.ulog.events import DataRows, ULogEvent
from ulogstream.ulog.parser import ULogParser
from ulogstream.ulog.writer import ULogWriter

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

    from support.broker import Broker

pytestmark = pytest.mark.timeout(60)

WAIT = 10.0
"""Seconds a test waits for the broker to deliver (generous for a loaded 2-core machine)."""


def strict_json(payload: bytes) -> dict[str, object]:
    def refuse(name: str) -> None:
        msg = f"invalid JSON constant {name}"
        raise ValueError(msg)

    obj: dict[str, object] = json.loads(payload, parse_constant=refuse)
    return obj


class Received(msgspec.Struct):
    topic: str
    payload: bytes
    retain: bool
    content_type: str | None = None
    user_properties: list[tuple[str, str]] = msgspec.field(default_factory=list)


class Collector(msgspec.Struct):
    """Messages a test subscriber received, in arrival order."""

    messages: list[Received] = msgspec.field(default_factory=list)

    async def wait_until(self, done: Callable[[list[Received]], bool], limit: float = WAIT) -> None:
        await eventually(lambda: done(self.messages), limit=limit, what="messages not received")

    def on(self, topic: str) -> list[Received]:
        return [m for m in self.messages if m.topic == topic]


def tls_context(broker: Broker) -> ssl.SSLContext | None:
    if broker.ca_file is None:
        return None
    context = ssl.create_default_context(cafile=str(broker.ca_file))
    if broker.client_cert is not None:
        context.load_cert_chain(str(broker.client_cert), str(broker.client_key))
    return context


@contextlib.asynccontextmanager
async def subscriber(broker: Broker, topic: str = "#") -> AsyncIterator[Collector]:
    collector = Collector()
    async with aiomqtt.Client(
        broker.host,
        broker.port,
        username=broker.username,
        password=broker.password,
        tls_context=tls_context(broker),
        protocol=aiomqtt.ProtocolVersion.V5,
    ) as client:
        await client.subscribe(topic)

        async def collect() -> None:
            async for message in client.messages:
                payload = message.payload
                assert isinstance(payload, bytes)
                properties = message.properties
                collector.messages.append(
                    Received(
                        str(message.topic),
                        payload,
                        message.retain,
                        getattr(properties, "ContentType", None),
                        list(getattr(properties, "UserProperty", [])),
                    )
                )

        task = asyncio.create_task(collect())
        try:
            yield collector
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def sink_for(broker: Broker, **settings: object) -> MqttSink:
    # The sink's tests use MQTT 5's properties; two sinks on one broker need two client ids.
    settings = {"protocol": "5", "client_id": "test", **settings}
    return MqttSink(
        urls=(broker.url,),
        backoff_initial_s=0.05,
        backoff_max_s=0.3,
        **settings,  # type: ignore[arg-type]
        will=MqttMessage("ulogstream/v1/meta/status", b'{"online": false}', retain=True, qos=1),
    )


# -- a generated log with several topics, two instances, nesting, arrays, char and NaN -------

HEADER_US = 5_000_000
ROWS = 120


def generated_log() -> bytes:
    writer = ULogWriter(timestamp_us=HEADER_US)
    writer.flag_bits()
    writer.format("vec:float x;float y;")
    writer.format(
        "sample:uint64_t timestamp;float[3] q;vec[2] v;char[8] name;int32_t n;uint8_t[3] _padding0;"
    )
    writer.format("fast:uint64_t timestamp;double a;bool ok;uint16_t[2] c;")
    writer.info("char", "sys_name", "PX4")
    writer.parameter("MC_ROLL_P", 6.5)
    sample0 = writer.add_logged_message("sample", 0)
    sample1 = writer.add_logged_message("sample", 1)
    fast = writer.add_logged_message("fast", 0)
    for i in range(ROWS):
        stamp = HEADER_US + i * 10_000
        q = (i * 0.1, math.nan if i % 7 == 0 else -i / 3, math.inf if i % 11 == 0 else 1e-7 * i)
        name = f"n{i}".encode()
        writer.data(sample0, struct.pack("<Q3f4f8si", stamp, *q, 1, 2, 3, i, name, i))
        writer.data(sample1, struct.pack("<Q3f4f8si", stamp + 1, *q, 4, 5, 6, -i, b"x\0y", -i))
        writer.data(fast, struct.pack("<Qd?2H", stamp + 2, i / 7, i % 2 == 0, i, 65535 - i))
        if i == ROWS // 2:
            writer.logging(ord("6"), stamp, "half way")
    return writer.getvalue()


def parse_in_packets(data: bytes, size: int = 249) -> list[ULogEvent]:
    parser = ULogParser()
    events: list[ULogEvent] = []
    for start in range(0, len(data), size):
        events += parser.receive_bytes(data[start : start + size])
    return [*events, *parser.close()]


def expected_samples(events: list[ULogEvent]) -> dict[str, list[dict[str, object]]]:
    """What the parser decoded, per topic instance, as JSON-like values (NaN/Inf as None)."""
    out: dict[str, list[dict[str, object]]] = {}
    for event in events:
        if not isinstance(event, DataRows):
            continue
        key = f"{event.subscription.name}/{event.subscription.multi_id}"
        names = [n for n in event.rows.dtype.names or () if n != "timestamp"]
        for row, stamp in zip(event.rows, event.timestamps_us.tolist(), strict=True):
            sample: dict[str, object] = {"timestamp": stamp}
            for name in names:
                value = row[name]
                if isinstance(value, bytes):
                    sample[name] = value.split(b"\0")[0].decode()
                elif isinstance(value, np.floating) and not np.isfinite(value):
                    sample[name] = None
                else:
                    sample[name] = value.item()
            out.setdefault(key, []).append(sample)
    return out


def same_value(got: object, want: object) -> bool:
    if isinstance(want, float) and isinstance(got, int | float) and not isinstance(got, bool):
        # float32 fields print in their shortest form: equal once back in float32
        return bool(got == want or np.float32(got) == np.float32(want))
    return got == want


# -- tests -----------------------------------------------------------------------------------


@pytest.mark.broker
@pytest.mark.asyncio
async def test_every_sample_arrives_once_in_order_with_the_parsers_values(
    mosquitto: Broker,
) -> None:
    events = parse_in_packets(generated_log())
    expected = expected_samples(events)
    total = sum(len(v) for v in expected.values())
    policy = PublishPolicy(vehicle_id="v1", default_rate_hz=0)
    sink = sink_for(mosquitto)
    end = MqttMessage("ulogstream/v1/json/end/0", b"{}")
    async with subscriber(mosquitto, "ulogstream/v1/json/#") as collector, running(sink.run()):
        sink.offer_all(policy.log_started(wall_time=1.7e9, now=0.0))
        for event in events:
            sink.offer_all(policy.select(event, 0.0))
        # The sink sends in order on one connection and mosquitto keeps that order: once the
        # marker offered last is in, every sample (and any duplicate of one) arrived before it.
        sink.offer(end)
        await collector.wait_until(lambda got: any(m.topic == end.topic for m in got))

    assert collector.messages[-1].topic == end.topic
    del collector.messages[-1]
    assert len(collector.messages) == total
    assert sink.dropped == 0
    assert {m.content_type for m in collector.messages} == {"application/json"}
    received: dict[str, list[dict[str, object]]] = {}
    for message in collector.messages:
        received.setdefault(message.topic.removeprefix("ulogstream/v1/json/"), []).append(
            strict_json(message.payload)
        )
    assert sorted(received) == ["fast/0", "sample/0", "sample/1"]
    for key, samples in expected.items():
        got = received[key]
        assert [g["timestamp"] for g in got] == [s["timestamp"] for s in samples], key
        for got_obj, want in zip(got, samples, strict=True):
            assert got_obj["t"] == pytest.approx(1.7e9 + (int(want["timestamp"]) - HEADER_US) / 1e6)  # type: ignore[call-overload]
            for name, value in want.items():
                assert same_value(got_obj[name], value), (key, name, got_obj[name], value)


@pytest.mark.broker
@pytest.mark.asyncio
async def test_retained_topics_reach_a_late_subscriber(mosquitto: Broker) -> None:
    policy = PublishPolicy(vehicle_id="v1")
    sink = sink_for(mosquitto)
    async with running(sink.run()):
        sink.offer_all(policy.log_started(wall_time=1.7e9, now=0.0, log_file="x.ulg"))
        for event in parse_in_packets(generated_log()):
            sink.offer_all(policy.select(event, 0.0))
        sink.offer_all(policy.flush_due(0.0))  # the parameters, after the definitions
        async with asyncio.timeout(WAIT):
            await sink.wait_drained()

    async with subscriber(mosquitto, "ulogstream/v1/#") as late:
        wanted = {
            "ulogstream/v1/meta/status",
            "ulogstream/v1/meta/info",
            "ulogstream/v1/params",
            "ulogstream/v1/param/MC_ROLL_P",
            "ulogstream/v1/schema/sample",
            "ulogstream/v1/schema/fast",
        }
        await late.wait_until(lambda got: wanted <= {m.topic for m in got})
    assert all(m.retain for m in late.messages)
    assert not any("/json/" in m.topic for m in late.messages)
    assert strict_json(late.on("ulogstream/v1/meta/status")[0].payload)["log_file"] == "x.ulg"
    assert late.on("ulogstream/v1/param/MC_ROLL_P")[0].payload == b"6.5"


LWT_SCRIPT = textwrap.dedent(
    """
    import asyncio, sys
    from ulogstream.adapters.mqtt_sink import MqttSink
    from ulogstream.live.policy import PublishPolicy, TopicChoice

    async def main() -> None:
        policy = PublishPolicy(vehicle_id="lwt")
        sink = MqttSink(
            urls=(sys.argv[1],), client_id="test", protocol="5", will=policy.last_will()
        )
        sink.offer_all(policy.log_started(wall_time=0.0, now=0.0))
        task = asyncio.create_task(sink.run())
        await sink.wait_drained()
        print("published", flush=True)
        await task

    asyncio.run(main())
    """
)


@pytest.mark.broker
@pytest.mark.asyncio
async def test_the_last_will_appears_when_the_publisher_is_killed(
    mosquitto: Broker, tmp_path: Path
) -> None:
    script = tmp_path / "publisher.py"
    script.write_text(LWT_SCRIPT)
    async with subscriber(mosquitto, "ulogstream/lwt/meta/status") as collector:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            str(script),
            mosquitto.url,
            env={**os.environ, "PYTHONPATH": str(Path.cwd())},
        )
        try:
            await collector.wait_until(lambda got: len(got) >= 1, limit=30)
            assert strict_json(collector.messages[0].payload)["online"] is True
            process.send_signal(signal.SIGKILL)
            async with asyncio.timeout(10):
                await process.wait()
            await collector.wait_until(lambda got: len(got) >= 2)
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
    assert strict_json(collector.messages[-1].payload) == {"online": False}


@pytest.mark.broker
@pytest.mark.asyncio
async def test_a_restarted_broker_gets_retained_topics_again_and_drops_are_counted(
    mosquitto: Broker,
) -> None:
    sink = MqttSink(
        urls=(mosquitto.url,),
        client_id="test",
        protocol="5",
        outbox_size=20,
        backoff_initial_s=0.05,
    )
    status = MqttMessage("ulogstream/v1/meta/status", b'{"online":true}', retain=True)
    async with running(sink.run()):
        sink.offer(status)
        await eventually(lambda: sink.published == 1)
        mosquitto.stop()
        await eventually(lambda: not sink.connected)
        for i in range(100):
            sink.offer(MqttMessage("ulogstream/v1/json/x/0", str(i).encode()))
        assert sink.dropped == 80
        assert sink.last_error is not None
        mosquitto.start()
        async with subscriber(mosquitto, "ulogstream/v1/#") as collector:
            await eventually(lambda: sink.connected)
            assert sink.reconnects == 1
            sink.offer(MqttMessage("ulogstream/v1/json/x/0", b"after"))
            await collector.wait_until(
                lambda got: (
                    any(m.payload == b"after" for m in got)
                    and any(m.topic.endswith("meta/status") for m in got)
                )
            )
    data = [m.payload for m in collector.messages if "/json/" in m.topic]
    # the newest 20 offered while the broker was away survived, in order, then the new one
    assert data[-1] == b"after"
    kept = [int(p) for p in data[:-1]]
    assert kept == sorted(kept)
    assert set(kept) <= set(range(80, 100))
    assert collector.on("ulogstream/v1/meta/status")[0].payload == b'{"online":true}'


@pytest.mark.broker
@pytest.mark.asyncio
async def test_mqtt5_properties_are_sent_and_mqtt311_publishes_without_them(
    mosquitto: Broker,
) -> None:
    raw = MqttMessage(
        "raw/v5",
        b"\x01\x02",
        content_type="application/octet-stream",
        user_properties=(("ulog_format", "sample"),),
    )
    v5 = sink_for(mosquitto, protocol="5", client_id="v5")
    v311 = sink_for(mosquitto, protocol="3.1.1", client_id="v311")
    async with subscriber(mosquitto, "raw/#") as collector, running(v5.run()), running(v311.run()):
        v5.offer(raw)
        v311.offer(MqttMessage("raw/v311", b"\x03", content_type="application/octet-stream"))
        await collector.wait_until(lambda got: len(got) == 2)
    [from_v5] = collector.on("raw/v5")
    assert from_v5.content_type == "application/octet-stream"
    assert from_v5.user_properties == [("ulog_format", "sample")]
    [from_v311] = collector.on("raw/v311")
    assert (from_v311.payload, from_v311.content_type) == (b"\x03", None)


@pytest.mark.broker
@pytest.mark.asyncio
async def test_tls_with_a_client_certificate(mosquitto_tls: Broker) -> None:
    sink = MqttSink(
        urls=(mosquitto_tls.url,),
        client_id="test",
        protocol="5",
        tls_ca_file=mosquitto_tls.ca_file,
        tls_cert_file=mosquitto_tls.client_cert,
        tls_key_file=mosquitto_tls.client_key,
    )
    async with subscriber(mosquitto_tls, "t/#") as collector, running(sink.run()):
        sink.offer(MqttMessage("t/a", b"over tls", content_type="text/plain"))
        await collector.wait_until(lambda got: len(got) == 1)
    assert collector.messages[0].payload == b"over tls"
    assert sink.connected is False  # run() was cancelled


@pytest.mark.broker
@pytest.mark.asyncio
# paho-mqtt 2.2 does not close the socket when the TLS handshake fails; collected here.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
async def test_tls_without_the_ca_fails_with_a_reason_and_keeps_retrying(
    mosquitto_tls: Broker,
) -> None:
    sink = MqttSink(
        urls=(mosquitto_tls.url,), client_id="test", protocol="5", backoff_initial_s=0.05
    )
    async with running(sink.run()):
        await eventually(lambda: sink.last_error is not None)
        assert not sink.connected
        assert "certificate" in (sink.last_error or "").lower()
    gc.collect()


@pytest.mark.broker
@pytest.mark.asyncio
async def test_password_from_a_file_and_from_the_environment(
    mosquitto_auth: Broker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    password_file = tmp_path / "password"
    password_file.write_text(f"{mosquitto_auth.password}\n")
    monkeypatch.setenv("ULOGSTREAM_TEST_MQTT_PASSWORD", mosquitto_auth.password or "")
    # The password is read once, by the settings (config.mqtt_password), and handed over.
    from_file = MqttSink(
        urls=(mosquitto_auth.url,),
        client_id="from-file",
        protocol="5",
        username=mosquitto_auth.username,
        password=mqtt_password(
            MqttSettings(username=mosquitto_auth.username, password_file=password_file)
        ),
    )
    from_env = MqttSink(
        urls=(mosquitto_auth.url,),
        client_id="from-env",
        username=mosquitto_auth.username,
        password=mqtt_password(
            MqttSettings(
                username=mosquitto_auth.username,
                password_env="ULOGSTREAM_TEST_MQTT_PASSWORD",  # noqa: S106 (a name)
            )
        ),
        protocol="3.1.1",
    )
    given = MqttSink(
        urls=(mosquitto_auth.url,),
        client_id="given",
        protocol="5",
        username=mosquitto_auth.username,
        password=mosquitto_auth.password,
    )
    assert str(mosquitto_auth.password) not in repr(given)
    async with (
        subscriber(mosquitto_auth, "p/#") as collector,
        running(from_file.run()),
        running(from_env.run()),
        running(given.run()),
    ):
        from_file.offer(MqttMessage("p/file", b"1"))
        from_env.offer(MqttMessage("p/env", b"2"))
        given.offer(MqttMessage("p/given", b"3"))
        await collector.wait_until(lambda got: len(got) == 3)
    assert sorted(m.topic for m in collector.messages) == ["p/env", "p/file", "p/given"]


@pytest.mark.broker
@pytest.mark.asyncio
async def test_a_wrong_password_is_reported_not_raised(
    mosquitto_auth: Broker,
) -> None:
    sink = MqttSink(
        urls=(mosquitto_auth.url,),
        client_id="test",
        protocol="5",
        username=mosquitto_auth.username,
        password="wrong",  # noqa: S106 (a test value)
        backoff_initial_s=0.05,
    )
    task = asyncio.create_task(sink.run())
    try:
        await eventually(lambda: sink.last_error is not None)
        # several backoff periods (0.05 s, doubling): still retrying, not crashed
        await holds_for(lambda: not task.done(), 0.5, what="the sink gave up")
        assert not sink.connected
        assert "not authorized" in (sink.last_error or "").lower()
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def log_with_a_parameter_named_with_a_wildcard() -> bytes:
    writer = ULogWriter(timestamp_us=HEADER_US)
    writer.flag_bits()
    writer.format("fast:uint64_t timestamp;double a;bool ok;uint16_t[2] c;")
    writer.info("char", "sys_name", "PX4")
    writer.parameter("MC_ROLL_P", 6.5)
    writer.parameter("BAD#NAME", 1.0)
    writer.parameter("MC_PITCH_P", 6.0)
    fast = writer.add_logged_message("fast", 0)
    for i in range(ROWS):
        writer.data(fast, struct.pack("<Qd?2H", HEADER_US + i * 10_000, i / 7, True, i, i))  # noqa: FBT003
    return writer.getvalue()


@pytest.mark.broker
@pytest.mark.asyncio
async def test_a_parameter_named_with_a_wildcard_is_skipped_and_the_rest_is_published(
    mosquitto: Broker,
) -> None:
    policy = PublishPolicy(vehicle_id="v1", default_rate_hz=0)
    sink = sink_for(mosquitto)
    wanted = {
        "ulogstream/v1/meta/info",
        "ulogstream/v1/params",
        "ulogstream/v1/param/MC_ROLL_P",
        "ulogstream/v1/param/MC_PITCH_P",
        "ulogstream/v1/schema/fast",
    }
    async with subscriber(mosquitto, "ulogstream/v1/#") as collector, running(sink.run()):
        sink.offer_all(policy.log_started(wall_time=1.7e9, now=0.0))
        for event in parse_in_packets(log_with_a_parameter_named_with_a_wildcard()):
            sink.offer_all(policy.select(event, 0.0))
        sink.offer_all(policy.flush_due(10.0))  # the status with the counter
        await collector.wait_until(
            lambda got: (
                wanted <= {m.topic for m in got}
                and len([m for m in got if "/json/" in m.topic]) == ROWS
                and any(b'"skipped_topics":1' in m.payload for m in got)
            )
        )
        assert sink.connected
    assert policy.skipped_topics == 1
    assert (sink.unpublishable, sink.dropped, sink.reconnects) == (0, 0, 0)
    assert not any("BAD" in m.topic for m in collector.messages)
    [params] = collector.on("ulogstream/v1/params")
    assert strict_json(params.payload) == {"MC_ROLL_P": 6.5, "BAD#NAME": 1.0, "MC_PITCH_P": 6.0}


@pytest.mark.broker
@pytest.mark.asyncio
async def test_a_message_no_broker_takes_is_dropped_and_counted_and_the_sink_goes_on(
    mosquitto: Broker,
) -> None:
    sink = sink_for(mosquitto)
    bad = [
        MqttMessage("t/#", b"wildcard"),
        MqttMessage("t/+/x", b"wildcard"),
        MqttMessage("t/nul\0", b"nul", retain=True),
        MqttMessage("t/bell\x07", b"control character"),  # mosquitto would disconnect us
        MqttMessage("", b"empty"),
        MqttMessage("t/qos", b"paho refuses QoS 3 at publish time", qos=3, retain=True),
    ]
    async with subscriber(mosquitto, "t/#") as collector, running(sink.run()) as task:
        sink.offer(MqttMessage("t/first", b"1"))
        await collector.wait_until(lambda got: len(got) == 1)
        for message in bad:
            sink.offer(message)
        sink.offer(MqttMessage("t/last", b"2", retain=True))
        await collector.wait_until(lambda got: len(got) == 2)
        async with asyncio.timeout(WAIT):
            await sink.wait_drained()
        assert sink.connected
        assert not task.done()
    assert [m.topic for m in collector.messages] == ["t/first", "t/last"]
    assert sink.unpublishable == len(bad)
    assert (sink.published, sink.reconnects) == (2, 0)
    assert "t/qos" not in sink.outbox._retained  # not re-sent after a reconnect


@pytest.mark.asyncio
async def test_samples_offered_at_once_arrive_whole_and_in_order_around_other_messages(
    mosquitto: Broker,
) -> None:
    """QoS 0 samples go out in bursts straight through paho: the order and the count hold.

    Retained and QoS 1 messages offered in between still go out (through ``publish``).
    """
    sink = sink_for(mosquitto, outbox_size=5000)
    samples = [MqttMessage(f"t/s/{i % 7}", str(i).encode()) for i in range(2000)]
    others = [
        MqttMessage("t/meta/status", b"retained", retain=True, qos=1),
        MqttMessage("t/log", b"an event", qos=1),
    ]
    async with subscriber(mosquitto, "t/#") as collector, running(sink.run()):
        await eventually(lambda: sink.connected, what="connected")
        for i, message in enumerate(samples):
            sink.offer(message)
            if i in {700, 1400}:
                sink.offer(others[i // 1400])
        await collector.wait_until(lambda got: len(got) == len(samples) + len(others))
        async with asyncio.timeout(WAIT):
            await sink.wait_drained()
    got = [m.payload for m in collector.messages if m.topic.startswith("t/s/")]
    assert got == [m.payload for m in samples]
    assert sorted(m.topic for m in collector.messages if not m.topic.startswith("t/s/")) == [
        "t/log",
        "t/meta/status",
    ]
    assert (sink.published, sink.dropped) == (len(samples) + len(others), 0)


@pytest.mark.asyncio
async def test_a_burst_the_socket_takes_is_written_at_once_without_a_writer(
    mosquitto: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Queued on paho, each burst would make aiomqtt register a writer (a loop wake-up through
    # call_soon_threadsafe, then a turn for the write): four loop turns per burst.
    sink = sink_for(mosquitto, outbox_size=5000)
    samples = [MqttMessage(f"t/s/{i % 7}", str(i).encode()) for i in range(1000)]
    async with subscriber(mosquitto, "t/#") as collector, running(sink.run()):
        await eventually(lambda: sink.connected, what="connected")
        registered = count_registrations(monkeypatch, asyncio.get_running_loop(), "add_writer")
        for start in range(0, len(samples), 100):  # as the decoder offers: a batch per turn
            sink.offer_all(samples[start : start + 100])
            await asyncio.sleep(0.005)
        await collector.wait_until(lambda got: len(got) == len(samples))
        assert registered == []  # before both clients' DISCONNECT on the way out
    assert [m.payload for m in collector.messages] == [m.payload for m in samples]


@pytest.mark.asyncio
async def test_a_burst_cut_short_by_a_stopped_broker_goes_on_whole_when_it_resumes(
    mosquitto: Broker,
) -> None:
    """What the socket does not take of a burst, paho writes later: every packet stays whole.

    With the broker stopped (SIGSTOP) the kernel's buffers fill, a burst is written in part,
    and the rest waits in paho's queue; a packet cut at the wrong byte would make the broker
    drop the connection. After SIGCONT every message handed on arrives, in order.
    """
    assert mosquitto.process is not None
    sink = sink_for(mosquitto, outbox_size=400)
    payload = bytes(20_000)
    async with subscriber(mosquitto, "t/#") as collector, running(sink.run()):
        await eventually(lambda: sink.connected, what="connected")
        mosquitto.process.send_signal(signal.SIGSTOP)
        try:
            for i in range(2000):  # 40 MB: far more than the socket buffers hold
                sink.offer(MqttMessage("t/big/0", struct.pack("<I", i) + payload))
                if i % 50 == 49:
                    await asyncio.sleep(0.002)
            await eventually(lambda: sink.dropped > 0, what="the outbox never filled")
        finally:
            mosquitto.process.send_signal(signal.SIGCONT)
        async with asyncio.timeout(WAIT * 3):
            await sink.wait_drained()
        await collector.wait_until(lambda got: len(got) == sink.published, limit=WAIT * 3)
        assert sink.reconnects == 0
    numbers = [struct.unpack_from("<I", m.payload)[0] for m in collector.messages]
    assert numbers == sorted(numbers)
    assert len(numbers) + sink.dropped == 2000
    assert all(len(m.payload) == 20_004 for m in collector.messages)


# -- no broker needed ------------------------------------------------------------------------


def test_the_sink_reads_its_url_with_the_settings_parser() -> None:
    assert MqttSink(
        urls=("mqtts://[::1]",), client_id="test", protocol="5"
    ).address == BrokerAddress("::1", 8883, tls=True)
    # mqtt://user@host passed the settings but failed the sink when each had its own parser;
    # now the settings refuse it and the sink is only ever given checked URLs.
    with pytest.raises(SettingError, match=r"mqtt\.url must not contain a user"):
        MqttSettings(url="mqtt://user@host")


def test_password_settings_are_checked(tmp_path: Path) -> None:
    # Reading the password file or variable is config.mqtt_password's (tests/config).
    with pytest.raises(SettingError, match=r"mqtt\.username must be set when"):
        MqttSettings(url="mqtt://h", password_env="PASSWORD")  # noqa: S106 (a variable name)
    with pytest.raises(ConfigError, match="CA, certificate or key"):
        MqttSink(
            urls=("mqtts://h",),
            client_id="test",
            protocol="5",
            tls_ca_file=tmp_path / "missing.crt",
        )


def test_offer_never_waits_for_the_broker() -> None:
    # what the outbox keeps is tests/live/test_outbox.py's; the sink only must not block
    sink = MqttSink(urls=("mqtt://127.0.0.1:1",), client_id="test", protocol="5", outbox_size=3)
    started = time.perf_counter()
    for i in range(5):
        sink.offer(MqttMessage("v/json/d/0", bytes([i])))
        sink.offer(MqttMessage("r", bytes([i]), retain=True))
    assert time.perf_counter() - started < 0.1
    assert (sink.dropped, sink.pending) == (2, 4)


@pytest.mark.broker
@pytest.mark.asyncio
async def test_a_registration_of_a_socket_closed_meanwhile_is_quiet_and_other_errors_are_not(
    mosquitto: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    # aiomqtt registers paho's socket through call_soon_threadsafe; a broker lost in between
    # leaves the registration to a closed descriptor, which asyncio would print as an error.
    loop = asyncio.get_running_loop()
    seen: list[dict[str, object]] = []
    loop.set_exception_handler(lambda _loop, context: seen.append(context))
    sink = sink_for(mosquitto)
    try:
        async with running(sink.run()):
            await eventually(lambda: sink.connected)
            closed = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            descriptor = closed.fileno()
            closed.close()
            loop.call_soon(loop.add_writer, descriptor, lambda: None)
            loop.call_soon(loop.add_reader, descriptor, lambda: None)
            loop.call_soon(operator.truediv, 1, 0)  # not a registration: still reported
            await eventually(lambda: len(seen) == 1)
            await asyncio.sleep(0.05)
        assert isinstance(seen[0]["exception"], ZeroDivisionError)
        assert len(seen) == 1
        assert "Bad file descriptor" not in caplog.text
        assert loop.get_exception_handler() is not None  # ours again once the sink stopped
    finally:
        loop.set_exception_handler(None)


def test_the_tls_probe_loads_no_certificate_authorities() -> None:
    """The probe of a plain port that dropped runs on the event loop while the vehicle streams.

    Loading the system's CA bundle there (``ssl.create_default_context``) held the loop for
    about 50 ms, and PX4 resent a packet whose ack waited (CI, a broker restart). The probe
    checks no certificate, so it loads none.
    """
    context = tls_probe_context()
    assert context.cert_store_stats() == {"x509": 0, "crl": 0, "x509_ca": 0}
    assert context.verify_mode == ssl.CERT_NONE
    assert not context.check_hostname
