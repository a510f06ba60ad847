"""Finished logs leave the vehicle: described (size, SHA-256), announced, then uploaded.

:class:`LogShipper` takes each finished log from the event loop without waiting
(:meth:`LogShipper.offer`) and works in two stages, each behind a bounded queue:

1. describe: the SHA-256 is computed in a thread (a 100 MB log takes a while) and the
   :class:`FinishedLogInfo` handed to ``announce`` (the daemon publishes it on MQTT);
2. upload (only with a target, see :func:`make_target`): an :class:`UploadTarget` uploads the
   log: :class:`CommandTarget` runs ``upload.command``, the Flight Review targets
   (:mod:`ulogstream.adapters.flight_review`) post it. A failed attempt is retried with a
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
import contextlib
import hashlib
import json
import logging
import os
import re
import signal
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ulogstream.config import SettingError, UploadSettings, upload_command
from ulogstream.errors import ConfigError, LinkError, ULogFormatError, UploadRejectedError
from ulogstream.ulog.events import DefinitionsEnd, Info
from ulogstream.ulog.parser import ULogParser, no_rows

if TYPE_CHECKING:
    from collections.abc import Callable, Collection

logger = logging.getLogger(__name__)

MAX_BACKOFF_S = 600.0
"""Longest wait between two runs of the upload command for one log."""

DESCRIBE_QUEUE = 1000
"""Finished logs waiting for their checksum; more are announced without one."""

_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_TIME = re.compile(r"^(\d{2})_(\d{2})_(\d{2})")
_HASH_CHUNK = 1 << 20
_HEADER_CHUNK = 1 << 16


@dataclass(frozen=True, slots=True, kw_only=True)
class FinishedLogInfo:
    """What is announced about one finished log (``meta/log_finished``).

    Attributes:
        path: The ``.ulg`` file.
        size: Bytes in it.
        sha256: Its SHA-256 in hex (None when it could not be read).
        sys_uuid: The autopilot's ``sys_uuid`` from the log's information (None: not in it).
        start_time: UTC start of the log from its file name, ISO 8601 (None if not named so).
        date: The UTC date of the log, ``YYYY-MM-DD`` (the ``{date}`` placeholder).
        vehicle: The vehicle id it was recorded for.
        complete: Whether the log ended with the vehicle's end of stream.
        how: How it ended, in words.
    """

    path: Path
    size: int
    sha256: str | None
    sys_uuid: str | None
    start_time: str | None
    date: str
    vehicle: str
    complete: bool
    how: str

    def as_json(self) -> dict[str, str | int | bool | None]:
        """The announcement's JSON object."""
        return {
            "path": str(self.path),
            "name": self.path.name,
            "size": self.size,
            "sha256": self.sha256,
            "sys_uuid": self.sys_uuid,
            "start_time": self.start_time,
            "vehicle": self.vehicle,
            "complete": self.complete,
            "how": self.how,
        }


@dataclass(frozen=True, slots=True)
class _Finished:
    path: Path
    size: int
    vehicle: str
    how: str
    announce: Callable[[FinishedLogInfo], None] | None
    sys_uuid_file: Path | None


def read_sys_uuid(path: Path) -> str | None:
    """The ``sys_uuid`` information of the ULog file at ``path`` (blocking; reads its header).

    Returns:
        The value as text, or None when the header has none or cannot be read.
    """
    parser = ULogParser(rows=no_rows)  # the header only: no row decoded, numpy not loaded
    try:
        with path.open("rb") as file:
            while chunk := file.read(_HEADER_CHUNK):
                for event in parser.receive_bytes(chunk):
                    if type(event) is Info and event.key == "sys_uuid":
                        value = event.value
                        text = value.hex() if isinstance(value, bytes) else str(value)
                        return text.strip("\x00 ") or None
                    if type(event) is DefinitionsEnd:
                        return None
    except (OSError, ULogFormatError):
        return None
    return None


def remember_sys_uuid(state: Path, sys_uuid: str) -> bool:
    """Write ``sys_uuid`` to ``state`` unless it holds it already (blocking).

    Returns:
        Whether the file changed.
    """
    with contextlib.suppress(OSError):
        if state.read_text(encoding="utf-8").strip() == sys_uuid:
            return False
    try:
        state.parent.mkdir(parents=True, exist_ok=True)
        temporary = state.with_name(state.name + ".tmp")
        temporary.write_text(sys_uuid + "\n", encoding="utf-8")
        temporary.replace(state)
    except OSError as err:
        logger.warning("cannot remember the autopilot's sys_uuid in %s: %s", state, err.strerror)
        return False
    return True


def recalled_sys_uuid(state: Path) -> str | None:
    """The ``sys_uuid`` :func:`remember_sys_uuid` wrote to ``state`` (None: none yet)."""
    try:
        return state.read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


def sha256_of(path: Path) -> str:
    """The SHA-256 of the file at ``path`` in hex (blocking: call it in a thread)."""
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while chunk := file.read(_HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def describe(
    path: Path, size: int, *, vehicle: str, how: str, sys_uuid_file: Path | None = None
) -> FinishedLogInfo:
    """Describe a finished log (blocking: reads the whole file for the checksum).

    With ``sys_uuid_file``, the log's ``sys_uuid`` is remembered there for the next start.
    """
    try:
        sha256: str | None = sha256_of(path)
    except OSError as err:
        logger.warning("cannot read %s for its checksum: %s", path, err.strerror)
        sha256 = None
    date = path.parent.name
    start_time = None
    clock = _TIME.match(path.stem)
    if _DATE.match(date) and clock is not None:
        start_time = f"{date}T{clock[1]}:{clock[2]}:{clock[3]}Z"
    else:
        with contextlib.suppress(OSError):
            date = datetime.fromtimestamp(path.stat().st_mtime, UTC).strftime("%Y-%m-%d")
        if not _DATE.match(date):
            date = datetime.now(UTC).strftime("%Y-%m-%d")
    sys_uuid = read_sys_uuid(path)
    if sys_uuid is not None and sys_uuid_file is not None:
        remember_sys_uuid(sys_uuid_file, sys_uuid)
    return FinishedLogInfo(
        path=path,
        size=size,
        sha256=sha256,
        sys_uuid=sys_uuid,
        start_time=start_time,
        date=date,
        vehicle=vehicle,
        complete=how.startswith("complete"),
        how=how,
    )


@dataclass(frozen=True, slots=True)
class PendingUpload:
    """A log waiting for upload and the attempts already made for it (before a restart too)."""

    info: FinishedLogInfo
    attempts: int = 0


class UploadJournal:
    """The upload queue on disk: one small JSON file per waiting log, so it survives reboots.

    Each entry is written atomically (a temporary file, fsync, rename, fsync of the folder) and
    removed when its log is uploaded or given up. Every method blocks: call them in a thread
    (or at start-up, before the event loop's work begins).

    Args:
        folder: Where the entries are kept (created when the first one is written).
    """

    VERSION = 1
    """The entries' format (``"version"`` in each)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def entry(self, info: FinishedLogInfo) -> Path:
        """The entry of the log ``info`` (named after its path: one entry per log)."""
        key = hashlib.sha256(str(info.path).encode()).hexdigest()[:24]
        return self.folder / f"{key}.json"

    def write(self, pending: PendingUpload) -> None:
        """Write (or rewrite) the entry of ``pending``.

        Raises:
            OSError: It could not be written (the log is still uploaded, but not after a restart).
        """
        info = pending.info
        record = {
            "version": self.VERSION,
            "attempts": pending.attempts,
            "queued": datetime.now(UTC).isoformat(timespec="seconds"),
            **info.as_json(),
            "date": info.date,
        }
        entry = self.entry(info)
        self.folder.mkdir(parents=True, exist_ok=True)
        temporary = entry.with_suffix(".tmp")
        with temporary.open("w", encoding="utf-8") as file:
            json.dump(record, file)
            file.flush()
            os.fsync(file.fileno())
        temporary.replace(entry)
        _sync_folder(self.folder)

    def remove(self, info: FinishedLogInfo) -> None:
        """Remove the entry of ``info`` (uploaded or given up); a missing one is fine."""
        with contextlib.suppress(FileNotFoundError):
            self.entry(info).unlink()
            _sync_folder(self.folder)

    def pending(self) -> list[PendingUpload]:
        """Every readable entry, oldest first; unreadable ones are logged and removed."""
        try:
            names = sorted(self.folder.iterdir())
        except FileNotFoundError:
            return []
        except OSError as err:
            logger.warning("cannot read the upload queue %s: %s", self.folder, err.strerror)
            return []
        found: list[tuple[str, PendingUpload]] = []
        for path in names:
            if path.suffix == ".tmp":  # a write cut short (power loss): never renamed, so void
                path.unlink(missing_ok=True)
                continue
            if path.suffix != ".json":
                continue
            try:
                record = json.loads(path.read_text(encoding="utf-8"))
                found.append((str(record["queued"]), _pending_from(record)))
            except (OSError, ValueError, KeyError, TypeError) as err:
                logger.warning(
                    "upload queue entry %s cannot be read (%s): removed; its log is not uploaded",
                    path,
                    err,
                )
                path.unlink(missing_ok=True)
        found.sort(key=lambda item: item[0])
        return [pending for _, pending in found]


def _pending_from(record: dict[str, object]) -> PendingUpload:
    """The :class:`PendingUpload` of a journal entry's JSON object.

    Raises:
        KeyError: A field is missing.
        TypeError: A field has the wrong type.
    """

    def text(name: str) -> str:
        value = record[name]
        if not isinstance(value, str):
            raise TypeError(name)
        return value

    def optional(name: str) -> str | None:
        return None if record.get(name) is None else text(name)

    size, attempts = record["size"], record["attempts"]
    if not isinstance(size, int) or not isinstance(attempts, int):
        raise TypeError("size")  # noqa: EM101 (never shown alone: the entry's path is)
    info = FinishedLogInfo(
        path=Path(text("path")),
        size=size,
        sha256=optional("sha256"),
        sys_uuid=optional("sys_uuid"),
        start_time=optional("start_time"),
        date=text("date"),
        vehicle=text("vehicle"),
        complete=record.get("complete") is True,
        how=text("how"),
    )
    return PendingUpload(info, attempts)


def _sync_folder(folder: Path) -> None:
    """Flush ``folder`` to disk (fsync), so a rename or unlink in it survives a power loss."""
    with contextlib.suppress(OSError):
        descriptor = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)


class UploadTarget(Protocol):
    """Where finished logs go: one :meth:`upload` per log, retried by :class:`LogShipper`.

    Attributes:
        name: What the log lines call it (``"rclone"``, ``"Flight Review https://..."``).
    """

    name: str

    async def upload(self, info: FinishedLogInfo) -> str:
        """Upload the log ``info`` describes; it may be cancelled at any await.

        Returns:
            Where the log went: a URL or an object key (shown in the log line).

        Raises:
            UploadRejectedError: The remote refused the log for good (retrying cannot help).
            Exception: Anything else (OSError, LinkError, TimeoutError, ...): retried with
                backoff.
        """
        ...


def make_target(
    settings: UploadSettings, *, withheld_env: Collection[str] = ()
) -> UploadTarget | None:
    """The target ``upload.target`` names, or None when logs are not uploaded.

    Args:
        settings: The ``[upload]`` settings.
        withheld_env: Environment variables an upload command must not see (our secrets).

    Raises:
        ConfigError: Its settings cannot be used.
    """
    match settings.target:
        case "command":
            if settings.command is None:
                return None
            return CommandTarget(settings, withheld_env=withheld_env)
        case "flight_review":
            # Each target's code is loaded only by those who upload there.
            from ulogstream.adapters.flight_review import FlightReviewTarget  # noqa: PLC0415

            return FlightReviewTarget(settings.flight_review, timeout_s=settings.timeout_s)
        case "s3":
            from ulogstream.adapters.s3_upload import S3Target  # noqa: PLC0415

            return S3Target(settings.s3)


def _remove_entry(journal: UploadJournal, pending: PendingUpload) -> None:
    journal.remove(pending.info)


async def _kill(process: asyncio.subprocess.Process) -> None:
    """Kill ``process`` and everything it started (its process group), then reap it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    await process.wait()


class CommandTarget:
    """Uploads with ``upload.command``: a program run without a shell, placeholders filled in.

    The command gets this process's environment without ``withheld_env``: the secrets of other
    parts (the MQTT password from ``mqtt.password_env``) are not an upload tool's business.

    Args:
        settings: The ``[upload]`` settings (``command`` set).
        withheld_env: Names of environment variables the command does not get.

    Raises:
        ConfigError: ``settings.command`` cannot be used.
    """

    def __init__(self, settings: UploadSettings, *, withheld_env: Collection[str] = ()) -> None:
        if settings.command is None:
            msg = "upload.command is not set; set it or another upload.target"
            raise ConfigError(msg)
        try:
            self._words = upload_command(settings.command)
        except SettingError as err:
            raise ConfigError(str(err)) from None
        self._timeout_s = settings.timeout_s
        self._withheld_env = frozenset(withheld_env)
        self.name = Path(self._words[0]).name

    async def upload(self, info: FinishedLogInfo) -> str:
        """Run the command once for ``info``.

        Returns:
            The last line the command printed (at most 200 characters), else its name.

        Raises:
            LinkError: It could not be run or exited with an error.
            TimeoutError: It outlasted ``upload.timeout_s`` and was killed.
        """
        values = {
            "path": str(info.path),
            "name": info.path.name,
            "stem": info.path.stem,
            "vehicle": info.vehicle,
            "date": info.date,
            "sha256": info.sha256 or "",
        }
        argv = [word.format_map(values) for word in self._words]
        environment = {
            name: value for name, value in os.environ.items() if name not in self._withheld_env
        }
        try:
            process = await asyncio.create_subprocess_exec(
                *argv,
                env=environment,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,  # its own process group: a kill reaches its children
            )
        except OSError as err:
            msg = f"cannot run {argv[0]}: {err.strerror}"
            raise LinkError(msg) from None
        try:
            async with asyncio.timeout(self._timeout_s):
                output, _ = await process.communicate()
        except TimeoutError:
            await _kill(process)
            msg = f"{argv[0]} took longer than {self._timeout_s:g} s and was killed"
            raise TimeoutError(msg) from None
        except BaseException:  # cancelled (stopping): never leave the command running
            if process.returncode is None:
                await _kill(process)
            raise
        lines = output.decode(errors="replace").strip().splitlines()
        if process.returncode != 0:
            said = f": {lines[-1][:200]}" if lines else ""
            msg = f"{argv[0]} exited with {process.returncode}{said}"
            raise LinkError(msg)
        return lines[-1][:200] if lines else self.name


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
        sys_uuid_file: Path | None = None,
    ) -> None:
        """Take a finished log without waiting; ``announce`` gets its description.

        With ``sys_uuid_file``, the log's ``sys_uuid`` is remembered there (see
        :func:`remember_sys_uuid`).
        """
        if path.name.endswith(".part"):
            logger.error("%s is still being written: neither announced nor uploaded", path)
            self.skipped += 1
            return
        try:
            item = _Finished(path, size, vehicle, how, announce, sys_uuid_file)
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
                    sys_uuid_file=item.sys_uuid_file,
                )
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
                location = await self._attempt(target, info)
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
                self.locations = [*self.locations[-99:], location]
                logger.info(
                    "uploaded %s (%d bytes) with %s in %.1f s: %s",
                    info.path,
                    info.size,
                    target.name,
                    elapsed,
                    location,
                )
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

    async def _attempt(self, target: UploadTarget, info: FinishedLogInfo) -> str:
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
