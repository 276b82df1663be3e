"""Broker benchmark: `strata serve` driven by the official RocketMQ Python client against
RabbitMQ driven by pika, in the same run; JSON lines.

    python bench/broker.py [--messages N] [--size B] [--producers 1,8] [--flush async,sync]
                           [--message-groups 0,64] [--kinds normal,delay] [--delay-ms 2000]
                           [--before-src DIR] [--floor] [--rounds R] [--no-rabbitmq]
                           [--no-install]

strata: for each flush mode and producer count a fresh store is served on 127.0.0.1 and
``--producers`` client processes (each its own HOME, as the client writes logs there) send
``--messages`` messages in total with ``send_async`` and a window of ``--window`` unanswered
sends each, then one SimpleConsumer process receives (batches of 32) and acks them all
(the acks of a batch from 8 threads: one ack RPC per message, as the client makes them, but
not one round trip after another; the client's ``ack_async`` is broken in 5.1.2).
``--before-src DIR`` serves each case a second time from another source tree (e.g. a
checkout of an older commit's ``src``), interleaved, so a change is judged in one run.

``--message-groups G`` (a list; 0, the default, is normal messages): with G > 0 the
producers send FIFO messages of G message groups (``g{i % G}``, round-robin), so the topic is
a FIFO topic and ``receive_ack`` measures FIFO consumption (one message per group in flight).
``--kinds delay`` runs the same cases with delay messages, each due ``--delay-ms`` after its
send (held in the broker's ref-counted held store, then moved into the topic in batches while
the sends go on); ``send`` then also reports the moves (``moved``, ``move_batches``,
``msgs_per_move_batch``, from the broker's stop line) and ``receive_ack`` includes the wait
for the last messages to come due. The client refuses a message with both a message group and
a delivery time, so delay cases run with 0 message groups only. Every case gets a fresh store
(a topic's message type is fixed by its first message); strata rows carry ``message_groups``
and ``kind``, and only normal cases with 0 message groups are set against RabbitMQ.
The client scripts read ``BENCH_AK`` / ``BENCH_SK`` (credentials, for ``--acl``) and
``BENCH_TLS`` (non-empty: TLS) from the environment (bench/broker_security.py sets them).

``--floor``: per producer count, the same official-client producers and consumer against
bench/broker_floor.py, which is ``strata serve`` (same CLI, grpc.aio server, uvloop, routes,
heartbeats, telemetry settings) with SendMessage, ReceiveMessage and AckMessage replaced by
answers that do no storage work (OK with the client's message id; messages pre-built in
memory, as many as were sent; OK for every ack). Its rows (``"system": "floor"``) are what a
broker that stores nothing costs with these clients on this machine: the official client's
and gRPC's share. ``--rounds R`` repeats every case R times in one run (rows carry
``round``; ratios pair rows of the same round).

RabbitMQ: Debian's ``rabbitmq-server`` (``apt-get install -y rabbitmq-server`` when it is
missing and we are root, unless ``--no-install``), started on 127.0.0.1 with free ports and
its own temporary dirs, stopped at the end. ``--producers`` pika processes publish
persistent messages to a classic durable queue with publisher confirms (a confirm means the
message is on disk) and the same window of unconfirmed messages; one consumer receives with
prefetch 32 and acks each message. It is started once, and each producer count's RabbitMQ
case runs right after that count's strata (and floor) cases of the first flush mode, so the
systems compared meet the same moment of a shared machine. If it cannot be installed or
started, a JSON line says why and the strata cases go on.

One JSON object per case (``"system"`` says whose; strata rows with ``"client"`` come from
the raw case: the protocol stubs, 32 messages per SendMessage, 8 requests in flight):

* ``fsync``: this disk's fsync rate (4 KiB write + fdatasync in a loop, 2 s), at the start
  and again right before each sync case (the shared disk's rate drifts a lot).
* ``send``: msgs/s over all producers (first send to last answer), p50/p99 send latency
  (send to its answer or confirm, ms). strata also: CPU ms per message of the broker process
  and of the client processes, and the broker's count of ``put_batch`` calls. The broker puts
  on one writer thread and under ``--flush sync`` each put returns after the fsync that covers
  it, so there ``msgs_per_put_batch`` is messages per fsync and ``fsync_share`` is the
  broker's fsyncs/s over the disk's fsync rate measured above.
* ``receive_ack``: msgs/s received and acked by one consumer; CPU ms per message of the
  server and of the consumer process (over its receive loop).
* both: ``cpu_ceiling_msgs_per_s``, the machine's cores ÷ (server + client CPU per
  message): the rate if server and clients had every core and nothing else ran.
* ``ratio``: strata ÷ RabbitMQ and (with ``--floor``) strata ÷ floor msgs/s per case; for
  floor rows floor ÷ RabbitMQ, and the floor's CPU ceiling ÷ RabbitMQ's measured rate.

With 8 producer processes and a window of 256 each, some sends of the official client ended
CANCELLED on the client side while the broker logged nothing (not understood yet); the default
window is 32.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from rabbitmq_peer import SERVER as RABBIT_SERVER, Node as RabbitNode  # noqa: E402

SMALL = ("segment_size=268435456", "index_slots=100000", "index_entries=400000")
CORES = os.cpu_count() or 1
FLOOR_SERVER = Path(__file__).resolve().parent / "broker_floor.py"

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
c0 = os.times()
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
c1 = os.times()
p.shutdown()
print("RESULT " + json.dumps({"seconds": el, "lat": sorted(lat),
      "cpu": c1.user + c1.system - c0.user - c0.system}), flush=True)
'''

# Not the official client's API: the protocol's stubs (shipped with it), 32 messages per
# SendMessage, which the client never sends but the broker stores with one put_batch; the
# broker's own ceiling without one gRPC call per message
RAW_BATCH_PRODUCER = r'''
import asyncio, json, os, sys, time
import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb, service_pb2 as svc
from rocketmq.grpc_protocol.service_pb2_grpc import MessagingServiceStub
endpoint, n, size, window, per = (sys.argv[1], int(sys.argv[2]), int(sys.argv[3]),
                                  int(sys.argv[4]), int(sys.argv[5]))
def request(i, count):
    msgs = []
    for j in range(count):
        m = pb.Message(topic=pb.Resource(name="bench"), body=b"x" * size)
        m.system_properties.message_id = f"raw-{os.getpid()}-{i}-{j}"
        m.system_properties.message_type = pb.MessageType.NORMAL
        m.system_properties.born_timestamp.seconds = int(time.time())
        msgs.append(m)
    return svc.SendMessageRequest(messages=msgs)
async def main():
    stub = MessagingServiceStub(grpc.aio.insecure_channel(endpoint))
    md = [("x-mq-client-id", f"raw-{os.getpid()}")]
    counts = [per] * (n // per) + ([n % per] if n % per else [])
    reqs = [request(i, c) for i, c in enumerate(counts)]
    print("READY", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    sem, lat = asyncio.Semaphore(window), []
    async def one(r):
        async with sem:
            t = time.perf_counter()
            resp = await stub.SendMessage(r, metadata=md, timeout=60)
            assert resp.status.code == 20000, resp.status
            lat.extend([time.perf_counter() - t] * len(r.messages))
    c0 = os.times()
    t0 = time.perf_counter()
    await asyncio.gather(*(one(r) for r in reqs))
    el = time.perf_counter() - t0
    c1 = os.times()
    print("RESULT " + json.dumps({"seconds": el, "lat": sorted(lat),
          "cpu": c1.user + c1.system - c0.user - c0.system}), flush=True)
asyncio.run(main())
'''

CONSUMER = r'''
import json, os, sys, time
from concurrent.futures import ThreadPoolExecutor
from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer
endpoint, n = sys.argv[1], int(sys.argv[2])
pool = ThreadPoolExecutor(8)
creds = Credentials(os.environ.get("BENCH_AK", ""), os.environ.get("BENCH_SK", ""))
c = SimpleConsumer(ClientConfiguration(endpoint, creds, request_timeout=30), "bench-g",
                   {"bench": FilterExpression("*")}, await_duration=2,
                   tls_enable=bool(os.environ.get("BENCH_TLS")))
c.startup()
got = 0
c0 = os.times()
t0 = time.perf_counter()
while got < n:
    ms = c.receive(32, 60)
    # the batch's acks in flight together, from 8 threads: ack_async of client 5.1.2
    # returns None, and the future inside it fails with InvalidStateError
    list(pool.map(c.ack, ms))
    got += len(ms)
el = time.perf_counter() - t0
c1 = os.times()
c.shutdown()
print("RESULT " + json.dumps({"seconds": el, "n": got,
      "cpu": c1.user + c1.system - c0.user - c0.system}), flush=True)
'''

RABBIT_PRODUCER = r'''
import json, os, sys, time
import pika
port, queue, n, size, window = (int(sys.argv[1]), sys.argv[2], int(sys.argv[3]),
                                int(sys.argv[4]), int(sys.argv[5]))
body = b"x" * size
props = pika.BasicProperties(delivery_mode=2)          # persistent
state = {"sent": 0, "acked": 0, "nacked": 0}
born = {}
lat = []
def on_confirm(frame):
    m = frame.method
    now = time.perf_counter()
    # born holds the unconfirmed tags in order; multiple=True confirms every tag up to this one
    tags = [t for t in born if t <= m.delivery_tag] if m.multiple else [m.delivery_tag]
    for tag in tags:
        t = born.pop(tag, None)
        if t is not None:
            lat.append(now - t)
            if isinstance(m, pika.spec.Basic.Nack):
                state["nacked"] += 1
    state["acked"] = len(lat)
    if state["acked"] >= n:
        state["t1"] = now
        conn.close()
    else:
        pump()
def pump():
    while state["sent"] < n and state["sent"] - state["acked"] < window:
        state["sent"] += 1
        born[state["sent"]] = time.perf_counter()
        ch.basic_publish("", queue, body, props)
def on_channel(c):
    global ch
    ch = c
    def go(_frame):
        print("READY", flush=True)
        sys.stdin.readline()
        state["c0"] = os.times()
        state["t0"] = time.perf_counter()
        pump()
    ch.confirm_delivery(on_confirm, callback=go)
conn = pika.SelectConnection(pika.ConnectionParameters("127.0.0.1", port),
                             on_open_callback=lambda c: c.channel(on_open_callback=on_channel),
                             on_open_error_callback=lambda c, e: c.ioloop.stop(),
                             on_close_callback=lambda c, r: c.ioloop.stop())
conn.ioloop.start()
c1 = os.times()
c0 = state["c0"]
print("RESULT " + json.dumps({"seconds": state["t1"] - state["t0"], "lat": sorted(lat),
      "nacked": state["nacked"], "cpu": c1.user + c1.system - c0.user - c0.system}),
      flush=True)
'''

RABBIT_CONSUMER = r'''
import json, os, sys, time
import pika
port, queue, n = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
ch = conn.channel()
ch.basic_qos(prefetch_count=32)
got = [0]
def on_msg(c, method, props, body):
    c.basic_ack(method.delivery_tag)
    got[0] += 1
    if got[0] >= n:
        c.stop_consuming()
c0 = os.times()
t0 = time.perf_counter()
ch.basic_consume(queue, on_msg, auto_ack=False)
ch.start_consuming()
el = time.perf_counter() - t0
c1 = os.times()
conn.close()
print("RESULT " + json.dumps({"seconds": el, "n": got[0],
      "cpu": c1.user + c1.system - c0.user - c0.system}), flush=True)
'''


def emit(row: dict) -> dict:
    print(json.dumps(row), flush=True)
    return row


def result(proc: subprocess.Popen) -> dict:
    out, _ = proc.communicate(timeout=900)
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
    """User + system CPU of a running process (from /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(lat: list[float], q: float) -> float:
    return round(lat[min(len(lat) - 1, int(len(lat) * q))] * 1000, 2)


def drive(producer_cmd: list[str], consumer_cmd: list[str], producers: int, env: dict,
          server_pid: int | None) -> dict:
    """Start the producer processes, let them go together, then one consumer. Returns the
    send wall time, sorted latencies, producers' CPU, the consumer's result and the server
    process's CPU seconds over the sends and over the receives (None without a pid)."""
    procs = [subprocess.Popen(producer_cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, env=env) for _ in range(producers)]
    try:
        for p in procs:
            line = p.stdout.readline().strip()
            if line != "READY":
                raise RuntimeError(f"producer did not start: {line}{p.stdout.read()[-2000:]}")
        s0 = cpu_seconds(server_pid) if server_pid else 0.0
        t0 = time.perf_counter()
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        results = [result(p) for p in procs]
        wall = time.perf_counter() - t0
        s1 = cpu_seconds(server_pid) if server_pid else 0.0
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    consumer = subprocess.Popen(consumer_cmd, stdout=subprocess.PIPE, text=True, env=env)
    rc = result(consumer)
    s2 = cpu_seconds(server_pid) if server_pid else 0.0
    return {"wall": wall, "lat": sorted(x for r in results for x in r["lat"]),
            "client_cpu": sum(r["cpu"] for r in results), "consumer": rc,
            "server_send_cpu": s1 - s0 if server_pid else None,
            "server_receive_cpu": s2 - s1 if server_pid else None,
            "nacked": sum(r.get("nacked", 0) for r in results)}


def rows(tag: dict, d: dict, size: int, window: int, total: int) -> tuple[dict, dict]:
    """The send and receive_ack rows common to both systems."""
    send = {**tag, "case": "send", "size": size, "window": window, "messages": total,
            "msgs_per_s": round(total / d["wall"]), "p50_ms": pct(d["lat"], 0.5),
            "p99_ms": pct(d["lat"], 0.99),
            "server_cpu_ms_per_msg": round(d["server_send_cpu"] / total * 1000, 3),
            "client_cpu_ms_per_msg": round(d["client_cpu"] / total * 1000, 3)}
    rc = d["consumer"]
    recv = {**tag, "case": "receive_ack", "messages": rc["n"],
            "msgs_per_s": round(rc["n"] / rc["seconds"]),
            "server_cpu_ms_per_msg": round(d["server_receive_cpu"] / max(rc["n"], 1) * 1000, 3)}
    if "cpu" in rc:     # the consumer's CPU over its receive loop
        recv["client_cpu_ms_per_msg"] = round(rc["cpu"] / max(rc["n"], 1) * 1000, 3)
    for r in (send, recv):
        # what server + clients' CPU per message allows if they had every core to themselves
        if "client_cpu_ms_per_msg" in r:
            both = r["server_cpu_ms_per_msg"] + r["client_cpu_ms_per_msg"]
            if both > 0:
                r["cpu_ceiling_msgs_per_s"] = round(CORES * 1000 / both)
    return send, recv


# ---------------------------------------------------------------------------- strata

def strata_case(root: Path, flush: str, producers: int, messages: int, size: int,
                window: int, fsyncs_per_s: float | None, src: str | None = None,
                label: str | None = None, per_request: int = 0,
                profile: Path | None = None, groups: int = 0, kind: str = "normal",
                delay_ms: int = 0, serve_args: tuple[str, ...] = (),
                client_env: dict | None = None, suffix: str = "",
                floor: bool = False) -> list[dict]:
    """One served store, official-client producers then a consumer; ``src`` serves from
    another source tree (its rows carry ``"src": label``); ``per_request``: raw producers
    putting that many messages into each SendMessage instead; ``profile``: a directory for
    py-spy's flame graph of the broker over the whole case. ``groups`` > 0: FIFO messages of
    that many message groups; ``kind`` "delay": each message due ``delay_ms`` after its send.
    ``serve_args`` go to `strata serve`, ``client_env`` (BENCH_AK, BENCH_SK, BENCH_TLS, ...)
    to the client processes, ``suffix`` to the store's and log's names.
    ``fsyncs_per_s`` (None: not measured) only sets ``fsync_share`` under sync flush.
    ``floor``: serve with bench/broker_floor.py instead (strata serve whose SendMessage,
    ReceiveMessage and AckMessage do no storage work); rows with ``"system": "floor"``."""
    if kind not in ("normal", "delay"):
        raise ValueError(f"kind {kind!r}: normal or delay")
    if kind == "delay" and groups:
        raise ValueError("a message cannot have both a message group and a delivery time")
    if floor and (groups or kind != "normal" or per_request):
        raise ValueError("the floor answers normal sends of the official client only")
    name = (f"{label or ('floor' if floor else 'strata')}-{flush}-{producers}{'-raw' if per_request else ''}"
            f"{f'-g{groups}' if groups else ''}{'-delay' if kind == 'delay' else ''}{suffix}")
    store = root / name
    entry = [str(FLOOR_SERVER)] if floor else ["-m", "strata.cli.main"]
    cmd = [sys.executable, *entry, "serve", str(store), "--listen",
           "127.0.0.1:0", "--flush", flush, "--exit-with-parent", *serve_args]
    for o in SMALL:
        cmd += ["--store-option", o]
    log_path = root / f"serve-{name}.log"
    log = open(log_path, "w")
    senv = dict(os.environ, BENCH_FLOOR_SIZE=str(size))
    if src is not None:
        senv["PYTHONPATH"] = src
    server = subprocess.Popen(cmd, stderr=log, text=True, env=senv)
    deadline = time.monotonic() + 60
    while not (m := re.search(r"listening on (\S+)", log_path.read_text())):
        if server.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"strata serve did not start: {log_path.read_text()}")
        time.sleep(0.05)
    endpoint = m.group(1)
    env = dict(os.environ, HOME=str(root / "home"), **(client_env or {}))
    each = messages // producers
    spy = None
    if profile is not None:
        profile.mkdir(parents=True, exist_ok=True)
        beside = Path(sys.executable).parent / "py-spy"      # the venv's, if it is there
        spy = subprocess.Popen([str(beside) if beside.exists() else "py-spy", "record",
                                "--nonblocking", "--gil", "-p", str(server.pid), "-o",
                                str(profile / f"{name}.svg")],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        producer = [sys.executable, "-c", PRODUCER, endpoint, str(each), str(size),
                    str(window), str(groups), str(delay_ms if kind == "delay" else 0)]
        if per_request:
            producer = [sys.executable, "-c", RAW_BATCH_PRODUCER, endpoint, str(each),
                        str(size), str(window), str(per_request)]
        d = drive(producer, [sys.executable, "-c", CONSUMER, endpoint, str(each * producers)],
                  producers, env, server.pid)
    finally:
        if spy is not None:
            spy.send_signal(signal.SIGINT)    # py-spy writes its flame graph and exits
            spy.wait(timeout=60)
        server.terminate()
        server.wait(timeout=60)
        log.close()
    tail = log_path.read_text()
    if "stopped cleanly" not in tail:
        raise RuntimeError(f"strata serve: {tail[-3000:]}")
    total = each * producers
    if floor:
        m = re.search(r"floor: (\d+) sends answered, (\d+) messages served, (\d+) acks", tail)
        if m is None or int(m.group(1)) != total or int(m.group(3)) != total:
            raise RuntimeError(f"floor server: {tail[-1000:]}")
        tag = {"bench": "broker", "system": "floor",
               "server": "strata serve without storage work (bench/broker_floor.py)",
               "producers": producers}
        return list(rows(tag, d, size, window, total))
    # the stop line groups thousands ("3,000 messages stored in 1,336 batches")
    m = re.search(r"([\d,]+) messages? stored in ([\d,]+) batch", tail)
    stored, batches = _count(m.group(1)), _count(m.group(2))
    tag = {"bench": "broker", "system": "strata", "flush": flush, "producers": producers,
           "message_groups": groups, "kind": kind}
    if per_request:
        tag["client"] = f"raw stubs, {per_request} messages per SendMessage"
    if label is not None:
        tag["src"] = label
    send, recv = rows(tag, d, size, window, total)
    send.update(put_batches=batches, msgs_per_put_batch=round(stored / batches, 1),
                put_batches_per_s=round(batches / d["wall"]))
    if kind == "delay":
        m = re.search(r"([\d,]+) delay messages? moved in ([\d,]+) batch", tail)
        if m is None:
            raise RuntimeError(f"strata serve: no delay move count in {tail[-1000:]}")
        moved, moves = _count(m.group(1)), _count(m.group(2))
        send.update(delay_ms=delay_ms, moved=moved, move_batches=moves,
                    msgs_per_move_batch=round(moved / moves, 1) if moves else 0)
    if flush == "sync":    # one writer thread: each put returns after its own fsync
        send["msgs_per_fsync"] = send["msgs_per_put_batch"]
        if fsyncs_per_s:
            send["fsync_share"] = round(batches / d["wall"] / fsyncs_per_s, 3)
    return [send, recv]


# ---------------------------------------------------------------------------- RabbitMQ

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listener_pid(port: int) -> int | None:
    out = subprocess.run(["ss", "-ltnpH", f"sport = :{port}"], capture_output=True,
                         text=True).stdout
    m = re.search(r"pid=(\d+)", out)
    return int(m.group(1)) if m else None


class Rabbit:
    """A RabbitMQ node of our own on 127.0.0.1 (AMQP only): bench/rabbitmq_peer.py's
    ``Node`` (free ports, data, logs and HOME under ``directory``, stopped by the pids of
    our node), plus the broker version and the beam process whose CPU this bench reads."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.node: RabbitNode | None = None
        self.port: int | None = None
        self.beam: int | None = None
        self.version = "?"

    def start(self) -> None:
        self.node = RabbitNode(self.dir, stream=False)
        self.port = self.node.amqp
        import pika
        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", self.port))
        v = conn._impl.server_properties.get("version", b"?")
        self.version = v.decode() if isinstance(v, bytes) else str(v)
        conn.close()
        self.beam = listener_pid(self.port)

    def queue(self, name: str) -> None:
        import pika
        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", self.port))
        ch = conn.channel()
        ch.queue_delete(name)
        ch.queue_declare(name, durable=True)      # a classic durable queue
        conn.close()

    def stop(self) -> None:
        if self.node is not None:
            self.node.stop()
            self.node = None


def rabbit_unavailable(install: bool) -> str | None:
    """Why RabbitMQ cannot be measured here, or None (installing it first if allowed)."""
    try:
        import pika  # noqa: F401
    except ImportError:
        return "pika is not installed (pip install -e '.[bench]')"
    if not os.path.exists(RABBIT_SERVER):
        if not install:
            return f"{RABBIT_SERVER} is missing and --no-install was given"
        if os.geteuid() != 0 or shutil.which("apt-get") is None:
            return f"{RABBIT_SERVER} is missing and apt-get cannot be run here (not root)"
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        p = subprocess.run(["apt-get", "install", "-y", "-q", "rabbitmq-server"],
                           capture_output=True, text=True, env=env)
        if p.returncode != 0:
            subprocess.run(["apt-get", "update", "-q"], capture_output=True, env=env)
            p = subprocess.run(["apt-get", "install", "-y", "-q", "rabbitmq-server"],
                               capture_output=True, text=True, env=env)
        if p.returncode != 0 or not os.path.exists(RABBIT_SERVER):
            return f"apt-get install rabbitmq-server failed: {p.stderr.strip()[-300:]}"
    return None


def rabbit_case(rabbit: Rabbit, root: Path, producers: int, messages: int, size: int,
                window: int) -> list[dict]:
    queue = f"bench-{producers}"
    rabbit.queue(queue)
    each = messages // producers
    env = dict(os.environ, HOME=str(root / "home"))
    d = drive([sys.executable, "-c", RABBIT_PRODUCER, str(rabbit.port), queue, str(each),
               str(size), str(window)],
              [sys.executable, "-c", RABBIT_CONSUMER, str(rabbit.port), queue,
               str(each * producers)], producers, env, rabbit.beam)
    tag = {"bench": "broker", "system": "rabbitmq", "version": rabbit.version,
           "queue": "classic durable, persistent, publisher confirms", "producers": producers}
    send, recv = rows(tag, d, size, window, each * producers)
    send["nacked"] = d["nacked"]
    return [send, recv]


def _count(text: str) -> int:
    """A count as strata's stop line prints it ("1,336")."""
    return int(text.replace(",", ""))


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
                    help="normal and/or delay (each message due --delay-ms after its send)")
    ap.add_argument("--delay-ms", type=int, default=2000)
    ap.add_argument("--before-src", default=None,
                    help="also serve every strata case from this source tree (\"before\")")
    ap.add_argument("--floor", action="store_true",
                    help="also the floor: the same clients against strata serve without "
                         "storage work (bench/broker_floor.py), per producer count")
    ap.add_argument("--rounds", type=int, default=1,
                    help="repeat every case this many times, interleaved (rows carry round)")
    ap.add_argument("--no-rabbitmq", action="store_true", help="strata only")
    ap.add_argument("--no-batched", dest="batched", action="store_false",
                    help="skip the raw case of 32 messages per SendMessage")
    ap.add_argument("--no-install", action="store_true",
                    help="do not apt-get install rabbitmq-server when it is missing")
    ap.add_argument("--profile", type=Path, default=None, metavar="DIR",
                    help="py-spy flame graphs (GIL holder) of the broker per case into DIR")
    ap.add_argument("--dir", default=None)
    ap.add_argument("--keep", default=None, help="work in this directory and keep it (logs)")
    a = ap.parse_args()
    counts = [int(x) for x in a.producers.split(",")]
    groups = [int(x) for x in a.message_groups.split(",")]
    kinds = a.kinds.split(",")
    flushes = a.flush.split(",")
    if any(k not in ("normal", "delay") for k in kinds):
        ap.error("--kinds: normal and/or delay")
    # the client refuses a message with both a message group and a delivery time
    cases = [(g, k) for g in groups for k in kinds if not (k == "delay" and g)]
    with tempfile.TemporaryDirectory(dir=a.dir) as tmp:
        root = Path(a.keep) if a.keep else Path(tmp)
        (root / "home").mkdir(parents=True, exist_ok=True)
        disk = fsync_rate(root)
        emit({"bench": "broker", "case": "fsync", "fsyncs_per_s": round(disk)})
        if len(cases) < len(groups) * len(kinds):
            emit({"bench": "broker", "case": "skipped", "kind": "delay",
                  "message_groups": [g for g in groups if g],
                  "why": "a message cannot have both a message group and a delivery time"})
        # RabbitMQ runs beside strata (and the floor) per producer count, so that the three
        # see the same moment of a shared machine
        rabbit = None
        if not a.no_rabbitmq:
            why = rabbit_unavailable(not a.no_install)
            if why is not None:
                emit({"bench": "broker", "system": "rabbitmq", "case": "skipped", "why": why})
            else:
                rabbit = Rabbit(root / "rabbitmq")
                try:
                    rabbit.start()
                except Exception as exc:   # noqa: BLE001 - a peer that fails is reported
                    emit({"bench": "broker", "system": "rabbitmq", "case": "failed",
                          "why": f"{type(exc).__name__}: {exc}"[:600]})
                    rabbit.stop()
                    rabbit = None
        out: list[dict] = []

        def keep(row: dict, rnd: int) -> None:
            if a.rounds > 1:
                row["round"] = rnd
            out.append(emit(row))

        try:
            for rnd in range(1, a.rounds + 1):
                for fi, flush in enumerate(flushes):
                    for n in counts:
                        if flush == "sync":   # the disk's rate drifts: measure it beside the case
                            disk = fsync_rate(root)
                            emit({"bench": "broker", "case": "fsync",
                                  "fsyncs_per_s": round(disk), "before": f"sync, {n} producers"})
                        sfx = f"-r{rnd}" if a.rounds > 1 else ""
                        for g, kind in cases:
                            more = {"groups": g, "kind": kind, "delay_ms": a.delay_ms,
                                    "suffix": sfx}
                            if a.before_src:
                                for r in strata_case(root, flush, n, a.messages, a.size,
                                                     a.window, disk,
                                                     os.path.abspath(a.before_src), "before",
                                                     **more):
                                    keep(r, rnd)
                                label = "after"
                            else:
                                label = None
                            for r in strata_case(root, flush, n, a.messages, a.size, a.window,
                                                 disk, None, label, profile=a.profile, **more):
                                keep(r, rnd)
                        if fi == 0 and a.floor:    # flush does not matter to what stores nothing
                            for r in strata_case(root, flush, n, a.messages, a.size, a.window,
                                                 None, floor=True, suffix=sfx):
                                keep(r, rnd)
                        if fi == 0 and rabbit is not None:  # its row stands for both flushes
                            try:
                                for r in rabbit_case(rabbit, root, n, a.messages, a.size,
                                                     a.window):
                                    keep(r, rnd)
                            except Exception as exc:   # noqa: BLE001 - reported, not fatal
                                emit({"bench": "broker", "system": "rabbitmq", "case": "failed",
                                      "why": f"{type(exc).__name__}: {exc}"[:600]})
                                rabbit.stop()
                                rabbit = None
                    if a.batched:
                        for r in strata_case(root, flush, 1, a.messages, a.size, 8, disk,
                                             per_request=32, suffix=f"-r{rnd}"):
                            keep(r, rnd)
        finally:
            if rabbit is not None:
                rabbit.stop()
        for r in ratios(out):
            emit(r)


def ratios(out: list[dict]) -> list[dict]:
    """strata ÷ RabbitMQ, floor ÷ RabbitMQ and strata ÷ floor, per case, producer count and
    round (only the official client's normal sends with 0 message groups)."""
    def find(system: str, case: str, n: int, rnd) -> dict | None:
        return next((r for r in out if r.get("system") == system and r["case"] == case
                     and r["producers"] == n and r.get("round") == rnd
                     and "client" not in r and "src" not in r), None)
    res = []
    for s in out:
        if s.get("system") not in ("strata", "floor") or s["case"] not in ("send",
                                                                             "receive_ack"):
            continue
        if "client" in s or s.get("message_groups") or s.get("kind", "normal") != "normal":
            continue
        if s.get("src") == "before":
            continue
        n, rnd = s["producers"], s.get("round")
        peer = find("rabbitmq", s["case"], n, rnd)
        row = {"bench": "broker", "case": "ratio", "of": s["case"], "producers": n}
        if rnd is not None:
            row["round"] = rnd
        found = {}       # the ratios this row has peers for
        if s["system"] == "strata":
            row["flush"] = s["flush"]
            if peer is not None:
                found["strata_over_rabbitmq"] = round(s["msgs_per_s"] / peer["msgs_per_s"], 3)
            floor = find("floor", s["case"], n, rnd)
            if floor is not None:
                found["strata_over_floor"] = round(s["msgs_per_s"] / floor["msgs_per_s"], 3)
        else:
            row["system"] = "floor"
            if peer is not None:
                found["floor_over_rabbitmq"] = round(s["msgs_per_s"] / peer["msgs_per_s"], 3)
                if "cpu_ceiling_msgs_per_s" in s:
                    found["floor_cpu_ceiling_over_rabbitmq"] = round(
                        s["cpu_ceiling_msgs_per_s"] / peer["msgs_per_s"], 3)
        if found:
            res.append({**row, **found})
    return res


if __name__ == "__main__":
    main()
