"""A store read that takes long (one that goes to S3 through the tier) holds the receive that
made it, never the broker: while a pop's read is held (tests/broker/held_read.py), another
client's QueryRoute, Heartbeat and Send are answered, and the held receive gets its message
once the read goes on."""

import os
import signal
import sys
from pathlib import Path

import pytest

from broker_support import Broker, run_client

pytestmark = pytest.mark.broker

HERE = Path(__file__).parent


class HeldReadBroker(Broker):
    command = (sys.executable, str(HERE / "held_read.py"))


def test_a_held_store_read_holds_no_other_clients_call(tmp_path, monkeypatch):
    fifo = tmp_path / "held.fifo"
    os.mkfifo(fifo)
    monkeypatch.setenv("STRATA_TEST_HELD_FIFO", str(fifo))
    b = HeldReadBroker(tmp_path / "store").start()
    try:
        got = run_client(tmp_path, b.endpoint, '''
import os, signal, threading
fifo, pid = json.loads(sys.argv[2])

def send(s, topic, body, client):
    m = pb.Message(topic=pb.Resource(name=topic), body=body)
    m.system_properties.message_id = "off-loop-%d" % time.time_ns()
    m.system_properties.message_type = pb.MessageType.NORMAL
    return pb.Code.Name(s.SendMessage(svc.SendMessageRequest(messages=[m]),
                                      metadata=[("x-mq-client-id", client)],
                                      timeout=5).status.code)

def answered(call):
    try:
        return pb.Code.Name(call().status.code)
    except grpc.RpcError as e:                  # the broker did not answer in time
        return e.code().name

consumer = stub()
assert send(consumer, "held-read", b"m1", "consumer") == "OK"
received = {}

def receive():
    req = svc.ReceiveMessageRequest(group=pb.Resource(name="g"),
                                    message_queue=pb.MessageQueue(
                                        topic=pb.Resource(name="held-read")),
                                    batch_size=8)
    req.invisible_duration.seconds = 60
    req.long_polling_timeout.seconds = 5
    replies = list(consumer.ReceiveMessage(req, metadata=[("x-mq-client-id", "consumer")],
                                           timeout=70))
    received["r"] = [pb.Code.Name(replies[0].status.code),
                     [r.message.body.decode() for r in replies if r.HasField("message")]]

t = threading.Thread(target=receive)
t.start()
with open(fifo) as f:            # the receive's pop is reading the store, held there
    f.readline()
other = stub()                   # another client, its own connection
meta2 = [("x-mq-client-id", "other")]
route = answered(lambda: other.QueryRoute(
    svc.QueryRouteRequest(topic=pb.Resource(name="elsewhere")), metadata=meta2, timeout=5))
beat = answered(lambda: other.Heartbeat(
    svc.HeartbeatRequest(client_type=pb.ClientType.PRODUCER), metadata=meta2, timeout=5))
try:
    sent = send(other, "elsewhere", b"x", "other")
except grpc.RpcError as e:
    sent = e.code().name
held = "r" not in received       # all the while the receive waited for its read
os.kill(pid, signal.SIGUSR1)     # the read goes on
t.join(60)
out(route=route, beat=beat, sent=sent, held=held, received=received.get("r"))
''', args=[str(fifo), b.proc.pid])
    finally:
        b.stop(signal.SIGTERM)
    assert got == {"route": "OK", "beat": "OK", "sent": "OK", "held": True,
                   "received": ["OK", ["m1"]]}
