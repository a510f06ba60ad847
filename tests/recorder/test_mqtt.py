"""The daemon and ``record`` publishing to a real mosquitto, which may go away and come back."""

from __future__ import annotations

import asyncio
import json
import signal
from typing import TYPE_CHECKING

import pytest
from support.broker import Broker, broker_config, free_port, make_certificates
from support.processes import (
    Process,
    assert_valid_ulog,
    daemon_config,
    json_samples,
    make_flight,
    partial_files,
    recordings,
    start_vehicle,
    subscriber,
)
from support.waiting import eventually

from ulogstream.adapters.ulog_file import read
from ulogstream.cli.demo import free_udp_port
from ulogstream.sim.vehicle import USB_LINK_RATE, VehicleConfig

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.broker


def status_values(payloads: list[bytes]) -> list[dict[str, object]]:
    values = [json.loads(payload) for payload in payloads]
    assert all(isinstance(value, dict) for value in values)
    return values


@pytest.mark.asyncio
async def test_broker_down_and_up_while_recording(
    tmp_path: Path, mosquitto: Broker, processes: list[Process]
) -> None:
    flight = make_flight(tmp_path, duration_s=8.0, seed=5)
    port = free_udp_port()
    out = tmp_path / "recordings"
    config = daemon_config(
        tmp_path / "ulogstream.toml",
        connection=f"udpin:127.0.0.1:{port}",
        out_dir=out,
        idle_timeout_s=5.0,
        mqtt={"url": mosquitto.url, "vehicle_id": "v1", "outbox_size": 20},
    )
    daemon = Process(["run", "--config", str(config)], tmp_path)
    processes.append(daemon)
    await daemon.await_line("listening on")

    vehicle, delivered = start_vehicle(
        flight.data,
        f"udpout:127.0.0.1:{port}",
        config=VehicleConfig(link_rate=USB_LINK_RATE, speed=1.0),
    )
    try:
        async with subscriber(mosquitto.host, mosquitto.port, "ulogstream/v1/#") as before:
            await eventually(lambda: len(json_samples(before, "ulogstream/v1/json/")) >= 5)

        mosquitto.stop()
        await daemon.await_line("MQTT broker 127.0.0.1")
        await asyncio.sleep(0.5)  # samples pile up in the 20-message outbox meanwhile
        mosquitto.start()
        await daemon.await_line("MQTT connected", count=2)

        async with subscriber(mosquitto.host, mosquitto.port, "ulogstream/v1/#") as after:

            def dropped_shown() -> bool:
                statuses = [m.payload for m in after if m.topic == "ulogstream/v1/meta/status"]
                values = status_values(statuses)
                return any(int(str(v.get("mqtt_dropped", 0))) > 0 for v in values)

            await eventually(lambda: len(json_samples(after, "ulogstream/v1/json/")) >= 5)
            await eventually(dropped_shown)
            assert not delivered.is_set(), "the flight ended before publishing was checked"
            # The daemon re-sends its retained topics after the reconnect. Whether this
            # subscriber saw them as retained (subscribed after the re-send) or as live
            # (retain=0, subscribed before) depends on timing; that they came does not.
            await eventually(lambda: any(m.topic == "ulogstream/v1/meta/info" for m in after))

        # The restarted broker (no persistence) now holds it: a late subscriber gets it retained.
        async with subscriber(mosquitto.host, mosquitto.port, "ulogstream/v1/meta/info") as late:
            await eventually(lambda: len(late) > 0, what="meta/info not retained by the broker")
            assert late[0].retain

        await asyncio.wait_for(delivered.wait(), 20)
        daemon.send_signal(signal.SIGTERM)
        summary = await asyncio.wait_for(vehicle, 20)
        assert await daemon.await_exit() == 0
    finally:
        vehicle.cancel()

    assert summary.logs_stopped == 1
    # Acks never stalled while the broker was away: PX4 would resend after 50 ms.
    assert summary.stats.resends == 0
    # The recording never waited for the broker: complete and byte-identical.
    files = recordings(out)
    assert [path.read_bytes() for path in files] == [flight.data]
    assert partial_files(out) == []
    text = daemon.stderr()
    assert "Traceback" not in text
    assert " ERROR " not in text


@pytest.mark.asyncio
async def test_record_publishes_samples_under_the_vehicle_id(
    tmp_path: Path, mosquitto: Broker, processes: list[Process]
) -> None:
    flight = make_flight(tmp_path, duration_s=2.0, seed=6)
    source = read(flight.path)
    port = free_udp_port()
    out = tmp_path / "recordings"
    async with subscriber(mosquitto.host, mosquitto.port, "ulogstream/v7/#") as messages:
        record = Process(
            [
                "record", f"udpin:127.0.0.1:{port}", "--once", "--out", str(out),
                "--mqtt", mosquitto.url, "--vehicle-id", "v7", "--mqtt-rate", "0",
                "--idle-timeout", "0.5",
            ],
            tmp_path,
            name="record",
        )  # fmt: skip
        processes.append(record)
        await record.await_line("listening on")
        sim = Process(
            ["sim", str(flight.path), f"udpout:127.0.0.1:{port}", "--rate", "usb"],
            tmp_path,
            name="sim",
        )
        processes.append(sim)
        assert await record.await_exit(limit=30) == 0
        assert await sim.await_exit() == 0
        expected = {f"{name}/{multi_id}" for name, multi_id in source.topics}
        attitude = source.topics["vehicle_attitude", 0]

        def all_arrived() -> bool:  # record drained its outbox before exiting; the broker may lag
            samples = json_samples(messages, "ulogstream/v7/json/")
            return set(samples) == expected and len(samples["vehicle_attitude/0"]) >= len(
                attitude.timestamps_us
            )

        await eventually(all_arrived, what="not every sample came from the broker")

    files = recordings(out)
    assert len(files) == 1
    assert_valid_ulog(files[0])
    samples = json_samples(messages, "ulogstream/v7/json/")
    assert set(samples) == expected
    # Every sample of a topic (rate 0 = no cap), in order, with the logged timestamps.
    published = [int(str(sample["timestamp"])) for sample in samples["vehicle_attitude/0"]]
    assert published == [int(t) for t in attitude.timestamps_us]
    first = samples["vehicle_attitude/0"][0]
    assert {"t", "timestamp", "q[0]", "q[3]"} <= set(first)
    assert "ulogstream: error" not in record.stderr()


@pytest.mark.asyncio
async def test_record_without_a_vehicle_opens_no_broker_connection_and_says_so(
    tmp_path: Path, mosquitto: Broker, processes: list[Process]
) -> None:
    """A vehicle's connection opens at its first contact, named and willed for that vehicle.

    (Issue 21 item 8: the summary must never contradict the log.)
    """
    record = Process(
        ["record", f"udpin:127.0.0.1:{free_udp_port()}", "--mqtt", mosquitto.url,
         "--out", str(tmp_path / "out"), "--no-status"],
        tmp_path,
    )  # fmt: skip
    processes.append(record)
    await record.await_line("listening on")
    record.send_signal(signal.SIGINT)
    assert await record.await_exit() == 0
    assert "MQTT: no vehicle was heard, so nothing was published" in record.stdout()
    assert "MQTT connected" not in record.stderr()
    assert "never reached" not in record.stdout()


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_a_plain_url_to_a_tls_port_is_told_to_use_mqtts(
    tmp_path: Path, processes: list[Process]
) -> None:
    certs = make_certificates(tmp_path / "certs")
    port = free_port()
    extra = (
        "allow_anonymous true\n"
        f"cafile {certs['ca.crt']}\ncertfile {certs['server.crt']}\nkeyfile {certs['server.key']}\n"
    )
    broker = Broker("127.0.0.1", port, broker_config(tmp_path, "tls-only", port, extra))
    broker.start()
    link = free_udp_port()
    vehicle = None
    try:
        record = Process(
            ["record", f"udpin:127.0.0.1:{link}", "--mqtt", f"mqtt://127.0.0.1:{port}",
             "--out", str(tmp_path / "out"), "--no-status"],
            tmp_path,
        )  # fmt: skip
        processes.append(record)
        await record.await_line("listening on")
        flight = make_flight(tmp_path, duration_s=2.0, seed=3)
        vehicle, _ = start_vehicle(
            flight.data, f"udpout:127.0.0.1:{link}", config=VehicleConfig(link_rate=USB_LINK_RATE)
        )
        hint = f"the broker speaks TLS on this port; use mqtts://127.0.0.1:{port}"
        await record.await_line(hint, limit=30)
        record.send_signal(signal.SIGINT)
        assert await record.await_exit() == 0
    finally:
        broker.stop()
        if vehicle is not None:
            vehicle.cancel()
    assert hint in record.stdout()  # the summary says it too
    assert " ERROR " not in record.stderr()  # a refused connection is handled, not an error
