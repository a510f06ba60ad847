"""MqttSink: a bounded outbox drained by a reconnecting aiomqtt client (the only aiomqtt importer).

:meth:`MqttSink.offer` never waits: sample messages go into a bounded outbox that drops the
oldest message when full (and counts it); retained messages are kept per topic instead, never
dropped, and published again after every reconnect so late subscribers always see the latest
metadata, at a bounded rate (``retained_resend_per_s``) so a reconnect is no burst.
:meth:`MqttSink.run` connects, drains, and reconnects with exponential backoff, since aiomqtt 2.x
does not reconnect by itself; with several broker URLs each failure moves on to the next one.

An optional cap (``max_messages_per_s``, e.g. AWS IoT Core's 100/s per connection) paces every
publish; sample messages over it are dropped when offered (and counted in :attr:`MqttSink.capped`)
while status, log and retained messages are never dropped by it, only delayed.

A message the broker cannot take (a topic with a wildcard or a control character, a payload over
the MQTT limit) is dropped and counted in :attr:`MqttSink.unpublishable`; it never ends the sink.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import ssl
import time
from typing import TYPE_CHECKING, cast

import aiomqtt
from paho.mqtt import client as mqtt
from paho.mqtt.client import PUBLISH
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from ulogstream.config.values import BrokerAddress, parse_mqtt_url
from ulogstream.errors import ConfigError
from ulogstream.live.mqtt_packets import publish_packet, publish_properties
from ulogstream.live.outbox import MqttMessage, Outbox

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from pathlib import Path

    from paho.mqtt.reasoncodes import ReasonCode

    _ExceptionHandler = Callable[[asyncio.AbstractEventLoop, dict[str, object]], object]

logger = logging.getLogger(__name__)

DEFAULT_OUTBOX_SIZE = 10_000
"""Sample messages kept for the broker before the oldest are dropped (~1.5 s at full rate)."""


BURST = 64
"""QoS 0 messages handed to paho at once, between two turns of the event loop."""


BURST_S = 0.001
"""Longest a burst may keep the loop (paho takes 50-80 us a message on a slow machine): the
link's acks wait meanwhile, and a log's parameters are a thousand retained messages at once."""


WRITE_TURNS = 4
"""Loop turns a burst may wait for paho to write the last one; then (a slow broker) the next
message goes through aiomqtt's ``publish``, which waits until paho has written it."""


def _paho_of(client: aiomqtt.Client) -> mqtt.Client | None:
    """The paho client under aiomqtt's, if it can take a burst of framed packets (else None).

    aiomqtt has no public way to queue a QoS 0 message without awaiting it; its paho client is
    ``_client`` in every 2.x release, and paho queues a packet for its connection with
    ``_packet_queue`` (given a message id from ``_mid_generate``) in every 1.x and 2.x release.
    Should either change, every message goes through ``publish`` as before, only slower.
    """
    paho = getattr(client, "_client", None)
    if isinstance(paho, mqtt.Client) and all(
        callable(getattr(paho, name, None)) for name in ("_packet_queue", "_mid_generate")
    ):
        return paho
    return None


def _send_now(paho: mqtt.Client, data: bytes) -> int:
    """Write ``data`` on paho's socket at once, when paho has nothing queued; bytes written.

    Queued on paho instead, a burst costs four more loop turns: aiomqtt registers a writer
    through ``call_soon_threadsafe`` (a wake-up of the loop), the loop reports the socket
    writable, paho writes, and the writer is removed. 0 when the socket takes nothing now or
    failed: paho then writes it, and its own write reports a lost connection as it always does.
    """
    sock = paho.socket()
    if sock is None:
        return 0
    try:
        return sock.send(data)
    except OSError:  # BlockingIOError and ssl.SSLWantWriteError among them
        return 0


class _OnPublishWhileAwaited:
    """paho's ``on_publish`` (aiomqtt's), there only while an aiomqtt ``publish`` awaits one.

    For each QoS 0 message it writes, paho builds a ``ReasonCode`` and a ``Properties`` for
    ``on_publish`` when one is set: 25-40 us a message here, as much as the rest of paho's
    work. The QoS 0 bursts handed to paho directly wait for no callback, and paho asks
    ``if on_publish:`` before it builds them, so this callback is false while nobody waits.
    """

    def __init__(self, callback: mqtt.CallbackOnPublish_v2) -> None:
        self.callback = callback
        self.waiting = 0
        """aiomqtt ``publish`` calls awaiting their ``on_publish``."""

    def __bool__(self) -> bool:
        return self.waiting > 0

    def __call__(
        self,
        client: mqtt.Client,
        userdata: object,
        mid: int,
        reason_code: ReasonCode,
        properties: Properties,
    ) -> None:
        self.callback(client, userdata, mid, reason_code, properties)


def _ignore_closed_socket_registration(previous: _ExceptionHandler | None) -> _ExceptionHandler:
    """An event loop exception handler that drops aiomqtt's late socket registrations.

    aiomqtt registers paho's socket with the loop through ``call_soon_threadsafe``; when the
    broker goes away in between, the registration runs on a closed descriptor and asyncio would
    print its traceback as an error. The lost connection is reported by the sink already.
    """

    def handle(loop: asyncio.AbstractEventLoop, context: dict[str, object]) -> None:
        error = context.get("exception")
        callback = getattr(context.get("handle"), "_callback", None)
        late = getattr(callback, "__name__", None) in {"add_reader", "add_writer"}
        if late and isinstance(error, OSError) and error.errno == errno.EBADF:
            logger.debug("MQTT socket closed before the loop watched it: %s", error)
        elif previous is not None:
            previous(loop, context)
        else:
            loop.default_exception_handler(context)

    return handle


def _describe(error: BaseException) -> str:
    return str(error) or type(error).__name__


TLS_PROBE_S = 3.0
"""Longest wait for a TLS handshake when checking whether a plain MQTT port speaks TLS."""


def tls_probe_context() -> ssl.SSLContext:
    """A client context that takes any certificate, with no CA loaded.

    ``ssl.create_default_context()`` loads the system's CA bundle: 44-52 ms of CPU here, on the
    event loop, where an ack waits for it (PX4 resends after 50 ms; seen in CI as the broker
    went away). The probe checks nothing, so it needs none.
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


async def _speaks_tls(host: str, port: int) -> bool:
    """Whether ``host:port`` answers a TLS handshake (any certificate: this only diagnoses)."""
    try:
        async with asyncio.timeout(TLS_PROBE_S):
            _, writer = await asyncio.open_connection(host, port, ssl=tls_probe_context())
    except (OSError, ssl.SSLError, TimeoutError):
        return False
    writer.close()
    with contextlib.suppress(OSError, ssl.SSLError):
        await writer.wait_closed()
    return True


class _HandledAsWarning(logging.Filter):
    """paho logs a lost or refused connection as ERROR; it is handled (we reconnect): WARNING."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.WARNING:
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


paho_logger = logging.getLogger("ulogstream.adapters.mqtt_sink.paho")
"""Where aiomqtt's paho client logs (its socket errors are handled: WARNING at most)."""
paho_logger.addFilter(_HandledAsWarning())


def _tls_context(
    ca_file: Path | None, cert_file: Path | None, key_file: Path | None
) -> ssl.SSLContext:
    try:
        context = ssl.create_default_context(cafile=None if ca_file is None else str(ca_file))
        if cert_file is not None:
            context.load_cert_chain(str(cert_file), None if key_file is None else str(key_file))
    except (OSError, ssl.SSLError) as err:
        msg = f"cannot set up MQTT TLS from the CA, certificate or key file: {err}"
        raise ConfigError(msg) from err
    return context


class MqttSink:
    """Publishes what is offered to a broker without ever blocking the producer.

    The messages wait in a :class:`~ulogstream.live.outbox.Outbox` (what is kept and what goes
    first is decided there); this adapter connects, drains it and reconnects. Its arguments are
    named as the ``[mqtt]`` keys and were checked by the configuration.

    Args:
        urls: The brokers, tried in turn (``mqtt.url`` then ``mqtt.urls``).
        client_id: The MQTT client id (filled in by the recorder's identity).
        protocol: ``"3.1.1"`` or ``"5"`` (content types and user properties).
        tls_ca_file: CA certificates to verify the broker with (the system's when None).
        tls_cert_file: Client certificate for TLS client authentication.
        tls_key_file: Private key of ``tls_cert_file`` (when not inside it).
        username: User name for password authentication.
        password: The password itself (read once at start-up); never logged.
        keepalive_s: Seconds between MQTT pings.
        session_expiry_s: MQTT 5 session expiry interval (0: none); on 3.1.1 any value above 0
            asks for a persistent session (clean session off).
        retained_resend_per_s: Retained messages sent again per second after a reconnect.
        max_messages_per_s: Cap on publishes per second on the connection (0: no cap).
        outbox_size: Sample messages kept while the broker is slow or away.
        will: Last Will the broker publishes if this client vanishes (retained status).
        backoff_initial_s: First wait before reconnecting.
        backoff_max_s: Longest wait between reconnection attempts.
        timeout_s: Seconds to wait for the broker to answer a connect or a publish.

    Raises:
        ConfigError: The TLS files cannot be read.
    """

    def __init__(
        self,
        *,
        urls: Sequence[str],
        client_id: str,
        protocol: str = "3.1.1",
        tls_ca_file: Path | None = None,
        tls_cert_file: Path | None = None,
        tls_key_file: Path | None = None,
        username: str | None = None,
        password: str | None = None,
        keepalive_s: int = 30,
        session_expiry_s: int = 0,
        retained_resend_per_s: float = 100.0,
        max_messages_per_s: float = 0.0,
        outbox_size: int = DEFAULT_OUTBOX_SIZE,
        will: MqttMessage | None = None,
        backoff_initial_s: float = 0.5,
        backoff_max_s: float = 5.0,
        timeout_s: float = 10.0,
    ) -> None:
        self.urls = tuple(urls)
        """The brokers as configured, tried in turn."""
        self.addresses = [parse_mqtt_url(url) for url in urls]
        self.address = self.addresses[0]
        """The broker connected to, or tried next."""
        self._username = username
        self._password = password
        self._keepalive_s = keepalive_s
        self._session_expiry_s = session_expiry_s
        self._backoff_initial_s = backoff_initial_s
        self._backoff_max_s = backoff_max_s
        self._timeout_s = timeout_s
        tls = (
            any(a.tls for a in self.addresses)
            or tls_ca_file is not None
            or (tls_cert_file is not None)
        )
        self._tls = _tls_context(tls_ca_file, tls_cert_file, tls_key_file) if tls else None
        self.client_id = client_id
        self._will = will
        self._v5 = protocol == "5"
        self.outbox = Outbox(
            outbox_size=outbox_size,
            max_messages_per_s=max_messages_per_s,
            retained_resend_per_s=retained_resend_per_s,
            now=time.monotonic(),
        )
        self._properties: dict[tuple[str | None, tuple[tuple[str, str], ...]], Properties] = {}
        self._property_blocks: dict[tuple[str | None, tuple[tuple[str, str], ...]], bytes] = {}
        self._wakeup = asyncio.Event()
        self._drained = asyncio.Event()
        self._busy = False
        self.published = 0
        """Messages handed to the broker."""
        self.reconnects = 0
        """Connections made after the first one."""
        self.connected = False
        """Whether a connection to the broker is up."""
        self.last_error: str | None = None
        """Why the last connection failed or ended, e.g. ``Not authorized``."""
        self.ever_connected = False
        """Whether a broker took a connection at least once."""
        self._session_connected = False

    @property
    def dropped(self) -> int:
        """Samples dropped because the outbox was full (broker slow or away)."""
        return self.outbox.dropped

    @property
    def capped(self) -> int:
        """Samples dropped to keep under ``max_messages_per_s``."""
        return self.outbox.capped

    @property
    def unpublishable(self) -> int:
        """Messages dropped because no broker would take them (bad topic, payload too large)."""
        return self.outbox.unpublishable

    # -- producer side (never waits) ---------------------------------------------------------

    def offer(self, message: MqttMessage) -> None:
        """Queue ``message`` without waiting (see :meth:`Outbox.offer`)."""
        if not self.outbox.offer(message, time.monotonic()):
            self._refused(message, "the topic is not a valid MQTT topic name")
            return
        self._wakeup.set()

    def offer_all(self, messages: list[MqttMessage]) -> None:
        """:meth:`offer` each of ``messages`` in order."""
        offer, now = self.outbox.offer, time.monotonic()
        for message in messages:
            if not offer(message, now):
                self._refused(message, "the topic is not a valid MQTT topic name")
        self._wakeup.set()

    @property
    def pending(self) -> int:
        """Messages waiting to be published."""
        return self.outbox.pending + self._busy

    async def wait_drained(self) -> None:
        """Wait until everything offered so far was published (bound it with asyncio.timeout)."""
        while self.pending:
            self._drained.clear()
            await self._drained.wait()

    # -- the connection loop -----------------------------------------------------------------

    async def run(self) -> None:
        """Connect, publish what is offered, and reconnect with backoff; runs until cancelled."""
        loop = asyncio.get_running_loop()
        previous = loop.get_exception_handler()
        loop.set_exception_handler(_ignore_closed_socket_registration(previous))
        try:
            await self._reconnect_forever()
        finally:
            loop.set_exception_handler(previous)

    async def _reconnect_forever(self) -> None:
        backoff = self._backoff_initial_s
        probed: set[BrokerAddress] = set()
        while True:
            self._session_connected = False
            try:
                await self._session()
            except* aiomqtt.MqttError as group:
                # Keep only the text: the exception's traceback would keep paho's sockets alive.
                self.last_error = _describe(group.exceptions[0])
            finally:
                self.connected = False
            address = self.address
            if not self._session_connected and not address.tls and address not in probed:
                # A plain connection cut or unanswered: is it a TLS port (mqtt:// for mqtts://)?
                probed.add(address)
                if await _speaks_tls(address.host, address.port):
                    self.last_error = (
                        f"{self.last_error}: the broker speaks TLS on this port; use "
                        f"mqtts://{address.host}:{address.port}"
                    )
            if self._session_connected:
                backoff = self._backoff_initial_s
            failed = self.address
            index = (self.addresses.index(failed) + 1) % len(self.addresses)
            self.address = self.addresses[index]
            then = "" if self.address == failed else f" at {self.address.host}:{self.address.port}"
            logger.warning(
                "MQTT broker %s:%d: %s; retrying%s in %.1f s",
                failed.host,
                failed.port,
                self.last_error,
                then,
                backoff,
            )
            await asyncio.sleep(backoff)
            if index == 0:  # every broker tried once more: wait longer before the next round
                backoff = min(backoff * 2, self._backoff_max_s)

    async def _session(self) -> None:
        client = self._client()
        async with client:
            self.connected = True
            self._session_connected = True
            self.last_error = None
            if self.ever_connected:
                self.reconnects += 1
                # A restarted broker (or another node) may lack our retained topics: send them
                # all again, at a bounded rate; ones offered meanwhile go first, as new.
                self.outbox.connected_again()
            self.ever_connected = True
            logger.info(
                "MQTT connected to %s:%d as %r",
                self.address.host,
                self.address.port,
                self.client_id,
            )
            async with asyncio.TaskGroup() as group:
                group.create_task(self._watch(client))
                group.create_task(self._drain(client))

    def _client(self) -> aiomqtt.Client:
        will = None
        if self._will is not None:
            will = aiomqtt.Will(
                self._will.topic,
                self._will.payload,
                qos=self._will.qos,
                retain=self._will.retain,
                properties=self._properties_for(self._will),
            )
        properties = None
        if self._v5 and self._session_expiry_s > 0:
            properties = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
            properties.SessionExpiryInterval = self._session_expiry_s
        return aiomqtt.Client(
            self.address.host,
            self.address.port,
            username=self._username,
            password=self._password,
            identifier=self.client_id,
            protocol=aiomqtt.ProtocolVersion.V5 if self._v5 else aiomqtt.ProtocolVersion.V311,
            will=will,
            keepalive=self._keepalive_s,
            clean_session=None if self._v5 else self._session_expiry_s == 0,
            properties=properties,
            timeout=self._timeout_s,
            tls_context=self._tls,
            logger=paho_logger,
        )

    @staticmethod
    async def _watch(client: aiomqtt.Client) -> None:
        # Nothing is subscribed: the iterator only ends by raising MqttError on disconnection,
        # which also notices a lost broker while the outbox is empty.
        async for _ in client.messages:
            pass

    async def _drain(self, client: aiomqtt.Client) -> None:
        paho = _paho_of(client)
        on_publish = None
        if paho is not None and paho.on_publish is not None:  # aiomqtt's, API version 2
            on_publish = _OnPublishWhileAwaited(cast("mqtt.CallbackOnPublish_v2", paho.on_publish))
            paho.on_publish = on_publish
        outbox = self.outbox
        turns = 0
        while True:
            if paho is not None and outbox.cap is None:
                if not paho.want_write():
                    turns = 0
                    if self._publish_burst(paho) and outbox.pending:
                        await asyncio.sleep(0)  # let the loop read the socket and run the others
                        continue
                elif turns < WRITE_TURNS:
                    # paho writes the rest of the last burst (what the socket did not take)
                    # from a writer callback that aiomqtt registers at the loop's next turn:
                    # wait for it rather than send the next sample through ``publish`` (an
                    # event and a task for each message).
                    turns += 1
                    await asyncio.sleep(0)
                    continue
            message = outbox.next(time.monotonic())
            if not isinstance(message, MqttMessage):
                turns = 0
                if message is None:
                    self._drained.set()
                self._wakeup.clear()
                if message is None:
                    await self._wakeup.wait()
                else:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._wakeup.wait(), message)
                continue
            self._busy = True
            try:
                cap = outbox.cap
                if cap is not None:
                    delay = cap.wait(time.monotonic())
                    if delay > 0:
                        await asyncio.sleep(delay)
                    cap.spend(time.monotonic())
                if on_publish is not None:
                    on_publish.waiting += 1
                try:
                    await client.publish(
                        message.topic,
                        message.payload,
                        qos=message.qos,
                        retain=message.retain,
                        properties=self._properties_for(message),
                    )
                finally:
                    if on_publish is not None:
                        on_publish.waiting -= 1
            except ValueError as err:  # paho refuses this message (and only this one)
                outbox.refused(message)
                self._refused(message, _describe(err))
                continue
            except BaseException:  # lost connection or cancelled by the watcher: not sent
                outbox.requeue(message)
                raise
            finally:
                self._busy = False
            self.published += 1

    def _publish_burst(self, paho: mqtt.Client) -> int:
        """Frame up to :data:`BURST` waiting QoS 0 messages and write them on paho's socket.

        A burst ends after :data:`BURST_S` of work. aiomqtt's ``publish`` is a coroutine that,
        for a message not written at once, makes an event and a task to wait for paho's
        ``on_publish``: two or three loop iterations per message. QoS 0 needs no confirmation,
        so the burst's PUBLISH packets are framed here (:mod:`ulogstream.live.mqtt_packets`,
        1-2 us a message against paho's 18-28), joined, and written with one ``send``
        (:func:`_send_now`); what the socket does not take goes to paho's queue as one packet,
        which paho writes when the socket takes it. A burst starts only when paho has nothing
        left to write, so the order holds and a slow broker backs up into the bounded outbox
        (drop-oldest), never into paho's queue. QoS 1 and 2, and retained messages sent again
        after a reconnection (paced), go through ``publish`` (they end the burst).

        Returns:
            How many messages were written or handed to paho.

        Raises:
            aiomqtt.MqttCodeError: paho has no connection (nothing was taken from the outbox).
        """
        if paho.socket() is None:
            raise aiomqtt.MqttCodeError(mqtt.MQTT_ERR_NO_CONN, "Could not publish message")
        packets: list[bytes] = []
        outbox = self.outbox
        deadline = time.perf_counter() + BURST_S
        for count in range(BURST):
            if count & 7 == 7 and time.perf_counter() >= deadline:  # noqa: PLR2004 (every 8th)
                break
            message = outbox.next_qos0()  # in next()'s order
            if message is None:
                break
            try:
                packets.append(
                    publish_packet(
                        message.topic,
                        message.payload,
                        retain=message.retain,
                        properties=self._property_block(message),
                    )
                )
            except ValueError as err:  # too long for MQTT (and only this one)
                outbox.refused(message)
                self._refused(message, _describe(err))
        if packets:
            data = b"".join(packets)
            sent = _send_now(paho, data)
            if sent < len(data):  # the rest when the socket takes it, as paho writes any packet
                mid = paho._mid_generate()  # noqa: SLF001 (see _paho_of)
                info = mqtt.MQTTMessageInfo(mid)  # paho marks it published once written
                paho._packet_queue(PUBLISH, data[sent:], mid, 0, info)  # noqa: SLF001
            self.published += len(packets)
        return len(packets)

    def _refused(self, message: MqttMessage, reason: str) -> None:
        """Say so when a message was refused: the 1st, 2nd, 4th, 8th... time (never a flood)."""
        count = self.outbox.unpublishable
        if count & (count - 1) == 0:
            logger.warning(
                "MQTT message on %r dropped: %s (%d unpublishable so far)",
                message.topic,
                reason,
                count,
            )

    def _property_block(self, message: MqttMessage) -> bytes | None:
        """The framed properties of ``message`` (None on MQTT 3.1.1), made once per kind."""
        if not self._v5:
            return None
        key = (message.content_type, message.user_properties)
        block = self._property_blocks.get(key)
        if block is None:
            block = publish_properties(message.content_type, message.user_properties)
            self._property_blocks[key] = block
        return block

    def _properties_for(self, message: MqttMessage) -> Properties | None:
        if not self._v5 or (message.content_type is None and not message.user_properties):
            return None
        key = (message.content_type, message.user_properties)
        properties = self._properties.get(key)
        if properties is None:
            properties = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
            if message.content_type is not None:
                properties.ContentType = message.content_type
            if message.user_properties:
                properties.UserProperty = list(message.user_properties)
            self._properties[key] = properties
        return properties
