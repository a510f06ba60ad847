"""Generated logs and their announcements for the S3 upload tests (moto's and s3rver's)."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

import pytest

from ulogstream.sim.flightlog import generate_flight_log
from ulogstream.upload.info import FinishedLogInfo

if TYPE_CHECKING:
    from pathlib import Path

PART_MB = 5
"""The part size of the tests' uploads: the big log goes up in parts."""
DATE = "2026-11-25"
"""The date folder of the generated logs."""


@pytest.fixture(name="big_log", scope="module")
def fixture_big_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A generated 10-minute flight (about 30 MB: six 5 MiB parts and a rest)."""
    path = tmp_path_factory.mktemp("big") / DATE / "10_00_00.ulg"
    path.parent.mkdir()
    generate_flight_log(path, duration_s=600.0, seed=7)
    return path


def small_log(out: Path) -> Path:
    """A generated 10-second flight where the recorder puts one."""
    path = out / DATE / "12_34_56.ulg"
    path.parent.mkdir(parents=True, exist_ok=True)
    generate_flight_log(path, duration_s=10.0, seed=3)
    return path


def info_of(path: Path, *, vehicle: str = "uav-1", sha256: str | None = None) -> FinishedLogInfo:
    """What the shipper announces of ``path`` (its SHA-256 read here unless given)."""
    data = path.read_bytes()
    return FinishedLogInfo(
        path=path,
        size=len(data),
        sha256=hashlib.sha256(data).hexdigest() if sha256 is None else sha256,
        sys_uuid=None,
        start_time=None,
        date=DATE,
        vehicle=vehicle,
        complete=True,
        how="complete",
    )
