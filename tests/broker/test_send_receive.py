"""Producer and SimpleConsumer of the official client against `strata serve`."""

import pytest

from broker_support import run_client

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
