"""Broker benchmark: `strata serve` driven by the official RocketMQ Python client; JSON lines.

    python bench/broker.py [--messages N] [--size B] [--producers 1,8] [--flush async,sync]
                           [--message-groups 0,64] [--kinds normal,delay] [--delay-ms 2000]

For each flush mode and producer count a fresh store is served on 127.0.0.1 and
``--producers`` client processes (each its own HOME, as the client writes logs there) send
``--messages`` messages in total with ``send_async`` and a window of ``--window`` unanswered
sends each, then one SimpleConsumer process receives (batches of 32) and acks them all.
One JSON object per case:

* ``send``: msgs/s over all producers (first send to last answer), p50/p99 send latency
  (send_async to its answer, ms), and the broker's own count of ``put_batch`` calls: messages
  per put_batch is the group commit across clients (one fsync per put under ``--flush sync``).
* ``receive_ack``: msgs/s received and acked by one consumer.
* ``--message-groups G`` (a list; 0, the default, is normal messages): with G > 0 the
  messages are FIFO messages of G message groups (round-robin), so the topic is a FIFO topic
  and the receive case measures FIFO consumption (one message per group in flight).
* ``fsync``: this disk's fsync rate (4 KiB write + fdatasync in a loop, 2 s), so that
  ``put_batch/s`` under sync can be set against it.

``--kinds delay`` runs the same cases with delay messages, each due ``--delay-ms`` after its
send (held in the broker's ref-counted held store, then moved into the topic in batches while
the sends go on), beside the normal sends of the same run: ``send`` then also reports the
moves (``moved``, ``move_batches``, messages per move batch); ``receive_ack`` includes the
wait for the last messages to come due.

With 8 producer processes and a window of 256 each, some sends of the official client ended
CANCELLED on the client side while the broker logged nothing (not understood yet); the default
window is 32.

RabbitMQ on this machine (reference/peers.md, classic durable queue, persistent, publisher
confirms, pika): publish 100 B 17.3-17.5 k msgs/s, consume 33-37 k msgs/s. Run the peer with
its own script there for a same-run figure.
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

SMALL = ("segment_size=268435456", "index_slots=100000", "index_entries=400000")

PRODUCER = r'''
import json, os, sys, time, threading
from rocketmq import ClientConfiguration, Credentials, Message, Producer
endpoint, n, size, window = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
groups, delay_ms = int(sys.argv[5]), int(sys.argv[6])
creds = Credentials(os.environ.get("BENCH_AK", ""), os.environ.get("BENCH_SK", ""))
p = Producer(ClientConfiguration(endpoint, creds, request_timeout=30), ("bench",),
             tls_enable=bool(os.environ.get("BENCH_TLS")))
p.startup()
sem = threading.Semaphore(window)
lat = []
done = threading.Event()
left = [n]
lock = threading.Lock()
def sent(t0):
    def cb(f):
        f.result()
        with lock:
            lat.append(time.perf_counter() - t0)
            left[0] -= 1
            if left[0] == 0:
                done.set()
        sem.release()
    return cb
body = b"x" * size
print("READY", flush=True)
sys.stdin.readline()
t0 = time.perf_counter()
for i in range(n):
    sem.acquire()
    m = Message()
    m.topic = "bench"
    m.body = body
    if groups:
        m.message_group = f"g{i % groups}"
    if delay_ms:
        m.delivery_timestamp = int(time.time() * 1000) + delay_ms
    ts = time.perf_counter()
    p.send_async(m).add_done_callback(sent(ts))
done.wait()
el = time.perf_counter() - t0
p.shutdown()
print("RESULT " + json.dumps({"seconds": el, "lat": sorted(lat)}), flush=True)
'''

CONSUMER = r'''
import json, os, sys, time
from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer
endpoint, n = sys.argv[1], int(sys.argv[2])
creds = Credentials(os.environ.get("BENCH_AK", ""), os.environ.get("BENCH_SK", ""))
c = SimpleConsumer(ClientConfiguration(endpoint, creds, request_timeout=30), "bench-g",
                   {"bench": FilterExpression("*")}, await_duration=2,
                   tls_enable=bool(os.environ.get("BENCH_TLS")))
c.startup()
got = 0
t0 = time.perf_counter()
while got < n:
    ms = c.receive(32, 60)
    for m in ms:
        c.ack(m)
    got += len(ms)
el = time.perf_counter() - t0
c.shutdown()
print("RESULT " + json.dumps({"seconds": el, "n": got}), flush=True)
'''


def result(proc: subprocess.Popen) -> dict:
    out, _ = proc.communicate(timeout=600)
    for line in out.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(f"client failed: {out[-2000:]}")


def fsync_rate(directory: Path, seconds: float = 2.0) -> float:
    fd = os.open(directory / "fsync.probe", os.O_WRONLY | os.O_CREAT, 0o644)
    n, t0 = 0, time.perf_counter()
    try:
        while time.perf_counter() - t0 < seconds:
            os.pwrite(fd, b"x" * 4096, 0)
            os.fdatasync(fd)
            n += 1
    finally:
        os.close(fd)
        os.unlink(directory / "fsync.probe")
    return n / (time.perf_counter() - t0)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (all its threads), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def case(root: Path, flush: str, producers: int, messages: int, size: int,
         window: int, serve_args: tuple[str, ...] = (), client_env: dict | None = None,
         name: str = "", *, groups: int = 0, kind: str = "normal",
         delay_ms: int = 0) -> list[dict]:
    """One flush mode and producer count; ``serve_args`` go to `strata serve` and
    ``client_env`` (BENCH_AK, BENCH_SK, BENCH_TLS) to the client processes; ``groups``
    message groups make the messages FIFO ones (0: normal messages); ``kind`` "delay" sends
    delay messages due ``delay_ms`` after their send."""
    name = f"{name}-g{groups}" if groups else name
    name = f"{name}-{kind}" if kind != "normal" else name
    store = root / f"{flush}-{producers}{name}"
    cmd = [sys.executable, "-m", "strata.cli.main", "serve", str(store), "--listen",
           "127.0.0.1:0", "--flush", flush, "--exit-with-parent", *serve_args]
    for o in SMALL:
        cmd += ["--store-option", o]
    log_path = root / f"serve-{flush}-{producers}{name}.log"
    log = open(log_path, "w")
    server = subprocess.Popen(cmd, stderr=log, text=True)
    deadline = time.monotonic() + 60
    while not (m := re.search(r"listening on (\S+)", log_path.read_text())):
        if server.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"strata serve did not start: {log_path.read_text()}")
        time.sleep(0.05)
    endpoint = m.group(1)
    env = dict(os.environ, HOME=str(root / "home"), **(client_env or {}))
    each = messages // producers
    try:
        procs = [subprocess.Popen([sys.executable, "-c", PRODUCER, endpoint, str(each),
                                   str(size), str(window), str(groups),
                                   str(delay_ms if kind == "delay" else 0)],
                                  stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True, env=env)
                 for _ in range(producers)]
        for p in procs:
            assert p.stdout.readline().strip() == "READY"
        cpu0 = cpu_seconds(server.pid)
        t0 = time.perf_counter()
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        results = [result(p) for p in procs]
        wall = time.perf_counter() - t0
        cpu1 = cpu_seconds(server.pid)
        lat = sorted(x for r in results for x in r["lat"])
        consumer = subprocess.Popen([sys.executable, "-c", CONSUMER, endpoint,
                                     str(each * producers)], stdout=subprocess.PIPE,
                                    text=True, env=env)
        rc = result(consumer)
        cpu2 = cpu_seconds(server.pid)
    finally:
        server.terminate()
        server.wait(timeout=60)
        log.close()
    tail = log_path.read_text()
    if "stopped cleanly" not in tail:
        raise RuntimeError(f"strata serve: {tail[-3000:]}")
    m = re.search(r"(\d+) messages stored in (\d+) batches", tail)
    stored, batches = int(m.group(1)), int(m.group(2))
    m = re.search(r"(\d+) delay messages moved in (\d+) batches", tail)
    moved, moves = int(m.group(1)), int(m.group(2))
    total = each * producers
    send = {"bench": "broker", "case": "send", "kind": kind, "flush": flush,
            "producers": producers, "message_groups": groups, "size": size,
            "messages": total, "msgs_per_s": round(total / wall),
            "p50_ms": round(lat[len(lat) // 2] * 1000, 2),
            "p99_ms": round(lat[int(len(lat) * 0.99)] * 1000, 2),
            "put_batches": batches, "msgs_per_put_batch": round(stored / batches, 1),
            "put_batches_per_s": round(batches / wall),
            "server_cpu_us_per_msg": round((cpu1 - cpu0) / total * 1e6)}
    if kind == "delay":
        send.update(delay_ms=delay_ms, moved=moved, move_batches=moves,
                    msgs_per_move_batch=round(moved / moves, 1) if moves else 0)
    return [send,
            {"bench": "broker", "case": "receive_ack", "kind": kind, "flush": flush,
             "producers": producers, "message_groups": groups, "messages": rc["n"],
             "msgs_per_s": round(rc["n"] / rc["seconds"]),
             "server_cpu_us_per_msg": round((cpu2 - cpu1) / max(rc["n"], 1) * 1e6)}]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=20_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--window", type=int, default=32)
    ap.add_argument("--producers", default="1,8")
    ap.add_argument("--flush", default="async,sync")
    ap.add_argument("--message-groups", default="0",
                    help="0: normal messages; G > 0: FIFO messages of G message groups")
    ap.add_argument("--kinds", default="normal",
                    help="normal,delay: also delay messages, due --delay-ms after their send")
    ap.add_argument("--delay-ms", type=int, default=2000)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--keep", default=None, help="work in this directory and keep it (logs)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=a.dir) as tmp:
        root = Path(a.keep) if a.keep else Path(tmp)
        (root / "home").mkdir(parents=True, exist_ok=True)
        print(json.dumps({"bench": "broker", "case": "fsync",
                          "fsyncs_per_s": round(fsync_rate(root))}), flush=True)
        for flush in a.flush.split(","):
            for n in (int(x) for x in a.producers.split(",")):
                runs = [(g, "normal") for g in (int(x) for x in a.message_groups.split(","))]
                runs += [(0, k) for k in a.kinds.split(",") if k != "normal"]
                for g, kind in runs:      # delay messages carry no message group
                    for row in case(root, flush, n, a.messages, a.size, a.window, groups=g,
                                    kind=kind, delay_ms=a.delay_ms):
                        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
