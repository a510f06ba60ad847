"""Vehicle ids and client ids from their templates, and each vehicle's id on a link."""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING

import pytest

from ulogstream.recorder.identity import (
    VehicleIds,
    client_id_of,
    remember_sys_uuid,
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


def test_a_remembered_sys_uuid_names_the_vehicle_from_the_next_start(tmp_path: Path) -> None:
    first = VehicleIds(out_dir=tmp_path, link="/dev/pixhawk", template=None, target_sysid=None)
    host = socket.gethostname().split(".")[0]
    assert first.identify(first.home) == (f"{host}-pixhawk-sysid1", None)
    assert first.learned(1, "0006ab") == "0006ab"
    remember_sys_uuid(first.memory(1), "0006ab")

    again = VehicleIds(out_dir=tmp_path, link="/dev/pixhawk", template=None, target_sysid=None)
    assert again.identify(again.home) == ("0006ab", "0006ab")
    assert again.learned(1, "0006ab") is None  # no change to announce


def test_a_second_vehicle_without_sysid_in_the_template_gets_one_appended(tmp_path: Path) -> None:
    ids = VehicleIds(
        out_dir=tmp_path, link="udpin:0.0.0.0:14550", template="uav", target_sysid=None
    )
    assert ids.identify(1)[0] == "uav"
    assert ids.identify(2)[0] == "uav-sysid2"
