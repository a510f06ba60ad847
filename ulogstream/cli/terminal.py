"""The terminal's text: log lines, the progress and status lines, summaries, error wording."""

from __future__ import annotations

import errno
import logging
import os
import re
import shutil
import sys
from typing import TYPE_CHECKING, ClassVar, TextIO

from ulogstream.errors import UlogstreamError

if TYPE_CHECKING:
    from ulogstream.recorder.recorder import Recorder

PROG = "ulogstream"


EXIT_ERROR = 1


EXIT_USAGE = 2


EXIT_INTERRUPTED = 130


class CliError(UlogstreamError):
    """A command that cannot be carried out; the message says what to do about it."""


def warn(text: str) -> None:
    """``ulogstream: warning: TEXT`` on stderr, after what stdout holds so far."""
    sys.stdout.flush()
    sys.stderr.write(f"{PROG}: warning: {text}\n")


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


class _TerminalHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Log lines on a terminal: clear the status line first, so the two never mix."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream.write("\r\x1b[K")
        super().emit(record)


def setup_logging(level: str, *, terminal: bool) -> None:
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


def exit_summary(recorder: Recorder) -> list[str]:
    """What ``record``/``run`` did, printed when they end: logs, bytes, losses, files, MQTT."""
    status = recorder.status
    finished = list(status.finished)
    size = sum(log.size for log in finished)
    logs = plural(status.logs, "log")
    first = (
        f"{logs} recorded ({size / 1e6:.2f} MB), {plural(status.packets, 'packet')} received,"
        f" {status.packets_lost} lost in {plural(status.gaps, 'gap')},"
        f" {plural(status.dropouts, 'dropout')} marked"
    )
    if status.bytes_not_written:
        first += (
            f", {status.bytes_not_written / 1e6:.2f} MB not written: the disk was full or too slow"
        )
    lines = [first]
    lines += [f"  {log.path}" for log in finished[-10:]]
    if len(finished) > 10:  # noqa: PLR2004
        lines.insert(1, f"  ... {len(finished) - 10} earlier ones in {finished[0].path.parent}")
    if recorder.flights is not None:
        lines += [f"{path}: {note}" for path, note in recorder.flights.notes[-10:]]
    sinks = [publisher.sink for publisher in recorder.publishers.values()]
    if sinks:
        url = " or ".join(sinks[0].urls)
        published = sum(sink.published for sink in sinks)
        errors = [sink.last_error for sink in sinks if sink.last_error]
        if published:
            dropped = sum(sink.dropped for sink in sinks)
            lines.append(f"MQTT: {published} messages published to {url} ({dropped} dropped)")
        elif any(sink.ever_connected for sink in sinks):
            lines.append(f"MQTT: connected to {url}; nothing to publish (no vehicle streamed)")
        else:
            why = f" ({error_words(errors[0])})" if errors else ""
            lines.append(f"MQTT: the broker at {url} was never reached{why}: nothing published")
    elif recorder.parts.publisher is not None:
        lines.append("MQTT: no vehicle was heard, so nothing was published")
    return lines


def plural(count: int, noun: str) -> str:
    """``1 log``, ``2 logs``."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def error_words(text: str) -> str:
    """An error text without its ``[Errno N]`` prefix: ``[Errno 111] Connection refused``."""
    return re.sub(r"\[Errno -?\d+\]\s*", "", text)


def terminal_width(stream: TextIO) -> int:
    """Columns of the terminal ``stream`` writes to (``$COLUMNS`` or 80 when it cannot tell)."""
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (OSError, ValueError, AttributeError):
        return shutil.get_terminal_size().columns


def fit_line(text: str, width: int) -> str:
    """``text`` cut to fit in ``width`` columns without wrapping (the last column stays free)."""
    room = max(width - 1, 1)
    return text if len(text) <= room else text[: room - 1] + "~"


class TerminalStatus:
    """The recorder's live status line on a terminal, redrawn in place and cut to its width.

    Args:
        stream: The terminal (stderr).
    """

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def __call__(self, text: str, *, note: str | None = None) -> None:
        """Draw ``text`` over the last line (empty: clear it); ``note`` on a line of its own."""
        stream = self._stream
        if note is not None:
            stream.write(f"\r\x1b[Kstopping: {note}\n")
        stream.write("\r\x1b[K" + (fit_line(text, terminal_width(stream)) if text else ""))
        stream.flush()
