"""Finished logs leave the vehicle: described (size, SHA-256), announced, then uploaded.

:class:`LogShipper` takes each finished log from the event loop without waiting
(:meth:`LogShipper.offer`) and works in two stages, each behind a bounded queue:

1. describe: the SHA-256 is computed in a thread (a 100 MB log takes a while) and the
   :class:`FinishedLogInfo` handed to ``announce`` (the recorder publishes it on MQTT);
2. upload (only with a target, see :func:`make_target`): an :class:`UploadTarget` uploads the
   log: :class:`CommandTarget` runs ``upload.command``, the Flight Review targets
   (:mod:`ulogstream.upload.flight_review`) post it. A failed attempt is retried with a
   doubling backoff, ``attempts`` times in all, except a refusal
   (:class:`~ulogstream.errors.UploadRejectedError`). Each outcome is one log line and a
   counter (:attr:`LogShipper.uploaded`, :attr:`LogShipper.failed`, :attr:`LogShipper.skipped`).

With a journal folder, the upload queue is also on disk (:class:`UploadJournal`, one small JSON
file per waiting log), so logs waiting at a stop, crash or power loss are uploaded after the
next start. With ``upload.only_when_disarmed``, uploads wait while :meth:`LogShipper.set_armed`
says a vehicle is armed.

Nothing here touches a ``.part`` file: only logs already finished (renamed to ``.ulg``) arrive,
and a ``.part`` offered or found in the journal is refused.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

import msgspec

from ulogstream.errors import UploadRejectedError
from ulogstream.upload.info import FinishedLogInfo, describe
from ulogstream.upload.journal import PendingUpload, UploadJournal
from ulogstream.upload.sidecar import add_upload, write_sidecar
from ulogstream.upload.targets import Uploaded, UploadTarget, make_target

if TYPE_CHECKING:
    from collections.abc import Callable, Collection
    from pathlib import Path

    from ulogstream.config.sections import UploadSettings


logger = logging.getLogger(__name__)


MAX_BACKOFF_S = 600.0
"""Longest wait between two runs of the upload command for one log."""


DESCRIBE_QUEUE = 1000
"""Finished logs waiting for their checksum; more are announced without one."""


class _Finished(msgspec.Struct, frozen=True):
    path: Path
    size: int
    vehicle: str
    how: str
    announce: Callable[[FinishedLogInfo], None] | None
    on_described: Callable[[FinishedLogInfo], None] | None


def _remove_entry(journal: UploadJournal, pending: PendingUpload) -> None:
    journal.remove(pending.info)


class LogShipper:
    """Describes, announces and (with a target) uploads finished logs, off the event loop's path.

    With a ``journal`` folder, the upload queue is kept on disk (:class:`UploadJournal`): logs
    still waiting at a stop, a crash or a power loss are queued again by the next shipper made
    with that folder (this constructor reads it, so make the shipper at start-up).

    Args:
        settings: The ``[upload]`` settings.
        target: Where logs go; by default the one :func:`make_target` makes of ``settings``.
        journal: The folder of the on-disk queue (None: the queue is in memory only).
        on_settled: Called (in a thread: it may block) with each log whose upload is over:
            uploaded, given up, refused or skipped. The logbook lets rotation delete it then.
        withheld_env: Environment variables an upload command must not see.

    Raises:
        ConfigError: The settings of ``upload.target`` cannot be used.
    """

    def __init__(
        self,
        settings: UploadSettings,
        target: UploadTarget | None = None,
        *,
        journal: Path | None = None,
        on_settled: Callable[[Path], None] | None = None,
        withheld_env: Collection[str] = (),
    ) -> None:
        self.settings = settings
        self.target = make_target(settings, withheld_env=withheld_env) if target is None else target
        self._on_settled = on_settled
        self.journal = None if journal is None else UploadJournal(journal)
        self._describe: asyncio.Queue[_Finished] = asyncio.Queue(DESCRIBE_QUEUE)
        self._uploads: asyncio.Queue[PendingUpload] = asyncio.Queue(settings.queue_size)
        self._uploading = 0
        self.uploaded = 0
        """Logs whose upload succeeded."""
        self.failed = 0
        """Logs given up: every attempt failed, or the remote refused them."""
        self.skipped = 0
        """Logs not uploaded because the queue was full (or the file was gone)."""
        self.announced = 0
        """Finished logs handed to their ``announce``."""
        self.last_error: str | None = None
        """Why the last failed attempt failed."""
        self.locations: list[str] = []
        """Where the uploaded logs went (URL or key), in order; the newest 100."""
        self.on_uploaded: Callable[[FinishedLogInfo, str, Uploaded], None] | None = None
        """Told of each log uploaded: its description, the target's name and where it went
        (the recorder announces it on ``meta/log_uploaded``)."""
        self.resumed = 0
        """Logs queued again from the journal at start-up."""
        self._armed_systems: set[int] = set()
        self._armed = asyncio.Event()
        self._disarmed = asyncio.Event()
        self._disarmed.set()  # not heard armed: a vehicle not heard is not flying on this link
        self._in_backoff = False
        self._changed = asyncio.Event()
        """Set when an upload ends, a retry waits or the armed state changes."""
        if self.journal is not None and self.target is not None:
            self._resume(self.journal)

    def _resume(self, journal: UploadJournal) -> None:
        """Queue the journal's logs again (blocking: a few small files, once at start-up)."""
        waiting = journal.pending()
        for pending in waiting:
            path = pending.info.path
            if path.name.endswith(".part") or not path.is_file():
                why = "is not a finished log" if path.exists() else "no longer exists"
                logger.warning("queued upload of %s dropped: the file %s", path, why)
                journal.remove(pending.info)
                self.skipped += 1
                self._settle_now(path)
                continue
            if self._uploads.full():
                left = len(waiting) - self.resumed
                logger.warning(
                    "upload queue full (%d logs): %d more wait in %s for the next start",
                    self.settings.queue_size,
                    left,
                    journal.folder,
                )
                break
            self._uploads.put_nowait(pending)
            self.resumed += 1
        if self.resumed:
            logger.info(
                "%d log(s) waiting for upload since the last run, the first %s",
                self.resumed,
                waiting[0].info.path,
            )

    @property
    def uploads(self) -> bool:
        """Whether finished logs are uploaded (a target is set)."""
        return self.target is not None

    def _settle_now(self, path: Path) -> None:
        """Say the upload of ``path`` is over (blocking; at start-up or in a thread)."""
        if self._on_settled is None:
            return
        try:
            self._on_settled(path)
        except OSError as err:
            logger.warning("cannot note that the upload of %s is over: %s", path, err.strerror)

    async def _settle(self, path: Path) -> None:
        """Say the upload of ``path`` is over, off the event loop."""
        if self._on_settled is not None:
            await asyncio.to_thread(self._settle_now, path)

    @property
    def armed(self) -> bool:
        """Whether a vehicle was last heard armed (see :meth:`set_armed`)."""
        return bool(self._armed_systems)

    @property
    def held(self) -> bool:
        """Whether uploads wait for the vehicle to disarm (``upload.only_when_disarmed``)."""
        return self.settings.only_when_disarmed and self.armed

    def set_armed(self, armed: bool, system_id: int = 1) -> None:  # noqa: FBT001
        """The vehicle ``system_id`` is ``armed`` (from its HEARTBEAT ``base_mode``).

        With ``upload.only_when_disarmed``, uploads wait while any vehicle is armed, and one in
        progress when a vehicle arms is stopped (not counted as a failed attempt) and started
        again once every vehicle is disarmed. The last state heard holds: a link lost in flight
        keeps uploads waiting.
        """
        was = self.armed
        if armed:
            self._armed_systems.add(system_id)
        else:
            self._armed_systems.discard(system_id)
        if self.armed == was:
            return
        if self.armed:
            self._disarmed.clear()
            self._armed.set()
        else:
            self._armed.clear()
            self._disarmed.set()
        self._changed.set()
        if self.settings.only_when_disarmed and self.target is not None:
            state = "armed: uploads wait" if self.armed else "disarmed: uploads go on"
            logger.info("vehicle sysid %d %s (%d waiting)", system_id, state, self.backlog)

    @property
    def backlog(self) -> int:
        """Logs waiting for (or in) their upload."""
        return self._uploads.qsize() + self._uploading

    def offer(
        self,
        path: Path,
        size: int,
        *,
        vehicle: str,
        how: str,
        announce: Callable[[FinishedLogInfo], None] | None = None,
        on_described: Callable[[FinishedLogInfo], None] | None = None,
    ) -> None:
        """Take a finished log without waiting; ``announce`` gets its description.

        ``on_described`` gets its description in a thread, before ``announce`` (the recorder
        remembers the autopilot's ``sys_uuid`` with it).
        """
        if path.name.endswith(".part"):
            logger.error("%s is still being written: neither announced nor uploaded", path)
            self.skipped += 1
            return
        try:
            item = _Finished(path, size, vehicle, how, announce, on_described)
            self._describe.put_nowait(item)
        except asyncio.QueueFull:
            logger.warning(
                "too many finished logs waiting: %s is neither announced nor uploaded", path
            )
            self.skipped += 1

    async def wait_described(self) -> None:
        """Wait until every offered log was announced (bound it with asyncio.timeout)."""
        await self._describe.join()

    async def wait_idle(self) -> None:
        """Wait until every offered log was announced and uploaded or given up (bound it)."""
        await self._describe.join()
        await self._uploads.join()

    @property
    def paused(self) -> bool:
        """Whether no upload is under way: waiting to retry, or for the vehicle to disarm."""
        return self._in_backoff or self.held

    async def wait_settled(self) -> None:
        """Wait until every offered log was announced and no upload is under way (bound it).

        That is: every log is uploaded or given up, or the next one waits to be retried or for
        the vehicle to disarm; at a stop, waiting longer would only delay it (the logs still
        waiting are in the journal).
        """
        await self._describe.join()
        while True:
            self._changed.clear()
            if not self.backlog or self.paused:
                return
            await self._changed.wait()

    async def run(self) -> None:
        """Describe and upload for ever (until cancelled)."""
        async with asyncio.TaskGroup() as group:
            group.create_task(self._describe_loop())
            if self.target is not None:
                group.create_task(self._upload_loop(self.target))

    async def _describe_loop(self) -> None:
        while True:
            item = await self._describe.get()
            try:
                info = await asyncio.to_thread(
                    describe,
                    item.path,
                    item.size,
                    vehicle=item.vehicle,
                    how=item.how,
                )
                await asyncio.to_thread(write_sidecar, info)
                if item.on_described is not None:
                    await asyncio.to_thread(item.on_described, info)
                if item.announce is not None:
                    item.announce(info)
                    self.announced += 1
                if self.target is not None:
                    await self._enqueue(PendingUpload(info))
            finally:
                self._describe.task_done()

    async def _enqueue(self, pending: PendingUpload) -> None:
        """Queue ``pending`` for upload, in the journal first (the upload loop only takes)."""
        if self._uploads.full():
            self.skipped += 1
            logger.warning(
                "upload queue full (%d logs): %s is not uploaded",
                self.settings.queue_size,
                pending.info.path,
            )
            await self._settle(pending.info.path)
            return
        await self._journal(UploadJournal.write, pending)
        self._uploads.put_nowait(pending)

    async def _journal(
        self, action: Callable[[UploadJournal, PendingUpload], None], pending: PendingUpload
    ) -> None:
        """Carry out a journal ``action`` in a thread; a failure is one line, never raised."""
        if self.journal is None:
            return
        try:
            await asyncio.to_thread(action, self.journal, pending)
        except OSError as err:
            if action is _remove_entry:
                then = "it is uploaded again after a restart"
            else:
                then = "it is uploaded now, but not after a restart"
            logger.warning(
                "upload queue %s: %s for %s (%s)",
                self.journal.folder,
                err.strerror or err,
                pending.info.path,
                then,
            )

    async def _upload_loop(self, target: UploadTarget) -> None:
        while True:
            pending = await self._uploads.get()
            self._uploading = 1
            try:
                if await self._upload(target, pending):
                    await self._journal(_remove_entry, pending)
                    await self._settle(pending.info.path)
            except asyncio.CancelledError:
                left = 1 + self._uploads.qsize()
                later = "at the next start" if self.journal is not None else "never (no journal)"
                logger.warning(
                    "stopping: %d log(s) not uploaded, the first %s (the files stay; retried %s)",
                    left,
                    pending.info.path,
                    later,
                )
                raise
            finally:
                self._uploading = 0
                self._uploads.task_done()
                self._changed.set()

    async def _upload(self, target: UploadTarget, pending: PendingUpload) -> bool:
        """Upload ``pending``, retrying with backoff.

        Returns:
            Whether it is done with (uploaded, given up, refused, gone): False only if cancelled.
        """
        settings, info = self.settings, pending.info
        backoff = settings.backoff_s
        first = min(pending.attempts + 1, settings.attempts)  # after a restart: at least one more
        for attempt in range(first, settings.attempts + 1):
            if not info.path.exists():
                logger.warning("upload of %s skipped: the file no longer exists", info.path)
                self.skipped += 1
                return True
            started = time.monotonic()
            try:
                uploaded = await self._attempt(target, info)
            except UploadRejectedError as err:
                self.last_error = str(err)
                self.failed += 1
                logger.error(  # noqa: TRY400 (a refusal, not a bug: no traceback)
                    "upload of %s to %s refused, given up (the file stays): %s",
                    info.path,
                    target.name,
                    err,
                )
                return True
            except Exception as err:  # noqa: BLE001 (any other failure of a target is retried)
                error = str(err) or type(err).__name__
            else:
                elapsed = time.monotonic() - started
                self.uploaded += 1
                self.locations = [*self.locations[-99:], uploaded.location]
                logger.info(
                    "uploaded %s (%d bytes) with %s in %.1f s: %s%s",
                    info.path,
                    info.size,
                    target.name,
                    elapsed,
                    uploaded.location,
                    ""
                    if uploaded.delete_token is None
                    else f"; delete token {uploaded.delete_token} (keep it: it deletes the log)",
                )
                await asyncio.to_thread(add_upload, info, target.name, uploaded)
                if self.on_uploaded is not None:
                    self.on_uploaded(info, target.name, uploaded)
                if settings.delete_after_upload:
                    await self._delete(info.path)
                return True
            self.last_error = error
            if attempt == settings.attempts:
                self.failed += 1
                logger.error(
                    "upload of %s failed %d time(s), given up (the file stays): %s",
                    info.path,
                    attempt,
                    error,
                )
                return True
            logger.warning(
                "upload of %s failed (attempt %d of %d): %s; retrying in %.0f s",
                info.path,
                attempt,
                settings.attempts,
                error,
                backoff,
            )
            await self._journal(UploadJournal.write, PendingUpload(info, attempt))
            self._in_backoff = True
            self._changed.set()
            try:
                await asyncio.sleep(backoff)
            finally:
                self._in_backoff = False
            backoff = min(backoff * 2, MAX_BACKOFF_S)
        return True

    async def _attempt(self, target: UploadTarget, info: FinishedLogInfo) -> Uploaded:
        """One upload of ``info``; with ``only_when_disarmed``, only while disarmed.

        An upload that a vehicle's arming interrupts is started again once disarmed.
        """
        if not self.settings.only_when_disarmed:
            return await target.upload(info)
        while True:
            if not self._disarmed.is_set():
                await self._disarmed.wait()
            upload = asyncio.create_task(target.upload(info))
            armed = asyncio.create_task(self._armed.wait())
            try:
                await asyncio.wait({upload, armed}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                armed.cancel()
                if not upload.done():
                    upload.cancel()
                    await asyncio.wait({upload})  # a cancel of ours still propagates
            if not upload.cancelled():
                return upload.result()
            logger.info("upload of %s stopped: the vehicle armed; again once disarmed", info.path)

    @staticmethod
    async def _delete(path: Path) -> None:
        try:
            await asyncio.to_thread(path.unlink)
        except OSError as err:
            logger.warning("cannot delete uploaded %s: %s", path, err.strerror)
        else:
            logger.info("deleted %s after its upload", path)
