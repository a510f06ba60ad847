"""The recorder: one link, every vehicle on it, its loops, and the stop choreography.

Everything that awaits lives here or in ``ulogstream.adapters``; the cores (the logging session,
the router and the ULog parser) are called synchronously and their outputs carried out.

Past 700 lines because the loops (link, timers, status, stop) share the recorder's state and its
stop choreography reads best in one place; the per-vehicle ack path is
:mod:`~ulogstream.recorder.pipeline`, the status text :mod:`~ulogstream.recorder.status`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import signal
import time
from functools import partial
from typing import TYPE_CHECKING, Protocol

from ulogstream.adapters.connection import open_transport
from ulogstream.adapters.file_sink import (
    FinishedLog,
    RecoveredFile,
    recover_partial_files,
)
from ulogstream.adapters.log_files import (
    FileEvent,
    LogFiles,
)
from ulogstream.adapters.sd_notify import Notifier, watchdog_interval
from ulogstream.adapters.serial_transport import SerialTransport
from ulogstream.adapters.udp_transport import UdpTransport
from ulogstream.errors import LinkError
from ulogstream.recorder.pipeline import Pipeline, _drop
from ulogstream.recorder.status import (
    RecorderStatus,
    link_hint,
    state_text,
    status_fields,
    status_line,
)
from ulogstream.stream import (
    Heartbeat,
    LogEnded,
    MavlinkMessage,
    SessionState,
    logging_packet,
)
from ulogstream.stream.packets import (
    MAV_CMD_REQUEST_MESSAGE,
    MAV_COMP_ID_AUTOPILOT1,
    MAVLINK_MSG_ID_AUTOPILOT_VERSION,
)
from ulogstream.stream.router import AskIdentity, Contact, Impostor, NewVehicle, VehicleIgnored

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine, Mapping

    from ulogstream.adapters.transport import Transport
    from ulogstream.live.outbox import MqttMessage
    from ulogstream.mavlink_codec import MavlinkCodec
    from ulogstream.recorder.decoding import Publisher
    from ulogstream.recorder.flights import FlightBackfill
    from ulogstream.recorder.wiring import RecorderParts
    from ulogstream.upload.info import FinishedLogInfo
    from ulogstream.upload.targets import Uploaded


logger = logging.getLogger("ulogstream")


RECONNECT_BACKOFF = (0.5, 1.0, 2.0, 5.0)
"""Seconds between attempts to open a link that is not there (the last one repeats)."""


REJECTED_RETRY_S = 30.0
"""After the vehicle refused to stream, the recorder asks again this much later."""


STATUS_INTERVAL_S = 0.5
"""Refresh period of the terminal status line and the MQTT status counters."""


STATUS_LOG_INTERVAL_S = 60.0
"""Period of the key=value status line logged when there is no terminal status line."""


STOP_PROGRESS_LOG_S = 5.0
"""Period of the 'stopping: ...' progress line in the log while a stop waits for the vehicle."""


HELLO_INTERVAL_S = 1.0
"""Period of our HEARTBEAT on a link where no vehicle has been heard yet."""


TIMER_TICK_S = 0.25
"""Longest sleep of the timer loop, which sleeps until the earliest deadline.

A deadline set while it sleeps, earlier than its wake-up (a packet held for reordering, a
command to send again, a new vehicle), wakes it after the burst of datagrams that set it
(:meth:`Recorder._wake_timer_if_due`). Only what has no deadline waits for the tick: the state
shown in the status, a refused stream's retry, a stop's progress line. Each wake-up costs a loop
turn: at 50 ms they were about a sixth of ``record``'s CPU while a log streamed."""

LIVE_TIMER_TICK_S = 0.05
"""Longest sleep of the timer loop with a live outlet (MQTT, Foxglove): samples the rate cap
holds are set aside while decoding, not while reading, and wait at most this past their time."""


ANNOUNCE_WAIT_S = 3.0
"""At a stop, the longest wait for the last finished logs' checksums and announcements."""


UPLOAD_WAIT_S = 5.0
"""At a stop, the longest wait for uploads still running or queued (the files stay if not).

Short: the systemd unit allows 15 s for a whole stop (TimeoutStopSec), the stream's end first."""


RESTART_BACKOFF = (1.0, 2.0, 5.0, 10.0, 30.0)
"""Seconds before a failed side task (status, MQTT) is started again (the last one repeats)."""


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""Signals that stop a recording with the handshake: SIGHUP too (a closed terminal, a dropped
SSH session), which would otherwise end the process at once and leave the ``.part``."""


RECOVERED_HOW = "incomplete: recovered after an interrupted recording"
"""How a log recovered at start-up ended, for its announcement and upload."""


def _announce(publisher: Publisher, info: FinishedLogInfo) -> None:
    """Publish ``{root}/{vehicle}/meta/log_finished`` (not retained: an event) for ``info``."""
    _event(publisher, info.vehicle, "log_finished", info.as_json())


def _event(publisher: Publisher, vehicle: str, name: str, value: Mapping[str, object]) -> None:
    """Publish ``{root}/{vehicle}/meta/{name}``: JSON, QoS 1 at least, not retained."""
    from ulogstream.live.outbox import MqttMessage  # noqa: PLC0415 (numpy: MQTT only)

    choice = publisher.policy.settings
    publisher.offer(
        [
            MqttMessage(
                f"{choice.root}/{vehicle}/meta/{name}",
                json.dumps(value, separators=(",", ":")).encode(),
                qos=max(1, choice.qos),
                content_type="application/json",
            )
        ]
    )


def final_status(pipeline: Pipeline, publisher: Publisher) -> list[MqttMessage]:
    """The retained end-of-run status of a vehicle: offline, its last counters and last file."""
    pipeline.refresh_status()
    status = pipeline.status
    fields = status_fields(status)
    if status.log_file is None and status.finished:
        fields["log_file"] = str(status.finished[-1].path)
    now = time.monotonic()
    publisher.policy.update_status(now, fields=fields)
    return [publisher.policy.offline_status(now)]


class _FatalLinkError(Exception):
    """Carries the LinkError of a link that will not open out of the task group.

    ``record --once`` with no link, or a path that is never a serial port.
    """

    def __init__(self, error: LinkError) -> None:
        super().__init__(str(error))
        self.error = error


class Recorder:
    """Records every log streamed on one link, publishing live, until stopped.

    Args:
        parts: What it is made of (:func:`~ulogstream.recorder.wiring.recorder_parts`).
        once: Return after the first log ends (``record --once``).
        status_view: Draws the live status line on a terminal (``view(text, final=...)``), or
            None (the journal gets a key=value line every minute instead).
        notifier: systemd notifications (READY, STATUS, WATCHDOG); a no-op outside systemd.
        count_topics: Frame every log live to count each topic instance's rows in
            ``status.topics`` (the demo's view). Without it and without a live outlet the
            recorder frames nothing: the file needs only the stream's bytes.
    """

    def __init__(
        self,
        parts: RecorderParts,
        *,
        once: bool = False,
        status_view: StatusView | None = None,
        notifier: Notifier | None = None,
        count_topics: bool = False,
    ) -> None:
        self.parts = parts
        self.once = once
        self.count_topics = count_topics
        self.status = RecorderStatus(link=parts.link)
        self._status_view = status_view
        self._notifier = notifier or Notifier({})
        self._stop_requested = asyncio.Event()
        self._abandon_requested = asyncio.Event()
        self._timer_waker: asyncio.Future[None] | None = None
        """What the timer loop sleeps on (:meth:`_timer_sleep`)."""
        self._timer_due = math.inf
        """When the sleeping timer loop wakes by itself (``time.monotonic``)."""
        self._tick = (
            LIVE_TIMER_TICK_S
            if parts.publisher is not None or parts.foxglove is not None
            else TIMER_TICK_S
        )
        self._stop_hint_shown = False
        self.exit_code = 0
        self.pipeline: Pipeline | None = None
        """The first vehicle's pipeline (the status line's); every one is in :attr:`vehicles`."""
        self.vehicles: dict[int, Pipeline] = {}
        """One pipeline (session, files, parser, publisher) per autopilot system id."""
        self.identity = parts.identity
        self.publishers: dict[str, Publisher] = {}
        """Each vehicle's MQTT side by vehicle id, made at its first contact (its own
        connection and Last Will); empty without a broker."""
        self._group: asyncio.TaskGroup | None = None
        self._side_tasks: list[asyncio.Task[None]] = []
        self.shipper = parts.shipper
        self.shipper.on_uploaded = self._uploaded
        self.foxglove = parts.foxglove
        """The Foxglove live view of the first vehicle (``[foxglove]``), or None."""
        self._codec = parts.codec()
        self._send: Callable[[bytes], None] = _drop
        self._udp: UdpTransport | None = None
        self._next_hello = 0.0
        self._link_codec: MavlinkCodec | None = None
        """The open link's codec (None while no link is open)."""
        self._general_path = False
        """A message took the general path since the last burst: it may have set a deadline."""
        self.flights: FlightBackfill | None = None
        """Completes each flight from the SD log (``while_armed`` with backfill), or None."""
        if parts.backfill_max_bytes is not None:
            # The download and backfill machinery (~60 ms of imports) only when it is on.
            from ulogstream.recorder.flights import FlightBackfill  # noqa: PLC0415

            self.flights = FlightBackfill(
                out_dir=parts.out_dir,
                max_bytes=parts.backfill_max_bytes,
                link=parts.link,
                hand_on=self._hand_on,
                sender=self._sender,
                codec=parts.codec,
                uploads=parts.shipper.uploads,
            )
        self._asked_at: dict[int, tuple[str, int]] = {}
        """The UDP address each autopilot asked for AUTOPILOT_VERSION was first heard from."""

    @property
    def vehicle_ids(self) -> dict[int, str]:
        """Each vehicle's id (topics, folder under ``out_dir``, uploads), fixed for the run."""
        return self.identity.ids

    def request_stop(self) -> None:
        """Stop streaming with the handshake, finish the file and return from :meth:`run`.

        A second request while the stop waits for the vehicle abandons the wait.
        """
        if self._stop_requested.is_set():
            self._abandon_requested.set()
        self._set(self._stop_requested)

    def _set(self, request: asyncio.Event) -> None:
        """Set a stop or abandon request and wake the timer loop to carry it out."""
        request.set()
        if self._timer_waker is not None:
            _wake(self._timer_waker)

    async def run(self) -> int:
        """Run until stopped; the exit code is 0 unless the stream could not be recorded."""
        if self.foxglove is not None:
            self.foxglove.start()  # a port in use fails here, before anything is recorded
        out_dir = self.parts.out_dir
        recovered = await asyncio.to_thread(
            recover_partial_files, out_dir, upload_pending=self.shipper.uploads
        )
        for log in recovered:
            logger.warning("%s", log.message)
            if not log.corrupt and not log.discarded:
                self._recovered(log)
        loop = asyncio.get_running_loop()
        with contextlib.suppress(NotImplementedError, RuntimeError):
            for signum in STOP_SIGNALS:
                loop.add_signal_handler(signum, self.request_stop)
        self._notifier.ready(f"recording from {self.parts.link}")
        try:
            async with asyncio.TaskGroup() as group:
                self._group = group
                side_tasks = self._side_tasks
                side_tasks.append(group.create_task(self._supervised("status", self._status_loop)))
                side_tasks.append(group.create_task(self._supervised("upload", self.shipper.run)))
                if self.flights is not None:
                    side_tasks.append(
                        group.create_task(self._supervised("backfill", self.flights.run))
                    )
                link_task = group.create_task(self._link_loop())
                await self._timer_loop()
                if self.flights is not None:
                    await self._finish_flights()  # on the link, before it closes
                link_task.cancel()
                for pipeline in self.vehicles.values():
                    pipeline.refresh_status()  # the last counters, for the caller and MQTT
                    await pipeline.files.aclose()  # every file finished (fsync, rename) first
                await self._finish_shipping()
                for pipeline in self.vehicles.values():
                    if pipeline.publisher is not None:
                        pipeline.publisher.offer(final_status(pipeline, pipeline.publisher))
                if self.foxglove is not None:
                    self.foxglove.offer([self.foxglove.policy.offline_status(time.monotonic())])
                if self.publishers:
                    drained = [p.sink.wait_drained() for p in self.publishers.values()]
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(asyncio.gather(*drained), 2.0)
                for task in side_tasks:
                    task.cancel()
        except* _FatalLinkError as errors:
            first = errors.exceptions[0]
            assert isinstance(first, _FatalLinkError)  # noqa: S101 (the except* type)
            raise first.error from None
        finally:
            self._notifier.stopping()
            for pipeline in self.vehicles.values():
                await pipeline.files.aclose()
            if self.foxglove is not None:
                self.foxglove.stop()
            with contextlib.suppress(NotImplementedError, RuntimeError):
                for signum in STOP_SIGNALS:
                    loop.remove_signal_handler(signum)
            self._draw_status(final=True)
        for pipeline in self.vehicles.values():
            if pipeline.rejected is not None and self.once:
                self.exit_code = 1
        return self.exit_code

    async def _finish_flights(self) -> None:
        """Stopping: every file finished, then each flight that is over backfilled.

        The rest is handed on as it is; a second stop request cuts the backfill short.
        """
        flights = self.flights
        assert flights is not None  # noqa: S101 (called with backfill on)
        for pipeline in self.vehicles.values():
            await pipeline.files.aclose()  # the last LogFinished: the flight is over
        drained = asyncio.ensure_future(flights.drain())
        abandon = asyncio.ensure_future(self._abandon_requested.wait())
        await asyncio.wait({drained, abandon}, return_when=asyncio.FIRST_COMPLETED)
        for task in (drained, abandon):
            task.cancel()
        flights.release()
        for system_id, pipeline in self.vehicles.items():
            flights.count_into(system_id, pipeline.status)  # for the final status

    def _count_uploads(self, status: RecorderStatus) -> None:
        """Copy the (recorder-wide) upload counters into ``status``."""
        shipper = self.shipper
        status.uploads = shipper.uploaded
        status.upload_failures = shipper.failed
        status.upload_backlog = shipper.backlog
        status.upload_held = shipper.held

    async def _finish_shipping(self) -> None:
        """Let finished logs be announced, and uploads end, for a bounded time before stopping."""
        shipper = self.shipper
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(shipper.wait_described(), ANNOUNCE_WAIT_S)
        if shipper.backlog and not shipper.paused:
            logger.info(
                "waiting up to %.0f s for %d upload(s) before stopping",
                UPLOAD_WAIT_S,
                shipper.backlog,
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(shipper.wait_settled(), UPLOAD_WAIT_S)
        for pipeline in self.vehicles.values():  # the final status shows how uploads went
            self._count_uploads(pipeline.status)

    def _new_vehicle(self, system_id: int, guid: str | None, now: float) -> Pipeline:
        """A pipeline for the autopilot ``system_id``, heard for the first time on the link.

        Its vehicle id comes from ``guid`` (its AUTOPILOT_VERSION; see :class:`~ulogstream.
        recorder.identity.VehicleIds`) and names its folder ``out_dir/{vehicle}`` and its MQTT
        tree, so vehicles never mix. The recorder's own vehicle (``--target-sysid``, else the
        first heard) gets the live view too.
        """
        parts, identity = self.parts, self.identity
        home = identity.home in {None, system_id} and not self.vehicles
        vehicle_id, source = identity.identify(system_id, guid)
        publisher = self._publisher_for(vehicle_id)
        foxglove = self.foxglove if home else None
        logger.info(
            "vehicle sysid %d: vehicle id %r%s%s",
            system_id,
            vehicle_id,
            f" ({{sys_uuid}}: {source})" if source else "",
            "" if publisher is None else f", MQTT client id {publisher.sink.client_id!r}",
        )
        sink = parts.files(system_id, vehicle_id)
        status = self.status if self.pipeline is None else RecorderStatus(link=self.status.link)
        pipeline = Pipeline(
            codec=self._codec,
            session=parts.session(system_id),
            files=LogFiles(sink, partial(self._file_event, system_id)),
            status=status,
            publisher=publisher,
            foxglove=foxglove,
            count_topics=self.count_topics,
            on_log_ended=self._log_ended,
        )
        pipeline.on_log_finished = partial(self._log_finished, pipeline, system_id)
        self.vehicles[system_id] = pipeline
        if self.pipeline is None:
            self.pipeline = pipeline
        logger.info("vehicle sysid %d: recording into %s", system_id, sink.folder)
        pipeline.files.start()
        pipeline.attach(self._vehicle_send(pipeline), now, restored=False)
        pipeline.start(now)
        return pipeline

    def _publisher_for(self, vehicle_id: str) -> Publisher | None:
        """The MQTT side of ``vehicle_id``: made, and its connection started, at first use."""
        publisher = self.publishers.get(vehicle_id)
        if publisher is None and self.parts.publisher is not None:
            publisher = self.publishers[vehicle_id] = self.parts.publisher(vehicle_id)
            assert self._group is not None  # noqa: S101 (vehicles and announcements come in run)
            run = self._supervised(f"MQTT of {vehicle_id}", publisher.sink.run)
            self._side_tasks.append(self._group.create_task(run))
        return publisher

    def _recovered(self, log: RecoveredFile) -> None:
        """A log an interrupted recording left: announced and uploaded like any finished one.

        It is announced on its vehicle's tree, by that vehicle's connection.
        """
        vehicle = log.tags.get("vehicle")
        if not isinstance(vehicle, str):
            vehicle = log.path.parent.parent.name
        announce = None
        if self.parts.publisher is not None:
            announce = partial(self._announce, vehicle)
        self.shipper.offer(
            log.path, log.size, vehicle=vehicle, how=RECOVERED_HOW, announce=announce
        )

    def _log_finished(
        self, pipeline: Pipeline, system_id: int, finished: FinishedLog, how: str
    ) -> None:
        """A log's file is finished: hand it on, or hold it for its flight's backfill."""
        if self.flights is not None:
            state = pipeline.session.state
            over = state in {SessionState.WAITING_FOR_ARMING, SessionState.ENDED}
            self.flights.hold(system_id, finished, how, flight_over=over)
            return
        self._hand_on(system_id, finished, how)

    def _hand_on(self, system_id: int, finished: FinishedLog, how: str) -> None:
        """Announce ``finished`` on MQTT and queue its upload (both off the event loop's path)."""
        vehicle = self.identity.ids[system_id]
        announce = None
        if self.parts.publisher is not None:
            announce = partial(self._announce, vehicle)
        self.shipper.offer(
            finished.path, finished.size, vehicle=vehicle, how=how, announce=announce
        )

    def _announce(self, vehicle: str, info: FinishedLogInfo) -> None:
        """Publish ``meta/log_finished`` on the connection of the log's vehicle."""
        publisher = self._publisher_for(vehicle)
        if publisher is not None:
            _announce(publisher, info)

    def _uploaded(self, info: FinishedLogInfo, target: str, uploaded: Uploaded) -> None:
        """Publish ``meta/log_uploaded``: where the log went (a dashboard links it from there)."""
        if self.parts.publisher is None:
            return
        publisher = self._publisher_for(info.vehicle)
        assert publisher is not None  # noqa: S101 (a broker is configured)
        value: dict[str, object] = {
            "path": str(info.path),
            "name": info.path.name,
            "sha256": info.sha256,
            "target": target,
            "location": uploaded.location,
        }
        if uploaded.delete_token is not None:
            value["delete_token"] = uploaded.delete_token
        _event(publisher, info.vehicle, "log_uploaded", value)

    def _file_event(self, system_id: int, event: FileEvent) -> None:
        self.vehicles[system_id].file_event(event)

    async def _supervised(
        self, name: str, run: Callable[[], Coroutine[object, object, None]]
    ) -> None:
        """Run a side task for ever: a failure is logged with its cause and it starts again."""
        failures = 0
        while True:
            started = time.monotonic()
            try:
                await run()
            except Exception as err:  # noqa: BLE001 (any fault of a side task is logged, then retried)
                if time.monotonic() - started > RESTART_BACKOFF[-1]:
                    failures = 0
                delay = RESTART_BACKOFF[min(failures, len(RESTART_BACKOFF) - 1)]
                failures += 1
                logger.error(  # noqa: TRY400 (one line with the cause; the loop goes on)
                    "%s stopped: %s: %s; restarting it in %.0f s",
                    name,
                    type(err).__name__,
                    err,
                    delay,
                )
            else:
                return
            await asyncio.sleep(delay)

    async def _link_loop(self) -> None:
        """Open the link, read it until it fails, and open it again, for ever."""
        attempt = 0
        last_error = ""
        opened_before = False
        while True:
            try:
                transport = await open_transport(self.parts.connection)
            except LinkError as err:
                if err.permanent or (self.once and not opened_before):
                    # No link to wait for (record --once), or one that can never open (a
                    # regular file as the serial port): one clear error, exit non-zero.
                    raise _FatalLinkError(err) from None
                if str(err) != last_error:
                    how = "" if last_error else " (Ctrl-C or SIGTERM stops)"
                    logger.warning("%s; retrying until it opens%s", err, how)
                    last_error = str(err)
                await asyncio.sleep(RECONNECT_BACKOFF[min(attempt, len(RECONNECT_BACKOFF) - 1)])
                attempt += 1
                continue
            if opened_before:
                self.status.link_reconnects += 1
                logger.info("link %s is back", transport.describe())
            else:
                logger.info("listening on %s", transport.describe())
                logger.info("%s", self.parts.identity_line)
                self.status.state = "waiting for autopilot"
            opened_before = True
            attempt, last_error = 0, ""
            self._codec = self._link_codec = self.parts.codec()  # fresh per opening
            self._udp = transport if isinstance(transport, UdpTransport) else None
            self._send = transport.send
            now = time.monotonic()
            self._hello(now)
            for pipeline in self.vehicles.values():
                pipeline.codec = self._codec
                pipeline.attach(self._vehicle_send(pipeline), now, restored=True)
            try:
                await self._receive_loop(transport)
            except LinkError as err:
                logger.warning("%s; the open log waits for it to come back", err)
            finally:
                self._send = _drop
                self._udp = self._link_codec = None
                for pipeline in self.vehicles.values():
                    pipeline.detach()
                await transport.aclose()

    async def _receive_loop(self, transport: Transport) -> None:
        """Route what ``transport`` receives until it closes (a :class:`LinkError` then)."""
        route = self._route
        monotonic = time.monotonic
        if isinstance(transport, UdpTransport):  # datagrams handled in the reader callback

            def handle(data: bytes) -> None:
                route(data, monotonic())

            await transport.pump(handle, after_burst=self._after_burst)
        else:
            codec = self._codec
            # A serial port wakes the loop once a frame can be whole, not for every piece.
            wake_after = transport.wake_after if isinstance(transport, SerialTransport) else None
            while data := await transport.receive():
                route(data, monotonic())
                self._after_burst()
                if wake_after is not None:
                    wake_after(codec.bytes_wanted())
        msg = f"link {transport.describe()} was closed"
        raise LinkError(msg)

    def _route(self, data: bytes, now: float) -> None:
        """Decode one chunk and hand each vehicle its messages (acks go out inside)."""
        packet = self._codec.decode_logging_data(data)
        if packet is None:
            flights = self.flights
            if flights is not None and flights.listening and flights.feed(data):
                return  # a backfill's LOG_DATA, and nothing else
            messages = self._codec.decode(data)
            if not messages:
                return
        else:
            # The data phase's common case, one plain LOGGING_DATA: no message built.
            pipeline = self.vehicles.get(packet[0])
            if (
                pipeline is not None
                and (self._udp is None or pipeline.peer == self._udp.peer)
                and pipeline.receive_logging_data(packet, now)
            ):
                return
            messages = [logging_packet(packet)]
        self._general_path = True
        router = self.parts.router
        for system_id, group in router.route(messages):
            pipeline = self.vehicles.get(system_id)
            if pipeline is None:
                pipeline = self._first_contact(router.first_contact(system_id, group, now), now)
                if pipeline is None:
                    continue
            elif self._udp is not None and pipeline.peer != self._udp.peer:
                pipeline.attach(self._vehicle_send(pipeline), now, restored=False)
            pipeline.receive_messages(group, now)
            if self.parts.watch_armed or self.flights is not None:
                self._heard_armed(system_id, group)

    def _heard_armed(self, system_id: int, messages: list[MavlinkMessage]) -> None:
        """Tell the shipper whether the autopilot ``system_id`` is armed (its HEARTBEAT)."""
        for message in messages:
            if type(message) is Heartbeat and message.component_id == MAV_COMP_ID_AUTOPILOT1:
                if self.parts.watch_armed:
                    self.shipper.set_armed(message.armed, system_id)
                if self.flights is not None:
                    self.flights.set_armed(system_id, armed=message.armed)

    def _first_contact(self, contact: Contact | None, now: float) -> Pipeline | None:
        """Carry out what the router decided about a system id not seen before."""
        match contact:
            case AskIdentity(system_id):
                self._ask_identity(system_id)
            case NewVehicle(system_id, guid):
                return self._new_vehicle(system_id, guid, now)
            case VehicleIgnored(system_id, target):
                logger.info(
                    "vehicle sysid %d seen on %s and ignored: recording sysid %d only "
                    "(--target-sysid)",
                    system_id,
                    self.parts.link,
                    target,
                )
            case Impostor(system_id, component_id):
                logger.warning(
                    "another receiver on %s uses our MAVLink ids (sysid %d, compid %d): both "
                    "would take one log stream; give one of them other ids (--sysid)",
                    self.parts.link,
                    system_id,
                    component_id,
                )
            case None:
                pass
        return None

    def _ask_identity(self, system_id: int) -> None:
        """Ask the autopilot ``system_id`` for AUTOPILOT_VERSION (it names the vehicle).

        On a UDP link it goes to the address the autopilot was last heard from.
        """
        if self._link_codec is None:
            return  # the link is down: asked again, or taken without, when due
        frame = self._codec.encode_command_long(
            MAV_CMD_REQUEST_MESSAGE,
            MAVLINK_MSG_ID_AUTOPILOT_VERSION,
            system_id,
            MAV_COMP_ID_AUTOPILOT1,
        )
        udp = self._udp
        if udp is not None and udp.peer is not None:
            peer = self._asked_at.setdefault(system_id, udp.peer)
            udp.send_to(frame, peer)
        else:
            self._send(frame)

    def _sender(self, system_id: int) -> Callable[[bytes], None] | None:
        """How to send to vehicle ``system_id`` on whichever link is open when a frame goes out.

        None: no vehicle of that id, or no link open now.
        """
        if system_id not in self.vehicles or self._link_codec is None:
            return None
        return partial(self._send_to, system_id)

    def _send_to(self, system_id: int, data: bytes) -> None:
        """Send ``data`` to vehicle ``system_id``: its own address on a UDP link with several."""
        pipeline = self.vehicles[system_id]
        udp = self._udp
        if udp is not None and pipeline.peer is not None:
            udp.send_to(data, pipeline.peer)
        else:
            self._send(data)

    def _vehicle_send(self, pipeline: Pipeline) -> Callable[[bytes], None]:
        """How ``pipeline`` sends: to its own vehicle's address on a UDP link that has several."""
        udp = self._udp
        if udp is None or udp.peer is None:
            pipeline.peer = None
            return self._send
        peer = pipeline.peer = udp.peer
        send: Callable[[bytes], None] = partial(udp.send_to, peer=peer)
        return send

    async def _timer_loop(self) -> None:
        """Drive every vehicle's timers until all have ended (stopped, or given up)."""
        stopping = False
        next_progress_log = 0.0
        while True:
            now = time.monotonic()
            vehicles = list(self.vehicles.values())
            system_ids = list(self.vehicles)
            if stopping and all(p.ended.is_set() for p in vehicles):
                return
            if not stopping and self._stop_requested.is_set():
                stopping = True
                next_progress_log = now + STOP_PROGRESS_LOG_S
                if self._status_view is None:  # a terminal shows this on its status line
                    logger.info("stopping: %s", self._stop_text())
                for pipeline in vehicles:
                    pipeline.stop(now)
                continue
            router = self.parts.router
            for contact in router.due(now):
                self._first_contact(contact, now)
            if not vehicles:
                if stopping:
                    return  # no vehicle was ever heard: nothing to stop
                if now >= self._next_hello:
                    self._hello(now)
            for system_id, pipeline in zip(system_ids, vehicles, strict=True):
                if self.flights is not None:
                    self.flights.count_into(system_id, pipeline.status)
                if pipeline.ended.is_set():
                    continue
                if stopping:
                    if self._abandon_requested.is_set():
                        logger.warning("stop abandoned: the end of the log is not recorded")
                        pipeline.abandon(now)
                        continue
                    progress = pipeline.session.stop_progress(now)
                    pipeline.status.state = (
                        "stopping" if progress is None else f"stopping: {progress}"
                    )
                    if progress is not None and now >= next_progress_log:
                        logger.info("stopping: %s", progress)
                elif pipeline.rejected is not None:
                    self._rejected(pipeline, now)
                elif pipeline.disk_full:
                    pipeline.status.state = "disk full"
                elif self.flights is not None and (backfilling := self.flights.progress(system_id)):
                    pipeline.status.state = backfilling
                else:
                    pipeline.status.state = state_text(
                        pipeline.session.state, pipeline.status.state
                    )
                pipeline.timer(now)
            if stopping and now >= next_progress_log:
                next_progress_log = now + STOP_PROGRESS_LOG_S
            due = now + self._tick
            if (deadline := self._next_deadline()) is not None:
                due = min(due, deadline)
            wake = self._abandon_requested if stopping else self._stop_requested
            if not wake.is_set():
                await self._timer_sleep(due)

    def _next_deadline(self) -> float | None:
        """The earliest time the timer loop has something to do (None: nothing scheduled)."""
        deadlines = [d for p in self.vehicles.values() if (d := p.next_deadline()) is not None]
        if (asking := self.parts.router.next_deadline()) is not None:
            deadlines.append(asking)
        if not self.vehicles:
            deadlines.append(self._next_hello)
        return min(deadlines) if deadlines else None

    def _after_burst(self) -> None:
        """What received datagrams were handled: due decoding, then the timer loop's deadline."""
        now = time.monotonic()
        for pipeline in self.vehicles.values():
            pipeline.received(now)
        self._wake_timer_if_due()

    def _wake_timer_if_due(self) -> None:
        """Wake the sleeping timer loop if what was just received set an earlier deadline.

        Only after what took the general path: the data phase's fast path sets none (its file
        hand-over is already due within a flush interval, see :meth:`LogFiles.flush_due`).
        """
        if not self._general_path:
            return
        self._general_path = False
        if self._timer_waker is not None:
            deadline = self._next_deadline()
            if deadline is not None and deadline < self._timer_due:
                _wake(self._timer_waker)

    async def _timer_sleep(self, due: float) -> None:
        """Sleep until ``due`` (``time.monotonic``), or until :meth:`_set` wakes the timer loop.

        One future and one timer: ``asyncio.wait_for`` on an event's ``wait`` would wrap a task
        around it each time, three loop turns per tick instead of one.
        """
        loop = asyncio.get_running_loop()
        waker = self._timer_waker = loop.create_future()
        self._timer_due = due
        timer = loop.call_later(max(0.0, due - time.monotonic()), _wake, waker)
        try:
            await waker
        finally:
            timer.cancel()
            self._timer_waker = None
            self._timer_due = math.inf

    def _stop_text(self) -> str:
        """What a stop does now: the handshake, or nothing to stop."""
        if not self.vehicles:
            return "no vehicle was heard, so there is no stream to stop"
        if self._link_codec is None:
            return (
                "the link is down, so LOGGING_STOP cannot reach the vehicle; the open log is "
                "finished when the stop times out (a second SIGINT or SIGTERM ends at once)"
            )
        return "LOGGING_STOP sent; a second SIGINT or SIGTERM ends at once (the .part is kept)"

    def _hello(self, now: float) -> None:
        """Send our HEARTBEAT while no vehicle is known: a udpout peer learns our address from it.

        Each vehicle's session sends its own once it exists.
        """
        self._send(self._codec.encode_heartbeat())
        self._next_hello = now + HELLO_INTERVAL_S

    def _rejected(self, pipeline: Pipeline, now: float) -> None:
        """The vehicle refused to stream: ask again later (or give up with --once)."""
        if self.once:
            self._set(self._stop_requested)
        elif pipeline.rejected_at is None:
            pipeline.rejected_at = now
            logger.warning("asking again in %.0f s", REJECTED_RETRY_S)
        elif now - pipeline.rejected_at >= REJECTED_RETRY_S:
            system_id = pipeline.session.autopilot_system
            pipeline.rejected = pipeline.rejected_at = None
            pipeline.session = self.parts.session(system_id or 1)
            pipeline.start(now)

    def _log_ended(self, _ended: LogEnded) -> None:
        if self.once:
            self._set(self._stop_requested)

    async def _status_loop(self) -> None:
        watchdog = watchdog_interval() if self.parts.watchdog else None
        next_watchdog = 0.0
        next_notify = 0.0
        started = time.monotonic()
        next_log = started + STATUS_LOG_INTERVAL_S
        last_bytes, last_time = 0, started
        hint_after = self.parts.hint_after_s
        # The open link is checked once, hint_after after it opened, for any valid MAVLink.
        watched: MavlinkCodec | None = None
        watched_since = started
        while True:
            now = time.monotonic()
            codec = self._link_codec
            if codec is not watched:
                watched, watched_since = codec, now
            elif codec is not None and hint_after and now - watched_since >= hint_after:
                hint = self.link_hint(codec)
                if hint is not None:
                    logger.warning("%s", hint)
                watched_since = float("inf")  # one look per link opening
            pipeline = self.pipeline
            for vehicle in self.vehicles.values():
                vehicle.refresh_status()
                self._count_uploads(vehicle.status)
                if vehicle.publisher is not None:
                    vehicle.publisher.offer(
                        vehicle.publisher.policy.update_status(
                            now, state=vehicle.status.state, fields=status_fields(vehicle.status)
                        )
                    )
                if vehicle.foxglove is not None:
                    vehicle.foxglove.offer(
                        vehicle.foxglove.policy.update_status(
                            now,
                            state=vehicle.status.state,
                            fields={
                                **status_fields(vehicle.status),
                                **vehicle.foxglove.counters(),
                            },
                        )
                    )
            elapsed = now - last_time
            if elapsed >= 1.0:
                self.status.bytes_per_s = (self.status.bytes_total - last_bytes) / elapsed
                last_bytes, last_time = self.status.bytes_total, now
            self._draw_status()
            if watchdog is not None and now >= next_watchdog:
                self._notifier.watchdog()
                next_watchdog = now + watchdog
            if now >= next_notify:
                self._notifier.status(self.status_text())
                next_notify = now + 5.0
            if self._status_view is None and pipeline is not None and now >= next_log:
                # No terminal (the journal, a pipe): the counters as one key=value line.
                fields = " ".join(
                    f"{k}={json.dumps(v)}" for k, v in status_fields(self.status).items()
                )
                logger.info("status state=%s %s", self.status.state.replace(" ", "_"), fields)
                next_log = now + STATUS_LOG_INTERVAL_S
            await asyncio.sleep(STATUS_INTERVAL_S)

    def link_hint(self, codec: MavlinkCodec) -> str | None:
        """What is likely wrong with the link, or None (see :func:`status.link_hint`)."""
        return link_hint(codec, connection=self.parts.connection, signed=self.parts.signed)

    def status_text(self) -> str:
        """The status line of the first vehicle (see :func:`status.status_line`)."""
        self._count_uploads(self.status)
        foxglove = self.foxglove
        return status_line(
            self.status,
            vehicles=len(self.vehicles),
            mqtt=self.parts.publisher is not None,
            foxglove=None if foxglove is None else (foxglove.url, foxglove.counters()),
            uploads=self.shipper.uploads,
        )

    def _draw_status(self, *, final: bool = False) -> None:
        view = self._status_view
        if view is None:
            return
        note = None
        if not final and self._stop_requested.is_set() and not self._stop_hint_shown:
            self._stop_hint_shown = True
            note = self._stop_text() if not self.vehicles else "Ctrl-C again ends at once"
        view("" if final else self.status_text(), note=note)


class StatusView(Protocol):
    """Draws the live status line (the terminal's, in :mod:`ulogstream.cli`)."""

    def __call__(self, text: str, *, note: str | None = None) -> None:
        """Show ``text`` in place of the last one (empty: clear it); ``note`` once, above it."""


def _wake(waker: asyncio.Future[None]) -> None:
    """End a timer sleep (unless a stop request ended it first)."""
    if not waker.done():
        waker.set_result(None)
