"""The file commands: ``info``, ``messages``, ``params`` and ``export``."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TextIO

import msgspec

from ulogstream.errors import ULogFormatError, UlogstreamError
from ulogstream.ulog.dtypes import compile_format
from ulogstream.ulog.events import (
    DataRows,
    FileHeader,
    InfoValue,
    LoggedString,
    Subscription,
    Truncated,
    ULogEvent,
)
from ulogstream.ulog.flight import version_string
from ulogstream.ulog.spec import log_level_name
from ulogstream.ulog.summary import LogDescription

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable

    import numpy as np
    import numpy.typing as npt

from ulogstream.cli.terminal import PROG, CliError, ProgressLine, plural, warn

EXPORT_FORMATS = ("csv", "rosbag", "mcap")


class TopicSummary(msgspec.Struct):
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


class LogSummary(LogDescription, kw_only=True):
    """Everything the file tools show about a log, gathered in one streaming pass.

    The log's description is the shared fold (:class:`~ulogstream.ulog.summary.LogDescription`);
    this adds the file and, per topic instance, counts and times instead of rows.
    """

    path: Path
    size: int
    last_us: int = 0
    topics: dict[tuple[str, int], TopicSummary] = msgspec.field(default_factory=dict)

    @property
    def version(self) -> int:
        """The ULog version of the header (0 before it was read)."""
        return 0 if self.header is None else self.header.version

    @property
    def start_us(self) -> int:
        """The header's timestamp (0 before it was read)."""
        return 0 if self.header is None else self.header.timestamp_us

    def add(self, event: ULogEvent) -> bool:
        """Take one parser event into account."""
        match event:
            case DataRows(subscription, _, stamps):
                self._add_rows(subscription, stamps)
            case Subscription(_, multi_id, name, dtype):
                if (name, multi_id) not in self.topics:
                    self.topics[name, multi_id] = TopicSummary(self._wire_size(name, dtype))
            case FileHeader(_, timestamp_us):
                self.last_us = timestamp_us
                LogDescription.add(self, event)
            case _:
                return LogDescription.add(self, event)
        return True

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
    check_readable(path)
    try:
        size = path.stat().st_size
    except OSError as err:
        msg = f"cannot read {path}: {err.strerror} (check the path)"
        raise CliError(msg) from err
    summary = LogSummary(path=path, size=size)
    from ulogstream.adapters.ulog_file import iter_events  # noqa: PLC0415 (numpy only where rows are read)

    for event in iter_events(path):
        summary.add(event)
    return summary


def hms(seconds: float) -> str:
    """``h:mm:ss`` of a non-negative duration (whole seconds, like pyulog)."""
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours:d}:{minutes:02d}:{secs:02d}"


def value_text(value: InfoValue) -> str:
    """An info or parameter value as text; floats (float32 on the wire) in their shortest form."""
    if isinstance(value, bytes):
        return value.hex(" ")
    if isinstance(value, float):
        import numpy as np  # noqa: PLC0415 (numpy only where rows are read)

        return str(np.float32(value)) if np.float32(value) == value else str(value)
    return str(value)


def _text(value: InfoValue) -> str:
    """An 'M' value whole: text as it is, anything else as ``info`` shows a value."""
    return value if isinstance(value, str) else value_text(value)


def configure_info(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``ulogstream info``."""
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


def run_info(args: argparse.Namespace) -> int:
    """Carry out ``ulogstream info``; return the exit status."""
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
                for index, value in enumerate(summary.info_multiple[key]):
                    out.write(f" {key} [{index}]:\n")
                    out.writelines(f"   {line}\n" for line in _text(value).splitlines())
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
    tagged = sum(m.tag is not None for m in summary.logged_messages)
    out.write(f"Logged messages: {len(summary.logged_messages)} ({tagged} tagged)\n")

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
        out.write(f" ({plural(empty, 'subscribed topic instance')} without data not shown)\n")


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


def configure_messages(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``ulogstream messages``."""
    parser.add_argument("file", type=Path, help="the ULog file (.ulg)")


def run_messages(args: argparse.Namespace) -> int:
    """Carry out ``ulogstream messages``; return the exit status."""
    path: Path = args.file
    check_readable(path)
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
        warn(f"{path}: no logged messages")
    return 0


def check_readable(path: Path) -> None:
    """One clear line for a path that is not a file to read (a folder, nothing at all)."""
    if path.is_dir():
        msg = f"{path} is a directory, not a ULog file (name a .ulg file)"
        raise CliError(msg)
    if not path.exists():
        msg = f"{path}: no such file (check the path)"
        raise CliError(msg)


def _warn_truncated(path: Path, truncated: Truncated | None) -> None:
    if truncated is not None:
        warn(
            f"{path} is truncated: it ends {truncated.size} bytes into a message at byte"
            f" {truncated.offset}; shown is what comes before"
        )


def format_logged_string(message: LoggedString, start_us: int) -> str:
    """``seconds since start  LEVEL  [tag N] text``; times before the start print negative."""
    seconds = (message.timestamp_us - start_us) / 1e6
    tag = "" if message.tag is None else f"[tag {message.tag}] "
    return f"{seconds:10.3f} {log_level_name(message.level):<7} {tag}{message.text}"


def configure_params(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``ulogstream params``."""
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


def run_params(args: argparse.Namespace) -> int:
    """Carry out ``ulogstream params``; return the exit status."""
    summary = summarize(args.file)
    _warn_truncated(args.file, summary.problems.truncated)
    if not (summary.initial_parameters or summary.changed_parameters or summary.default_parameters):
        warn(f"{args.file}: no parameters")
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


def configure_export(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``ulogstream export``."""
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
        warn(f"writing {chosen} to {dst}, whose extension says {named}")
    elif chosen == "csv" and dst.suffix.lower() == ".csv" and not dst.is_dir():
        warn(f"CSV export writes a folder of files: {dst} is created as a folder")
    return chosen


def run_export(args: argparse.Namespace) -> int:
    """Carry out ``ulogstream export``; return the exit status."""
    src: Path = args.file
    dst: Path = args.output if args.output is not None else args.out
    check_readable(src)
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
                warn(f"{src}: {problem}")
            if summary.problem_count > len(summary.problems):
                warn(f"{src}: ... and {summary.problem_count - len(summary.problems)} more")
            if not summary.data_messages:
                warn(f"{src}: no data messages were exported (the log holds none)")
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
