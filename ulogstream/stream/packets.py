"""MAVLink logging messages as plain values: what the codec hands the core, and back."""

from __future__ import annotations

import enum

import msgspec

NO_MESSAGE_START = 255
"""``first_message_offset`` value meaning no ULog message starts in this packet."""

MAX_DATA_LENGTH = 249
"""Size of the ``data`` array of LOGGING_DATA / LOGGING_DATA_ACKED."""

SEQUENCE_MODULO = 0x10000
"""LOGGING_DATA sequence numbers are uint16 and wrap around."""

MAV_CMD_LOGGING_START = 2510
MAV_CMD_LOGGING_STOP = 2511
MAV_CMD_REQUEST_MESSAGE = 512
"""COMMAND_LONG asking for one message (param1: its id): how AUTOPILOT_VERSION is asked for."""
MAVLINK_MSG_ID_AUTOPILOT_VERSION = 148
MAV_COMP_ID_AUTOPILOT1 = 1
MAV_COMP_ID_LOG = 155
"""Our default component id (protocol.md: never 0)."""
MAV_TYPE_ONBOARD_CONTROLLER = 18
"""Our heartbeat type: never GCS, which would mask the vehicle's data-link-loss failsafe."""
MAV_AUTOPILOT_INVALID = 8
"""HEARTBEAT ``autopilot`` of a component that is not a flight controller (ours)."""
MAV_STATE_ACTIVE = 4
"""HEARTBEAT ``system_status`` of a component that is up and working."""
MAV_MODE_FLAG_SAFETY_ARMED = 128
"""HEARTBEAT ``base_mode`` bit of an armed vehicle (motors may spin)."""


@enum.unique
class MavResult(enum.IntEnum):
    """MAV_RESULT values of COMMAND_ACK."""

    ACCEPTED = 0
    TEMPORARILY_REJECTED = 1
    DENIED = 2
    UNSUPPORTED = 3
    FAILED = 4
    IN_PROGRESS = 5
    CANCELLED = 6


class LoggingPacket(msgspec.Struct, frozen=True):
    """LOGGING_DATA (``needs_ack`` False) or LOGGING_DATA_ACKED (True), ``data`` cut to ``length``.

    ``system_id``/``component_id`` are the sender's (from the MAVLink frame header),
    ``target_system``/``target_component`` the addressee's.
    """

    sequence: int
    first_message_offset: int
    data: bytes
    needs_ack: bool
    system_id: int = 1
    component_id: int = MAV_COMP_ID_AUTOPILOT1
    target_system: int = 0
    target_component: int = 0


class CommandAck(msgspec.Struct, frozen=True):
    """COMMAND_ACK for ``command`` with ``result``, from ``system_id``/``component_id``."""

    command: int
    result: int
    system_id: int
    component_id: int
    target_system: int
    target_component: int


class Heartbeat(msgspec.Struct, frozen=True):
    """HEARTBEAT from ``system_id``/``component_id`` (autopilots are component 1)."""

    system_id: int
    component_id: int
    mav_type: int
    autopilot: int
    base_mode: int = 0

    @property
    def armed(self) -> bool:
        """Whether ``base_mode`` says the vehicle is armed (MAV_MODE_FLAG_SAFETY_ARMED)."""
        return bool(self.base_mode & MAV_MODE_FLAG_SAFETY_ARMED)


class CommandLong(msgspec.Struct, frozen=True):
    """COMMAND_LONG (a vehicle simulator receives LOGGING_START/STOP as these)."""

    command: int
    param1: float
    system_id: int
    component_id: int
    target_system: int
    target_component: int


class LoggingAck(msgspec.Struct, frozen=True):
    """LOGGING_ACK for ``sequence`` (a vehicle simulator receives these)."""

    sequence: int
    system_id: int
    component_id: int
    target_system: int
    target_component: int


class AutopilotVersion(msgspec.Struct, frozen=True):
    """AUTOPILOT_VERSION from ``system_id``/``component_id``: the autopilot's unique ids.

    ``uid2`` is PX4's GUID (18 bytes), the bytes a PX4 log's ``sys_uuid`` spells in hex
    (``board_get_px4_guid`` is copied into the message, ``board_get_px4_guid_formated`` prints
    it byte by byte); ``uid`` is the older 64-bit id (ArduPilot: the board's serial).
    """

    uid: int
    uid2: bytes
    system_id: int
    component_id: int

    @property
    def guid(self) -> str | None:
        """The autopilot's unique id as text, None when it gives none (both ids zero).

        ``uid2`` in hex (a PX4 log's ``sys_uuid``), else ``uid`` in 16 hex digits.
        """
        if any(self.uid2):
            return self.uid2.hex()
        if self.uid:
            return f"{self.uid:016x}"
        return None


MavlinkMessage = (
    LoggingPacket | CommandAck | Heartbeat | CommandLong | LoggingAck | AutopilotVersion
)
"""Every MAVLink message ulogstream reads, as a plain value."""


LoggingData = tuple[int, int, int, int, int, int, bytes]
"""A plain LOGGING_DATA's fields as the data phase's fast path carries them, no object built:
``(system_id, component_id, target_system, target_component, sequence, first_message_offset,
data)``, ``data`` cut to ``length`` (:meth:`ulogstream.mavlink_codec.MavlinkCodec.
decode_logging_data`, :meth:`ulogstream.stream.session.LoggingSession.receive_logging_data`)."""


def logging_packet(packet: LoggingData) -> LoggingPacket:
    """The message of a plain LOGGING_DATA the fast path did not take (``needs_ack`` False)."""
    system_id, component_id, target_system, target_component, sequence, offset, data = packet
    return LoggingPacket(
        sequence=sequence,
        first_message_offset=offset,
        data=data,
        needs_ack=False,
        system_id=system_id,
        component_id=component_id,
        target_system=target_system,
        target_component=target_component,
    )
