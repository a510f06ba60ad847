"""The router as values: messages of one chunk in, groups and first-contact decisions out.

tests/e2e/test_vehicles.py keeps one end-to-end run of each decision through a real socket.
"""

from __future__ import annotations

from ulogstream.stream.packets import Heartbeat, LoggingPacket, MavlinkMessage
from ulogstream.stream.router import Impostor, NewVehicle, Router, VehicleIgnored

OURS = {"system_id": 254, "component_id": 155}
MAV_TYPE_QUADROTOR, MAV_AUTOPILOT_PX4, MAV_TYPE_GCS = 2, 12, 6


def autopilot(system_id: int) -> Heartbeat:
    return Heartbeat(system_id, 1, MAV_TYPE_QUADROTOR, MAV_AUTOPILOT_PX4)


def packet(system_id: int, sequence: int) -> LoggingPacket:
    return LoggingPacket(sequence, 0, b"x", needs_ack=True, system_id=system_id)


def test_one_vehicle_per_chunk_is_one_group_as_given() -> None:
    messages: list[MavlinkMessage] = [packet(1, i) for i in range(5)]
    [(system_id, group)] = Router.route(messages)
    assert system_id == 1
    assert group is messages  # the common case copies nothing


def test_several_vehicles_are_grouped_in_order_in_first_seen_order() -> None:
    messages: list[MavlinkMessage] = [packet(2, 0), packet(1, 0), packet(2, 1), packet(1, 1)]
    routed = Router.route(messages)
    assert [(s, [m.sequence for m in g if isinstance(m, LoggingPacket)]) for s, g in routed] == [
        (2, [0, 1]),
        (1, [0, 1]),
    ]
    assert Router.route([]) == []


def test_a_vehicle_is_new_once_its_autopilot_sends_a_heartbeat() -> None:
    router = Router(**OURS, target_system=None)
    assert router.first_contact(3, [packet(3, 0)]) is None  # wait: no HEARTBEAT yet
    camera = Heartbeat(3, 100, 30, 0)  # another component of the vehicle
    assert router.first_contact(3, [camera]) is None
    assert router.first_contact(3, [packet(3, 1), autopilot(3)]) == NewVehicle(3)


def test_with_a_target_the_others_are_ignored_and_said_once_each() -> None:
    router = Router(**OURS, target_system=2)
    assert router.first_contact(1, [autopilot(1)]) == VehicleIgnored(1, target_system=2)
    assert router.first_contact(1, [autopilot(1)]) is None
    assert router.first_contact(3, [autopilot(3)]) == VehicleIgnored(3, target_system=2)
    assert router.first_contact(2, [autopilot(2)]) == NewVehicle(2)


def test_another_receiver_with_our_ids_is_an_impostor_said_once() -> None:
    router = Router(**OURS, target_system=None)
    twin = Heartbeat(254, 155, MAV_TYPE_GCS, 8)
    assert router.first_contact(254, [twin]) == Impostor(254, 155)
    assert router.first_contact(254, [twin]) is None
    # our system id with another component is a ground station of ours, not an impostor
    other = Router(**OURS, target_system=None)
    assert other.first_contact(254, [Heartbeat(254, 190, MAV_TYPE_GCS, 8)]) is None
