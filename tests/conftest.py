"""Fixtures shared by every test area: the real sample logs in ../shared/data/ulg."""

from __future__ import annotations

from pathlib import Path

import pytest

SHARED_ULG_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "ulg"
"""Real public ULog files beside the checkout (absent in a user's clone)."""

SHARED_ULG_FILES = sorted(SHARED_ULG_DIR.glob("*.ulg")) if SHARED_ULG_DIR.is_dir() else []


def shared_ulg(name: str) -> Path:
    """The path of one sample log, skipping the test with a reason when ../shared is absent."""
    path = SHARED_ULG_DIR / name
    if not path.is_file():
        pytest.skip(
            f"sample log {path} is absent (../shared/data/ulg is only beside a CI checkout)"
        )
    return path


@pytest.fixture(name="shared_ulg_files")
def fixture_shared_ulg_files() -> list[Path]:
    """Every sample log, or a skip with a reason when ../shared/data/ulg is absent."""
    if not SHARED_ULG_FILES:
        pytest.skip(f"{SHARED_ULG_DIR} is absent: the sample logs live beside a CI checkout only")
    return SHARED_ULG_FILES
