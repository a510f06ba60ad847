"""The router as values: messages of one chunk in, groups and first-contact decisions out.

tests/e2e/test_vehicles.py keeps one end-to-end run of each decision through a real socket.
"""

from __future__ import annotations

from ulogstream.stream.packets import AutopilotVersion, Heartbeat, LoggingPacket, MavlinkMessage
from ulogstream.stream.router import (
    IDENTIFY_RETRY_S,
    IDENTIFY_TIMEOUT_S,
    AskIdentity,
    Impostor,
    NewVehicle,
    Router,
    VehicleIgnored,
)

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


def version(system_id: int, uid2: bytes, component_id: int = 1) -> AutopilotVersion:
    return AutopilotVersion(0, uid2, system_id, component_id)


GUID = bytes.fromhex("000600000000383233333039510700340029")


def test_an_autopilots_first_heartbeat_asks_who_it_is_and_its_answer_makes_it_new() -> None:
    router = Router(**OURS, target_system=None)
    assert router.first_contact(3, [packet(3, 0)], 0.0) is None  # wait: no HEARTBEAT yet
    camera = Heartbeat(3, 100, 30, 0)  # another component of the vehicle
    assert router.first_contact(3, [camera], 0.0) is None
    assert router.first_contact(3, [autopilot(3)], 0.0) == AskIdentity(3)
    assert router.next_deadline() == IDENTIFY_RETRY_S
    assert router.first_contact(3, [autopilot(3)], 0.1) is None  # asked already
    assert router.first_contact(3, [version(3, GUID, component_id=100)], 0.2) is None
    assert router.first_contact(3, [version(3, GUID)], 0.2) == NewVehicle(3, GUID.hex())
    assert router.next_deadline() is None


def test_an_autopilot_that_does_not_answer_is_asked_again_then_taken_without_its_id() -> None:
    router = Router(**OURS, target_system=None)
    assert router.first_contact(2, [autopilot(2)], 10.0) == AskIdentity(2)
    assert router.due(10.0 + IDENTIFY_RETRY_S / 2) == []
    asked = 0
    now = 10.0
    while (deadline := router.next_deadline()) is not None:
        now = deadline
        due = router.due(now)
        if due == [AskIdentity(2)]:
            asked += 1
        else:
            assert due == [NewVehicle(2)]
    assert asked == round(IDENTIFY_TIMEOUT_S / IDENTIFY_RETRY_S) - 1
    assert now == 10.0 + IDENTIFY_TIMEOUT_S


def test_a_stream_that_runs_already_never_waits_for_the_answer() -> None:
    router = Router(**OURS, target_system=None)
    assert router.first_contact(3, [packet(3, 1), autopilot(3)], 0.0) == NewVehicle(3)
    assert router.first_contact(4, [autopilot(4)], 0.0) == AskIdentity(4)
    assert router.first_contact(4, [autopilot(4), packet(4, 7)], 0.1) == NewVehicle(4)
    assert router.next_deadline() is None


def test_with_a_target_the_others_are_ignored_and_said_once_each() -> None:
    router = Router(**OURS, target_system=2)
    assert router.first_contact(1, [autopilot(1)], 0.0) == VehicleIgnored(1, target_system=2)
    assert router.first_contact(1, [autopilot(1)], 0.0) is None
    assert router.first_contact(3, [autopilot(3)], 0.0) == VehicleIgnored(3, target_system=2)
    assert router.first_contact(2, [autopilot(2)], 0.0) == AskIdentity(2)


def test_another_receiver_with_our_ids_is_an_impostor_said_once() -> None:
    router = Router(**OURS, target_system=None)
    twin = Heartbeat(254, 155, MAV_TYPE_GCS, 8)
    assert router.first_contact(254, [twin], 0.0) == Impostor(254, 155)
    assert router.first_contact(254, [twin], 0.0) is None
    # our system id with another component is a ground station of ours, not an impostor
    other = Router(**OURS, target_system=None)
    assert other.first_contact(254, [Heartbeat(254, 190, MAV_TYPE_GCS, 8)], 0.0) is None
