"""The recorder decodes only what leaves the process: nothing without MQTT, capped rows with it."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import pytest
from conftest import shared_ulg
from daemon.support import json_samples, subscriber
from e2e.support import flight_log, record, recorder_settings

from ulogstream.config import MqttSettings
from ulogstream.daemon import Recorder
from ulogstream.demo import free_udp_port
from ulogstream.sim.vehicle import USB_LINK_RATE, VehicleConfig
from ulogstream.ulog.reader import read

if TYPE_CHECKING:
    from pathlib import Path

    from mqtt.conftest import Broker

USB = VehicleConfig(link_rate=USB_LINK_RATE, speed=None, stop_accept_delay=0.0)


def rows_per_instance(path: Path) -> dict[tuple[str, int], int]:
    """Rows per topic instance that has any (the status lists only those)."""
    topics = read(path).topics.items()
    return {key: len(topic.timestamps_us) for key, topic in topics if len(topic.timestamps_us)}


async def record_log(log: bytes, tmp_path: Path, mqtt: MqttSettings | None = None) -> Recorder:
    """Stream ``log`` at the USB ceiling into a recorder on UDP; check the file is identical."""
    port = free_udp_port()
    settings = recorder_settings(f"udpin:127.0.0.1:{port}", tmp_path / "out")
    if mqtt is not None:
        settings = dataclasses.replace(settings, mqtt=mqtt)
    recorder = Recorder(settings, once=True)
    run = await record(log, recorder, f"udpout:127.0.0.1:{port}", config=USB)
    assert run.exit_code == 0
    (path,) = run.files
    assert path.read_bytes() == log
    return recorder


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_record_only_frames_every_row_and_decodes_none(tmp_path: Path) -> None:
    log = flight_log(6.0, seed=8)
    recorder = await record_log(log, tmp_path)
    (path,) = [finished.path for finished in recorder.status.finished]
    expected = rows_per_instance(path)
    status = recorder.status
    assert {key: stats.samples for key, stats in status.topics.items()} == expected
    assert status.rows_decoded == 0
    source = read(path)
    for key, stats in status.topics.items():
        stamps = source.topics[key].timestamps_us
        assert (stats.first_timestamp_us, stats.last_timestamp_us) == (stamps[0], stamps[-1])


@pytest.mark.asyncio
@pytest.mark.timeout(60)
@pytest.mark.slow
@pytest.mark.shared
async def test_record_only_decodes_no_row_of_a_real_log(tmp_path: Path) -> None:
    log = shared_ulg("pyulog__sample_logging_tagged_and_default_params.ulg").read_bytes()
    recorder = await record_log(log, tmp_path)
    (path,) = [finished.path for finished in recorder.status.finished]
    samples = {key: stats.samples for key, stats in recorder.status.topics.items()}
    assert samples == rows_per_instance(path)
    assert recorder.status.rows_decoded == 0


@pytest.mark.asyncio
@pytest.mark.timeout(60)
@pytest.mark.broker
async def test_mqtt_at_its_cap_decodes_a_fraction_of_the_rows(
    tmp_path: Path, mosquitto: Broker
) -> None:
    log = flight_log(6.0, seed=9)
    mqtt = MqttSettings(url=mosquitto.url, vehicle_id="v9")
    async with subscriber(mosquitto.host, mosquitto.port, "ulogstream/v9/json/#") as messages:
        recorder = await record_log(log, tmp_path, mqtt)
    (path,) = [finished.path for finished in recorder.status.finished]
    total = sum(rows_per_instance(path).values())
    status = recorder.status
    assert sum(stats.samples for stats in status.topics.values()) == total
    assert 0 < status.rows_decoded < total / 3
    assert status.mqtt_published > 0
    published = json_samples(messages, "ulogstream/v9/json/")
    assert sum(len(rows) for rows in published.values()) <= status.rows_decoded
