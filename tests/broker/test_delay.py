"""Delay messages through the official client against `strata serve`: held until their
delivery time, then in their topic exactly once — across a clean restart and a SIGKILL."""

import os
import signal
import subprocess
import sys
import time

import pytest

from broker_support import PRELUDE, run_client

pytestmark = pytest.mark.broker

# Receives on `topic` until `expect` bodies came and one more poll found nothing (or 90 s);
# every receipt is acked; each body with the time it arrived and its delivery timestamp.
CONSUME = '''
    args = json.loads(sys.argv[2])
    c = consumer(args["group"], args["topic"], await_s=1)
    seen = []
    empty = 0
    t0 = time.time()
    while (len(seen) < args["expect"] or empty < 1) and time.time() - t0 < 90:
        ms = c.receive(32, 30)
        empty = 0 if ms else empty + 1
        for m in ms:
            seen.append({"body": m.body.decode(), "at": int(time.time() * 1000),
                         "due": m.delivery_timestamp, "type": m.message_type,
                         "props": m.properties})
            c.ack(m)
    c.shutdown()
    out(seen=seen)
'''


def consume(tmp_path, endpoint, topic, expect, group="g"):
    return run_client(tmp_path, endpoint, CONSUME,
                      args={"topic": topic, "group": group, "expect": expect})["seen"]


def held_count(log: str) -> int:
    import re
    return int(re.search(r"([\d,]+) messages? held\)", log).group(1).replace(",", ""))


def test_delay_message_is_invisible_until_due_then_delivered_exactly_once(broker, tmp_path):
    got = run_client(tmp_path, broker.endpoint, '''
        p = producer("later")
        due = int(time.time() * 1000) + 4000
        for i in range(3):
            m = message("later", f"d{i}", tag="t", keys=[f"k{i}"], props={"p": "v"})
            m.delivery_timestamp = due
            p.send(m)
        p.shutdown()
        c = consumer("g", "later", await_s=1)
        early = []
        while int(time.time() * 1000) < due - 1500:      # every poll that ended before due
            ms = c.receive(32, 30)
            if int(time.time() * 1000) < due:
                early += [m.body.decode() for m in ms]
            for m in ms:
                c.ack(m)
        c.shutdown()
        out(due=due, early=early)
    ''')
    assert got["early"] == []               # the delay messages are held until due
    seen = consume(tmp_path, broker.endpoint, "later", 3)
    assert sorted(s["body"] for s in seen) == ["d0", "d1", "d2"]    # exactly once each
    for s in seen:
        assert s["at"] >= got["due"]
        assert s["due"] == got["due"] and s["type"] == 3            # DELAY
        assert s["props"] == {"p": "v"}                             # no broker property shown
    # a second group reads the topic from its start: each message is in it once
    again = consume(tmp_path, broker.endpoint, "later", 3, group="g2")
    assert sorted(s["body"] for s in again) == ["d0", "d1", "d2"]


def test_delivery_time_in_the_past_is_delivered_at_once(broker, tmp_path):
    got = run_client(tmp_path, broker.endpoint, '''
        p = producer("past")
        m = message("past", "old")
        m.delivery_timestamp = int(time.time() * 1000) - 60_000
        p.send(m)
        p.shutdown()
        c = consumer("g", "past", await_s=1)
        ms = c.receive(32, 30)
        for x in ms:
            c.ack(x)
        c.shutdown()
        out(bodies=[x.body.decode() for x in ms])
    ''')
    assert got["bodies"] == ["old"]
    assert broker.stop() == 0
    assert "0 delay messages moved" in broker.log        # stored at once, never held


def test_delivery_time_beyond_the_maximum_is_refused_and_nothing_is_stored(
        broker_factory, tmp_path):
    b = broker_factory()
    got = run_client(tmp_path, b.endpoint, '''
        p = producer("far")
        m = message("far", "too late")
        m.delivery_timestamp = int(time.time() * 1000) + 41 * 86_400_000
        try:
            p.send(m)
            client = "accepted"
        except Exception as exc:
            client = str(exc)
        p.shutdown()
        s = stub()
        def send(**sp):
            m = pb.Message(topic=pb.Resource(name="far"), body=b"x")
            m.system_properties.message_id = "raw-1"
            for k, v in sp.items():
                setattr(m.system_properties, k, v)
            return m
        far = send(message_type=pb.MessageType.DELAY)
        far.system_properties.delivery_timestamp.seconds = int(time.time()) + 41 * 86_400
        untimed = send(message_type=pb.MessageType.DELAY)
        conflict = send(message_type=pb.MessageType.FIFO, message_group="g")
        conflict.system_properties.delivery_timestamp.seconds = int(time.time()) + 60
        forged = send(message_type=pb.MessageType.NORMAL)   # a client posing as the timer
        forged.user_properties["TIMER_DELIVER_MS"] = "1"
        forged.user_properties["__HELD_ID"] = "00" * 16
        codes = []
        for m in (far, untimed, conflict, forged):
            r = s.SendMessage(svc.SendMessageRequest(messages=[m]), metadata=meta())
            codes.append([pb.Code.Name(r.status.code), r.status.message])
        out(client=client, codes=codes)
    ''')
    assert "ILLEGAL_DELIVERY_TIME" in got["client"] or "41.0 days" in got["client"]
    far, untimed, conflict, forged = got["codes"]
    assert far[0] == "ILLEGAL_DELIVERY_TIME" and "at most 40 days" in far[1]
    assert untimed[0] == "ILLEGAL_DELIVERY_TIME" and "needs a delivery timestamp" in untimed[1]
    assert conflict[0] == "MESSAGE_PROPERTY_CONFLICT_WITH_TYPE"
    assert forged[0] == "ILLEGAL_MESSAGE_PROPERTY_KEY" and "__HELD_ID" in forged[1]
    assert b.stop() == 0
    b2 = broker_factory()
    assert held_count(b2.log) == 0
    assert consume(tmp_path, b2.endpoint, "far", 0) == []


def test_many_due_at_once_move_in_one_batch_after_a_clean_restart(broker_factory, tmp_path):
    b = broker_factory()
    n = 300
    got = run_client(tmp_path, b.endpoint, '''
        n = json.loads(sys.argv[2])
        p = producer("bulk")
        due = int(time.time() * 1000) + 15_000
        futures = []
        for i in range(n):
            m = message("bulk", f"b{i}")
            m.delivery_timestamp = due
            futures.append(p.send_async(m))
        for f in futures:
            f.result()
        out(due=due, done=int(time.time() * 1000))
        p.shutdown()
    ''', args=n)
    assert got["done"] < got["due"], "the sends took longer than the delay; nothing held"
    assert b.stop() == 0
    assert "0 delay messages moved" in b.log
    assert "300 messages still held" in b.log
    time.sleep(max(0.0, (got["due"] - time.time() * 1000) / 1000) + 0.5)
    b2 = broker_factory()
    assert held_count(b2.log) == n
    seen = consume(tmp_path, b2.endpoint, "bulk", n)
    assert sorted(s["body"] for s in seen) == sorted(f"b{i}" for i in range(n))
    assert b2.stop() == 0
    assert f"{n:,} delay messages moved in 1 batch;" in b2.log    # all due at once: one put
    assert "0 messages still held" in b2.log


@pytest.mark.parametrize("flush", ["async", "sync"])
def test_sigkill_loses_no_acknowledged_delay_message_and_delivers_none_twice(
        broker_factory, tmp_path, flush):
    b = broker_factory("--flush", flush)
    acked_file = tmp_path / "acked.txt"
    home = tmp_path / "producer-home"
    home.mkdir()
    # keeps sending delay messages due 1-3 s later (so moves run while sends go on); each
    # acknowledged send is written down at once
    sender = subprocess.Popen(
        [sys.executable, "-c", PRELUDE + f'''
p = producer("tick")
with open({str(acked_file)!r}, "a") as f:
    i = 0
    while True:
        m = message("tick", f"t{{i}}")
        m.delivery_timestamp = int(time.time() * 1000) + 1000 + (i % 3) * 1000
        try:
            p.send(m)
        except Exception:
            break
        f.write(f"t{{i}}\\n")
        f.flush()
        i += 1
''', b.endpoint], env=dict(os.environ, HOME=str(home)), stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if acked_file.exists() and len(acked_file.read_text().split()) >= 60:
                break
            time.sleep(0.05)
        b.stop(signal.SIGKILL)
        sender.wait(timeout=60)
    finally:
        sender.kill()
    sent = acked_file.read_text().split()
    assert len(sent) >= 60
    b2 = broker_factory("--flush", flush)
    assert held_count(b2.log) > 0          # the crash came while messages were held
    seen = [s["body"] for s in consume(tmp_path, b2.endpoint, "tick", len(sent))]
    assert set(sent) <= set(seen)                       # every acknowledged send delivered
    assert len(seen) == len(set(seen))                  # and none twice
    assert b2.stop() == 0 and "0 messages still held" in b2.log


def test_recall_drops_a_held_delay_message_before_it_is_due(broker, tmp_path):
    got = run_client(tmp_path, broker.endpoint, '''
        p = producer("recall")
        due = int(time.time() * 1000) + 3000
        m = message("recall", "never")
        m.delivery_timestamp = due
        r = p.send(m)
        k = message("recall", "kept")
        k.delivery_timestamp = due
        p.send(k)
        mid = p.recall_message("recall", r.recall_handle)
        errors = []
        for topic, handle in (("recall", r.recall_handle), ("recall", "zz"),
                              ("elsewhere", r.recall_handle)):
            try:
                p.recall_message(topic, handle)
                errors.append("accepted")
            except Exception as exc:
                errors.append(str(exc))
        p.shutdown()
        out(mid=mid, sent=r.message_id, errors=errors)
    ''')
    assert got["mid"] == got["sent"]
    again, malformed, other_topic = got["errors"]
    assert "no delay message of topic 'recall'" in again            # recalled already
    assert "hex digits" in malformed
    assert "no delay message of topic 'elsewhere'" in other_topic
    assert [s["body"] for s in consume(tmp_path, broker.endpoint, "recall", 1)] == ["kept"]
