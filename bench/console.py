"""The web console's speed on a big store; JSON lines.

    python bench/console.py [--topics 1000] [--queues 8] [--groups 100] [--messages 200000]
                            [--fast-build] [--rounds 10] [--browser-rounds 5]
                            [--ab-seconds 3] [--ab-rounds 5] [--baseline-src DIR] [--dir DIR]

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
* ``ab``: what the console costs a writer: ``put_batch`` of 100 B messages in batches of 256
  for ``--ab-seconds`` without a console (A) and with a read-only console whose overview
  page is polled as the browser polls it (every 2 s) besides its own sampler, started and
  settled before its window (B); ``--ab-rounds`` rounds, each A then B or B then A
  (alternating, so a drift of the machine's load favours neither), one ratio B / A per
  round, and their median (target >= 0.98). On a shared machine the writer's own rate swings
  more than that between windows, so the row also gives the console process's CPU time over
  each B window as a share of one core (``console_cpu_share``, target <= 0.02): what it takes
  from the writer at most.
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


def put_rate(store, seconds: float) -> float:
    msgs = [strata.Message("ab-topic", b"y" * 100) for _ in range(256)]
    n = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        store.put_batch(msgs)
        n += len(msgs)
    return n / (time.perf_counter() - t0)


def with_console(store, d: Path, seconds: float, cpu: list[float]) -> float:
    """The writer's rate with a read-only console beside it, polled as the overview page
    polls (the console is started and settled outside the window: its first sample ran);
    the console's CPU time over the window / the window goes to ``cpu`` (a core's share)."""
    c = Console(d)
    try:
        c.get("/api/overview")
        time.sleep(1.0)
        stop = threading.Event()

        def poll() -> None:
            while not stop.is_set():
                c.get("/api/overview")
                stop.wait(2.0)
        poller = threading.Thread(target=poll)
        cpu0, t0 = c.cpu_s(), time.perf_counter()
        poller.start()
        try:
            return put_rate(store, seconds)
        finally:
            stop.set()
            poller.join()
            cpu.append((c.cpu_s() - cpu0) / (time.perf_counter() - t0))
    finally:
        c.stop()


def measure_ab(store, d: Path, seconds: float, rounds: int) -> None:
    ratios, without, with_, cpu = [], [], [], []
    for r in range(rounds):
        if r % 2 == 0:              # A B, then B A: a drift of the load favours neither
            a = put_rate(store, seconds)
            b = with_console(store, d, seconds, cpu)
        else:
            b = with_console(store, d, seconds, cpu)
            a = put_rate(store, seconds)
        without.append(a)
        with_.append(b)
        ratios.append(b / a)
        emit(case="ab_round", round=r, order="AB" if r % 2 == 0 else "BA",
             without_msgs_s=round(a), with_console_msgs_s=round(b), ratio=round(b / a, 3),
             console_cpu_share=round(cpu[-1], 4))
    ratio = statistics.median(ratios)
    emit(case="ab", rounds=rounds, without_msgs_s=round(statistics.median(without)),
         with_console_msgs_s=round(statistics.median(with_)), median_ratio=round(ratio, 3),
         ratios=[round(x, 3) for x in ratios], target_ratio=0.98, met=ratio >= 0.98,
         console_cpu_share_p50=round(statistics.median(cpu), 4),
         cpu_target=0.02, cpu_met=statistics.median(cpu) <= 0.02)


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
    ap.add_argument("--ab-seconds", type=float, default=3.0)
    ap.add_argument("--ab-rounds", type=int, default=5)
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
            store.create_topic("ab-topic", queues=8)
            if not a.skip_readonly:
                c = Console(d)
                try:
                    measure_pages(c, paths, a.rounds)
                finally:
                    c.stop()
            if a.ab_rounds:
                measure_ab(store, d, a.ab_seconds, a.ab_rounds)
    finally:
        cleanup()


if __name__ == "__main__":
    main()
