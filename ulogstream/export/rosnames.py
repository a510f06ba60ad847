"""ROS names and ``.msg`` text of ULog logs, without rosbags: types, fields, topics.

Every ULog format becomes one message type ``px4_ulog/msg/{CamelCase}`` (ROS 1 spelling
``px4_ulog/{CamelCase}``): basic types map one to one, ``char[N]`` becomes ``string`` (cut at the
first NUL), fixed arrays stay fixed (``float32[3]``), nested formats become their own message types
and ``_padding*`` fields are dropped. The exports register these definitions in a rosbags
typestore (:mod:`ulogstream.export.rostypes`); the live view serves them as they are
(:func:`message_definition`), without loading rosbags.
"""

from __future__ import annotations

import re
from enum import Enum
from typing import TYPE_CHECKING, Final

from ulogstream.errors import ExportError
from ulogstream.ulog.spec import PADDING_PREFIX, TYPE_SIZES

if TYPE_CHECKING:
    from collections.abc import Container, Mapping

    from ulogstream.ulog.events import FieldDefinition, FormatDefined

PACKAGE: Final = "px4_ulog"
"""ROS package of every generated type."""

ROS_BASE_TYPES: Final[dict[str, str]] = {
    "int8_t": "int8",
    "uint8_t": "uint8",
    "int16_t": "int16",
    "uint16_t": "uint16",
    "int32_t": "int32",
    "uint32_t": "uint32",
    "int64_t": "int64",
    "uint64_t": "uint64",
    "float": "float32",
    "double": "float64",
    "bool": "bool",
    "char": "uint8",  # a lone char is a byte; char[N] is a string (see _ros_field)
}
"""ULog basic types and the ROS types they become."""

_ROS_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
_TYPE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9]*$")


class RosVersion(Enum):
    """Which ROS flavour a typestore serves: ROS 1 for bags, ROS 2 for MCAP."""

    ROS1 = 1
    ROS2 = 2


def ros_type_name(format_name: str) -> str:
    """The ROS type of a ULog format: ``vehicle_gps_position -> px4_ulog/msg/VehicleGpsPosition``.

    Raises:
        ExportError: The format name cannot make a valid ROS type name.
    """
    camel = "".join(part[:1].upper() + part[1:] for part in format_name.split("_"))
    if not _TYPE_NAME.match(camel):
        msg = f"ULog format name {format_name!r} cannot be turned into a ROS message type name"
        raise ExportError(msg)
    return f"{PACKAGE}/msg/{camel}"


def ros_topic(name: str, multi_id: int) -> str:
    """A topic instance's ROS topic: ``/{name}`` for instance 0, else ``/{name}_{multi_id}``.

    Instance 0 keeps the bare name so that the usual single-instance topics read naturally.
    Should that name already be taken (``foo`` instance 1 and a topic ``foo_1``, or a topic
    named ``rosout``), the export uses ``/{name}/instance_{multi_id}`` and reports it.
    """
    return f"/{name}" if multi_id == 0 else f"/{name}_{multi_id}"


def instance_topic(name: str, multi_id: int, taken: Container[str]) -> str:
    """The topic of an instance given the names ``taken`` by others: :func:`ros_topic` if free.

    ``foo`` instance 1 and a topic ``foo_1`` instance 0 would share a name (and a topic named
    ``rosout`` the log's): the later one becomes ``/{name}/instance_{multi_id}``. The MCAP
    export and the live Foxglove view name topics with it, so one layout serves both.
    """
    topic = ros_topic(name, multi_id)
    return f"/{name}/instance_{multi_id}" if topic in taken else topic


def is_padding(field: FieldDefinition) -> bool:
    """Whether ``field`` is alignment padding (``_padding0`` ...), which never reaches ROS."""
    return field.name.startswith(PADDING_PREFIX)


def _ros_field(field: FieldDefinition, name: str, format_name: str) -> str:
    if not _ROS_NAME.match(field.name):
        msg = f"field {field.name!r} of ULog format {format_name!r} is not a valid ROS field name"
        raise ExportError(msg)
    if field.type_name == "char" and field.array_length is not None:
        return f"string {name}"
    base = ROS_BASE_TYPES.get(field.type_name)
    if base is None:
        base = ros_type_name(field.type_name).replace("/msg/", "/")
    suffix = "" if field.array_length is None else f"[{field.array_length}]"
    return f"{base}{suffix} {name}"


def ros2_field_name(name: str) -> str:
    """A ULog field name as ROS 2 allows it: lower case, single underscores, none at the end.

    ROS 2 (and Foxglove's ROS 2 schema parser, which refuses the channel otherwise) wants
    ``[a-z](_?[a-z0-9]+)*``; PX4 has fields such as ``voltage5V_v``, which becomes
    ``voltage5v_v``. Messages are built by field position, so only the schema's names change.
    """
    ros2 = re.sub("_+", "_", name.lower()).strip("_")
    return ros2 if ros2[:1].isalpha() else f"f_{ros2}".rstrip("_")


def ros_definition(fmt: FormatDefined, version: RosVersion = RosVersion.ROS1) -> str:
    """The ``.msg`` text of one ULog format (nested formats referenced as ``px4_ulog/Name``).

    Field names are the ULog ones; for ROS 2 made valid by :func:`ros2_field_name` (a name
    that two fields would share gets ``_2``, ``_3``... on the later ones).

    Raises:
        ExportError: A field name or nested format name is not valid in ROS.
    """
    lines: list[str] = []
    taken: set[str] = set()
    for field in fmt.fields:
        if is_padding(field):
            continue
        name = field.name
        if version is RosVersion.ROS2:
            base = name = ros2_field_name(field.name)
            count = 1
            while name in taken:
                count += 1
                name = f"{base}_{count}"
            taken.add(name)
        lines.append(f"{_ros_field(field, name, fmt.name)}\n")
    return "".join(lines)


def nested_closure(name: str, formats: Mapping[str, FormatDefined]) -> list[str]:
    """``name`` and every format it nests, directly or not, each once, dependencies first.

    Raises:
        ExportError: A nested format is not defined, or formats nest in a cycle.
    """
    order: list[str] = []
    visiting: set[str] = set()

    def visit(current: str, parent: str | None) -> None:
        if current in order:
            return
        if current in visiting:
            msg = f"ULog format {current!r} contains itself"
            raise ExportError(msg)
        fmt = formats.get(current)
        if fmt is None:
            where = "" if parent is None else f" (nested in {parent!r})"
            msg = f"ULog format {current!r}{where} is not defined in the log"
            raise ExportError(msg)
        visiting.add(current)
        for field in fmt.fields:
            if field.type_name not in TYPE_SIZES:
                visit(field.type_name, current)
        visiting.discard(current)
        order.append(current)

    visit(name, None)
    return order


LOG_TOPIC: Final = "/rosout"
"""Where logged strings ('L' and 'C') go, as ROS nodes' log messages do."""

PARAMETER_TOPIC: Final = "/parameters"
"""Where parameters go: the initial values at the log's start, then every change."""


ROS2_SCHEMA_ENCODING: Final = "ros2msg"
"""The schema encoding of ROS 2 ``.msg`` text (MCAP, Foxglove WebSocket channels)."""

CDR_ENCODING: Final = "cdr"
"""The message encoding of ROS 2 messages (PlotJuggler's Foxglove client keeps only these)."""

SEPARATOR: Final = "=" * 80
"""What separates the types of a full message definition (ROS's concatenated ``.msg`` text)."""


def message_definition(
    name: str, formats: Mapping[str, FormatDefined], version: RosVersion = RosVersion.ROS2
) -> str:
    """The full definition of format ``name``'s type: its ``.msg`` text, then each nested type's.

    As ROS tools concatenate them (and rosbags' ``generate_msgdef`` writes them): every nested
    type once, in the order its fields first name them, after a separator line and
    ``MSG: px4_ulog/Name``.

    Raises:
        ExportError: A format is missing, nests itself, or cannot be a ROS type.
    """
    nested_closure(name, formats)  # every nested format defined, no cycle
    parts = [ros_definition(formats[name], version)]
    seen = {name}
    queue = [name]
    while queue:
        current = queue.pop(0)
        for field in formats[current].fields:
            if field.type_name in TYPE_SIZES or field.type_name in seen:
                continue
            seen.add(field.type_name)
            queue.append(field.type_name)
            type_name = ros_type_name(field.type_name).replace("/msg/", "/")
            definition = ros_definition(formats[field.type_name], version)
            parts.append(f"{SEPARATOR}\nMSG: {type_name}\n{definition}")
    return "".join(parts)
