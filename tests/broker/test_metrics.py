"""`strata serve --metrics HOST:PORT`: Prometheus metrics scraped over HTTP while the official
client sends, receives and acks; each counter moves by what the client did."""

import re
import socket
import subprocess
import sys

import pytest
from prometheus_client.parser import text_string_to_metric_families

from broker_support import SMALL_STORE, run_client
from strata.words import count

pytestmark = pytest.mark.broker


def metrics_url(log: str) -> str:
    m = re.search(r"metrics (http://[\d.]+:\d+/metrics)", log)
    assert m, log
    return m.group(1)


def samples(text: str) -> dict[tuple, float]:
    """{(name, (label, value), ...): value} of one scrape."""
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, *sorted(s.labels.items()))] = s.value
    return out


def value(scrape: dict, name: str, **labels) -> float:
    return scrape.get((name, *sorted(labels.items())), 0.0)


BODIES = ["a", "bb", "ccc" * 100, "dddd", "e" * 1000]


def test_counters_lag_inflight_and_flush_latency_follow_the_client(broker_factory, tmp_path):
    b = broker_factory("--flush", "sync", "--metrics", "127.0.0.1:0")
    url = metrics_url(b.log)
    got = run_client(tmp_path, b.endpoint, '''
    import urllib.request
    url, bodies = json.loads(sys.argv[2])
    def scrape():
        return urllib.request.urlopen(url, timeout=10).read().decode()
    scrapes = {"start": scrape()}
    p = producer("metered")
    for body in bodies:
        p.send(message("metered", body))
    m = pb.Message(topic=pb.Resource(name="metered"), body=b"")      # refused: empty body
    m.system_properties.message_id = "raw-empty"
    m.system_properties.message_type = pb.MessageType.NORMAL
    empty = stub().SendMessage(svc.SendMessageRequest(messages=[m]), metadata=meta())
    scrapes["sent"] = scrape()
    c = consumer("g", "metered")
    got = []
    for _ in range(10):
        got += c.receive(32, 30)
        if len(got) >= len(bodies):
            break
    scrapes["received"] = scrape()
    for msg in got[:3]:
        c.ack(msg)
    scrapes["acked"] = scrape()
    p.shutdown()
    c.shutdown()
    out(scrapes=scrapes, received=len(got), empty=pb.Code.Name(empty.status.code))
    ''', args=[url, BODIES])
    assert got["received"] == 5 and got["empty"] == "MESSAGE_BODY_EMPTY"
    s = {k: samples(v) for k, v in got["scrapes"].items()}
    t, g = {"topic": "metered"}, {"topic": "metered", "group": "g"}
    total = sum(len(x) for x in BODIES)
    assert value(s["start"], "strata_messages_sent_total", **t) == 0
    assert value(s["start"], "strata_put_batches_total") == 0
    # sends: 5 stored, their body bytes; the refused one counted only as a request
    assert value(s["sent"], "strata_messages_sent_total", **t) == 5
    assert value(s["sent"], "strata_sent_bytes_total", **t) == total
    assert value(s["sent"], "strata_requests_total", method="SendMessage", code="OK") == 5
    assert value(s["sent"], "strata_requests_total", method="SendMessage",
                 code="MESSAGE_BODY_EMPTY") == 1
    # sync flush: one latency observation per put_batch of the send path
    batches = value(s["sent"], "strata_put_batches_total")
    assert 1 <= batches <= 5
    assert value(s["sent"], "strata_flush_latency_seconds_count") == batches
    assert value(s["sent"], "strata_flush_latency_seconds_sum") > 0
    assert value(s["sent"], "strata_flush_latency_seconds_bucket", le="+Inf") == batches
    assert value(s["sent"], "strata_messages_received_total", **g) == 0
    # receives: 5 deliveries in flight, none acked
    assert value(s["received"], "strata_messages_received_total", **g) == 5
    assert value(s["received"], "strata_received_bytes_total", **g) == total
    assert value(s["received"], "strata_group_inflight", **g) == 5
    assert value(s["received"], "strata_group_lag", **g) == 5
    # acks: 3 of them; 2 still in flight and not consumed
    assert value(s["acked"], "strata_messages_acked_total", **g) == 3
    assert value(s["acked"], "strata_group_inflight", **g) == 2
    assert value(s["acked"], "strata_group_lag", **g) == 2
    assert value(s["acked"], "strata_messages_sent_total", **t) == 5
    assert b.stop() == 0
    assert f"5 messages stored in {count(int(batches), 'batch')};" in b.log


def test_lag_counts_messages_the_group_never_read(broker_factory, tmp_path):
    b = broker_factory("--metrics", "127.0.0.1:0")
    url = metrics_url(b.log)
    got = run_client(tmp_path, b.endpoint, '''
    import urllib.request
    p = producer("backlog")
    for i in range(20):                   # round-robin over the topic's 8 queues
        p.send(message("backlog", "m%d" % i))
    c = consumer("slow", "backlog")
    first = c.receive(1, 30)
    c.ack(first[0])
    out(n=len(first), text=urllib.request.urlopen(json.loads(sys.argv[2]), timeout=10)
        .read().decode())
    ''', args=url)
    s = samples(got["text"])
    g = {"topic": "backlog", "group": "slow"}
    assert value(s, "strata_messages_acked_total", **g) == 1
    assert value(s, "strata_group_inflight", **g) == 0
    assert value(s, "strata_group_lag", **g) == 19     # queues it never touched count too
    assert b.stop() == 0


def test_metrics_endpoint_errors(tmp_path):
    cmd = [sys.executable, "-m", "strata.cli.main", "serve", str(tmp_path / "store"),
           "--listen", "127.0.0.1:0", "--metrics", "nowhere"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and "--metrics 'nowhere': expected HOST:PORT" in p.stderr
    assert not (tmp_path / "store").exists()
    # a port already taken: the start fails naming it, and the store is closed cleanly
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        cmd[-1] = f"127.0.0.1:{port}"
        for opt in SMALL_STORE:
            cmd += ["--store-option", opt]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    assert f"cannot listen on 127.0.0.1:{port} (--metrics)" in p.stderr, p.stderr
    assert not (tmp_path / "store" / "abort").exists()
