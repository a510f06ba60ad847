"""Downloading the vehicle's own logs over a MAVLink link: the asyncio shell of ``download/``.

One :class:`LogDownloader` owns the link while it runs: it waits for the autopilot's HEARTBEAT,
lists its logs (:class:`~ulogstream.download.listing.LogListing`) and downloads the chosen ones
one after another (:class:`~ulogstream.download.transfer.LogTransfer`) into
:class:`~ulogstream.adapters.download_file.DownloadFile` files, resuming what an earlier run
left. Datagrams are handled in the transport's reader callback as the recorder does (a download
runs at up to 100,000 LOG_DATA/s on a loopback link); a timer task asks the cores again when
they fall silent, checkpoints the file and reports progress.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Final, Self

import msgspec

from ulogstream.adapters.download_file import DownloadFile, LogIdentity, already_downloaded
from ulogstream.adapters.serial_transport import SerialTransport
from ulogstream.adapters.udp_transport import UdpTransport
from ulogstream.download.ftp import (
    FtpFile,
    FtpListing,
    FtpListingDone,
    FtpTransfer,
    FtpUnsupported,
)
from ulogstream.download.listing import ListingDone, ListingFailed, LogListing
from ulogstream.download.packets import FtpMessage, LogData, LogEntry, LogRequestEnd
from ulogstream.download.transfer import (
    RESPONSE_TIMEOUT_S,
    LogTransfer,
    TransferDone,
    TransferFailed,
    WriteLogData,
)
from ulogstream.errors import LinkError, UlogstreamError
from ulogstream.stream.packets import MAV_AUTOPILOT_INVALID, MAV_COMP_ID_AUTOPILOT1, Heartbeat

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from pathlib import Path

    from ulogstream.adapters.transport import Transport
    from ulogstream.download.ftp import FtpListingOutput, FtpTransferOutput
    from ulogstream.download.listing import ListingOutput
    from ulogstream.download.transfer import TransferOutput

    CoreOutput = ListingOutput | TransferOutput | FtpListingOutput | FtpTransferOutput
    from ulogstream.mavlink_codec import MavlinkCodec

HEARTBEAT_TIMEOUT_S: Final = 10.0
"""Wait for the autopilot's first HEARTBEAT (PX4 sends one a second on every link)."""

CHECKPOINT_S: Final = 1.0
"""Seconds between checkpoints of a download: what a crash can cost to download again."""

RESPONSE_FLOOR_S: Final = 0.25
"""The shortest wait for a fetch's first data once round trips are measured (a lost request
costs this, not a radio's worst case)."""

PROGRESS_S: Final = 0.25
"""Seconds between progress reports."""


class DownloadError(LinkError):
    """The vehicle did not answer the listing or stopped sending a log's data."""


class Progress(msgspec.Struct, frozen=True):
    """How one log's download is going (for a progress bar)."""

    entry: LogEntry
    held: int
    rate: float


class DownloadedLog(msgspec.Struct, frozen=True):
    """One log downloaded (or found already downloaded).

    Attributes:
        entry: The vehicle's entry of the log.
        path: The ``.ulg`` file.
        seconds: How long the transfer took (0 when it was already there).
        resumed: Bytes a previous run had already downloaded.
        received: Log bytes received (resent bytes included).
        requests: LOG_REQUEST_DATA (or MAVLink FTP) requests sent.
        ftp: Read over MAVLink FTP.
    """

    entry: LogEntry
    path: Path
    seconds: float = 0.0
    resumed: int = 0
    received: int = 0
    requests: int = 0
    ftp: bool = False


def log_path(out_dir: Path, entry: LogEntry) -> Path:
    """Where a downloaded log goes: ``out_dir/YYYY-MM-DD/HH_MM_SS.ulg``.

    Named by the vehicle's file time (UTC, as PX4 names its SD logs and ulogstream its
    recordings); ``out_dir/log_ID.ulg`` when the vehicle had no clock.
    """
    if entry.time_utc <= 0:
        return out_dir / f"log_{entry.id}.ulg"
    when = datetime.fromtimestamp(entry.time_utc, UTC)
    return out_dir / when.strftime("%Y-%m-%d") / when.strftime("%H_%M_%S.ulg")


def _finish(file: DownloadFile, entry: LogEntry, outputs: list[CoreOutput]) -> Path:
    """The finished file of a transfer that is done; :class:`DownloadError` for one that failed."""
    _raise_if_failed(entry, outputs, "; run the same command again to resume")
    return file.finish()


def _raise_if_failed(entry: LogEntry, outputs: list[CoreOutput], hint: str = "") -> None:
    """:class:`DownloadError` if the transfer's outputs say the vehicle stopped sending."""
    for output in outputs:
        if isinstance(output, TransferFailed):
            what = (
                f"the vehicle stopped sending log {entry.id} at byte {output.ofs}"
                if not output.reason
                else f"log {entry.id} over MAVLink FTP: {output.reason}"
            )
            msg = f"{what} ({output.missing} bytes missing{hint})"
            raise DownloadError(msg)


class _RangeBuffer:
    """Where :meth:`LogDownloader.fetch` gathers a range: written as a file is."""

    def __init__(self, start: int, end: int) -> None:
        self.start = start
        self.data = bytearray(end - start)

    def write(self, ofs: int, data: bytes) -> None:
        position = ofs - self.start
        self.data[position : position + len(data)] = data


class LogDownloader:
    """Lists and downloads the logs of the autopilot on ``transport``.

    Either it owns ``transport`` (reads it while it runs, waits for the autopilot's HEARTBEAT),
    or it is attached to a link another owner reads (the recorder): fed with :meth:`feed`, it
    sends with ``send`` to the autopilot ``target``.

    Args:
        codec: Our side's codec (system and component id, signing).
        transport: The open link to own.
        send: Sends bytes on the link (attached).
        link: The link's name for messages (attached).
        target: The autopilot's system id (attached; component 1).
        progress: Called with each log's :class:`Progress` every :data:`PROGRESS_S`.
        heartbeat_timeout_s: Wait for the autopilot's HEARTBEAT.
        checkpoint_s: Seconds between checkpoints.
    """

    def __init__(
        self,
        *,
        codec: MavlinkCodec,
        transport: Transport | None = None,
        send: Callable[[bytes], None] | None = None,
        link: str = "",
        target: int | None = None,
        progress: Callable[[Progress], None] | None = None,
        heartbeat_timeout_s: float = HEARTBEAT_TIMEOUT_S,
        checkpoint_s: float = CHECKPOINT_S,
    ) -> None:
        self._transport = transport
        if transport is not None:
            send, link = transport.send, transport.describe()
        if send is None:
            msg = "a LogDownloader needs a transport to own or a send function"
            raise ValueError(msg)
        self._send_bytes = send
        self._link = link
        self._codec = codec
        self._progress = progress
        self._heartbeat_timeout_s = heartbeat_timeout_s
        self._checkpoint_s = checkpoint_s
        self._system_id = -1 if target is None else target
        self.target: tuple[int, int] | None = (
            None if target is None else (target, MAV_COMP_ID_AUTOPILOT1)
        )
        """The autopilot's system and component id, once its HEARTBEAT came."""
        self._autopilot: asyncio.Future[None] | None = None
        self._listing: LogListing | FtpListing | None = None
        self._transfer: LogTransfer | FtpTransfer | None = None
        self._file: DownloadFile | _RangeBuffer | None = None
        self.fetched = 0
        """LOG_DATA bytes received by :meth:`fetch` (resent ones included)."""
        self.round_trip_s = 0.0
        """Request to first data, as the last :meth:`fetch` measured it (0: not yet)."""
        self.rate = 0.0
        """LOG_DATA bytes per second, as the last :meth:`fetch` measured it (0: not yet)."""
        self._done: asyncio.Future[None] | None = None
        self._error: BaseException | None = None
        self._finals: list[CoreOutput] = []
        self._reader: asyncio.Task[None] | None = None

    def feed(self, data: bytes) -> bool:
        """A chunk from the link (an attached downloader's owner hands over what it reads).

        Returns:
            True when it was one plain LOG_DATA frame, taken here: nothing else is in it.
        """
        return self._handle(data)

    async def __aenter__(self) -> Self:
        """Start reading the link and wait for the autopilot.

        Raises:
            LinkError: No autopilot HEARTBEAT within the timeout, or the link failed.
        """
        if self._transport is None:
            return self  # attached: the owner reads the link, the target is known
        self._autopilot = asyncio.get_running_loop().create_future()
        self._reader = asyncio.create_task(self._read())
        await asyncio.wait(
            {self._autopilot, self._reader},
            timeout=self._heartbeat_timeout_s,
            return_when=asyncio.FIRST_COMPLETED,
        )
        if self._reader.done():
            self._reader.result()  # raises the link's error
            msg = f"{self._link} was closed"
            raise LinkError(msg)
        if not self._autopilot.done():
            await self._stop_reader()
            msg = (
                f"no autopilot HEARTBEAT on {self._link} within "
                f"{self._heartbeat_timeout_s:g} s: is the vehicle connected and sending on it?"
            )
            raise LinkError(msg)
        return self

    async def __aexit__(self, *_exc: object) -> None:
        """End the download on the vehicle (LOG_REQUEST_END) and stop reading the link."""
        self._send(LogRequestEnd())
        await self._stop_reader()

    async def list_logs(self) -> tuple[LogEntry, ...]:
        """The vehicle's logs, by id.

        Raises:
            DownloadError: The vehicle did not answer the listing.
        """
        assert self.target is not None  # noqa: S101 (after __aenter__)
        outputs = await self._run_listing(LogListing(system_id=self.target[0]))
        for output in outputs:
            if isinstance(output, ListingDone):
                return output.entries
        failed = next(o for o in outputs if isinstance(o, ListingFailed))
        msg = (
            f"the vehicle on {self._link} did not answer LOG_REQUEST_LIST "
            f"({failed.tries} tries): does it serve log downloads on this link?"
        )
        raise DownloadError(msg)

    async def list_ftp_files(self) -> tuple[FtpFile, ...] | str:
        """The ULog files in the vehicle's log folder over MAVLink FTP.

        Returns:
            The files, or why the vehicle gives none over FTP.
        """
        for output in await self._run_listing(FtpListing()):
            if isinstance(output, FtpListingDone):
                return output.files
            if isinstance(output, FtpUnsupported):
                return output.reason
        return "no answer"

    async def _run_listing(self, listing: LogListing | FtpListing) -> list[CoreOutput]:
        """Run a listing core until it finishes: its answers are handed to it meanwhile."""
        self._listing = listing
        try:
            return await self._run(listing.start, listing.handle_timer, listing.next_deadline)
        finally:
            self._listing = None

    async def download(
        self, entry: LogEntry, final: Path, *, ftp: FtpFile | None = None
    ) -> DownloadedLog:
        """Download ``entry`` to ``final`` (resuming a partial download there).

        With ``ftp`` (the entry's file, :func:`~ulogstream.download.ftp.files_for_entries`)
        it is read over MAVLink FTP, else with LOG_REQUEST_DATA.

        Raises:
            DownloadError: The vehicle stopped sending (the partial file is kept for a retry).
            DownloadFileError: The file cannot be written.
        """
        assert self.target is not None  # noqa: S101 (after __aenter__)
        if already_downloaded(final, entry.size):
            return DownloadedLog(entry, final)
        file = DownloadFile(final, LogIdentity(self.target[0], entry.time_utc, entry.size))
        resumed = sum(end - start for start, end in file.held)
        transfer: LogTransfer | FtpTransfer = (
            LogTransfer(log_id=entry.id, size=entry.size, held=file.held)
            if ftp is None
            else FtpTransfer(path=ftp.path, size=entry.size, held=file.held)
        )
        self._file, self._transfer = file, transfer
        started = time.monotonic()
        try:
            outputs = await self._run(
                transfer.start, transfer.handle_timer, transfer.next_deadline, entry=entry
            )
            path = _finish(file, entry, outputs)
        except BaseException:
            with contextlib.suppress(OSError, UlogstreamError):
                file.checkpoint(list(transfer.held))
            raise
        finally:
            file.close()
            self._file = self._transfer = None
        return DownloadedLog(
            entry,
            path,
            seconds=time.monotonic() - started,
            resumed=resumed,
            received=transfer.received,
            requests=transfer.requests,
            ftp=ftp is not None,
        )

    async def fetch(self, entry: LogEntry, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of ``entry`` (clipped at its end), into memory.

        Raises:
            DownloadError: The vehicle stopped sending.
        """
        end = min(end, entry.size)
        if end <= start:
            return b""
        buffer = _RangeBuffer(start, end)
        transfer = LogTransfer(
            log_id=entry.id,
            size=end,
            held=[(0, start)] if start else [],
            response_timeout_s=self._response_timeout(),
        )
        self._file, self._transfer = buffer, transfer
        try:
            outputs = await self._run(transfer.start, transfer.handle_timer, transfer.next_deadline)
        finally:
            self._file = self._transfer = None
        _raise_if_failed(entry, outputs)
        self.fetched += transfer.received
        if transfer.round_trip_s:
            self.round_trip_s = transfer.round_trip_s
        if transfer.rate:
            self.rate = transfer.rate
        return bytes(buffer.data)

    def _response_timeout(self) -> float:
        """How long a request may go unanswered: a few measured round trips once known."""
        if not self.round_trip_s:
            return RESPONSE_TIMEOUT_S
        return min(RESPONSE_TIMEOUT_S, max(RESPONSE_FLOOR_S, 5 * self.round_trip_s))

    async def _run(
        self,
        start: Callable[[float], Sequence[CoreOutput]],
        handle_timer: Callable[[float], Sequence[CoreOutput]],
        next_deadline: Callable[[], float | None],
        *,
        entry: LogEntry | None = None,
    ) -> list[CoreOutput]:
        """Run one core until it finishes: its timers, checkpoints and progress."""
        loop = asyncio.get_running_loop()
        done = self._done = loop.create_future()
        finals: list[CoreOutput] = []
        self._finals = finals
        self._execute(start(time.monotonic()))
        checkpoint_at = progress_at = time.monotonic()
        reader = self._reader
        waits: set[asyncio.Future[None] | asyncio.Task[None]] = {done}
        if reader is not None:
            waits.add(reader)
        while not done.done():
            deadline = next_deadline()
            now = time.monotonic()
            wake = min(deadline if deadline is not None else now + PROGRESS_S, now + PROGRESS_S)
            if wake > now:
                await asyncio.wait(waits, timeout=wake - now, return_when=asyncio.FIRST_COMPLETED)
                if reader is not None and reader.done() and not done.done():
                    reader.result()
                    msg = f"{self._link} was closed"
                    raise LinkError(msg)
                now = time.monotonic()
            if not done.done():
                self._execute(handle_timer(now))
            transfer, file = self._transfer, self._file
            if transfer is not None and isinstance(file, DownloadFile) and entry is not None:
                if now >= checkpoint_at + self._checkpoint_s:
                    checkpoint_at = now
                    file.checkpoint(list(transfer.held))
                if self._progress is not None and now >= progress_at + PROGRESS_S:
                    progress_at = now
                    self._progress(Progress(entry, transfer.held.total, transfer.rate))
        if self._error is not None:
            raise self._error
        if self._progress is not None and self._transfer is not None and entry is not None:
            self._progress(Progress(entry, self._transfer.held.total, self._transfer.rate))
        return finals

    def _execute(self, outputs: Sequence[CoreOutput]) -> None:
        for output in outputs:
            match output:
                case WriteLogData(ofs, data):
                    self._write(ofs, data)
                case (
                    TransferDone()
                    | TransferFailed()
                    | ListingDone()
                    | ListingFailed()
                    | FtpListingDone()
                    | FtpUnsupported()
                ):
                    self._finals.append(output)
                    if self._done is not None and not self._done.done():
                        self._done.set_result(None)
                case _:
                    self._send(output)

    def _write(self, ofs: int, data: bytes) -> None:
        assert self._file is not None  # noqa: S101 (a transfer runs)
        try:
            self._file.write(ofs, data)
        except Exception as err:  # noqa: BLE001 (handed to the waiting download)
            self._fail(err)

    def _fail(self, err: BaseException) -> None:
        self._error = err
        if self._done is not None and not self._done.done():
            self._done.set_result(None)

    def _send(self, request: object) -> None:
        if self.target is None:
            return
        system_id, component_id = self.target
        if isinstance(request, FtpMessage):
            self._send_bytes(self._codec.encode_ftp(request, system_id, component_id))
            return
        self._send_bytes(self._codec.encode_log_request(request, system_id, component_id))  # type: ignore[arg-type]

    def _handle(self, data: bytes) -> bool:
        """One chunk from the link: its messages to the running core (in the reader callback).

        Returns:
            True when it was one plain LOG_DATA frame (nothing else in it).
        """
        now = time.monotonic()
        transfer = self._transfer
        if isinstance(transfer, LogTransfer):
            # A download's common case: one LOG_DATA that continues the file, no message built.
            fields = self._codec.decode_log_data(data)
            if fields is not None:
                system_id, log_id, ofs, chunk = fields
                if (
                    log_id == transfer.log_id
                    and system_id == self._system_id
                    and transfer.receive_next(ofs, chunk, now)
                ):
                    self._write(ofs, chunk)
                    return True
                self._receive_data(transfer, LogData(log_id, ofs, chunk, system_id), now)
                return True
        for message in self._codec.decode_with_log_download(data):
            if isinstance(message, FtpMessage):
                if message.system_id == self._system_id:
                    self._receive_ftp(message, now)
            elif isinstance(message, LogData):
                if isinstance(transfer, LogTransfer) and message.system_id == self._system_id:
                    self._receive_data(transfer, message, now)
            elif isinstance(message, LogEntry):
                listing = self._listing
                if isinstance(listing, LogListing):
                    try:
                        self._execute(listing.receive(message, now))
                    except Exception as err:  # noqa: BLE001 (handed to the waiting listing)
                        self._fail(err)
            elif isinstance(message, Heartbeat):
                self._heartbeat(message)
        return False

    def _receive_data(self, transfer: LogTransfer, message: LogData, now: float) -> None:
        try:
            self._execute(transfer.receive(message, now))
        except Exception as err:  # noqa: BLE001 (handed to the waiting download)
            self._fail(err)

    def _receive_ftp(self, message: FtpMessage, now: float) -> None:
        core = self._transfer if isinstance(self._transfer, FtpTransfer) else self._listing
        if not isinstance(core, FtpTransfer | FtpListing):
            return
        try:
            self._execute(core.receive(message, now))
        except Exception as err:  # noqa: BLE001 (handed to the waiting download)
            self._fail(err)

    def _heartbeat(self, heartbeat: Heartbeat) -> None:
        if (
            self.target is None
            and heartbeat.component_id == MAV_COMP_ID_AUTOPILOT1
            and heartbeat.autopilot != MAV_AUTOPILOT_INVALID
        ):
            self.target = (heartbeat.system_id, heartbeat.component_id)
            self._system_id = heartbeat.system_id
            if self._autopilot is not None and not self._autopilot.done():
                self._autopilot.set_result(None)

    async def _read(self) -> None:
        transport = self._transport
        assert transport is not None  # noqa: S101 (not attached)
        if isinstance(transport, UdpTransport):
            await transport.pump(self._handle)
            return
        wake_after = transport.wake_after if isinstance(transport, SerialTransport) else None
        while data := await transport.receive():
            self._handle(data)
            if wake_after is not None:
                wake_after(self._codec.bytes_wanted())

    async def _stop_reader(self) -> None:
        reader = self._reader
        if reader is not None and not reader.done():
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
