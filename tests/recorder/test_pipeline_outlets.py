"""The live outlets (MQTT, Foxglove): each log started before it is decoded, rows shared."""

from __future__ import annotations

import asyncio
import io
import re
from collections import Counter
from typing import TYPE_CHECKING

import foxglove
import numpy as np
import pytest
from bench.bench_pipeline import pipeline_on_files
from bench.bench_receive import recorded_stream
from mcap.reader import make_reader
from support.waiting import eventually

from ulogstream.adapters.file_sink import UlgFileSink
from ulogstream.adapters.mqtt_sink import MqttSink
from ulogstream.config.sections import FoxgloveSettings
from ulogstream.live.encode import JSON_CONTENT_TYPE, json_sample_time
from ulogstream.live.policy import PublishPolicy
from ulogstream.recorder.decoding import Publisher, _widest_rows
from ulogstream.recorder.wiring import foxglove_view
from ulogstream.sim.flightlog import generate_flight_log
from ulogstream.ulog.events import Subscription
from ulogstream.ulog.parser import RowSelection

if TYPE_CHECKING:
    from pathlib import Path


def mqtt_bytes(foxglove_payload: bytes) -> bytes:
    """The MQTT payload a Foxglove sample carries behind its leading ``header.stamp``."""
    return b"{" + foxglove_payload[foxglove_payload.index(b'"t":') :]


@pytest.mark.asyncio
async def test_the_file_opening_late_does_not_make_the_outlets_forget_the_topics(
    tmp_path: Path,
) -> None:
    """The file worker names the file after the first rows were decoded: all rows still go out.

    The policy used to start the log when the worker reported the file open, forgetting the
    topics subscribed meanwhile, so a fast start of a log published nothing.
    """
    out = io.BytesIO()
    generate_flight_log(out, duration_s=3.0, seed=3)
    datagrams = recorded_stream(out.getvalue())
    policy = PublishPolicy(vehicle_id="t", default_rate_hz=0)
    publisher = Publisher(
        policy,
        MqttSink(
            urls=("mqtt://127.0.0.1:1",), client_id="test", protocol="5", outbox_size=1_000_000
        ),
    )
    pipeline = pipeline_on_files(UlgFileSink(tmp_path, min_free_mb=0), publisher=publisher)
    status = pipeline.status
    try:
        pipeline.attach(lambda _data: None, 0.0, restored=False)
        pipeline.start(0.0)
        half = len(datagrams) // 2
        for number, datagram in enumerate(datagrams[:half]):
            pipeline.receive(datagram, number / 2100)
        pipeline.live.drain()  # decoded before the worker's LogOpened is handled
        await eventually(lambda: status.log_file is not None, what="the log file opened")
        for number, datagram in enumerate(datagrams[half:], half):
            pipeline.receive(datagram, number / 2100)
        pipeline.live.drain()
        pipeline.refresh_status()
        rows = sum(stats.samples for stats in status.topics.values())
        assert rows > 0
        assert status.rows_decoded == rows  # rate 0: every row is decoded
        assert policy.published_samples == rows
    finally:
        pipeline.abandon(0.0)
        await pipeline.files.aclose()
        await asyncio.sleep(0)


def test_one_decoding_serves_both_outlets_with_the_rows_the_wider_needs() -> None:
    sub = Subscription(msg_id=1, multi_id=0, name="x", dtype=np.dtype([("timestamp", "<u8")]))
    capped = PublishPolicy(vehicle_id="a", default_rate_hz=10).rows_for
    every = PublishPolicy(vehicle_id="b", default_rate_hz=0).rows_for
    unpublished = PublishPolicy(vehicle_id="c", exclude=("x",)).rows_for
    assert capped(sub) is RowSelection.NEWEST
    assert _widest_rows([capped, every], sub) is RowSelection.ALL
    assert _widest_rows([unpublished, capped], sub) is RowSelection.NEWEST
    assert _widest_rows([unpublished, unpublished], sub) is RowSelection.NONE


@pytest.mark.asyncio
@pytest.mark.parametrize(("mqtt_rate", "foxglove_rate"), [(10.0, 10.0), (10.0, 0.0), (0.0, 10.0)])
async def test_samples_both_outlets_choose_are_encoded_once_and_sent_as_the_same_bytes(
    tmp_path: Path, mqtt_rate: float, foxglove_rate: float
) -> None:
    """MQTT and Foxglove at the same cap: Foxglove logs MQTT's payload bytes, encodes nothing.

    At other caps Foxglove chooses its own rows, with the same wall clock: the samples both
    send are the same bytes (Foxglove's behind its ``header.stamp``), and a row MQTT has just
    encoded is not encoded again (MQTT at rate 0 encodes each batch whole; Foxglove at 10 Hz
    takes its newest row from it). What
    Foxglove logged is read back from the SDK's own MCAP sink on the sink's context.
    """
    out = io.BytesIO()
    generate_flight_log(out, duration_s=10.0, seed=5)
    datagrams = recorded_stream(out.getvalue())
    mqtt_policy = PublishPolicy(vehicle_id="t", default_rate_hz=mqtt_rate)
    mqtt_sink = MqttSink(
        urls=("mqtt://127.0.0.1:1",), client_id="test", protocol="5", outbox_size=1_000_000
    )
    view = foxglove_view(FoxgloveSettings(enabled=True, default_rate_hz=foxglove_rate))
    assert view is not None
    recording = foxglove.open_mcap(tmp_path / "view.mcap", context=view._context)
    pipeline = pipeline_on_files(
        UlgFileSink(tmp_path / "logs", min_free_mb=0),
        publisher=Publisher(mqtt_policy, mqtt_sink),
        foxglove=view,
    )
    now = 0.0
    try:
        pipeline.attach(lambda _data: None, 0.0, restored=False)
        pipeline.start(0.0)
        for number, datagram in enumerate(datagrams, 1):
            now = number / 2100
            pipeline.receive(datagram, now)
            if number % 210 == 0:
                pipeline.live.drain()
                pipeline.timer(now)
        pipeline.abandon(now)  # the log ends: the rest is decoded and sent
    finally:
        await pipeline.files.aclose()
        await asyncio.sleep(0)
        recording.close()
        view.stop()

    mqtt_samples = [
        m
        for m in mqtt_sink.outbox._samples
        if m.content_type == JSON_CONTENT_TYPE and "/json/" in m.topic
    ]
    assert len(mqtt_samples) > 50
    with (tmp_path / "view.mcap").open("rb") as stream:
        logged = [
            (channel.topic, message.data, message.log_time)
            for _, channel, message in make_reader(stream).iter_messages()
            if channel.topic.startswith("/")
            and channel.topic not in {"/rosout", "/ulogstream/status"}
        ]
    for _, data, log_time in logged:
        sec, nsec = re.match(
            rb'\{"header":\{"stamp":\{"sec":(\d+),"nsec":(\d+)\}\},', data
        ).groups()  # type: ignore[union-attr]
        assert int(sec) * 1_000_000_000 + int(nsec) == log_time
        assert log_time == round(json_sample_time(mqtt_bytes(data)) * 1e9)
    logged_payloads = Counter(mqtt_bytes(data) for _, data, _ in logged)
    mqtt_payloads = Counter(m.payload for m in mqtt_samples)
    own = view.policy
    if foxglove_rate == mqtt_rate:
        assert own.published_samples == 0  # nothing chosen or encoded twice
        assert logged_payloads == mqtt_payloads
    elif foxglove_rate == 0.0:
        assert own.published_samples == len(logged) > len(mqtt_samples)
        assert not mqtt_payloads - logged_payloads  # the same t: one wall-clock anchor
    else:
        assert own.published_samples == len(logged) < len(mqtt_samples)
        assert not logged_payloads - mqtt_payloads
        # the rows chosen as a batch arrives come from MQTT's encoding; held ones are encoded
        assert len(logged) / 2 < own.reused_samples <= len(logged)
