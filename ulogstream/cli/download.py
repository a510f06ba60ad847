"""The ``download`` command: the vehicle's own logs over MAVLink, listed or fetched."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from ulogstream.adapters.connection import open_transport
from ulogstream.adapters.download_file import already_downloaded, merge_into
from ulogstream.cli.live import run_quietly
from ulogstream.cli.terminal import EXIT_ERROR, CliError, fit_line, plural, terminal_width
from ulogstream.config.loader import load_settings
from ulogstream.download.backfill import BackfillError, merge_recordings
from ulogstream.download.ftp import files_for_entries
from ulogstream.errors import LinkError
from ulogstream.recorder.backfill import BackfillOutcome, backfill_recording, completeness
from ulogstream.recorder.download import LogDownloader, log_path
from ulogstream.recorder.wiring import LinkParts, link_parts
from ulogstream.ulog.spec import MAGIC

REPLUG_WAIT_S = 300.0
"""How long ``download`` waits for an unplugged serial device to come back."""
REPLUG_POLL_S = 0.5
RECEIVE_BUFFER = 8 << 20
"""A download's UDP receive buffer: PX4 sends a log at ~8 MB/s on a loopback or Ethernet link,
faster than Python reads it in bursts (the kernel caps it at ``net.core.rmem_max``)."""

RADIO_BAUD_MAX = 230_400
"""Serial links this fast or slower are taken for a telemetry radio: ``download`` reads over
MAVLink FTP there (a USB autopilot's port is opened at 921600 and more; its baud means nothing)."""

UNFILLED_SHOWN = 10
"""Gaps left as they were that the backfill summary names one by one."""

if TYPE_CHECKING:
    import argparse
    from collections.abc import AsyncIterator, Callable
    from typing import TextIO

    from ulogstream.download.ftp import FtpFile
    from ulogstream.download.packets import LogEntry
    from ulogstream.recorder.download import DownloadedLog, Progress


def _add_link_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, help="TOML settings file for the [link] section")
    parser.add_argument("--sysid", type=int, help="our MAVLink system id (default 254)")
    parser.add_argument("--compid", type=int, help="our MAVLink component id (default 155)")
    parser.add_argument("--baud", type=int, help="serial baud rate (default 921600)")
    parser.add_argument("--signing-key-file", type=Path, help="MAVLink 2 signing key file")


def _link(args: argparse.Namespace) -> LinkParts:
    options = {
        "link.connection": args.connection,
        "link.sysid": args.sysid,
        "link.compid": args.compid,
        "link.baud": args.baud,
        "link.signing_key_file": args.signing_key_file,
    }
    settings = load_settings(args.config, {k: v for k, v in options.items() if v is not None})
    return link_parts(settings)


@contextlib.asynccontextmanager
async def _listed(
    parts: LinkParts, progress: Callable[[Progress], None] | None = None
) -> AsyncIterator[tuple[LogDownloader, tuple[LogEntry, ...]]]:
    """The link opened, the autopilot found and its logs listed; closed afterwards."""
    transport = await open_transport(parts.connection, receive_buffer=RECEIVE_BUFFER)
    try:
        async with LogDownloader(
            transport=transport, codec=parts.codec, progress=progress
        ) as downloader:
            yield downloader, await downloader.list_logs()
    finally:
        await transport.aclose()


def configure_download(parser: argparse.ArgumentParser) -> None:
    """``ulogstream download CONNECTION [--list | --latest | --id N | --all] --out DIR``."""
    parser.add_argument("connection", help="the vehicle's link, e.g. udpin:0.0.0.0:14540")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--list", action="store_true", help="list the vehicle's logs")
    which.add_argument(
        "--latest", action="store_true", help="download the newest log (the default)"
    )
    which.add_argument(
        "--id", type=int, action="append", dest="ids", metavar="N", help="download log N"
    )
    which.add_argument("--all", action="store_true", help="download every log")
    via = parser.add_mutually_exclusive_group()
    via.add_argument(
        "--ftp",
        action="store_const",
        const=True,
        dest="ftp",
        help="read the logs over MAVLink FTP (239 bytes a packet, not 90: about 15 %% faster on"
        " a radio; on PX4 over USB, UDP or Ethernet LOG_REQUEST_DATA is several times faster)."
        f" Default: FTP on a serial port at {RADIO_BAUD_MAX} baud or less (a telemetry radio),"
        " LOG_REQUEST_DATA elsewhere; without FTP on the vehicle, LOG_REQUEST_DATA",
    )
    via.add_argument(
        "--no-ftp", action="store_const", const=False, dest="ftp", help="use LOG_REQUEST_DATA"
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("downloads"),
        help="directory for the logs, as DIR/YYYY-MM-DD/HH_MM_SS.ulg (default ./downloads)",
    )
    _add_link_arguments(parser)


def run_download(args: argparse.Namespace) -> int:
    """List or download the vehicle's logs; a partial download is resumed by the next run.

    A serial device unplugged during a download is waited for (:data:`REPLUG_WAIT_S`), and
    the download resumes where it stopped once it is back; a device missing at the start is
    one error at once.
    """
    parts = _link(args)
    progress = ProgressBar(sys.stderr)
    linked = False

    async def fetch() -> int:
        nonlocal linked
        linked_before = linked
        async with _listed(parts, progress) as (downloader, entries):
            linked = True
            if args.list:
                sys.stdout.write(listing_text(entries))
                return 0
            wanted = chosen(entries, args)
            files = await _ftp_files(downloader, wanted, parts) if use_ftp(args, parts) else {}
            for entry in wanted:
                path = log_path(args.out, entry)
                if already_downloaded(path, entry.size) and linked_before:
                    continue  # finished before an unplug: said already
                try:
                    done = await downloader.download(entry, path, ftp=files.get(entry.id))
                finally:
                    progress.done()
                sys.stdout.write(downloaded_text(done) + "\n")
                sys.stdout.flush()
        return 0

    async def main() -> int:
        while True:
            try:
                return await fetch()
            except LinkError as err:
                device = parts.connection.device
                if not linked or args.list or device is None:
                    raise
                sys.stderr.write(
                    f"{err}\nwaiting up to {REPLUG_WAIT_S:.0f} s for {device} to come back; the "
                    "download then resumes where it stopped (Ctrl-C stops: a later run resumes "
                    "as well)\n"
                )
                await _until_present(Path(device), REPLUG_WAIT_S, err)

    return run_quietly(main())


def use_ftp(args: argparse.Namespace, parts: LinkParts) -> bool:
    """``--ftp``, ``--no-ftp``, else MAVLink FTP where it is the faster: a radio's serial port.

    On PX4 the log handler sends as fast as the link takes it, its FTP server at its loop's
    pace (0.8 MB/s on SITL); where the link is slower than that, FTP's larger packets win.
    """
    if args.ftp is not None:
        return bool(args.ftp)
    connection = parts.connection
    return connection.device is not None and (connection.baud or 0) <= RADIO_BAUD_MAX


async def _ftp_files(
    downloader: LogDownloader, entries: list[LogEntry], parts: LinkParts
) -> dict[int, FtpFile]:
    """The entries' files over MAVLink FTP; says which go by LOG_REQUEST_DATA instead, and why."""
    found = await downloader.list_ftp_files()
    if isinstance(found, str):
        sys.stderr.write(
            f"the vehicle on {parts.connection} gives no MAVLink FTP ({found}): "
            "downloading with LOG_REQUEST_DATA\n"
        )
        return {}
    files = files_for_entries(entries, found)
    missing = [str(entry.id) for entry in entries if entry.id not in files]
    if missing:
        sys.stderr.write(
            f"no file of the size of log {', '.join(missing)} is in the vehicle's log folder over"
            " MAVLink FTP: downloading it with LOG_REQUEST_DATA\n"
        )
    return files


async def _until_present(device: Path, limit_s: float, error: LinkError) -> None:
    """Wait until ``device`` exists again (plugged back in); ``error`` after ``limit_s``."""
    deadline = time.monotonic() + limit_s
    while not device.exists():  # noqa: ASYNC240 (one stat twice a second)
        if time.monotonic() > deadline:
            raise error
        await asyncio.sleep(REPLUG_POLL_S)
    await asyncio.sleep(REPLUG_POLL_S)  # udev links the device before it can be opened


def chosen(entries: tuple[LogEntry, ...], args: argparse.Namespace) -> list[LogEntry]:
    """The entries ``--latest``, ``--id`` or ``--all`` name.

    Raises:
        CliError: The vehicle has no logs, or no log has an id asked for.
    """
    if not entries:
        msg = "the vehicle has no logs"
        raise CliError(msg)
    if args.all:
        return list(entries)
    if args.ids:
        by_id = {entry.id: entry for entry in entries}
        unknown = [str(n) for n in args.ids if n not in by_id]
        if unknown:
            ids = ", ".join(str(entry.id) for entry in entries)
            msg = f"the vehicle has no log {', '.join(unknown)} (its logs: {ids}; see --list)"
            raise CliError(msg)
        return [by_id[n] for n in args.ids]
    # The newest by the vehicle's clock; PX4 lists in directory order, not by time.
    return [max(entries, key=lambda entry: (entry.time_utc, entry.id))]


def _when(entry: LogEntry) -> str:
    if entry.time_utc <= 0:
        return "(no time)"
    return datetime.fromtimestamp(entry.time_utc, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def listing_text(entries: tuple[LogEntry, ...]) -> str:
    """``--list``: one line per log (id, time, size), newest last."""
    if not entries:
        return "the vehicle has no logs\n"
    lines = [f"{'id':>5}  {'time':<23}  {'size':>10}"]
    lines += [
        f"{entry.id:>5}  {_when(entry):<23}  {entry.size / 1e6:>7.1f} MB"
        for entry in sorted(entries, key=lambda entry: (entry.time_utc, entry.id))
    ]
    return "".join(f"{line}\n" for line in lines)


def downloaded_text(done: DownloadedLog) -> str:
    """One line per log: where it went, and how fast."""
    entry = done.entry
    if not done.seconds:
        return f"log {entry.id} ({_when(entry)}) is already in {done.path}"
    fetched = entry.size - done.resumed
    rate = fetched / done.seconds if done.seconds > 0 else 0.0
    resumed = f", {done.resumed / 1e6:.1f} MB of it resumed" if done.resumed else ""
    return (
        f"log {entry.id} ({_when(entry)}, {entry.size / 1e6:.1f} MB{resumed}) -> {done.path} "
        f"in {done.seconds:.1f} s ({rate / 1e6:.2f} MB/s, {plural(done.requests, 'request')}"
        f"{', MAVLink FTP' if done.ftp else ''})"
    )


class ProgressBar:
    """The download's progress on a terminal: percent, MB, rate and time left (silent elsewhere).

    Args:
        out: The terminal (stderr).
    """

    def __init__(self, out: TextIO) -> None:
        self._out = out
        self._enabled = out.isatty()
        self._shown = False
        self._started = time.monotonic()

    def __call__(self, progress: Progress) -> None:
        """Redraw the line."""
        if not self._enabled:
            return
        entry = progress.entry
        size = max(entry.size, 1)
        percent = progress.held * 100 // size
        width = 20
        bar = "#" * (progress.held * width // size)
        left = ""
        if progress.rate > 0:
            left = f", {(entry.size - progress.held) / progress.rate:.0f} s left"
        line = (
            f"log {entry.id} [{bar:<{width}}] {percent:3d}% {progress.held / 1e6:.1f} of "
            f"{entry.size / 1e6:.1f} MB at {progress.rate / 1e6:.2f} MB/s{left}"
        )
        self._out.write("\r\x1b[K" + fit_line(line, terminal_width(self._out)))
        self._out.flush()
        self._shown = True

    def done(self) -> None:
        """End the line so later output starts on a fresh one."""
        if self._shown:
            self._out.write("\n")
            self._out.flush()
            self._shown = False


def configure_backfill(parser: argparse.ArgumentParser) -> None:
    """``ulogstream backfill FILE [FILE...] CONNECTION [--id N] [--to-end] [--max-mb M]``."""
    parser.add_argument(
        "files",
        type=Path,
        nargs="+",
        metavar="FILE.ulg",
        help="a recording with gaps, or the recordings of one flight (its stream restarted),"
        " oldest first: merged into the first (the others are kept)",
    )
    parser.add_argument("connection", help="the vehicle's link, e.g. udpin:0.0.0.0:14540")
    parser.add_argument(
        "--id", type=int, dest="log_id", metavar="N", help="the SD log to use (default: found)"
    )
    parser.add_argument(
        "--no-start",
        action="store_true",
        help="do not put back what the SD log has before the recording's first data (an SD log"
        " from boot holds the whole time on the ground)",
    )
    parser.add_argument(
        "--to-end",
        action="store_true",
        help="also put back what the SD log has after the recording's end (its stream was lost"
        " before the flight ended)",
    )
    parser.add_argument(
        "--max-mb",
        type=float,
        default=200.0,
        help="read at most this many MB over the link (default 200; a radio: a few)",
    )
    _add_link_arguments(parser)


def run_backfill(args: argparse.Namespace) -> int:
    """Put back a recording's gaps (and start) from the vehicle's SD log of the same flight."""
    files: list[Path] = args.files
    path = files[0]
    try:
        ended_at = max(file.stat().st_mtime for file in files)
        for file in files:  # before the link: a wrong file is said at once
            with file.open("rb") as stream:
                if not stream.read(len(MAGIC)).startswith(MAGIC):
                    msg = f"{file} is not a ULog file: backfill completes recordings (.ulg)"
                    raise CliError(msg)
    except OSError as err:
        msg = f"cannot read {err.filename}: {err.strerror or err}"
        raise CliError(msg) from err
    parts = _link(args)
    if len(files) > 1:
        try:
            merged = merge_recordings([file.read_bytes() for file in files])
        except BackfillError as err:
            msg = f"cannot merge {', '.join(map(str, files))}: {err}"
            raise CliError(msg) from err
        merge_into(path, files[1:], merged, remove=False)
        kept = ", ".join(str(file) for file in files[1:])
        sys.stdout.write(
            f"{path}: {len(files)} recordings of the flight merged into it ({kept} kept as they"
            " are: their data is in it now)\n"
        )

    async def main() -> BackfillOutcome:
        async with _listed(parts) as (downloader, listed):
            entries = listed
            if args.log_id is not None:
                entries = tuple(e for e in listed if e.id == args.log_id)
                if not entries:
                    msg = f"the vehicle has no log {args.log_id} (see download --list)"
                    raise CliError(msg)
            return await backfill_recording(
                downloader,
                path,
                entries,
                ended_at=ended_at,
                max_bytes=int(args.max_mb * 1e6),
                fill_start=not args.no_start,
                fill_end=args.to_end,
            )

    started = time.monotonic()
    outcome = run_quietly(main())
    complete = completeness(path) if outcome.entry is not None else ""
    sys.stdout.write(backfill_text(path, outcome, time.monotonic() - started, complete))
    return 0 if outcome.entry is not None else EXIT_ERROR


def backfill_text(path: Path, outcome: BackfillOutcome, seconds: float, complete: str = "") -> str:
    """What a backfill put back, from where, what it could not, and how ``complete`` it is."""
    result = outcome.result
    read = f"{outcome.fetched / 1e6:.2f} MB read over the link in {seconds:.1f} s"
    if outcome.entry is None:
        if outcome.budget_reached:
            return (
                f"{path}: the byte budget (--max-mb) ran out before its flight was found on the "
                f"vehicle's SD card; the file is unchanged ({read})\n"
            )
        return f"{path}: its flight is not on the vehicle's SD card ({read})\n"
    entry = outcome.entry
    parts = []
    if result.start_bytes:
        parts.append(f"the start ({result.start_bytes / 1e3:.1f} kB)")
    if result.gaps_filled:
        parts.append(plural(result.gaps_filled, "gap"))
    if result.end_bytes:
        parts.append(f"the end ({result.end_bytes / 1e3:.1f} kB)")
    if parts:
        summary = (
            f"{path}: {', '.join(parts)} put back from SD log {entry.id} ({_when(entry)}): "
            f"+{result.added / 1e3:.1f} kB ({result.rows_backfilled} rows to the "
            f"{result.rows_streamed} streamed), now {outcome.size / 1e6:.2f} MB; {read}"
        )
        lines = [summary]
    else:
        lines = [f"{path}: nothing to put back from SD log {entry.id}; {read}"]
    shown = result.unfilled[:UNFILLED_SHOWN]
    lines += [f"  still missing: {text}" for text in shown]
    if len(result.unfilled) > len(shown):
        lines.append(f"  still missing: {len(result.unfilled) - len(shown)} more")
    if outcome.budget_reached:
        lines.append("  the byte budget (--max-mb) ran out: run again with a larger one")
    if complete:
        lines.append(f"  {complete}")
    return "".join(f"{line}\n" for line in lines)
