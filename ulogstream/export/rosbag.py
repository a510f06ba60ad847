"""Export a recorded ULog log to a ROS 1 bag (format 2.0), written by :mod:`rosbags`.

One connection per topic instance (see :func:`~ulogstream.export.rostypes.ros_topic`) with the
generated ``px4_ulog/{CamelCase}`` type, its full definition and md5sum; logged strings as
``rosgraph_msgs/Log`` on ``/rosout``; parameters as ``px4_ulog/Parameter`` on ``/parameters``.
Record times are wall-clock times (:func:`~ulogstream.export.rostypes.wall_clock`), and
messages are written in time order, so that no chunk starts before an earlier one (Foxglove's
reader drops messages before the first chunk's start).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from rosbags.rosbag1 import Writer, WriterError

from ulogstream.errors import ExportError
from ulogstream.export.ordering import DEFAULT_BUDGET, TimeOrder
from ulogstream.export.rosnames import RosVersion
from ulogstream.export.rostypes import (
    CHUNK_SIZE,
    ExportSummary,
    Progress,
    export_ros,
    new_typestore,
    prepare_export,
)

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from rosbags.interfaces import Connection
    from rosbags.rosbag1.writer import WriteChunk
    from rosbags.typesys.store import Typestore

BAG_CHUNK_SIZE: Final = 1 << 20
"""Uncompressed bytes per bag chunk (rosbags' default); one chunk is held in memory."""


class _WrittenIndex(list[tuple[int, int]]):
    """Stands in for the index entries of a chunk already on disk: only their count is kept.

    rosbags keeps every message's ``(time, offset)`` until :meth:`Writer.close`, which then
    only asks how many there were per connection; without this, memory grows with the log.
    """

    def __init__(self, count: int) -> None:
        super().__init__()
        self._count = count

    def __len__(self) -> int:
        return self._count


class _BoundedWriter(Writer):
    """A rosbags bag writer that drops each chunk's message index once it is written."""

    def write_chunk(self, chunk: WriteChunk) -> None:
        """Write ``chunk`` and its index records, then forget the per-message entries."""
        super().write_chunk(chunk)
        if chunk.pos != -1:
            for connection, entries in list(chunk.connections.items()):
                chunk.connections[connection] = _WrittenIndex(len(entries))


class _BagSink:
    """Serializes messages to ROS 1 and writes them to a rosbags writer in time order.

    Chunks must not start earlier than the chunks before them: Foxglove's reader takes the
    first chunk's start time as the bag's start and drops every message before it. Messages
    are sorted through a :class:`~ulogstream.export.ordering.TimeOrder` and written by
    :meth:`finish`.
    """

    def __init__(self, writer: Writer, store: Typestore, order: TimeOrder) -> None:
        self._writer = writer
        self._store = store
        self._order = order
        self._connections: list[Connection] = []

    def add_connection(self, topic: str, typename: str) -> int:
        self._connections.append(
            self._writer.add_connection(topic, typename, typestore=self._store)
        )
        return len(self._connections) - 1

    def write(self, connection: int, times_ns: Sequence[int], messages: Sequence[object]) -> None:
        serialize = self._store.serialize_ros1
        add = self._order.add
        typename = self._connections[connection].msgtype
        for time_ns, message in zip(times_ns, messages, strict=True):
            add(time_ns, connection, bytes(serialize(message, typename)))

    def finish(self) -> None:
        """Write every message, in time order."""
        connections = self._connections
        write = self._writer.write
        for time_ns, connection, data in self._order.drain():
            write(connections[connection], time_ns, data)

    def add_info(self, key: str, value: str) -> None:
        """Bags have no place for file metadata: info values are not exported."""


def export_rosbag(
    src: Path,
    dst: Path,
    *,
    progress: Progress | None = None,
    epoch_offset_us: int | None = None,
    chunk_size: int = CHUNK_SIZE,
    sort_budget: int = DEFAULT_BUDGET,
) -> ExportSummary:
    """Convert the ULog file ``src`` into the new ROS 1 bag ``dst``, in time order.

    Args:
        src: The ULog file.
        dst: The bag to create; it must not exist.
        progress: Called as ``progress(bytes_done, bytes_total)`` after each chunk of ``src``.
        epoch_offset_us: Wall-clock minus boot time in microseconds; when None it is taken
            from the log's first GPS UTC fix (a first, early-stopping pass over ``src``).
        chunk_size: Bytes of ``src`` parsed at a time.
        sort_budget: Bytes of messages sorted in memory; beyond it they are sorted through
            temporary files (see :class:`~ulogstream.export.ordering.TimeOrder`).

    Returns:
        What was written.

    Raises:
        ExportError: ``dst`` exists or cannot be created.
        ReadError: ``src`` cannot be read.
        ULogFormatError: ``src`` is not a ULog file.
    """
    clock = prepare_export(src, dst, epoch_offset_us=epoch_offset_us, chunk_size=chunk_size)
    store = new_typestore(RosVersion.ROS1)
    writer = _BoundedWriter(dst)
    writer.chunk_threshold = BAG_CHUNK_SIZE
    try:
        writer.open()
    except (WriterError, OSError) as err:
        msg = f"cannot create bag {dst}: {err}"
        raise ExportError(msg, path=dst) from err
    try:
        with TimeOrder(budget=sort_budget) as order:
            sink = _BagSink(writer, store, order)
            summary = export_ros(
                src,
                dst,
                sink,
                store,
                RosVersion.ROS1,
                clock=clock,
                progress=progress,
                chunk_size=chunk_size,
            )
            sink.finish()
        writer.close()
    except BaseException:
        writer.abort()
        dst.unlink(missing_ok=True)
        raise
    return summary
