"""Which Telemetry session an orphaned-transaction check goes to."""

from strata.broker.rocketmq.sessions import Sessions


def test_a_check_goes_to_the_sender_if_live_else_to_another_producer_of_the_topic():
    s = Sessions()
    a, b, c = s.open("a"), s.open("b"), s.open("consumer")
    a.topics = b.topics = frozenset({"t"})
    assert s.producer_for("t", prefer="b") is b
    assert {s.producer_for("t", prefer="gone").client_id for _ in range(4)} == {"a", "b"}
    assert s.producer_for("other") is None          # c publishes nothing
    b.close()
    assert s.producer_for("t", prefer="b") is a     # a closed stream is never chosen
    s.closed(a)
    assert s.producer_for("t") is None


def test_a_new_stream_of_a_client_replaces_and_ends_its_old_one():
    s = Sessions()
    old = s.open("x")
    new = s.open("x")
    assert s.by_client["x"] is new and old.closed
    assert old.outbox.get_nowait() is None           # the old stream's generator ends
    s.closed(old)                                    # the old stream's cleanup keeps the new
    assert s.by_client["x"] is new


def test_a_client_is_connected_while_it_calls_and_longer_with_an_open_stream():
    """What keeps a push consumer's messages renewed (service.renew_due)."""
    s = Sessions()
    s.seen("raw", 1_000)                         # calls, no Telemetry stream
    assert s.connected("raw", 31_000, 30_000, 120_000)
    assert not s.connected("raw", 31_001, 30_000, 120_000)
    st = s.open("push")
    s.seen("push", 1_000)
    assert s.connected("push", 121_000, 30_000, 120_000)      # a stream open: 120 s
    assert not s.connected("push", 121_001, 30_000, 120_000)  # hung: gone
    old = st
    new = s.open("push")                         # a rebuilt stream: the old one ends
    assert not s.closed(old)                     # ... and the client is still there
    assert s.closed(new)                         # its last stream closed
    s.forget("push")
    assert not s.connected("push", 1_001, 30_000, 120_000)
    assert not s.connected("never", 0, 30_000, 120_000)
