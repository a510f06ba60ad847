"""The ``ulogstream`` command line: one small function per subcommand.

To add a subcommand, write ``_configure_x(parser)`` (its arguments) and ``_run_x(args) -> int``
and list them in :data:`SUBCOMMANDS`. Bad input (a missing file, a file that is not a ULog
log, an unwritable output) is reported as one ``ulogstream: error: ...`` line on stderr and a
non-zero exit status; ``UlogstreamError`` and ``OSError`` never reach the user as tracebacks.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import logging
import os
import shutil
import signal
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, NoReturn, Protocol, TextIO, TypeVar

from ulogstream import __version__
from ulogstream.adapters.connection import parse_connection
from ulogstream.adapters.file_sink import MB
from ulogstream.adapters.sd_notify import Notifier
from ulogstream.config import (
    COMMAND_LINE,
    FOXGLOVE_DEFAULT_PORT,
    Settings,
    load_settings,
    parse_override,
)
from ulogstream.daemon import (
    Recorder,
    fit_line,
    publish_settings,
    sink_settings,
    terminal_width,
)
from ulogstream.errors import ConfigError, ULogFormatError, UlogstreamError
from ulogstream.ulog.dtypes import compile_format
from ulogstream.ulog.events import (
    DataRows,
    Dropout,
    FileHeader,
    FlagBits,
    FormatDefined,
    Info,
    InfoMultiple,
    InfoValue,
    LoggedString,
    Parameter,
    ParameterDefault,
    Subscription,
    Truncated,
    ULogEvent,
)
from ulogstream.ulog.problems import Problems
from ulogstream.ulog.spec import log_level_name

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine, Sequence

    import numpy as np
    import numpy.typing as npt

T = TypeVar("T")

PROG = "ulogstream"
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
EXPORT_FORMATS = ("csv", "rosbag", "mcap")


class CliError(UlogstreamError):
    """A command that cannot be carried out; the message says what to do about it."""


class _ArgumentParser(argparse.ArgumentParser):
    """argparse, with usage errors on one line like every other error."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{PROG}: error: {message} (see '{self.prog} --help')\n")


@dataclass(frozen=True, slots=True)
class Subcommand:
    """One ``ulogstream NAME`` command.

    Attributes:
        name: What the user types.
        help: One line for ``ulogstream --help``.
        configure: Adds the command's arguments to its parser.
        run: Carries the command out; returns the exit status.
    """

    name: str
    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


# ---------------------------------------------------------------------------------------------
# Reading a log once, streaming, into what the file tools show.


@dataclass(slots=True)
class TopicSummary:
    """Data messages of one topic instance in a log file (``info``/``topics``; not live stats)."""

    message_size: int
    count: int = 0
    first_us: int | None = None
    last_us: int | None = None

    def rate_hz(self) -> float | None:
        """Mean rate between the first and last message, None with fewer than two."""
        if self.first_us is None or self.last_us is None or self.last_us <= self.first_us:
            return None
        return (self.count - 1) / ((self.last_us - self.first_us) / 1e6)


@dataclass(slots=True)
class LogSummary:
    """Everything the file tools show about a log, gathered in one streaming pass."""

    path: Path
    size: int
    version: int = 0
    start_us: int = 0
    last_us: int = 0
    flag_bits: FlagBits | None = None
    formats: dict[str, FormatDefined] = field(default_factory=dict)
    info: dict[str, InfoValue] = field(default_factory=dict)
    info_multiple: dict[str, list[list[InfoValue]]] = field(default_factory=dict)
    initial_parameters: dict[str, int | float] = field(default_factory=dict)
    changed_parameters: list[Parameter] = field(default_factory=list)
    default_parameters: list[ParameterDefault] = field(default_factory=list)
    logged: list[LoggedString] = field(default_factory=list)
    dropouts: list[Dropout] = field(default_factory=list)
    problems: Problems = field(default_factory=Problems)
    topics: dict[tuple[str, int], TopicSummary] = field(default_factory=dict)

    def add(self, event: ULogEvent) -> None:
        """Take one parser event into account."""
        match event:
            case DataRows(subscription, _, stamps):
                self._add_rows(subscription, stamps)
            case FileHeader(version, timestamp_us):
                self.version, self.start_us, self.last_us = version, timestamp_us, timestamp_us
            case FlagBits():
                self.flag_bits = event
            case Info(key, _, value, _):
                self.info[key] = value
            case InfoMultiple(key, _, value, is_continued, _):
                pieces = self.info_multiple.setdefault(key, [])
                if is_continued and pieces:
                    pieces[-1].append(value)
                else:
                    pieces.append([value])
            case Parameter(name, value, None):
                self.initial_parameters[name] = value
            case Parameter():
                self.changed_parameters.append(event)
            case ParameterDefault():
                self.default_parameters.append(event)
            case LoggedString():
                self.logged.append(event)
            case Dropout():
                self.dropouts.append(event)
            case FormatDefined():
                self.formats[event.name] = event
            case Subscription(_, multi_id, name, dtype):
                if (name, multi_id) not in self.topics:
                    self.topics[name, multi_id] = TopicSummary(self._wire_size(name, dtype))
            case _:
                self.problems.add(event)

    def _wire_size(self, name: str, dtype: np.dtype[np.void]) -> int:
        """Bytes of one sample in the file: PX4 leaves out the trailing padding."""
        try:
            compiled = compile_format(name, self.formats)
        except UlogstreamError:
            return dtype.itemsize
        return compiled.size - compiled.trailing_padding

    def _add_rows(self, subscription: Subscription, stamps: npt.NDArray[np.uint64]) -> None:
        key = (subscription.name, subscription.multi_id)
        stats = self.topics.get(key)
        if stats is None:
            stats = self.topics[key] = TopicSummary(self._wire_size(key[0], subscription.dtype))
        if len(stamps) == 0:
            return
        first, last = int(stamps[0]), int(stamps[-1])
        stats.count += len(stamps)
        stats.first_us = first if stats.first_us is None else min(stats.first_us, first)
        stats.last_us = last if stats.last_us is None else max(stats.last_us, last)
        self.last_us = max(self.last_us, last)


def summarize(path: Path) -> LogSummary:
    """Read the whole log at ``path`` into a :class:`LogSummary`.

    Raises:
        CliError: The file cannot be read or is not a ULog file this parser accepts.
    """
    _check_readable(path)
    try:
        size = path.stat().st_size
    except OSError as err:
        msg = f"cannot read {path}: {err.strerror} (check the path)"
        raise CliError(msg) from err
    summary = LogSummary(path, size)
    from ulogstream.adapters.ulog_file import iter_events  # noqa: PLC0415 (numpy only where rows are read)

    for event in iter_events(path):
        summary.add(event)
    return summary


# ---------------------------------------------------------------------------------------------
# Formatting helpers.


def hms(seconds: float) -> str:
    """``h:mm:ss`` of a non-negative duration (whole seconds, like pyulog)."""
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours:d}:{minutes:02d}:{secs:02d}"


def version_string(release: int) -> str:
    """A PX4 ``ver_sw_release`` word as ``vX.Y.Z`` plus its type.

    The low byte is the type: below 64 development, below 128 alpha, below 192 beta,
    below 255 release candidate, 255 release (PX4's ``px4_firmware_version``).
    """
    major, minor, patch, kind = (
        (release >> 24) & 0xFF,
        (release >> 16) & 0xFF,
        (release >> 8) & 0xFF,
        release & 0xFF,
    )
    if kind < 64:  # noqa: PLR2004
        label = " (dev)"
    elif kind < 128:  # noqa: PLR2004
        label = " (alpha)"
    elif kind < 192:  # noqa: PLR2004
        label = " (beta)"
    elif kind < 255:  # noqa: PLR2004
        label = " (RC)"
    else:
        label = ""
    return f"v{major}.{minor}.{patch}{label}"


def value_text(value: InfoValue) -> str:
    """An info or parameter value as text; floats (float32 on the wire) in their shortest form."""
    if isinstance(value, bytes):
        return value.hex(" ")
    if isinstance(value, float):
        import numpy as np  # noqa: PLC0415 (numpy only where rows are read)

        return str(np.float32(value)) if np.float32(value) == value else str(value)
    return str(value)


def _joined(pieces: list[InfoValue]) -> str:
    """An 'M' value with its continued pieces: text joined, anything else listed."""
    if all(isinstance(p, str) for p in pieces):
        return "".join(str(p) for p in pieces)
    return " ".join(value_text(p) for p in pieces)


# ---------------------------------------------------------------------------------------------
# info


def _configure_info(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", type=Path, help="the ULog file (.ulg)")
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="also show perf_* info and every multi-info ('M') value in full",
    )
    parser.add_argument(
        "--nonempty",
        action="store_true",
        help="list only topic instances that logged data (PX4 subscribes to many that never do)",
    )


def _run_info(args: argparse.Namespace) -> int:
    summary = summarize(args.file)
    write_info(summary, sys.stdout, verbose=bool(args.verbose), nonempty=bool(args.nonempty))
    return 0


def write_info(
    summary: LogSummary, out: TextIO, *, verbose: bool = False, nonempty: bool = False
) -> None:
    """Print an overview of a log, in the spirit of pyulog's ``ulog_info``."""
    duration = max(0, summary.last_us - summary.start_us) / 1e6
    out.write(f"File: {summary.path} ({summary.size} bytes, ULog version {summary.version})\n")
    out.write(f"Logging start time: {hms(summary.start_us / 1e6)}, duration: {hms(duration)}\n")
    release = summary.info.get("ver_sw_release")
    if isinstance(release, int) and not isinstance(release, bool):
        out.write(f"SW version: {version_string(release)}\n")
    if summary.flag_bits is not None:
        bits = summary.flag_bits
        out.write(
            f"Flag bits: compat 0x{bits.compat_flags.hex()}, incompat 0x{bits.incompat_flags.hex()}"
        )
        appended = [offset for offset in bits.appended_offsets if offset]
        out.write(f", data appended at {appended}\n" if appended else "\n")
    _write_problems(summary, out)

    out.write("Info:\n")
    for key in sorted(summary.info):
        if verbose or not key.startswith("perf_"):
            value = summary.info[key]
            release = ""
            if key.endswith("_release") and type(value) is int:
                release = f" ({version_string(value)})"
            out.write(f" {key}: {value_text(value)}{release}\n")
    if summary.info_multiple:
        if verbose:
            out.write("Info multiple:\n")
            for key in sorted(summary.info_multiple):
                for index, pieces in enumerate(summary.info_multiple[key]):
                    out.write(f" {key} [{index}]:\n")
                    out.writelines(f"   {line}\n" for line in _joined(pieces).splitlines())
        else:
            counts = ", ".join(
                f"{key}: {len(values)}" for key, values in sorted(summary.info_multiple.items())
            )
            out.write(f"Info multiple: {counts} (--verbose shows them)\n")
    out.write(
        f"Parameters: {len(summary.initial_parameters)} initial,"
        f" {len(summary.changed_parameters)} changed,"
        f" {len(summary.default_parameters)} defaults\n"
    )
    tagged = sum(m.tag is not None for m in summary.logged)
    out.write(f"Logged messages: {len(summary.logged)} ({tagged} tagged)\n")

    out.write("\n")
    out.write(
        f"{'Topic (multi id, message size)':<50} {'messages':>9} {'rate Hz':>9} {'bytes':>11}\n"
    )
    empty = 0
    for (name, multi_id), stats in sorted(summary.topics.items()):
        if nonempty and not stats.count:
            empty += 1
            continue
        rate = stats.rate_hz()
        rate_text = "-" if rate is None else f"{rate:.1f}"
        label = f"{name} ({multi_id}, {stats.message_size})"
        out.write(
            f" {label:<49} {stats.count:>9d} {rate_text:>9}"
            f" {stats.count * stats.message_size:>11d}\n"
        )
    if empty:
        out.write(f" ({_plural(empty, 'subscribed topic instance')} without data not shown)\n")


def _write_problems(summary: LogSummary, out: TextIO) -> None:
    if summary.dropouts:
        durations = [d.duration_ms for d in summary.dropouts]
        out.write(
            f"Dropouts: count {len(durations)}, total {sum(durations) / 1000:.1f} s,"
            f" max {max(durations)} ms, mean {sum(durations) // len(durations)} ms\n"
        )
    else:
        out.write("Dropouts: none\n")
    problems = summary.problems
    if problems.corruption:
        offsets = ", ".join(str(c.offset) for c in problems.corruption[:10])
        more = ", ..." if len(problems.corruption) > 10 else ""  # noqa: PLR2004
        out.write(
            f"Corruption: {len(problems.corruption)} region(s), {problems.corrupt_bytes} bytes"
            f" skipped, at offsets {offsets}{more}\n"
        )
    else:
        out.write("Corruption: none\n")
    if problems.data_without_subscription:
        ids = ", ".join(
            f"msg_id {msg_id}: {count}"
            for msg_id, count in sorted(problems.data_without_subscription.items())
        )
        out.write(
            f"Data without subscription: {problems.rows_without_subscription} message(s)"
            f" ({ids}), not readable: their 'A' message was lost\n"
        )
    truncated = problems.truncated
    if truncated is not None:
        out.write(
            f"Truncated: the log ends {truncated.size} bytes into a message at offset"
            f" {truncated.offset}\n"
        )


# ---------------------------------------------------------------------------------------------
# messages


def _configure_messages(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", type=Path, help="the ULog file (.ulg)")


def _run_messages(args: argparse.Namespace) -> int:
    path: Path = args.file
    _check_readable(path)
    start_us: int | None = None
    shown = 0
    truncated: Truncated | None = None
    from ulogstream.adapters.ulog_file import iter_events  # noqa: PLC0415 (numpy only where rows are read)

    for event in iter_events(path):
        if isinstance(event, FileHeader):
            start_us = event.timestamp_us
        elif isinstance(event, LoggedString):
            sys.stdout.write(format_logged_string(event, start_us or 0) + "\n")
            shown += 1
        elif isinstance(event, Truncated):
            truncated = event
    _warn_truncated(path, truncated)
    if not shown:
        _warn(f"{path}: no logged messages")
    return 0


def _check_readable(path: Path) -> None:
    """One clear line for a path that is not a file to read (a folder, nothing at all)."""
    if path.is_dir():
        msg = f"{path} is a directory, not a ULog file (name a .ulg file)"
        raise CliError(msg)
    if not path.exists():
        msg = f"{path}: no such file (check the path)"
        raise CliError(msg)


def _warn(text: str) -> None:
    sys.stdout.flush()
    sys.stderr.write(f"{PROG}: warning: {text}\n")


def _warn_truncated(path: Path, truncated: Truncated | None) -> None:
    if truncated is not None:
        _warn(
            f"{path} is truncated: it ends {truncated.size} bytes into a message at byte"
            f" {truncated.offset}; shown is what comes before"
        )


def format_logged_string(message: LoggedString, start_us: int) -> str:
    """``seconds since start  LEVEL  [tag N] text``; times before the start print negative."""
    seconds = (message.timestamp_us - start_us) / 1e6
    tag = "" if message.tag is None else f"[tag {message.tag}] "
    return f"{seconds:10.3f} {log_level_name(message.level):<7} {tag}{message.text}"


# ---------------------------------------------------------------------------------------------
# params


def _configure_params(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", type=Path, help="the ULog file (.ulg)")
    parser.add_argument(
        "-c", "--changes", action="store_true", help="show changes made during the log, with time"
    )
    parser.add_argument(
        "-d",
        "--defaults",
        action="store_true",
        help="show default values ('Q'), as system and/or current-setup defaults",
    )
    parser.add_argument(
        "-a", "--all", action="store_true", help="show initial values, changes and defaults"
    )


def _run_params(args: argparse.Namespace) -> int:
    summary = summarize(args.file)
    _warn_truncated(args.file, summary.problems.truncated)
    if not (summary.initial_parameters or summary.changed_parameters or summary.default_parameters):
        _warn(f"{args.file}: no parameters")
    show_all = bool(args.all)
    changes = show_all or bool(args.changes)
    defaults = show_all or bool(args.defaults)
    initial = show_all or not (changes or defaults)
    sections = initial + changes + defaults
    out = sys.stdout
    if initial:
        if sections > 1:
            out.write("# initial values\n")
        for name in sorted(summary.initial_parameters):
            out.write(f"{name} {value_text(summary.initial_parameters[name])}\n")
    if changes:
        if sections > 1:
            out.write("# changes (seconds since start)\n")
        for change in summary.changed_parameters:
            seconds = ((change.timestamp_us or summary.start_us) - summary.start_us) / 1e6
            out.write(f"{seconds:.3f} {change.name} {value_text(change.value)}\n")
    if defaults:
        if sections > 1:
            out.write("# defaults\n")
        for default in sorted(summary.default_parameters, key=lambda d: d.name):
            kinds = default_kinds(default.default_types)
            out.write(f"{default.name} {value_text(default.value)} {kinds}\n")
    return 0


def default_kinds(default_types: int) -> str:
    """Name the bits of a 'Q' ``default_types`` byte (bit 0 system, bit 1 current setup)."""
    kinds = [
        name for bit, name in ((0x01, "system"), (0x02, "current_setup")) if default_types & bit
    ]
    unknown = default_types & ~0x03
    if unknown:
        kinds.append(f"0x{unknown:02x}")
    return ",".join(kinds) or "none"


# ---------------------------------------------------------------------------------------------
# export


def _configure_export(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", type=Path, help="the ULog file (.ulg)")
    parser.add_argument(
        "-f",
        "--format",
        choices=EXPORT_FORMATS,
        help="csv: one file per topic instance, as pyulog's ulog2csv; rosbag: a ROS 1 bag;"
        " mcap: an MCAP file with ROS 2 messages (default: from OUT's extension, .bag or .mcap;"
        " csv for a folder)",
    )
    where = "csv: the output directory (created if missing); rosbag/mcap: the file to create"
    parser.add_argument("output", type=Path, nargs="?", metavar="OUT", help=where)
    parser.add_argument("-o", "--out", type=Path, help=f"the same as OUT ({where})")


EXTENSION_FORMATS = {".mcap": "mcap", ".bag": "rosbag"}
"""The export format an output file's extension names."""


def export_format(chosen: str | None, dst: Path) -> str:
    """The format to write ``dst`` in: ``--format``, else the one its extension names.

    Raises:
        CliError: No ``--format`` and an extension that names no format (``out.json``).
    """
    named = EXTENSION_FORMATS.get(dst.suffix.lower())
    if chosen is None:
        if named is not None:
            return named
        if dst.suffix and not dst.is_dir():
            msg = (
                f"cannot tell the export format from {dst.name!r}: name a .mcap or .bag file,"
                " or a folder for CSV, or choose one with --format csv|rosbag|mcap"
            )
            raise CliError(msg)
        return "csv"
    if named is not None and named != chosen:
        _warn(f"writing {chosen} to {dst}, whose extension says {named}")
    elif chosen == "csv" and dst.suffix.lower() == ".csv" and not dst.is_dir():
        _warn(f"CSV export writes a folder of files: {dst} is created as a folder")
    return chosen


def _run_export(args: argparse.Namespace) -> int:
    src: Path = args.file
    dst: Path = args.output if args.output is not None else args.out
    _check_readable(src)
    args.format = export_format(args.format, dst)
    if args.format != "csv" and dst.exists():
        msg = f"{dst} already exists (remove it or choose another --out)"
        raise CliError(msg)
    existed = dst.exists()
    progress = ProgressLine(sys.stderr, f"exporting {src.name}")
    try:
        if args.format == "csv":
            from ulogstream.export.csv import export_csv  # noqa: PLC0415 (loaded by the command that needs it: start-up time)

            result = export_csv(src, dst, progress=progress)
            progress.done()
            sys.stdout.write(
                f"wrote {len(result.files)} CSV files ({result.rows} rows) to {result.directory}\n"
            )
            for problem in result.problems:
                sys.stderr.write(f"{PROG}: warning: {src}: {problem}\n")
        else:
            summary = _ros_exporter(str(args.format))(src, dst, progress=progress)
            progress.done()
            sys.stdout.write(
                f"wrote {dst}: {summary.topics} topics, {summary.data_messages} messages,"
                f" {summary.log_messages} log lines, {summary.parameter_messages} parameters\n"
            )
            for problem in summary.problems:
                _warn(f"{src}: {problem}")
            if summary.problem_count > len(summary.problems):
                _warn(f"{src}: ... and {summary.problem_count - len(summary.problems)} more")
            if not summary.data_messages:
                _warn(f"{src}: no data messages were exported (the log holds none)")
    except ULogFormatError as err:
        if not existed:
            _remove_failed_output(dst)
        msg = f"cannot read {src}: {err}"
        raise CliError(msg) from err
    finally:
        progress.done()
    return 0


def _remove_failed_output(path: Path) -> None:
    """Take back what a failed export made: its output file, or its folder while still empty."""
    with contextlib.suppress(OSError):
        if path.is_dir():
            path.rmdir()  # only when empty: files already written stay
        else:
            path.unlink(missing_ok=True)


class _RosSummary(Protocol):
    """What the CLI reads of a rosbag/mcap export summary."""

    @property
    def topics(self) -> int: ...
    @property
    def data_messages(self) -> int: ...
    @property
    def log_messages(self) -> int: ...
    @property
    def parameter_messages(self) -> int: ...
    @property
    def problems(self) -> tuple[str, ...]: ...
    @property
    def problem_count(self) -> int: ...


class _RosExporter(Protocol):
    """The signature of ``export_rosbag`` and ``export_mcap``."""

    def __call__(
        self, src: Path, dst: Path, *, progress: Callable[[int, int], None] | None = None
    ) -> _RosSummary: ...


def _ros_exporter(kind: str) -> _RosExporter:
    """The rosbag or mcap exporter, imported on use: they need the optional export extras."""
    try:
        if kind == "rosbag":
            from ulogstream.export.rosbag import export_rosbag  # noqa: PLC0415

            return export_rosbag
        from ulogstream.export.mcap import export_mcap  # noqa: PLC0415
    except ImportError as err:
        msg = f"{kind} export needs the optional packages: pip install 'ulogstream[export]' ({err})"
        raise CliError(msg) from err
    return export_mcap


class ProgressLine:
    """A one-line progress indicator, ``progress(done, total)``; silent when not on a terminal.

    Args:
        out: Where to draw it (stderr).
        label: What is in progress.
    """

    def __init__(self, out: TextIO, label: str) -> None:
        self._out = out
        self._label = label
        self._shown = False
        self._last_percent = -1
        self._enabled = out.isatty()

    def __call__(self, done: int, total: int) -> None:
        """Redraw the line when the whole percentage changed."""
        if not self._enabled:
            return
        percent = 100 if total <= 0 else min(100, done * 100 // total)
        if percent == self._last_percent:
            return
        self._last_percent = percent
        self._shown = True
        line = f"{self._label}: {percent:3d}% ({done / 1e6:.1f} of {total / 1e6:.1f} MB)"
        self._out.write("\r\x1b[K" + fit_line(line, terminal_width(self._out)))
        self._out.flush()

    def done(self) -> None:
        """End the line so that later output starts on a fresh one."""
        if self._shown:
            self._out.write("\n")
            self._out.flush()
            self._shown = False


# ---------------------------------------------------------------------------------------------
# Live commands: record, run, sim, replay, demo.


class _TerminalHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Log lines on a terminal: clear the status line first, so the two never mix."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream.write("\r\x1b[K")
        super().emit(record)


def _setup_logging(level: str, *, terminal: bool) -> None:
    """Human lines on a terminal; ``<priority>``-prefixed lines for the systemd journal."""
    root = logging.getLogger()
    root.handlers.clear()
    if terminal:
        handler: logging.Handler = _TerminalHandler(sys.stderr)
        handler.setFormatter(
            logging.Formatter("%(asctime)s %(levelname)-7s %(message)s", "%H:%M:%S")
        )
    else:
        handler = logging.StreamHandler(sys.stderr)
        journal = "JOURNAL_STREAM" in os.environ
        handler.setFormatter(
            _JournalFormatter()
            if journal
            else logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
        )
    root.addHandler(handler)
    root.setLevel(level.upper())


class _JournalFormatter(logging.Formatter):
    """``<N>`` syslog priority prefixes that journald turns into the entry's priority."""

    _PRIORITIES: ClassVar[dict[int, int]] = {
        logging.CRITICAL: 2,
        logging.ERROR: 3,
        logging.WARNING: 4,
        logging.INFO: 6,
        logging.DEBUG: 7,
    }

    def format(self, record: logging.LogRecord) -> str:
        return f"<{self._PRIORITIES.get(record.levelno, 6)}>{super().format(record)}"


def _add_link_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config", type=Path, help="TOML settings file (see configs/ulogstream.toml)"
    )
    parser.add_argument(
        "--out",
        type=Path,
        help="directory for the recordings (default: ./recordings, or recording.out_dir of"
        " --config); created if missing, checked at start-up",
    )
    parser.add_argument("--sysid", type=int, help="our MAVLink system id (default 254)")
    parser.add_argument("--compid", type=int, help="our MAVLink component id (default 155)")
    parser.add_argument(
        "--target-sysid",
        type=int,
        help="record only this autopilot (default: every one on the link)",
    )
    parser.add_argument(
        "--baud",
        type=int,
        help="serial baud rate unless CONNECTION names one (default 921600; USB ignores it)",
    )
    parser.add_argument("--signing-key-file", type=Path, help="MAVLink 2 signing key file")
    parser.add_argument(
        "--idle-timeout",
        type=float,
        help="seconds an open log waits for its data through a link outage (default 30)",
    )
    parser.add_argument("--min-free-mb", type=int, help="stop recording below this free space")
    parser.add_argument(
        "--mqtt", metavar="URL", help="publish live to mqtt://HOST[:PORT] or mqtts://"
    )
    parser.add_argument("--mqtt-rate", type=float, help="default samples/s per topic (0 = all)")
    parser.add_argument(
        "--vehicle-id",
        help="vehicle id (MQTT topics, recording folder), or a template of {hostname} {link} "
        "{sysid} {sys_uuid} (default {sys_uuid}: the autopilot's, from its last log; "
        "{hostname}-{link}-sysid{sysid} until one is known)",
    )
    parser.add_argument(
        "--foxglove",
        metavar="[HOST:]PORT",
        help="serve a live view to Foxglove at ws://HOST:PORT (host default 127.0.0.1)",
    )
    parser.add_argument(
        "--foxglove-rate", type=float, help="Foxglove samples/s per topic (default 10, 0 = all)"
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any setting, e.g. --set mqtt.rates.vehicle_attitude=50 (repeatable)",
    )
    parser.add_argument("--no-status", action="store_true", help="no live status line")


def _settings(args: argparse.Namespace, *, connection: str | None = None) -> Settings:
    overrides: dict[str, object] = dict(parse_override(text) for text in args.overrides)
    options = {
        "link.connection": connection,
        "link.sysid": args.sysid,
        "link.compid": args.compid,
        "link.target_sysid": args.target_sysid,
        "link.baud": args.baud,
        "link.signing_key_file": args.signing_key_file,
        "recording.out_dir": args.out,
        "recording.idle_timeout_s": args.idle_timeout,
        "recording.min_free_mb": args.min_free_mb,
        "mqtt.url": args.mqtt,
        "mqtt.default_rate_hz": args.mqtt_rate,
        "mqtt.vehicle_id": args.vehicle_id,
        "foxglove.enabled": True if args.foxglove is not None else None,
        "foxglove.listen": args.foxglove,
        "foxglove.default_rate_hz": args.foxglove_rate,
    }
    overrides.update({key: value for key, value in options.items() if value is not None})
    if args.config is None and args.out is None and "recording.out_dir" not in overrides:
        overrides["recording.out_dir"] = Path("recordings")  # not /var/lib outside systemd
    settings = load_settings(args.config, overrides)
    try:
        parse_connection(settings.link.connection, default_baud=settings.link.baud)
    except ConfigError as err:
        # Name where the string came from, as the other settings' errors do.
        source = COMMAND_LINE if "link.connection" in overrides else args.config
        msg = f"{source}: link.connection: {err}"
        raise ConfigError(msg) from None
    return settings


def check_output_dir(path: Path) -> None:
    """Make sure recordings can be written to ``path`` before the vehicle talks.

    Creates the directory when missing and writes and removes a probe file in it.

    Raises:
        CliError: ``path`` is a file, cannot be created or cannot be written; the message names
            the path, the cause in words and what to do.
    """
    what_to_do = "choose another directory with --out or recording.out_dir"
    if path.exists() and not path.is_dir():
        msg = f"recordings directory {path} is a file, not a directory ({what_to_do})"
        raise CliError(msg)
    try:
        path.mkdir(parents=True, exist_ok=True)
        handle, probe = tempfile.mkstemp(prefix=".ulogstream-probe-", dir=path)
        os.close(handle)
        Path(probe).unlink()
    except OSError as err:
        msg = f"recordings cannot be written to {path}: {os_error_text(err)} ({what_to_do})"
        raise CliError(msg) from err


def warn_if_disk_full(path: Path, min_free_mb: int) -> None:
    """Warn at start-up when ``path``'s disk is already under ``recording.min_free_mb``."""
    try:
        free = shutil.disk_usage(path).free
    except OSError:
        return
    if free < min_free_mb * MB:
        logging.getLogger("ulogstream").warning(
            "only %d MB free on %s (recording.min_free_mb = %d): logs are not written until "
            "space is freed (the vehicle's stream is still acked)",
            free // MB,
            path,
            min_free_mb,
        )


def os_error_text(err: OSError) -> str:
    """The cause of ``err`` in words, without ``[Errno N]`` or the path."""
    reasons = {
        errno.EACCES: "permission denied (check who owns it and its mode)",
        errno.EPERM: "not permitted (check who owns it and its mode)",
        errno.EROFS: "the file system is read-only",
        errno.ENOSPC: "the disk is full",
        errno.ENOTDIR: "a part of the path is a file, not a directory",
        errno.EISDIR: "it is a directory",
        errno.ENOENT: "no such file or directory (check the path)",
        errno.EEXIST: "it already exists",
    }
    if err.errno in reasons:
        return reasons[err.errno]
    text = err.strerror or str(err)
    return text[:1].lower() + text[1:]


def run_quietly(main: Coroutine[object, object, T]) -> T:
    """``asyncio.run(main)``, then no task left behind to be destroyed while pending.

    aiomqtt connects in an executor thread, and paho's socket callbacks from that thread
    schedule a task on the loop (``Client._misc_loop``). A stop while a connection attempt is
    under way (a broker that is down, a double Ctrl-C) let that task be created while
    ``asyncio.run`` shut the executor down, so the loop closed with it pending: "Task was
    destroyed but it is pending!" and "coroutine ... was never awaited" at exit. Here the
    executor's threads finish first, then whatever they scheduled is cancelled and awaited.
    """
    with asyncio.Runner() as runner:
        try:
            return runner.run(main)
        finally:
            runner.run(_settle_background_work())


async def _settle_background_work() -> None:
    """Let executor threads finish; cancel and await the tasks left (see :func:`run_quietly`)."""
    loop = asyncio.get_running_loop()
    await loop.shutdown_default_executor()
    current = asyncio.current_task()
    late = [task for task in asyncio.all_tasks() if task is not current]
    for task in late:
        task.cancel()
    await asyncio.gather(*late, return_exceptions=True)


def _run_recorder(settings: Settings, *, once: bool, status_line: bool) -> int:
    terminal = sys.stderr.isatty()
    _setup_logging(settings.log.level, terminal=terminal)
    status = sys.stderr if terminal and status_line and settings.log.status_line else None
    with Notifier() as notifier:
        recorder = Recorder(settings, once=once, status_stream=status, notifier=notifier)
        check_output_dir(settings.recording.out_dir)  # after the settings' own checks
        warn_if_disk_full(settings.recording.out_dir, settings.recording.min_free_mb)
        code = run_quietly(recorder.run())
    sys.stdout.write("".join(f"{line}\n" for line in exit_summary(recorder)))
    return code


def exit_summary(recorder: Recorder) -> list[str]:
    """What ``record``/``run`` did, printed when they end: logs, bytes, losses, files, MQTT."""
    status = recorder.status
    finished = list(status.finished)
    size = sum(log.size for log in finished)
    logs = _plural(status.logs_finished, "log")
    first = (
        f"{logs} recorded ({size / 1e6:.2f} MB), {_plural(status.packets, 'packet')} received,"
        f" {status.packets_lost} lost in {_plural(status.gaps, 'gap')},"
        f" {_plural(status.dropouts, 'dropout')} marked"
    )
    if status.bytes_not_written:
        first += (
            f", {status.bytes_not_written / 1e6:.2f} MB not written: the disk was full or too slow"
        )
    lines = [first]
    lines += [f"  {log.path}" for log in finished[-10:]]
    if len(finished) > 10:  # noqa: PLR2004
        lines.insert(1, f"  ... {len(finished) - 10} earlier ones in {finished[0].path.parent}")
    publisher = recorder.publisher
    if publisher is not None:
        url = " or ".join(recorder.settings.mqtt.broker_urls())
        sink = publisher.sink
        if sink.published:
            lines.append(
                f"MQTT: {sink.published} messages published to {url} ({sink.dropped} dropped)"
            )
        elif sink.ever_connected:
            lines.append(f"MQTT: connected to {url}; nothing to publish (no vehicle streamed)")
        else:
            from ulogstream.demo import error_words  # noqa: PLC0415 (loaded by the command that needs it: start-up time)

            why = f" ({error_words(sink.last_error)})" if sink.last_error else ""
            lines.append(f"MQTT: the broker at {url} was never reached{why}: nothing published")
    return lines


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _configure_record(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "connection",
        metavar="CONNECTION",
        help="udpin:HOST:PORT, udpout:HOST:PORT, tcp:HOST:PORT, /dev/ttyACM0, /dev/ttyUSB0:921600",
    )
    parser.add_argument("--once", action="store_true", help="exit after the first log ends")
    _add_link_options(parser)


def _run_record(args: argparse.Namespace) -> int:
    settings = _settings(args, connection=args.connection)
    return _run_recorder(settings, once=args.once, status_line=not args.no_status)


def _configure_run(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--connection", help="override link.connection")
    _add_link_options(parser)


def _run_run(args: argparse.Namespace) -> int:
    settings = _settings(args, connection=args.connection)
    return _run_recorder(settings, once=False, status_line=not args.no_status)


# The simulator and the demo are imported by their own subcommands only: a recorder's start-up
# (on a companion computer, and in every whole-process benchmark) does not pay for them.


def _configure_sim(parser: argparse.ArgumentParser) -> None:
    from ulogstream.sim.runner import add_sim_arguments  # noqa: PLC0415 (see above)

    add_sim_arguments(parser)


def _run_sim(args: argparse.Namespace) -> int:
    from ulogstream.sim.runner import run_sim, sim_options_from_args  # noqa: PLC0415

    options = sim_options_from_args(args)
    _setup_logging("info", terminal=sys.stderr.isatty())

    async def serve() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        await run_sim(options, stop_event=stop)

    run_quietly(serve())
    return 0


def _configure_replay(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", type=Path, metavar="FILE", help="the .ulg to publish")
    parser.add_argument("--mqtt", metavar="URL", required=True, help="mqtt://HOST[:PORT]")
    parser.add_argument(
        "--speed",
        type=float,
        default=1.0,
        help="times the log's own pace (default 1); 0 = as fast as possible",
    )
    parser.add_argument("--config", type=Path, help="TOML settings for the [mqtt] section")
    parser.add_argument(
        "--vehicle-id", help="MQTT vehicle id (default: the log's sys_uuid, as record names it)"
    )
    parser.add_argument("--mqtt-rate", type=float, help="default samples/s per topic (0 = all)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")


def _run_replay(args: argparse.Namespace) -> int:
    if not args.file.is_file():
        msg = f"{args.file}: no such file"
        raise CliError(msg)
    overrides: dict[str, object] = dict(parse_override(text) for text in args.overrides)
    overrides["mqtt.url"] = args.mqtt
    if args.vehicle_id is not None:
        overrides["mqtt.vehicle_id"] = args.vehicle_id
    if args.mqtt_rate is not None:
        overrides["mqtt.default_rate_hz"] = args.mqtt_rate
    settings = load_settings(args.config, overrides)
    _setup_logging(settings.log.level, terminal=sys.stderr.isatty())
    from ulogstream.adapters.replay import replay_to_mqtt  # noqa: PLC0415 (loaded by the command that needs it: start-up time)
    from ulogstream.adapters.upload import read_sys_uuid  # noqa: PLC0415 (loaded by the command that needs it: start-up time)
    from ulogstream.demo import error_words  # noqa: PLC0415 (loaded by the command that needs it: start-up time)

    progress = ProgressLine(sys.stderr, f"replaying {args.file.name}")
    stats = run_quietly(
        replay_to_mqtt(
            args.file,
            mqtt=sink_settings(settings.mqtt),
            publish=publish_settings(settings.mqtt, sys_uuid=read_sys_uuid(args.file)),
            speed=args.speed if args.speed > 0 else None,
            progress=progress,
        )
    )
    progress.done()
    if not stats.published:
        why = f" ({error_words(stats.broker_error)})" if stats.broker_error else ""
        within = "" if stats.gave_up_after_s is None else f" in {stats.gave_up_after_s:.0f} s"
        msg = (
            f"the broker at {args.mqtt} was never reached{within}{why}: nothing was published"
            " (is it running? check the URL)"
        )
        raise CliError(msg)
    sys.stdout.write(
        f"published {stats.published} messages to {args.mqtt} covering"
        f" {stats.log_duration_s:.1f} s of log in {stats.elapsed_s:.1f} s\n"
    )
    if stats.unsent:
        _warn(f"{stats.unsent} messages were not delivered: the broker went away")
        return EXIT_ERROR
    return 0


def _configure_demo(parser: argparse.ArgumentParser) -> None:
    from ulogstream.demo import DemoOptions  # noqa: PLC0415 (only the demo needs it)

    defaults = DemoOptions()
    parser.add_argument("--out", type=Path, default=defaults.out_dir, help="recordings directory")
    parser.add_argument(
        "--duration", type=float, default=defaults.duration_s, help="seconds of flight"
    )
    parser.add_argument("--speed", type=float, default=defaults.speed, help="replay speed")
    parser.add_argument("--loss", type=float, default=defaults.loss, help="packet loss (0..1)")
    parser.add_argument("--seed", type=int, default=defaults.seed, help="random seed")
    parser.add_argument("--mqtt", metavar="URL", help="also publish live to this broker")
    parser.add_argument(
        "--foxglove",
        metavar="[HOST:]PORT",
        nargs="?",
        const=f"127.0.0.1:{FOXGLOVE_DEFAULT_PORT}",
        help=f"also serve a live view to Foxglove (default 127.0.0.1:{FOXGLOVE_DEFAULT_PORT})",
    )


def _run_demo(args: argparse.Namespace) -> int:
    from ulogstream.demo import DemoOptions, foxglove_hint, run_demo, summary_lines  # noqa: PLC0415

    if not 0 <= args.loss < 1:
        msg = f"--loss must be in [0, 1), not {args.loss}"
        raise CliError(msg)
    if args.duration <= 0 or args.speed <= 0:
        msg = "--duration and --speed must be positive"
        raise CliError(msg)
    options = DemoOptions(
        out_dir=args.out,
        duration_s=args.duration,
        speed=args.speed,
        loss=args.loss,
        seed=args.seed,
        mqtt_url=args.mqtt,
        foxglove_listen=args.foxglove,
    )
    terminal = sys.stdout.isatty()
    # The injected losses are the point of the demo and its view shows them: warn of no more.
    _setup_logging("error", terminal=sys.stderr.isatty())
    sys.stdout.write(
        f"Generating a {options.duration_s:.0f} s quadrotor flight and streaming it from a "
        f"simulated PX4 at {options.speed:g}x...\n"
    )
    if options.foxglove_listen is not None:
        sys.stdout.write(f"{foxglove_hint(options.foxglove_listen)}\n")
    result = run_quietly(run_demo(options, view=sys.stdout if terminal else None))
    sys.stdout.write("\n".join(summary_lines(result, options)) + "\n")
    mqtt_failed = options.mqtt_url is not None and not result.status.mqtt_published
    return 0 if result.recording is not None and not mqtt_failed else EXIT_ERROR


# ---------------------------------------------------------------------------------------------
# The command table and main().

SUBCOMMANDS: list[Subcommand] = [
    Subcommand("info", "show an overview of a ULog file", _configure_info, _run_info),
    Subcommand(
        "messages", "show the logged strings of a ULog file", _configure_messages, _run_messages
    ),
    Subcommand("params", "show the parameters of a ULog file", _configure_params, _run_params),
    Subcommand(
        "export", "convert a ULog file to CSV, a ROS bag or MCAP", _configure_export, _run_export
    ),
    Subcommand(
        "record", "record the logs streamed on a MAVLink link", _configure_record, _run_record
    ),
    Subcommand("run", "run the daemon from a configuration file", _configure_run, _run_run),
    Subcommand("sim", "a simulated PX4 that streams a ULog file", _configure_sim, _run_sim),
    Subcommand(
        "replay", "publish a recorded log to MQTT as if live", _configure_replay, _run_replay
    ),
    Subcommand("demo", "stream, record and decode a simulated flight", _configure_demo, _run_demo),
]
"""Every subcommand, in the order ``--help`` lists them."""


def build_parser(
    subcommands: Sequence[Subcommand] = SUBCOMMANDS, *, only: str | None = None
) -> argparse.ArgumentParser:
    """The argument parser with one subparser per entry of ``subcommands``.

    With ``only`` (a subcommand's name), only that subparser gets its arguments; the others are
    listed by ``--help`` but not set up, so a command does not import what another one needs.
    """
    parser = _ArgumentParser(
        prog=PROG,
        description="Live ULog receiver and recorder for PX4, and tools for ULog files.",
    )
    parser.add_argument(
        "--debug", action="store_true", help="show tracebacks of errors (for bug reports)"
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in subcommands:
        sub = commands.add_parser(command.name, help=command.help, description=command.help)
        if only is None or command.name == only:
            command.configure(sub)
        sub.set_defaults(run=command.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv`` (``sys.argv[1:]`` when None); return the exit status."""
    words = sys.argv[1:] if argv is None else list(argv)
    names = {command.name for command in SUBCOMMANDS}
    chosen = next((word for word in words if not word.startswith("-")), None)
    parser = build_parser(only=chosen if chosen in names else None)
    args, extra = parser.parse_known_args(words)
    if args.command is None:
        if extra:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        parser.print_help()  # a bare ``ulogstream``: what it can do, rather than an error
        return 0
    if extra:
        # ``export FILE --format rosbag OUT``: argparse cannot take a positional after options.
        if args.command == "export" and args.output is None and len(extra) == 1:
            args.output = Path(extra[0])
        else:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command == "export" and (args.output is None) == (args.out is None):
        parser.error("export needs one output: OUT (e.g. flight.bag) or --out, not both or neither")
    run: Callable[[argparse.Namespace], int] = args.run
    if args.debug:
        return run(args)
    try:
        return run(args)
    except UlogstreamError as err:
        return _fail(str(err))
    except BrokenPipeError:
        # The reader of our output went away (``| head``): not an error of ours.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_ERROR
    except OSError as err:
        where = f"{err.filename}: " if err.filename is not None else ""
        return _fail(f"{where}{os_error_text(err)}")
    except KeyboardInterrupt:
        sys.stderr.write(f"{PROG}: interrupted\n")
        return EXIT_INTERRUPTED


def _fail(message: str) -> int:
    sys.stdout.flush()
    sys.stderr.write(f"{PROG}: error: {message}\n")
    return EXIT_ERROR
