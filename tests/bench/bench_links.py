"""Links as they are: the share of the theoretical maximum kept under jitter and across a replug.

Run: ``.venv/bin/python tests/bench/bench_links.py`` (about 2 minutes; ``--quick`` for shorter
logs). Each case runs a :class:`~ulogstream.recorder.recorder.Recorder` and the simulated PX4
(:func:`~ulogstream.sim.runner.run_vehicle`) in this process, on a real link, and compares the
recorded file with the theoretical maximum of what the simulated link delivered
(``tests/e2e/support.py``: every whole message inside a run of consecutive delivered packets,
the deliveries taken in sequence order, as an ideal receiver with a reorder window would).

Cases (the generated flight log, about 52 KB and 210 packets per second of flight):

- radio: PX4's link configured at 5760 B/s (its budget: 2 packets per 100 ms), 5.7 KB/s on the
  wire, 40 ms one-way latency +- 10, 15 or 30 ms jitter (each frame drawn on its own, acks and
  commands too), the flight replayed in real time (PX4 drops what its budget cannot send).
- USB: PX4 at the USB ceiling (800 KB/s, about 2100 packets/s, the logger as fast as the
  budget takes it), 40 ms +- 10, 15 or 30 ms over UDP (a companion computer's link to ground).
- replug: PX4 on a pseudo-terminal at the USB rate, the flight at 4x (about 880 packets/s), the
  cable pulled for 1.5 s mid-log while PX4 streams on.

"kept" is the recorded share of the theoretical maximum (bytes of whole messages, dropouts not
counted); "no window" is what a receiver that drops every late packet (PX4's own script, this
project before its reorder window) could keep at best from the same deliveries. Target: kept
>= 99.9 % in every case, one file per flight.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from support.end_to_end import (  # noqa: E402 (the test helpers live beside the tests)
    deliveries_of,
    flight_log,
    in_sequence_order,
    record,
    recorded_items,
    recorder_settings,
    theoretical_maximum,
    vehicle_packets,
)

from ulogstream.adapters.udp_transport import UdpTransport  # noqa: E402
from ulogstream.recorder.wiring import build_recorder  # noqa: E402
from ulogstream.sim.faults import FaultConfig  # noqa: E402
from ulogstream.sim.runner import RADIO_BANDWIDTH, PtyDevice  # noqa: E402
from ulogstream.sim.vehicle import RADIO_LINK_RATE, USB_LINK_RATE, VehicleConfig  # noqa: E402

if TYPE_CHECKING:
    from support.end_to_end import Item

TARGET = 0.999
DELAY = 0.04
JITTERS = (0.010, 0.015, 0.030)


class Case(msgspec.Struct, frozen=True):
    """One measured link."""

    name: str
    flight_s: float
    config: VehicleConfig
    faults: FaultConfig
    pty: bool = False


class Result(msgspec.Struct, frozen=True):
    """What one case kept."""

    case: Case
    delivered: int
    late: int
    files: int
    maximum: int
    kept: int
    no_window: int
    seconds: float

    @property
    def share(self) -> float:
        return self.kept / self.maximum if self.maximum else 1.0

    @property
    def no_window_share(self) -> float:
        return self.no_window / self.maximum if self.maximum else 1.0


def message_bytes(items: list[Item]) -> int:
    return sum(len(item) for item in items if item is not None)


def cases(*, quick: bool) -> list[Case]:
    radio_s, usb_s, replug_s = (8.0, 10.0, 12.0) if quick else (20.0, 30.0, 16.0)
    found = [
        Case(
            f"radio 5.7 KB/s, 40 +- {jitter * 1000:.0f} ms",
            radio_s,
            VehicleConfig(link_rate=RADIO_LINK_RATE, speed=1.0),
            FaultConfig(seed=61, delay=DELAY, jitter=jitter, bandwidth=RADIO_BANDWIDTH),
        )
        for jitter in JITTERS
    ]
    found += [
        Case(
            f"USB rate over UDP, 40 +- {jitter * 1000:.0f} ms",
            usb_s,
            VehicleConfig(link_rate=USB_LINK_RATE, speed=None),
            FaultConfig(seed=62, delay=DELAY, jitter=jitter),
        )
        for jitter in JITTERS
    ]
    found.append(
        Case(
            "USB on a pty, 1.5 s replug",
            replug_s,
            VehicleConfig(link_rate=USB_LINK_RATE, speed=4.0),
            FaultConfig(cut_at=1200, cut_seconds=1.5),
            pty=True,
        )
    )
    return found


async def measure(case: Case, directory: Path) -> Result:
    log = flight_log(case.flight_s, seed=63)
    started = time.monotonic()
    if case.pty:
        device = PtyDevice.create(directory / "pixhawk")
        settings = recorder_settings(str(device.path), directory / "out", idle_timeout_s=30.0)
        run = await record(
            log, build_recorder(settings), device, config=case.config, faults=case.faults
        )
    else:
        link = await UdpTransport.listen("127.0.0.1", 0)
        connection = f"udpout:127.0.0.1:{link.local_address[1]}"
        settings = recorder_settings(connection, directory / "out", idle_timeout_s=30.0)
        run = await record(
            log,
            build_recorder(settings),
            link,
            config=case.config,
            faults=case.faults,
            limit_s=300.0,
        )
    seconds = time.monotonic() - started
    packets = vehicle_packets(log)
    delivered = deliveries_of(run.summary, 0)
    maximum = message_bytes(theoretical_maximum(log, packets, in_sequence_order(delivered)))
    no_window = message_bytes(theoretical_maximum(log, packets, delivered))
    kept = sum(message_bytes(recorded_items(path.read_bytes())[0]) for path in run.files)
    pipeline = run.recorder.pipeline
    late = 0 if pipeline is None else pipeline.session.counters.packets_late
    return Result(case, len(delivered), late, len(run.files), maximum, kept, no_window, seconds)


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


async def main_async(*, quick: bool) -> bool:
    results: list[Result] = []
    for case in cases(quick=quick):
        with tempfile.TemporaryDirectory(prefix="bench_links_") as directory:
            result = await measure(case, Path(directory))
        results.append(result)
        print(
            f"  {case.name}: {result.share * 100:.3f} % in {result.seconds:.1f} s",
            file=sys.stderr,
        )
    header = (
        f"| {'case':<34} | delivered | late | files | maximum B | kept B    | kept     "
        f"| no window |"
    )
    print(header)
    print("|" + "|".join("-" * (len(part)) for part in header.split("|")[1:-1]) + "|")
    passed = True
    for r in results:
        ok = r.share >= TARGET and r.files == 1
        passed = passed and ok
        print(
            f"| {r.case.name:<34} | {r.delivered:>9} | {r.late:>4} | {r.files:>5} "
            f"| {r.maximum:>9} | {r.kept:>9} | {r.share * 100:>7.3f}% "
            f"| {r.no_window_share * 100:>8.2f}% |" + ("" if ok else "  <- below target")
        )
    print(
        f"target: kept >= {TARGET * 100:.1f} % and one file per flight: "
        f"{'met' if passed else 'NOT met'}"
    )
    return passed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="shorter logs (about 1 minute)")
    args = parser.parse_args()
    print(f"{platform.node()}: Python {platform.python_version()}, {uptime()}")
    passed = asyncio.run(main_async(quick=bool(args.quick)))
    print(uptime())
    sys.exit(0 if passed else 1)


if __name__ == "__main__":
    main()
