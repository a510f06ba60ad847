"""FlightBackfill's order of work: pause on arming, resume after the next flight, stop as is.

A flight's backfill pauses when the vehicle arms again and resumes after the next flight, never
while armed; a stop hands everything on as it is. The backfill itself (the link, the SD log,
the patching) is tested end to end in tests/download and against PX4 in tests/px4; here it is
replaced by one that waits to be let go, to hold the order of work to account.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import pytest
from support.waiting import eventually, running

from ulogstream.adapters.file_sink import FinishedLog
from ulogstream.recorder.flights import FlightBackfill

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.timeout(30)


class Flights:
    """A FlightBackfill whose backfill waits until :attr:`go` is set; what it handed on."""

    def __init__(self, tmp_path: Path) -> None:
        self.handed: list[tuple[str, str]] = []
        self.started: list[str] = []
        self.go = asyncio.Event()
        self.flights = FlightBackfill(
            out_dir=tmp_path,
            max_bytes=1 << 20,
            link="test",
            hand_on=lambda _sysid, log, how: self.handed.append((log.path.name, how)),
            sender=lambda _sysid: None,
            codec=lambda: None,  # type: ignore[arg-type,return-value]
            uploads=False,
        )
        self.flights._backfill = self._backfill  # type: ignore[method-assign]
        self.tmp_path = tmp_path

    async def _backfill(self, system_id: int, paths: list[Path]) -> tuple[int, str]:
        assert system_id == 1
        self.started.append(paths[0].name)
        await self.go.wait()
        return 1, "backfilled"

    def flight_over(self, name: str) -> None:
        path = self.tmp_path / name
        path.write_bytes(b"ULog")
        finished = FinishedLog(path, 4, 0, None)
        self.flights.hold(1, finished, "complete", flight_over=True)


@pytest.mark.asyncio
async def test_arming_again_pauses_the_backfill_which_resumes_after_the_next_flight(
    tmp_path: Path,
) -> None:
    test = Flights(tmp_path)
    async with running(test.flights.run()):
        test.flight_over("first.ulg")
        await eventually(lambda: test.started == ["first.ulg"], what="the first backfill")

        test.flights.set_armed(1, armed=True)  # a second flight: the backfill pauses
        await asyncio.sleep(0.05)
        assert test.handed == []  # not handed on half done: it waits for the next flight's end

        test.flights.set_armed(1, armed=False)
        test.go.set()
        test.flight_over("second.ulg")
        await asyncio.wait_for(test.flights.drain(), 5)
    assert test.started == ["first.ulg", "first.ulg", "second.ulg"]  # resumed, then the next
    assert test.handed == [
        ("first.ulg", "complete; backfilled"),
        ("second.ulg", "complete; backfilled"),
    ]


@pytest.mark.asyncio
async def test_a_flight_over_while_armed_waits_and_a_stop_hands_everything_on_as_it_is(
    tmp_path: Path,
) -> None:
    test = Flights(tmp_path)
    async with running(test.flights.run()):
        test.flights.set_armed(1, armed=True)
        test.flight_over("first.ulg")  # its stream ended, but the vehicle is armed (a relaunch)
        await asyncio.wait_for(test.flights.drain(), 5)
        assert (test.started, test.handed) == ([], [])
    test.flights.release()  # the recorder stops
    assert test.handed == [("first.ulg", "complete")]
