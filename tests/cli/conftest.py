"""Fixtures of the command line tests: generated flight logs, written once per session."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from ulogstream.sim.flightlog import generate_flight_log

if TYPE_CHECKING:
    from pathlib import Path


@pytest.fixture(name="flight_log", scope="session")
def fixture_flight_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 20 s generated flight (every feature of the generator, about 1 MB)."""
    path = tmp_path_factory.mktemp("flight") / "flight.ulg"
    generate_flight_log(path, duration_s=20.0, seed=7)
    return path


@pytest.fixture(name="minute_log", scope="session")
def fixture_minute_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default 60 s flight with seed 0, as ``ulogstream demo`` streams it."""
    path = tmp_path_factory.mktemp("minute") / "minute.ulg"
    generate_flight_log(path)
    return path
