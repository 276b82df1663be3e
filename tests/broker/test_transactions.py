"""Transactional messages through the official client against `strata serve`: half messages
invisible until committed, dropped on rollback, checked back over Telemetry when their
producer goes silent — across a clean restart and a SIGKILL."""

import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from broker_support import PRELUDE, run_client

pytestmark = pytest.mark.broker

TXN_PRELUDE = '''
from rocketmq import TransactionResolution
from rocketmq.v5.producer.producer import TransactionChecker

class Checker(TransactionChecker):
    """Answers checks with `answer`, writing each checked body to `log` (if any)."""
    def __init__(self, answer=TransactionResolution.COMMIT, log=None):
        self.answer, self.log, self.checked = answer, log, []
    def check(self, message):
        body = message.body.decode()
        self.checked.append(body)
        if self.log:
            with open(self.log, "a") as f:
                f.write(body + "\\n")
        return self.answer

def txn_producer(topic, checker):
    p = Producer(config(), (topic,), checker)
    p.startup()
    return p

def end(topic, txid, mid, resolution):
    r = stub().EndTransaction(svc.EndTransactionRequest(
        topic=pb.Resource(name=topic), transaction_id=txid, message_id=mid,
        resolution=resolution, source=pb.TransactionSource.SOURCE_CLIENT), metadata=meta())
    return [pb.Code.Name(r.status.code), r.status.message]

def bodies(group, topic, polls=2):
    c = consumer(group, topic, await_s=1)
    seen, empty = [], 0
    while empty < polls:
        ms = c.receive(32, 30)
        empty = 0 if ms else empty + 1
        for m in ms:
            seen.append([m.body.decode(), m.message_type])
            c.ack(m)
    c.shutdown()
    return seen
'''


def client(tmp_path, endpoint, code, **kw):
    return run_client(tmp_path, endpoint, TXN_PRELUDE + textwrap.dedent(code), **kw)


def test_half_message_is_invisible_until_commit_and_delivered_once(broker, tmp_path):
    got = client(tmp_path, broker.endpoint, '''
        p = txn_producer("pay", Checker())
        t = p.begin_transaction()
        r = p.send(message("pay", "paid", tag="t", props={"order": "7"}), t)
        before = bodies("g", "pay")
        t.commit()
        after = bodies("g", "pay")
        again = end("pay", r.transaction_id, r.message_id, TransactionResolution.COMMIT)
        p.shutdown()
        out(before=before, after=after, again=again, txid=r.transaction_id)
    ''')
    assert got["before"] == []
    assert got["after"] == [["paid", 4]]                       # TRANSACTION, exactly once
    assert got["again"][0] == "INVALID_TRANSACTION_ID"          # resolved already
    assert "no open transaction" in got["again"][1]


def test_rollback_drops_the_half_message(broker, tmp_path):
    got = client(tmp_path, broker.endpoint, '''
        p = txn_producer("pay", Checker())
        t = p.begin_transaction()
        p.send(message("pay", "cancelled"), t)
        t.rollback()
        t = p.begin_transaction()
        p.send(message("pay", "kept"), t)
        t.commit()
        seen = bodies("g", "pay")
        p.shutdown()
        out(seen=seen)
    ''')
    assert got["seen"] == [["kept", 4]]
    assert broker.stop() == 0 and "0 messages still held" in broker.log


def test_end_transaction_with_a_forged_or_unknown_id_is_refused(broker, tmp_path):
    got = client(tmp_path, broker.endpoint, '''
        p = txn_producer("pay", Checker())
        t = p.begin_transaction()
        r = p.send(message("pay", "held"), t)
        out(forged=end("pay", "not-an-id", r.message_id, TransactionResolution.COMMIT),
            unknown=end("pay", "ab" * 16, r.message_id, TransactionResolution.COMMIT),
            topic=end("other", r.transaction_id, r.message_id, TransactionResolution.COMMIT),
            mid=end("pay", r.transaction_id, "someone-else", TransactionResolution.COMMIT),
            seen=bodies("g", "pay"),
            ok=end("pay", r.transaction_id, r.message_id, TransactionResolution.ROLLBACK))
        p.shutdown()
    ''')
    assert got["forged"][0] == "INVALID_TRANSACTION_ID" and "32 hex digits" in got["forged"][1]
    assert got["unknown"][0] == "INVALID_TRANSACTION_ID"
    assert "no open transaction" in got["unknown"][1]
    assert got["topic"][0] == "INVALID_TRANSACTION_ID" and "'pay'" in got["topic"][1]
    assert got["mid"][0] == "INVALID_TRANSACTION_ID" and "someone-else" in got["mid"][1]
    assert got["seen"] == []              # the refused calls committed nothing
    assert got["ok"][0] == "OK"


def test_silent_producer_is_checked_back_through_telemetry_and_the_checker_commits(
        broker_factory, tmp_path):
    b = broker_factory("--transaction-check-interval", "1")
    # a producer sends a half message and is killed before it resolves it
    home = tmp_path / "silent-home"
    home.mkdir()
    done = tmp_path / "sent.txt"
    silent = subprocess.Popen([sys.executable, "-c", PRELUDE + TXN_PRELUDE + f'''
p = txn_producer("ship", Checker())
t = p.begin_transaction()
p.send(message("ship", "orphan"), t)
open({str(done)!r}, "w").write("sent")
time.sleep(120)
''', b.endpoint], env={**__import__("os").environ, "HOME": str(home)},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not done.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert done.exists()
    finally:
        silent.kill()
        silent.wait()
    # another producer of the topic is up: its checker is asked and commits
    got = client(tmp_path, b.endpoint, '''
        p = txn_producer("ship", Checker(TransactionResolution.COMMIT))
        c = consumer("g", "ship", await_s=1)
        seen = []
        t0 = time.time()
        while not seen and time.time() - t0 < 60:
            for m in c.receive(32, 30):
                seen.append(m.body.decode())
                c.ack(m)
        c.shutdown()
        checked = p._Producer__checker.checked
        p.shutdown()
        out(seen=seen, checked=checked)
    ''')
    assert got["checked"][:1] == ["orphan"]
    assert got["seen"] == ["orphan"]
    assert b.stop() == 0 and "0 messages still held" in b.log


def test_unresolved_half_message_is_dropped_after_the_last_check(broker_factory, tmp_path):
    b = broker_factory("--transaction-check-interval", "0.5", "--transaction-max-checks", "2")
    got = client(tmp_path, b.endpoint, '''
        # a checker that never knows (answers UNSPECIFIED): the broker asks again
        checker = Checker(TransactionResolution.TRANSACTION_RESOLUTION_UNSPECIFIED)
        p = txn_producer("undecided", checker)
        t = p.begin_transaction()
        r = p.send(message("undecided", "limbo"), t)
        t0 = time.time()
        while time.time() - t0 < 60:
            code = end("undecided", r.transaction_id, r.message_id,
                       TransactionResolution.TRANSACTION_RESOLUTION_UNSPECIFIED)
            if code[0] != "OK":
                break
            time.sleep(0.2)
        late = end("undecided", r.transaction_id, r.message_id, TransactionResolution.COMMIT)
        t0 = time.time()
        while len(checker.checked) < 2 and time.time() - t0 < 10:   # the checker's thread
            time.sleep(0.05)
        seen = bodies("g", "undecided")
        checked = checker.checked
        p.shutdown()
        out(late=late, seen=seen, checked=checked, txid=r.transaction_id)
    ''')
    assert got["late"][0] == "INVALID_TRANSACTION_ID"
    assert got["checked"] == ["limbo", "limbo"]                 # two checks, then dropped
    assert got["seen"] == []
    assert b.stop() == 0
    assert re.search(rf"transaction {got['txid']} .*unresolved after 2 checks; its half "
                     "message is dropped", b.log)


@pytest.mark.parametrize("flush", ["async", "sync"])
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["restart", "sigkill"])
def test_half_messages_and_resolutions_survive_a_restart(broker_factory, tmp_path, sig, flush):
    b = broker_factory("--flush", flush)
    first = client(tmp_path, b.endpoint, '''
        p = txn_producer("keep", Checker())
        sent = []
        for i in range(4):
            t = p.begin_transaction()
            r = p.send(message("keep", f"h{i}"), t)
            sent.append([r.transaction_id, r.message_id])
            if i == 0:
                t.commit()
            if i == 1:
                t.rollback()
        p.shutdown()
        out(sent=sent)
    ''')["sent"]
    b.stop(sig)
    b2 = broker_factory("--flush", flush)
    assert re.search(r"\b2 messages held\)", b2.log)
    got = client(tmp_path, b2.endpoint, '''
        sent = json.loads(sys.argv[2])
        res = [end("keep", txid, mid, r) for (txid, mid), r in
               zip(sent, [TransactionResolution.COMMIT, TransactionResolution.COMMIT,
                          TransactionResolution.COMMIT, TransactionResolution.ROLLBACK])]
        out(res=res, seen=bodies("g", "keep"))
    ''', args=first)
    codes = [r[0] for r in got["res"]]
    # h0 was committed and h1 rolled back before the stop; h2 and h3 were still open
    assert codes == ["INVALID_TRANSACTION_ID", "INVALID_TRANSACTION_ID", "OK", "OK"]
    assert sorted(s[0] for s in got["seen"]) == ["h0", "h2"]
    assert b2.stop() == 0 and "0 messages still held" in b2.log
