"""Bad input gets the protocol's status code and a sentence; nothing stored changes."""

import pytest

import strata
from broker_support import run_client

pytestmark = pytest.mark.broker

RAW_CALLS = '''
    s = stub()
    def send(topic, body=b"x", **sp):
        m = pb.Message(topic=pb.Resource(name=topic), body=body)
        m.system_properties.message_id = "raw-1"
        m.system_properties.message_type = pb.MessageType.NORMAL
        for k, v in sp.items():
            setattr(m.system_properties, k, v)
        r = s.SendMessage(svc.SendMessageRequest(messages=[m]), metadata=meta())
        return [pb.Code.Name(r.status.code), r.status.message]
    def route(topic):
        r = s.QueryRoute(svc.QueryRouteRequest(topic=pb.Resource(name=topic)), metadata=meta())
        return [pb.Code.Name(r.status.code), r.status.message]
    def receive(group, topic):
        req = svc.ReceiveMessageRequest(group=pb.Resource(name=group),
                                        message_queue=pb.MessageQueue(topic=pb.Resource(name=topic)),
                                        batch_size=1)
        req.invisible_duration.seconds = 10
        req.long_polling_timeout.seconds = 1
        first = next(iter(s.ReceiveMessage(req, metadata=meta(), timeout=10)))
        return [pb.Code.Name(first.status.code), first.status.message]
    def ack(group, topic, handle):
        r = s.AckMessage(svc.AckMessageRequest(group=pb.Resource(name=group),
                                               topic=pb.Resource(name=topic),
                                               entries=[svc.AckMessageEntry(message_id="m",
                                                                            receipt_handle=handle)]),
                         metadata=meta())
        return [pb.Code.Name(r.status.code), r.status.message]
'''


def test_bad_names_and_bodies_get_status_codes_and_store_nothing(broker_factory, tmp_path):
    b = broker_factory()
    got = run_client(tmp_path, b.endpoint, RAW_CALLS + '''
    big = b"y" * (4 * 1024 * 1024 + 1)
    good = send("fine")
    out(path=send("../x"), long=send("t" * 128), empty=send("fine", b""), big=send("fine", big),
        route=route("a/b"), group=receive("../g", "fine"), good=good,
        forged=ack("g", "fine", "AAAA" * 20), junk=ack("g", "fine", "not base64 !"))
    ''')
    assert got["good"][0] == "OK"
    assert got["path"][0] == "ILLEGAL_TOPIC" and "'../x'" in got["path"][1]
    assert got["long"][0] == "ILLEGAL_TOPIC" and "length 128" in got["long"][1]
    assert got["empty"][0] == "MESSAGE_BODY_EMPTY"
    assert got["big"][0] == "MESSAGE_BODY_TOO_LARGE" and "4194305 bytes" in got["big"][1]
    assert got["route"][0] == "ILLEGAL_TOPIC"
    assert got["group"][0] == "ILLEGAL_CONSUMER_GROUP" and "'../g'" in got["group"][1]
    assert got["forged"][0] == "INVALID_RECEIPT_HANDLE" and "signature" in got["forged"][1]
    assert got["junk"][0] == "INVALID_RECEIPT_HANDLE"
    assert b.stop() == 0
    with strata.open(b.directory, readonly=True) as store:
        assert store.topics() == ["fine"]
        assert sum(store.max_offset("fine", q) for q in range(store.queue_count("fine"))) == 1
    assert not (tmp_path / "x").exists() and not (tmp_path / "store" / "x").exists()


def test_unknown_topic_without_auto_create(broker_factory, tmp_path):
    b = broker_factory("--no-auto-create")
    got = run_client(tmp_path, b.endpoint, RAW_CALLS + '''
    out(send=send("nosuch"), route=route("nosuch"), receive=receive("g", "nosuch"))
    ''')
    for what in ("send", "route", "receive"):
        assert got[what][0] == "TOPIC_NOT_FOUND", what
        assert "'nosuch' does not exist" in got[what][1]
    assert b.stop() == 0
    with strata.open(b.directory, readonly=True) as store:
        assert store.topics() == []


def test_a_tampered_receipt_handle_is_refused_and_the_message_stays_in_flight(
        broker, tmp_path):
    got = run_client(tmp_path, broker.endpoint, RAW_CALLS + '''
    send("tamper")
    c = consumer("g", "tamper", await_s=1)
    m = c.receive(1, 30)[0]
    import base64
    raw = bytearray(base64.urlsafe_b64decode(m.receipt_handle + "=" * (-len(m.receipt_handle) % 4)))
    raw[9] ^= 1                                   # another queue offset, same signature
    bad = base64.urlsafe_b64encode(bytes(raw)).rstrip(b"=").decode()
    tampered = ack("g", "tamper", bad)
    other_group = ack("h", "tamper", m.receipt_handle)
    again = c.receive(1, 30)                      # still invisible: nothing
    c.ack(m)
    c.shutdown()
    out(tampered=tampered, other_group=other_group, again=len(again))
    ''')
    assert got["tampered"][0] == "INVALID_RECEIPT_HANDLE" and "signature" in got["tampered"][1]
    assert got["other_group"][0] == "INVALID_RECEIPT_HANDLE"
    assert "group 'g'" in got["other_group"][1]
    assert got["again"] == 0


def test_a_refused_send_creates_no_topic(broker_factory, tmp_path):
    """Issue 22.6: with 64 KiB segments, a body no segment can hold, and a body at the limit
    whose long topic makes its record too large, are both refused before their topics exist."""
    b = broker_factory("--store-option", "segment_size=65536")
    got = run_client(tmp_path, b.endpoint, RAW_CALLS + '''
    out(big=send("big", b"y" * 100_000), long=send("L" * 120, b"y" * 65400), good=send("fine"))
    ''')
    assert got["big"][0] == "MESSAGE_BODY_TOO_LARGE", got["big"]
    assert got["long"][0] == "MESSAGE_BODY_TOO_LARGE", got["long"]
    assert got["good"][0] == "OK"
    assert b.stop() == 0
    with strata.open(b.directory, readonly=True) as store:
        assert store.topics() == ["fine"]
