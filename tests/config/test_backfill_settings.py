"""[backfill]: on by default for flights recorded while armed, bounded, off on request."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from ulogstream.config.loader import load_settings
from ulogstream.errors import ConfigError
from ulogstream.recorder.wiring import recorder_parts

if TYPE_CHECKING:
    from pathlib import Path


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({}, None),  # recording always: no flights to complete
        ({"recording.mode": "while_armed"}, 200_000_000),
        ({"recording.mode": "while_armed", "backfill.max_mb": 5}, 5_000_000),
        ({"recording.mode": "while_armed", "backfill.enabled": False}, None),
    ],
)
def test_backfill_runs_for_flights_recorded_while_armed(
    tmp_path: Path, overrides: dict[str, object], expected: int | None
) -> None:
    settings = load_settings(None, {"recording.out_dir": tmp_path, **overrides})
    assert recorder_parts(settings).backfill_max_bytes == expected


def test_a_budget_of_nothing_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "u.toml"
    path.write_text("[backfill]\nmax_mb = 0\n")
    with pytest.raises(ConfigError, match=r"u\.toml: backfill\.max_mb must be > 0 MB, not 0"):
        load_settings(path)
