"""Vehicle ids and client ids from their templates, and each vehicle's id on a link."""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING

import pytest

from ulogstream.recorder.identity import (
    VehicleIds,
    client_id_of,
    uses_sys_uuid,
    vehicle_id_of,
)

if TYPE_CHECKING:
    from pathlib import Path


def test_vehicle_id_defaults_to_the_autopilots_sys_uuid() -> None:
    template = None

    assert uses_sys_uuid(template)
    uuid = "000600000000383233333039510700340029"
    assert vehicle_id_of(template, link="/dev/pixhawk", sys_uuid=uuid) == uuid
    assert vehicle_id_of("drone7", link="/dev/x") == "drone7"


def test_until_the_sys_uuid_is_known_host_link_and_sysid_keep_two_recorders_apart() -> None:
    host = socket.gethostname().split(".")[0]
    template = None

    first = vehicle_id_of(template, link="/dev/pixhawk")
    second = vehicle_id_of(template, link="udpin:0.0.0.0:14550", sysid=2)

    assert (first, second) == (f"{host}-pixhawk-sysid1", f"{host}-udpin-0.0.0.0-14550-sysid2")


@pytest.mark.parametrize(
    ("template", "sys_uuid", "expected"),
    [
        ("{sys_uuid}", "../../etc", "_._.._etc"),
        ("{sys_uuid}", "a b/c+d#e\x00", "a_b_c_d_e_"),
        ("..", None, "_."),
        ("{sys_uuid}", "", "vehicle"),
        ("{sys_uuid}", "x" * 300, "x" * 128),
    ],
)
def test_a_filled_in_vehicle_id_is_one_safe_path_component(
    template: str, sys_uuid: str | None, expected: str
) -> None:
    assert vehicle_id_of(template, link="/dev/x", sys_uuid=sys_uuid) == expected


def test_vehicle_and_client_id_templates_are_filled_in() -> None:
    host = socket.gethostname().split(".")[0]
    template, client = "uav-{sysid}-{link}", "{hostname}/{vehicle}"

    vehicle = vehicle_id_of(template, link="/dev/serial/by-id/usb-PX4_0", sysid=7)

    assert vehicle == "uav-7-serial-by-id-usb-PX4_0"
    assert client_id_of(client, vehicle) == f"{host}/uav-7-serial-by-id-usb-PX4_0"
    assert client_id_of(None, "v1") == "ulogstream-v1"


def test_sys_uuid_in_the_vehicle_id_waits_for_it_behind_the_default() -> None:
    host = socket.gethostname().split(".")[0]
    template = "px4-{sys_uuid}"

    assert uses_sys_uuid(template)
    assert not uses_sys_uuid("{hostname}")
    assert vehicle_id_of(template, link="/dev/pixhawk") == f"px4-{host}-pixhawk-sysid1"
    assert vehicle_id_of(template, link="/dev/pixhawk", sys_uuid="0006ab") == "px4-0006ab"


GUID = "000600000000383233333039510700340029"


def ids_on(out_dir: Path, link: str = "/dev/pixhawk", template: str | None = None) -> VehicleIds:
    return VehicleIds(out_dir=out_dir, link=link, template=template, target_sysid=None)


def test_the_autopilots_guid_names_the_vehicle_from_its_first_file(tmp_path: Path) -> None:
    first = ids_on(tmp_path)
    vehicle, source = first.identify(1, GUID)
    assert vehicle == GUID
    assert "AUTOPILOT_VERSION" in source
    # a later start whose request went unanswered (a lossy radio) keeps the same id
    again = ids_on(tmp_path)
    assert again.identify(1, None)[0] == GUID
    # another autopilot on the same port (sysid 1 too) is named by its own answer
    swapped = ids_on(tmp_path)
    assert swapped.identify(1, "0006ff")[0] == "0006ff"


def test_without_any_guid_the_stand_in_is_remembered_and_never_changes(tmp_path: Path) -> None:
    host = socket.gethostname().split(".")[0]
    first = ids_on(tmp_path)
    vehicle, source = first.identify(1, None)
    assert vehicle == f"{host}-pixhawk-sysid1"
    assert "stand in" in source
    for _ in range(2):
        assert ids_on(tmp_path).identify(1, None)[0] == vehicle


def test_a_template_without_sys_uuid_remembers_nothing(tmp_path: Path) -> None:
    ids = ids_on(tmp_path, template="uav-{sysid}")
    assert ids.identify(3, GUID) == ("uav-3", "")
    assert list(tmp_path.iterdir()) == []


def test_a_second_vehicle_without_sysid_in_the_template_gets_one_appended(tmp_path: Path) -> None:
    ids = ids_on(tmp_path, link="udpin:0.0.0.0:14550", template="uav")
    assert ids.identify(2, None)[0] == "uav"  # the first heard, whatever its sysid
    assert ids.identify(1, None)[0] == "uav-sysid1"
