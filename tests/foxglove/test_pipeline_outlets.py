"""The pipeline's live outlets (MQTT, Foxglove) start each log before any of it is decoded."""

from __future__ import annotations

import asyncio
import io
from typing import TYPE_CHECKING

import numpy as np
import pytest
from bench.bench_receive import recorded_stream
from waiting import eventually

from ulogstream.adapters.file_sink import UlgFileSink
from ulogstream.adapters.log_files import LogFiles
from ulogstream.adapters.mqtt_sink import MqttSink, MqttSinkSettings
from ulogstream.daemon import Pipeline, Publisher, RecorderStatus, _widest_rows
from ulogstream.mavlink_codec import MavlinkCodec
from ulogstream.publish import PublishPolicy, PublishSettings
from ulogstream.sim.flightlog import generate_flight_log
from ulogstream.stream.session import LoggingSession
from ulogstream.ulog.events import Subscription
from ulogstream.ulog.parser import RowSelection

if TYPE_CHECKING:
    from pathlib import Path


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
    policy = PublishPolicy(PublishSettings(vehicle_id="t", rate_hz=0))
    publisher = Publisher(
        policy, MqttSink(MqttSinkSettings(url="mqtt://127.0.0.1:1", max_outbox=1_000_000))
    )
    pipelines: list[Pipeline] = []
    files = LogFiles(
        UlgFileSink(tmp_path, min_free_mb=0),
        lambda event: pipelines[0].file_event(event),  # noqa: PLW0108 (made below)
    )
    status = RecorderStatus()
    pipeline = Pipeline(
        codec=MavlinkCodec(system_id=254, component_id=155),
        session=LoggingSession(target_system=1),
        files=files,
        status=status,
        publisher=publisher,
    )
    pipelines.append(pipeline)
    files.start()
    try:
        pipeline.attach(lambda _data: None, 0.0, restored=False)
        pipeline.start(0.0)
        half = len(datagrams) // 2
        for number, datagram in enumerate(datagrams[:half]):
            pipeline.receive(datagram, number / 2100)
        pipeline._drain_backlog()  # decoded before the worker's LogOpened is handled
        await eventually(lambda: status.log_path is not None, what="the log file opened")
        for number, datagram in enumerate(datagrams[half:], half):
            pipeline.receive(datagram, number / 2100)
        pipeline._drain_backlog()
        pipeline.refresh_status()
        rows = sum(stats.samples for stats in status.topics.values())
        assert rows > 0
        assert status.rows_decoded == rows  # rate 0: every row is decoded
        assert policy.published_samples == rows
    finally:
        pipeline.abandon(0.0)
        await files.aclose()
        await asyncio.sleep(0)


def test_one_decoding_serves_both_outlets_with_the_rows_the_wider_needs() -> None:
    sub = Subscription(msg_id=1, multi_id=0, name="x", dtype=np.dtype([("timestamp", "<u8")]))
    capped = PublishPolicy(PublishSettings(vehicle_id="a", rate_hz=10)).rows_for
    every = PublishPolicy(PublishSettings(vehicle_id="b", rate_hz=0)).rows_for
    unpublished = PublishPolicy(PublishSettings(vehicle_id="c", exclude=("x",))).rows_for
    assert capped(sub) is RowSelection.NEWEST
    assert _widest_rows([capped, every], sub) is RowSelection.ALL
    assert _widest_rows([unpublished, capped], sub) is RowSelection.NEWEST
    assert _widest_rows([unpublished, unpublished], sub) is RowSelection.NONE
