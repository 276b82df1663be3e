"""A receive finds every message acknowledged before it began, even while the store's dispatch
(commit log -> consume queue) has not reached it yet. CI once lost a session's work to this:
under load a send was answered OK and a later receive answered MESSAGE_NOT_FOUND, because the
message was not in its consume queue yet and the receive's wake-up ("a send happened") had come
before the receive started. Here dispatch is held back on purpose (tests/broker/held_dispatch.py)
until the receive has looked once and found nothing, so that moment comes on every run."""

import signal
import sys
from pathlib import Path

import pytest

from broker_support import Broker, run_client

pytestmark = pytest.mark.broker

HERE = Path(__file__).parent


class HeldDispatchBroker(Broker):
    command = (sys.executable, str(HERE / "held_dispatch.py"))


@pytest.fixture
def held_broker(tmp_path):
    b = HeldDispatchBroker(tmp_path / "store").start()
    yield b
    b.stop(signal.SIGTERM)


RAW = '''
s = stub()
def send(body, topic="orders"):
    m = pb.Message(topic=pb.Resource(name=topic), body=body)
    m.system_properties.message_id = "held-%d" % time.time_ns()
    m.system_properties.message_type = pb.MessageType.NORMAL
    return pb.Code.Name(s.SendMessage(svc.SendMessageRequest(messages=[m]),
                                      metadata=meta(), timeout=30).status.code)
def receive(poll_s, group="g1", topic="orders"):
    req = svc.ReceiveMessageRequest(group=pb.Resource(name=group),
                                    message_queue=pb.MessageQueue(topic=pb.Resource(name=topic)),
                                    batch_size=8)
    req.invisible_duration.seconds = 60
    req.long_polling_timeout.SetInParent()
    req.long_polling_timeout.seconds = poll_s
    replies = list(s.ReceiveMessage(req, metadata=meta(), timeout=30))
    return (pb.Code.Name(replies[0].status.code),
            [r.message.body.decode() for r in replies if r.HasField("message")])
'''


def test_a_receive_without_long_polling_finds_a_message_acknowledged_before_it(held_broker,
                                                                                tmp_path):
    got = run_client(tmp_path, held_broker.endpoint, RAW + '''
sent = send(b"acknowledged first")
first = receive(0)              # dispatch is held until this receive has looked once
again = receive(0)              # the message is in flight now: nothing more to find
out(sent=sent, first=first, again=again)
''')
    assert got["sent"] == "OK"
    assert got["first"] == ["OK", ["acknowledged first"]]
    assert got["again"] == ["MESSAGE_NOT_FOUND", []]


def test_a_long_poll_finds_every_message_acknowledged_before_it(held_broker, tmp_path):
    got = run_client(tmp_path, held_broker.endpoint, RAW + '''
sent = [send(("m%d" % i).encode()) for i in range(5)]
status, bodies = receive(1)     # a long poll of 1 s, as test_acl's that failed in CI
out(sent=sent, status=status, bodies=bodies)
''')
    assert got["sent"] == ["OK"] * 5
    assert got["status"] == "OK"
    assert sorted(got["bodies"]) == [f"m{i}" for i in range(5)]
