"""Export a recorded ULog log to MCAP with ROS 2 schemas, for Foxglove and PlotJuggler.

Schemas are ``ros2msg`` definitions (``px4_ulog/msg/{CamelCase}`` with its nested types) and
messages CDR, serialized by :mod:`rosbags`; the file is written by the ``mcap`` library with
the ``ros2`` profile. Channels are named as in the bag export; logged strings are
``rcl_interfaces/msg/Log`` on ``/rosout``, parameters ``px4_ulog/msg/Parameter`` on
``/parameters``, and the log's info values an MCAP metadata record named ``ulog_info``.
Messages are written in log-time order (sorted in bounded memory, see
:mod:`ulogstream.export.ordering`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, BinaryIO, Final

from mcap.writer import CompressionType, Writer

from ulogstream.errors import ExportError
from ulogstream.export.ordering import DEFAULT_BUDGET, TimeOrder
from ulogstream.export.rosnames import CDR_ENCODING, ROS2_SCHEMA_ENCODING, RosVersion
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

    from rosbags.typesys.store import Typestore

MCAP_CHUNK_SIZE: Final = 1 << 20
"""Uncompressed bytes per MCAP chunk; one chunk is held in memory."""

PROFILE: Final = "ros2"
INFO_METADATA: Final = "ulog_info"
"""Name of the metadata record holding the log's 'I' values (as strings)."""


class _McapSink:
    """Serializes messages to CDR and adds them to an MCAP writer in log-time order.

    Rows arrive batched per topic; sorted through a :class:`TimeOrder`, every chunk covers a
    short span of time and readers never see log times go backwards (:meth:`finish`).
    """

    def __init__(self, writer: Writer, store: Typestore, order: TimeOrder) -> None:
        self._writer = writer
        self._store = store
        self._order = order
        self._schemas: dict[str, int] = {}
        self._channels: list[tuple[int, str]] = []
        self._sequence = 0
        self.info: dict[str, str] = {}
        """Info values seen, written as metadata at the end."""

    def add_connection(self, topic: str, typename: str) -> int:
        schema = self._schemas.get(typename)
        if schema is None:
            definition, _ = self._store.generate_msgdef(typename, ros_version=2)
            schema = int(
                self._writer.register_schema(typename, ROS2_SCHEMA_ENCODING, definition.encode())
            )
            self._schemas[typename] = schema
        channel = int(self._writer.register_channel(topic, CDR_ENCODING, schema))
        self._channels.append((channel, typename))
        return len(self._channels) - 1

    def write(self, connection: int, times_ns: Sequence[int], messages: Sequence[object]) -> None:
        typename = self._channels[connection][1]
        serialize = self._store.serialize_cdr
        add = self._order.add
        for time_ns, message in zip(times_ns, messages, strict=True):
            add(time_ns, connection, bytes(serialize(message, typename)))

    def finish(self) -> None:
        """Write every message in log-time order, numbered in that order."""
        channels = self._channels
        add = self._writer.add_message
        for time_ns, connection, data in self._order.drain():
            add(channels[connection][0], time_ns, data, time_ns, self._sequence)
            self._sequence += 1

    def add_info(self, key: str, value: str) -> None:
        self.info[key] = value


def export_mcap(
    src: Path,
    dst: Path,
    *,
    progress: Progress | None = None,
    epoch_offset_us: int | None = None,
    chunk_size: int = CHUNK_SIZE,
    sort_budget: int = DEFAULT_BUDGET,
) -> ExportSummary:
    """Convert the ULog file ``src`` into the new MCAP file ``dst``, in log-time order.

    Args:
        src: The ULog file.
        dst: The MCAP file to create; it must not exist.
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
    try:
        stream: BinaryIO = dst.open("xb")
    except FileExistsError:
        msg = f"output file {dst} already exists"
        raise ExportError(msg, path=dst) from None
    except OSError as err:
        msg = f"cannot create MCAP file {dst}: {err.strerror}"
        raise ExportError(msg, path=dst) from err
    store = new_typestore(RosVersion.ROS2)
    try:
        with stream:
            writer = Writer(stream, chunk_size=MCAP_CHUNK_SIZE, compression=CompressionType.ZSTD)
            writer.start(profile=PROFILE, library="ulogstream")
            with TimeOrder(budget=sort_budget) as order:
                sink = _McapSink(writer, store, order)
                summary = export_ros(
                    src,
                    dst,
                    sink,
                    store,
                    RosVersion.ROS2,
                    clock=clock,
                    progress=progress,
                    chunk_size=chunk_size,
                )
                sink.finish()
            if sink.info:
                writer.add_metadata(INFO_METADATA, sink.info)
            writer.finish()  # type: ignore[no-untyped-call]
    except BaseException:
        dst.unlink(missing_ok=True)
        raise
    return summary
