"""`strata serve --acl FILE`: RocketMQ's plain_acl.yml accounts, AK/SK signatures checked in
constant time within a time window, rights per topic and group. A refused call gets
UNAUTHORIZED or FORBIDDEN, never data, and stores nothing."""

import re
import subprocess
import sys
import textwrap

import pytest

import strata
from broker_support import SMALL_STORE, run_client
from strata.broker.acl import AccessList, Kind, Perm, Refusal, load_acl, parse_acl, sign
from strata.broker.errors import InvalidAclError

pytestmark = pytest.mark.broker

ACL = """\
accounts:
  - accessKey: producer1
    secretKey: psecret12
    topicPerms: ["orders=PUB"]
  - accessKey: consumer1
    secretKey: csecret12
    topicPerms:
      - orders=SUB
    groupPerms:
      - g1=SUB
  - accessKey: operator
    secretKey: osecret12
    admin: true
"""

# Signing helpers for raw calls: the official client's own signature function.
SIGNED = '''
import datetime
from rocketmq.v5.util.signature import Signature
from rocketmq import Credentials
def cfg(ak, sk):
    return ClientConfiguration(ENDPOINT, Credentials(ak, sk), request_timeout=5)
def signed(ak, sk, shift_s=0, stamp=None):
    t = stamp or (datetime.datetime.now(datetime.timezone.utc)
                  + datetime.timedelta(seconds=shift_s)).strftime("%Y%m%dT%H%M%SZ")
    return [("x-mq-client-id", "raw-acl"), ("x-mq-date-time", t),
            ("authorization", "MQv2-HMAC-SHA1 Credential=%s, SignedHeaders=x-mq-date-time, "
                              "Signature=%s" % (ak, Signature.sign(sk, t)))]
s = stub()
def status(r):
    return [pb.Code.Name(r.status.code), r.status.message]
def send(md, topic="orders", body=b"x"):
    m = pb.Message(topic=pb.Resource(name=topic), body=body)
    m.system_properties.message_id = "raw-%d" % time.time_ns()
    m.system_properties.message_type = pb.MessageType.NORMAL
    return status(s.SendMessage(svc.SendMessageRequest(messages=[m]), metadata=md))
def receive(md, group="g1", topic="orders"):
    req = svc.ReceiveMessageRequest(group=pb.Resource(name=group),
                                    message_queue=pb.MessageQueue(topic=pb.Resource(name=topic)),
                                    batch_size=8)
    req.invisible_duration.seconds = 60
    req.long_polling_timeout.seconds = 1
    replies = list(s.ReceiveMessage(req, metadata=md, timeout=10))
    msgs = [r.message for r in replies if r.HasField("message")]
    return status(replies[0]) + [len(msgs)], msgs
def ack(md, handle, group="g1", topic="orders"):
    return status(s.AckMessage(svc.AckMessageRequest(
        group=pb.Resource(name=group), topic=pb.Resource(name=topic),
        entries=[svc.AckMessageEntry(message_id="m", receipt_handle=handle)]), metadata=md))
def change(md, handle, group="g1", topic="orders"):
    req = svc.ChangeInvisibleDurationRequest(group=pb.Resource(name=group),
                                             topic=pb.Resource(name=topic),
                                             receipt_handle=handle, message_id="m")
    req.invisible_duration.seconds = 30
    return status(s.ChangeInvisibleDuration(req, metadata=md))
def route(md, topic="orders"):
    return status(s.QueryRoute(svc.QueryRouteRequest(topic=pb.Resource(name=topic)),
                               metadata=md))
def telemetry(md):
    cmd = svc.TelemetryCommand(settings=pb.Settings(client_type=pb.ClientType.PRODUCER))
    return status(next(iter(s.Telemetry(iter([cmd]), metadata=md, timeout=10))))
P, C, OP = ("producer1", "psecret12"), ("consumer1", "csecret12"), ("operator", "osecret12")
'''


def signed_client(tmp_path, endpoint: str, code: str) -> dict:
    return run_client(tmp_path, endpoint, SIGNED + textwrap.dedent(code))


@pytest.fixture
def acl_file(tmp_path):
    p = tmp_path / "plain_acl.yml"
    p.write_text(ACL)
    return p


def _stored(directory) -> dict[str, int]:
    with strata.open(directory, readonly=True) as store:
        return {t: sum(store.max_offset(t, q) for q in range(store.queue_count(t)))
                for t in store.topics()}


def test_official_clients_with_the_right_keys_send_and_receive(broker_factory, acl_file,
                                                               tmp_path):
    b = broker_factory("--acl", str(acl_file))
    assert "acl " in b.log and "(3 accounts)" in b.log
    got = signed_client(tmp_path, b.endpoint, '''
    p = Producer(cfg(*P), ("orders",))
    p.startup()
    ids = [p.send(message("orders", "m%d" % i, tag="t", keys=["k%d" % i])).message_id
           for i in range(3)]
    p.shutdown()
    c = SimpleConsumer(cfg(*C), "g1", {"orders": FilterExpression("*")}, await_duration=2)
    c.startup()
    got = []
    for _ in range(5):
        for m in c.receive(32, 30):
            got.append(m.body.decode())
            c.ack(m)
        if len(got) >= 3:
            break
    c.shutdown()
    op = Producer(cfg(*OP), ("anything",))      # admin: every topic
    op.startup()
    op.send(message("anything", "by admin"))
    op.shutdown()
    try:                                         # right key, wrong secret
        bad = Producer(cfg("producer1", "not-the-secret"), ("orders",))
        bad.startup()
        bad.send(message("orders", "must not be stored"))
        refused = "sent"
    except Exception as exc:
        refused = str(exc)
    try:
        c2 = SimpleConsumer(cfg(*C), "g2", {"orders": FilterExpression("*")}, await_duration=1)
        c2.startup()
        c2.receive(1, 10)
        forbidden = "received"
    except Exception as exc:
        forbidden = type(exc).__name__ + " " + str(exc)
    out(ids=len(set(ids)), got=sorted(got), refused=refused, forbidden=forbidden)
    ''')
    assert got["ids"] == 3
    assert got["got"] == ["m0", "m1", "m2"]
    assert got["refused"] != "sent"
    assert got["forbidden"].startswith("ForbiddenException 40300")
    assert "no SUB right on group 'g2'" in got["forbidden"]
    assert b.stop() == 0
    assert _stored(b.directory) == {"orders": 3, "anything": 1}


def test_bad_signatures_are_unauthorized_and_get_nothing(broker_factory, acl_file, tmp_path):
    b = broker_factory("--acl", str(acl_file))
    got = signed_client(tmp_path, b.endpoint, '''
    good = send(signed(*P), body=b"the one message")
    later = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=60)
    swapped = signed(*P)                       # a signature of another date-time
    swapped[1] = ("x-mq-date-time", later.strftime("%Y%m%dT%H%M%SZ"))
    sends = dict(unsigned=send(meta()), unknown_ak=send(signed("nobody99", "psecret12")),
                 wrong_sk=send(signed("producer1", "psecret13")),
                 stale=send(signed(*P, shift_s=-600)), future=send(signed(*P, shift_s=600)),
                 swapped=send(swapped), garbage_date=send(signed(*P, stamp="yesterday")))
    receives = dict(unsigned=receive(meta())[0], wrong_sk=receive(signed("consumer1", "x" * 9))[0],
                    stale=receive(signed(*C, shift_s=-400))[0])
    others = dict(route=route(signed("nobody99", "x" * 9)),
                  telemetry=telemetry(signed(*P, shift_s=-3600)),
                  telemetry_ok=telemetry(signed(*P)))
    first, msgs = receive(signed(*C))          # the message is still there for the right key
    out(good=good, sends=sends, receives=receives, others=others, first=first,
        body=msgs[0].body.decode() if msgs else None)
    ''')
    assert got["good"][0] == "OK"
    s = got["sends"]
    for what, (code, text) in s.items():
        assert code == "UNAUTHORIZED", (what, text)
    assert "not signed" in s["unsigned"][1]
    assert "unknown access key 'nobody99'" in s["unknown_ak"][1]
    assert "signature mismatch" in s["wrong_sk"][1] and "signature mismatch" in s["swapped"][1]
    # stamps have whole seconds: the skew is 600 s give or take the second being stamped
    assert re.search(r"\b(599|600|601) s behind", s["stale"][1]), s["stale"][1]
    assert "within 300 s" in s["stale"][1]
    assert re.search(r"\b(599|600|601) s ahead of", s["future"][1]), s["future"][1]
    assert "'yesterday' is not YYYYMMDDTHHMMSSZ" in s["garbage_date"][1]
    for what, (code, text, n) in got["receives"].items():
        assert (code, n) == ("UNAUTHORIZED", 0), (what, text)
    assert got["others"]["route"][0] == "UNAUTHORIZED"
    assert got["others"]["telemetry"][0] == "UNAUTHORIZED"
    assert got["others"]["telemetry_ok"][0] == "OK"
    # the refused receives popped nothing: the message is still visible
    assert got["first"][0] == "OK" and got["body"] == "the one message"
    assert b.stop() == 0
    assert _stored(b.directory) == {"orders": 1}


def test_missing_rights_are_forbidden_and_change_nothing(broker_factory, acl_file, tmp_path):
    b = broker_factory("--acl", str(acl_file))
    got = signed_client(tmp_path, b.endpoint, '''
    assert send(signed(*P))[0] == "OK"
    refused = dict(
        pub_other_topic=send(signed(*P), topic="other"),
        pub_without_pub=send(signed(*C)),
        route_no_right=route(signed(*C), topic="other"),
        receive_without_sub=receive(signed(*P))[0],
        receive_other_group=receive(signed(*C), group="g2")[0])
    first, msgs = receive(signed(*C))
    handle = msgs[0].system_properties.receipt_handle
    refused.update(ack_without_sub=ack(signed(*P), handle),
                   change_without_sub=change(signed(*P), handle),
                   ack_other_group=ack(signed(*C), handle, group="g2"))
    allowed = dict(route=route(signed(*P)), ack=ack(signed(*C), handle),
                   again=receive(signed(*C))[0])
    out(refused=refused, allowed=allowed, first=first)
    ''')
    r = got["refused"]
    for what, st in r.items():
        assert st[0] == "FORBIDDEN", (what, st)
    assert "'producer1' has no PUB right on topic 'other'" in r["pub_other_topic"][1]
    assert "'consumer1' has no PUB right on topic 'orders'" in r["pub_without_pub"][1]
    assert "no PUB or SUB right on topic 'other'" in r["route_no_right"][1]
    assert "'producer1' has no SUB right on topic 'orders'" in r["receive_without_sub"][1]
    assert "no SUB right on group 'g2'" in r["receive_other_group"][1]
    assert r["receive_without_sub"][2] == 0 and r["receive_other_group"][2] == 0
    assert got["first"][:1] == ["OK"] and got["first"][2] == 1
    # the forbidden ack and change left the delivery as it was: the right key acks it
    assert got["allowed"]["route"][0] == "OK"
    assert got["allowed"]["ack"][0] == "OK"
    assert got["allowed"]["again"][0] == "MESSAGE_NOT_FOUND"
    assert b.stop() == 0
    assert _stored(b.directory) == {"orders": 1}


BAD_FILES = {
    "not yaml": ("accounts: [\n", "not valid YAML"),
    "no accounts": ("accounts: []\n", "'accounts:' must be a non-empty list"),
    "bad perm": ("accounts:\n  - accessKey: abcdefg\n    secretKey: abcdefgh\n"
                 "    topicPerms: [orders=READ]\n",
                 "topicPerms entry 'orders=READ': permission 'READ' is not one of DENY"),
    "short secret": ("accounts:\n  - accessKey: abcdefg\n    secretKey: abc\n",
                     "account 1: secretKey must be a string of at least 6 characters"),
    "typo": ("accounts:\n  - accessKey: abcdefg\n    secretKey: abcdefgh\n"
             "    topicPerm: [orders=PUB]\n", "unknown key 'topicPerm'"),
    "whitelist": ("accounts:\n  - accessKey: abcdefg\n    secretKey: abcdefgh\n"
                  "    whiteRemoteAddress: 192.168.0.*\n", "whiteRemoteAddress is not supported"),
    "twice": ("accounts:\n  - {accessKey: abcdefg, secretKey: abcdefgh}\n"
              "  - {accessKey: abcdefg, secretKey: abcdefgi}\n", "listed twice"),
    "bad topic": ("accounts:\n  - accessKey: abcdefg\n    secretKey: abcdefgh\n"
                  "    topicPerms: ['../x=PUB']\n", "'../x'"),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_a_bad_acl_file_stops_the_start_and_touches_nothing(tmp_path, case):
    text, expected = BAD_FILES[case]
    acl = tmp_path / "acl.yml"
    acl.write_text(text)
    store = tmp_path / "store"
    cmd = [sys.executable, "-m", "strata.cli.main", "serve", str(store), "--listen",
           "127.0.0.1:0", "--acl", str(acl)]
    for opt in SMALL_STORE:
        cmd += ["--store-option", opt]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    assert "InvalidAclError" in p.stderr and str(acl) in p.stderr, p.stderr
    assert expected in p.stderr, p.stderr
    assert "listening on" not in p.stderr
    assert not store.exists()


def test_a_missing_acl_file_is_named(tmp_path):
    p = subprocess.run([sys.executable, "-m", "strata.cli.main", "serve", str(tmp_path / "s"),
                        "--listen", "127.0.0.1:0", "--acl", str(tmp_path / "nope.yml")],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    assert f"ACL file {tmp_path / 'nope.yml'}: cannot read it" in p.stderr
    assert not (tmp_path / "s").exists()


# ---------------------------------------------------------------------- the rules, in process


def test_plain_acl_defaults_admin_and_deny(tmp_path):
    f = tmp_path / "a.yml"
    f.write_text(textwrap.dedent("""\
        globalWhiteRemoteAddresses: []
        accounts:
          - accessKey: wide0001
            secretKey: 0123456
            defaultTopicPerm: PUB|SUB
            defaultGroupPerm: SUB
            topicPerms: [secret=DENY, audit=SUB]
          - accessKey: root0001
            secretKey: rootsecret
            admin: true
            topicPerms: [secret=DENY]
        """))
    acl = load_acl(f)
    wide, root = acl.accounts["wide0001"], acl.accounts["root0001"]
    assert wide.secret_key == "0123456"           # not read as the number 83
    assert wide.owns(Kind.TOPIC, "anything") == Perm.PUB | Perm.SUB
    assert wide.owns(Kind.TOPIC, "secret") == Perm.NONE
    assert wide.owns(Kind.TOPIC, "audit") == Perm.SUB
    assert wide.owns(Kind.GROUP, "any-group") == Perm.SUB
    assert root.owns(Kind.TOPIC, "secret") == Perm.PUB | Perm.SUB   # admin: everything
    acl.authorize(wide, [(Kind.TOPIC, "audit", Perm.ANY), (Kind.GROUP, "g", Perm.SUB)])
    with pytest.raises(Refusal, match="no PUB right on topic 'audit'") as e:
        acl.authorize(wide, [(Kind.TOPIC, "audit", Perm.PUB)])
    assert e.value.forbidden
    with pytest.raises(Refusal, match="no PUB or SUB right on topic 'secret'"):
        acl.authorize(wide, [(Kind.TOPIC, "secret", Perm.ANY)])
    nobody = parse_acl({"accounts": [{"accessKey": "plain001", "secretKey": "plain001"}]})[0]
    assert nobody.owns(Kind.TOPIC, "t") == Perm.NONE    # the defaults are DENY
    with pytest.raises(InvalidAclError, match="unknown key 'acounts'"):
        parse_acl({"acounts": []})


def test_the_time_window_bounds_replay(tmp_path):
    acl = AccessList(parse_acl({"accounts": [{"accessKey": "k0000001",
                                              "secretKey": "s0000001"}]}), window_s=120)
    stamp = "20260101T120000Z"
    t = 1767268800                               # 2026-01-01 12:00:00 UTC
    md = [("x-mq-date-time", stamp), ("authorization", "MQv2-HMAC-SHA1 Credential=k0000001, "
          f"SignedHeaders=x-mq-date-time, Signature={sign('s0000001', stamp)}")]
    for now in (t - 120, t, t + 120):
        assert acl.authenticate(md, now_s=now).access_key == "k0000001"
    for now in (t - 121, t + 121, t + 86400 * 365):
        with pytest.raises(Refusal, match="within 120 s") as e:
            acl.authenticate(md, now_s=now)
        assert not e.value.forbidden
    upper = [(k, v.replace(sign("s0000001", stamp), sign("s0000001", stamp).upper()))
             for k, v in md]
    assert acl.authenticate(upper, now_s=t).access_key == "k0000001"
    for header, why in [("Basic azpz", "scheme 'Basic'"),
                        ("MQv2-HMAC-SHA1 Credential=k0000001, SignedHeaders=x-mq-date-time",
                         "no Signature"),
                        ("MQv2-HMAC-SHA1 Credential=k0000001, SignedHeaders=host, "
                         f"Signature={sign('s0000001', stamp)}", "does not cover x-mq-date")]:
        with pytest.raises(Refusal, match=why):
            acl.authenticate([md[0], ("authorization", header)], now_s=t)
    with pytest.raises(Refusal, match="no x-mq-date-time header"):
        acl.authenticate(md[1:], now_s=t)


def test_a_client_on_local_time_needs_utc_or_a_wider_window(broker_factory, acl_file,
                                                            tmp_path, monkeypatch):
    """The official Python client stamps x-mq-date-time with its local time and a Z: nine
    hours off under TZ=JST-9. The default window refuses it; --acl-time-window 50400 lets
    it in and still refuses a signature 15 hours old."""
    monkeypatch.setenv("TZ", "JST-9")
    code = '''
    try:
        p = Producer(cfg(*P), ("orders",))
        p.startup()
        p.send(message("orders", "from Tokyo"))
        p.shutdown()
        sent = "OK"
    except Exception as exc:
        sent = str(exc)
    out(sent=sent, old=send(signed(*P, shift_s=-15 * 3600)))
    '''
    strict = broker_factory("--acl", str(acl_file))
    got = signed_client(tmp_path, strict.endpoint, code)
    assert got["sent"] != "OK"
    assert strict.stop() == 0
    wide = broker_factory("--acl", str(acl_file), "--acl-time-window", "50400",
                          directory=tmp_path / "wide")
    got = signed_client(tmp_path, wide.endpoint, code)
    assert got["sent"] == "OK"
    assert got["old"][0] == "UNAUTHORIZED" and "within 50400 s" in got["old"][1]
    assert wide.stop() == 0
    assert _stored(strict.directory) == {}
    assert _stored(wide.directory) == {"orders": 1}


def test_every_rpc_of_the_protocol_has_a_rule():
    from strata.broker.rocketmq.authorize import RULES
    from strata.broker.rocketmq.protocol import svc
    rpcs = {m.name for m in svc.DESCRIPTOR.services_by_name["MessagingService"].methods}
    assert set(RULES) == rpcs
