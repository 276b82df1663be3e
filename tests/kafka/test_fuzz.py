"""Bad input against a running `strata serve --kafka`: 10,000+ mutated frames.

Valid requests (ApiVersions v0/v3, Metadata v5/v9, Fetch v11, ListOffsets v3) and Produce
requests whose record sets are already bad (wrong CRC, magic 1, codec 7, control and
transactional batches, bad varints and negative lengths under a right CRC, truncated batches,
undecodable compressed records) are mutated -- bit flips, bytes set to 0x00/0x7f/0x80/0xff,
negative int16/int32 fields, truncation, unknown API keys and versions, garbage -- and sent
over a few connections, each frame followed by a well-formed ApiVersions probe. Every frame
must get a response with its own correlation id (a Produce never with error code 0: nothing
may be stored) or the connection must close; oversize and negative length prefixes and
frames cut short are sent last on their connection. Throughout, a kafka-python consumer in
its own process reads the topic round after round, and the fuzzer waits for it to finish a
round every 1,000 frames. At the end: the topics and every message are what they were
before (read over Kafka while the server runs, and from the store after it stops), the
server's log has no traceback and at most one line per connection it closed.
"""

from __future__ import annotations

import random
import socket
import struct
import subprocess
import sys
import textwrap
import threading

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

import strata
from clients import RAW
from kafka_support import PRELUDE, KafkaServer

pytestmark = pytest.mark.kafka

TOPIC = "fuzz-topic"
PARTITIONS = 3
FRAMES = 10_500
PROBE_ID = 0x7A7A7A7A
_RAW: dict = {}
exec(RAW, _RAW)        # Raw, batch, produce, fetch, REQ, RESP: kafka-python's protocol classes
REQ, RESP = _RAW["REQ"], _RAW["RESP"]


def request(key: int, version: int, corr: int, **fields) -> bytes:
    """A request body (header included, no length prefix)."""
    r = REQ[key][version](**fields)
    r.with_header(correlation_id=corr, client_id="fuzz")
    return bytes(r.encode(header=True, framed=False))


def framed(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def with_crc(b: bytearray) -> bytes:
    from crc32c import crc32c
    struct.pack_into(">i", b, 8, len(b) - 12)
    struct.pack_into(">I", b, 17, crc32c(bytes(b[21:])))
    return bytes(b)


def good_batch(values: list[bytes]) -> bytes:
    b = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 20)
    for i, v in enumerate(values):
        b.append(i, 1_700_000_000_000 + i, b"k%d" % i, v, [("h", b"x")])
    return bytes(b.build())


def bad_record_sets() -> list[bytes]:
    """Record sets the broker must refuse, each in its own way."""
    ok = bytearray(good_batch([b"value-%d" % i for i in range(5)]))
    out = []
    b = bytearray(ok)
    struct.pack_into(">I", b, 17, struct.unpack_from(">I", b, 17)[0] ^ 0xFFFFFFFF)
    out.append(bytes(b))        # CRC mismatch in all 32 bits: no few flips can mend it
    b = bytearray(ok)
    b[16] = 1
    out.append(bytes(b))                                      # magic 1
    for attrs in (7, 0x20, 0x10):                             # codec 7, control, transactional
        b = bytearray(ok)
        struct.pack_into(">h", b, 21, attrs)
        out.append(with_crc(b))
    b = bytearray(ok)
    b[62] = 0x80                                              # a varint that never ends
    b[63:70] = b"\xff" * 7
    out.append(with_crc(b))
    b = bytearray(ok)
    b[61 + 4] = 0x09                                          # key length -5 (zigzag 9)
    out.append(with_crc(b))
    out.append(bytes(ok[:-4]))                                # batch cut short
    b = bytearray(ok[:61]) + b"\xffnot gzip at all" * 4      # gzip that does not decode
    struct.pack_into(">h", b, 21, 1)
    out.append(with_crc(b))
    b = bytearray(ok)
    struct.pack_into(">i", b, 57, 9)                          # more records than it holds
    struct.pack_into(">i", b, 23, 8)
    out.append(with_crc(b))
    return out


def seeds(corr: int) -> list[bytes]:
    m5, m9 = REQ[3][5], REQ[3][9]
    F, L, P = REQ[1][11], REQ[2][3], REQ[0][7]
    frames = [
        request(18, 0, corr),
        request(18, 3, corr, client_software_name="fuzz", client_software_version="1"),
        request(3, 5, corr, topics=[m5.MetadataRequestTopic(name=TOPIC)],
                allow_auto_topic_creation=False),
        request(3, 9, corr, topics=[m9.MetadataRequestTopic(name=TOPIC)],
                allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
                include_topic_authorized_operations=False),
        request(1, 11, corr, replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 16,
                isolation_level=0, session_id=0, session_epoch=-1,
                topics=[F.FetchTopic(topic=TOPIC, partitions=[F.FetchTopic.FetchPartition(
                    partition=p, current_leader_epoch=-1, fetch_offset=0, log_start_offset=-1,
                    partition_max_bytes=1 << 16) for p in range(PARTITIONS)])],
                forgotten_topics_data=[], rack_id=""),
        request(2, 3, corr, replica_id=-1, isolation_level=0, topics=[
            L.ListOffsetsTopic(name=TOPIC, partitions=[L.ListOffsetsTopic.ListOffsetsPartition(
                partition_index=p, timestamp=-1) for p in range(PARTITIONS)])]),
    ]
    for rs in bad_record_sets():
        frames.append(request(0, 7, corr, transactional_id=None, acks=-1, timeout_ms=5000,
                              topic_data=[P.TopicProduceData(name=TOPIC, partition_data=[
                                  P.TopicProduceData.PartitionProduceData(index=p, records=rs)
                                  for p in range(PARTITIONS)])]))
    return frames


PROBE = framed(request(18, 0, PROBE_ID))


def mutate(rng: random.Random, body: bytes) -> tuple[bytes, bool]:
    """A mutated frame (length prefix included) and whether it must end its connection
    (a length prefix that does not match what follows)."""
    b = bytearray(body)
    kind = rng.randrange(10)
    if kind == 0:
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(len(b))
            b[i] ^= 1 << rng.randrange(8)
    elif kind == 1:
        for _ in range(rng.randint(1, 3)):
            b[rng.randrange(len(b))] = rng.choice((0x00, 0x7F, 0x80, 0xFF))
    elif kind == 2 and len(b) > 14:
        i = rng.randrange(10, len(b) - 4)                # a negative length or count
        struct.pack_into(rng.choice((">h", ">i")), b, i, rng.choice((-1, -2, -100, -(1 << 15))))
    elif kind == 3:
        del b[rng.randrange(len(b)):]                    # truncated, prefix says so
    elif kind == 4:
        struct.pack_into(">h", b, 0, rng.choice((-1, 77, 999, 32767, rng.randrange(50, 32768))))
    elif kind == 5:
        struct.pack_into(">h", b, 2, rng.choice((-1, 99, 1000, 32767)))
    elif kind == 6:
        b = bytearray(rng.randbytes(rng.randint(1, 200)))
    elif kind == 7:                                      # prefix larger than what follows
        n = rng.choice((len(b) + rng.randint(1, 1000), (100 << 20) + 1, 1 << 30, 0x7FFFFFFF))
        return struct.pack(">i", n) + bytes(b), True
    elif kind == 8:                                      # negative or zero prefix
        return struct.pack(">i", rng.choice((0, -1, -(1 << 31)))) + bytes(b), True
    else:                                                # bytes after the body; prefix covers
        b += rng.randbytes(rng.randint(1, 40))
    return framed(bytes(b)), False


class Conn:
    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.buf = b""

    def read_response(self) -> tuple[int, bytes] | None:
        """(correlation id, body) of the next response; None when the broker closed."""
        while True:
            if len(self.buf) >= 4:
                (n,) = struct.unpack_from(">i", self.buf)
                if len(self.buf) >= 4 + n:
                    frame, self.buf = self.buf[4:4 + n], self.buf[4 + n:]
                    return struct.unpack_from(">i", frame)[0], frame
            try:
                chunk = self.sock.recv(1 << 16)
            except ConnectionResetError:
                return None
            if not chunk:
                return None
            self.buf += chunk

    def close(self) -> None:
        self.sock.close()


CONSUMER = PRELUDE + '''
from kafka import KafkaConsumer, TopicPartition
expect = sorted(ARGS["values"])
c = KafkaConsumer(bootstrap_servers=BOOTSTRAP, enable_auto_commit=False, group_id=None,
                  consumer_timeout_ms=20000)
parts = [TopicPartition(ARGS["topic"], p) for p in range(ARGS["partitions"])]
c.assign(parts)
rounds = 0
while not sys.stdin.readline().startswith("stop"):
    c.seek_to_beginning(*parts)
    got = []
    while len(got) < len(expect):
        for recs in c.poll(timeout_ms=5000).values():
            got += [r.value.decode() for r in recs]
    assert sorted(got) == expect, got
    rounds += 1
    print("ROUND", rounds, flush=True)
c.close()
out(rounds=rounds)
'''


def snapshot(port: int) -> dict:
    """Every topic the broker lists and every message of the fuzz topic (partition, offset,
    key, value, headers, timestamp)."""
    raw = _RAW["Raw"](f"127.0.0.1:{port}")
    md = raw.call(3, 5, topics=None, allow_auto_topic_creation=False)
    topics = sorted((t.name, len(t.partitions)) for t in md.topics)
    from kafka.record.memory_records import MemoryRecords
    messages = []
    for p in range(PARTITIONS):
        code, hw, records = _RAW["fetch"](raw, TOPIC, p, 0)
        assert code == 0
        mr = MemoryRecords(bytes(records or b""))
        while mr.has_next():
            messages += [(p, r.offset, r.key, r.value, r.headers, r.timestamp)
                         for r in mr.next_batch()]
        messages.append((p, "hw", hw))
    raw.sock.close()
    return {"topics": topics, "messages": messages}


def test_ten_thousand_mutated_frames(tmp_path):
    directory = tmp_path / "store"
    server = KafkaServer(directory, "--no-auto-create").start()
    log_lines: list[str] = []
    drain = threading.Thread(target=lambda: log_lines.extend(iter(server.proc.stderr.readline,
                                                                    "")), daemon=True)
    drain.start()
    consumer = None
    try:
        raw = _RAW["Raw"](server.bootstrap)
        C = REQ[19][3]
        r = raw.call(19, 3, topics=[C.CreatableTopic(name=TOPIC, num_partitions=PARTITIONS,
                                                     replication_factor=1, assignments=[],
                                                     configs=[])],
                     timeout_ms=10000, validate_only=False)
        assert r.topics[0].error_code == 0
        values = []
        for p in range(PARTITIONS):
            vals = [b"p%d-m%d" % (p, i) for i in range(20)]
            values += [v.decode() for v in vals]
            assert _RAW["produce"](raw, TOPIC, p, good_batch(vals))[0] == 0
        raw.sock.close()
        before = snapshot(server.port)
        assert len(before["messages"]) == 3 * 20 + 3

        import json
        consumer = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(CONSUMER), server.bootstrap,
             json.dumps(dict(topic=TOPIC, partitions=PARTITIONS, values=values))],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        rounds = [0]
        cond = threading.Condition()

        def watch() -> None:
            for line in consumer.stdout:
                if line.startswith("ROUND"):
                    with cond:
                        rounds[0] = int(line.split()[1])
                        cond.notify_all()
                elif line.startswith("RESULT"):
                    break

        threading.Thread(target=watch, daemon=True).start()

        def one_more_round() -> None:
            with cond:
                seen = rounds[0]
                consumer.stdin.write("go\n")
                consumer.stdin.flush()
                assert cond.wait_for(lambda: rounds[0] > seen, timeout=60), \
                    consumer.stderr.read() if consumer.poll() is not None else "no round"

        one_more_round()
        rng = random.Random(2023)
        base = seeds(corr=4242)
        stats = {"answered": 0, "closed": 0, "silent": 0, "connections": 1}
        conn = Conn(server.port)
        for n in range(FRAMES):
            body = rng.choice(base)
            frame, ends = mutate(rng, body)
            key, version, corr = struct.unpack_from(">hhi", frame, 4) if len(frame) >= 12 \
                else (None, None, None)
            try:
                conn.sock.sendall(frame if ends else frame + PROBE)
                if ends:
                    conn.sock.shutdown(socket.SHUT_WR)
            except (BrokenPipeError, ConnectionResetError):
                pass
            got_probe = False
            answered = False
            while True:
                resp = conn.read_response()
                if resp is None:
                    break
                rcorr, payload = resp
                if rcorr == PROBE_ID and not ends:
                    got_probe = True
                    break
                assert rcorr == corr, (n, rcorr, corr)        # the frame's own response
                answered = True
                if key == 0:                                  # a Produce: refused, each part
                    produce = RESP[0].decode(payload, version=version, header=True)
                    for t in produce.responses:
                        for p in t.partition_responses:
                            assert p.error_code != 0, (n, frame.hex())
            stats["answered" if answered else "silent" if got_probe else "closed"] += 1
            if not got_probe:
                conn.close()
                conn = Conn(server.port)
                stats["connections"] += 1
            if n % 1000 == 999:
                one_more_round()
        conn.close()
        one_more_round()
        consumer.stdin.write("stop\n")
        consumer.stdin.flush()
        assert consumer.wait(timeout=60) == 0, consumer.stderr.read()

        after = snapshot(server.port)
        assert after == before
        assert server.proc.poll() is None                    # up all along
        assert stats["closed"] > 1000 and stats["answered"] > 1000, stats
    finally:
        if consumer is not None and consumer.poll() is None:
            consumer.kill()
        server.proc.send_signal(15)
        server.proc.wait(timeout=60)
        drain.join(timeout=10)
    log = "".join(server.lines + log_lines)
    assert "Traceback" not in log and "failed; closing" not in log, log[-5000:]
    closing = [line for line in log_lines if "closing" in line]
    assert len(log_lines) - len(closing) < 10, log_lines[:20]   # the rest: start/stop lines
    assert len(closing) <= stats["connections"], (len(closing), stats)   # one per bad client
    with strata.open(directory, readonly=True) as store:
        assert store.topics() == [TOPIC]
        assert store.queue_count(TOPIC) == PARTITIONS
        for p in range(PARTITIONS):
            msgs = store.get(TOPIC, p, 0, 100).messages
            assert [m.body for m in msgs] == [b"p%d-m%d" % (p, i) for i in range(20)]
