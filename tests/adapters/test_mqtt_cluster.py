"""MQTT settings a broker cluster needs, against a real mosquitto.

The client id, several brokers, the per-connection rate cap and the paced re-send of retained
topics after a reconnect.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from typing import TYPE_CHECKING

import aiomqtt
import msgspec
import paho.mqtt.client as paho
import pytest
from paho.mqtt.enums import CallbackAPIVersion
from support.broker import free_port
from support.waiting import eventually, running

from ulogstream.adapters.mqtt_sink import MqttSink
from ulogstream.config.sections import MqttSettings
from ulogstream.live.outbox import MqttMessage
from ulogstream.recorder.identity import vehicle_id_of
from ulogstream.recorder.wiring import build_publisher

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from support.broker import Broker

pytestmark = [pytest.mark.timeout(60), pytest.mark.broker]

WAIT = 15.0
"""Seconds a test waits for the broker (generous for a loaded 2-core machine)."""


class Arrivals(msgspec.Struct):
    """(monotonic arrival time, topic, payload) of every message a subscriber got."""

    got: list[tuple[float, str, bytes]] = msgspec.field(default_factory=list)

    def on(self, predicate: str) -> list[tuple[float, str, bytes]]:
        return [m for m in self.got if predicate in m[1]]


@contextlib.asynccontextmanager
async def arrivals(broker: Broker, topic: str = "#") -> AsyncIterator[Arrivals]:
    collected = Arrivals()
    async with aiomqtt.Client(broker.host, broker.port) as client:
        await client.subscribe(topic, qos=1)

        async def collect() -> None:
            async for message in client.messages:
                assert isinstance(message.payload, bytes)
                collected.got.append((time.monotonic(), str(message.topic), message.payload))

        task = asyncio.create_task(collect())
        try:
            yield collected
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def most_in_one_second(times: list[float]) -> int:
    """The largest number of ``times`` inside any window of one second."""
    times = sorted(times)
    most, start = 0, 0
    for end, t in enumerate(times):
        while t - times[start] >= 1.0:
            start += 1
        most = max(most, end - start + 1)
    return most


def broker_log(broker: Broker) -> str:
    return broker.config.with_suffix(".log").read_text(errors="replace")


@pytest.mark.asyncio
async def test_the_configured_client_id_and_keepalive_reach_the_broker(mosquitto: Broker) -> None:
    mqtt = MqttSettings(
        url=mosquitto.url, vehicle_id="uav-{sysid}", client_id="fleet-{vehicle}", keepalive_s=17
    )
    vehicle_id = vehicle_id_of(mqtt.vehicle_id, link="/dev/pixhawk", sysid=3)
    publisher = build_publisher(mqtt, vehicle_id=vehicle_id, link="/dev/pixhawk")
    assert publisher is not None
    sink = publisher.sink

    async with running(sink.run()):
        await eventually(lambda: sink.connected, limit=WAIT, what="no connection")
        await eventually(
            lambda: " as fleet-uav-3 " in broker_log(mosquitto),
            limit=WAIT,
            what="mosquitto did not log the client id",
        )

    assert sink.client_id == "fleet-uav-3"
    line = next(x for x in broker_log(mosquitto).splitlines() if " as fleet-uav-3 " in x)
    assert "k17" in line  # mosquitto logs the keepalive as k<seconds>


@pytest.mark.asyncio
async def test_the_client_id_is_the_same_at_every_start_by_default() -> None:
    mqtt = MqttSettings(url="mqtt://127.0.0.1:1", vehicle_id="v9")
    first = build_publisher(mqtt, vehicle_id="v9", link="/dev/pixhawk")
    second = build_publisher(mqtt, vehicle_id="v9", link="/dev/pixhawk")
    assert first is not None
    assert second is not None
    assert first.sink.client_id == second.sink.client_id == "ulogstream-v9"


@pytest.mark.asyncio
async def test_the_second_broker_is_used_when_the_first_is_down(mosquitto: Broker) -> None:
    down = f"mqtt://127.0.0.1:{free_port()}"  # nothing listens there
    sink = MqttSink(
        urls=(down, *(mosquitto.url,)), client_id="test", protocol="5", backoff_initial_s=0.05
    )
    status = MqttMessage("ulogstream/v1/meta/status", b'{"online":true}', retain=True)

    async with arrivals(mosquitto, "ulogstream/#") as got, running(sink.run()):
        sink.offer(status)
        await eventually(lambda: bool(got.got), limit=WAIT, what="nothing via the second broker")

    assert sink.address.port == mosquitto.port
    assert sink.last_error is None
    assert got.got[0][1:] == (status.topic, status.payload)


@pytest.mark.asyncio
async def test_the_rate_cap_holds_and_drops_only_samples(mosquitto: Broker) -> None:
    cap = 100  # AWS IoT Core's per-connection limit
    sink = MqttSink(urls=(mosquitto.url,), client_id="test", protocol="5", max_messages_per_s=cap)
    statuses = logs = rounds = 0

    async with arrivals(mosquitto, "v/#") as got, running(sink.run()):
        await eventually(lambda: sink.connected, limit=WAIT, what="no connection")
        started = time.monotonic()
        # Load: ~200 samples/s on two instances, a status and a log line every 50 ms, for 3 s
        # (the sleep paces the producer; it waits for nothing).
        while time.monotonic() - started < 3.0:
            for i in range(2):
                sink.offer(MqttMessage(f"v/json/attitude/{i}", b"{}"))
            if rounds % 5 == 0:
                sink.offer(MqttMessage("v/meta/status", str(statuses).encode(), retain=True))
                sink.offer(MqttMessage("v/log", str(logs).encode()))
                statuses += 1
                logs += 1
            rounds += 1
            await asyncio.sleep(0.01)
        await asyncio.wait_for(sink.wait_drained(), WAIT)
        await eventually(
            lambda: (
                len(got.on("/log")) == logs
                and len(got.on("/json/")) + sink.capped + sink.dropped == 2 * rounds
            ),
            limit=WAIT,
            what="messages missing",
        )

    times = [t for t, _, _ in got.got]
    assert most_in_one_second(times) <= cap * 1.15 + 3
    assert sink.capped > 0
    assert len(got.on("/json/")) >= cap  # samples flow, with what the cap leaves them
    assert [int(p) for _, _, p in got.on("/log")] == list(range(logs))  # no log line dropped
    assert got.on("v/meta/status")[-1][2] == str(statuses - 1).encode()  # the newest status


@pytest.mark.asyncio
async def test_a_reconnect_re_sends_retained_topics_at_the_set_rate(mosquitto: Broker) -> None:
    rate = 20.0
    count = 60
    sink = MqttSink(
        urls=(mosquitto.url,),
        client_id="test",
        protocol="5",
        retained_resend_per_s=rate,
        backoff_initial_s=0.05,
    )
    async with running(sink.run()):
        for i in range(count):
            sink.offer(MqttMessage(f"v/param/P{i}", str(i).encode(), retain=True))
        await asyncio.wait_for(sink.wait_drained(), WAIT)
        mosquitto.stop()  # persistence off: the restarted broker has lost every retained topic
        await eventually(lambda: not sink.connected, limit=WAIT, what="no disconnection")
        mosquitto.start()
        async with arrivals(mosquitto, "v/#") as got:
            await eventually(lambda: sink.connected, limit=WAIT, what="no reconnection")
            sink.offer(MqttMessage("v/json/x/0", b"live"))
            await eventually(
                lambda: len(got.on("/param/")) == count, limit=WAIT, what="retained missing"
            )

    resent = sorted(t for t, _, _ in got.on("/param/"))
    burst = 1 + rate / 20
    assert resent[-1] - resent[0] >= (count - burst) / rate * 0.8
    assert most_in_one_second(resent) <= rate * 1.2 + burst + 2
    # live data is not held back behind the re-send
    live = got.on("/json/")[0][0]
    assert live < resent[-1]


@pytest.mark.asyncio
# mosquitto logs MQTT 3.1.1 as p2 and the clean-session flag as c1/c0
@pytest.mark.parametrize(("protocol", "expiry", "flags"), [(4, 0, "p2, c1"), (4, 60, "p2, c0")])
async def test_a_session_expiry_asks_the_broker_for_a_persistent_session(
    mosquitto: Broker, protocol: int, expiry: int, flags: str
) -> None:
    sink = MqttSink(
        urls=(mosquitto.url,),
        client_id="persist",
        protocol=("5" if protocol == 5 else "3.1.1"),
        session_expiry_s=expiry,
    )
    async with running(sink.run()):
        await eventually(
            lambda: " as persist " in broker_log(mosquitto),
            limit=WAIT,
            what="mosquitto did not log the connection",
        )

    line = next(x for x in broker_log(mosquitto).splitlines() if " as persist " in x)
    assert f"({flags}," in line


def session_present(broker: Broker, client_id: str) -> bool:
    """Connect as ``client_id`` with MQTT 5 and clean start off: did the broker keep a session?"""
    answered = threading.Event()
    present: list[bool] = []

    def on_connect(
        _client: paho.Client,
        _userdata: object,
        flags: paho.ConnectFlags,
        _reason: object,
        _properties: object,
    ) -> None:
        present.append(flags.session_present)
        answered.set()

    client = paho.Client(CallbackAPIVersion.VERSION2, client_id=client_id, protocol=paho.MQTTv5)
    client.on_connect = on_connect
    client.connect(broker.host, broker.port, clean_start=False)
    client.loop_start()
    try:
        assert answered.wait(WAIT), "no CONNACK"
    finally:
        client.disconnect()
        client.loop_stop()
    return present[0]


@pytest.mark.asyncio
@pytest.mark.parametrize(("expiry", "kept"), [(0, False), (120, True)])
async def test_an_mqtt5_session_outlives_the_connection_for_its_expiry(
    mosquitto: Broker, expiry: int, *, kept: bool
) -> None:
    client_id = f"expiry-{expiry}"
    sink = MqttSink(
        urls=(mosquitto.url,), client_id=client_id, protocol="5", session_expiry_s=expiry
    )
    async with running(sink.run()):
        await eventually(lambda: sink.connected, limit=WAIT, what="no connection")

    assert await asyncio.to_thread(session_present, mosquitto, client_id) is kept
