"""A simulated PX4 that streams a ULog file over MAVLink, with fault injection.

The pure model (:mod:`ulogstream.sim.vehicle`, :mod:`ulogstream.sim.faults`) is re-exported
here; the asyncio shell and the ``ulogstream sim`` command live in :mod:`ulogstream.sim.runner`
(not imported here, so the pure model stays free of sockets and serial ports).
"""

from ulogstream.sim.faults import NO_FAULTS, FaultConfig, FaultRng, corrupt_frame
from ulogstream.sim.vehicle import (
    UDP_LINK_RATE,
    USB_LINK_RATE,
    DeliveredPacket,
    LogStreamEnded,
    LogStreamStarted,
    SendCommandAck,
    SendGarbage,
    SendLoggingData,
    SendVehicleHeartbeat,
    SimVehicle,
    VehicleConfig,
    VehicleOutput,
    VehicleStats,
    delivered_packet,
    split_log,
)

__all__ = [
    "NO_FAULTS",
    "UDP_LINK_RATE",
    "USB_LINK_RATE",
    "DeliveredPacket",
    "FaultConfig",
    "FaultRng",
    "LogStreamEnded",
    "LogStreamStarted",
    "SendCommandAck",
    "SendGarbage",
    "SendLoggingData",
    "SendVehicleHeartbeat",
    "SimVehicle",
    "VehicleConfig",
    "VehicleOutput",
    "VehicleStats",
    "corrupt_frame",
    "delivered_packet",
    "split_log",
]
