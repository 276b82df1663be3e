"""Requests a client library cannot be made to send on purpose, sent raw (kafka-python's
protocol classes over a socket, in a process of its own): idempotent producer sequences
(duplicates stored once, gaps refused) also across a SIGKILL and restart, Fetch out of
range, and bad frames (the connection closes, the broker serves on, nothing is stored)."""

from __future__ import annotations

import signal

import pytest

from clients import RAW
from kafka_support import run_client

pytestmark = pytest.mark.kafka

IDEMPOTENT = RAW + '''
raw = Raw(BOOTSTRAP)
topic = ARGS["topic"]
if ARGS["step"] == 1:
    r = raw.call(22, 0, transactional_id=None, transaction_timeout_ms=60000)
    pid, epoch = r.producer_id, r.producer_epoch
    first = produce(raw, topic, 0, batch(pid, epoch, 0, [b"a", b"b", b"c"]))
    again = produce(raw, topic, 0, batch(pid, epoch, 0, [b"a", b"b", b"c"]))
    gap = produce(raw, topic, 0, batch(pid, epoch, 5, [b"x"]))
    second = produce(raw, topic, 0, batch(pid, epoch, 3, [b"d", b"e"]))
    old = produce(raw, topic, 0, batch(pid, epoch - 1 if epoch else -5, 5, [b"y"])) \\
        if epoch else None
    out(pid=pid, epoch=epoch, first=first, again=again, gap=gap, second=second)
else:
    pid, epoch = ARGS["pid"], ARGS["epoch"]
    again = produce(raw, topic, 0, batch(pid, epoch, 3, [b"d", b"e"]))
    third = produce(raw, topic, 0, batch(pid, epoch, 5, [b"f"]))
    r = raw.call(22, 0, transactional_id=None, transaction_timeout_ms=60000)
    code, hw, records = fetch(raw, topic, 0, 0)
    out(again=again, third=third, hw=hw, new_pid=r.producer_id)
'''


def test_idempotent_sequences_survive_a_sigkill(kafka_factory, tmp_path):
    s = kafka_factory("--flush", "sync", directory=tmp_path / "store")
    one = run_client(IDEMPOTENT, s.bootstrap, dict(topic="idem", step=1))
    assert one["first"] == [0, 0]
    assert one["again"] == [0, 0]                 # the duplicate: its offset, stored once
    assert one["gap"][0] == 45                    # OUT_OF_ORDER_SEQUENCE_NUMBER
    assert one["second"] == [0, 3]
    s.stop(signal.SIGKILL)
    s2 = kafka_factory(directory=tmp_path / "store")
    two = run_client(IDEMPOTENT, s2.bootstrap,
                     dict(topic="idem", step=2, pid=one["pid"], epoch=one["epoch"]))
    assert two["again"] == [0, 3]                 # known as a duplicate after the restart
    assert two["third"] == [0, 5]
    assert two["hw"] == 6                         # a b c d e f: nothing stored twice
    assert two["new_pid"] > one["pid"]            # ids are never handed out twice


BAD_FRAMES = RAW + '''
results = {}
for name, frame in [("size too large", struct.pack(">i", 2**30)),
                    ("header short", struct.pack(">i", 4) + b"\\x00\\x00\\x00\\x00"),
                    ("body garbage", struct.pack(">i", 14) + struct.pack(">hhih", 0, 7, 1, -1)
                     + b"\\xff\\xff\\xff\\xff"),
                    ("unknown api", struct.pack(">i", 10) + struct.pack(">hhih", 999, 0, 1, -1))]:
    raw = Raw(BOOTSTRAP)
    raw.send_bytes(frame)
    try:
        raw._recv(4)
        results[name] = "answered"
    except (EOFError, ConnectionError):
        results[name] = "closed"
raw = Raw(BOOTSTRAP)
code, hw, records = fetch(raw, "nothing-here", 0, 0)
range_code = fetch(raw, ARGS["topic"], 0, 100)[0]
produce(raw, ARGS["topic"], 0, batch(-1, -1, -1, [b"ok"]))
ok = fetch(raw, ARGS["topic"], 0, 0)
out(results=results, unknown=code, out_of_range=range_code, hw=ok[1])
'''


def test_bad_frames_close_the_connection_and_the_broker_serves_on(kafka_server):
    got = run_client(BAD_FRAMES, kafka_server.bootstrap, dict(topic="after-bad"))
    assert set(got["results"].values()) == {"closed"}, got
    assert got["unknown"] == 3                    # UNKNOWN_TOPIC_OR_PARTITION
    assert got["out_of_range"] in (1, 3)          # OFFSET_OUT_OF_RANGE (or no topic yet)
    assert got["hw"] == 1
