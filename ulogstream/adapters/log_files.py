"""The file lifecycle of a recording, off the event loop: one worker thread does every disk call.

The loop side (:class:`LogFiles`) never touches the file system: it collects written bytes in
memory and hands them, with start and finish requests, to a worker thread through a queue. The
worker runs :class:`~ulogstream.adapters.file_sink.UlgFileSink` (open, rotation scan and deletes,
``os.write``, ``statvfs``, ``fsync``, rename) one request after another, so the next log can
start the moment the previous one is handed over: its file is finished behind it, in order.
What happened comes back to the loop as :data:`FileEvent` values through ``on_event``.

A fault ends only the log it hit: a write or open that fails (read-only, EIO, permission) ends
that log with one :class:`LogFailed` (its ``.ulg.part`` stays on disk for start-up recovery),
a finalise that fails leaves the ``.part`` the same way (:class:`FinishFailed`), and the next
log tries the disk again. Memory is bounded: bytes the worker has not written yet are capped at
``max_backlog``; beyond it the disk is too slow and new bytes of the log are dropped, counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
from typing import TYPE_CHECKING

import msgspec

from ulogstream.adapters.file_sink import DiscardedLog, DiskFullError, FinishedLog

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from ulogstream.adapters.file_sink import UlgFileSink

logger = logging.getLogger("ulogstream")

DEFAULT_FLUSH_INTERVAL_S = 1.0
"""Longest time written bytes stay in the loop's memory before the worker gets them."""

DEFAULT_MAX_PENDING = 1 << 20
"""Bytes collected on the loop that are handed to the worker at once, not at the next flush."""

DEFAULT_MAX_BACKLOG = 64 << 20
"""Bytes handed to the worker and not yet written (a stalled disk) before new bytes are dropped:
about two minutes at the USB streaming ceiling."""


class LogOpened(msgspec.Struct, frozen=True):
    """The worker created the log's ``.ulg.part``; ``deleted`` are logs rotation removed."""

    log_id: int
    path: Path
    deleted: tuple[Path, ...]


class LogFinished(msgspec.Struct, frozen=True):
    """The log was fsynced and renamed to ``.ulg``; ``how`` is what the caller said."""

    log_id: int
    finished: FinishedLog
    how: str


class LogDiscarded(msgspec.Struct, frozen=True):
    """The log ended without one data message: its file was removed (no flight)."""

    log_id: int
    discarded: DiscardedLog


class LogFailed(msgspec.Struct, frozen=True):
    """The disk failed this log (open or write); nothing more of it is written.

    ``path`` is the ``.ulg.part`` kept for start-up recovery, or None when none was created.
    """

    log_id: int
    path: Path | None
    error: str


class DiskFull(msgspec.Struct, frozen=True):
    """The free-space guard stopped the log on a message boundary."""

    log_id: int
    error: DiskFullError


class FinishFailed(msgspec.Struct, frozen=True):
    """fsync or rename of a finished log failed; its ``.ulg.part`` stays for recovery."""

    log_id: int
    path: Path
    error: str


FileEvent = LogOpened | LogFinished | LogDiscarded | LogFailed | DiskFull | FinishFailed
"""Everything the worker reports."""


class _Start(msgspec.Struct, frozen=True):
    log_id: int
    continues: bool


class _Write(msgspec.Struct, frozen=True):
    log_id: int
    chunks: list[bytes]
    size: int


class _Finish(msgspec.Struct, frozen=True):
    log_id: int
    how: str


_Request = _Start | _Write | _Finish | None
"""None ends the worker."""


class LogFiles:
    """The loop's handle on the recording thread (see the module docstring).

    Args:
        sink: The disk side, used only by the worker thread.
        on_event: Called on the event loop with each :data:`FileEvent`.
        flush_interval_s: Longest time bytes wait in memory before the worker gets them.
        max_pending: Bytes in memory that are handed over at once.
        max_backlog: Bytes handed over and not yet written beyond which new bytes are dropped.
    """

    def __init__(
        self,
        sink: UlgFileSink,
        on_event: Callable[[FileEvent], None],
        *,
        flush_interval_s: float = DEFAULT_FLUSH_INTERVAL_S,
        max_pending: int = DEFAULT_MAX_PENDING,
        max_backlog: int = DEFAULT_MAX_BACKLOG,
    ) -> None:
        self.sink = sink
        self._on_event = on_event
        self._flush_interval_s = flush_interval_s
        self._max_pending = max_pending
        self._max_backlog = max_backlog
        self._requests: queue.SimpleQueue[_Request] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._backlog = 0
        self._log_id = 0
        self._open = False
        self._pending: list[bytes] = []
        self._pending_size = 0
        self._flush_deadline = 0.0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self.log_bytes = 0
        """Bytes of the current log taken (written or on their way to the disk)."""
        self.bytes_dropped = 0
        """Bytes dropped because the worker fell more than ``max_backlog`` behind."""
        self.bytes_unwritten = 0
        """Bytes written while no file was open (the disk was full): not on disk."""

    @property
    def log_open(self) -> bool:
        """True between :meth:`start_log` and :meth:`finish_log`."""
        return self._open

    @property
    def backlog(self) -> int:
        """Bytes handed to the worker and not yet written, plus those still in memory here."""
        with self._lock:
            return self._backlog + self._pending_size

    def start(self) -> None:
        """Start the worker thread; call on the event loop that will receive the events."""
        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._work, name="ulogstream-files", daemon=True)
        self._thread.start()

    async def aclose(self) -> None:
        """Finish the open log, if any, then wait until the worker has done every request."""
        if self._open:
            self.finish_log("incomplete: the recorder stopped")
        self._requests.put(None)
        thread, self._thread = self._thread, None
        if thread is not None:
            await asyncio.to_thread(thread.join)

    def start_log(self, *, continues: bool = False) -> int:
        """Begin a new file (created by the worker); returns its id for the events.

        Args:
            continues: The file goes on with the log of the previous one (see
                :meth:`~ulogstream.adapters.file_sink.UlgFileSink.start_log`).

        Raises:
            RuntimeError: A log is open.
        """
        if self._open:
            msg = "start_log() while a log is open; finish_log() it first"
            raise RuntimeError(msg)
        self._log_id += 1
        self._open = True
        self.log_bytes = 0
        self._requests.put(_Start(self._log_id, continues))
        return self._log_id

    def write(self, data: bytes) -> None:
        """Append whole ULog messages to the open log (memory only: never waits on the disk)."""
        if not self._open:
            self.bytes_unwritten += len(data)
            return
        self.log_bytes += len(data)
        self._pending.append(data)
        self._pending_size += len(data)
        if self._pending_size >= self._max_pending:
            self._hand_over()

    def finish_log(self, how: str) -> None:
        """Hand the open log's last bytes over and have the worker fsync and rename it."""
        if not self._open:
            return
        self._hand_over()
        self._open = False
        self._requests.put(_Finish(self._log_id, how))

    def next_flush_deadline(self) -> float | None:
        """When :meth:`flush_due` will hand bytes over (its ``now`` clock), None if none wait."""
        return self._flush_deadline if self._pending else None

    def flush_due(self, now: float) -> None:
        """Hand pending bytes to the worker once a flush interval has passed.

        The interval runs on while nothing is pending, so bytes written after a pause find the
        next hand-over already due within one interval: writing never moves it earlier, and the
        timer that calls this needs no waking for them (:meth:`Recorder._wake_timer_if_due`).
        """
        if now >= self._flush_deadline:
            self._flush_deadline = now + self._flush_interval_s
            self._hand_over()

    def _hand_over(self) -> None:
        if not self._pending:
            return
        chunks, size = self._pending, self._pending_size
        self._pending, self._pending_size = [], 0
        with self._lock:
            if self._backlog + size > self._max_backlog:
                self.bytes_dropped += size
                return
            self._backlog += size
        self._requests.put(_Write(self._log_id, chunks, size))

    # -- the worker thread ---------------------------------------------------------------

    def _post(self, event: FileEvent) -> None:
        loop = self._loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody listens
                loop.call_soon_threadsafe(self._on_event, event)

    def _work(self) -> None:
        sink = self.sink
        failed: int | None = None
        """The log the disk failed: its remaining requests are skipped."""
        while (request := self._requests.get()) is not None:
            match request:
                case _Start(log_id, continues):
                    failed = None
                    try:
                        started = sink.start_log(continues=continues)
                    except DiskFullError as err:
                        failed = log_id
                        self._post(DiskFull(log_id, err))
                    except OSError as err:
                        failed = log_id
                        self._post(LogFailed(log_id, None, f"cannot start a log file: {err}"))
                    else:
                        self._post(LogOpened(log_id, started.path, started.deleted))
                case _Write(log_id, chunks, size):
                    with self._lock:
                        self._backlog -= size
                    if failed == log_id or not sink.is_open:
                        continue
                    if not self._write(sink, log_id, chunks):
                        failed = log_id
                case _Finish(log_id, how):
                    if failed == log_id or not sink.is_open:
                        continue
                    part = sink.path
                    try:
                        finished = sink.close()
                    except OSError as err:
                        assert part is not None  # noqa: S101 (is_open above)
                        self._post(FinishFailed(log_id, part, str(err)))
                    else:
                        if isinstance(finished, DiscardedLog):
                            self._post(LogDiscarded(log_id, finished))
                        else:
                            self._post(LogFinished(log_id, finished, how))

    def _write(self, sink: UlgFileSink, log_id: int, chunks: list[bytes]) -> bool:
        """Write and fsync ``chunks``; False when a disk error ended the log."""
        try:
            for chunk in chunks:
                sink.write(chunk)
            for deleted in sink.flush():
                logger.info("rotation deleted %s", deleted)
            sink.fsync()
        except DiskFullError as err:
            self._post(DiskFull(log_id, err))
        except OSError as err:
            path = sink.drop()
            self._post(LogFailed(log_id, path, f"cannot write {path}: {err}"))
            return False
        return True
