"""Kafka listener benchmark: `strata serve --kafka` driven by confluent-kafka producers
(acks=all) and a consumer, each in its own process; JSON lines.

    python bench/kafka_broker.py [--messages N] [--sizes 100,1024] [--producers 1,4]
                          [--flush async,sync] [--partitions P] [--profile SECONDS]
                          [--cprofile] [--pace MSGS_PER_S] [--peers rabbitmq,nats]
                          [--partition-fetch-bytes B] [--consume-api batch|poll]
                          [--partitioner librdkafka|explicit] [--fetch-queue-backoff-ms MS,..]
                          [--consumers 1,2] [--consume-batch N] [--rounds N]

For each flush mode, size and producer count a fresh store is served on 127.0.0.1; after
an untimed warm-up (20,000 messages produced and consumed on another topic: numba's cached
kernels load on first use, 0.1-0.3 s each, a one-time cost that is not a message's) the
producers send ``--messages`` messages in total (``linger.ms`` 5, acks=all, no
compression: the broker's own work is measured; keyless, partitioned by librdkafka's own
sticky partitioner, or round-robin by the bench with ``--partitioner explicit``; the
delivery callback set once in the configuration, reporting failures only), then consumers
read them all with assign() from the beginning, once per (``--consumers`` N,
``--fetch-queue-backoff-ms`` B) over the same messages: N consumer processes, consumer i
assigned the partitions p % N == i, each connected before its clock starts
(``consume(--consume-batch)`` per call, 1000 by default, or ``poll()`` per message with
``--consume-api poll``; ``max.partition.fetch.bytes`` from ``--partition-fetch-bytes``;
every librdkafka setting that is not the default is in the row's ``consumer_config``).
Rows: ``op`` produce/consume, ``msgs_per_s`` (wall time from the first producer's start
to the last one's flush, or of the consumer's reading), ``broker_cpu_us_per_msg`` (the server process's user+system CPU over the phase, from
/proc, divided by the messages) and ``mib_per_s``. ``--profile S`` records the broker with
py-spy for S seconds of the produce and of the consume phase and prints rows ``op: profile``
(``phase``) with the
functions its samples were in (self time, percent), to see what limits it.

Rows also carry the clients' CPU per message, ``cpu_ceiling_msgs_per_s`` (cores ÷ broker +
client CPU per message) and, under ``--flush sync``, the store's ``fsyncs`` and
``msgs_per_fsync``; p50/p99 produce latency only with ``--pace`` (unpaced, each producer
enqueues its whole share at once and asks librdkafka for error-only delivery reports).

``--peers rabbitmq`` holds a RabbitMQ stream peer open through strata's cases
(``bench/rabbitmq_peer.py --serve``: its own node, the streams filled first) and runs one of
its consumes right beside each of strata's consumes of an async, unpaced case
(``--rounds N``: N consumes of each, strata first in even rounds and the stream first in
odd ones; ``beside_producers`` in the stream's rows names the case); the ``op: ratio``
consume rows pair them round by round (``rounds``: each round's ratio; ``ratio``: their
median; ``best_ratio``: best ÷ best). ``--peers rabbitmq,nats`` also runs, after strata's
cases, RabbitMQ classic (pika with persistent messages and confirms) and NATS JetStream (the
shared peer script /work/shared/peers/bench_nats_jetstream.py: Debian's nats-server, nats-py,
1,000,000 messages), relays their rows (``system`` rabbitmq-classic / rabbitmq-stream /
nats-jetstream) and ends with ``op: ratio`` rows: strata's best async rate ÷ each peer's, with
the issue's goal (×2 stream, ×2 NATS, ×10 classic).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from rabbitmq_peer import settle  # noqa: E402 - the one "wait for the server to go idle"

PRODUCER = r'''
import sys, time, json
from confluent_kafka import Producer
boot, topic, n, size, parts = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
pace = float(sys.argv[6])      # messages per second (0: as fast as produce() takes them)
explicit = sys.argv[7:8] == ["explicit"]   # the bench picks each message's partition
errs = [0]
lat = []
def cb(e, m):
    if e is not None:
        errs[0] += 1
    else:
        lat.append(m.latency())
# unpaced: librdkafka reports failed deliveries only (every message is still acked by the
# broker with acks=all, flush() waits for all, and a failure still reaches cb and is
# counted; a Python callback per message would double the client's CPU); paced: a report
# per message, for its latency. The callback is set once, in the configuration, not passed
# with every produce() call
p = Producer({"bootstrap.servers": boot, "acks": "all", "linger.ms": 5,
              "batch.size": 1000000, "queue.buffering.max.messages": 1000000,
              "enable.idempotence": False, "delivery.report.only.error": not pace,
              "on_delivery": cb})
body = b"x" * size
produce = p.produce
print("READY", flush=True)
sys.stdin.readline()
t0 = time.time()
c0 = time.process_time()
for i in range(n):
    while True:
        try:
            if explicit:
                produce(topic, body, partition=i % parts)
            else:                  # librdkafka's partitioner (keyless: sticky, then the next)
                produce(topic, body)
            break
        except BufferError:
            p.poll(0.01)
    if pace:
        ahead = t0 + (i + 1) / pace - time.time()
        if ahead > 0:
            p.poll(ahead)          # serves delivery callbacks while it waits
    elif i % 1000 == 0:
        p.poll(0)
left = p.flush(300)
t1 = time.time()
lat.sort()
pick = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] if lat else -1
print("RESULT " + json.dumps({"t0": t0, "t1": t1, "errors": errs[0], "left": left,
                              "p50": pick(0.5), "p99": pick(0.99),
                              "cpu": time.process_time() - c0}), flush=True)
'''

CONSUMER = r'''
import sys, time, json
from confluent_kafka import Consumer, TopicPartition
boot, topic, spec = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
c = Consumer({"bootstrap.servers": boot, "group.id": "bench", **spec["config"]})
parts = [TopicPartition(topic, p, 0) for p in spec["partitions"]]
# connected before the clock starts (as the stream peer's consumer is): asking the leader
# for the watermarks opens the connection the Fetches use; one of several consumers reads
# what its partitions hold
held = sum(hi - lo for lo, hi in (c.get_watermark_offsets(tp, 10) for tp in parts))
n = spec["n"] if spec["n"] >= 0 else held
print("READY", flush=True)     # every consumer connected: all start together on "go"
sys.stdin.readline()
c.assign(parts)
api, batch = spec["api"], spec["batch"]
got = 0
first = None       # when the first message came, and how many came with it
t0 = time.time()
c0 = time.process_time()
while got < n and time.time() - t0 < 300:
    if api == "poll":               # one message per call, as many applications read
        m = c.poll(1.0)
        if m is not None and not m.error():
            got += 1
            first = first or (time.time(), 1)
        continue
    # the batch API: up to ``batch`` messages a call, never more than are left (it waits
    # for as many as it asks, up to the timeout)
    ms = c.consume(min(batch, n - got), 1.0)
    first = first or (ms and (time.time(), len(ms)))
    for m in ms:
        if not m.error():
            got += 1
first = first or (t0, 0)
print("RESULT " + json.dumps({"t0": t0, "t1": time.time(), "n": got, "first": first[0],
                              "first_n": first[1], "cpu": time.process_time() - c0}),
      flush=True)
c.close()
'''


def consumer_config(part_bytes: int, queue_backoff_ms: str) -> dict:
    """The bench consumer's librdkafka settings that differ from librdkafka's defaults (the
    rows carry them): no commits (assign() from offset 0), a local queue of up to 1 GiB
    instead of 64 MiB, the partition fetch size asked for and, when given, the backoff."""
    conf = {"enable.auto.commit": False, "queued.max.messages.kbytes": 1048576}
    if part_bytes != 1 << 20:
        conf["max.partition.fetch.bytes"] = part_bytes
    if queue_backoff_ms:
        conf["fetch.queue.backoff.ms"] = int(queue_backoff_ms)
    return conf


WATERMARKS = r'''
import sys, json
from confluent_kafka import Consumer, TopicPartition
c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": "bench"})
print(json.dumps([c.get_watermark_offsets(TopicPartition(sys.argv[2], p), 10)[1]
                  for p in range(int(sys.argv[3]))]))
c.close()
'''


def spread(held: list[int], consumers: int) -> list[list[int]]:
    """The partitions of each of ``consumers`` consumers, so that each holds about as many
    of the messages as the others (``held``: the messages of each partition): the fullest
    partition first, each to the consumer with the fewest messages so far. A keyless
    producer's sticky partitioner fills partitions unevenly (38 % and 62 % for two halves
    of 1,000,000 messages), and the fuller consumer bounds the wall time; the stream peer's
    N streams each hold exactly 1/N."""
    load = [0] * consumers
    out: list[list[int]] = [[] for _ in range(consumers)]
    for p in sorted(range(len(held)), key=lambda q: -held[q]):
        i = load.index(min(load))
        out[i].append(p)
        load[i] += held[p]
    return [sorted(x) for x in out]


def consume(boot: str, topic: str, n: int, parts: int, consumers: int, spec: dict,
            held: list[int] | None = None) -> dict:
    """``consumers`` consumer processes, each assigned the partitions ``spread`` gives it
    (by the messages each partition ``held``; without it, consumer i reads the partitions
    p % consumers == i; one reads them all); the rate is every message over the wall time
    from the first one's start to the last one's end; ``first_ms``: from the start to the
    first message (connection, metadata, first Fetch), the slowest consumer's;
    ``from_first``: the messages after the first ones each consumer got over the time from
    the first of those to the end (the rate once connected; the stream peer's rows carry
    the same); ``each``: [messages, seconds] of each consumer (a sticky partitioner
    fills the partitions unevenly, and the fuller half bounds the wall time)."""
    split = spread(held, consumers) if held else [
        [p for p in range(parts) if p % consumers == i] for i in range(consumers)]
    procs = [subprocess.Popen(
        [sys.executable, "-c", CONSUMER, boot, topic, json.dumps(dict(
            spec, n=n if consumers == 1 else -1,
            partitions=mine))],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True) for mine in split]
    go(procs)
    res = [result(p) for p in procs]
    t0, t1 = min(r["t0"] for r in res), max(r["t1"] for r in res)
    first = min(r["first"] for r in res)
    after = sum(r["n"] - r["first_n"] for r in res)
    return dict(t0=t0, t1=t1, n=sum(r["n"] for r in res), cpu=sum(r["cpu"] for r in res),
                each=[[r["n"], round(r["t1"] - r["t0"], 3)] for r in res],
                first_ms=round(1e3 * max(r["first"] - r["t0"] for r in res), 1),
                from_first=round(after / (t1 - first)) if t1 > first else None)

# prefault off: on a fresh store the prefault thread would touch a whole window of the 1 GiB
# segment ahead of the writer, which in a short run costs more CPU than the faults it saves
SMALL = ("index_slots=65536", "index_entries=262144", "prefault=false")


WARMUP = 20_000      # messages produced and consumed on another topic before the timed phases


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def top_frames(folded: Path, n: int = 12) -> tuple[list, list, list]:
    """The functions the broker spent its samples in, from py-spy's folded stacks: (self
    time, inclusive time, per thread), each [[function (file:line) or thread, percent of
    samples], ...], most first."""
    own: dict[str, int] = {}
    incl: dict[str, int] = {}
    threads: dict[str, int] = {}
    total = 0
    try:
        lines = folded.read_text().splitlines()
    except OSError:
        return [], [], []
    for line in lines:
        stack, _, k = line.rpartition(" ")
        if not k.isdigit():
            continue
        frames = stack.split(";")
        own[frames[-1]] = own.get(frames[-1], 0) + int(k)
        threads[frames[0]] = threads.get(frames[0], 0) + int(k)
        for f in set(frames[1:]):          # frames[0]: the thread
            incl[f] = incl.get(f, 0) + int(k)
        total += int(k)
    if not total:
        return [], [], []
    pick = lambda d: [[f, round(100 * c / total, 1)]            # noqa: E731
                      for f, c in sorted(d.items(), key=lambda x: -x[1])[:n]]
    return pick(own), pick(incl), pick(threads)


def ceiling(row: dict) -> None:
    """What the machine's cores would allow if the broker and its clients had them all:
    cores ÷ (broker + client CPU per message); the wall rate falls short of it by what
    other processes on the machine take."""
    per = row["broker_cpu_us_per_msg"] + row["client_cpu_us_per_msg"]
    row["cpu_ceiling_msgs_per_s"] = round(os.cpu_count() / per * 1e6) if per > 0 else None


def spy_on(root: Path, pid: int, seconds: float, name: str):
    """py-spy recording ``pid`` for ``seconds`` (None when not profiling)."""
    if not seconds:
        return None
    exe = Path(sys.executable).with_name("py-spy")     # the venv's, when not on PATH
    folded, log = root / f"profile-{name}.txt", root / f"py-spy-{name}.log"
    proc = subprocess.Popen([str(exe) if exe.exists() else "py-spy", "record", "-p", str(pid),
                             "-d", str(max(1, round(seconds))), "-o", str(folded),
                             "--format", "raw", "--nonblocking", "--threads"],
                            stdout=subprocess.DEVNULL, stderr=open(log, "w"))
    return proc, folded, log, seconds


def spy_report(spy, tag: dict, phase: str) -> None:
    if spy is None:
        return
    proc, folded, log, seconds = spy
    proc.wait(timeout=seconds + 60)
    top, inclusive, threads = top_frames(folded, 20)
    emit(dict(tag, op="profile", phase=phase, top=top, inclusive=inclusive, threads=threads)
         if top else dict(tag, op="profile", phase=phase,
                          error="py-spy took no samples: " + log.read_text()[-300:]))


def emit(row: dict) -> None:
    print(json.dumps(row), flush=True)


def go(procs: list[subprocess.Popen]) -> None:
    """Start client processes together: wait until each has said READY (connected, set up),
    then tell them all "go" (without it, N processes that take 0.1-0.7 s each to start under
    load read one after the other, and the wall time of all counts the stagger)."""
    for p in procs:
        line = p.stdout.readline()
        if not line.startswith("READY"):
            raise RuntimeError(f"client failed before READY: {line} {p.stderr.read()[-2000:]}")
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()


def result(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate(timeout=600)
    for line in out.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(f"client failed: {out[-2000:]} {err[-3000:]}")


def case(root: Path, flush: str, size: int, producers: int, messages: int, parts: int,
         profile: float, extra_env: dict | None = None, pace: float = 0,
         part_bytes: int = 1 << 20, consume_api: str = "batch",
         partitioner: str = "librdkafka", consumes: tuple = ((1, ""),),
         consume_batch: int = 1000, rounds: int = 1, peer=None) -> list[dict]:
    """One strata case: produce (``pace`` msgs/s in all, 0: as fast as the producers go)
    then, ``rounds`` times, for each (consumer processes, fetch.queue.backoff.ms or "" for
    librdkafka's default) of ``consumes`` in turn, consume everything from offset 0; with a
    ``peer`` (``StreamPeer``), its consume with as many consumers runs right beside each
    consumer count's (strata first in even rounds, the peer first in odd ones: ABBA);
    returns (and prints) its rows."""
    extra_env = dict(extra_env or {})
    rows: list[dict] = []
    store = root / f"store-{flush}-{size}-{producers}-{pace:g}-{part_bytes}"
    prof = extra_env.pop("STRATA_CPROFILE", None)
    head = [sys.executable] + (["-m", "cProfile", "-o", prof] if prof else [])
    cmd = head + ["-m", "strata.cli.main", "serve", str(store), "--kafka",
           "127.0.0.1:0", "--flush", flush, "--exit-with-parent"]
    for o in SMALL:
        cmd += ["--store-option", o]
    log_path = root / f"serve-{flush}-{size}-{producers}-{pace:g}-{part_bytes}.log"
    log_file = open(log_path, "w")
    server = subprocess.Popen(cmd, stderr=log_file, stdout=subprocess.DEVNULL, text=True,
                              env=dict(os.environ, **extra_env))
    boot = None
    deadline = time.time() + 120
    while boot is None:
        m = re.search(r"([\d.]+:\d+) \(kafka\)", log_path.read_text())
        boot = m.group(1) if m else None
        if boot is None:
            if server.poll() is not None or time.time() > deadline:
                raise RuntimeError("strata serve did not start: " + log_path.read_text())
            time.sleep(0.05)
    topic = "bench"
    subprocess.run([sys.executable, "-c", f'''
from confluent_kafka.admin import AdminClient, NewTopic
a = AdminClient({{"bootstrap.servers": "{boot}"}})
[f.result(30) for f in a.create_topics([NewTopic("{topic}", {parts}, 1),
                                        NewTopic("warmup", {parts}, 1)]).values()]
'''], check=True, timeout=60)
    # untimed warm-up: the one-time costs (numba's cached kernels load on first use, the
    # response encoder's buffer grows) are not what a message costs
    warm = subprocess.Popen([sys.executable, "-c", PRODUCER, boot, "warmup", str(WARMUP),
                             str(size), str(parts), "0"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert warm.stdout.readline().startswith("READY")
    warm.stdin.write("go\n")
    warm.stdin.flush()
    result(warm)
    consume(boot, "warmup", WARMUP, parts, 1, dict(
        config=consumer_config(part_bytes, ""), api="batch", batch=consume_batch))
    each = messages // producers
    procs = [subprocess.Popen([sys.executable, "-c", PRODUCER, boot, topic, str(each),
                               str(size), str(parts), str(pace / producers), partitioner],
                              stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(producers)]
    for p in procs:
        assert p.stdout.readline().startswith("READY")
    spy = spy_on(root, server.pid, profile, f"produce-{flush}-{size}-{producers}")
    cpu0 = cpu_seconds(server.pid)
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    res = [result(p) for p in procs]
    cpu1 = cpu_seconds(server.pid)
    sent = each * producers
    el = max(r["t1"] for r in res) - min(r["t0"] for r in res)
    tag = dict(system="strata", flush=flush, size=size, producers=producers, partitions=parts,
               pace=pace, partitioner=partitioner)
    produce_row = dict(tag, op="produce", messages=sent, seconds=round(el, 3),
                       msgs_per_s=round(sent / el), mib_per_s=round(sent * size / el / 2**20, 1),
                       broker_cpu_us_per_msg=round((cpu1 - cpu0) / sent * 1e6, 2),
                       errors=sum(r["errors"] + r["left"] for r in res),
                       **(dict(p50_ms=round(1e3 * max(r["p50"] for r in res), 2),
                               p99_ms=round(1e3 * max(r["p99"] for r in res), 2))
                          if pace else {}),
                       client_cpu_us_per_msg=round(sum(r["cpu"] for r in res) / sent * 1e6, 2))
    ceiling(produce_row)
    spy_report(spy, tag, "produce")
    consume_rows = []
    held = json.loads(subprocess.run([sys.executable, "-c", WATERMARKS, boot, topic, str(parts)],
                                     check=True, capture_output=True, text=True,
                                     timeout=60).stdout)

    def one_consume(consumers: int, backoff: str, rnd: int) -> None:
        spec = dict(config=consumer_config(part_bytes, backoff), api=consume_api,
                    batch=consume_batch)
        settled = settle(lambda: cpu_seconds(server.pid))
        cpu0 = cpu_seconds(server.pid)
        spy = spy_on(root, server.pid, profile,
                     f"consume-{flush}-{size}-{producers}-{consumers}-{backoff}-{rnd}")
        r = consume(boot, topic, sent, parts, consumers, spec, held)
        cpu1 = cpu_seconds(server.pid)
        spy_report(spy, dict(tag, consumers=consumers), "consume")
        el = r["t1"] - r["t0"]
        row = dict(tag, op="consume", consumers=consumers, round=rnd, messages=r["n"],
                   seconds=round(el, 3), msgs_per_s=round(r["n"] / el),
                   mib_per_s=round(r["n"] * size / el / 2**20, 1),
                   broker_cpu_us_per_msg=round((cpu1 - cpu0) / max(1, r["n"]) * 1e6, 2),
                   client_cpu_us_per_msg=round(r["cpu"] / max(1, r["n"]) * 1e6, 2),
                   first_ms=r["first_ms"], msgs_per_s_from_first=r["from_first"],
                   per_consumer=r["each"], partition_messages=held, settle_s=settled,
                   partition_fetch_bytes=part_bytes,
                   consume_api=consume_api, consume_batch=consume_batch,
                   fetch_queue_backoff_ms=int(backoff or 1000),
                   consumer_config=spec["config"])
        ceiling(row)
        consume_rows.append(row)

    counts = list(dict.fromkeys(k for k, _b in consumes))
    for rnd in range(rounds):
        for consumers in counts:     # each consume reads the whole topic again, from 0
            beside = peer is not None and not pace and flush == "async"
            if beside and rnd % 2:
                peer.consume(size, consumers, rnd, producers)
            for k, backoff in consumes:
                if k == consumers:
                    one_consume(consumers, backoff, rnd)
            if beside and not rnd % 2:
                peer.consume(size, consumers, rnd, producers)
    server.terminate()
    server.wait(timeout=60)
    log_file.close()
    text = log_path.read_text()
    ahead = re.search(r"([\d,]+) fetches answered ahead \(([\d,]+) prepared", text)
    for consume_row in consume_rows if ahead else ():    # the case's totals, every row
        consume_row.update(fetches_ahead=int(ahead.group(1).replace(",", "")),
                           ahead_dropped=int(ahead.group(2).replace(",", "")))
    m = re.search(r"([\d,]+) messages? stored in ([\d,]+) batch", text)
    f = re.search(r"([\d,]+) fsyncs", text)
    if flush == "sync" and m and f:
        # the sync produce went through the send batcher: its puts and the store's fsyncs
        stored, fsyncs = (int(g.replace(",", "")) for g in (m.group(1), f.group(1)))
        produce_row.update(fsyncs=fsyncs, msgs_per_fsync=round(stored / max(1, fsyncs), 1))
    for row in [produce_row] + consume_rows:
        emit(row)
        rows.append(row)
    return rows


GOALS = {"rabbitmq-stream": 2.0, "nats-jetstream": 2.0, "rabbitmq-classic": 10.0}


class StreamPeer:
    """The RabbitMQ stream peer held open through strata's cases (``rabbitmq_peer.py
    --serve``: its own node, the streams filled once per size and consumer count), so that
    each strata consume has a stream consume right beside it; its rows go to ``rows``."""

    def __init__(self, messages: int, sizes: str, consumers: str, rows: list) -> None:
        self.rows = rows
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("rabbitmq_peer.py")), "--serve",
             "--messages", str(messages), "--sizes", sizes, "--consumers", consumers],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for line in self.proc.stdout:
            if line.startswith("READY"):
                return
            self._relay(line)
        raise RuntimeError("the RabbitMQ stream peer did not start (its rows above)")

    def _relay(self, line: str, **extra) -> dict | None:
        for row in json_lines(line):
            row.update(extra)
            emit(row)
            self.rows.append(row)
            return row
        return None

    def consume(self, size: int, consumers: int, rnd: int, beside: int | None) -> None:
        """One stream consume with ``consumers`` consumer processes, round ``rnd``, beside
        strata's case with ``beside`` producers."""
        self.proc.stdin.write(f"consume {size} {consumers} {rnd}\n")
        self.proc.stdin.flush()
        row = self._relay(self.proc.stdout.readline(), beside_producers=beside)
        if row is None or "error" in row:
            raise RuntimeError(f"the RabbitMQ stream peer failed: {row}")

    def close(self) -> None:
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        for line in self.proc.stdout:    # anything it still says (an error row)
            self._relay(line)
        self.proc.wait(timeout=120)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=1_000_000,
                    help="messages per case (1,000,000: a consume lasts ~0.5-1 s, so the "
                         "connection and first Fetch are a small part of its rate)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="consumes per case over the same messages, each beside a RabbitMQ "
                         "stream consume (with --peers rabbitmq), in ABBA order; the ratio "
                         "rows give every round's ratio and their median")
    ap.add_argument("--sizes", default="100,1024")
    ap.add_argument("--producers", default="1,4")
    ap.add_argument("--flush", default="async,sync")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--profile", type=float, default=0.0)
    ap.add_argument("--cprofile", action="store_true",
                    help="run the broker under cProfile (its event-loop thread) and print "
                         "its top functions (own time) per case")
    ap.add_argument("--peers", default="", help="nats,rabbitmq")
    ap.add_argument("--pace", type=float, default=0,
                    help="producers send this many msgs/s in all (0: as fast as they can); "
                         "for latency: unpaced, p50/p99 are mostly the client's own queue")
    ap.add_argument("--partition-fetch-bytes", default=str(1 << 20),
                    help="the consumer's max.partition.fetch.bytes, one case each (e.g. "
                         "1048576,10485760; librdkafka's default is 1 MiB, 10 MiB takes a "
                         "partition's backlog in few Fetches)")
    ap.add_argument("--consume-api", default="batch", choices=("batch", "poll"),
                    help="the consumer's reads: consume(N) (batch, what a fast reader "
                         "uses) or poll() per message")
    ap.add_argument("--consumers", default="1",
                    help="consumer processes, one case each (e.g. 1,2): consumer i reads the "
                         "partitions p with p %% N == i; the RabbitMQ stream peer splits the "
                         "same way into N streams, one consumer process each")
    ap.add_argument("--consume-batch", type=int, default=1000,
                    help="messages asked per consume() call (1000: ~18%% less client CPU "
                         "per message than 10,000 on this machine, ABBA; fewer live Message "
                         "objects for Python's garbage collector to walk)")
    ap.add_argument("--fetch-queue-backoff-ms", default="",
                    help="the consumer's fetch.queue.backoff.ms, one consume each over the "
                         "same produced messages (e.g. 10,default; librdkafka's default: 1000). "
                         "librdkafka stops fetching a partition for this long once its local "
                         "queue holds queued.min.messages (100,000): a broker that fills the "
                         "queue faster than the application drains it leaves the consumer "
                         "idle for up to a second at a time")
    ap.add_argument("--partitioner", default="librdkafka", choices=("librdkafka", "explicit"),
                    help="who picks each message's partition: librdkafka's own partitioner "
                         "(keyless messages: sticky to one partition for "
                         "sticky.partitioning.linger.ms, then the next; what a producer "
                         "without keys does) or the bench, round-robin per message "
                         "(produce(..., partition=i %% P): ~0.3 µs more client CPU a message)")
    a = ap.parse_args()
    rows: list[dict] = []
    backoffs = ["" if b in ("", "default") else b for b in a.fetch_queue_backoff_ms.split(",")]
    consumes = tuple(itertools.product(map(int, a.consumers.split(",")), backoffs))
    peers = a.peers.split(",") if a.peers else []
    with tempfile.TemporaryDirectory(prefix="strata-kafka-bench-") as tmp:
        # the stream peer first, held open: its consumes alternate with strata's
        stream = StreamPeer(a.messages, a.sizes, a.consumers, rows) \
            if "rabbitmq" in peers else None
        try:
            strata_cases(a, Path(tmp), consumes, rows, stream)
            if stream is not None and not any(r.get("system") == "rabbitmq-stream" and
                                              r.get("op") == "consume" for r in rows):
                # no async unpaced case had one beside it (--flush sync, --pace): once each
                for size, k in itertools.product(map(int, a.sizes.split(",")),
                                                 dict.fromkeys(map(int, a.consumers.split(",")))):
                    stream.consume(size, k, 0, None)
        finally:
            if stream is not None:
                stream.close()
        if "rabbitmq" in peers:
            rows += rabbitmq_peer(a.messages, a.sizes, a.consumers, kinds="classic")
        if "nats" in peers:
            rows += nats_peer(Path(tmp), a.sizes)
    ratios(rows)


def strata_cases(a, tmp: Path, consumes: tuple, rows: list, stream) -> None:
    """Every strata case of the command line, in order (flush, size, producers, fetch
    bytes), each consume beside the stream peer's when there is one."""
    for flush in a.flush.split(","):
        for size in map(int, a.sizes.split(",")):
            for producers, part_bytes in itertools.product(
                    map(int, a.producers.split(",")),
                    map(int, a.partition_fetch_bytes.split(","))):
                env = {}
                if a.cprofile:
                    env["STRATA_CPROFILE"] = str(
                        tmp / f"cprofile-{flush}-{size}-{producers}.pstats")
                rows += case(tmp, flush, size, producers, a.messages,
                             a.partitions, a.profile, env, a.pace,
                             part_bytes, a.consume_api, a.partitioner, consumes,
                             a.consume_batch, a.rounds, stream)
                if a.cprofile:
                    emit(dict(system="strata", flush=flush, size=size,
                              producers=producers, op="cprofile",
                              top=cprofile_top(Path(env["STRATA_CPROFILE"]))))


def cprofile_top(path: Path, n: int = 40) -> list:
    """[function, own seconds, cumulative seconds] of the broker's profile, most own first."""
    import pstats
    try:
        st = pstats.Stats(str(path))
    except (OSError, TypeError, EOFError):
        return []
    key = 3 if os.environ.get("CPROFILE_SORT") == "cumulative" else 2
    items = sorted(st.stats.items(), key=lambda kv: -kv[1][key])[:n]
    return [[f"{Path(f).name}:{line}:{fn}", round(tt, 3), round(ct, 3)]
            for (f, line, fn), (_cc, _nc, tt, ct, _callers) in items]


def ratios(rows: list[dict]) -> None:
    """strata's best async rate (over producer counts) ÷ each peer's, per size and op; for
    consume also per consumer count against the stream peer with as many consumers."""
    def best(system: str, size: int, op: str, **match) -> list:
        return [r["msgs_per_s"] for r in rows if r.get("system") == system and
                r.get("size") == size and r.get("op") == op and not r.get("pace") and
                r.get("flush", "async") == "async" and
                all(r.get(k, 1) == v for k, v in match.items())]
    for size in sorted({r["size"] for r in rows if r.get("system") == "strata"}):
        for op in ("produce", "consume"):
            ours = best("strata", size, op)
            if not ours:
                continue
            for peer, goal in GOALS.items():
                theirs = best(peer, size, op)
                if theirs:
                    ratio = max(ours) / max(theirs)
                    emit(dict(op="ratio", what=op, size=size, strata=max(ours), peer=peer,
                              peer_msgs_per_s=max(theirs), ratio=round(ratio, 2),
                              goal=goal, met=ratio >= goal))
        ks = sorted({r["consumers"] for r in rows if r.get("op") == "consume" and
                     r.get("system") == "rabbitmq-stream" and "consumers" in r})
        for k in ks:
            paired(rows, size, k)


def paired(rows: list[dict], size: int, k: int) -> None:
    """The consume ratio with ``k`` consumers against the stream, round by round: in each
    round of each async case, strata's best consume (over the backoffs) ÷ the stream consume
    that ran right beside it; emits every round's ratio (wall and from the first message),
    their medians, and the best strata rate ÷ the best stream rate of the whole run;
    ``rounds_cpu``: the stream's CPU per message (broker + clients) ÷ strata's, round by
    round (what a busy machine disturbs least)."""
    def mine(system: str) -> list[dict]:
        return [r for r in rows if r.get("system") == system and r.get("size") == size and
                r.get("op") == "consume" and r.get("consumers") == k and
                r.get("flush", "async") == "async" and not r.get("pace")]
    ours, theirs = mine("strata"), mine("rabbitmq-stream")
    if not ours or not theirs:
        return
    each, steady, cpu = [], [], []
    per = lambda r: r["broker_cpu_us_per_msg"] + r["client_cpu_us_per_msg"]   # noqa: E731
    for t in theirs:
        if "round" not in t:
            continue
        o = [r for r in ours if r.get("round") == t["round"] and
             r.get("producers") == t.get("beside_producers")]
        if not o:
            continue
        best = max(o, key=lambda r: r["msgs_per_s"])
        each.append(round(best["msgs_per_s"] / t["msgs_per_s"], 2))
        cpu.append(round(per(t) / per(best), 2) if per(best) > 0 else None)
        f = [x.get("msgs_per_s_from_first") for x in (best, t)]
        if all(f):
            steady.append(round(f[0] / f[1], 2))
    o, t = (max(x, key=lambda r: r["msgs_per_s"]) for x in (ours, theirs))
    median = statistics.median(each) if each else o["msgs_per_s"] / t["msgs_per_s"]
    emit(dict(op="ratio", what="consume", size=size, consumers=k, peer="rabbitmq-stream",
              ratio=round(median, 2), rounds=each, met_rounds=sum(x >= 2.0 for x in each),
              ratio_from_first=round(statistics.median(steady), 2) if steady else None,
              rounds_from_first=steady, rounds_cpu=cpu,
              goal=GOALS["rabbitmq-stream"], met=median >= 2.0,
              best_strata=o["msgs_per_s"], best_peer=t["msgs_per_s"],
              best_ratio=round(o["msgs_per_s"] / t["msgs_per_s"], 2),
              strata_backoff_ms=o.get("fetch_queue_backoff_ms")))


def json_lines(text: str):
    """The JSON objects of a peer script's output, one per line (other lines passed over)."""
    for line in text.splitlines():
        try:
            yield json.loads(line)
        except ValueError:
            continue


def rabbitmq_peer(messages: int, sizes: str, consumers: str = "1",
                  kinds: str = "classic,stream") -> list[dict]:
    """RabbitMQ classic (pika, persistent, confirms) and/or streams (rstream) through
    bench/rabbitmq_peer.py, which starts and stops its own node."""
    p = subprocess.run([sys.executable, str(Path(__file__).with_name("rabbitmq_peer.py")),
                        "--messages", str(messages), "--sizes", sizes,
                        "--consumers", consumers, "--kinds", kinds],
                       capture_output=True, text=True, timeout=1800)
    rows = []
    for row in json_lines(p.stdout):
        emit(row)
        rows.append(row)
    if p.returncode:
        emit(dict(system="rabbitmq", error=p.stderr[-500:]))
    return rows


def nats_peer(root: Path, sizes: str) -> list[dict]:
    """NATS JetStream through the shared peer script (its own nats-server), as rows of the
    same shape as strata's (op produce / consume, msgs_per_s)."""
    script = Path("/work/shared/peers/bench_nats_jetstream.py")
    work = "both" if "," in sizes else sizes
    p = subprocess.run([sys.executable, str(script), "--workload", work, "--dir",
                        str(root / "nats")], capture_output=True, text=True, timeout=900)
    rows = []
    for row in json_lines(p.stdout):
        if "publish_msgs_s" not in row:
            continue
        base = dict(system="nats-jetstream", peer=row.get("system"), size=row["size"],
                    messages=row["msgs"])
        for op, key in (("produce", "publish_msgs_s"), ("consume", "consume_ack_msgs_s")):
            if key in row:
                r = dict(base, op=op, msgs_per_s=row[key])
                emit(r)
                rows.append(r)
    if p.returncode:
        emit(dict(system="nats-jetstream", error=p.stderr[-500:]))
    return rows


if __name__ == "__main__":
    main()
