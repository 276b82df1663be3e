import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from broker_support import PRELUDE, Broker, run_client

pytestmark = pytest.mark.broker

def test_push_consumer_gets_every_message(broker, tmp_path):
    got = run_client(tmp_path, broker.endpoint, '''
        from rocketmq import PushConsumer, MessageListener, ConsumeResult
        import threading
        p = producer("pushed")
        for i in range(20):
            p.send(message("pushed", f"p{i}"))
        p.shutdown()
        seen = set()
        lock = threading.Lock()
        class L(MessageListener):
            def consume(self, m):
                with lock:
                    seen.add(m.body.decode())
                return ConsumeResult.SUCCESS
        c = PushConsumer(config(), "pg", L(), {"pushed": FilterExpression("*")})
        c.startup()
        t0 = time.time()
        while len(seen) < 20 and time.time() - t0 < 30:
            time.sleep(0.1)
        c.shutdown()
        out(seen=sorted(seen))
    ''')
    assert got["seen"] == sorted(f"p{i}" for i in range(20))


def test_push_consumer_failure_is_retried_after_the_broker_backoff(broker, tmp_path):
    got = run_client(tmp_path, broker.endpoint, '''
        from rocketmq import PushConsumer, MessageListener, ConsumeResult
        p = producer("retried")
        p.send(message("retried", "flaky"))
        p.shutdown()
        attempts = []
        class L(MessageListener):
            def consume(self, m):
                attempts.append(m.delivery_attempt)
                return ConsumeResult.FAILURE if len(attempts) == 1 else ConsumeResult.SUCCESS
        c = PushConsumer(config(), "rg", L(), {"retried": FilterExpression("*")})
        c.startup()
        t0 = time.time()
        while len(attempts) < 2 and time.time() - t0 < 30:
            time.sleep(0.1)
        time.sleep(2.5)                    # acked: no third delivery
        c.shutdown()
        out(attempts=attempts)
    ''')
    assert got["attempts"] == [1, 2]


# ---------------------------------------------------------------- renewal (auto_renew)

RAW_RECEIVE = '''
def raw_receive(client, topic, group="rg", poll_s=1):
    """One auto_renew receive as the push consumer makes it: the receipt handles."""
    req = svc.ReceiveMessageRequest(
        group=pb.Resource(name=group), auto_renew=True, batch_size=32,
        message_queue=pb.MessageQueue(topic=pb.Resource(name=topic)))
    req.filter_expression.expression = "*"
    req.long_polling_timeout.seconds = poll_s
    return [(r.message.body.decode(), r.message.system_properties.receipt_handle,
             r.message.system_properties.invisible_duration.seconds)
            for r in s.ReceiveMessage(req, metadata=[("x-mq-client-id", client)],
                                      timeout=poll_s + 5)
            if r.HasField("message")]

def heartbeat(client):
    s.Heartbeat(svc.HeartbeatRequest(group=pb.Resource(name="rg"),
                                     client_type=pb.ClientType.PUSH_CONSUMER),
                metadata=[("x-mq-client-id", client)], timeout=5)

def ack(client, topic, handle, group="rg"):
    r = s.AckMessage(svc.AckMessageRequest(
        group=pb.Resource(name=group), topic=pb.Resource(name=topic),
        entries=[svc.AckMessageEntry(message_id="x", receipt_handle=handle)]),
        metadata=[("x-mq-client-id", client)], timeout=5)
    return r.status.code

def sent_and_received(client, topic):
    """Send one message "m1" to ``topic``; the first auto_renew receive of it by ``client``."""
    p = producer(topic)
    p.send(message(topic, "m1"))
    p.shutdown()
    got = []
    while not got:
        got = raw_receive(client, topic)
    return got

s = stub()
'''


def test_a_slow_push_consumer_gets_no_duplicate(broker_factory, tmp_path):
    """Consuming takes 8 s, the invisible time per renewal is 2 s: the broker renews it
    while the client is connected, so the message is not handed out again meanwhile."""
    broker = broker_factory("--renew-slice", "2")
    got = run_client(tmp_path, broker.endpoint, '''
        from rocketmq import PushConsumer, MessageListener, ConsumeResult
        import threading
        p = producer("slow")
        p.send(message("slow", "long job"))
        p.shutdown()
        calls, done = [], []
        class L(MessageListener):
            def consume(self, m):
                calls.append(m.delivery_attempt)
                time.sleep(8)
                done.append(m.body.decode())
                return ConsumeResult.SUCCESS
        c = PushConsumer(config(), "slow-g", L(), {"slow": FilterExpression("*")})
        c.startup()
        t0 = time.time()
        while not done and time.time() - t0 < 40:
            time.sleep(0.1)
        time.sleep(4)                      # acked: nothing comes back
        c.shutdown()
        out(calls=calls, done=done)
    ''')
    assert got == {"calls": [1], "done": ["long job"]}


def test_a_killed_push_consumers_messages_go_to_another_consumer_soon(broker_factory,
                                                                       tmp_path):
    """The first consumer takes 5 messages and hangs; it is killed (SIGKILL). Its Telemetry
    stream closes, so the broker releases them at once: the second consumer gets them soon,
    not after the 60 s invisible time."""
    broker = broker_factory()
    home = tmp_path / "client-home"
    home.mkdir()
    script = PRELUDE + textwrap.dedent('''
        from rocketmq import PushConsumer, MessageListener, ConsumeResult
        p = producer("killed")
        for i in range(5):
            p.send(message("killed", f"k{i}"))
        p.shutdown()
        class L(MessageListener):
            def consume(self, m):
                print("GOT " + m.body.decode(), flush=True)
                time.sleep(600)
                return ConsumeResult.SUCCESS
        c = PushConsumer(config(), "kg", L(), {"killed": FilterExpression("*")})
        c.startup()
        time.sleep(600)
    ''')
    log = tmp_path / "first.out"
    with open(log, "w") as f:
        first = subprocess.Popen([sys.executable, "-c", script, broker.endpoint], text=True,
                                 stdout=f, stderr=subprocess.STDOUT,
                                 env=dict(os.environ, HOME=str(home)))
    try:
        deadline = time.monotonic() + 60
        while log.read_text().count("GOT ") < 5 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert log.read_text().count("GOT ") == 5, log.read_text()[-3000:]
    finally:
        first.kill()
        first.wait()
    killed_at = time.time()
    got = run_client(tmp_path, broker.endpoint, '''
        from rocketmq import PushConsumer, MessageListener, ConsumeResult
        import threading
        killed_at = json.loads(sys.argv[2])
        seen, lock = {}, threading.Lock()
        class L(MessageListener):
            def consume(self, m):
                with lock:
                    seen[m.body.decode()] = [m.delivery_attempt, time.time() - killed_at]
                return ConsumeResult.SUCCESS
        c = PushConsumer(config(), "kg", L(), {"killed": FilterExpression("*")})
        c.startup()
        t0 = time.time()
        while len(seen) < 5 and time.time() - t0 < 70:
            time.sleep(0.1)
        c.shutdown()
        out(seen=seen)
    ''', args=killed_at)
    assert sorted(got["seen"]) == [f"k{i}" for i in range(5)]
    assert all(attempt == 2 for attempt, _ in got["seen"].values())
    # they came back because the closed stream released them (not at the end of the 60 s
    # a receive is invisible for): the broker says so when it stops
    broker.stop()
    assert "5 messages of gone push consumers released" in broker.log, broker.log[-2000:]


def test_renewal_lasts_while_the_client_calls_and_ends_with_its_termination(broker_factory,
                                                                            tmp_path):
    broker = broker_factory("--renew-slice", "2")
    got = run_client(tmp_path, broker.endpoint, RAW_RECEIVE + textwrap.dedent('''
        p = producer("renewed")
        p.send(message("renewed", "m1"))
        p.send(message("renewed", "m2"))
        p.shutdown()
        first = []
        while len(first) < 2:
            first += raw_receive("c1", "renewed")
        t0 = time.time()
        other = []
        while time.time() - t0 < 7:        # 3.5 invisible times: renewed, never due
            heartbeat("c1")
            other += raw_receive("c2", "renewed", poll_s=1)
        acked = ack("c1", "renewed", first[0][1])   # its handle from the receive works
        s.NotifyClientTermination(svc.NotifyClientTerminationRequest(
            group=pb.Resource(name="rg")), metadata=[("x-mq-client-id", "c1")], timeout=5)
        t1 = time.time()
        back = []
        while not back and time.time() - t1 < 60:      # a deadline that decides nothing
            back += raw_receive("c2", "renewed", poll_s=2)
        out(slices=[x[2] for x in first], other=other, acked=acked, kept=first[1][0],
            back=[x[0] for x in back])
    '''))
    assert got["slices"] == [2, 2]
    assert got["other"] == [] and got["acked"] == 20000     # Code.OK
    assert got["back"] == [got["kept"]]      # the one not acked comes back
    # ... because the termination released it (not because its renewals just stopped)
    broker.stop()
    assert "1 messages of gone push consumers released" in broker.log, broker.log[-2000:]


def test_renewal_survives_a_broker_sigkill(broker_factory, tmp_path):
    store = tmp_path / "store"
    b1 = broker_factory("--renew-slice", "2", directory=store)
    first = run_client(tmp_path, b1.endpoint, RAW_RECEIVE + textwrap.dedent('''
        out(handle=sent_and_received("c1", "kept")[0][1])
    '''))
    b1.stop(signal.SIGKILL)
    b2 = broker_factory("--renew-slice", "2", directory=store)
    got = run_client(tmp_path, b2.endpoint, RAW_RECEIVE + textwrap.dedent('''
        handle = json.loads(sys.argv[2])
        t0 = time.time()
        other = []
        while time.time() - t0 < 5:        # the client is back: renewal goes on
            heartbeat("c1")
            other += raw_receive("c2", "kept", poll_s=1)
        out(other=other, acked=ack("c1", "kept", handle))
    '''), args=first["handle"])
    assert got == {"other": [], "acked": 20000}      # Code.OK


class HeldRenewalsBroker(Broker):
    command = (sys.executable, str(Path(__file__).parent / "held_renewals.py"))


def test_a_late_renewal_hands_nothing_out_twice(tmp_path):
    """The renew loop is held back (tests/broker/held_renewals.py) for four invisible times
    of a push consumer's delivery: while its client is connected no other consumer gets the
    message, and the client's receipt handle still acknowledges it. Nothing was renewed
    meanwhile: the rule where pops pick due deliveries kept it, not a renewal."""
    broker = HeldRenewalsBroker(tmp_path / "store", "--renew-slice", "1").start()
    try:
        got = run_client(tmp_path, broker.endpoint, RAW_RECEIVE + textwrap.dedent('''
            first = sent_and_received("c1", "late")
            t0 = time.time()
            other = []
            while time.time() - t0 < 4:        # 4 invisible times, never renewed
                heartbeat("c1")
                other += raw_receive("c2", "late", poll_s=1)
            out(slices=[x[2] for x in first], other=other,
                acked=ack("c1", "late", first[0][1]))
        '''))
    finally:
        broker.stop(signal.SIGTERM)
    assert got == {"slices": [1], "other": [], "acked": 20000}      # Code.OK
    assert "strata-test: renewals are held" in broker.log
    assert "0 invisible times renewed" in broker.log, broker.log[-2000:]
