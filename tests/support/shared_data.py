"""The real sample logs in ../shared/data/ulg, or a skip with the reason when they are absent."""

from __future__ import annotations

from pathlib import Path

import pytest

SHARED_ULG_DIR = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "ulg"
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
