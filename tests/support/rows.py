"""A log's rows as pyulog reads them, to compare two logs row by row."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from pyulog import ULog

if TYPE_CHECKING:
    from pathlib import Path


def rows(path: Path) -> dict[tuple[str, int], dict[int, bytes]]:
    """Every row of every topic instance, by timestamp (the row's bytes, as pyulog reads it)."""
    out: dict[tuple[str, int], dict[int, bytes]] = {}
    for data in ULog(str(path)).data_list:
        names = sorted(data.data)
        table = np.rec.fromarrays(  # type: ignore[call-overload]
            [data.data[name] for name in names], names=names
        )
        stamps = data.data["timestamp"]
        out[data.name, data.multi_id] = {
            int(stamp): table[index].tobytes() for index, stamp in enumerate(stamps)
        }
    return out


def missing_and_differing(truth: Path, log: Path) -> tuple[int, int]:
    """Rows of ``truth`` that ``log`` lacks, and rows both hold with other bytes."""
    expected, got = rows(truth), rows(log)
    missing = differing = 0
    for key, table in expected.items():
        ours = got.get(key, {})
        for stamp, row in table.items():
            if stamp not in ours:
                missing += 1
            elif ours[stamp] != row:
                differing += 1
    return missing, differing
