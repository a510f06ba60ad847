"""Export a ULog file to CSV, one file per topic instance, exactly as pyulog's ``ulog2csv``.

Files are named ``{stem}_{topic}_{multi_id}.csv`` (``stem``: the log's name without ``.ulg``,
``/`` in topic names replaced by ``_``). Columns are ``timestamp`` and then every field in log
order, flattened as pyulog does (``arr[i]``, ``nested.sub``, ``nested[i].sub``), ``char[N]``
arrays as one text column, top-level ``_padding`` fields left out. Values are ``str()`` of
the numpy scalar of pyulog's type for the field (``bool`` and ``char`` are ``int8``, so a
bool shows as 0 or 1; floats print as their shortest round-trip form, ``nan``, ``inf``).

The log is streamed: memory stays bounded by one chunk of it plus up to
:data:`PENDING_BYTES` of rows per topic instance.

Nested padding fields (``esc[0]._padding0[0]``) are columns, as in ``ulog2csv``, which only
drops names that start with ``_padding``.

Deliberate differences from ``ulog2csv``, which only show on unusual or damaged logs:

* A topic instance subscribed more than once (under two msg_ids, e.g. again after an 'R')
  gets one file with all its rows; ``ulog2csv`` writes one file per msg_id under the same
  name, so the last one wins. (Rows of two msg_ids that alternate within one parser batch
  come out grouped per msg_id.)
* ``char`` text that is not ASCII is decoded as UTF-8 with replacement characters;
  ``ulog2csv`` stops with an exception on it.
* Around corruption the ulogstream parser's recovery decides which rows there are: it keeps
  more than pyulog, which skips to the next sync marker (on the sample logs pyulog's rows are
  a subsequence of ours). A 'D' payload must be the format's size with or without its
  trailing padding; pyulog also accepts sizes in between.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import msgspec
import numpy as np
import numpy.typing as npt

from ulogstream.errors import ExportError, ReadError
from ulogstream.ulog.dtypes import NUMPY_TYPES
from ulogstream.ulog.events import (
    DataRows,
    FormatDefined,
    Subscription,
)
from ulogstream.ulog.parser import ULogParser
from ulogstream.ulog.problems import Problems
from ulogstream.ulog.spec import PADDING_PREFIX, TIMESTAMP_FIELD, TYPE_SIZES

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

Progress = Callable[[int, int], None]
"""``progress(bytes_done, bytes_total)``: called after each chunk of the log is converted."""

CHUNK_SIZE = 1 << 20
"""Bytes read and parsed at a time."""

PENDING_BYTES = 1 << 16
"""Rows of one topic instance held before they are formatted and written (memory bound:
this times the number of topic instances)."""

MAX_OPEN_FILES = 128
"""CSV files kept open at once; the least recently written one is closed beyond this."""

# pyulog's numpy types (core.ULog._UNPACK_TYPES): bool and char are int8 there.
_PYULOG_TYPES: dict[str, str] = {**NUMPY_TYPES, "bool": "i1", "char": "i1"}

_SUFFIX_RE = re.compile(r"\.ulg$", re.IGNORECASE)


class _Column(msgspec.Struct, frozen=True):
    """One CSV column: where its value is in a row and how it prints."""

    name: str
    offset: int
    numpy_type: str
    """A numpy type string; ``S{N}`` for ``char[N]`` text."""


class CsvExportSummary(msgspec.Struct, frozen=True):
    """What :func:`export_csv` wrote.

    Attributes:
        source: The ULog file read.
        directory: Where the CSV files are.
        files: The CSV file of each topic instance ``(name, multi_id)``, in creation order.
        rows: Data rows written over all files.
        problems: What the parser reported about damaged input (corruption, a truncated end).
    """

    source: Path
    directory: Path
    files: dict[tuple[str, int], Path]
    rows: int
    problems: tuple[str, ...] = ()


def csv_columns(name: str, formats: Mapping[str, FormatDefined]) -> list[_Column]:
    """The columns ``ulog2csv`` writes for format ``name``, ``timestamp`` first.

    Raises:
        KeyError: ``name`` or a nested type is not in ``formats``.
    """
    columns: list[_Column] = []
    _flatten(formats[name], "", 0, formats=formats, out=columns)
    # ulog2csv: the top level drops every _padding field; nested ones (prefixed) stay.
    columns = [c for c in columns if not c.name.startswith(PADDING_PREFIX)]
    stamp = [c for c in columns if c.name == TIMESTAMP_FIELD]
    return stamp + [c for c in columns if c.name != TIMESTAMP_FIELD]


def _flatten(
    fmt: FormatDefined,
    prefix: str,
    offset: int,
    *,
    formats: Mapping[str, FormatDefined],
    out: list[_Column],
    depth: int = 0,
) -> int:
    """Append ``fmt``'s flattened columns at ``offset``; return the offset after it."""
    if depth > 32:  # noqa: PLR2004 - a nesting cycle; the parser refuses such logs anyway
        msg = f"format {fmt.name!r} nests too deeply"
        raise KeyError(msg)
    for definition in fmt.fields:
        count = definition.array_length
        full = prefix + definition.name
        if definition.type_name in _PYULOG_TYPES:
            size = TYPE_SIZES[definition.type_name]
            if definition.type_name == "char" and count is not None:
                out.append(_Column(full, offset, f"S{count}"))
                offset += count
            elif count is None:
                out.append(_Column(full, offset, _PYULOG_TYPES[definition.type_name]))
                offset += size
            else:
                for i in range(count):
                    out.append(_Column(f"{full}[{i}]", offset, _PYULOG_TYPES[definition.type_name]))
                    offset += size
        else:
            nested = formats[definition.type_name]
            if count is None:
                offset = _flatten(
                    nested, full + ".", offset, formats=formats, out=out, depth=depth + 1
                )
            else:
                for i in range(count):
                    offset = _flatten(
                        nested, f"{full}[{i}].", offset, formats=formats, out=out, depth=depth + 1
                    )
    return offset


def _format_column(values: npt.NDArray[np.void]) -> list[str]:
    """``str()`` of each numpy scalar, vectorised where numpy gives the same text."""
    kind = values.dtype.kind
    if kind == "S":
        return [v.split(b"\0", 1)[0].decode(errors="replace") for v in values.tolist()]
    if kind == "f" and values.dtype.itemsize == 4:  # noqa: PLR2004
        # float32 prints its own shortest form; Python floats would print float64 digits.
        text: list[str] = values.astype(str).tolist()
        return text
    # Python's int and float64 repr equal numpy's str() for these and are faster to make.
    return list(map(str, values.tolist()))


class _Instance:
    """The CSV file of one topic instance, the columns of its format and rows not yet written."""

    def __init__(self, path: Path, columns: list[_Column]) -> None:
        self.path = path
        self.columns = columns
        self.started = False
        self.pending: list[npt.NDArray[np.void]] = []
        self.pending_bytes = 0
        self._views: dict[int, np.dtype[np.void]] = {}

    def view_dtype(self, itemsize: int) -> np.dtype[np.void]:
        """The CSV columns as a dtype over rows of ``itemsize`` bytes (cached)."""
        dtype = self._views.get(itemsize)
        if dtype is None:
            fits = [
                c for c in self.columns if c.offset + np.dtype(c.numpy_type).itemsize <= itemsize
            ]
            dtype = np.dtype(
                {
                    "names": [c.name for c in fits],
                    "formats": [c.numpy_type for c in fits],
                    "offsets": [c.offset for c in fits],
                    "itemsize": itemsize,
                }
            )
            self._views[itemsize] = dtype
        return dtype


class _CsvWriter:
    """Turns parser events into CSV files."""

    def __init__(self, source: Path, directory: Path) -> None:
        self.stem = _SUFFIX_RE.sub("", source.name)
        self.directory = directory
        self.formats: dict[str, FormatDefined] = {}
        self.subscriptions: dict[int, _Instance] = {}
        self.instances: dict[tuple[str, int], _Instance] = {}
        self.open_files: OrderedDict[Path, TextIO] = OrderedDict()
        self.rows = 0
        self.damage = Problems()

    def handle(self, event: object) -> None:
        match event:
            case DataRows():
                self.write_rows(event)
            case FormatDefined():
                self.formats[event.name] = event
            case Subscription():
                self.subscribe(event)
            case _:
                self.damage.add(event)

    def subscribe(self, event: Subscription) -> None:
        key = (event.name, event.multi_id)
        instance = self.instances.get(key)
        if instance is None:
            name = event.name.replace("/", "_")
            path = self.directory / f"{self.stem}_{name}_{event.multi_id}.csv"
            try:
                columns = csv_columns(event.name, self.formats)
            except KeyError:
                columns = []  # the parser reports the undefined format and sends no rows
            instance = _Instance(path, columns)
            self.instances[key] = instance
        self.subscriptions[event.msg_id] = instance

    def write_rows(self, event: DataRows) -> None:
        instance = self.subscriptions.get(event.subscription.msg_id)
        rows = event.rows
        if instance is None or len(rows) == 0 or not instance.columns:
            return
        # Rows come in small batches (the log interleaves topics): format them in bigger
        # blocks, as per-column work dominates for a few rows.
        if instance.pending and instance.pending[0].dtype.itemsize != rows.dtype.itemsize:
            self.flush(instance)
        instance.pending.append(rows)
        instance.pending_bytes += rows.nbytes
        self.rows += len(rows)
        if instance.pending_bytes >= PENDING_BYTES:
            self.flush(instance)

    def flush(self, instance: _Instance) -> None:
        """Write the pending rows of ``instance``."""
        if not instance.pending:
            return
        itemsize = instance.pending[0].dtype.itemsize
        # Joined as bytes: concatenating structured arrays would repack them, losing padding.
        raw = b"".join(rows.tobytes() for rows in instance.pending)
        instance.pending.clear()
        instance.pending_bytes = 0
        view = np.frombuffer(raw, dtype=instance.view_dtype(itemsize))
        names = view.dtype.names or ()
        texts = [_format_column(view[name]) for name in names]
        out = self.file(instance, names)
        out.write("\n".join(map(",".join, zip(*texts, strict=True))))
        out.write("\n")

    def finish(self) -> None:
        """Write every pending row."""
        for instance in self.instances.values():
            self.flush(instance)

    def file(self, instance: _Instance, names: tuple[str, ...]) -> TextIO:
        out = self.open_files.get(instance.path)
        if out is not None:
            self.open_files.move_to_end(instance.path)
            return out
        if len(self.open_files) >= MAX_OPEN_FILES:
            _, oldest = self.open_files.popitem(last=False)
            oldest.close()
        out = instance.path.open("a" if instance.started else "w", encoding="utf-8", newline="")
        self.open_files[instance.path] = out
        if not instance.started:
            instance.started = True
            out.write(",".join(names) + "\n")
        return out

    def close(self) -> None:
        while self.open_files:
            _, out = self.open_files.popitem()
            out.close()


def export_csv(
    src: Path,
    directory: Path,
    *,
    progress: Progress | None = None,
    chunk_size: int = CHUNK_SIZE,
) -> CsvExportSummary:
    """Convert the ULog file ``src`` into CSV files in ``directory`` (created if missing).

    Args:
        src: The ULog file.
        directory: Where to write; existing files of the same names are replaced.
        progress: Called with ``(bytes_done, bytes_total)`` after each chunk.
        chunk_size: Bytes read and parsed at a time.

    Returns:
        What was written.

    Raises:
        ReadError: ``src`` cannot be read.
        ULogFormatError: ``src`` is not a ULog file.
        ExportError: ``directory`` cannot be written.
    """
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        msg = f"cannot create the output directory {directory}: {err.strerror}"
        raise ExportError(msg, path=directory) from err
    writer = _CsvWriter(src, directory)
    try:
        for events, done, total in _read_events(src, chunk_size=chunk_size):
            for event in events:
                writer.handle(event)
            if progress is not None:
                progress(done, total)
        writer.finish()
    except OSError as err:
        name = err.filename if err.filename is not None else directory
        msg = f"cannot write CSV file {name}: {err.strerror}"
        raise ExportError(msg, path=Path(name)) from err
    finally:
        writer.close()
    files = {key: inst.path for key, inst in writer.instances.items() if inst.started}
    return CsvExportSummary(src, directory, files, writer.rows, tuple(writer.damage.lines()))


def _read_events(src: Path, *, chunk_size: int) -> Iterator[tuple[list[object], int, int]]:
    """Parse ``src`` chunk by chunk: ``(events, bytes_done, bytes_total)`` per chunk."""
    try:
        total = src.stat().st_size
        stream = src.open("rb")
    except OSError as err:
        msg = f"cannot read ULog file {src}: {err.strerror}"
        raise ReadError(msg, path=src) from err
    parser = ULogParser()
    done = 0
    with stream:
        while chunk := stream.read(chunk_size):
            done += len(chunk)
            yield list(parser.receive_bytes(chunk)), done, total
    yield list(parser.close()), done, total
