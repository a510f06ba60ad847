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
import os
import secrets
import socket
import ssl
import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import aiomqtt
from paho.mqtt import client as mqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from ulogstream.config import BrokerAddress, SettingError, parse_mqtt_url
from ulogstream.errors import ConfigError
from ulogstream.publish import MqttMessage, valid_topic

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    _ExceptionHandler = Callable[[asyncio.AbstractEventLoop, dict[str, object]], object]

logger = logging.getLogger(__name__)

DEFAULT_MAX_OUTBOX = 10_000
"""Sample messages kept for the broker before the oldest are dropped (~1.5 s at full rate)."""

_PROTOCOLS = {4: aiomqtt.ProtocolVersion.V311, 5: aiomqtt.ProtocolVersion.V5}


@dataclass(frozen=True, slots=True, kw_only=True)
class MqttSinkSettings:
    """How to reach the broker.

    Attributes:
        url: ``mqtt://HOST[:PORT]`` or ``mqtts://HOST[:PORT]`` (TLS), read by
            :func:`~ulogstream.config.parse_mqtt_url`.
        fallback_urls: More brokers tried in turn after ``url`` (a cluster's other nodes).
        client_id: MQTT client identifier; a unique one (host, pid, random) when None.
        protocol: 4 for MQTT 3.1.1, 5 for MQTT 5 (content types and user properties).
        ca_file: CA certificates to verify the broker with (the system's when None).
        cert_file: Client certificate for TLS client authentication.
        key_file: Private key of ``cert_file`` (when not inside it).
        tls_insecure: Skip the check that the broker's certificate names its host.
        username: User name for password authentication.
        password: The password itself, read once at start-up by
            :func:`~ulogstream.config.mqtt_password`; not shown by ``repr``.
        keepalive: Seconds between MQTT pings.
        session_expiry: MQTT 5 session expiry interval in seconds (0: none); on 3.1.1 any value
            above 0 asks for a persistent session (clean session off).
        retained_resend_per_s: Retained messages sent again per second after a reconnect.
        max_messages_per_s: Cap on publishes per second on the connection (0: no cap).
        max_outbox: Sample messages kept while the broker is slow or away.
        backoff_initial: First wait before reconnecting, in seconds.
        backoff_max: Longest wait between reconnection attempts, in seconds.
        timeout: Seconds to wait for the broker to answer a connect or a publish.
    """

    url: str
    fallback_urls: tuple[str, ...] = ()
    client_id: str | None = None
    protocol: int = 5
    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    tls_insecure: bool = False
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    keepalive: int = 30
    session_expiry: int = 0
    retained_resend_per_s: float = 100.0
    max_messages_per_s: float = 0.0
    max_outbox: int = DEFAULT_MAX_OUTBOX
    backoff_initial: float = 0.5
    backoff_max: float = 5.0
    timeout: float = 10.0


def is_sample(message: MqttMessage) -> bool:
    """Whether ``message`` is a sample (``.../{topic}/{multi_id}``, not retained).

    Samples are the only kind the rate cap drops. Status, info, params and schemas are retained;
    ``log`` and ``meta/...`` events do not end in a number.
    """
    return not message.retain and message.topic.rpartition("/")[2].isdigit()


class TokenBucket:
    """``rate`` tokens per second, at most ``capacity`` saved up; may run into debt to ``-floor``.

    Args:
        rate: Tokens added per second (> 0).
        capacity: The most tokens kept (a burst).
        floor: How far :meth:`spend` may take the balance below zero.
    """

    def __init__(self, rate: float, capacity: float, floor: float = 0.0) -> None:
        self.rate = rate
        self.capacity = capacity
        self.floor = floor
        self.tokens = capacity
        self._stamp = time.monotonic()

    def _refill(self, now: float) -> None:
        self.tokens = min(self.capacity, self.tokens + (now - self._stamp) * self.rate)
        self._stamp = now

    def take(self, now: float) -> bool:
        """Take one token if there is one."""
        self._refill(now)
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False

    def spend(self, now: float) -> None:
        """Take one token even when there is none (down to ``-floor``)."""
        self._refill(now)
        self.tokens = max(-self.floor, self.tokens - 1.0)

    def wait(self, now: float) -> float:
        """Seconds until a token is there (0: now)."""
        self._refill(now)
        return 0.0 if self.tokens >= 1.0 else (1.0 - self.tokens) / self.rate


BURST = 64
"""QoS 0 messages handed to paho at once, between two turns of the event loop."""


def _paho_of(client: aiomqtt.Client) -> mqtt.Client | None:
    """The paho client under aiomqtt's (None if this aiomqtt keeps it elsewhere).

    aiomqtt has no public way to queue a QoS 0 message without awaiting it; its paho client is
    ``_client`` in every 2.x release. Should that change, every message goes through
    ``publish`` as before, only slower.
    """
    paho = getattr(client, "_client", None)
    return paho if isinstance(paho, mqtt.Client) else None


def unique_client_id() -> str:
    """``ulogstream-<host>-<pid>-<random>``: two receivers never take each other's session."""
    host = socket.gethostname().split(".")[0][:16] or "host"
    return f"ulogstream-{host}-{os.getpid()}-{secrets.token_hex(3)}"


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


async def _speaks_tls(host: str, port: int) -> bool:
    """Whether ``host:port`` answers a TLS handshake (any certificate: this only diagnoses)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        async with asyncio.timeout(TLS_PROBE_S):
            _, writer = await asyncio.open_connection(host, port, ssl=context)
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


def _tls_context(settings: MqttSinkSettings) -> ssl.SSLContext:
    try:
        context = ssl.create_default_context(
            cafile=None if settings.ca_file is None else str(settings.ca_file)
        )
        if settings.cert_file is not None:
            context.load_cert_chain(
                str(settings.cert_file),
                None if settings.key_file is None else str(settings.key_file),
            )
    except (OSError, ssl.SSLError) as err:
        msg = f"cannot set up MQTT TLS from the CA, certificate or key file: {err}"
        raise ConfigError(msg) from err
    if settings.tls_insecure:
        context.check_hostname = False
    return context


class MqttSink:
    """Publishes :class:`MqttMessage` values to a broker without ever blocking the producer.

    Args:
        settings: Broker address, TLS and credentials.
        will: Last Will the broker publishes if this client vanishes (retained status).

    Raises:
        ConfigError: The URL, TLS files or password source cannot be used.
    """

    def __init__(self, settings: MqttSinkSettings, *, will: MqttMessage | None = None) -> None:
        self.settings = settings
        try:
            self.addresses = [
                parse_mqtt_url(url) for url in (settings.url, *settings.fallback_urls)
            ]
        except SettingError as err:
            raise ConfigError(str(err)) from None
        self.address = self.addresses[0]
        """The broker connected to, or tried next."""
        if settings.retained_resend_per_s <= 0 or settings.max_messages_per_s < 0:
            msg = (
                "MQTT retained_resend_per_s must be > 0 and max_messages_per_s >= 0, not "
                f"{settings.retained_resend_per_s} and {settings.max_messages_per_s}"
            )
            raise ConfigError(msg)
        if settings.protocol not in _PROTOCOLS:
            msg = f"MQTT protocol must be 4 (3.1.1) or 5, not {settings.protocol!r}"
            raise ConfigError(msg)
        if settings.max_outbox < 1:
            msg = f"MQTT max_outbox must be at least 1, not {settings.max_outbox}"
            raise ConfigError(msg)
        self._password = settings.password
        if self._password is not None and settings.username is None:
            msg = "an MQTT password is set without a username"
            raise ConfigError(msg)
        tls = (
            any(a.tls for a in self.addresses)
            or settings.ca_file is not None
            or settings.cert_file is not None
        )
        self._tls = _tls_context(settings) if tls else None
        self.client_id = settings.client_id or unique_client_id()
        self._will = will
        self._v5 = settings.protocol == 5  # noqa: PLR2004
        self._outbox: deque[MqttMessage] = deque(maxlen=settings.max_outbox)
        self._priority: deque[MqttMessage] = deque(maxlen=settings.max_outbox)
        """Non-retained messages that are not samples (``log``, ``meta/...`` events)."""
        self._retained: dict[str, MqttMessage] = {}
        self._pending_retained: dict[str, MqttMessage] = {}
        self._resend: dict[str, MqttMessage] = {}
        """Retained messages to send again after a reconnect, at a bounded rate."""
        resend_rate = settings.retained_resend_per_s
        self._resend_bucket = TokenBucket(resend_rate, 1.0 + resend_rate / 20)
        cap = settings.max_messages_per_s
        self._cap: TokenBucket | None = None
        self._admit: TokenBucket | None = None
        if cap > 0:
            # Publishes are paced at the cap (a 50 ms burst at most); samples are admitted at the
            # cap minus what the other messages take, so their backlog stays about a second.
            self._cap = TokenBucket(cap, 1.0 + cap / 20)
            self._admit = TokenBucket(cap, cap, floor=cap)
        self._properties: dict[tuple[str | None, tuple[tuple[str, str], ...]], Properties] = {}
        self._wakeup = asyncio.Event()
        self._drained = asyncio.Event()
        self._busy = False
        self.published = 0
        """Messages handed to the broker."""
        self.dropped = 0
        """Sample messages dropped because the outbox was full (broker slow or away)."""
        self.unpublishable = 0
        """Messages dropped because no broker would take them (bad topic, payload too large)."""
        self.capped = 0
        """Sample messages dropped to keep under ``max_messages_per_s``."""
        self.reconnects = 0
        """Connections made after the first one."""
        self.connected = False
        """Whether a connection to the broker is up."""
        self.last_error: str | None = None
        """Why the last connection failed or ended, e.g. ``Not authorized``."""
        self.ever_connected = False
        """Whether a broker took a connection at least once."""
        self._session_connected = False

    # -- producer side (never waits) ---------------------------------------------------------

    def offer(self, message: MqttMessage) -> None:
        """Queue ``message`` without waiting; when the outbox is full the oldest is dropped.

        Retained messages are kept per topic (the newest wins) and are never dropped. A message
        whose topic no broker takes is dropped and counted in :attr:`unpublishable`: sent, it
        would make paho raise or the broker disconnect (and a retained one would be re-sent after
        every reconnect).
        """
        if not valid_topic(message.topic):
            self._refuse(message, "the topic is not a valid MQTT topic name")
            return
        admit = self._admit
        if message.retain:
            self._retained[message.topic] = message
            self._pending_retained.pop(message.topic, None)
            self._pending_retained[message.topic] = message
            self._resend.pop(message.topic, None)
            if admit is not None:
                admit.spend(time.monotonic())
        elif is_sample(message):
            if admit is not None and not admit.take(time.monotonic()):
                self.capped += 1
                return
            outbox = self._outbox
            if len(outbox) == outbox.maxlen:
                self.dropped += 1
            outbox.append(message)
        else:
            if admit is not None:
                admit.spend(time.monotonic())
            if len(self._priority) == self._priority.maxlen:
                self.dropped += 1
            self._priority.append(message)
        self._wakeup.set()

    def offer_all(self, messages: list[MqttMessage]) -> None:
        """:meth:`offer` each of ``messages`` in order."""
        for message in messages:
            self.offer(message)

    @property
    def pending(self) -> int:
        """Messages waiting to be published."""
        return (
            len(self._outbox)
            + len(self._priority)
            + len(self._pending_retained)
            + len(self._resend)
            + self._busy
        )

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
        backoff = self.settings.backoff_initial
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
                backoff = self.settings.backoff_initial
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
                backoff = min(backoff * 2, self.settings.backoff_max)

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
                pending = self._pending_retained
                self._resend = {t: m for t, m in self._retained.items() if t not in pending}
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
        settings = self.settings
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
        if self._v5 and settings.session_expiry > 0:
            properties = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
            properties.SessionExpiryInterval = settings.session_expiry
        return aiomqtt.Client(
            self.address.host,
            self.address.port,
            username=settings.username,
            password=self._password,
            identifier=self.client_id,
            protocol=_PROTOCOLS[settings.protocol],
            will=will,
            keepalive=settings.keepalive,
            clean_session=None if self._v5 else settings.session_expiry == 0,
            properties=properties,
            timeout=settings.timeout,
            tls_context=self._tls,
            logger=paho_logger,
        )

    @staticmethod
    async def _watch(client: aiomqtt.Client) -> None:
        # Nothing is subscribed: the iterator only ends by raising MqttError on disconnection,
        # which also notices a lost broker while the outbox is empty.
        async for _ in client.messages:
            pass

    def _next(self, now: float) -> MqttMessage | float | None:
        """The message to publish now, else how long until a resend is due (None: nothing)."""
        pending_retained = self._pending_retained
        if pending_retained:
            return pending_retained.pop(next(iter(pending_retained)))
        if self._priority:
            return self._priority.popleft()
        resend = self._resend
        if resend and self._resend_bucket.take(now):
            return resend.pop(next(iter(resend)))
        if self._outbox:
            return self._outbox.popleft()
        return self._resend_bucket.wait(now) if resend else None

    async def _drain(self, client: aiomqtt.Client) -> None:
        paho = _paho_of(client)
        while True:
            if (
                paho is not None
                and self._cap is None
                and not paho.want_write()
                and self._publish_burst(paho)
            ):
                await asyncio.sleep(0)  # let the loop read the socket and run the others
                continue
            message = self._next(time.monotonic())
            if not isinstance(message, MqttMessage):
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
                cap = self._cap
                if cap is not None:
                    delay = cap.wait(time.monotonic())
                    if delay > 0:
                        await asyncio.sleep(delay)
                    cap.spend(time.monotonic())
                await client.publish(
                    message.topic,
                    message.payload,
                    qos=message.qos,
                    retain=message.retain,
                    properties=self._properties_for(message),
                )
            except ValueError as err:  # paho refuses this message (and only this one)
                self._forget_retained(message)
                self._refuse(message, _describe(err))
                continue
            except BaseException:  # lost connection or cancelled by the watcher: not sent
                self._requeue(message)
                raise
            finally:
                self._busy = False
            self.published += 1

    def _publish_burst(self, paho: mqtt.Client) -> int:
        """Hand paho up to :data:`BURST` waiting QoS 0 messages in one go, without an await each.

        aiomqtt's ``publish`` is a coroutine that, for a message not written at once, makes an
        event and a task to wait for paho's ``on_publish``: two or three loop iterations per
        message. QoS 0 needs no confirmation, so paho gets them directly and writes them when the
        socket takes them. A burst starts only when paho has nothing left to write, so a slow
        broker backs up into the bounded outbox (drop-oldest), never into paho's queue. Retained
        messages, and QoS 1 and 2, go through ``publish`` (they end the burst).

        Returns:
            How many messages paho took.

        Raises:
            aiomqtt.MqttCodeError: paho has no connection (the message is requeued).
        """
        sent = 0
        for _ in range(BURST):
            if self._pending_retained or self._resend:
                break  # retained messages first, through publish, in _next's order
            queue = self._priority or self._outbox
            if not queue or queue[0].qos:
                break
            message = queue.popleft()
            try:
                info = paho.publish(
                    message.topic,
                    message.payload,
                    qos=0,
                    retain=False,
                    properties=self._properties_for(message),
                )
            except ValueError as err:  # paho refuses this message (and only this one)
                self._refuse(message, _describe(err))
                continue
            if info.rc != mqtt.MQTT_ERR_SUCCESS:
                self._requeue(message)
                raise aiomqtt.MqttCodeError(info.rc, "Could not publish message")
            self.published += 1
            sent += 1
        return sent

    def _refuse(self, message: MqttMessage, reason: str) -> None:
        self.unpublishable += 1
        count = self.unpublishable
        if count & (count - 1) == 0:  # the 1st, 2nd, 4th, 8th, ...: visible, never a flood
            logger.warning(
                "MQTT message on %r dropped: %s (%d unpublishable so far)",
                message.topic,
                reason,
                count,
            )

    def _forget_retained(self, message: MqttMessage) -> None:
        """Stop re-sending ``message`` after reconnects (a newer one on its topic stays)."""
        if message.retain and self._retained.get(message.topic) is message:
            del self._retained[message.topic]

    def _requeue(self, message: MqttMessage) -> None:
        """Put back a message the broker did not take (retained ones are re-sent anyway)."""
        if message.retain:
            return
        queue = self._outbox if is_sample(message) else self._priority
        if len(queue) == queue.maxlen:
            self.dropped += 1
        else:
            queue.appendleft(message)

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
