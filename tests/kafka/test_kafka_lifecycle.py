"""Durability and the process: with --flush sync an acknowledged batch survives SIGKILL;
acks=0 stores without answering; kcat (librdkafka's CLI) produces and consumes; a port in
use is refused naming it; SIGTERM stops cleanly."""

from __future__ import annotations

import re
import signal
import subprocess
import sys

import pytest

from kafka_support import SMALL_STORE, run_client

pytestmark = pytest.mark.kafka

PRODUCE = '''
from confluent_kafka import Producer
p = Producer({"bootstrap.servers": BOOTSTRAP, "acks": "all", "linger.ms": 2})
acked = []
for i in range(ARGS["n"]):
    p.produce("durable", value=b"m%05d" % i, partition=i % 2,
              on_delivery=lambda e, m: acked.append(m.offset()) if e is None else None)
left = p.flush(120)
out(left=left, acked=len(acked))
'''

CONSUME = '''
from kafka import KafkaConsumer, TopicPartition
c = KafkaConsumer(bootstrap_servers=BOOTSTRAP, enable_auto_commit=False)
parts = [TopicPartition(ARGS["topic"], p) for p in ARGS["parts"]]
c.assign(parts)
c.seek_to_beginning()
got = {}
deadline = time.time() + 30
while sum(map(len, got.values())) < ARGS["n"] and time.time() < deadline:
    for tp, batch in c.poll(timeout_ms=500).items():
        got.setdefault(tp.partition, []).extend((r.offset, r.value.decode()) for r in batch)
out(got={str(k): v for k, v in got.items()})
'''


def test_sync_flush_acknowledged_messages_survive_sigkill(kafka_factory, tmp_path):
    s = kafka_factory("--flush", "sync", directory=tmp_path / "store")
    r = run_client(PRODUCE, s.bootstrap, dict(n=400))
    assert r == dict(left=0, acked=400)
    s.stop(signal.SIGKILL)
    s2 = kafka_factory("--flush", "sync", directory=tmp_path / "store")
    got = run_client(CONSUME, s2.bootstrap, dict(topic="durable", parts=[0, 1], n=400))["got"]
    for part in (0, 1):
        assert [o for o, _v in got[str(part)]] == list(range(200))
        assert [v for _o, v in got[str(part)]] == [f"m{i:05d}" for i in range(part, 400, 2)]
    assert s2.stop() == 0
    assert "stopped cleanly" in s2.log and "kafka: " in s2.log


ACKS_ZERO = '''
from kafka import KafkaProducer
p = KafkaProducer(bootstrap_servers=BOOTSTRAP, acks=0)
for i in range(50):
    p.send("acks0", value=b"z%d" % i, partition=0)
p.flush(120)                        # (kafka-python's raises past it; it decides nothing)
p.close()
out(sent=50)
'''


def test_acks_zero_stores_without_answering(kafka_server):
    assert run_client(ACKS_ZERO, kafka_server.bootstrap)["sent"] == 50
    got = run_client(CONSUME, kafka_server.bootstrap, dict(topic="acks0", parts=[0], n=50))
    assert [v for _o, v in got["got"]["0"]] == [f"z{i}" for i in range(50)]


def test_kcat_produces_and_consumes(kafka_server):
    b = kafka_server.bootstrap
    lines = "".join(f"key{i}:value {i}\n" for i in range(20))
    p = subprocess.run(["kcat", "-b", b, "-P", "-t", "kcat", "-p", "0", "-K:", "-z", "gzip"],
                       input=lines, text=True, capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr
    c = subprocess.run(["kcat", "-b", b, "-C", "-t", "kcat", "-p", "0", "-o", "beginning",
                        "-e", "-f", "%o %k=%s\n"], text=True, capture_output=True, timeout=60)
    assert c.returncode == 0, c.stderr
    assert c.stdout.splitlines() == [f"{i} key{i}=value {i}" for i in range(20)]


def test_a_port_in_use_is_refused_naming_it(kafka_server, tmp_path):
    cmd = [sys.executable, "-m", "strata.cli.main", "serve", str(tmp_path / "other"),
           "--kafka", kafka_server.bootstrap]
    for opt in SMALL_STORE:
        cmd += ["--store-option", opt]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    assert f"cannot listen on {kafka_server.bootstrap} (--kafka)" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr


PRODUCE_MIXED = '''
from confluent_kafka import Producer
p = Producer({"bootstrap.servers": BOOTSTRAP, "acks": "all", "linger.ms": 20})
acked = []
for i in range(ARGS["n"]):
    kw = dict(key=b"k%d" % i, headers=[("h", b"%d" % i)]) if i % 3 == 0 else {}
    p.produce("syncmix", value=b"v%05d" % i, partition=i % 4,
              on_delivery=lambda e, m: acked.append(m.partition()) if e is None else None,
              **kw)
left = p.flush(30)
out(left=left, acked=len(acked))
'''

CONSUME_MIXED = '''
from confluent_kafka import Consumer, TopicPartition
c = Consumer({"bootstrap.servers": BOOTSTRAP, "group.id": "g", "enable.auto.commit": False})
c.assign([TopicPartition("syncmix", p, 0) for p in range(4)])
got = []
deadline = time.time() + 30
while len(got) < ARGS["n"] and time.time() < deadline:
    for m in c.consume(1000, 0.5):
        if m.error() is None:
            got.append([m.partition(), m.offset(), m.value().decode(),
                        None if m.key() is None else m.key().decode(),
                        [[k, v.decode()] for k, v in (m.headers() or [])]])
c.close()
out(got=got)
'''


def test_sync_flush_produce_goes_through_the_send_batcher(kafka_factory, tmp_path):
    """--flush sync: every partition of a produce (plain records and records with keys and
    headers) is stored through the shared send batcher, whose puts are one fsync at most
    each, and reads back as sent."""
    s = kafka_factory("--flush", "sync", directory=tmp_path / "store")
    n = 1200
    assert run_client(PRODUCE_MIXED, s.bootstrap, dict(n=n)) == dict(left=0, acked=n)
    got = run_client(CONSUME_MIXED, s.bootstrap, dict(n=n))["got"]
    assert s.stop() == 0
    want = sorted([i % 4, i // 4, f"v{i:05d}", f"k{i}" if i % 3 == 0 else None,
                   [["h", str(i)]] if i % 3 == 0 else []] for i in range(n))
    assert sorted(got) == want
    stored, batches = (int(g.replace(",", "")) for g in re.search(
        r"([\d,]+) messages? stored in ([\d,]+) batch", s.log).groups())
    fsyncs = int(re.search(r"([\d,]+) fsyncs", s.log).group(1).replace(",", ""))
    assert stored == n                      # all of them through the batcher
    assert 1 <= fsyncs <= batches < n // 4  # partitions of a request share a put and fsync


def test_kafka_read_threads_reach_the_listener(kafka_factory, tmp_path):
    """``--kafka-read-threads N`` sizes the Kafka listener's read lanes: the start line gives
    the pool the listener built (default 4), and a consumer reads through it."""
    s = kafka_factory("--kafka-read-threads", "2", directory=tmp_path / "two")
    assert re.search(r", kafka read threads 2[,)]", s.log), s.log
    assert run_client(PRODUCE, s.bootstrap, dict(n=10)) == dict(left=0, acked=10)
    got = run_client(CONSUME, s.bootstrap, dict(topic="durable", parts=[0, 1], n=10))["got"]
    assert sum(map(len, got.values())) == 10
    d = kafka_factory(directory=tmp_path / "default")
    assert re.search(r", kafka read threads 4[,)]", d.log), d.log


@pytest.mark.parametrize("value", ["0", "-3", "257", "many"])
def test_a_bad_kafka_read_threads_value_is_refused_naming_the_option(tmp_path, value):
    """As any other bad option: exit code 2, a line naming it, no traceback, no store made."""
    p = subprocess.run([sys.executable, "-m", "strata.cli.main", "serve",
                        str(tmp_path / "store"), "--kafka", "127.0.0.1:0",
                        "--kafka-read-threads", value],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, p.stderr
    assert "--kafka-read-threads" in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert not (tmp_path / "store").exists()
