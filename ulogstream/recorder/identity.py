"""Which vehicle a log belongs to: its vehicle id, client id and remembered ``sys_uuid``.

The vehicle id names the MQTT tree, the folder under ``recording.out_dir`` and the upload's
``{vehicle}``. It comes from the ``mqtt.vehicle_id`` template (``{sys_uuid}`` by default), filled
in with this host's name, the link and the autopilot's system id and ``sys_uuid``. The
``sys_uuid`` a finished log shows is remembered per link and system id, so the next start uses
it; the id never changes under a running flight.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
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
"""In ``recording.out_dir``: the ``sys_uuid`` of the autopilot with that system id on that link,
from its newest finished log (per link and system id: recorders on one host share out_dir)."""


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
    return f"ulogstream-{host_name()[:16]}-{os.getpid()}-{secrets.token_hex(3)}"


def sys_uuid_file(out_dir: Path, link: str, system_id: int) -> Path:
    """Where the ``sys_uuid`` of autopilot ``system_id`` on ``link`` is remembered."""
    return out_dir / SYS_UUID_FILE.format(link=link_name(link), sysid=system_id)


def last_recorded_sysid(out_dir: Path, link: str) -> int | None:
    """The system id of the autopilot whose ``sys_uuid`` was remembered last on ``link``.

    A recorder without ``--target-sysid`` takes it as its own vehicle (its Last Will, client id
    and start-up line), so a vehicle whose ``MAV_SYS_ID`` is not 1 keeps its identity.
    """
    prefix = SYS_UUID_FILE.format(link=link_name(link), sysid="")
    newest: tuple[float, int] | None = None
    with contextlib.suppress(OSError):
        for state in out_dir.glob(f"{prefix}*"):
            digits = state.name.removeprefix(prefix)
            if not digits.isdigit():
                continue
            with contextlib.suppress(OSError):
                stamp = (state.stat().st_mtime, int(digits))
                if newest is None or stamp > newest:
                    newest = stamp
    return None if newest is None else newest[1]


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
        home = target_sysid
        if home is None and self.uses_sys_uuid:
            home = last_recorded_sysid(out_dir, link)
        self.home = home or 1
        """The system id of the recorder's own vehicle: ``--target-sysid``, else the last one
        recorded on this link, else 1 (PX4's default)."""
        self.ids: dict[int, str] = {}
        """Each vehicle's id (topics, folder under ``out_dir``, uploads)."""

    def identify(self, system_id: int) -> tuple[str, str | None]:
        """The id of the vehicle ``system_id`` (kept in :attr:`ids`) and its ``sys_uuid``.

        The ``sys_uuid`` is the one remembered from its last log (None: not known or not used).
        A ``sys_uuid`` a log shows is remembered and used from the next start, so topics, Last
        Will and folder never move under a running flight. A vehicle other than the home one
        whose filled-in template names neither ``{sysid}`` nor ``{sys_uuid}`` (or names an id
        taken on this link) gets ``-sysid{N}`` appended.
        """
        sys_uuid = None
        if self.uses_sys_uuid:  # a small read, once per vehicle
            sys_uuid = recalled_sys_uuid(self.memory(system_id))
        vehicle_id = vehicle_id_of(
            self.template, link=self.link, sysid=system_id, sys_uuid=sys_uuid
        )
        distinct = self.uses_sys_uuid or "{sysid}" in (self.template or "")
        if (system_id != self.home and not distinct) or vehicle_id in self.ids.values():
            vehicle_id = f"{vehicle_id}-sysid{system_id}"
        self.ids[system_id] = vehicle_id
        return vehicle_id, sys_uuid

    def memory(self, system_id: int, link: str | None = None) -> Path:
        """Where the ``sys_uuid`` of ``system_id`` (on ``link``, default ours) is remembered."""
        return sys_uuid_file(self.out_dir, self.link if link is None else link, system_id)

    def learned(self, system_id: int, sys_uuid: str) -> str | None:
        """The id a newly seen ``sys_uuid`` gives from the next start, if it changes it."""
        if not self.uses_sys_uuid:
            return None
        now = self.ids[system_id]
        then = vehicle_id_of(self.template, link=self.link, sysid=system_id, sys_uuid=sys_uuid)
        return None if then == now or now.startswith(f"{then}-sysid") else then

    def note(self, sys_uuid: str | None) -> str:
        """How ``{sys_uuid}`` was filled in, for the start-up line."""
        if not self.uses_sys_uuid:
            return ""
        if sys_uuid is None:
            return (
                "; sys_uuid not known yet: host name, link and sysid stand in until a log shows it"
            )
        return f"; sys_uuid {sys_uuid} from the last log"


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
