"""The console's JSON API against the store's own answers (`strata console` as a process)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import strata
from strata.store.message_store import MessageStore

from console_support import Served, console_cmd, serve_cmd, small_config


def fill(directory: Path) -> dict:
    """Two topics with keys, tags, properties and JSON bodies; returns what was put."""
    with strata.open(directory, small_config()) as s:
        s.create_topic("orders", queues=4)
        s.create_topic("audit", queues=2, message_type="fifo")
        r = s.put_batch([strata.Message("orders", json.dumps({"n": i}).encode(),
                                        keys=[f"order-{i}"], tags="created" if i % 2 else "paid",
                                        properties={"region": "eu"}, queue_id=i % 4)
                         for i in range(200)])
        a = s.put_batch([strata.Message("audit", b"\x00\x01\x02binary", queue_id=0)
                         for _ in range(5)])
        return {"orders": list(r), "audit": list(a)}


def test_overview_topics_and_queues_match_the_store(tmp_path: Path, served) -> None:
    d = tmp_path / "store"
    fill(d)
    c = served(console_cmd(d))
    assert "opened as the writer" in c.log
    ov = c.api("/api/overview")
    topics = {t["topic"]: t for t in c.api("/api/topics")["topics"]}
    orders = c.api("/api/topics/orders")
    c.stop()
    with MessageStore(d, readonly=True) as s:
        assert ov["topics"] == len(s.topics()) == 2
        assert ov["queues"] == 6
        assert ov["messages"] == 205
        assert ov["flush"] == "async"
        assert ov["commitlog"]["confirmed"] == s.confirmed_offset()
        assert ov["recovery"]["clean"] is True
        assert topics["audit"]["type"] == "fifo" and topics["audit"]["queues"] == 2
        assert topics["orders"]["messages"] == 200
        for q in orders["queues"]:
            assert q["max_offset"] == s.max_offset("orders", q["queue"]) == 50
            assert q["min_offset"] == s.min_offset("orders", q["queue"])
            assert q["earliest_ms"] == s.earliest_time("orders", q["queue"])


def test_message_finder_by_queue_id_key_and_time(tmp_path: Path, served) -> None:
    d = tmp_path / "store"
    put = fill(d)
    c = served(console_cmd(d))
    newest = c.api("/api/messages?topic=orders&queue=1&limit=20")
    assert [m["queue_offset"] for m in newest["messages"]] == list(range(49, 29, -1))
    assert newest["older"] == 30 and newest["newer"] is None
    older = c.api("/api/messages?topic=orders&queue=1&limit=20&to=30")
    assert [m["queue_offset"] for m in older["messages"]] == list(range(29, 9, -1))
    oldest = c.api("/api/messages?topic=orders&queue=1&order=oldest&from=45&limit=20")
    assert [m["queue_offset"] for m in oldest["messages"]] == list(range(45, 50))
    r = put["orders"][77]
    by_id = c.api(f"/api/messages?id={r.msg_id}")["messages"]
    assert len(by_id) == 1 and by_id[0]["commitlog_offset"] == r.commitlog_offset
    one = c.api(f"/api/messages/{r.msg_id}")
    assert json.loads(one["body_text"]) == {"n": 77} and one["properties"] == {"region": "eu"}
    assert one["keys"] == ["order-77"] and one["tags"] == "created" and not one["from_tier"]
    by_key = c.api("/api/messages?topic=orders&key=order-150")["messages"]
    assert [m["msg_id"] for m in by_key] == [put["orders"][150].msg_id]
    t = put["orders"][0].store_timestamp
    by_time = c.api(f"/api/messages?topic=orders&time={t}")["messages"]
    assert {m["queue"] for m in by_time} == {0, 1, 2, 3}
    assert all(m["queue_offset"] == 0 for m in by_time)
    binary = c.api(f"/api/messages/{put['audit'][0].msg_id}")
    assert binary["body_text"] is None and binary["body_hex"] == b"\x00\x01\x02binary".hex()


def test_bad_input_gets_a_clear_error(tmp_path: Path, served) -> None:
    d = tmp_path / "store"
    fill(d)
    c = served(console_cmd(d))
    for path, words in [("/api/messages?topic=orders&queue=9", "queue=9 is out of range"),
                        ("/api/messages?topic=nope", "no topic 'nope'"),
                        ("/api/messages?topic=a%20b", "is not a topic name"),
                        ("/api/messages?topic=orders&limit=x", "limit='x' is not an integer"),
                        ("/api/messages?id=xyz", "is not a message id")]:
        status, got = c.get(path)
        assert status == 400 and words in got["error"], (path, got)
    status, got = c.get("/api/topics/nope")
    assert status == 404 and "no topic" in got["error"]
    status, got = c.get("/api/messages/7F00000100002A9F00000000FFFFFFFF")
    assert status == 404
    status, text = c.get("/topics/orders?queue=99")
    assert status == 400 and "queue=99 is out of range" in text and "Traceback" not in text
    assert "Traceback" not in c.log


def test_a_long_poll_answers_after_the_next_sample(tmp_path: Path, served) -> None:
    """``?after=SEQ`` on /api/groups and /api/overview waits for the sampler's sample
    numbered above SEQ, whose reading covers what was stored before it started."""
    d = tmp_path / "store"
    fill(d)
    b = served(serve_cmd(d))
    seq = b.api("/api/overview")["rates"]["seq"]
    ov = b.api(f"/api/overview?after={seq}")
    assert ov["rates"]["seq"] > seq
    from broker_support import run_client
    run_client(tmp_path, b.endpoint, """
        p = producer("orders")
        for i in range(7):
            p.send(message("orders", f"later-{i}"))
        p.shutdown()
        out(ok=True)
    """)
    seq = b.api("/api/groups?per_page=1")["history"]["seq"]
    hist = b.api(f"/api/groups?per_page=1&after={seq + 1}")["history"]
    assert hist["seq"] > seq + 1 and len(hist["t"]) >= 3
    # that sample started after the sends: the rates between the samples add up to them
    r = b.api("/api/overview")["rates"]
    assert r["seq"] >= hist["seq"]
    t = [r["t"][0] - 1.0] + r["t"]     # (the first rate's interval: about a second)
    assert round(sum(n * (b_ - a) for n, a, b_ in zip(r["messages_in"], t, t[1:]))) == 7
    for bad, words in [("after=x", "after='x' is not an integer"),
                       ("after=-1", "after=-1 is out of range")]:
        status, got = b.get("/api/groups?" + bad)
        assert status == 400 and words in got["error"], got


def _tree_digest(d: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(d.rglob("*")):
        if p.is_file() and p.name != "lock":
            h.update(str(p.relative_to(d)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()


def test_beside_a_running_broker_reads_read_only_and_follows_it(tmp_path: Path,
                                                                served) -> None:
    from broker_support import run_client
    d = tmp_path / "store"
    fill(d)
    b = served(serve_cmd(d))
    c = served(console_cmd(d))
    assert "read-only beside a running writer" in c.log
    before = c.api("/api/topics/orders")["messages"]
    run_client(tmp_path, b.endpoint, """
        p = producer("orders")
        for i in range(10):
            p.send(message("orders", f"later-{i}", keys=[f"later-{i}"]))
        p.shutdown()
        out(ok=True)
    """)
    # sends are acknowledged once stored: the read-only console sees them
    assert c.api("/api/topics/orders")["messages"] == before + 10
    assert len(c.api("/api/messages?topic=orders&key=later-3")["messages"]) == 1
    b_api = Served.__new__(Served)
    b_api.url = b.url
    assert b_api.api("/api/topics/orders")["messages"] == before + 10
    ov = b_api.api("/api/overview")
    assert ov["listeners"]["RocketMQ gRPC"] == b.endpoint


def test_reading_never_changes_the_store(tmp_path: Path, served) -> None:
    d = tmp_path / "store"
    put = fill(d)
    b = served(serve_cmd(d))     # a writer holds it: the console opens it read-only
    before = _tree_digest(d)
    c = served(console_cmd(d))
    for path in ["/api/overview", "/api/topics", "/api/topics/orders", "/api/groups",
                 "/api/messages?topic=orders&queue=2", f"/api/messages/{put['orders'][3].msg_id}",
                 "/api/messages?topic=orders&key=order-3", "/", "/topics", "/topics/orders",
                 "/groups", f"/messages/{put['orders'][3].msg_id}"]:
        c.get(path)
    c.stop()
    assert _tree_digest(d) == before
    assert b.proc.poll() is None


def test_console_command_refuses_bad_input_clearly(tmp_path: Path) -> None:
    import subprocess
    import sys
    run = lambda *a: subprocess.run([sys.executable, "-m", "strata.cli.main", "console", *a],
                                    capture_output=True, text=True, timeout=120)
    r = run(str(tmp_path / "nothing"), "--http", "127.0.0.1:0")
    assert r.returncode == 1 and "is not a strata store" in r.stderr
    d = tmp_path / "store"
    fill(d)
    r = run(str(d), "--http", "localhost")
    assert r.returncode == 2 and "expected HOST:PORT" in r.stderr
    r = run(str(d), "--http", "127.0.0.1:0", "--acl", str(tmp_path / "missing.yml"))
    assert r.returncode == 1 and "missing.yml" in r.stderr
    assert "Traceback" not in r.stderr
