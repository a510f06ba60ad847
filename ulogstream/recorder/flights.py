"""A flight's recordings, held until it is over, completed from the SD log, then handed on.

With ``recording.mode = "while_armed"`` and backfill on, every log the recorder finishes during a
flight waits here instead of going to the announcement and the upload at once. When the flight
is over (the vehicle disarmed and its stream stopped), :class:`FlightBackfill` completes it on
the recorder's own link while the recorder goes on: the flight's recordings merged into the
first (a stream PX4 restarted after a blackout), then its start and every gap put back from the
vehicle's SD log (:func:`~ulogstream.recorder.backfill.backfill_recording`, within ``max_mb``),
the file replaced atomically, the logbook told its new size. Only then is the log handed on
(``meta/log_finished``, the upload). Never while the vehicle is armed: arming again cancels a
backfill under way, and the recordings go on as they are (``ulogstream backfill`` can complete
them later).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from functools import partial
from typing import TYPE_CHECKING

import msgspec

from ulogstream.adapters.download_file import merge_into
from ulogstream.adapters.logbook import Logbook
from ulogstream.download.backfill import merge_recordings
from ulogstream.errors import UlogstreamError
from ulogstream.recorder.backfill import backfill_recording, completeness
from ulogstream.recorder.download import LogDownloader

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from ulogstream.adapters.file_sink import FinishedLog
    from ulogstream.mavlink_codec import MavlinkCodec
    from ulogstream.recorder.backfill import BackfillOutcome
    from ulogstream.recorder.status import RecorderStatus

logger = logging.getLogger("ulogstream")


class HeldLog(msgspec.Struct, frozen=True):
    """A finished recording of a flight, waiting for the flight's end."""

    finished: FinishedLog
    how: str


class FlightBackfill:
    """Holds each vehicle's flight recordings and completes them when the flight is over.

    Args:
        out_dir: The recordings' directory (its logbook is told of merged and completed files).
        max_bytes: Bytes a flight's backfill may read over the link.
        link: The link's name, for messages.
        hand_on: Called with each vehicle's completed log (system id, log, how it ended): the
            announcement and the upload.
        sender: The send function toward a vehicle (by system id) on the open link, or None
            while no link is open.
        codec: Makes our side's MAVLink codec.
        uploads: Logs wait for an upload (the logbook keeps rotation off them until then).
    """

    def __init__(
        self,
        *,
        out_dir: Path,
        max_bytes: int,
        link: str,
        hand_on: Callable[[int, FinishedLog, str], None],
        sender: Callable[[int], Callable[[bytes], None] | None],
        codec: Callable[[], MavlinkCodec],
        uploads: bool,
    ) -> None:
        self._out_dir = out_dir
        self._max_bytes = max_bytes
        self._link = link
        self._hand_on = hand_on
        self._sender = sender
        self._codec = codec
        self._uploads = uploads
        self._held: dict[int, list[HeldLog]] = {}
        self._paused: dict[int, list[list[HeldLog]]] = {}
        """Per vehicle: flights whose backfill its arming paused, completed after its next
        flight (never while armed)."""
        self._rearmed: set[int] = set()
        self._over: asyncio.Queue[int] = asyncio.Queue()
        self._armed: dict[int, bool] = {}
        self._downloader: LogDownloader | None = None
        self._task: asyncio.Task[None] | None = None
        self._busy = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._completing = -1
        self.completed = 0
        """Flights completed from the SD log."""
        self._counts: dict[int, tuple[int, int, int]] = {}
        """Per vehicle: flights backfilled, rows put back, bytes read (finished backfills)."""
        self.notes: list[tuple[Path, str]] = []
        """Each flight's log after its backfill, and what the backfill did."""

    @property
    def listening(self) -> bool:
        """Whether a backfill runs: the recorder hands it what it reads (:meth:`feed`)."""
        return self._downloader is not None

    def count_into(self, system_id: int, status: RecorderStatus) -> None:
        """Copy ``system_id``'s backfill counters into its status (MQTT, the journal)."""
        flights, rows, read = self._counts.get(system_id, (0, 0, 0))
        downloader = self._downloader
        if downloader is not None and self._completing == system_id:
            read += downloader.fetched
        status.flights_backfilled = flights
        status.rows_backfilled = rows
        status.backfill_bytes_read = read

    def progress(self, system_id: int) -> str | None:
        """The status line's state while ``system_id``'s flight is backfilled (else None)."""
        downloader = self._downloader
        if downloader is None or self._completing != system_id:
            return None
        return f"backfilling from the SD log ({downloader.fetched / 1e6:.2f} MB read)"

    def feed(self, data: bytes) -> bool:
        """A chunk from the link, while :attr:`listening`.

        Returns:
            True when it was one LOG_DATA frame: the recorder has nothing more to do with it.
        """
        downloader = self._downloader
        return downloader is not None and downloader.feed(data)

    def hold(self, system_id: int, finished: FinishedLog, how: str, *, flight_over: bool) -> None:
        """A recording of ``system_id``'s flight is finished; the flight may be over with it."""
        self._held.setdefault(system_id, []).append(HeldLog(finished, how))
        if flight_over:
            self._busy += 1
            self._idle.clear()
            self._over.put_nowait(system_id)

    def set_armed(self, system_id: int, *, armed: bool) -> None:
        """The vehicle's HEARTBEAT: arming again pauses its backfill (never while armed)."""
        was = self._armed.get(system_id, False)
        self._armed[system_id] = armed
        if armed and not was and self._task is not None and self._completing == system_id:
            logger.info(
                "vehicle sysid %d armed again: its backfill pauses until the next flight is over",
                system_id,
            )
            self._rearmed.add(system_id)
            self._task.cancel()

    async def run(self) -> None:
        """Complete each flight that is over, one at a time, until cancelled."""
        while True:
            system_id = await self._over.get()
            self._completing = system_id
            self._task = asyncio.create_task(self._complete(system_id))
            try:
                await asyncio.shield(self._task)
            except asyncio.CancelledError:
                if not self._task.cancelled():  # run() itself was cancelled: stop the backfill
                    self._task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await self._task
                    raise
            finally:
                self._task = None
                self._busy -= 1
                if not self._busy:
                    self._idle.set()

    async def drain(self) -> None:
        """Wait until no flight waits for its backfill (the recorder stops after)."""
        await self._idle.wait()

    def release(self) -> None:
        """Hand on every recording still held or paused as it is (the recorder stops)."""
        for system_id, flights in self._paused.items():
            for held in flights:
                self._hand_on_as_is(system_id, held)
        self._paused.clear()
        for system_id, held in self._held.items():
            for log in held:
                self._hand_on(system_id, log.finished, log.how)
        self._held.clear()

    async def _complete(self, system_id: int) -> None:
        """Complete the flights of ``system_id`` that are over: any paused one, then the last."""
        flights = self._paused.pop(system_id, [])
        if held := self._held.pop(system_id, []):
            flights.append(held)
        while flights:
            held = flights.pop(0)
            if self._armed.get(system_id, False):  # never while armed: after the next flight
                logger.info(
                    "vehicle sysid %d is armed: the backfill of %s waits for the next flight's end",
                    system_id,
                    held[0].finished.path.name,
                )
                self._paused.setdefault(system_id, []).extend([held, *flights])
                return
            try:
                await self._complete_flight(system_id, held)
            except asyncio.CancelledError:
                if system_id not in self._rearmed:
                    self._hand_on_as_is(system_id, held)  # stopping: what is on disk goes on
                    for rest in flights:
                        self._hand_on_as_is(system_id, rest)
                    raise
                self._rearmed.discard(system_id)
                self._paused.setdefault(system_id, []).extend([_on_disk(held), *flights])
                raise

    async def _complete_flight(self, system_id: int, held: list[HeldLog]) -> None:
        first = held[0]
        how = held[-1].how  # how the flight's last recording ended
        try:
            size, note = await self._backfill(system_id, [log.finished.path for log in held])
        except (UlogstreamError, OSError) as err:
            logger.warning(
                "backfill of %s failed: %s; the recording is kept as it is",
                first.finished.path.name,
                err,
            )
            self._hand_on_as_is(system_id, held)
            return
        self._hand_on(
            system_id, msgspec.structs.replace(first.finished, size=size), f"{how}; {note}"
        )

    def _hand_on_all(self, system_id: int, held: list[HeldLog]) -> None:
        for log in held:
            self._hand_on(system_id, log.finished, log.how)

    def _hand_on_as_is(self, system_id: int, held: list[HeldLog]) -> None:
        """A backfill cut short (stopping, failed): what is on disk goes on, merged or not."""
        self._hand_on_all(system_id, _on_disk(held))

    async def _backfill(self, system_id: int, paths: list[Path]) -> tuple[int, str]:
        """Merge and backfill ``paths``; the first one's new size and what was done."""
        logbook = Logbook(self._out_dir)
        first = paths[0]
        if len(paths) > 1:
            merged = await asyncio.to_thread(
                lambda: merge_recordings([path.read_bytes() for path in paths])
            )
            await asyncio.to_thread(partial(merge_into, first, paths[1:], merged, remove=True))
            for path in paths[1:]:
                await asyncio.to_thread(logbook.gone, path)
            logger.info("%s: the flight's %d recordings merged into it", first.name, len(paths))
        send = self._sender(system_id)
        if send is None:
            msg = "no link is open"
            raise UlogstreamError(msg)
        downloader = LogDownloader(
            codec=self._codec(), send=send, link=self._link, target=system_id
        )
        self._downloader = downloader
        started = time.monotonic()
        logger.info("backfilling %s from the vehicle's SD log", first.name)
        try:
            entries = await downloader.list_logs()
            outcome = await backfill_recording(
                downloader, first, entries, ended_at=time.time(), max_bytes=self._max_bytes
            )
        finally:
            self._downloader = None
        size = outcome.size
        await asyncio.to_thread(
            logbook.finished,
            first.with_name(first.name + ".part"),
            first,
            size,
            upload_pending=self._uploads,
        )
        note = _note(outcome)
        if outcome.entry is not None:
            complete = await asyncio.to_thread(completeness, first)
            note += f"; {complete}" if complete else ""
        self.notes.append((first, note))
        logger.info("%s: %s (%.1f s)", first.name, note, time.monotonic() - started)
        flights, rows, read = self._counts.get(system_id, (0, 0, 0))
        found = outcome.entry is not None
        self._counts[system_id] = (
            flights + found,
            rows + outcome.result.rows_backfilled,
            read + outcome.fetched,
        )
        if found:
            self.completed += 1
        return size, note


def _note(outcome: BackfillOutcome) -> str:
    """What the backfill did, for the log line and the announcement."""
    result = outcome.result
    if outcome.entry is None:
        return "not backfilled: the flight is not on the vehicle's SD card"
    parts = []
    if result.start_bytes:
        parts.append("its start")
    if result.gaps_filled:
        parts.append(f"{result.gaps_filled} gap(s)")
    done = (
        f"backfilled {' and '.join(parts)} from SD log {outcome.entry.id}"
        if parts
        else (f"nothing to backfill from SD log {outcome.entry.id}")
    )
    done += f" ({result.rows_streamed} rows streamed, {result.rows_backfilled} backfilled)"
    if result.unfilled:
        done += f"; {len(result.unfilled)} part(s) not on the SD log"
    if outcome.budget_reached:
        done += "; the backfill budget ran out"
    return done


def _on_disk(held: list[HeldLog]) -> list[HeldLog]:
    """A flight's recordings as they are on disk: merged into the first once the merge ran."""
    if all(log.finished.path.exists() for log in held):
        return held
    first = held[0].finished
    size = first.path.stat().st_size
    return [HeldLog(msgspec.structs.replace(first, size=size), held[-1].how)]
