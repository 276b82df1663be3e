"""Producer and SimpleConsumer of the official client against `strata serve`."""

import pytest

from broker_support import run_client

from strata.store.config import StoreConfig

pytestmark = pytest.mark.broker


def test_send_then_receive_and_ack(broker, tmp_path):
    got = run_client(tmp_path, broker.endpoint, '''
        p = producer("orders")
        ids = []
        for i in range(5):
            r = p.send(message("orders", f"body-{i}", tag="created", keys=[f"k{i}"],
                               props={"region": "eu"}))
            ids.append(r.message_id)
        p.shutdown()
        c = consumer("g1", "orders")
        seen = []
        for _ in range(10):
            for m in c.receive(32, 10):
                seen.append({"id": m.message_id, "body": m.body.decode(), "tag": m.tag,
                             "keys": sorted(m.keys), "props": m.properties,
                             "attempt": m.delivery_attempt})
                c.ack(m)
            if len(seen) >= 5:
                break
        again = c.receive(32, 10)
        c.shutdown()
        out(ids=ids, seen=seen, again=len(again))
    ''')
    assert sorted(s["id"] for s in got["seen"]) == sorted(got["ids"])
    assert sorted(s["body"] for s in got["seen"]) == [f"body-{i}" for i in range(5)]
    s0 = next(s for s in got["seen"] if s["body"] == "body-0")
    assert s0["tag"] == "created" and s0["keys"] == ["k0"]
    assert s0["props"] == {"region": "eu"} and s0["attempt"] == 1
    assert got["again"] == 0


def test_route_and_settings_carry_the_queues_types_and_body_limit(broker, tmp_path):
    got = run_client(tmp_path, broker.endpoint, '''
        s = stub()
        r = s.QueryRoute(svc.QueryRouteRequest(topic=pb.Resource(name="routes")), metadata=meta())
        qs = [(q.id, list(q.accept_message_types), q.permission,
               q.broker.endpoints.addresses[0].port) for q in r.message_queues]
        settings = pb.Settings(client_type=pb.ClientType.PRODUCER)
        settings.publishing.topics.add().name = "routes"
        replies = s.Telemetry(iter([svc.TelemetryCommand(settings=settings)]), metadata=meta())
        reply = next(iter(replies))
        out(code=r.status.code, queues=qs, tcode=reply.status.code,
            max_body=reply.settings.publishing.max_body_size,
            validate=reply.settings.publishing.validate_message_type,
            hb=s.Heartbeat(svc.HeartbeatRequest(client_type=pb.ClientType.PRODUCER),
                           metadata=meta()).status.code)
    ''')
    OK = 20000
    assert got["code"] == OK and got["tcode"] == OK and got["hb"] == OK
    assert [q[0] for q in got["queues"]] == list(range(8))
    # NORMAL, FIFO, DELAY, TRANSACTION: a topic that declared no type is mixed
    assert all(sorted(q[1]) == [1, 2, 3, 4] for q in got["queues"])
    assert all(q[2] == 4 and q[3] == broker.port for q in got["queues"])  # READ_WRITE
    # the broker's limit is the store's: 4 MiB, or less where a segment (4 MiB in these tests)
    # cannot hold a 4 MiB body beside its record header and closing blank record
    limit = StoreConfig(segment_size=4 << 20).max_body_size
    assert limit < 4 << 20
    assert got["max_body"] == limit and got["validate"] is True


def test_tag_filter_takes_only_the_subscribed_tags_even_when_hashes_collide(broker, tmp_path):
    from strata.format.consume_queue import tag_hash
    assert tag_hash("tag1371838") == tag_hash("tag2000402")     # a real CRC32C collision
    got = run_client(tmp_path, broker.endpoint, '''
        p = producer("tagged")
        for i, tag in enumerate(["a", "b", "c", "tag2000402", "a", "tag1371838", "c", "b"]):
            p.send(message("tagged", f"{tag}-{i}", tag=tag))
        p.shutdown()
        seen = {}
        for group, expr in (("ab", "a||b"), ("col", "tag1371838")):
            c = consumer(group, "tagged", expr, await_s=1)
            bodies = []
            for _ in range(4):
                ms = c.receive(32, 10)
                for m in ms:
                    bodies.append(m.body.decode())
                    c.ack(m)
            seen[group] = sorted(bodies)
            c.shutdown()
        out(**seen)
    ''')
    assert got["ab"] == ["a-0", "a-4", "b-1", "b-7"]
    assert got["col"] == ["tag1371838-5"]


def test_unacked_message_comes_back_after_its_invisible_time_with_the_attempt_counted(
        broker, tmp_path):
    got = run_client(tmp_path, broker.endpoint, '''
        p = producer("redo")
        mid = p.send(message("redo", "again")).message_id
        p.shutdown()
        c = consumer("g", "redo", await_s=4)
        first = c.receive(1, 1)
        second = c.receive(1, 10)       # long-polls until the first delivery times out
        try:
            c.ack(first[0])             # the first delivery's handle was superseded
            old = "accepted"
        except Exception as exc:
            old = str(exc)
        c.ack(second[0])
        after = c.receive(1, 10)
        c.shutdown()
        out(mid=mid, ids=[m.message_id for m in first + second],
            attempts=[m.delivery_attempt for m in first + second], old=old, after=len(after))
    ''')
    assert got["ids"] == [got["mid"], got["mid"]]
    assert got["attempts"] == [1, 2]
    assert "replaced" in got["old"]
    assert got["after"] == 0


def test_change_invisible_duration_gives_a_new_handle_and_the_old_one_fails(broker, tmp_path):
    got = run_client(tmp_path, broker.endpoint, '''
        p = producer("inv")
        p.send(message("inv", "x"))
        p.shutdown()
        c = consumer("g", "inv", await_s=1)
        m = c.receive(1, 1)[0]
        old = m.receipt_handle
        c.change_invisible_duration(m, 30)  # the client keeps the new handle in m
        new = m.receipt_handle
        time.sleep(1.5)                     # past the first invisible time: not redelivered
        hidden = c.receive(1, 10)
        m.receipt_handle = old
        try:
            c.ack(m)
            old_ack = "accepted"
        except Exception as exc:
            old_ack = f"{type(exc).__name__}: {exc}"
        m.receipt_handle = new
        c.ack(m)
        c.shutdown()
        out(changed=old != new, hidden=len(hidden), old_ack=old_ack)
    ''')
    assert got["changed"] and got["hidden"] == 0
    assert got["old_ack"].startswith("BadRequestException") and "replaced" in got["old_ack"]


def test_after_max_attempts_a_message_goes_to_the_groups_dead_letter_topic(
        broker_factory, tmp_path):
    b = broker_factory("--max-delivery-attempts", "2")
    got = run_client(tmp_path, b.endpoint, '''
        p = producer("fragile")
        mid = p.send(message("fragile", "poison", tag="t", keys=["k1"])).message_id
        p.send(message("fragile", "fine"))
        p.shutdown()
        c = consumer("dg", "fragile", await_s=2)
        attempts = []
        for _ in range(8):
            for m in c.receive(1, 1):
                if m.body == b"poison":
                    attempts.append(m.delivery_attempt)     # never acked
                else:
                    c.ack(m)
            if len(attempts) == 2:
                break
        time.sleep(1.1)
        attempts += [m.delivery_attempt for m in c.receive(1, 1)]   # now dead-lettered
        c.shutdown()
        out(mid=mid, attempts=attempts)
    ''')
    assert got["attempts"] == [1, 2]
    assert b.stop() == 0
    import strata
    with strata.open(b.directory, readonly=True) as store:
        dlq = [m for q in range(store.queue_count("%DLQ%dg"))
               for m in store.get("%DLQ%dg", q, 0, 32).messages]
    assert [m.body for m in dlq] == [b"poison"]
    m = dlq[0]
    assert m.tags == "t" and m.keys == ("k1",) and m.reconsume_times == 2
    assert m.properties["DLQ_ORIGIN_TOPIC"] == "fragile"
    assert m.properties["UNIQ_KEY"] == got["mid"]
