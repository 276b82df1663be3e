"""The web console's speed on a big store; JSON lines.

    python bench/console.py [--topics 1000] [--queues 8] [--groups 100] [--messages 200000]
                            [--fast-build] [--rounds 10] [--browser-rounds 5]
                            [--ab-rounds 6] [--ab-seconds 8] [--ab-warmup 3] [--producers 2]
                            [--baseline-src DIR] [--skip-readonly] [--dir DIR]

Builds a store of ``--topics`` topics of ``--queues`` queues holding ``--messages`` messages
(bodies of 100 B) and ``--groups`` consumer groups (group i reads topic i, all its queues,
half-way through). ``--fast-build`` appends them with ``put_columns`` (one call per topic and
chunk of 8,192 plain bodies, round-robin over the queues) instead of ``put_batch`` of
``Message`` objects: what makes the issue's 10 M messages a matter of minutes. Then:

* ``page``: per page and API answer, the server's own time (its ``Server-Timing`` header:
  from the request's arrival to the answer, store reads included) and the client's round
  trip, median and p90 over ``--rounds`` (after one warm-up), for the console opened as the
  writer and read-only beside a writer (this process holds the store open for writing);
  target: server time <= 100 ms. With ``--baseline-src DIR`` (another checkout's ``src``,
  e.g. the commit before a change) the writer's pages are measured for both, alternately,
  in the same run (``code``: baseline / current).
* ``browser``: Debian's chromium (Playwright) loading each page: the navigation's
  ``loadEventEnd`` (HTML, CSS, scripts and the first chart data), median; target <= 1 s.
  With ``--baseline-src`` both again, alternately.
* ``broker_ab``: what the console's polling costs the broker's produce throughput (issue
  25: at most 2%). ``strata serve --kafka`` over the same store takes ``--producers``
  confluent-kafka producer processes' 100 B messages (acks=all, as fast as they go) to an
  8-partition topic, in windows of ``--ab-seconds`` measured after ``--ab-warmup`` seconds:
  A without the console, B with ``--http`` and a client that asks what a browser with the
  overview, topics and groups pages open asks (each page once, then every 2 s, as
  console.js does, ``/api/overview`` and ``/api/groups?per_page=1``), beside the console's
  own once-a-second sampler. Each window starts its own broker (the same store). Rounds of
  AB, BA, AB, ... (``--ab-rounds``): per round (``broker_ab_round``) the throughput ratio
  B/A (messages the broker stored, counted from the topic's max offsets by a read-only
  opener) and the broker process's CPU per stored message in both windows (from /proc: on
  this shared machine steadier than the wall-clock rate), and the broker's console
  thread's CPU as a share of a core, and ``extra_cpu_share``: the broker's CPU share with
  the console less without (what the console costs it in all, its event loop's HTTP and
  JSON work included; at a steady ``--pace`` both windows take the same messages); the
  summary row gives each as median, quartiles and range (target: throughput ratio >= 0.98
  and CPU per message ratio <= 1.02).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from scratch import scratch_dir  # noqa: E402

import strata  # noqa: E402
from strata.broker.group_state import ConsumerGroups  # noqa: E402
from strata.store.config import StoreConfig  # noqa: E402

CHROMIUM = "/usr/bin/chromium"


def emit(**row) -> None:
    print(json.dumps({"bench": "console", **row}), flush=True)


def config() -> StoreConfig:
    return StoreConfig(segment_size=256 << 20, consume_queue_units=8192, index_slots=200_000,
                       index_entries=800_000, prefault=False)


def build(d: Path, topics: int, queues: int, groups: int, messages: int,
          fast: bool = False) -> dict:
    """Make the store; the seconds its parts took."""
    took = {}
    with strata.open(d, config()) as s:
        names = [f"topic-{i:04d}" for i in range(topics)]
        t0 = time.perf_counter()
        for n in names:
            s.create_topic(n, queues=queues)
        took["topics_s"] = time.perf_counter() - t0
        body = b"x" * 100
        t0 = time.perf_counter()
        if fast:        # plain bodies as columns: one compiled encoding pass per call
            per = [messages // topics + (1 if i < messages % topics else 0)
                   for i in range(topics)]
            chunk = 8192
            for name, n in zip(names, per):
                for start in range(0, n, chunk):
                    s.put_columns(name, None, [body] * min(chunk, n - start))
        else:
            batch = 1024
            for start in range(0, messages, batch):
                s.put_batch([strata.Message(names[(start + i) % topics], body)
                             for i in range(min(batch, messages - start))])
        s.wait_dispatched(timeout=3600)
        took["put_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        g = ConsumerGroups(d / "broker")
        for i in range(groups):
            t = names[i % topics]
            for q in range(queues):
                g.reset_offset(f"group-{i:03d}", t, q, s.max_offset(t, q) // 2)
        g.close()
        took["groups_s"] = time.perf_counter() - t0
    return {k: round(v, 1) for k, v in took.items()}


class Console:
    def __init__(self, d: Path, src: str | None = None, code: str = "current") -> None:
        env = None
        if src is not None:         # another checkout's code (--baseline-src)
            env = {**os.environ, "PYTHONPATH": src}
        self.code = code
        self.proc = subprocess.Popen([sys.executable, "-m", "strata.cli.main", "console", str(d),
                                      "--http", "127.0.0.1:0"], stderr=subprocess.PIPE,
                                     text=True, env=env)
        while True:
            line = self.proc.stderr.readline()
            if not line:
                raise RuntimeError("strata console did not start")
            m = re.search(r"http://([\d.]+):(\d+)/", line)
            if m:
                self.url = f"http://{m.group(1)}:{m.group(2)}"
                self.mode = "readonly" if "read-only" in line else "writer"
                return

    def get(self, path: str) -> tuple[float, float]:
        """(server ms, round trip ms)."""
        t0 = time.perf_counter()
        with urllib.request.urlopen(self.url + path, timeout=60) as r:
            r.read()
            server = float(r.headers["Server-Timing"].split("dur=")[1])
        return server, (time.perf_counter() - t0) * 1000

    def cpu_s(self) -> float:
        """The console process's CPU time so far (user + system, from /proc)."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


def pages(topics: int) -> list[str]:
    return ["/", "/topics", "/topics/topic-0000", "/groups", "/messages?topic=topic-0000&key=x",
            "/api/overview", "/api/topics", "/api/groups", "/api/topics/topic-0000",
            # paged answers (whole ones above, as callers without paging parameters get)
            "/api/topics?per_page=200&sort=messages&order=desc", "/api/groups?per_page=1",
            "/api/groups?per_page=20",
            "/api/messages?topic=topic-0000&queue=0&limit=50"]


def measure_pages(c: Console, paths: list[str], rounds: int) -> None:
    for p in paths:
        c.get(p)                                  # warm-up
        server, trip = zip(*(c.get(p) for _ in range(rounds)))
        med = statistics.median(server)
        emit(case="page", console=c.mode, code=c.code, path=p, server_ms_p50=round(med, 2),
             server_ms_p90=round(sorted(server)[int(0.9 * (len(server) - 1))], 2),
             round_trip_ms_p50=round(statistics.median(trip), 2), target_ms=100,
             met=med <= 100)


def measure_browser(c: Console, paths: list[str], rounds: int) -> None:
    if rounds <= 0:
        return
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = b.new_page(viewport={"width": 1280, "height": 900})
        for path in [x for x in paths if not x.startswith("/api/")]:
            loads = []
            for _ in range(rounds + 1):
                page.goto(c.url + path, wait_until="load")
                loads.append(page.evaluate(
                    "() => performance.getEntriesByType('navigation')[0].loadEventEnd"))
            med = statistics.median(loads[1:])
            emit(case="browser", console=c.mode, code=c.code, path=path, load_ms_p50=round(med, 1),
                 target_ms=1000, met=med <= 1000)
        b.close()


# A Kafka producer process: connects, says READY, reads END from stdin, then sends 100 B
# messages to every partition of TOPIC, PACE a second (0: as fast as it goes), until the
# monotonic clock (shared by the processes of one machine) passes END; acks=all, linger
# 5 ms, delivery reports for errors only (the broker's side is what is counted)
PRODUCER = r"""
import sys, time
from confluent_kafka import Producer
boot, topic, parts = sys.argv[1], sys.argv[2], int(sys.argv[3])
pace = float(sys.argv[4])      # messages a second from this producer (0: as fast as it goes)
p = Producer({"bootstrap.servers": boot, "acks": "all", "linger.ms": 5,
              "broker.address.family": "v4", "enable.idempotence": False,
              "delivery.report.only.error": True})
body = b"y" * 100
p.produce(topic, body, partition=0)
p.flush(60)                    # connected, the topic's partitions known
print("READY", flush=True)
end = float(sys.stdin.readline())
i = 0
t0 = time.monotonic()
while time.monotonic() < end:
    for _ in range(100):
        try:
            p.produce(topic, body, partition=i % parts)
        except BufferError:
            p.poll(0.005)
        i += 1
    if pace:
        ahead = t0 + i / pace - time.monotonic()
        if ahead < -0.1:       # fell behind (the machine is busy): no burst to catch up
            t0, i, ahead = time.monotonic(), 0, 0.0
    p.poll(0)                  # serves the client's events
    if pace and ahead > 0:
        time.sleep(ahead)      # (poll(timeout) returns at its first event: no pacing)
p.flush(60)
"""

AB_TOPIC = "ab-kafka"
AB_QUEUES = 8
REFRESH_S = 2.0      # console.js REFRESH_MS: how often an open overview or groups page polls


def proc_cpu_s(pid: int, task: str | None = None) -> float:
    """User + system CPU seconds of process ``pid`` (or of its thread ``task``), /proc."""
    path = f"/proc/{pid}/stat" if task is None else f"/proc/{pid}/task/{task}/stat"
    fields = Path(path).read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def console_threads_cpu_s(pid: int) -> float:
    """CPU seconds of the broker's console thread(s) (``strata-console_N``: the sampler's
    readings and every API answer's store reads; the event loop's part — HTTP and JSON —
    is not in it, the broker's CPU per message is)."""
    total = 0.0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            if Path(f"/proc/{pid}/task/{task}/comm").read_text().startswith("strata-console"):
                total += proc_cpu_s(pid, task)
        except FileNotFoundError:
            continue
    return total


class Broker:
    """``strata serve --kafka`` over the bench's store, with the console (``--http``) or
    without it."""

    def __init__(self, d: Path, log: Path, console: bool, src: str | None = None) -> None:
        cmd = [sys.executable, "-m", "strata.cli.main", "serve", str(d), "--kafka",
               "127.0.0.1:0", "--exit-with-parent", "--store-option", "prefault=false"]
        if console:
            cmd += ["--http", "127.0.0.1:0"]
        self.log = log
        out = open(log, "w")
        env = None if src is None else {**os.environ, "PYTHONPATH": src}
        self.proc = subprocess.Popen(cmd, stderr=out, stdout=subprocess.DEVNULL, env=env)
        out.close()
        deadline = time.monotonic() + 120
        while True:
            text = log.read_text()
            m = re.search(r"([\d.]+:\d+) \(kafka\)", text)
            if m:
                self.boot = m.group(1)
                h = re.search(r"console (http://[\d.]+:\d+)/", text)
                self.url = h.group(1) if h else None
                return
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("strata serve did not start: " + text)
            threading.Event().wait(0.05)       # no event tells us a child printed a line

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(60)


def stored(reader) -> int:
    """Commit-log bytes the broker confirmed so far (``reader``: the store opened read-only
    beside it, which follows it). Bytes, not the queues' max offsets: those move with the
    dispatch thread, which a busy machine holds back for a while now and then; a put is
    confirmed when the producer's request is answered."""
    return reader.confirmed_offset()


def record_size(reader) -> int:
    """The size of one of the producers' records (all alike: same topic, 100 B body)."""
    q = max(range(AB_QUEUES), key=lambda q: reader.max_offset(AB_TOPIC, q))
    got = reader.get(AB_TOPIC, q, reader.max_offset(AB_TOPIC, q) - 1, 1)
    return got.messages[0].size


def page_poller(url: str, stop: threading.Event) -> list[threading.Thread]:
    """What a browser with the overview, topics and groups pages open asks, as console.js
    does: each page once; then the overview's charts and the groups page's lag chart each
    poll their API (/api/overview, /api/groups?per_page=1), REFRESH_S after each answer,
    with ``after`` the last sample's number (a long poll answered from the next sample);
    the topics page does not poll."""
    def get(path: str) -> dict | None:
        with urllib.request.urlopen(url + path, timeout=60) as r:
            body = r.read()
        return json.loads(body) if path.startswith("/api/") else None

    def chart(path: str, seq_of) -> None:
        seq = None
        while not stop.is_set():
            sep = "&" if "?" in path else "?"
            seq = seq_of(get(path if seq is None else f"{path}{sep}after={seq}"))
            stop.wait(REFRESH_S)

    for path in ("/", "/topics", "/groups"):
        get(path)
    threads = [threading.Thread(target=chart, args=a, daemon=True) for a in (
        ("/api/overview", lambda ov: ov["rates"]["seq"]),
        ("/api/groups?per_page=1", lambda g: g["history"]["seq"]))]
    for t in threads:
        t.start()
    return threads


def broker_window(d: Path, work: Path, console: bool, producers: int, warmup: float,
                  seconds: float, pace: float, src: str | None = None) -> dict:
    """One window: a broker (with the console polled as the pages poll it, or without a
    console; ``src``: another checkout's code) takes ``producers`` Kafka producer
    processes' messages; after ``warmup`` s the next ``seconds`` are measured: messages
    stored, the broker's CPU, its console thread's."""
    b = Broker(d, work / f"serve-{'b' if console else 'a'}.log", console, src)
    stop = threading.Event()
    procs = []
    reader = strata.open(d, readonly=True)
    try:
        poller = page_poller(b.url, stop) if console else None
        procs = [subprocess.Popen([sys.executable, "-c", PRODUCER, b.boot, AB_TOPIC,
                                   str(AB_QUEUES), repr(pace / producers)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                 for _ in range(producers)]
        for p in procs:
            if p.stdout.readline().strip() != "READY":
                raise RuntimeError("a producer did not connect")
        t_start = time.monotonic()
        for p in procs:
            p.stdin.write(f"{t_start + warmup + seconds + 0.5!r}\n")
            p.stdin.flush()
        threading.Event().wait(warmup)
        n0, c0, k0, t0 = stored(reader), proc_cpu_s(b.proc.pid), \
            console_threads_cpu_s(b.proc.pid), time.monotonic()
        threading.Event().wait(seconds)
        n1, c1, k1, t1 = stored(reader), proc_cpu_s(b.proc.pid), \
            console_threads_cpu_s(b.proc.pid), time.monotonic()
        for p in procs:
            p.wait(120)
        stop.set()
        for t in poller or []:
            t.join(60)
        size = record_size(reader)
    finally:
        stop.set()
        for p in procs:
            if p.poll() is None:
                p.kill()
        reader.close()
        b.stop()
    msgs = (n1 - n0) / size
    return {"msgs_s": msgs / (t1 - t0), "cpu_us_per_msg": (c1 - c0) / max(1, msgs) * 1e6,
            "broker_cpu_share": (c1 - c0) / (t1 - t0),
            "console_cpu_share": (k1 - k0) / (t1 - t0)}


def spread(xs: list[float]) -> dict:
    q = statistics.quantiles(xs, n=4) if len(xs) >= 2 else [xs[0]] * 3
    return {"p50": round(statistics.median(xs), 4), "q1": round(q[0], 4),
            "q3": round(q[2], 4), "min": round(min(xs), 4), "max": round(max(xs), 4)}


def _versus(a: dict, b: dict, prefix: str = "") -> dict:
    """Window ``b`` (a console open) against ``a`` (none), as a round's row fields."""
    return {f"{prefix}with_console_msgs_s": round(b["msgs_s"]),
            f"{prefix}ratio": round(b["msgs_s"] / a["msgs_s"], 4),
            f"{prefix}with_console_cpu_us_per_msg": round(b["cpu_us_per_msg"], 2),
            f"{prefix}cpu_per_msg_ratio": round(b["cpu_us_per_msg"] / a["cpu_us_per_msg"], 4),
            f"{prefix}broker_cpu_share_with": round(b["broker_cpu_share"], 3),
            f"{prefix}extra_cpu_share": round(b["broker_cpu_share"] - a["broker_cpu_share"], 4),
            f"{prefix}console_cpu_share": round(b["console_cpu_share"], 4)}


def measure_broker_ab(d: Path, work: Path, rounds: int, producers: int, warmup: float,
                      seconds: float, pace: float, baseline_src: str | None = None) -> None:
    """Rounds of two windows, A (no console) and B (console open and polled), in the order
    AB, BA, AB, ... (ABBA across rounds: a drift of the machine's load favours neither);
    per round the throughput ratio B/A and the CPU per message of both. With
    ``baseline_src`` a third window B0 per round runs the console of that checkout (A, B,
    B0 then B0, B, A): the old console's cost measured beside the new one's."""
    windows = [("A", False, None), ("B", True, None)]
    if baseline_src:
        windows.append(("B0", True, baseline_src))
    # a window not counted first: the first broker of a run pays for loading its compiled
    # kernels and the store's files into the page cache (up to 4x the CPU per message)
    broker_window(d, work, False, producers, warmup, min(seconds, 2.0), pace)
    rows = []
    for r in range(rounds):
        order = windows if r % 2 == 0 else windows[::-1]
        got = {name: broker_window(d, work, c, producers, warmup, seconds, pace, src)
               for name, c, src in order}
        a = got["A"]
        row = {"round": r, "order": "".join(name for name, _c, _s in order),
               "without_msgs_s": round(a["msgs_s"]),
               "without_cpu_us_per_msg": round(a["cpu_us_per_msg"], 2),
               "broker_cpu_share_without": round(a["broker_cpu_share"], 3),
               **_versus(a, got["B"])}
        if "B0" in got:
            row.update(_versus(a, got["B0"], "baseline_"))
        rows.append(row)
        emit(case="broker_ab_round", pace=pace, producers=producers, **row)
    col = lambda k: [x[k] for x in rows]      # noqa: E731
    ratio = statistics.median(col("ratio"))
    cpu = statistics.median(col("cpu_per_msg_ratio"))
    keys = ["ratio", "cpu_per_msg_ratio", "without_msgs_s", "with_console_msgs_s",
            "without_cpu_us_per_msg", "with_console_cpu_us_per_msg",
            "broker_cpu_share_without", "broker_cpu_share_with", "console_cpu_share",
            "extra_cpu_share"]
    if baseline_src:
        keys += [f"baseline_{k}" for k in ("ratio", "cpu_per_msg_ratio", "with_console_msgs_s",
                                           "with_console_cpu_us_per_msg",
                                           "broker_cpu_share_with", "console_cpu_share",
                                           "extra_cpu_share")]
    # saturated (pace 0): the producers send as fast as the broker takes them, so the
    # throughput ratio is the goal as written; paced, both windows take the same messages
    # and the CPU per message and the extra CPU share say what the console costs
    emit(case="broker_ab", rounds=rounds, producers=producers, seconds=seconds, pace=pace,
         saturated=pace == 0, **{k: spread(col(k)) for k in keys},
         target_ratio=0.98, met=ratio >= 0.98 and cpu <= 1.02)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--topics", type=int, default=1000)
    ap.add_argument("--queues", type=int, default=8)
    ap.add_argument("--groups", type=int, default=100)
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--fast-build", action="store_true",
                    help="append with put_columns of plain bodies (for 10 M messages)")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--browser-rounds", type=int, default=5)
    ap.add_argument("--ab-rounds", type=int, default=6,
                    help="rounds of the broker A/B (a window without the console and one "
                         "with it, ABBA)")
    ap.add_argument("--ab-seconds", type=float, default=8.0, help="measured seconds a window")
    ap.add_argument("--ab-warmup", type=float, default=3.0,
                    help="seconds of producing before a window's measurement starts")
    ap.add_argument("--producers", type=int, default=2,
                    help="Kafka producer processes (of a paced A/B)")
    ap.add_argument("--saturate-producers", type=int, default=4,
                    help="Kafka producer processes of an unpaced (--pace 0) A/B: enough "
                         "that the broker, not the producers, sets the rate")
    ap.add_argument("--ab-baseline-src", default=None, metavar="DIR",
                    help="a third A/B window per round with the console of the code in DIR "
                         "(a src/): the old console's cost beside the new one's")
    ap.add_argument("--pace", default="0", metavar="MSGS_PER_S[,...]",
                    help="the producers' rate in all (0: as fast as they go); a steady pace "
                         "keeps the broker's batches alike in A and B, so its CPU per "
                         "message compares like with like; several: one A/B each")
    ap.add_argument("--baseline-src", default=None, metavar="DIR",
                    help="also measure the writer's pages with the code in DIR (a src/), "
                         "alternately with this checkout's")
    ap.add_argument("--skip-readonly", action="store_true",
                    help="skip the read-only console's pages")
    ap.add_argument("--dir", default=None)
    a = ap.parse_args()
    scratch, cleanup = scratch_dir("console", a.dir)
    try:
        d = scratch / "store"
        t0 = time.perf_counter()
        parts = build(d, a.topics, a.queues, a.groups, a.messages, a.fast_build)
        emit(case="build", topics=a.topics, queues=a.queues, groups=a.groups,
             messages=a.messages, fast=a.fast_build, seconds=round(time.perf_counter() - t0, 1),
             **parts)
        paths = pages(a.topics)
        codes = [("current", None)]
        if a.baseline_src:
            codes = [("baseline", a.baseline_src), ("current", None),
                     ("current", None), ("baseline", a.baseline_src)]
        for code, src in codes:     # no writer: each opens the store as its writer
            c = Console(d, src, code)
            try:
                measure_pages(c, paths, a.rounds)
                measure_browser(c, paths, a.browser_rounds)
            finally:
                c.stop()
        with strata.open(d, config()) as store:   # this process writes; the console reads
            store.create_topic(AB_TOPIC, queues=AB_QUEUES)
            if not a.skip_readonly:
                c = Console(d)
                try:
                    measure_pages(c, paths, a.rounds)
                finally:
                    c.stop()
        if a.ab_rounds:
            for pace in (float(x) for x in a.pace.split(",")):
                measure_broker_ab(d, scratch, a.ab_rounds,
                                  a.producers if pace else a.saturate_producers,
                                  a.ab_warmup, a.ab_seconds, pace, a.ab_baseline_src)
    finally:
        cleanup()


if __name__ == "__main__":
    main()
