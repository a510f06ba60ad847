"""ULog files on disk: :func:`read` a whole log, :func:`iter_events` to stream its events.

The shell's side of :mod:`ulogstream.ulog`, which never opens files: this module reads the
bytes and hands them to :class:`~ulogstream.ulog.reader.ULogReader` or
:class:`~ulogstream.ulog.parser.ULogParser`, and names the file in every error.
"""

from __future__ import annotations

import errno
from pathlib import Path
from typing import TYPE_CHECKING, Final

from ulogstream.errors import ReadError, ULogFormatError
from ulogstream.ulog.parser import ULogParser
from ulogstream.ulog.reader import BLOCK_SIZE, ULogReader

if TYPE_CHECKING:
    import os
    from collections.abc import Iterator

    from ulogstream.ulog.events import ULogEvent
    from ulogstream.ulog.reader import ULogData

DEFAULT_CHUNK_SIZE: Final = 1 << 20
"""Bytes read from the file per parser call by :func:`iter_events`."""

MIN_BLOCK_SIZE: Final = 1 << 17
"""Smallest block :func:`read` feeds: twice the largest message (64 KiB + 3), so every block
holds at least one whole message after the partial one carried over."""


def read(path: str | os.PathLike[str], *, block_size: int = BLOCK_SIZE) -> ULogData:
    """Read a whole ULog file.

    Args:
        path: The file.
        block_size: Bytes read at a time; at least :data:`MIN_BLOCK_SIZE`.

    Raises:
        ReadError: The file cannot be opened or read, or its rows do not fit in memory.
        ULogFormatError: The file is not a ULog file (the message names the file).
    """
    path = Path(path)
    reader = ULogReader()
    try:
        _feed_file(path, reader, max(block_size, MIN_BLOCK_SIZE))
        return reader.result()
    except MemoryError:
        raise _out_of_memory(path) from None


def _out_of_memory(path: Path) -> ReadError:
    msg = (
        f"not enough memory to read ULog file {path} whole (its rows are held in memory); "
        "free memory, or stream it with iter_events or `ulogstream export`, which do not"
    )
    return ReadError(msg, path=path)


def _feed_file(path: Path, reader: ULogReader, block_size: int) -> None:
    """Feed the whole file to ``reader`` (the block is freed before the rows are joined)."""
    buffer = bytearray(block_size)
    view = memoryview(buffer)
    try:
        with path.open("rb") as file:
            filled = 0
            while True:
                count = file.readinto(view[filled:])
                filled += count
                if count and filled < len(buffer):
                    continue  # a short read: fill the block first
                used = reader.feed(view[:filled], final=not count)
                if not count:
                    break
                rest = filled - used
                view[:rest] = bytes(view[used:filled])
                filled = rest
    except ULogFormatError as err:
        raise _named(path, err) from None
    except OSError as err:
        if err.errno == errno.ENOMEM:  # a mapping for rows (ulogstream.ulog.reader._Rows)
            raise _out_of_memory(path) from None
        msg = f"cannot read ULog file {path}: {err.strerror or err}"
        raise ReadError(msg, path=path) from err
    finally:
        view.release()


def iter_events(
    path: str | os.PathLike[str], *, chunk_size: int = DEFAULT_CHUNK_SIZE
) -> Iterator[ULogEvent]:
    """Stream the events of a ULog file, reading ``chunk_size`` bytes at a time.

    Raises:
        ReadError: The file cannot be opened or read.
        ULogFormatError: The file is not a ULog file (the message names the file).
    """
    path = Path(path)
    parser = ULogParser()
    try:
        with path.open("rb") as file:
            while chunk := file.read(chunk_size):
                yield from parser.receive_bytes(chunk)
        yield from parser.close()
    except ULogFormatError as err:
        raise _named(path, err) from None
    except OSError as err:
        msg = f"cannot read ULog file {path}: {err.strerror or err}"
        raise ReadError(msg, path=path) from err


def _named(path: Path, err: ULogFormatError) -> ULogFormatError:
    reason = str(err).removesuffix(f" (at byte {err.offset})")
    return ULogFormatError(f"{path} is not a readable ULog file: {reason}", offset=err.offset)
