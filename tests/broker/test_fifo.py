"""FIFO consumption order against `strata serve`, driven by the official client: on a FIFO
topic a consumer group never gets a message group's next message while the previous one is
in flight; an expired one comes back first; after the last attempt it goes to the
dead-letter topic and the group moves on; all of it across a broker restart."""

import signal
import textwrap

import pytest

import strata

from broker_support import run_client

pytestmark = pytest.mark.broker

OK = 20000

# client code: receive until something comes (a send is stored before its consume-queue unit
# is written, so one short poll right after it may still come back empty)
UNTIL = textwrap.indent("""
def until(c, invisible, want=1, limit=30):
    got, t0 = [], time.time()
    while len(got) < want and time.time() - t0 < limit:
        got += c.receive(32, invisible)
    return got
""", " " * 8)       # as indented as the client code it goes before (run_client dedents)


@pytest.fixture
def fifo_store(tmp_path):
    d = tmp_path / "store"
    with strata.open(d) as store:
        store.create_topic("ordered", 2, message_type="fifo")
    return d


def test_a_groups_next_message_waits_for_the_ack_of_the_previous(broker_factory, fifo_store,
                                                                 tmp_path):
    broker = broker_factory(directory=fifo_store)
    got = run_client(tmp_path, broker.endpoint, UNTIL + '''
        p = producer("ordered")
        for body in ("a1", "a2", "a3"):
            p.send(message("ordered", body, group="A"))
        c = consumer("g", "ordered", await_s=1)
        def bodies(ms):
            return [m.body.decode() for m in ms]
        first = until(c, 30)
        p.send(message("ordered", "b1", group="B"))
        second = until(c, 30)                          # B's message, nothing more of A
        third = c.receive(32, 30)                      # nothing: A waits, B waits
        for m in first:
            c.ack(m)
        fourth = until(c, 30)                          # acked a1: a2 comes
        for m in second + fourth:
            c.ack(m)
        fifth = until(c, 30)
        c.shutdown()
        p.shutdown()
        out(first=bodies(first), second=bodies(second), third=bodies(third),
            fourth=bodies(fourth), fifth=bodies(fifth))
    ''')
    assert got["first"] == ["a1"]
    assert got["second"] == ["b1"]
    assert got["third"] == []
    assert got["fourth"] == ["a2"]
    assert got["fifth"] == ["a3"]
    broker.stop()
    with strata.open(fifo_store, readonly=True) as store:   # a message group: one queue
        where = {m.body.decode(): m.queue_id for q in range(2)
                 for m in store.get("ordered", q, 0, 32).messages}
    assert where["a1"] == where["a2"] == where["a3"]


def test_an_expired_message_comes_back_first_with_its_attempt_counted(broker_factory,
                                                                      fifo_store, tmp_path):
    broker = broker_factory(directory=fifo_store)
    got = run_client(tmp_path, broker.endpoint, UNTIL + '''
        p = producer("ordered")
        for body in ("a1", "a2"):
            p.send(message("ordered", body, group="A"))
        p.shutdown()
        c = consumer("g", "ordered", await_s=5)
        seen = []
        first = until(c, 1)                            # not acked: back after 1 s
        seen += [(m.body.decode(), m.delivery_attempt) for m in first]
        again = until(c, 30)
        seen += [(m.body.decode(), m.delivery_attempt) for m in again]
        for m in again:
            c.ack(m)
        nxt = until(c, 30)
        seen += [(m.body.decode(), m.delivery_attempt) for m in nxt]
        c.shutdown()
        out(seen=seen)
    ''')
    assert got["seen"] == [["a1", 1], ["a1", 2], ["a2", 1]]


def test_after_the_last_attempt_the_message_goes_to_the_dlq_and_the_group_moves_on(
        broker_factory, fifo_store, tmp_path):
    broker = broker_factory("--max-delivery-attempts", "2", directory=fifo_store)
    got = run_client(tmp_path, broker.endpoint, '''
        p = producer("ordered")
        for body in ("a1", "a2"):
            p.send(message("ordered", body, group="A"))
        p.shutdown()
        c = consumer("g", "ordered", await_s=5)
        seen = []
        t0 = time.time()
        while len(seen) < 3 and time.time() - t0 < 40:
            for m in c.receive(32, 1):                 # never acked: a1 twice, then a2
                seen.append((m.body.decode(), m.delivery_attempt))
        c.shutdown()
        d = consumer("dlq-reader", "%DLQ%g", await_s=5)
        dead = [(m.body.decode(), m.properties.get("DLQ_ORIGIN_TOPIC"))
                for m in d.receive(32, 30)]
        d.shutdown()
        out(seen=seen, dead=dead)
    ''')
    assert got["seen"][:3] == [["a1", 1], ["a1", 2], ["a2", 1]]
    assert got["dead"] == [["a1", "ordered"]]


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_order_holds_across_a_broker_restart(broker_factory, fifo_store, tmp_path, sig):
    broker = broker_factory(directory=fifo_store)
    before = run_client(tmp_path, broker.endpoint, UNTIL + '''
        p = producer("ordered")
        for body in ("a1", "a2", "b1"):
            p.send(message("ordered", body, group="A" if body[0] == "a" else "B"))
        p.shutdown()
        c = consumer("g", "ordered", await_s=1)
        got = until(c, 120, want=2)                    # a1 and b1; a2 held back
        a1 = next(m for m in got if m.body == b"a1")
        for m in got:
            if m is not a1:
                c.ack(m)
        c.shutdown()
        out(bodies=sorted(m.body.decode() for m in got), handle=a1.receipt_handle,
            msg_id=a1.message_id)
    ''')
    assert before["bodies"] == ["a1", "b1"]
    broker.stop(sig)
    broker = broker_factory(directory=fifo_store)
    after = run_client(tmp_path, broker.endpoint, UNTIL + '''
        args = json.loads(sys.argv[2])
        c = consumer("g", "ordered", await_s=1)
        waiting = [m.body.decode() for m in c.receive(32, 30)]    # a1 in flight: nothing
        s = stub()
        r = s.AckMessage(svc.AckMessageRequest(
            group=pb.Resource(name="g"), topic=pb.Resource(name="ordered"),
            entries=[svc.AckMessageEntry(message_id=args["msg_id"],
                                         receipt_handle=args["handle"])]), metadata=meta())
        nxt = [(m.body.decode(), m.delivery_attempt) for m in until(c, 30)]
        c.shutdown()
        out(waiting=waiting, ack=r.status.code, nxt=nxt)
    ''', args={"handle": before["handle"], "msg_id": before["msg_id"]})
    assert after["waiting"] == []
    assert after["ack"] == OK
    assert after["nxt"] == [["a2", 1]]


def test_fifo_push_consumer_retries_in_place_and_forwards_to_the_dlq(broker_factory,
                                                                     fifo_store, tmp_path):
    broker = broker_factory("--max-delivery-attempts", "2", directory=fifo_store)
    got = run_client(tmp_path, broker.endpoint, '''
        from rocketmq import PushConsumer, MessageListener, ConsumeResult
        import threading
        p = producer("ordered")
        for g in ("A", "B"):
            for i in range(1, 4):
                p.send(message("ordered", f"{g.lower()}{i}", group=g))
        p.shutdown()
        done, tries = [], {}
        lock = threading.Lock()
        class L(MessageListener):
            def consume(self, m):
                body = m.body.decode()
                with lock:
                    tries.setdefault(body, []).append(m.delivery_attempt)
                    if body == "a1" and len(tries[body]) == 1:
                        return ConsumeResult.FAILURE      # once: retried before a2
                    if body == "b2":
                        return ConsumeResult.FAILURE      # always: to the DLQ, then b3
                    done.append(body)
                return ConsumeResult.SUCCESS
        c = PushConsumer(config(), "pg", L(), {"ordered": FilterExpression("*")})
        c.startup()
        t0 = time.time()
        while len(done) < 5 and time.time() - t0 < 40:
            time.sleep(0.1)
        time.sleep(1)
        c.shutdown()
        d = consumer("dlq-reader", "%DLQ%pg", await_s=5)
        dead = [m.body.decode() for m in d.receive(32, 30)]
        d.shutdown()
        out(done=done, tries=tries, dead=dead)
    ''')
    assert [b for b in got["done"] if b[0] == "a"] == ["a1", "a2", "a3"]
    assert [b for b in got["done"] if b[0] == "b"] == ["b1", "b3"]
    # retried in the client (FIFO consumption, Settings.subscription.fifo): one delivery by
    # the broker, then ForwardMessageToDeadLetterQueue
    assert got["tries"]["a1"] == [1, 1] and got["tries"]["b2"] == [1, 1]
    assert got["dead"] == ["b2"]


def test_held_back_messages_are_journaled_and_never_due_by_time(tmp_path):
    from strata.broker.group_state import ConsumerGroups
    from strata.broker.receipt import Receipt
    g = ConsumerGroups(tmp_path)
    (h,) = g.pop("g", "t", 0, 0, [(0, 0)], 3, deadline_ms=1000, held=[1, 2])
    g2 = ConsumerGroups(tmp_path)        # replay without a close, as after a SIGKILL
    q = g2.queue("g", "t", 0)
    assert sorted(q.in_flight) == [0, 1, 2] and q.pop_offset == 3
    assert [q.in_flight[o].held for o in (0, 1, 2)] == [False, True, True]
    assert q.commit_offset() == 0
    assert q.due(now_ms=10**12, limit=10) == [(0, 1)]    # only the delivery; held: no deadline
    assert g2.next_deadline() == 1000
    assert g2.ack([Receipt("g", "t", 0, 0, h, 1000)], now_ms=500) == [None]
    g2.close()                                             # compacted: STATE records
    g3 = ConsumerGroups(tmp_path)
    q = g3.queue("g", "t", 0)
    assert sorted(q.in_flight) == [1, 2] and all(d.held for d in q.in_flight.values())
    assert q.commit_offset() == 1 and g3.next_deadline() is None
    g3.pop("g", "t", 0, 0, [(1, 0)], 3, deadline_ms=5000)   # the next one goes out
    assert not g3.queue("g", "t", 0).in_flight[1].held
    assert g3.queue("g", "t", 0).in_flight[1].attempt == 1


def _popper(tmp_path, max_attempts=3):
    from strata.broker.group_state import ConsumerGroups
    from strata.broker.receipt import ReceiptSigner
    from strata.broker.receive import Popper
    store = strata.open(tmp_path / "s")
    store.create_topic("t", 3, message_type="fifo")
    groups = ConsumerGroups(tmp_path / "b")
    signer = ReceiptSigner(b"k" * 32)
    return store, groups, signer, Popper(store, groups, signer, max_attempts)


def _fifo_message(group: str, i: int) -> strata.Message:
    return strata.Message("t", f"{group}-{i}".encode(), shard_key=group,
                          properties={"__SHARDINGKEY": group})


def test_random_acks_and_expiries_keep_every_message_group_in_order(tmp_path):
    import random
    rng = random.Random(14)
    store, groups, signer, popper = _popper(tmp_path)
    names = [f"g{k}" for k in range(7)]
    sent = {g: 0 for g in names}
    acked = {g: [] for g in names}
    live = {}                               # body -> (receipt, deadline)
    now = 1_000_000
    for step in range(400):
        if step in (150, 250):      # a restart: state replayed, the FIFO index built anew
            from strata.broker.group_state import ConsumerGroups
            from strata.broker.receive import Popper
            if step == 150:
                groups.close()
            groups = ConsumerGroups(tmp_path / "b")       # (at 250 without a close)
            popper = Popper(store, groups, signer, 3)
        if step < 300 and rng.random() < 0.5:
            g = rng.choice(names)
            store.put(_fifo_message(g, sent[g]))
            sent[g] += 1
            store.wait_dispatched()
        for d in popper.pop("cg", "t", None, rng.randint(1, 5), 1000, now):
            body = d.message.body.decode()
            live[body] = (signer.decode(d.receipt_handle), now + 1000)
        # at most one message per message group handed out and not yet expired
        current = [b.split("-")[0] for b, (_r, dl) in live.items() if dl > now]
        assert len(current) == len(set(current)), current
        for body in rng.sample(sorted(live), k=len(live) // 2):
            r, dl = live.pop(body)
            if dl > now and groups.ack([r], now) == [None]:
                g, i = body.split("-")
                acked[g].append(int(i))
        now += rng.choice((0, 0, 300, 1200))     # sometimes past the invisible time
    for _ in range(200):                             # drain: ack whatever comes
        for d in popper.pop("cg", "t", None, 32, 1000, now):
            r = signer.decode(d.receipt_handle)
            assert groups.ack([r], now) == [None]
            g, i = d.message.body.decode().split("-")
            acked[g].append(int(i))
        now += 1200
    store.wait_dispatched()                          # the dead letters' queue units
    dead = []
    for q in range(store.queue_count("%DLQ%cg")):
        dead += [m.body.decode() for m in store.get("%DLQ%cg", q, 0, 1000).messages]
    for g in names:
        gone = sorted(int(b.split("-")[1]) for b in dead if b.split("-")[0] == g)
        assert acked[g] == sorted(acked[g])          # in send order
        assert sorted(acked[g] + gone) == list(range(sent[g]))   # each once, acked or dead
    assert sum(sent.values()) > 100 and dead     # the run exercised both
    groups.close()
    store.close()


def test_a_busy_message_group_holds_back_at_most_max_held_messages(tmp_path, monkeypatch):
    from strata.broker import fifo
    monkeypatch.setattr(fifo, "MAX_HELD", 3)
    store, groups, signer, popper = _popper(tmp_path)
    store.create_topic("one", 1, message_type="fifo")
    for i in range(6):
        store.put(strata.Message("one", f"A-{i}".encode(), properties={"__SHARDINGKEY": "A"}))
    store.put(strata.Message("one", b"B-0", properties={"__SHARDINGKEY": "B"}))
    store.wait_dispatched()
    (a0,) = popper.pop("cg", "one", None, 32, 60_000, 0)
    q = groups.queue("cg", "one", 0)
    assert sorted(o for o, d in q.in_flight.items() if d.held) == [1, 2, 3]
    assert popper.pop("cg", "one", None, 32, 60_000, 1) == []     # B-0 lies past the cap
    bodies = []
    for now in range(2, 5):          # each ack frees one place: held, then B-0 read
        assert groups.ack([signer.decode(a0.receipt_handle)], now) == [None]
        got = popper.pop("cg", "one", None, 32, 60_000, now)
        bodies.append([d.message.body.decode() for d in got])
        a0 = got[0]
    assert bodies == [["A-1"], ["A-2"], ["A-3", "B-0"]]
    groups.close()
    store.close()


def test_a_fifo_push_receive_is_invisible_for_one_renewal_slice(broker_factory, fifo_store,
                                                                 tmp_path):
    """A FIFO push consumer retries a failed message itself; the broker keeps the message
    invisible through that by renewing it while the client is connected (test_push_consumer),
    so the receive itself is invisible for one slice (no longer the slice plus all the
    backoff's delays)."""
    broker = broker_factory("--max-delivery-attempts", "3", directory=fifo_store)
    got = run_client(tmp_path, broker.endpoint, '''
        p = producer("ordered")
        p.send(message("ordered", "a1", group="A"))
        p.shutdown()
        s = stub()
        seen = []
        t0 = time.time()
        while not seen and time.time() - t0 < 30:
            req = svc.ReceiveMessageRequest(
                group=pb.Resource(name="pg"), auto_renew=True, batch_size=32,
                message_queue=pb.MessageQueue(topic=pb.Resource(name="ordered")))
            req.filter_expression.expression = "*"
            req.long_polling_timeout.seconds = 1
            for r in s.ReceiveMessage(req, metadata=meta(), timeout=10):
                if r.HasField("message"):
                    seen.append(r.message.system_properties.invisible_duration.seconds)
        out(seen=seen)
    ''')
    assert got["seen"] == [60]
