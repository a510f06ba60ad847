"""A few seconds of tests/bench/bench_soak.py: many logs through the daemon with MQTT on.

The soak itself streams an hour of USB-rate data; this smoke run checks that its machinery and
the daemon's invariants hold on a short run: every log gives one byte-identical file, no ERROR
line, a clean exit, and no memory growth worth the name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from bench.bench_soak import soak

if TYPE_CHECKING:
    from pathlib import Path

    from support.broker import Broker

MAX_RSS_GROWTH_KB = 10 * 1024


@pytest.mark.broker
@pytest.mark.asyncio
async def test_soak_smoke(tmp_path: Path, mosquitto: Broker) -> None:
    result = await soak(
        tmp_path,
        mqtt_port=mosquitto.port,
        packets=8000,
        time_limit_s=40.0,
        flight_s=10.0,
        rate_factor=2.0,
        progress=False,
    )
    assert result.exit_code == 0
    assert result.packets >= 8000
    assert result.packets_lost == 0
    assert result.files_checked >= 3
    assert result.logs_finished == result.files_checked
    # The last log may be stopped before its first data message: no file is kept for it.
    assert result.logs_discarded <= 1
    assert result.logs_finished + result.logs_discarded == result.logs_started
    assert result.files_identical == result.files_checked
    assert result.files_invalid == []
    assert result.error_lines == []
    start = result.rss_kb[0][1]
    assert max(kb for _, kb in result.rss_kb) - start < MAX_RSS_GROWTH_KB
