"""Without a terminal, the recorder logs its counters as one key=value line now and then."""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING

import pytest
from support.end_to_end import flight_log, record, recorder_settings

from ulogstream.cli.demo import free_udp_port
from ulogstream.recorder import recorder as daemon
from ulogstream.recorder.wiring import build_recorder
from ulogstream.sim.vehicle import USB_LINK_RATE, VehicleConfig

if TYPE_CHECKING:
    from pathlib import Path


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_counters_are_logged_as_key_value_lines_for_the_journal(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(daemon, "STATUS_INTERVAL_S", 0.02)
    monkeypatch.setattr(daemon, "STATUS_LOG_INTERVAL_S", 0.05)
    caplog.set_level(logging.INFO, logger="ulogstream")
    log = flight_log(10.0)
    port = free_udp_port()
    recorder = build_recorder(recorder_settings(f"udpin:127.0.0.1:{port}", tmp_path))
    usb = VehicleConfig(link_rate=USB_LINK_RATE, speed=None)  # ~1 s: several status periods
    session = await record(log, recorder, f"udpout:127.0.0.1:{port}", config=usb)
    assert session.exit_code == 0
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("status ")]
    assert lines, "no status line was logged"
    fields = dict(pair.split("=", 1) for pair in lines[-1].split()[1:])
    assert {"state", "packets", "gaps", "dropouts", "logs", "mqtt_dropped"} <= fields.keys()
    assert json.loads(fields["packets"]) > 0
    assert json.loads(fields["log_bytes"]) >= 0
