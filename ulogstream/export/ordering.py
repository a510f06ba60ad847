"""Serialized messages put in time order in bounded memory, for writers whose readers need it.

A ULog holds each topic's rows in time order but interleaves topics loosely (and some topics
are logged with timestamp 0, or jump back), and the export batches rows per topic; Foxglove's
bag reader takes the first chunk's start time as the bag's start and drops every message
before it. :class:`TimeOrder` takes messages in any order and gives them back sorted by time
(ties in arrival order): in memory up to a budget, beyond it through sorted runs in temporary
files that are merged at the end (and into one whenever :data:`MAX_RUNS` pile up).
"""

from __future__ import annotations

import heapq
import struct
import tempfile
from typing import IO, TYPE_CHECKING, Final, Self

from ulogstream.errors import ExportError

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

DEFAULT_BUDGET: Final = 8 << 20
"""Bytes of messages (with :data:`ENTRY_OVERHEAD` each) held in memory before a run spills."""

ENTRY_OVERHEAD: Final = 120
"""Memory one held message costs beyond its bytes (tuple, int and bytes objects)."""

MAX_RUNS: Final = 64
"""Runs kept at once: at this many they are merged into one (a log far larger than memory
must not run out of file descriptors)."""

_RECORD: Final = struct.Struct("<qII")
"""A message in a run file: time in ns, connection, length; the bytes follow."""

_READ_BUFFER: Final = 1 << 16

Entry = tuple[int, int, bytes]
"""(time in ns, connection, serialized message)."""


class TimeOrder:
    """Messages in, the same messages out in time order (stable), in bounded memory.

    Args:
        budget: Bytes held in memory; past it the held messages are sorted and written to a
            temporary file (a run). Memory is this plus one read buffer per run when merging.
        directory: Where the runs go (the system's temporary directory by default).

    Use as a context manager, or call :meth:`close`: it removes the runs.
    """

    def __init__(self, *, budget: int = DEFAULT_BUDGET, directory: str | None = None) -> None:
        self._budget = budget
        self._directory = directory
        self._held: list[Entry] = []
        self._held_bytes = 0
        self._runs: list[IO[bytes]] = []
        self.count = 0
        """Messages added."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    @property
    def runs(self) -> int:
        """Runs written to temporary files so far."""
        return len(self._runs)

    def add(self, time_ns: int, connection: int, data: bytes) -> None:
        """Take one message.

        Raises:
            ExportError: A run cannot be written (the temporary directory is full...).
        """
        self._held.append((time_ns, connection, data))
        self._held_bytes += len(data) + ENTRY_OVERHEAD
        self.count += 1
        if self._held_bytes >= self._budget:
            self._spill()

    def drain(self) -> Iterator[Entry]:
        """Every message added, by time (ties in the order they were added); once.

        Raises:
            ExportError: A run cannot be read back.
        """
        held = self._held
        held.sort(key=_time)  # stable: ties keep their order
        self._held = []
        self._held_bytes = 0
        if not self._runs:
            yield from held
            return
        # runs are in arrival order and merge() prefers earlier inputs on ties: stable
        yield from heapq.merge(*(_read_run(run) for run in self._runs), held, key=_time)

    def close(self) -> None:
        """Remove the temporary files."""
        while self._runs:
            self._runs.pop().close()

    def _spill(self) -> None:
        held = self._held
        held.sort(key=_time)
        self._write_run(held)
        self._held = []
        self._held_bytes = 0
        if len(self._runs) >= MAX_RUNS:
            runs, self._runs = self._runs, []
            # merged in arrival order, so ties keep theirs
            self._write_run(heapq.merge(*(_read_run(run) for run in runs), key=_time))
            for run in runs:
                run.close()

    def _write_run(self, entries: Iterable[Entry]) -> None:
        try:
            run = tempfile.TemporaryFile(prefix="ulogstream-order-", dir=self._directory)  # noqa: SIM115 (closed in close())
            self._runs.append(run)
            pack = _RECORD.pack
            write = run.write
            for time_ns, connection, data in entries:
                write(pack(time_ns, connection, len(data)))
                write(data)
            run.flush()
        except OSError as err:
            msg = f"cannot write a temporary file to sort messages by time: {err.strerror or err}"
            raise ExportError(msg) from err


def _time(entry: Entry) -> int:
    return entry[0]


def _read_run(run: IO[bytes]) -> Iterator[Entry]:
    """The messages of a run file, from its start."""
    try:
        run.seek(0)
        read = run.read
        buffered = b""
        at = 0
        size = _RECORD.size
        unpack = _RECORD.unpack_from
        while True:
            if len(buffered) - at < size:
                buffered = buffered[at:] + read(_READ_BUFFER)
                at = 0
                if len(buffered) < size:
                    return
            time_ns, connection, length = unpack(buffered, at)
            end = at + size + length
            if end > len(buffered):
                buffered = buffered[at:] + read(max(_READ_BUFFER, end - len(buffered)))
                at = 0
                end = size + length
            yield time_ns, connection, buffered[at + size : end]
            at = end
    except OSError as err:
        msg = f"cannot read back a temporary file of sorted messages: {err.strerror or err}"
        raise ExportError(msg) from err
