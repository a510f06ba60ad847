"""Which vehicle each message on a link is for, and when a new one is there (sans-IO).

One link may carry several autopilots (a companion computer on a multi-vehicle radio, SITL
instances on one UDP port). Each gets its own logging session, keyed by its MAVLink system id;
the shell owns one transport and one pipeline per vehicle and asks the router what to do with
the messages of one chunk:

- :meth:`Router.route` groups them by system id, in order (one group in the common case);
- :meth:`Router.first_contact` decides about a system id not seen before: a new vehicle once its
  autopilot (component 1) sends a HEARTBEAT; ignored when ``target_system`` names another one
  (said once); and another receiver that uses our own ids is an impostor (said once: both would
  take one log stream).
"""

from __future__ import annotations

from dataclasses import dataclass

from ulogstream.stream.packets import MAV_COMP_ID_AUTOPILOT1, Heartbeat, MavlinkMessage


@dataclass(frozen=True, slots=True)
class NewVehicle:
    """The autopilot ``system_id`` was heard for the first time: give it a session."""

    system_id: int


@dataclass(frozen=True, slots=True)
class VehicleIgnored:
    """The autopilot ``system_id`` is on the link but only ``target_system`` is recorded."""

    system_id: int
    target_system: int


@dataclass(frozen=True, slots=True)
class Impostor:
    """Another receiver on the link uses our system and component ids."""

    system_id: int
    component_id: int


Contact = NewVehicle | VehicleIgnored | Impostor
"""What :meth:`Router.first_contact` may decide (None: not yet)."""


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

    def first_contact(self, system_id: int, messages: list[MavlinkMessage]) -> Contact | None:
        """What to do about ``system_id``, not seen before, given its messages of one chunk.

        Returns:
            :class:`NewVehicle` once its autopilot sends a HEARTBEAT (and it is the target, if
            one is set); :class:`VehicleIgnored` or :class:`Impostor` the first time only;
            None otherwise (wait for more).
        """
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
        return NewVehicle(system_id)
