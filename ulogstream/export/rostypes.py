"""ULog logs as ROS messages: types from formats, messages from rows, wall-clock time, export.

Every ULog format becomes one message type ``px4_ulog/msg/{CamelCase}`` (ROS 1 spelling
``px4_ulog/{CamelCase}``): basic types map one to one, ``char[N]`` becomes ``string`` (cut at the
first NUL), fixed arrays stay fixed (``float32[3]``), nested formats become their own message types
and ``_padding*`` fields are dropped. The definitions are registered in a :mod:`rosbags` typestore,
which generates the full definitions, md5sums and serializers; this module only writes the
``.msg`` text and builds the message objects from the rows.

One module past 700 lines on purpose: the type mapping, the row converters and the shared
export pass (time base, ordering) must agree on every name; the bag and MCAP writers are thin
modules of their own on top.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from typing import TYPE_CHECKING, Final, Protocol, cast

import msgspec
import numpy as np
from rosbags.typesys import Stores, TypesysError, get_types_from_msg, get_typestore

from ulogstream.errors import ExportError, ReadError, ULogFormatError, UlogstreamError
from ulogstream.export.rosnames import (
    LOG_TOPIC,
    PACKAGE,
    PARAMETER_TOPIC,
    RosVersion,
    instance_topic,
    is_padding,
    nested_closure,
    ros_definition,
    ros_topic,
    ros_type_name,
)
from ulogstream.ulog.dtypes import nested_dtype
from ulogstream.ulog.events import (
    DataRows,
    FileHeader,
    FormatDefined,
    Info,
    LoggedString,
    Parameter,
    Subscription,
    ULogEvent,
)
from ulogstream.ulog.gps_time import GPS_UTC_TOPICS, first_gps_fix
from ulogstream.ulog.parser import ULogParser
from ulogstream.ulog.problems import Problems
from ulogstream.ulog.spec import TYPE_SIZES

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping, Sequence
    from pathlib import Path

    import numpy.typing as npt
    from rosbags.typesys.store import Typestore


PARAMETER_TYPE: Final = f"{PACKAGE}/msg/Parameter"
"""The type of the ``/parameters`` topic: one message per parameter value (initial and changed)."""

PARAMETER_DEFINITION: Final = """\
uint8 TYPE_INT32=1
uint8 TYPE_FLOAT=2
time stamp
string name
float64 value
uint8 type
"""
"""``px4_ulog/Parameter``: ``value`` holds the int32 or float exactly, ``type`` says which."""

PARAMETER_TYPE_INT32: Final = 1
PARAMETER_TYPE_FLOAT: Final = 2


def new_typestore(version: RosVersion) -> Typestore:
    """A typestore with the standard types of ``version`` plus ``px4_ulog/msg/Parameter``."""
    store = get_typestore(Stores.ROS1_NOETIC if version is RosVersion.ROS1 else Stores.ROS2_HUMBLE)
    store.register(get_types_from_msg(PARAMETER_DEFINITION, PARAMETER_TYPE))
    return store


def register_format(
    store: Typestore,
    name: str,
    formats: Mapping[str, FormatDefined],
    version: RosVersion = RosVersion.ROS1,
) -> str:
    """Register the ROS type of format ``name`` and of the formats it nests; return its type name.

    Raises:
        ExportError: The format cannot be expressed in ROS or clashes with a registered type.
    """
    typename = ros_type_name(name)
    if typename == PARAMETER_TYPE:
        msg = f"ULog format {name!r} would take the name of the export's own type {typename}"
        raise ExportError(msg)
    if typename in store.fielddefs:
        return typename  # registered for an earlier topic of the same log: same definition
    typesdict = {}
    for dependency in nested_closure(name, formats):
        typesdict.update(
            get_types_from_msg(
                ros_definition(formats[dependency], version), ros_type_name(dependency)
            )
        )
    try:
        store.register(typesdict)
    except TypesysError as err:
        msg = f"ULog format {name!r} cannot be registered as ROS type {typename}: {err}"
        raise ExportError(msg) from err
    return typename


def text_of(raw: bytes) -> str:
    """A ``char[N]`` value as a ROS string: cut at the first NUL, invalid UTF-8 replaced."""
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace")


class _Kind(Enum):
    SCALAR = 1
    STRING = 2
    ARRAY = 3
    BOOL_ARRAY = 4
    NESTED = 5
    NESTED_ARRAY = 6


class _Column(msgspec.Struct, frozen=True):
    name: str
    kind: _Kind
    nested: _Builder | None
    length: int


class _MessageClass(Protocol):
    """A rosbags message class, called with its fields in order or by name."""

    def __call__(self, *args: object, **kwargs: object) -> object: ...


class _Builder(msgspec.Struct, frozen=True):
    make: _MessageClass
    columns: tuple[_Column, ...]

    def objects(self, view: npt.NDArray[np.void]) -> list[object]:
        values: list[list[object]] = []
        for column in self.columns:
            data = view[column.name]
            match column.kind:
                case _Kind.SCALAR:
                    values.append(data.tolist())
                case _Kind.STRING:
                    values.append([text_of(raw) for raw in data.tolist()])
                case _Kind.ARRAY:
                    # one view per row: rosbags serializes fixed arrays from numpy arrays
                    values.append(list(data))
                case _Kind.BOOL_ARRAY:
                    # rosbags copies bool arrays byte for byte; PX4 leaves stray bytes in some
                    values.append(list(data.view(np.uint8) != 0))
                case _Kind.NESTED if column.nested is not None:
                    values.append(column.nested.objects(data))
                case _Kind.NESTED_ARRAY if column.nested is not None:
                    flat = column.nested.objects(data.reshape(-1))
                    size = column.length
                    values.append([flat[i : i + size] for i in range(0, len(flat), size)])
        make = self.make
        if not values:  # a format of padding only: empty messages, one per row
            return [make() for _ in range(len(view))]
        return [make(*args) for args in zip(*values, strict=True)]


def _builder(store: Typestore, name: str, formats: Mapping[str, FormatDefined]) -> _Builder:
    columns: list[_Column] = []
    for field in formats[name].fields:
        if is_padding(field):
            continue
        length = 0 if field.array_length is None else field.array_length
        if field.type_name in TYPE_SIZES:
            if field.type_name == "char" and field.array_length is not None:
                kind = _Kind.STRING
            elif field.array_length is None:
                kind = _Kind.SCALAR
            else:
                kind = _Kind.BOOL_ARRAY if field.type_name == "bool" else _Kind.ARRAY
            columns.append(_Column(field.name, kind, None, length))
        else:
            kind = _Kind.NESTED if field.array_length is None else _Kind.NESTED_ARRAY
            nested = _builder(store, field.type_name, formats)
            columns.append(_Column(field.name, kind, nested, length))
    return _Builder(message_class(store, ros_type_name(name)), tuple(columns))


def message_class(store: Typestore, typename: str) -> _MessageClass:
    """The class of ``typename`` in ``store``, typed for building from plain values."""
    return cast("_MessageClass", store.types[typename])


class RowConverter:
    """Turns rows of one ULog format (as the parser decodes them) into ROS message objects.

    Args:
        store: A typestore in which :func:`register_format` registered ``format_name``.
        format_name: The ULog format of the rows.
        formats: Every format of the log, for the nested ones.
        itemsize: Row size of the parser's dtype for this format, checked against the format.
        version: The ROS version of ``store`` (field names differ, see :func:`ros_definition`).

    Raises:
        ExportError: The rows' size does not match the format's packed size.
    """

    def __init__(
        self,
        store: Typestore,
        format_name: str,
        formats: Mapping[str, FormatDefined],
        *,
        itemsize: int,
        version: RosVersion = RosVersion.ROS1,
    ) -> None:
        self.typename = register_format(store, format_name, formats, version)
        """The ROS type name (``px4_ulog/msg/...``)."""
        self.dtype = nested_dtype(format_name, formats)
        """The nested view of a row (see :func:`~ulogstream.ulog.dtypes.nested_dtype`)."""
        if self.dtype.itemsize != itemsize:
            msg = (
                f"rows of ULog format {format_name!r} are {itemsize} bytes, "
                f"but the format defines {self.dtype.itemsize}"
            )
            raise ExportError(msg)
        self._builder = _builder(store, format_name, formats)

    def messages(self, rows: npt.NDArray[np.void]) -> list[object]:
        """One message object per row of ``rows`` (a 1-D array of the parser's flat dtype)."""
        view: npt.NDArray[np.void] = np.ascontiguousarray(rows).view(self.dtype)
        return self._builder.objects(view)


ROS1_LOG_LEVELS: Final[dict[int, int]] = {
    ord("0"): 16,  # EMERG -> FATAL
    ord("1"): 16,  # ALERT -> FATAL
    ord("2"): 16,  # CRIT -> FATAL
    ord("3"): 8,  # ERR -> ERROR
    ord("4"): 4,  # WARNING -> WARN
    ord("5"): 2,  # NOTICE -> INFO
    ord("6"): 2,  # INFO -> INFO
    ord("7"): 1,  # DEBUG -> DEBUG
}
"""ULog log level bytes (ASCII '0'..'7', syslog levels) -> ``rosgraph_msgs/Log`` levels."""

ROS2_LOG_LEVELS: Final[dict[int, int]] = {
    ulog: {16: 50, 8: 40, 4: 30, 2: 20, 1: 10}[ros1] for ulog, ros1 in ROS1_LOG_LEVELS.items()
}
"""ULog log level bytes -> ``rcl_interfaces/msg/Log`` levels (same mapping, ROS 2 values)."""


def ros_log_level(level: int, version: RosVersion) -> int:
    """The ROS log level of a ULog level byte; unknown levels count as INFO."""
    if version is RosVersion.ROS1:
        return ROS1_LOG_LEVELS.get(level, 2)
    return ROS2_LOG_LEVELS.get(level, 20)


MAX_TIME_US: Final = (2**31 - 1) * 1_000_000
"""Latest stamp written (2038-01-19): ``builtin_interfaces/Time.sec`` is an int32 in ROS 2."""


class WallClock(msgspec.Struct, frozen=True):
    """Maps ULog timestamps (microseconds since boot) to wall-clock time.

    ``epoch_us = timestamp_us + offset_us``; ``source`` says where the offset came from:
    ``"gps"`` (a GPS UTC fix in the log), ``"given"`` (the caller's) or ``"boot"`` (none found:
    timestamps are taken as they are, which is right for logs that already hold epoch time,
    such as SITL with lockstep, and 1970 + uptime otherwise).
    """

    offset_us: int
    source: str

    def to_ns(self, timestamp_us: int) -> int:
        """Wall-clock nanoseconds since the epoch of one ULog timestamp.

        Clamped to [1970, :data:`MAX_TIME_US`], so corrupt timestamps still make valid stamps.
        """
        return min(max(0, timestamp_us + self.offset_us), MAX_TIME_US) * 1000


def wall_clock(gps_fix: tuple[int, int] | None) -> WallClock:
    """The rule that places a log in wall-clock time, from its first GPS UTC fix.

    The ``time_ref_utc`` info key does not help here: the ULog spec defines it as the local
    time zone's offset from UTC in seconds, and the file header's timestamp is boot time too.

    Args:
        gps_fix: ``(time_utc_usec, timestamp_us)`` of the first GPS sample with a plausible
            UTC time (see :func:`~ulogstream.ulog.gps_time.first_gps_fix`), or None when the
            log has none.

    Returns:
        ``offset_us = time_utc_usec - timestamp_us`` from the fix, else an offset of 0.
    """
    if gps_fix is None:
        return WallClock(0, "boot")
    utc_us, timestamp_us = gps_fix
    return WallClock(utc_us - timestamp_us, "gps")


Progress = Callable[[int, int], None]
"""``progress(bytes_done, bytes_total)``: called after each chunk of the log is converted."""

CHUNK_SIZE: Final = 1 << 20
"""Bytes read and parsed at a time: memory stays bounded by this and the writers' chunks."""

LOG_TYPES: Final[dict[RosVersion, str]] = {
    RosVersion.ROS1: "rosgraph_msgs/msg/Log",
    RosVersion.ROS2: "rcl_interfaces/msg/Log",
}
"""The standard log message type of each ROS version (Foxglove's Log panel reads both)."""

MAX_PROBLEMS: Final = 20
"""Parser reports (corruption, truncation, warnings) kept in the summary; the rest are counted."""


class ExportSummary(msgspec.Struct, frozen=True):
    """What an export wrote.

    Attributes:
        source: The ULog file read.
        destination: The file written.
        topics: Topic instances written (one connection or channel each).
        data_messages: Samples of topic data written.
        log_messages: Logged strings written to :data:`LOG_TOPIC`.
        parameter_messages: Parameter values written to :data:`PARAMETER_TOPIC`.
        clock: How ULog timestamps were mapped to wall-clock time.
        problems: What the parser reported, one line per kind (corrupt bytes, data without
            a subscription, a truncated end), then the first :data:`MAX_PROBLEMS` things the
            export skipped (a format ROS cannot express).
        problem_count: How many lines there were in all.
    """

    source: Path
    destination: Path
    topics: int
    data_messages: int
    log_messages: int
    parameter_messages: int
    clock: WallClock
    problems: tuple[str, ...]
    problem_count: int


class RosSink(Protocol):
    """A writer of ROS messages (a bag or an MCAP file) that :func:`export_ros` drives."""

    def add_connection(self, topic: str, typename: str) -> int:
        """Declare ``topic`` of registered type ``typename``; return its handle."""
        ...

    def write(self, connection: int, times_ns: Sequence[int], messages: Sequence[object]) -> None:
        """Serialize and write ``messages`` on ``connection``, stamped ``times_ns``."""
        ...

    def add_info(self, key: str, value: str) -> None:
        """Keep one ULog info value (the sink may store it as metadata or ignore it)."""
        ...


def read_events(
    src: Path, *, chunk_size: int = CHUNK_SIZE
) -> Iterator[tuple[list[ULogEvent], int, int]]:
    """Parse ``src`` chunk by chunk: ``(events, bytes_done, bytes_total)`` per chunk.

    Raises:
        ReadError: The file cannot be read.
        ULogFormatError: The file is not a ULog file (the message names it).
    """
    try:
        total = src.stat().st_size
        stream = src.open("rb")
    except OSError as err:
        msg = f"cannot read ULog file {src}: {err.strerror or err}"
        raise ReadError(msg, path=src) from err
    # every row and string carries its own timestamp: batching rows per topic across other
    # events (unordered) is safe, and cuts the per-batch cost
    parser = ULogParser(ordered=False)
    done = 0
    try:
        with stream:
            while chunk := stream.read(chunk_size):
                done += len(chunk)
                yield parser.receive_bytes(chunk), done, total
        yield parser.close(), done, total
    except ULogFormatError as err:
        reason = str(err).removesuffix(f" (at byte {err.offset})")
        msg = f"{src} is not a readable ULog file: {reason}"
        raise ULogFormatError(msg, offset=err.offset) from None
    except OSError as err:
        msg = f"cannot read ULog file {src}: {err.strerror or err}"
        raise ReadError(msg, path=src) from err


def scan_wall_clock(src: Path, *, chunk_size: int = CHUNK_SIZE) -> WallClock:
    """Read ``src`` up to its first GPS UTC fix and apply :func:`wall_clock` to it.

    Stops at the fix, so it costs a full read only for logs without one.

    Raises:
        ReadError: The file cannot be read.
        ULogFormatError: The file is not a ULog file.
    """
    for events, _, _ in read_events(src, chunk_size=chunk_size):
        for event in events:
            if isinstance(event, DataRows) and event.subscription.name in GPS_UTC_TOPICS:
                fix = first_gps_fix(event.rows, event.timestamps_us)
                if fix is not None:
                    return wall_clock(fix)
    return wall_clock(None)


class _Instance(msgspec.Struct, frozen=True):
    """A topic instance being exported: its sink connection and row converter."""

    connection: int
    converter: RowConverter


class _RosExport:
    """The state of one export: formats seen, connections opened, counts."""

    def __init__(
        self, store: Typestore, version: RosVersion, sink: RosSink, clock: WallClock
    ) -> None:
        self.store = store
        self.version = version
        self.sink = sink
        self.clock = clock
        self.formats: dict[str, FormatDefined] = {}
        self.instances: dict[tuple[str, int], _Instance | None] = {}
        """Topic instances by ``(name, multi_id)``; None for one that had to be skipped."""
        self.topics: set[str] = {LOG_TOPIC, PARAMETER_TOPIC}
        """ROS topic names in use."""
        self.header_timestamp_us = 0
        self.log_connection: int | None = None
        self.parameter_connection: int | None = None
        self.data_messages = 0
        self.log_messages = 0
        self.parameter_messages = 0
        self.problems: list[str] = []
        """What the export itself skipped (a format ROS cannot express, a renamed topic)."""
        self.problem_count = 0
        self.damage = Problems()
        """What the parser reported about the log, summed up."""
        self._time = message_class(store, "builtin_interfaces/msg/Time")
        self._parameter = message_class(store, PARAMETER_TYPE)
        self._log = message_class(store, LOG_TYPES[version])
        self._header = message_class(store, "std_msgs/msg/Header")

    def problem(self, text: str) -> None:
        self.problem_count += 1
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(text)

    def handle(self, event: ULogEvent) -> None:
        match event:
            case DataRows():
                self.rows(event)
            case FileHeader(timestamp_us=timestamp_us):
                self.header_timestamp_us = timestamp_us
            case FormatDefined():
                self.formats[event.name] = event
            case Subscription():
                pass  # its channel is made with its first row: no empty channels
            case LoggedString():
                self.logged_string(event)
            case Parameter():
                self.parameter(event)
            case Info(key=key, value=value):
                self.sink.add_info(key, value if isinstance(value, str) else repr(value))
            case _:
                self.damage.add(event)

    def instance(self, subscription: Subscription) -> _Instance | None:
        key = (subscription.name, subscription.multi_id)
        if key in self.instances:
            return self.instances[key]
        try:
            converter = RowConverter(
                self.store,
                subscription.name,
                self.formats,
                itemsize=subscription.dtype.itemsize,
                version=self.version,
            )
        except UlogstreamError as err:
            self.problem(
                f"topic {subscription.name} instance {subscription.multi_id} skipped: {err}"
            )
            self.instances[key] = None
            return None
        topic = instance_topic(subscription.name, subscription.multi_id, self.topics)
        if topic != ros_topic(subscription.name, subscription.multi_id):
            self.problem(
                f"topic {subscription.name} instance {subscription.multi_id} written to {topic}: "
                f"{ros_topic(subscription.name, subscription.multi_id)} is another topic instance"
            )
        self.topics.add(topic)
        instance = _Instance(self.sink.add_connection(topic, converter.typename), converter)
        self.instances[key] = instance
        return instance

    def rows(self, event: DataRows) -> None:
        if len(event.rows) == 0:
            return
        instance = self.instance(event.subscription)
        if instance is None:
            return
        messages = instance.converter.messages(event.rows)
        # uint64 beyond int64 wraps negative here and is clamped to 0 like any corrupt stamp
        stamps = event.timestamps_us.astype(np.int64) + self.clock.offset_us
        times_ns: list[int] = (np.clip(stamps, 0, MAX_TIME_US) * 1000).tolist()
        self.sink.write(instance.connection, times_ns, messages)
        self.data_messages += len(messages)

    def stamp(self, timestamp_us: int) -> tuple[int, object]:
        time_ns = self.clock.to_ns(timestamp_us)
        return time_ns, self._time(sec=time_ns // 10**9, nanosec=time_ns % 10**9)

    def logged_string(self, event: LoggedString) -> None:
        if self.log_connection is None:
            typename = LOG_TYPES[self.version]
            self.log_connection = self.sink.add_connection(LOG_TOPIC, typename)
        time_ns, stamp = self.stamp(event.timestamp_us)
        name = "px4" if event.tag is None else f"px4/tag_{event.tag}"
        level = ros_log_level(event.level, self.version)
        message: object
        if self.version is RosVersion.ROS1:
            header = self._header(seq=self.log_messages, stamp=stamp, frame_id="")
            message = self._log(
                header=header,
                level=level,
                name=name,
                msg=event.text,
                file="",
                function="",
                line=0,
                topics=[],
            )
        else:
            message = self._log(
                stamp=stamp, level=level, name=name, msg=event.text, file="", function="", line=0
            )
        self.sink.write(self.log_connection, [time_ns], [message])
        self.log_messages += 1

    def parameter(self, event: Parameter) -> None:
        if self.parameter_connection is None:
            self.parameter_connection = self.sink.add_connection(PARAMETER_TOPIC, PARAMETER_TYPE)
        # initial values (definitions section) have no timestamp: they hold from the log's start
        timestamp_us = (
            self.header_timestamp_us if event.timestamp_us is None else event.timestamp_us
        )
        time_ns, stamp = self.stamp(timestamp_us)
        is_int = isinstance(event.value, int)
        message = self._parameter(
            stamp=stamp,
            name=event.name,
            value=float(event.value),
            type=PARAMETER_TYPE_INT32 if is_int else PARAMETER_TYPE_FLOAT,
        )
        self.sink.write(self.parameter_connection, [time_ns], [message])
        self.parameter_messages += 1


def export_ros(
    src: Path,
    dst: Path,
    sink: RosSink,
    store: Typestore,
    version: RosVersion,
    *,
    clock: WallClock,
    progress: Progress | None = None,
    chunk_size: int = CHUNK_SIZE,
) -> ExportSummary:
    """Stream every event of ``src`` into ``sink`` as ROS messages of ``store``'s types.

    Memory stays bounded: one chunk of the log and its decoded rows at a time.

    Raises:
        ReadError: ``src`` cannot be read.
        ULogFormatError: ``src`` is not a ULog file.
    """
    state = _RosExport(store, version, sink, clock)
    for events, done, total in read_events(src, chunk_size=chunk_size):
        for event in events:
            state.handle(event)
        if progress is not None:
            progress(done, total)
    return ExportSummary(
        source=src,
        destination=dst,
        topics=sum(instance is not None for instance in state.instances.values()),
        data_messages=state.data_messages,
        log_messages=state.log_messages,
        parameter_messages=state.parameter_messages,
        clock=clock,
        problems=(*state.damage.lines(), *state.problems),
        problem_count=len(state.damage.lines()) + state.problem_count,
    )


def prepare_export(
    src: Path, dst: Path, *, epoch_offset_us: int | None, chunk_size: int
) -> WallClock:
    """Refuse an existing ``dst``; the wall clock given, or found in ``src``'s first GPS fix.

    Raises:
        ExportError: ``dst`` exists.
        ReadError: ``src`` cannot be read.
    """
    if dst.exists():
        msg = f"output file {dst} already exists"
        raise ExportError(msg, path=dst)
    if epoch_offset_us is None:
        return scan_wall_clock(src, chunk_size=chunk_size)
    return WallClock(epoch_offset_us, "given")
