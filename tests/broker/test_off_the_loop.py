"""A store read that takes long (one that goes to S3 through the tier) holds the receive that
made it, never the broker: while a pop's read is held (tests/broker/held_read.py), another
client's QueryRoute, Heartbeat and Send are answered, and the held receive gets its message
once the read goes on. The same for a held-message journal append (tests/broker/
held_append.py): it holds the delay send that waits for it, nobody else."""

import os
import signal
import sys
from pathlib import Path

import pytest

from broker_support import Broker, run_client

pytestmark = pytest.mark.broker

HERE = Path(__file__).parent


@pytest.fixture
def fifo(tmp_path, monkeypatch):
    """The named pipe the test wrappers tell on (a held read, a held append, a give-back)."""
    path = tmp_path / "held.fifo"
    os.mkfifo(path)
    monkeypatch.setenv("STRATA_TEST_HELD_FIFO", str(path))
    return path


class HeldReadBroker(Broker):
    command = (sys.executable, str(HERE / "held_read.py"))


class HeldAppendBroker(Broker):
    command = (sys.executable, str(HERE / "held_append.py"))


RAW = '''
s = stub()

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

def others_answered():
    """Another client's route, heartbeat and send, each on its own connection's deadline."""
    other = stub()
    meta2 = [("x-mq-client-id", "other")]
    route = answered(lambda: other.QueryRoute(
        svc.QueryRouteRequest(topic=pb.Resource(name="elsewhere")), metadata=meta2, timeout=5))
    beat = answered(lambda: other.Heartbeat(
        svc.HeartbeatRequest(client_type=pb.ClientType.PRODUCER), metadata=meta2, timeout=5))
    try:
        sent = send(other, "elsewhere", b"x", "other")
    except grpc.RpcError as e:
        sent = e.code().name
    return {"route": route, "beat": beat, "sent": sent}

def receive(topic, poll_s, timeout):
    """status, [[body, delivery attempt], ...]; or the gRPC error's code name"""
    req = svc.ReceiveMessageRequest(group=pb.Resource(name="g"),
                                    message_queue=pb.MessageQueue(topic=pb.Resource(name=topic)),
                                    batch_size=8)
    req.invisible_duration.seconds = 60
    req.long_polling_timeout.seconds = poll_s
    try:
        replies = list(s.ReceiveMessage(req, metadata=[("x-mq-client-id", "consumer")],
                                        timeout=timeout))
    except grpc.RpcError as e:
        return [e.code().name, []]
    return [pb.Code.Name(replies[0].status.code),
            [[r.message.body.decode(), r.message.system_properties.delivery_attempt]
             for r in replies if r.HasField("message")]]
'''


def test_a_held_store_read_holds_no_other_clients_call(tmp_path, fifo):
    b = HeldReadBroker(tmp_path / "store").start()
    try:
        got = run_client(tmp_path, b.endpoint, RAW + '''
import os, signal, threading
fifo, pid = json.loads(sys.argv[2])

assert send(s, "held-read", b"m1", "consumer") == "OK"
received = {}
t = threading.Thread(target=lambda: received.update(r=receive("held-read", 5, 70)))
t.start()
with open(fifo) as f:            # the receive's pop is reading the store, held there
    f.readline()
others = others_answered()       # another client, its own connection
held = "r" not in received       # all the while the receive waited for its read
os.kill(pid, signal.SIGUSR1)     # the read goes on
t.join(60)
out(held=held, received=received.get("r"), **others)
''', args=[str(fifo), b.proc.pid])
    finally:
        b.stop(signal.SIGTERM)
    assert got == {"route": "OK", "beat": "OK", "sent": "OK", "held": True,
                   "received": ["OK", [["m1", 1]]]}


def test_a_receive_answers_within_the_clients_deadline_and_gives_a_late_pop_back(tmp_path):
    """The CI flake's shape: a store read slower than the client's whole receive deadline
    (there: numba compiling the read kernels of a fresh checkout, 7.8 s). The receive answers
    MESSAGE_NOT_FOUND before the deadline instead of DEADLINE_EXCEEDED, and what its pop
    found once the read went on is handed out again at once, not after its invisible time,
    as its first attempt (no client saw the late pop's)."""
    b = HeldReadBroker(tmp_path / "store").start()
    try:
        got = run_client(tmp_path, b.endpoint, RAW + '''
import os, signal
pid = json.loads(sys.argv[2])
sent = send(s, "held-read", b"m1", "consumer")
late = receive("held-read", poll_s=1, timeout=3)     # its read is held past its deadline
os.kill(pid, signal.SIGUSR1)                         # the read goes on
again = receive("held-read", poll_s=20, timeout=30)  # well inside the 60 s invisible time
out(sent=sent, late=late, again=again)
''', args=b.proc.pid)
    finally:
        b.stop(signal.SIGTERM)
    assert got["sent"] == "OK"
    assert got["late"] == ["MESSAGE_NOT_FOUND", []]
    assert got["again"] == ["OK", [["m1", 1]]]      # its first attempt: nobody saw the late one


def test_late_pops_past_the_max_attempts_never_dead_letter_a_message(tmp_path, fifo,
                                                                   monkeypatch):
    """A store slower than the clients' deadlines more times in a row than the group's max
    delivery attempts: each late pop is given back with the attempt count it had, so the
    message is then delivered as its first attempt, not sent to %DLQ%g unseen."""
    monkeypatch.setenv("STRATA_TEST_HOLD_POPS", "4")
    b = HeldReadBroker(tmp_path / "store", "--max-delivery-attempts", "2").start()
    try:
        got = run_client(tmp_path, b.endpoint, RAW + '''
import os, signal, threading
fifo, pid = json.loads(sys.argv[2])

def line():
    """The wrapper's next line (an open that meets the last writer closing reads nothing:
    open again, which waits for the next writer)."""
    while True:
        with open(fifo) as f:
            got = f.readline().strip()
        if got:
            return got

sent = send(s, "held-read", b"m1", "consumer")
rounds = []
for _ in range(4):               # 4 late pops, twice the max delivery attempts
    r = {}
    t = threading.Thread(target=lambda: r.update(r=receive("held-read", 1, 2.5)))
    t.start()
    held = line()                # the pop's store read is held ...
    t.join(30)                   # ... past the receive's deadline
    os.kill(pid, signal.SIGUSR1)
    rounds.append([held, r.get("r"), line()])
final = receive("held-read", poll_s=5, timeout=10)
out(sent=sent, rounds=rounds, final=final)
''', args=[str(fifo), b.proc.pid])
    finally:
        b.stop(signal.SIGTERM)
    assert got["sent"] == "OK"
    assert got["rounds"] == [["held", ["MESSAGE_NOT_FOUND", []], "given back 1"]] * 4, got
    assert got["final"] == ["OK", [["m1", 1]]]


def test_a_held_journal_append_holds_only_the_delay_send_waiting_for_it(tmp_path, fifo):
    """A delay message's HOLD record is appended off the event loop: while that append is
    held, another client's QueryRoute, Heartbeat and Send are answered; the delay send is
    answered once the append goes on."""
    b = HeldAppendBroker(tmp_path / "store").start()
    try:
        got = run_client(tmp_path, b.endpoint, RAW + '''
import os, signal, threading
fifo, pid = json.loads(sys.argv[2])

def send_delayed():
    m = pb.Message(topic=pb.Resource(name="delayed"), body=b"later")
    m.system_properties.message_id = "off-loop-delay"
    m.system_properties.message_type = pb.MessageType.DELAY
    m.system_properties.delivery_timestamp.seconds = int(time.time()) + 3600
    return answered(lambda: s.SendMessage(svc.SendMessageRequest(messages=[m]),
                                          metadata=[("x-mq-client-id", "producer")],
                                          timeout=60))

sent = {}
t = threading.Thread(target=lambda: sent.update(r=send_delayed()))
t.start()
with open(fifo) as f:            # its HOLD append is held
    f.readline()
others = others_answered()
held = "r" not in sent           # all the while the delay send waited for its append
os.kill(pid, signal.SIGUSR1)     # the append goes on
t.join(60)
out(held=held, delayed=sent.get("r"), **others)
''', args=[str(fifo), b.proc.pid])
    finally:
        b.stop(signal.SIGTERM)
    assert got == {"route": "OK", "beat": "OK", "sent": "OK", "held": True, "delayed": "OK"}
