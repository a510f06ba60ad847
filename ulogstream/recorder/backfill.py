"""Completing a recording from the vehicle's SD log over MAVLink (``download.backfill``'s shell).

:func:`backfill_recording` plans the recording's gaps, picks the SD log of the same flight
(the entry nearest in time whose bytes hold the recording's first data), drives the
:func:`~ulogstream.download.backfill.backfill` generator with ranges fetched by a
:class:`~ulogstream.recorder.download.LogDownloader` (cached in blocks, within a byte budget),
and replaces the recording with the completed log atomically.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Final

import msgspec

from ulogstream.adapters.download_file import write_patched
from ulogstream.download.backfill import BackfillError, BackfillResult, backfill, plan_backfill
from ulogstream.upload.info import checksum_and_flight

if TYPE_CHECKING:
    from collections.abc import Generator
    from pathlib import Path

    from ulogstream.download.backfill import Fetch
    from ulogstream.download.packets import LogEntry
    from ulogstream.recorder.download import LogDownloader

BLOCK: Final = 2 << 10
"""SD bytes are fetched and cached in blocks of this size."""

READ_AHEAD_ROUND_TRIPS: Final = 2
"""Bytes read ahead of a fetch: this many round trips' worth at the measured rate..."""

READ_AHEAD_MAX: Final = 64 << 10
"""... and at most this many: a burst larger than the receive buffers is lost in part."""

CANDIDATES: Final = 3
"""SD logs tried, nearest in time first, before the flight counts as not on the card."""


class BackfillOutcome(msgspec.Struct):
    """What a backfill did to one recording.

    Attributes:
        entry: The SD log used (None: none held the recording's data).
        result: The core's result (patches, filled, unfilled).
        fetched: Bytes read over the link.
        budget_reached: The byte budget ran out (some gaps were not tried).
        size: The recording's size afterwards.
    """

    entry: LogEntry | None = None
    result: BackfillResult = msgspec.field(default_factory=BackfillResult)
    fetched: int = 0
    budget_reached: bool = False
    size: int = 0


class SdLogReader:
    """Ranges of one SD log, fetched in blocks and kept, within ``budget`` bytes over the link."""

    def __init__(self, downloader: LogDownloader, entry: LogEntry, budget: int) -> None:
        self._downloader = downloader
        self._entry = entry
        self._budget = budget
        self._blocks: dict[int, bytes] = {}
        self.fetched = 0
        self.budget_reached = False

    async def read(self, start: int, end: int) -> bytes:
        """``[start, end)`` clipped at the log's end; b"" once the budget would be passed."""
        end = min(end, self._entry.size)
        if end <= start:
            return b""
        first, last = start // BLOCK, (end - 1) // BLOCK
        # Read ahead as much as a few round trips carry: on a fast link a request costs far
        # more than the bytes (the next gaps are close by), on a radio nothing is read ahead.
        downloader = self._downloader
        ahead = min(
            READ_AHEAD_MAX, int(downloader.rate * downloader.round_trip_s * READ_AHEAD_ROUND_TRIPS)
        )
        wanted = min(max(last, (end + ahead) // BLOCK), (self._entry.size - 1) // BLOCK)
        missing = [n for n in range(first, wanted + 1) if n not in self._blocks]
        while missing and missing[-1] > last and missing[-1] != missing[0] + len(missing) - 1:
            missing.pop()  # read ahead only as one request, up to the first block held
        needed = sum(1 for n in missing if n <= last) * BLOCK
        if self.fetched + needed > self._budget:
            self.budget_reached = True
            return b""
        while missing and missing[-1] > last and self.fetched + len(missing) * BLOCK > self._budget:
            missing.pop()  # read ahead only within the budget
        run_start = 0
        for index, number in enumerate(missing):
            if index == 0 or number != missing[index - 1] + 1:
                run_start = number
            if index + 1 == len(missing) or missing[index + 1] != number + 1:
                data = await self._downloader.fetch(
                    self._entry, run_start * BLOCK, (number + 1) * BLOCK
                )
                self.fetched += len(data)
                for block in range(run_start, number + 1):
                    offset = (block - run_start) * BLOCK
                    self._blocks[block] = data[offset : offset + BLOCK]
        joined = b"".join(self._blocks[n] for n in range(first, last + 1))
        return joined[start - first * BLOCK : end - first * BLOCK]


async def backfill_recording(
    downloader: LogDownloader,
    path: Path,
    entries: tuple[LogEntry, ...],
    *,
    ended_at: float,
    max_bytes: int,
    fill_start: bool = True,
    fill_end: bool = False,
) -> BackfillOutcome:
    """Complete the recording at ``path`` from the vehicle's SD log of the same flight.

    Args:
        downloader: The link to the vehicle.
        path: The recording (replaced by the completed log when anything was put back).
        entries: The vehicle's logs (its listing).
        ended_at: When the recording ended (UTC seconds): the SD log nearest this is tried
            first (PX4's ``time_utc`` is the SD file's last write).
        max_bytes: Bytes at most read over the link.
        fill_start: Put back what the SD log has before the recording's first data.
        fill_end: Also put back what the SD log has after the recording's end.

    Raises:
        BackfillError: The recording is not a log with data.
        DownloadError: The vehicle stopped answering.
        DownloadFileError: The completed log cannot be written.
    """
    log = await asyncio.to_thread(path.read_bytes)
    try:
        plan = plan_backfill(log)
    except BackfillError as err:
        msg = f"{path}: {err}"
        raise BackfillError(msg) from err
    outcome = BackfillOutcome(size=len(log))
    candidates = sorted((e for e in entries if e.size), key=lambda e: abs(e.time_utc - ended_at))[
        :CANDIDATES
    ]
    for entry in candidates:
        reader = SdLogReader(downloader, entry, max_bytes - outcome.fetched)
        steps = backfill(plan, entry.size, fill_start=fill_start, fill_end=fill_end)
        result = await _drive(steps, reader)
        outcome.fetched += reader.fetched
        outcome.budget_reached = reader.budget_reached
        if result.found:
            outcome.entry, outcome.result = entry, result
            break
    if outcome.result.patches:
        outcome.size = await asyncio.to_thread(write_patched, path, outcome.result.patches)
    return outcome


async def _drive(
    steps: Generator[Fetch, bytes, BackfillResult], reader: SdLogReader
) -> BackfillResult:
    """Run the backfill generator, reading each range it asks for."""
    try:
        fetch = next(steps)
        while True:
            fetch = steps.send(await reader.read(fetch.start, fetch.end))
    except StopIteration as done:
        result: BackfillResult = done.value
        return result


def completeness(path: Path) -> str:
    """How much of its flight the log at ``path`` holds: its time less the dropouts left.

    Returns:
        ``the flight's log is 99.2 % complete, 3.1 s still missing``; "" when it cannot be
        read or has no time span (blocking: it reads the file).
    """
    try:
        _, flight = checksum_and_flight(path)
    except OSError:
        return ""
    duration, missing = (flight or {}).get("duration_s"), (flight or {}).get("dropout_s")
    if (
        not isinstance(duration, float | int)
        or not isinstance(missing, float | int)
        or not duration
    ):
        return ""
    share = max(0.0, 1.0 - missing / duration)
    left = f", {missing:.1f} s still missing" if missing else ""
    return f"the flight's log is {share:.1%} complete{left}"
