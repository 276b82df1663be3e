"""Kafka listener benchmark: `strata serve --kafka` driven by confluent-kafka producers
(acks=all) and a consumer, each in its own process; JSON lines.

    python bench/kafka_broker.py [--messages N] [--sizes 100,1024] [--producers 1,4]
                          [--flush async,sync] [--partitions P] [--profile SECONDS]
                          [--peers nats]

For each flush mode, size and producer count a fresh store is served on 127.0.0.1; the
producers send ``--messages`` messages in total (``linger.ms`` 5, acks=all, no
compression: the broker's own work is measured), then one consumer reads them all with
assign() from the beginning. Rows: ``op`` produce/consume, ``msgs_per_s`` (wall time from
the first producer's start to the last one's flush, or of the consumer's reading),
``broker_cpu_us_per_msg`` (the server process's user+system CPU over the phase, from
/proc, divided by the messages) and ``mib_per_s``. ``--profile S`` records the broker with
py-spy for S seconds of the produce phase and prints a row ``op: profile`` with the
functions its samples were in (self time, percent), to see what limits it.

``--peers nats`` also runs NATS JetStream (file storage, nats-py's async publish with a
window of 1000 PubAcks, pull consumer) in the same run through the shared peer script
/work/shared/peers/bench_nats_jetstream.py (Debian's nats-server; ``pip install nats-py``),
and relays its rows tagged ``"system": "nats-jetstream"``; read the two side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PRODUCER = r'''
import sys, time, json
from confluent_kafka import Producer
boot, topic, n, size, parts = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
p = Producer({"bootstrap.servers": boot, "acks": "all", "linger.ms": 5,
              "batch.size": 1000000, "queue.buffering.max.messages": 1000000,
              "enable.idempotence": False})
body = b"x" * size
errs = [0]
def cb(e, m):
    if e is not None:
        errs[0] += 1
print("READY", flush=True)
sys.stdin.readline()
t0 = time.time()
for i in range(n):
    while True:
        try:
            p.produce(topic, body, partition=i % parts, on_delivery=cb)
            break
        except BufferError:
            p.poll(0.01)
    if i % 1000 == 0:
        p.poll(0)
left = p.flush(300)
print("RESULT " + json.dumps({"t0": t0, "t1": time.time(), "errors": errs[0], "left": left}), flush=True)
'''

CONSUMER = r'''
import sys, time, json
from confluent_kafka import Consumer, TopicPartition
boot, topic, n, parts = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
c = Consumer({"bootstrap.servers": boot, "group.id": "bench", "enable.auto.commit": False,
              "fetch.max.bytes": 52428800, "max.partition.fetch.bytes": 10485760,
              "queued.max.messages.kbytes": 1048576})
c.assign([TopicPartition(topic, p, 0) for p in range(parts)])
got = 0
t0 = time.time()
while got < n and time.time() - t0 < 300:
    for m in c.consume(10000, 1.0):
        if not m.error():
            got += 1
print("RESULT " + json.dumps({"t0": t0, "t1": time.time(), "n": got}), flush=True)
c.close()
'''

SMALL = ("index_slots=65536", "index_entries=262144", "prefault=false")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def top_frames(folded: Path, n: int = 12) -> list:
    """The functions the broker spent its samples in (self time), from py-spy's folded
    stacks: [[function (file:line), percent of samples], ...], most first."""
    counts: dict[str, int] = {}
    total = 0
    try:
        lines = folded.read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        stack, _, k = line.rpartition(" ")
        if not k.isdigit():
            continue
        leaf = stack.rsplit(";", 1)[-1]
        counts[leaf] = counts.get(leaf, 0) + int(k)
        total += int(k)
    return [[f, round(100 * c / total, 1)]
            for f, c in sorted(counts.items(), key=lambda x: -x[1])[:n]] if total else []


def emit(row: dict) -> None:
    print(json.dumps(row), flush=True)


def result(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate(timeout=600)
    for line in out.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(f"client failed: {out[-2000:]} {err[-3000:]}")


def case(root: Path, flush: str, size: int, producers: int, messages: int, parts: int,
         profile: float) -> None:
    store = root / f"store-{flush}-{size}-{producers}"
    cmd = [sys.executable, "-m", "strata.cli.main", "serve", str(store), "--kafka",
           "127.0.0.1:0", "--flush", flush, "--exit-with-parent"]
    for o in SMALL:
        cmd += ["--store-option", o]
    server = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                              text=True)
    boot = None
    while boot is None:
        line = server.stderr.readline()
        if not line:
            raise RuntimeError("strata serve did not start")
        m = re.search(r"([\d.]+:\d+) \(kafka\)", line)
        boot = m.group(1) if m else None
    topic = "bench"
    subprocess.run([sys.executable, "-c", f'''
from confluent_kafka.admin import AdminClient, NewTopic
a = AdminClient({{"bootstrap.servers": "{boot}"}})
[f.result(30) for f in a.create_topics([NewTopic("{topic}", {parts}, 1)]).values()]
'''], check=True, timeout=60)
    each = messages // producers
    procs = [subprocess.Popen([sys.executable, "-c", PRODUCER, boot, topic, str(each),
                               str(size), str(parts)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(producers)]
    for p in procs:
        assert p.stdout.readline().startswith("READY")
    spy = None
    if profile:
        folded = root / f"profile-{flush}-{size}-{producers}.txt"
        spy = subprocess.Popen(["py-spy", "record", "-p", str(server.pid), "-d", str(profile),
                                "-o", str(folded), "--format", "raw", "--nonblocking",
                                "--threads"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    cpu0 = cpu_seconds(server.pid)
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    res = [result(p) for p in procs]
    cpu1 = cpu_seconds(server.pid)
    sent = each * producers
    el = max(r["t1"] for r in res) - min(r["t0"] for r in res)
    tag = dict(system="strata", flush=flush, size=size, producers=producers, partitions=parts)
    emit(dict(tag, op="produce", messages=sent, seconds=round(el, 3),
              msgs_per_s=round(sent / el), mib_per_s=round(sent * size / el / 2**20, 1),
              broker_cpu_us_per_msg=round((cpu1 - cpu0) / sent * 1e6, 2),
              errors=sum(r["errors"] + r["left"] for r in res)))
    if spy is not None:
        spy.wait(timeout=profile + 60)
        top = top_frames(folded)
        emit(dict(tag, op="profile", top=top) if top else
             dict(tag, op="profile", error="py-spy took no samples (in a container it may "
                  "lack ptrace rights or fail to read the interpreter's version)"))
    cpu0 = cpu_seconds(server.pid)
    c = subprocess.Popen([sys.executable, "-c", CONSUMER, boot, topic, str(sent), str(parts)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    r = result(c)
    cpu1 = cpu_seconds(server.pid)
    el = r["t1"] - r["t0"]
    emit(dict(tag, op="consume", messages=r["n"], seconds=round(el, 3),
              msgs_per_s=round(r["n"] / el), mib_per_s=round(r["n"] * size / el / 2**20, 1),
              broker_cpu_us_per_msg=round((cpu1 - cpu0) / max(1, r["n"]) * 1e6, 2)))
    server.terminate()
    server.wait(timeout=60)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--sizes", default="100,1024")
    ap.add_argument("--producers", default="1,4")
    ap.add_argument("--flush", default="async,sync")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--profile", type=float, default=0.0)
    ap.add_argument("--peers", default="")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="strata-kafka-bench-") as tmp:
        for flush in a.flush.split(","):
            for size in map(int, a.sizes.split(",")):
                for producers in map(int, a.producers.split(",")):
                    case(Path(tmp), flush, size, producers, a.messages, a.partitions,
                         a.profile)
        if "nats" in a.peers.split(","):
            nats_peer(Path(tmp), a.sizes)


def nats_peer(root: Path, sizes: str) -> None:
    script = Path("/work/shared/peers/bench_nats_jetstream.py")
    work = "both" if "," in sizes else sizes
    p = subprocess.run([sys.executable, str(script), "--workload", work, "--dir",
                        str(root / "nats")], capture_output=True, text=True, timeout=900)
    for line in p.stdout.splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        emit({**row, "system": "nats-jetstream", "peer": row.get("system")})
    if p.returncode:
        emit(dict(system="nats-jetstream", error=p.stderr[-500:]))


if __name__ == "__main__":
    main()
