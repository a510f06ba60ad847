"""Which vehicle each message on a link is for, and when a new one is there (sans-IO).

One link may carry several autopilots (a companion computer on a multi-vehicle radio, SITL
instances on one UDP port). Each gets its own logging session, keyed by its MAVLink system id;
the shell owns one transport and one pipeline per vehicle and asks the router what to do with
the messages of one chunk:

- :meth:`Router.route` groups them by system id, in order (one group in the common case);
- :meth:`Router.first_contact` decides about a system id not seen before. Its autopilot's first
  HEARTBEAT (component 1) asks who it is (:class:`AskIdentity`: AUTOPILOT_VERSION, whose GUID
  names the vehicle in topics, folders and uploads from its first file on); the answer makes it
  a :class:`NewVehicle`, and so do :data:`IDENTIFY_TIMEOUT_S` without one (:meth:`Router.due`)
  and a logging packet (a stream that runs already is never kept waiting). A vehicle other than
  ``target_system`` is ignored (said once); another receiver that uses our own ids is an
  impostor (said once: both would take one log stream).
"""

from __future__ import annotations

import msgspec

from ulogstream.stream.packets import (
    MAV_COMP_ID_AUTOPILOT1,
    AutopilotVersion,
    Heartbeat,
    LoggingPacket,
    MavlinkMessage,
)

IDENTIFY_TIMEOUT_S = 1.5
"""How long a new autopilot may take to answer AUTOPILOT_VERSION (PX4 answers within 10 ms)."""
IDENTIFY_RETRY_S = 0.5
"""How long to wait for AUTOPILOT_VERSION before asking again (a lost request or answer)."""


class AskIdentity(msgspec.Struct, frozen=True):
    """Ask the autopilot ``system_id`` for AUTOPILOT_VERSION (MAV_CMD_REQUEST_MESSAGE 148)."""

    system_id: int


class NewVehicle(msgspec.Struct, frozen=True):
    """The autopilot ``system_id`` is there: give it a session.

    ``guid`` is its unique id from AUTOPILOT_VERSION (:attr:`~ulogstream.stream.packets.
    AutopilotVersion.guid`), None when it gave none in time.
    """

    system_id: int
    guid: str | None = None


class VehicleIgnored(msgspec.Struct, frozen=True):
    """The autopilot ``system_id`` is on the link but only ``target_system`` is recorded."""

    system_id: int
    target_system: int


class Impostor(msgspec.Struct, frozen=True):
    """Another receiver on the link uses our system and component ids."""

    system_id: int
    component_id: int


Contact = AskIdentity | NewVehicle | VehicleIgnored | Impostor
"""What :meth:`Router.first_contact` and :meth:`Router.due` may decide (None: not yet)."""


class _Asking(msgspec.Struct):
    """An autopilot asked for AUTOPILOT_VERSION: when to ask again, when to stop waiting."""

    ask_again: float
    give_up: float


class Router:
    """Routes a link's messages to its vehicles (see the module docstring).

    Args:
        system_id: Our MAVLink system id.
        component_id: Our component id.
        target_system: Record only this autopilot; None records every one on the link.
    """

    def __init__(self, *, system_id: int, component_id: int, target_system: int | None) -> None:
        self._system_id = system_id
        self._component_id = component_id
        self._target_system = target_system
        self._ignored: set[int] = set()
        self._impostor_said = False
        self._asking: dict[int, _Asking] = {}
        """The autopilots asked who they are, not answered yet."""

    @staticmethod
    def route(messages: list[MavlinkMessage]) -> list[tuple[int, list[MavlinkMessage]]]:
        """``messages`` grouped by system id, each group in order (groups in first-seen order)."""
        if not messages:
            return []
        system_id = messages[0].system_id
        if all(message.system_id == system_id for message in messages):
            return [(system_id, messages)]  # the common case: one vehicle per chunk
        groups: dict[int, list[MavlinkMessage]] = {}
        for message in messages:
            groups.setdefault(message.system_id, []).append(message)
        return list(groups.items())

    def first_contact(
        self, system_id: int, messages: list[MavlinkMessage], now: float
    ) -> Contact | None:
        """What to do about ``system_id``, not seen before, given its messages of one chunk.

        Returns:
            :class:`AskIdentity` at its autopilot's first HEARTBEAT (if it is the target, when
            one is set); :class:`NewVehicle` at its AUTOPILOT_VERSION, or at a logging packet
            while asking; :class:`VehicleIgnored` or :class:`Impostor` the first time only; None
            otherwise (wait for more).
        """
        if system_id in self._asking:
            for message in messages:
                if type(message) is AutopilotVersion:
                    if message.component_id == MAV_COMP_ID_AUTOPILOT1:
                        del self._asking[system_id]
                        return NewVehicle(system_id, message.guid)
                elif type(message) is LoggingPacket:
                    del self._asking[system_id]  # a stream runs already: never keep it waiting
                    return NewVehicle(system_id)
            return None
        heartbeats = [m for m in messages if type(m) is Heartbeat]
        if not any(m.component_id == MAV_COMP_ID_AUTOPILOT1 for m in heartbeats):
            ours = system_id == self._system_id and any(
                m.component_id == self._component_id for m in heartbeats
            )
            if ours and not self._impostor_said:
                self._impostor_said = True
                return Impostor(system_id, self._component_id)
            return None
        target = self._target_system
        if target is not None and system_id != target:
            if system_id in self._ignored:
                return None
            self._ignored.add(system_id)
            return VehicleIgnored(system_id, target)
        if any(type(m) is LoggingPacket for m in messages):
            return NewVehicle(system_id)  # a stream runs already: never keep it waiting
        self._asking[system_id] = _Asking(now + IDENTIFY_RETRY_S, now + IDENTIFY_TIMEOUT_S)
        return AskIdentity(system_id)

    def next_deadline(self) -> float | None:
        """When :meth:`due` must be called next (None: no autopilot is being asked)."""
        return min((asking.ask_again for asking in self._asking.values()), default=None)

    def due(self, now: float) -> list[AskIdentity | NewVehicle]:
        """What is due at ``now``: ask again, or a new vehicle that gave no AUTOPILOT_VERSION."""
        out: list[AskIdentity | NewVehicle] = []
        for system_id, asking in list(self._asking.items()):
            if now >= asking.give_up:
                del self._asking[system_id]
                out.append(NewVehicle(system_id))
            elif now >= asking.ask_again:
                asking.ask_again = min(now + IDENTIFY_RETRY_S, asking.give_up)
                out.append(AskIdentity(system_id))
        return out
