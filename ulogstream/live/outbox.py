"""What waits for the broker, and in which order it leaves (pure: time is passed in).

The live path never waits on a broker: every message is offered to an :class:`Outbox` and the
MQTT adapter takes them out when the connection can carry them. The outbox decides what is kept
and what goes first:

- retained messages (status, info, params, schemas) are kept per topic, the newest wins, and are
  never dropped; after a reconnect all of them are sent again at a bounded rate (a restarted
  broker, or another node of a cluster, may lack them);
- events (``log`` lines, ``meta/...`` announcements) go before samples;
- samples wait in a bounded queue that drops its oldest when full (counted in
  :attr:`Outbox.dropped`);
- with ``max_messages_per_s``, samples are admitted at the cap less what the other messages
  take, so their backlog stays about a second (:attr:`Outbox.capped`), and publishes are paced.

A message whose topic no broker takes is refused at the door (:attr:`Outbox.unpublishable`):
sent, it would make the client raise or the broker disconnect.
"""

from __future__ import annotations

import re
from collections import deque

import msgspec

MAX_TOPIC_BYTES = 0xFFFF
"""Longest topic name MQTT can carry (a two-byte UTF-8 length)."""

# MQTT 3.1.1 section 1.5.3 and 4.7: no U+0000 and no wildcards in a published topic; control
# characters and non-characters SHOULD NOT appear, and mosquitto drops a client that sends them.
_UNSAFE_IN_TOPIC = re.compile(
    "[+#\x00-\x1f\x7f-\x9f\ud800-\udfff\ufdd0-\ufdef\ufffe\uffff]"
    "|[\U0001fffe-\U0001ffff\U0002fffe-\U0002ffff\U0003fffe-\U0003ffff\U000efffe-\U000effff]"
    "|[\U000ffffe-\U000fffff\U0010fffe-\U0010ffff]"
)


class MqttMessage(msgspec.Struct, frozen=True):
    """One message for the broker.

    Attributes:
        topic: Full topic name.
        payload: Encoded payload.
        retain: Ask the broker to keep it for late subscribers.
        qos: MQTT quality of service (0, 1 or 2).
        content_type: MQTT v5 content type (ignored on 3.1.1).
        user_properties: MQTT v5 user properties (ignored on 3.1.1).
    """

    topic: str
    payload: bytes
    retain: bool = False
    qos: int = 0
    content_type: str | None = None
    user_properties: tuple[tuple[str, str], ...] = ()


VALID_TOPICS_KEPT = 8192
"""Topics an :class:`Outbox` remembers as valid (a vehicle's sample, parameter and meta topics)."""


def valid_topic(topic: str) -> bool:
    """Whether a broker takes ``topic`` as the name of a published message.

    Not empty, no wildcard, no NUL or other control character, no surrogate or non-character,
    and at most :data:`MAX_TOPIC_BYTES` in UTF-8.
    """
    if not topic or _UNSAFE_IN_TOPIC.search(topic) is not None:
        return False
    return len(topic.encode()) <= MAX_TOPIC_BYTES


def valid_topic_level(level: str) -> bool:
    """Whether ``level`` can be one level of our topics: a :func:`valid_topic` without ``/``.

    A name with ``/`` would add levels (and an empty name an empty level), breaking the fixed
    depth that ``+`` subscriptions and Telegraf's topic parsing rely on.
    """
    return "/" not in level and valid_topic(level)


def is_sample(message: MqttMessage) -> bool:
    """Whether ``message`` is a sample (``.../{topic}/{multi_id}``, not retained).

    Samples are the only kind the rate cap drops. Status, info, params and schemas are retained;
    ``log`` and ``meta/...`` events do not end in a number.
    """
    return not message.retain and message.topic.rpartition("/")[2].isdigit()


_ROUNDING = 1e-9
"""Tokens a refill may miss by float rounding: a caller that waited :meth:`TokenBucket.wait`'s
seconds must get its token, or it would wait a few nanoseconds again and again."""


class TokenBucket:
    """``rate`` tokens per second, at most ``capacity`` saved up; may run into debt to ``-floor``.

    Args:
        rate: Tokens added per second (> 0).
        capacity: The most tokens kept (a burst).
        now: The clock's reading when the bucket is made (full then).
        floor: How far :meth:`spend` may take the balance below zero.
    """

    def __init__(self, rate: float, capacity: float, *, now: float, floor: float = 0.0) -> None:
        self.rate = rate
        self.capacity = capacity
        self.floor = floor
        self.tokens = capacity
        self._stamp = now

    def _refill(self, now: float) -> None:
        self.tokens = min(self.capacity, self.tokens + (now - self._stamp) * self.rate)
        self._stamp = now

    def take(self, now: float) -> bool:
        """Take one token if there is one (after :meth:`wait`'s seconds there is)."""
        self._refill(now)
        if self.tokens >= 1.0 - _ROUNDING:
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
        return 0.0 if self.tokens >= 1.0 - _ROUNDING else (1.0 - self.tokens) / self.rate


class Outbox:
    """The messages waiting for the broker (see the module docstring).

    Args:
        outbox_size: Samples kept while the broker is slow or away (and as many events).
        max_messages_per_s: Cap on publishes per second on the connection (0: no cap).
        retained_resend_per_s: Retained messages sent again per second after a reconnect.
        now: The clock's reading when the outbox is made.
    """

    def __init__(
        self,
        *,
        outbox_size: int,
        max_messages_per_s: float = 0.0,
        retained_resend_per_s: float = 100.0,
        now: float,
    ) -> None:
        self._samples: deque[MqttMessage] = deque(maxlen=outbox_size)
        self._events: deque[MqttMessage] = deque(maxlen=outbox_size)
        """Non-retained messages that are not samples (``log``, ``meta/...`` events)."""
        self._retained: dict[str, MqttMessage] = {}
        self._pending_retained: dict[str, MqttMessage] = {}
        self._resend: dict[str, MqttMessage] = {}
        """Retained messages to send again after a reconnect, at a bounded rate."""
        rate = retained_resend_per_s
        self._resend_bucket = TokenBucket(rate, 1.0 + rate / 20, now=now)
        self.cap: TokenBucket | None = None
        """Paces publishes at ``max_messages_per_s`` (None: no cap); the sender spends it."""
        self._admit: TokenBucket | None = None
        cap = max_messages_per_s
        if cap > 0:
            # Publishes are paced at the cap (a 50 ms burst at most); samples are admitted at the
            # cap minus what the other messages take, so their backlog stays about a second.
            self.cap = TokenBucket(cap, 1.0 + cap / 20, now=now)
            self._admit = TokenBucket(cap, cap, now=now, floor=cap)
        self._valid_topics: set[str] = set()
        """Topics :func:`valid_topic` passed (a check per message costs about 1 us; the topics
        of a log are a few hundred). Starts over at :data:`VALID_TOPICS_KEPT`."""
        self.dropped = 0
        """Samples and events dropped because the outbox was full (broker slow or away)."""
        self.capped = 0
        """Samples dropped to keep under ``max_messages_per_s``."""
        self.unpublishable = 0
        """Messages refused because no broker would take them (bad topic, payload too large)."""

    def offer(self, message: MqttMessage, now: float) -> bool:
        """Take ``message``; False when it was refused (its topic is no valid topic name).

        Retained messages are kept per topic (the newest wins); a full queue drops its oldest.
        """
        if message.topic not in self._valid_topics:
            if not valid_topic(message.topic):
                self.unpublishable += 1
                return False
            if len(self._valid_topics) >= VALID_TOPICS_KEPT:
                self._valid_topics.clear()
            self._valid_topics.add(message.topic)
        admit = self._admit
        if message.retain:
            topic = message.topic
            self._retained[topic] = message
            self._pending_retained.pop(topic, None)
            self._pending_retained[topic] = message
            self._resend.pop(topic, None)
            if admit is not None:
                admit.spend(now)
        elif is_sample(message):
            if admit is not None and not admit.take(now):
                self.capped += 1
                return True
            samples = self._samples
            if len(samples) == samples.maxlen:
                self.dropped += 1
            samples.append(message)
        else:
            if admit is not None:
                admit.spend(now)
            if len(self._events) == self._events.maxlen:
                self.dropped += 1
            self._events.append(message)
        return True

    @property
    def pending(self) -> int:
        """Messages waiting to be published."""
        return (
            len(self._samples) + len(self._events) + len(self._pending_retained) + len(self._resend)
        )

    def next(self, now: float) -> MqttMessage | float | None:
        """The message to publish now, else how long until a resend is due (None: nothing)."""
        pending_retained = self._pending_retained
        if pending_retained:
            return pending_retained.pop(next(iter(pending_retained)))
        if self._events:
            return self._events.popleft()
        resend = self._resend
        if resend and self._resend_bucket.take(now):
            return resend.pop(next(iter(resend)))
        if self._samples:
            return self._samples.popleft()
        return self._resend_bucket.wait(now) if resend else None

    def next_qos0(self) -> MqttMessage | None:
        """The next message in :meth:`next`'s order if it can go without an acknowledgement.

        None when the next one needs QoS 1 or 2, or is a retained message due again after a
        reconnection (those are paced: :meth:`next`).
        """
        pending_retained = self._pending_retained
        if pending_retained:
            topic = next(iter(pending_retained))
            return None if pending_retained[topic].qos else pending_retained.pop(topic)
        if self._resend:
            return None
        queue = self._events or self._samples
        if not queue or queue[0].qos:
            return None
        return queue.popleft()

    def connected_again(self) -> None:
        """A new connection: send every retained message again (those offered meanwhile first)."""
        pending = self._pending_retained
        self._resend = {t: m for t, m in self._retained.items() if t not in pending}

    def requeue(self, message: MqttMessage) -> None:
        """Put back a message the broker did not take (retained ones are re-sent anyway)."""
        if message.retain:
            return
        queue = self._samples if is_sample(message) else self._events
        if len(queue) == queue.maxlen:
            self.dropped += 1
        else:
            queue.appendleft(message)

    def refused(self, message: MqttMessage) -> None:
        """The client refused ``message`` (too large): count it; a retained one is not resent."""
        self.unpublishable += 1
        if message.retain and self._retained.get(message.topic) is message:
            del self._retained[message.topic]
