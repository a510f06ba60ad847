"""The status line says only what it knows."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ulogstream.config.sections import LinkSettings, RecordingSettings, Settings
from ulogstream.recorder.wiring import build_recorder

if TYPE_CHECKING:
    from pathlib import Path


def test_rate_is_a_dash_until_a_second_was_measured_and_counts_take_their_plural(
    tmp_path: Path,
) -> None:
    recorder = build_recorder(
        Settings(
            link=LinkSettings(connection="udpin:127.0.0.1:14550"),
            recording=RecordingSettings(out_dir=tmp_path, min_free_mb=0),
        )
    )
    assert " - KB/s," in recorder.status_text()
    status = recorder.status
    status.bytes_per_s, status.gaps, status.dropouts = 2500.0, 1, 2
    text = recorder.status_text()
    assert " 2 KB/s," in text
    assert "1 gap (" in text
    assert "2 dropouts" in text
