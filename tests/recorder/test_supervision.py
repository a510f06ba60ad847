"""No single fault stops the recorder: side tasks restart, status lists stay bounded."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

import pytest

from ulogstream.adapters.file_sink import FinishedLog
from ulogstream.config.sections import LinkSettings, RecordingSettings, Settings
from ulogstream.recorder import recorder as daemon
from ulogstream.recorder.status import FINISHED_LOGS_KEPT, RecorderStatus
from ulogstream.recorder.wiring import build_recorder

if TYPE_CHECKING:
    from pathlib import Path


def test_finished_logs_in_the_status_are_bounded(tmp_path: Path) -> None:
    status = RecorderStatus()
    for number in range(FINISHED_LOGS_KEPT + 5):
        status.finished.append(FinishedLog(tmp_path / f"{number}.ulg", 1, 0, None))
    assert len(status.finished) == FINISHED_LOGS_KEPT
    assert status.finished[-1].path.name == f"{FINISHED_LOGS_KEPT + 4}.ulg"


@pytest.mark.asyncio
async def test_a_failing_side_task_is_logged_with_its_cause_and_restarted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(daemon, "RESTART_BACKOFF", (0.01,))
    recorder = build_recorder(
        Settings(
            link=LinkSettings(connection="udpin:127.0.0.1:14550"),
            recording=RecordingSettings(out_dir=tmp_path, min_free_mb=0),
        )
    )
    runs = 0

    async def fails_twice() -> None:
        nonlocal runs
        runs += 1
        if runs <= 2:
            msg = f"broken {runs}"
            raise ValueError(msg)

    with caplog.at_level(logging.ERROR, logger="ulogstream"):
        await asyncio.wait_for(recorder._supervised("the widget", fails_twice), 5)
    assert runs == 3
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "the widget stopped: ValueError: broken 1; restarting it in 0 s",
        "the widget stopped: ValueError: broken 2; restarting it in 0 s",
    ]


def test_reorder_window_settings_reach_each_vehicles_session(tmp_path: Path) -> None:
    recorder = build_recorder(
        Settings(
            link=LinkSettings(
                connection="udpin:127.0.0.1:14550", reorder_packets=0, reorder_window_s=0.5
            ),
            recording=RecordingSettings(out_dir=tmp_path, min_free_mb=0),
        )
    )
    session = recorder.parts.session(3)
    assert session.autopilot_system == 3
    reassembler = session._reassembler
    assert (reassembler._reorder_packets, reassembler._reorder_time) == (0, 0.5)
