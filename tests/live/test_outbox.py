"""The MQTT outbox as values: what is kept, what goes first and when, on a fake clock.

The same rules are checked end to end against a real broker in tests/mqtt (a few of each);
here every branch is reached in microseconds, with ``now`` passed in.
"""

from __future__ import annotations

import pytest

from ulogstream.live import outbox as outbox_module
from ulogstream.live.outbox import MqttMessage, Outbox, TokenBucket, is_sample


def sample(i: int, instance: int = 0) -> MqttMessage:
    return MqttMessage(f"v/json/attitude/{instance}", str(i).encode())


def retained(topic: str, payload: bytes) -> MqttMessage:
    return MqttMessage(topic, payload, retain=True)


def drain(outbox: Outbox, now: float = 0.0) -> list[MqttMessage]:
    """Every message :meth:`Outbox.next` hands out at ``now`` (stops at a wait)."""
    out: list[MqttMessage] = []
    while isinstance(message := outbox.next(now), MqttMessage):
        out.append(message)
    return out


def test_a_full_outbox_drops_its_oldest_samples_and_counts_them() -> None:
    outbox = Outbox(outbox_size=20, now=0.0)
    for i in range(100):  # the broker is away
        assert outbox.offer(sample(i), now=0.0)
    assert outbox.dropped == 80
    assert [int(m.payload) for m in drain(outbox)] == list(range(80, 100))  # newest, in order
    assert outbox.pending == 0


def test_retained_messages_are_kept_per_topic_newest_first_and_never_dropped() -> None:
    outbox = Outbox(outbox_size=3, now=0.0)
    for i in range(5):
        outbox.offer(sample(i), now=0.0)
        outbox.offer(retained("v/meta/status", bytes([i])), now=0.0)
    assert (outbox.dropped, outbox.pending) == (2, 4)
    sent = drain(outbox)
    # the newest status goes before the samples (a late subscriber's first sight)
    assert [(m.topic, m.payload) for m in sent] == [
        ("v/meta/status", b"\x04"),
        ("v/json/attitude/0", b"2"),
        ("v/json/attitude/0", b"3"),
        ("v/json/attitude/0", b"4"),
    ]


def test_events_go_before_samples_and_in_their_own_order() -> None:
    outbox = Outbox(outbox_size=10, now=0.0)
    outbox.offer(sample(1), now=0.0)
    outbox.offer(MqttMessage("v/log", b"first"), now=0.0)
    outbox.offer(MqttMessage("v/meta/log_finished", b"second"), now=0.0)
    assert [m.payload for m in drain(outbox)] == [b"first", b"second", b"1"]


def test_after_a_reconnect_every_retained_topic_is_sent_again_at_the_set_rate() -> None:
    rate, count = 20.0, 60
    outbox = Outbox(outbox_size=100, retained_resend_per_s=rate, now=0.0)
    for i in range(count):
        outbox.offer(retained(f"v/param/P{i}", str(i).encode()), now=0.0)
    assert len(drain(outbox)) == count  # the first connection: at once
    outbox.connected_again()  # a restarted broker has lost them
    now, sent_at, live_at = 0.0, [], None
    outbox.offer(sample(7), now=now)
    for _ in range(10 * count):  # bounded: a wait that makes no progress fails, not hangs
        if not outbox.pending:
            break
        got = outbox.next(now)
        if isinstance(got, MqttMessage):
            if got.retain:
                sent_at.append(now)
            else:
                live_at = now
        else:
            assert got is not None
            now += got  # wait as told
    assert len(sent_at) == count
    burst = 1 + rate / 20
    assert sent_at[-1] - sent_at[0] == pytest.approx((count - burst) / rate, abs=0.06)
    assert live_at is not None
    assert live_at < sent_at[-1]  # live data is not held behind the re-send


def test_a_retained_topic_offered_again_during_the_resend_goes_first_and_once() -> None:
    outbox = Outbox(outbox_size=10, retained_resend_per_s=1.0, now=0.0)
    outbox.offer(retained("v/a", b"old"), now=0.0)
    outbox.offer(retained("v/b", b"b"), now=0.0)
    drain(outbox)
    outbox.connected_again()
    outbox.offer(retained("v/a", b"new"), now=0.0)
    assert [(m.topic, m.payload) for m in drain(outbox, now=0.0)] == [
        ("v/a", b"new"),
        ("v/b", b"b"),
    ]
    assert outbox.next(10.0) is None  # v/a is not re-sent with its old payload


def test_the_cap_drops_only_samples_and_paces_everything() -> None:
    cap = 100.0  # AWS IoT Core's per-connection limit
    outbox = Outbox(outbox_size=10_000, max_messages_per_s=cap, now=0.0)
    bucket = outbox.cap
    assert bucket is not None
    logs, published, now = 0, [], 0.0
    for step in range(300):  # 3 s: 200 samples/s on two instances, a status and a log at 20/s
        now = step * 0.01
        outbox.offer(sample(step, 0), now)
        outbox.offer(sample(step, 1), now)
        if step % 5 == 0:
            outbox.offer(retained("v/meta/status", str(step).encode()), now)
            outbox.offer(MqttMessage("v/log", str(logs).encode()), now)
            logs += 1
        while bucket.wait(now) == 0 and isinstance(message := outbox.next(now), MqttMessage):
            bucket.spend(now)
            published.append((now, message))
    assert outbox.capped > 0
    assert outbox.unpublishable == outbox.dropped == 0
    burst = 1 + cap / 20
    assert 3 * cap - burst <= len(published) <= 3 * cap + burst  # held, and used whole
    log_lines = [int(m.payload) for _, m in published if m.topic == "v/log"]
    assert log_lines == list(range(logs))  # no log line capped or dropped
    samples = [m for _, m in published if is_sample(m)]
    assert len(samples) >= cap  # samples flow with what the cap leaves them


def test_a_topic_no_broker_takes_is_refused_at_once_and_counted() -> None:
    outbox = Outbox(outbox_size=10, now=0.0)
    for topic in ("t/#", "t/+/x", "t/nul\0", "t/bell\x07", ""):
        assert not outbox.offer(MqttMessage(topic, b"x"), now=0.0)
    assert (outbox.unpublishable, outbox.pending) == (5, 0)
    assert not outbox.offer(MqttMessage("t/#", b"x"), now=0.0)  # refused again: not remembered
    assert outbox.unpublishable == 6


def test_valid_topics_are_remembered_within_a_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(outbox_module, "VALID_TOPICS_KEPT", 4)
    outbox = Outbox(outbox_size=100, now=0.0)
    for round_ in range(3):
        for i in range(10):
            assert outbox.offer(MqttMessage(f"v/json/t{i}/0", b"{}"), now=round_)
    assert len(outbox._valid_topics) <= 4
    assert (outbox.pending, outbox.unpublishable) == (30, 0)


def test_a_refused_retained_message_is_not_sent_again_after_a_reconnect() -> None:
    outbox = Outbox(outbox_size=10, now=0.0)
    outbox.offer(retained("v/big", b"x" * 10), now=0.0)
    [big] = drain(outbox)
    outbox.refused(big)
    outbox.connected_again()
    assert outbox.next(0.0) is None
    assert outbox.unpublishable == 1


def test_a_sample_the_broker_did_not_take_goes_back_in_front() -> None:
    outbox = Outbox(outbox_size=2, now=0.0)
    outbox.offer(sample(1), now=0.0)
    outbox.offer(sample(2), now=0.0)
    first = outbox.next(0.0)
    assert isinstance(first, MqttMessage)
    outbox.requeue(first)
    assert [m.payload for m in drain(outbox)] == [b"1", b"2"]
    outbox.offer(sample(3), now=0.0)
    outbox.offer(sample(4), now=0.0)
    outbox.requeue(sample(0))  # full: counted as dropped, not put back
    assert outbox.dropped == 1


def test_qos0_messages_leave_in_bursts_in_order_until_one_needs_an_acknowledgement() -> None:
    outbox = Outbox(outbox_size=10, now=0.0)
    outbox.offer(sample(1), now=0.0)
    outbox.offer(retained("v/meta/status", b"s"), now=0.0)
    outbox.offer(MqttMessage("v/meta/info", b"i", retain=True, qos=1), now=0.0)
    got = outbox.next_qos0()  # retained QoS 0 first, as next() orders them
    assert got is not None
    assert (got.topic, got.retain) == ("v/meta/status", True)
    assert outbox.next_qos0() is None  # the retained QoS 1 needs an acknowledgement
    assert drain(outbox)[0].topic == "v/meta/info"
    outbox.offer(MqttMessage("v/json/x/0", b"q1", qos=1), now=0.0)
    assert outbox.next_qos0() is None  # QoS 1 needs an acknowledgement
    assert isinstance(outbox.next(0.0), MqttMessage)
    outbox.offer(sample(2), now=0.0)
    got = outbox.next_qos0()
    assert got is not None
    assert got.payload == b"2"
    outbox.connected_again()  # retained messages due again are paced: through next()
    assert outbox.next_qos0() is None


def test_samples_are_recognized_by_their_instance_level() -> None:
    assert is_sample(MqttMessage("r/v/json/attitude/0", b""))
    assert is_sample(MqttMessage("r/v/ulog/attitude/12", b""))
    assert not is_sample(MqttMessage("r/v/log", b""))
    assert not is_sample(MqttMessage("r/v/meta/log_finished", b""))
    assert not is_sample(MqttMessage("r/v/param/MPC_0", b"", retain=True))


def test_a_token_bucket_refills_at_its_rate_and_spends_into_debt() -> None:
    bucket = TokenBucket(10.0, 2.0, now=100.0, floor=3.0)
    assert bucket.take(100.0)
    assert bucket.take(100.0)
    assert not bucket.take(100.0)
    assert bucket.wait(100.0) == pytest.approx(0.1)
    for _ in range(10):
        bucket.spend(100.0)
    assert bucket.tokens == pytest.approx(-3.0)
    assert not bucket.take(100.39)
    assert bucket.take(100.41)


def test_after_waiting_as_told_a_token_is_there_despite_rounding() -> None:
    # A refill of (1 - tokens) / rate seconds can land a hair below one token; the waiter
    # would then be told to wait nanoseconds, again and again (a spin on a real clock, and
    # no progress at all once now + wait rounds back to now).
    bucket = TokenBucket(20.0, 2.0, now=0.0)
    now = 0.0
    for _ in range(1000):
        if not bucket.take(now):
            now += bucket.wait(now)
            assert bucket.take(now)
