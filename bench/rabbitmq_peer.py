"""RabbitMQ as a same-run peer of bench/kafka_broker.py: one node started here on 127.0.0.1
(every port free-chosen: AMQP, stream, Erlang distribution, epmd; its own mnesia and log
directories in a temp dir, the stream plugin enabled through its own enabled-plugins file),
then, per size,

* ``classic``: a durable classic queue, pika's asynchronous connection publishing persistent
  messages (delivery_mode 2) with publisher confirms, at most ``--window`` unconfirmed; then a
  consumer (prefetch 2000, manual ack of every 1000th message with ``multiple``);
* ``stream``: a stream over RabbitMQ's native stream protocol (the ``rstream`` client):
  ``send_batch`` of 500 messages with at most ``--window`` unconfirmed, then a consumer from
  the first offset (a process per stream, ``--consumers N``: N streams; a plain callback,
  ``initial_credit`` 20 chunks);

and the node is stopped (SIGTERM to its processes, by pid) and its directory removed. With
``--serve`` the node stays up after filling the streams: each stdin line ``consume SIZE K
[ROUND]`` runs one consume (how ``kafka_broker.py --peers rabbitmq`` puts a stream consume
beside each of strata's). Prints
JSON lines ``{"system": "rabbitmq-classic"|"rabbitmq-stream", "op": "produce"|"consume",
"size", "messages", "msgs_per_s", "broker_cpu_us_per_msg", "client_cpu_us_per_msg"}`` (the
client's: this process's CPU over the phase).

    python bench/rabbitmq_peer.py --messages 200000 --sizes 100 [--kinds classic,stream]
                                  [--consumers 1,2] [--serve]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SERVER = "/usr/lib/rabbitmq/bin/rabbitmq-server"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def settle(cpu, quiet: float = 0.01, window: float = 0.2, most: float = 10.0) -> float:
    """Wait until a server's CPU (``cpu()``: its seconds so far) grows by less than ``quiet``
    seconds over ``window``: work left from the phase before (strata's dispatch building
    its consume queues, a stream's writes) is then not counted in the next phase. Returns
    the seconds waited (at most ``most``)."""
    t0 = time.time()
    last = cpu()
    while time.time() - t0 < most:
        time.sleep(window)
        now = cpu()
        if now - last < quiet:
            break
        last = now
    return round(time.time() - t0, 2)


def node_pids(marker: bytes) -> list[int]:
    """The processes of our node: those whose environment holds ``marker`` (our unique
    RABBITMQ_NODENAME), which also finds the epmd that daemonized itself away from the
    wrapper's process tree, and nothing of anyone else's RabbitMQ."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if marker in (d / "environ").read_bytes().split(b"\0"):
                out.append(int(d.name))
        except OSError:
            continue
    return out


class Node:
    """One RabbitMQ node in ``root``, on free ports (AMQP and, with ``stream``, the stream
    protocol with its plugin enabled); the one node start-up of both RabbitMQ benches
    (bench/broker.py's ``Rabbit`` wraps it with ``stream=False``). If the node does not come
    up, what was started is stopped before the error is raised."""

    def __init__(self, root: Path, stream: bool = True) -> None:
        self.root = root
        self.amqp = free_port()
        self.stream = free_port() if stream else None
        self.dist, self.epmd = free_port(), free_port()
        for sub in ("home", "mnesia", "log"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        (root / "enabled_plugins").write_text("[rabbitmq_stream].\n" if stream else "[].\n")
        conf = f"listeners.tcp.default = 127.0.0.1:{self.amqp}\n"
        if stream:
            conf += (f"stream.listeners.tcp.1 = 127.0.0.1:{self.stream}\n"
                     "stream.advertised_host = 127.0.0.1\n"
                     f"stream.advertised_port = {self.stream}\n")
        (root / "rabbitmq.conf").write_text(conf)
        self.name = f"strata-bench-{os.getpid()}-{self.amqp}@localhost"
        env = dict(os.environ, HOME=str(root / "home"), RABBITMQ_NODENAME=self.name,
                   RABBITMQ_NODE_IP_ADDRESS="127.0.0.1", RABBITMQ_NODE_PORT=str(self.amqp),
                   RABBITMQ_DIST_PORT=str(self.dist), ERL_EPMD_PORT=str(self.epmd),
                   ERL_EPMD_ADDRESS="127.0.0.1",
                   RABBITMQ_MNESIA_BASE=str(root / "mnesia"),
                   RABBITMQ_LOG_BASE=str(root / "log"),
                   RABBITMQ_CONFIG_FILE=str(root / "rabbitmq.conf"),
                   RABBITMQ_ENABLED_PLUGINS_FILE=str(root / "enabled_plugins"),
                   RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=
                   "-kernel inet_dist_use_interface {127,0,0,1}")
        self.log = open(root / "startup.log", "w")
        self.proc = subprocess.Popen([SERVER], env=env, stdout=self.log,
                                     stderr=subprocess.STDOUT, cwd=root,
                                     start_new_session=True)
        try:
            self._wait_ports([p for p in (self.amqp, self.stream) if p is not None])
        except BaseException:
            self.stop()
            raise

    def _wait_ports(self, ports: list[int]) -> None:
        deadline = time.time() + 120
        for port in ports:
            while True:
                if self.proc.poll() is not None or time.time() > deadline:
                    raise RuntimeError("rabbitmq-server did not start: " +
                                       (self.root / "startup.log").read_text()[-2000:])
                try:
                    socket.create_connection(("127.0.0.1", port), 0.2).close()
                    break
                except OSError:
                    time.sleep(0.2)

    def cpu(self) -> float:
        """CPU seconds of the node (beam.smp and the rest of its process tree)."""
        return sum(cpu_seconds(p) for p in self.pids())

    def pids(self) -> list[int]:
        return node_pids(f"RABBITMQ_NODENAME={self.name}".encode())

    def stop(self) -> None:
        if self.log.closed:
            return
        pids = self.pids()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            self.proc.wait(10)
        self.log.close()


def classic_produce(node: Node, queue: str, n: int, body: bytes, window: int) -> float:
    import pika
    props = pika.BasicProperties(delivery_mode=2)
    state = dict(sent=0, acked=0, t0=0.0, t1=0.0, ch=None)

    def pump():
        ch = state["ch"]
        while state["sent"] < n and state["sent"] - state["acked"] < window:
            ch.basic_publish("", queue, body, props)
            state["sent"] += 1

    def on_confirm(frame):
        m = frame.method
        if m.multiple:
            state["acked"] = max(state["acked"], m.delivery_tag)
        else:
            state["acked"] += 1
        if state["acked"] >= n:
            state["t1"] = time.perf_counter()
            conn.close()
        else:
            pump()

    def on_declared(_f):
        ch = state["ch"]
        ch.confirm_delivery(on_confirm)
        state["t0"] = time.perf_counter()
        pump()

    def on_channel(ch):
        state["ch"] = ch
        ch.queue_declare(queue, durable=True, callback=on_declared)

    conn = pika.SelectConnection(pika.ConnectionParameters("127.0.0.1", node.amqp),
                                 on_open_callback=lambda c: c.channel(
                                     on_open_callback=on_channel),
                                 on_close_callback=lambda c, _e: c.ioloop.stop())
    conn.ioloop.start()
    return state["t1"] - state["t0"]


def classic_consume(node: Node, queue: str, n: int) -> float:
    import pika
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", node.amqp))
    ch = conn.channel()
    ch.basic_qos(prefetch_count=2000)
    got = [0]

    def on_msg(ch_, method, _props, _body):
        got[0] += 1
        if got[0] % 1000 == 0 or got[0] == n:
            ch_.basic_ack(method.delivery_tag, multiple=True)
        if got[0] >= n:
            ch_.stop_consuming()
    t0 = time.perf_counter()
    ch.basic_consume(queue, on_msg)
    ch.start_consuming()
    el = time.perf_counter() - t0
    ch.queue_delete(queue)
    conn.close()
    return el


async def stream_produce(node: Node, stream: str, n: int, body: bytes, window: int,
                         batch: int = 500) -> float:
    from rstream import Producer
    confirmed = [0]
    room = asyncio.Event()

    def on_confirm(status):
        if status.is_confirmed:
            confirmed[0] += 1
        room.set()

    async with Producer("127.0.0.1", node.stream, username="guest", password="guest") as p:
        await p.create_stream(stream, exists_ok=True)
        chunk = [body] * batch
        sent = 0
        t0 = time.perf_counter()
        while sent < n:
            while sent - confirmed[0] >= window:
                room.clear()
                await room.wait()
            k = min(batch, n - sent)
            await p.send_batch(stream, chunk[:k], on_publish_confirm=on_confirm)
            sent += k
        while confirmed[0] < n:
            room.clear()
            await room.wait()
        return time.perf_counter() - t0


async def stream_consume(node: Node, stream: str, n: int, times: dict | None = None,
                         credit: int = 20, sync: bool = True, gate=None) -> float:
    """Read ``n`` messages of ``stream`` from its first offset; the seconds from subscribing
    to the last message (``times``: the wall clock at subscribing, at the first message and
    at the last, before the consumer is closed). ``credit``: chunks the server may send
    ahead (rstream's ``initial_credit``; it grants one more per chunk received); ``sync``: a
    plain callback (rstream awaits the callback's result only when it is a coroutine, so a
    plain one saves a coroutine per message: the client's best), else ``async def``;
    ``gate``: awaited once connected, before the clock starts (all consumers start together)."""
    times = times if times is not None else {}
    from rstream import Consumer, ConsumerOffsetSpecification, OffsetType
    got = [0]
    done = asyncio.Event()

    def on_msg(_msg, _ctx):
        if not got[0]:
            times["first"] = time.time()
        got[0] += 1
        if got[0] >= n:
            times["t1"] = time.time()
            done.set()

    async def on_msg_async(msg, ctx):
        on_msg(msg, ctx)

    async with Consumer("127.0.0.1", node.stream, username="guest", password="guest") as c:
        if gate is not None:
            await gate()
        t0 = time.perf_counter()
        times["t0"] = time.time()
        await c.subscribe(stream, on_msg if sync else on_msg_async, initial_credit=credit,
                          offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST))
        await asyncio.wait_for(done.wait(), 600)
        return time.perf_counter() - t0


def stream_consumers(node: Node, streams: list[str], each: int, credit: int = 20,
                     callback: str = "sync") -> dict:
    """One consumer process per stream (``--consume-stream``), each reading ``each``
    messages of its own; the wall time from the first one's start to the last one's end
    and their CPU, summed."""
    procs = [subprocess.Popen([sys.executable, __file__, "--consume-stream", name,
                               "--port", str(node.stream), "--messages", str(each),
                               "--stream-credit", str(credit), "--stream-callback", callback],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
             for name in streams]
    for p in procs:                  # all connected: then all start together
        if not p.stdout.readline().startswith("READY"):
            raise RuntimeError("a stream consumer failed before it was connected")
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    res = [json.loads(p.communicate(timeout=900)[0].splitlines()[-1]) for p in procs]
    t0, t1, first = (f(r[k] for r in res) for f, k in ((min, "t0"), (max, "t1"),
                                                        (min, "first")))
    return dict(seconds=t1 - t0, cpu=sum(r["cpu"] for r in res),
                first_ms=round(1e3 * max(r["first"] - r["t0"] for r in res), 1),
                from_first=round((each - 1) * len(res) / (t1 - first)) if t1 > first else None)


def consume_one(port: int, stream: str, n: int, credit: int = 20,
                callback: str = "sync") -> None:
    """A consumer process: connect, print READY, wait for "go" on stdin (as the Kafka
    consumers do), read ``n`` messages of ``stream``, print its times and CPU from "go"."""
    import rstream  # noqa: F401 - loaded before the clock starts, as the Kafka consumer's
    node = type("N", (), {"stream": port})()
    times: dict = {}

    async def gate() -> None:
        print("READY", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        times["c0"] = time.process_time()

    asyncio.run(stream_consume(node, stream, n, times, credit, callback == "sync", gate))
    c0 = times.pop("c0")
    print(json.dumps(dict(times, cpu=time.process_time() - c0)), flush=True)


def stream_fill(node: Node, a, size: int, body: bytes, k: int) -> tuple[list[str], dict]:
    """``a.messages`` produced into ``k`` streams (one producer, one stream after the other);
    emits the produce row, returns the streams' names and the rows' common fields."""
    names = [f"bench-stream-{size}-{k}-{i}" for i in range(k)]
    each = a.messages // k
    tag = dict(system="rabbitmq-stream", size=size, window=a.window,
               stream_batch=a.stream_batch, consumers=k, streams=k,
               stream_credit=a.stream_credit, stream_callback=a.stream_callback)
    cpu0, mine0 = node.cpu(), time.process_time()
    el = sum(asyncio.run(stream_produce(node, name, each, body, a.window * 10,
                                        a.stream_batch)) for name in names)
    cpu, mine = node.cpu() - cpu0, time.process_time() - mine0
    n = each * k
    emit(dict(tag, op="produce", messages=n, seconds=round(el, 3), msgs_per_s=round(n / el),
              broker_cpu_us_per_msg=round(cpu / n * 1e6, 2),
              client_cpu_us_per_msg=round(mine / n * 1e6, 2)))
    return names, tag


def stream_read(node: Node, a, names: list[str], each: int, tag: dict, **extra) -> dict:
    """One consume of every stream of ``names`` (``each`` messages each), a consumer process
    per stream, once the node is idle; emits and returns its row (``extra`` added to it)."""
    settled = settle(node.cpu)
    cpu0 = node.cpu()
    r = stream_consumers(node, names, each, a.stream_credit, a.stream_callback)
    cpu = node.cpu() - cpu0
    n = each * len(names)
    row = dict(tag, **extra, op="consume", messages=n, seconds=round(r["seconds"], 3),
               msgs_per_s=round(n / r["seconds"]), first_ms=r["first_ms"], settle_s=settled,
               msgs_per_s_from_first=r["from_first"],
               broker_cpu_us_per_msg=round(cpu / n * 1e6, 2),
               client_cpu_us_per_msg=round(r["cpu"] / n * 1e6, 2))
    emit(row)
    return row


def stream_case(node: Node, a, size: int, body: bytes, k: int) -> None:
    """Streams: ``a.messages`` produced into ``k`` streams, then read once by ``k`` consumer
    processes, one stream each."""
    names, tag = stream_fill(node, a, size, body, k)
    stream_read(node, a, names, a.messages // k, tag)


def serve_streams(node: Node, a) -> None:
    """The stream peer held open beside another broker (``kafka_broker.py --peers rabbitmq``
    alternates its consumes with this one's): fills the streams of every size and consumer
    count, prints ``READY``, then answers each stdin line ``consume SIZE K [ROUND]`` with one
    consume row of the K streams of that size, until ``quit`` or the end of stdin."""
    streams = {}
    for size in map(int, a.sizes.split(",")):
        body = os.urandom(size)
        for k in map(int, a.consumers.split(",")):
            streams[size, k] = stream_fill(node, a, size, body, k)
    print("READY", flush=True)
    for line in sys.stdin:
        words = line.split()
        if not words or words[0] != "consume":
            break
        size, k = int(words[1]), int(words[2])
        names, tag = streams[size, k]
        stream_read(node, a, names, a.messages // k, tag,
                    **({"round": int(words[3])} if len(words) > 3 else {}))


def emit(row: dict) -> None:
    print(json.dumps(row), flush=True)


def _stopped(_sig, _frame):
    raise KeyboardInterrupt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--sizes", default="100")
    ap.add_argument("--kinds", default="classic,stream")
    ap.add_argument("--window", type=int, default=1000)
    ap.add_argument("--stream-batch", type=int, default=500,
                    help="messages per rstream send_batch call")
    ap.add_argument("--consumers", default="1",
                    help="stream consumers, one case each (e.g. 1,2): with N, the messages "
                         "go to N streams (N/messages each) and N consumer processes read "
                         "one stream each, as N Kafka consumers read disjoint partitions")
    ap.add_argument("--stream-credit", type=int, default=20,
                    help="the stream consumer's initial_credit (chunks sent ahead)")
    ap.add_argument("--stream-callback", default="sync", choices=("sync", "async"),
                    help="the stream consumer's message callback: a plain function (no "
                         "coroutine per message) or an async def")
    ap.add_argument("--consume-stream", help=argparse.SUPPRESS)   # a consumer process
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--serve", action="store_true",
                    help="fill the streams, print READY, then one consume per stdin line "
                         "`consume SIZE K [ROUND]` (how kafka_broker.py alternates with it)")
    a = ap.parse_args()
    if a.consume_stream:
        consume_one(a.port, a.consume_stream, a.messages, a.stream_credit, a.stream_callback)
        return
    signal.signal(signal.SIGTERM, _stopped)   # a SIGTERM still stops the node (finally:)
    root = Path(tempfile.mkdtemp(prefix="strata-rabbit-peer-"))
    node = None
    try:
        node = Node(root / "node")
        if a.serve:
            serve_streams(node, a)
            return
        for size in map(int, a.sizes.split(",")):
            body = os.urandom(size)
            for kind in a.kinds.split(","):
                if kind == "stream":
                    for k in map(int, a.consumers.split(",")):
                        stream_case(node, a, size, body, k)
                    continue
                name = f"bench-{kind}-{size}"
                tag = dict(system=f"rabbitmq-{kind}", size=size, window=a.window)
                for op in ("produce", "consume"):
                    cpu0, mine0 = node.cpu(), time.process_time()
                    el = (classic_produce(node, name, a.messages, body, a.window)
                          if op == "produce" else classic_consume(node, name, a.messages))
                    cpu, mine = node.cpu() - cpu0, time.process_time() - mine0
                    emit(dict(tag, op=op, messages=a.messages, seconds=round(el, 3),
                              msgs_per_s=round(a.messages / el),
                              broker_cpu_us_per_msg=round(cpu / a.messages * 1e6, 2),
                              client_cpu_us_per_msg=round(mine / a.messages * 1e6, 2)))
    except Exception as exc:  # noqa: BLE001 - reported as a row, the node still stopped
        emit(dict(system="rabbitmq", error=f"{type(exc).__name__}: {exc}"[-1500:]))
    finally:
        if node is not None:
            node.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
