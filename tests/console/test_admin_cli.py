"""Admin commands on a store `strata serve` holds go through the broker's admin API
(strata.broker.admin): the broker's own clients see the result. Without a broker they open the
store as before; a stale endpoint file is ignored; a store held by a process that serves no
admin API is a clear error; under --acl only an administrator account may act."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import textwrap
import urllib.error
import urllib.request
from pathlib import Path

import strata
from strata.broker.admin import ADMIN_FILE
from strata.broker.group_state import ConsumerGroups
from strata.store.message_store import MessageStore

from broker_support import run_client
from console_support import Served, SMALL_STORE, small_config


def strata_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "strata.cli.main", *map(str, args)],
                          capture_output=True, text=True, timeout=120,
                          env=None if env is None else {**os.environ, **env})


def serve(d: Path, *extra: str) -> Served:
    opts = [a for o in SMALL_STORE for a in ("--store-option", o)]
    return Served("serve", str(d), "--listen", "127.0.0.1:0", "--kafka", "127.0.0.1:0",
                  "--http", "127.0.0.1:0", "--exit-with-parent", *opts, *extra)


def started(b: Served) -> Served:
    """The gRPC endpoint too (the start line names the Kafka listener after it)."""
    b.endpoint = re.search(r"listening on ([\d.]+:\d+)[, ]", b.log).group(1)
    return b


def kafka_bootstrap(b: Served) -> str:
    return re.search(r"([\d.]+:\d+) \(kafka\)", b.log).group(1)


def kafka_client(code: str, bootstrap: str) -> dict:
    script = "import json, sys\nfrom confluent_kafka import Consumer, Producer, TopicPartition\n" \
             "BOOT = sys.argv[1]\n" + textwrap.dedent(code)
    p = subprocess.run([sys.executable, "-c", script, bootstrap], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


CONSUME = """
c = Consumer({"bootstrap.servers": BOOT, "group.id": "kgroup", "enable.auto.commit": False,
              "auto.offset.reset": "earliest", "broker.address.family": "v4"})
c.subscribe(["events"])
got = []
while len(got) < int(sys.argv[2] if len(sys.argv) > 2 else WANT):
    m = c.poll(30)
    assert m is not None, "no message within 30 s"
    if m.error():
        raise SystemExit(str(m.error()))
    got.append([m.partition(), m.offset()])
c.commit(asynchronous=False)
c.close()
print(json.dumps({"got": got}))
"""


def test_topics_and_reset_through_the_running_broker(tmp_path: Path, served) -> None:
    d = tmp_path / "store"
    with strata.open(d, small_config()) as s:
        s.create_topic("seed", queues=1)
    b = started(served(serve(d, "--no-auto-create")))
    admin = d / ADMIN_FILE
    doc = json.loads(admin.read_text())
    assert doc["pid"] == b.proc.pid and doc["url"].startswith("http://127.0.0.1:")
    assert stat.S_IMODE(admin.stat().st_mode) == 0o600

    # the API itself: a wrong token, an unknown operation, a body that is not JSON, bad input
    def post(path: str, body: bytes, token: str = doc["token"]) -> tuple[int, dict]:
        req = urllib.request.Request(doc["url"] + path, data=body, method="POST",
                                     headers={"X-Strata-Admin-Token": token})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())
    assert post("/topics/create", b'{"topic": "x"}', token="0" * 64)[0] == 403
    assert post("/nothing", b"{}")[0] == 404
    status, got = post("/topics/create", b"{not json")
    assert status == 400 and "not JSON" in got["error"]
    status, got = post("/topics/create", b'{"topic": "bad name"}')
    assert status == 400 and "InvalidTopicError" in got["error"]
    status, got = post("/groups/reset", b'{"group": "g", "topic": "seed"}')
    assert status == 400 and "offset or a time" in got["error"]

    made = strata_cli("topics", "create", d, "payments", "--queues", "2")
    assert made.returncode == 0, made.stderr
    assert "created topic payments (2 queues" in made.stdout and "running broker" in made.stdout
    grown = strata_cli("topics", "add-queues", d, "payments", "--queues", "3")
    assert grown.returncode == 0 and "has 3 queues" in grown.stdout, grown.stderr
    # the broker refuses sends to unknown topics (--no-auto-create): the client's sends
    # succeeding proves the broker itself holds the topic the CLI created
    run_client(tmp_path, b.endpoint, """
        p = producer("payments")
        for i in range(9):
            p.send(message("payments", f"pay-{i}"))
        c = consumer("billing", "payments")
        acked = 0
        while acked < 9:
            for m in c.receive(32, 30):
                c.ack(m)
                acked += 1
        c.shutdown()
        out(ok=True)
    """)
    status, lag = b.get("/api/groups")
    assert status == 200 and [g["lag"] for g in lag["groups"]] == [0]

    reset = strata_cli("groups", "reset", d, "billing", "payments", "--offset", "1")
    assert reset.returncode == 0, reset.stderr
    assert "billing (rocketmq) on payments starts over at 0: 1, 1: 1, 2: 1" in reset.stdout
    again = run_client(tmp_path, b.endpoint, """
        c = consumer("billing", "payments")
        seen = set()
        while len(seen) < 6:
            for m in c.receive(32, 30):
                seen.add(m.body.decode())
                c.ack(m)
        c.shutdown()
        out(seen=sorted(seen))
    """)
    # three queues of three messages each (round robin): offsets 1 and 2 of each come back
    assert len(again["seen"]) == 6 and set(again["seen"]) < {f"pay-{i}" for i in range(9)}

    gone = strata_cli("topics", "delete", d, "payments", "--yes")
    assert gone.returncode == 0 and "deleted topic payments" in gone.stdout, gone.stderr
    bad = strata_cli("topics", "add-queues", d, "payments", "--queues", "4")
    assert bad.returncode == 1 and "no topic 'payments'" in bad.stderr
    assert "Traceback" not in bad.stderr

    assert b.stop() == 0
    assert not admin.exists()                      # removed on a clean exit
    for what in ("/topics/create", "/topics/queues", "/groups/reset", "/topics/delete"):
        assert f"admin {what}:" in b.log
    with MessageStore(d, readonly=True) as s:
        assert s.queue_count("payments") == 0
    g = ConsumerGroups(d / "broker")               # the reset was journaled
    try:
        assert g.queue("billing", "payments", 0) is not None
    finally:
        g.close()


def test_kafka_group_reset_through_the_broker(tmp_path: Path, served) -> None:
    d = tmp_path / "store"
    with strata.open(d, small_config()) as s:
        s.create_topic("events", queues=2)
        s.put_batch([strata.Message("events", f"e{i}".encode(), queue_id=i % 2)
                     for i in range(10)])
    b = served(serve(d))
    boot = kafka_bootstrap(b)
    first = kafka_client("WANT = 10\n" + CONSUME, boot)
    assert sorted(first["got"]) == sorted([p, o] for p in (0, 1) for o in range(5))

    r = strata_cli("groups", "reset", d, "kgroup", "events", "--offset", "3")
    assert r.returncode == 0, r.stderr
    assert "kgroup (kafka) on events starts over at 0: 3, 1: 3" in r.stdout
    again = kafka_client("WANT = 4\n" + CONSUME, boot)
    assert sorted(again["got"]) == [[0, 3], [0, 4], [1, 3], [1, 4]]

    listed = strata_cli("groups", d, "--json")
    assert listed.returncode == 0, listed.stderr
    kg = [g for g in json.loads(listed.stdout)["groups"] if g["group"] == "kgroup"]
    assert [(g["protocol"], g["topic"], g["lag"]) for g in kg] == [("kafka", "events", 0)]


def test_without_a_broker_stale_file_and_foreign_writer(tmp_path: Path) -> None:
    d = tmp_path / "store"
    with strata.open(d, small_config()) as s:
        s.create_topic("seed", queues=1)
    # a broker that died without cleaning up: its file names a dead pid
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    (d / ADMIN_FILE).write_text(json.dumps({"pid": int(dead), "url": "http://127.0.0.1:9",
                                            "token": "x"}))
    made = strata_cli("topics", "create", d, "alone", "--queues", "2")
    assert made.returncode == 0 and "created topic alone" in made.stdout, made.stderr
    assert "running broker" not in made.stdout
    with MessageStore(d, readonly=True) as s:
        assert s.queue_count("alone") == 2
    # a writer that is not a broker (this process): a clear error, the store unchanged
    with strata.open(d, small_config()) as s:
        held = strata_cli("topics", "create", d, "other")
        assert held.returncode == 1 and "serves no admin API" in held.stderr
        assert "Traceback" not in held.stderr
        assert s.queue_count("other") == 0


ACL = """\
accounts:
  - accessKey: viewer1
    secretKey: vsecret12
    defaultTopicPerm: PUB|SUB
  - accessKey: operator
    secretKey: osecret12
    admin: true
"""


def test_acl_needs_an_administrator(tmp_path: Path, served) -> None:
    d = tmp_path / "store"
    with strata.open(d, small_config()) as s:
        s.create_topic("seed", queues=1)
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL)
    b = served(serve(d, "--acl", str(acl)))
    nobody = strata_cli("topics", "create", d, "t1")
    assert nobody.returncode == 1 and "administrator's accessKey" in nobody.stderr
    viewer = strata_cli("topics", "create", d, "t1", "--access-key", "viewer1",
                        "--secret-key", "vsecret12")
    assert viewer.returncode == 1 and "viewer1 is not an administrator" in viewer.stderr
    wrong = strata_cli("topics", "create", d, "t1",
                       env={"STRATA_ACCESS_KEY": "operator", "STRATA_SECRET_KEY": "nope"})
    assert wrong.returncode == 1 and "administrator's accessKey" in wrong.stderr
    ok = strata_cli("topics", "create", d, "t1",
                    env={"STRATA_ACCESS_KEY": "operator", "STRATA_SECRET_KEY": "osecret12"})
    assert ok.returncode == 0 and "created topic t1" in ok.stdout, ok.stderr
    status, topics = b.get("/api/topics")       # (the console without a login: refused)
    assert status == 401
    b.stop()
    with MessageStore(d, readonly=True) as s:
        assert s.queue_count("t1") == 8
