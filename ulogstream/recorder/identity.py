"""Which vehicle a log belongs to: its vehicle id and MQTT client id.

The vehicle id names the MQTT tree, the folder under ``recording.out_dir`` and the upload's
``{vehicle}``. It comes from the ``mqtt.vehicle_id`` template (``{sys_uuid}`` by default), filled
in with this host's name, the link, the autopilot's system id and its ``sys_uuid``: the GUID its
AUTOPILOT_VERSION gives at first contact (PX4: the very value its logs carry as ``sys_uuid``), so
a vehicle's first file, topics and uploads are already under its own id. An autopilot that gives
none is named by the GUID remembered for its link and system id, else by a stand-in (host, link,
sysid) that is remembered in turn: a vehicle's id never changes from one file to the next. Only
an autopilot's own answer overrides what was remembered (another vehicle on the same port).
"""

from __future__ import annotations

import contextlib
import logging
import os
from typing import TYPE_CHECKING

from ulogstream.config.values import (
    DEFAULT_CLIENT_ID,
    DEFAULT_VEHICLE_ID,
    SYS_UUID_STAND_IN,
    host_name,
    link_name,
    safe_vehicle_id,
)

if TYPE_CHECKING:
    from pathlib import Path

logger = logging.getLogger("ulogstream")

SYS_UUID_FILE = ".sys_uuid-{link}-sysid{sysid}"
"""In ``recording.out_dir``: the ``sys_uuid`` that names the autopilot with that system id on
that link (per link and system id: recorders on one host share out_dir)."""


def uses_sys_uuid(template: str | None) -> bool:
    """Whether the vehicle id template (None: the default) names the autopilot's ``{sys_uuid}``."""
    return "{sys_uuid}" in (DEFAULT_VEHICLE_ID if template is None else template)


def vehicle_id_of(
    template: str | None, *, link: str = "", sysid: int = 1, sys_uuid: str | None = None
) -> str:
    """The vehicle id: the ``mqtt.vehicle_id`` template (None: the default) filled in.

    Args:
        template: ``mqtt.vehicle_id``.
        link: ``link.connection`` (``{link}``: made one topic level, ``/dev/`` dropped).
        sysid: The autopilot's MAVLink system id (``{sysid}``).
        sys_uuid: The autopilot's ``sys_uuid`` (``{sys_uuid}``); None: not known yet, and
            :data:`~ulogstream.config.values.SYS_UUID_STAND_IN` stands in for it.
    """
    filled = DEFAULT_VEHICLE_ID if template is None else template
    values = {"hostname": host_name(), "link": link_name(link), "sysid": sysid}
    if sys_uuid is None:
        sys_uuid = SYS_UUID_STAND_IN.format_map(values)
    return safe_vehicle_id(filled.format_map({**values, "sys_uuid": sys_uuid}))


def client_id_of(template: str | None, vehicle_id: str, *, link: str = "") -> str:
    """The MQTT client id: the ``mqtt.client_id`` template (None: the default) filled in."""
    filled = DEFAULT_CLIENT_ID if template is None else template
    return filled.format(hostname=host_name(), link=link_name(link), vehicle=vehicle_id)


def unique_client_id() -> str:
    """``ulogstream-<host>-<pid>-<random>``: two clients that name none never share a session."""
    return f"ulogstream-{host_name()[:16]}-{os.getpid()}-{os.urandom(3).hex()}"


def sys_uuid_file(out_dir: Path, link: str, system_id: int) -> Path:
    """Where the ``sys_uuid`` of autopilot ``system_id`` on ``link`` is remembered."""
    return out_dir / SYS_UUID_FILE.format(link=link_name(link), sysid=system_id)


class VehicleIds:
    """Each autopilot's vehicle id on one link, fixed for the run.

    Args:
        out_dir: ``recording.out_dir``, where the ``sys_uuid`` of each autopilot is remembered.
        link: ``link.connection``.
        template: ``mqtt.vehicle_id`` (None: the default, ``{sys_uuid}``).
        target_sysid: ``link.target_sysid``: the recorder's own vehicle when set.
    """

    def __init__(
        self, *, out_dir: Path, link: str, template: str | None, target_sysid: int | None
    ) -> None:
        self.out_dir = out_dir
        self.link = link
        self.template = template
        self.uses_sys_uuid = uses_sys_uuid(template)
        self.home = target_sysid
        """The system id of the recorder's own vehicle (its live view): ``--target-sysid``,
        else None: the first autopilot heard."""
        self.ids: dict[int, str] = {}
        """Each vehicle's id (topics, folder under ``out_dir``, uploads)."""

    def identify(self, system_id: int, guid: str | None) -> tuple[str, str]:
        """The id of the vehicle ``system_id`` (kept in :attr:`ids`), and where it came from.

        Args:
            system_id: The autopilot's MAVLink system id.
            guid: Its GUID from AUTOPILOT_VERSION, None when it gave none.

        Returns:
            The vehicle id and, for the log line, how ``{sys_uuid}`` was filled in ("" when the
            template does not name it). A filled-in template that names neither ``{sysid}`` nor
            ``{sys_uuid}`` (or an id taken on this link) gets ``-sysid{N}`` appended for any
            vehicle but the first.
        """
        sys_uuid, source = None, ""
        if self.uses_sys_uuid:  # a small read or write, once per vehicle
            memory = self.memory(system_id)
            if guid is not None:
                sys_uuid, source = guid, "the autopilot's GUID (AUTOPILOT_VERSION)"
            elif (sys_uuid := recalled_sys_uuid(memory)) is not None:
                source = f"the autopilot gave no GUID: the one remembered in {memory.name}"
            else:
                sys_uuid = SYS_UUID_STAND_IN.format_map(
                    {"hostname": host_name(), "link": link_name(self.link), "sysid": system_id}
                )
                source = "the autopilot gave no GUID: host, link and sysid stand in, for good"
            remember_sys_uuid(memory, sys_uuid)
        vehicle_id = vehicle_id_of(
            self.template, link=self.link, sysid=system_id, sys_uuid=sys_uuid
        )
        distinct = self.uses_sys_uuid or "{sysid}" in (self.template or "")
        if (self.ids and not distinct) or vehicle_id in self.ids.values():
            vehicle_id = f"{vehicle_id}-sysid{system_id}"
        self.ids[system_id] = vehicle_id
        return vehicle_id, source

    def memory(self, system_id: int) -> Path:
        """Where the ``sys_uuid`` of ``system_id`` on this link is remembered."""
        return sys_uuid_file(self.out_dir, self.link, system_id)


def remember_sys_uuid(state: Path, sys_uuid: str) -> bool:
    """Write ``sys_uuid`` to ``state`` unless it holds it already (blocking).

    Returns:
        Whether the file changed.
    """
    with contextlib.suppress(OSError):
        if state.read_text(encoding="utf-8").strip() == sys_uuid:
            return False
    try:
        state.parent.mkdir(parents=True, exist_ok=True)
        temporary = state.with_name(state.name + ".tmp")
        temporary.write_text(sys_uuid + "\n", encoding="utf-8")
        temporary.replace(state)
    except OSError as err:
        logger.warning("cannot remember the autopilot's sys_uuid in %s: %s", state, err.strerror)
        return False
    return True


def recalled_sys_uuid(state: Path) -> str | None:
    """The ``sys_uuid`` :func:`remember_sys_uuid` wrote to ``state`` (None: none yet)."""
    try:
        return state.read_text(encoding="utf-8").strip() or None
    except OSError:
        return None
