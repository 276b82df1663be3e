"""What the console shows, as plain dicts (the JSON API's answers and the pages' data).

Every function here makes blocking store calls: the server runs them on its one console
thread (``ConsoleData.executor``), never on the event loop. Nothing here writes to the store
(the actions are in ``strata.console.actions``).
"""

from __future__ import annotations

import ctypes
import json
import re
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from typing import Callable

from strata.files.layout import BROKER_DIR, COMMITLOG_DIR, CONSUMEQUEUE_DIR, INDEX_DIR
from strata.broker.dead_letter import DLQ_PREFIX, dlq_topic
from strata.console.groups_view import GroupSource
from strata.console.readings import Reading, Sample, dir_bytes, now_ms
from strata.errors import InvalidInputError
from strata.format.record import is_topic_name
from strata.store.message_store import MessageStore

HISTORY_POINTS = 300          # samples kept for the charts (10 minutes at one in 2 s)
SAMPLE_S = 2.0                # the charts' finest resolution: what an open page polls
#                               (console.js asks REFRESH_MS = 2 s after each answer)
SAMPLE_SHARE = 200            # the sampler takes at most 1/200 of a core (its CPU time)
UNWATCHED_S = 60.0            # no chart asked for this long: nobody watches,
UNWATCHED_SAMPLE_S = 10.0     # and the sampler reads this seldom (until one asks again)
CHART_GROUPS = 10             # the lag chart shows the groups furthest behind
MAX_PAGE = 200                # messages per page of the browser
DISK_CACHE_S = 10.0           # disk use is summed over many files: at most this often,
DISK_SHARE = 400              # and at most 1/400 of a core (8,000 queues' files: ~0.14 s)
RETRY_PREFIX = "%RETRY%"


def _name_os_thread() -> None:
    """Name the console's thread for the OS too (``top -H``, /proc/PID/task/*/comm): what
    it costs a broker shows apart from the broker's own threads (bench/console.py)."""
    try:
        ctypes.CDLL(None).prctl(15, b"strata-console", 0, 0, 0)    # PR_SET_NAME (Linux)
    except (OSError, AttributeError):
        pass


class ConsoleData:
    """The console's view of one store (and, where present, its broker's groups)."""

    def __init__(self, store: MessageStore, groups: GroupSource,
                 listeners: Callable[[], dict] | None = None) -> None:
        self.store = store
        self.groups = groups
        self.listeners = listeners or (lambda: {})
        # one thread: a read-only MessageStore is not made for concurrent callers, and one
        # thread keeps the console's share of the CPU small beside a busy broker
        self.executor = ThreadPoolExecutor(1, thread_name_prefix="strata-console",
                                           initializer=_name_os_thread)
        self.history: deque[Sample] = deque(maxlen=HISTORY_POINTS)
        self._disk: tuple[float, dict] = (0.0, {})
        self.disk_cpu_s = 0.0     # the CPU time the last disk walk took
        self._rows: tuple[float, list | None, tuple | None] = (0.0, None, None)
        self._topics: tuple[object, list[dict]] = (None, [])
        self._index: Reading | None = None
        self.watched_at = time.monotonic()    # when a chart or page last asked
        self.sample_cpu_s = 0.0   # the CPU time the last sample took (its thread's)
        self.samples = 0       # samples taken so far: the last one's sequence number
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ queues

    def _queue_rows(self, max_age: float = 0.0) -> list[tuple[str, int, int, int]]:
        """Every (topic, queue, min offset, max offset); a reading at most ``max_age``
        seconds old may be reused, and a writer's last reading as long as nothing it shows
        changed since (see ``_rows_key``)."""
        now = time.monotonic()
        key = self._rows_key()
        at, rows, was = self._rows
        if rows is not None and (now - at <= max_age or (key is not None and key == was)):
            return rows
        rows = self._read_rows()
        self._rows = (now, rows, key)
        return rows

    def _rows_key(self) -> tuple | None:
        """What a writer's queue bounds depend on: how far its consume queues are dispatched,
        the log's first offset (retention) and the topics' queue counts. Equal keys: the
        last reading is still exact, so a page reuses it instead of reading 8,000 queues
        again (None: no such key, for a reader or a tiered store, which read afresh)."""
        s = self.store
        if s.readonly or s.config.tier_url is not None:
            return None
        return (s.dispatched_offset(), s.min_commitlog_offset(),
                tuple(s.queue_counts().items()))

    def _read_rows(self) -> list[tuple[str, int, int, int]]:
        # a writer reads its consume queues in memory; a reader follows the writer's files,
        # a tier holds older messages than the local queues (MessageStore.queue_bounds)
        return self.store.queue_bounds()

    def sample_interval(self) -> float:
        """How often the sampler reads every queue: every SAMPLE_S seconds while a page
        watches (UNWATCHED_SAMPLE_S when none asked for UNWATCHED_S), less often where one
        sample's CPU time is more than 1/SAMPLE_SHARE of the time between two (a busy
        writer's 8,000 queues: ~14 ms, 0.7% of a core at one sample in 2 s)."""
        base = SAMPLE_S if self.watched() else UNWATCHED_SAMPLE_S
        return max(base, self.sample_cpu_s * SAMPLE_SHARE)

    def watched(self) -> bool:
        """A page or chart asked within the last UNWATCHED_S seconds."""
        return time.monotonic() - self.watched_at < UNWATCHED_S

    def _rows_for_pages(self, fresh: bool = True) -> list[tuple[str, int, int, int]]:
        """The reading a page shows. A writer's queues are read fresh (~1.5 us a queue)
        unless ``fresh`` is False: a chart's poll, answered right after a sample, takes that
        sample's reading (at most one interval old, as its charts are). A reader's cost
        ~0.2 ms a queue, so its pages always reuse the sampler's reading."""
        if fresh and not self.store.readonly:
            return self._queue_rows(0.0)
        return self._queue_rows(self.sample_interval())

    def _reading(self, rows: list) -> "Reading":
        """Per-topic sums and (topic, queue) lookups of a reading, built once per reading."""
        if self._index is None or self._index.rows is not rows:
            self._index = Reading(rows)
        return self._index

    def sample(self) -> Sample:
        """Read the counters once and keep the reading for the charts."""
        cpu0 = time.thread_time()
        bounds = self._reading(self._queue_rows())
        per_topic = bounds.per_topic
        groups = self.groups.rows()
        lag = self._lag_by_queue(bounds, groups)
        group_lag: dict[str, int] = {}
        for (g, _t, _q), behind in lag.items():
            group_lag[g] = group_lag.get(g, 0) + behind
        for (g, t, q), commit in self.groups.kafka_rows().items():     # Kafka groups
            lo, hi = bounds.get((t, q), (0, 0))
            group_lag[g] = group_lag.get(g, 0) + max(0, hi - max(lo, commit))
        smp = Sample(now_ms(), self.store.confirmed_offset(), sum(per_topic.values()),
                     sum(c for c, _p, _f, _r in groups.values()), per_topic, group_lag)
        self.history.append(smp)
        self.samples += 1
        self.sample_cpu_s = time.thread_time() - cpu0
        return smp

    @staticmethod
    def _lag_by_queue(bounds, groups) -> dict[tuple[str, str, int], int]:
        """Lag per (group, topic, queue) the group reads: max offset minus the first offset
        not acked (never below the queue's min offset)."""
        out = {}
        for (g, t, q), (commit, _pop, _fly, _retry) in groups.items():
            lo, hi = bounds.get((t, q), (0, 0))
            out[(g, t, q)] = max(0, hi - max(lo, commit))
        return out

    def costs(self) -> dict:
        """What the console's own readings cost (for an operator wondering what an open
        console takes from the broker): the last sample's and disk walk's CPU time, and
        how often the sampler reads."""
        return {"sample_cpu_ms": round(self.sample_cpu_s * 1000, 2),
                "sample_interval_s": round(self.sample_interval(), 2),
                "disk_walk_cpu_ms": round(self.disk_cpu_s * 1000, 2)}

    def _rates(self) -> dict:
        """Per-second rates between consecutive samples, for the overview charts."""
        h = list(self.history)
        t, msg_in, bytes_in, msg_out = [], [], [], []
        for a, b in zip(h, h[1:]):
            dt = max(1, b.t_ms - a.t_ms) / 1000
            t.append(b.t_ms / 1000)
            msg_in.append(round(max(0, b.messages - a.messages) / dt, 1))
            bytes_in.append(round(max(0, b.log_end - a.log_end) / dt, 1))
            msg_out.append(round(max(0, b.consumed - a.consumed) / dt, 1))
        return {"t": t, "messages_in": msg_in, "bytes_in": bytes_in, "messages_out": msg_out,
                "seq": self.samples}

    def _topic_rate(self, topic: str) -> float:
        h = list(self.history)
        if len(h) < 2:
            return 0.0
        a, b = h[-2], h[-1]
        dt = max(1, b.t_ms - a.t_ms) / 1000
        return round(max(0, b.per_topic.get(topic, 0) - a.per_topic.get(topic, 0)) / dt, 1)

    # ------------------------------------------------------------------ overview

    def disk(self) -> dict:
        """Bytes and files per directory, summed again at most every DISK_CACHE_S seconds,
        and no more often than takes 1/DISK_SHARE of a core (a store of many queues has
        thousands of files to stat)."""
        now = time.monotonic()
        with self._lock:
            at, cached = self._disk
            if now - at < max(DISK_CACHE_S, self.disk_cpu_s * DISK_SHARE) and cached:
                return cached
        cpu0 = time.thread_time()
        out = {}
        for d in (COMMITLOG_DIR, CONSUMEQUEUE_DIR, INDEX_DIR, BROKER_DIR):
            b, n = dir_bytes(self.store.path / d)
            out[d] = {"bytes": b, "files": n}
        with self._lock:
            self._disk = (now, out)
            self.disk_cpu_s = time.thread_time() - cpu0
        return out

    def overview(self, fresh: bool = True) -> dict:
        """The overview page's data (``fresh``: see ``_rows_for_pages``)."""
        s = self.store
        segs = s.log.segment_list()
        report = s.recovery_report
        rows = self._rows_for_pages(fresh)
        groups = self.groups.rows()
        cfg = s.config
        tier = None
        if cfg.tier_url is not None:
            local_min = s.log.min_offset()
            first = s.first_commitlog_offset()
            tier = {"url": cfg.tier_url, "retention_hours": cfg.tier_retention_hours,
                    "first_commitlog_offset": first, "local_min_offset": local_min,
                    "held_below_local": max(0, local_min - first)}
            up = getattr(getattr(s, "tier", None), "uploaded", None)
            if up is not None:
                tier["uploaded"] = {k: v for k, v in vars(up).items()
                                    if isinstance(v, (int, float, str))}
        return {
            "store": str(s.path), "readonly": s.readonly, "flush": cfg.flush,
            "segment_size": cfg.segment_size, "retention_hours": cfg.retention_hours,
            "segments": len(segs), "sealed_segments": sum(1 for g in segs if g.sealed),
            "commitlog": {"min_offset": s.log.min_offset(), "confirmed": s.confirmed_offset()},
            "topics": len({t for t, *_ in rows}), "queues": len(rows),
            "messages": sum(hi - lo for _t, _q, lo, hi in rows),
            "groups": len({g for g, _t, _q in groups}),
            "disk": self.disk(), "recovery": _report_dict(report), "tier": tier,
            "listeners": self.listeners(), "rates": self._rates(),
        }

    # ------------------------------------------------------------------ topics

    def topics(self) -> list[dict]:
        """Every topic's row (offsets summed over its queues), built once per queue reading
        and rate sample."""
        s = self.store
        rows = self._rows_for_pages()
        h = self.history
        stamp = (id(rows), h[-1].t_ms if h else None, len(s.queue_counts()))
        if self._topics[0] == stamp:
            return self._topics[1]
        rate = self._rates_by_topic()
        out: dict[str, dict] = {}
        for t, _q, lo, hi in rows:
            d = out.get(t)
            if d is None:
                kind = s.topic_type(t)
                d = out[t] = {"topic": t, "type": kind.value if kind else "normal",
                              "queues": 0, "messages": 0, "min_offset": 0, "max_offset": 0,
                              "rate_in": rate.get(t, 0.0)}
            d["queues"] += 1
            d["messages"] += hi - lo
            d["min_offset"] += lo
            d["max_offset"] += hi
        got = list(out.values())
        self._topics = (stamp, got)
        return got

    def _rates_by_topic(self) -> dict[str, float]:
        if len(self.history) < 2:
            return {}
        a, b = self.history[-2], self.history[-1]
        dt = max(1, b.t_ms - a.t_ms) / 1000
        return {t: round(max(0, n - a.per_topic.get(t, 0)) / dt, 1)
                for t, n in b.per_topic.items()}

    def topic(self, topic: str) -> dict | None:
        s = self.store
        if not is_topic_name(topic) or s.queue_count(topic) == 0:
            return None
        queues = []
        for q in range(s.queue_count(topic)):
            lo, hi = s.min_offset(topic, q), s.max_offset(topic, q)
            queues.append({"queue": q, "min_offset": lo, "max_offset": hi, "messages": hi - lo,
                           "earliest_ms": s.earliest_time(topic, q)})
        kind = s.topic_type(topic)
        groups = self.groups_list(topic)
        return {"topic": topic, "type": kind.value if kind else "normal", "queues": queues,
                "messages": sum(q["messages"] for q in queues), "groups": groups,
                "rate_in": self._topic_rate(topic)}

    # ------------------------------------------------------------------ groups

    def groups_list(self, topic: str | None = None, fresh: bool = True) -> list[dict]:
        """One row per (group, topic) with its per-queue committed offset and lag (of one
        topic's groups only, read fresh, with ``topic``; ``fresh``: see
        ``_rows_for_pages``)."""
        s = self.store
        rows = self.groups.rows()
        if topic is not None:
            rows = {k: v for k, v in rows.items() if k[1] == topic}
            bounds = {(topic, q): (s.min_offset(topic, q), s.max_offset(topic, q))
                      for q in range(s.queue_count(topic))}
        else:
            bounds = self._bounds({(t, q) for _g, t, q in rows}, fresh)
        by: dict[tuple[str, str], dict] = {}
        for (g, t, q), (commit, pop, flying, retry) in sorted(rows.items()):
            lo, hi = bounds.get((t, q), (0, 0))
            d = by.get((g, t))
            if d is None:
                d = by[(g, t)] = {"group": g, "topic": t, "protocol": "rocketmq", "lag": 0,
                                  "in_flight": 0, "retrying": 0, "queues": []}
            lag = max(0, hi - max(lo, commit))
            d["queues"].append({"queue": q, "committed": commit, "pop_offset": pop,
                                "max_offset": hi, "lag": lag, "in_flight": flying,
                                "retrying": retry})
            d["lag"] += lag
            d["in_flight"] += flying
            d["retrying"] += retry
        dlq_counts: dict[str, int] = {}
        for d in by.values():
            g = d["group"]
            if g not in dlq_counts:
                dlq_counts[g] = self._topic_messages(dlq_topic(g))
            d["dead_letters"] = dlq_counts[g]
            d["dlq_topic"] = dlq_topic(g)
            d["state"], d["members"] = None, []
        return list(by.values()) + self._kafka_groups(topic, fresh)

    def _kafka_groups(self, topic: str | None, fresh: bool = True) -> list[dict]:
        """Kafka classic groups: per (group, topic) the committed offset and lag of each
        partition, the group's state and members (inside ``strata serve --kafka``; a group
        known only by its committed offsets is Empty, as Kafka lists it)."""
        s = self.store
        committed = self.groups.kafka_rows()
        if topic is not None:
            committed = {k: v for k, v in committed.items() if k[1] == topic}
        live = self.groups.kafka_live()
        bounds = self._bounds({(t, q) for _g, t, q in committed}, fresh) \
            if topic is None else {
            (topic, q): (s.min_offset(topic, q), s.max_offset(topic, q))
            for q in range(s.queue_count(topic))}
        by: dict[tuple[str, str], dict] = {}
        for (g, t, q), commit in sorted(committed.items()):
            d = by.get((g, t))
            if d is None:
                info = live.get(g, {})
                d = by[(g, t)] = {
                    "group": g, "topic": t, "protocol": "kafka",
                    "state": info.get("state", "Empty"),
                    "assignor": info.get("protocol", ""), "members": info.get("members", []),
                    "lag": 0, "in_flight": 0, "retrying": 0, "dead_letters": 0,
                    "dlq_topic": None, "queues": []}
            lo, hi = bounds.get((t, q), (0, 0))
            lag = max(0, hi - max(lo, commit))
            d["queues"].append({"queue": q, "committed": commit, "pop_offset": None,
                                "max_offset": hi, "lag": lag, "in_flight": 0, "retrying": 0})
            d["lag"] += lag
        # groups with members that committed nothing yet
        for g, info in sorted(live.items()):
            if topic is None and not any(k[0] == g for k in by):
                by[(g, "")] = {"group": g, "topic": "", "protocol": "kafka",
                               "state": info.get("state", ""),
                               "assignor": info.get("protocol", ""),
                               "members": info.get("members", []), "lag": 0, "in_flight": 0,
                               "retrying": 0, "dead_letters": 0, "dlq_topic": None,
                               "queues": []}
        return list(by.values())

    def _bounds(self, wanted: set[tuple[str, int]],
                fresh: bool = True) -> dict[tuple[str, int], tuple[int, int]]:
        """(min, max) offset of the ``wanted`` queues (and maybe others): the pages' reading
        of every queue while it holds (see ``_rows_key``; without ``fresh``, the sampler's
        last one); else a writer's consume queues read directly, only those wanted (a few
        us each, where all 8,000 cost ~10 ms)."""
        s = self.store
        at, rows, was = self._rows
        key = self._rows_key()
        if fresh and key is not None and (rows is None or key != was):
            return {(t, q): (lo, hi) for t, q, lo, hi in s.queue_bounds(wanted)}
        return self._reading(self._rows_for_pages(fresh))

    def _topic_messages(self, topic: str) -> int:
        s = self.store
        return sum(s.max_offset(topic, q) - s.min_offset(topic, q)
                   for q in range(s.queue_count(topic)))

    def group_history(self) -> dict:
        h = list(self.history)
        last = h[-1].group_lag if h else {}
        names = sorted(sorted(last, key=lambda g: -last[g])[:CHART_GROUPS])
        return {"t": [smp.t_ms / 1000 for smp in h],
                "lag": {g: [smp.group_lag.get(g, 0) for smp in h] for g in names},
                "seq": self.samples}

    # ------------------------------------------------------------------ messages

    def message(self, msg_id: str) -> dict | None:
        s = self.store
        try:
            m = s.get_by_id(msg_id)
        except (InvalidInputError, ValueError):
            raise InvalidInputError(f"{msg_id!r} is not a message id (32 hex digits)") from None
        return None if m is None else self._full(m)

    def _from_tier(self, m) -> bool:
        return m.commitlog_offset < self.store.log.min_offset()

    def _full(self, m) -> dict:
        body = bytes(m.body)
        text = _as_text(body)
        pretty = None
        if text is not None:
            try:
                pretty = json.dumps(json.loads(text), indent=2, ensure_ascii=False)
            except ValueError:
                pass
        d = self._summary(m)
        d.update({"body_text": text, "body_json": pretty, "body_hex": body[:65536].hex(),
                  "body_size": len(body), "properties": m.properties,
                  "born_host": _host(m.born_host), "store_host": _host(m.store_host),
                  "reconsume_times": m.reconsume_times, "flag": m.flag, "sys_flag": m.sys_flag})
        return d

    def _summary(self, m) -> dict:
        body = bytes(m.body[:120])
        preview = _as_text(body)
        if preview is None:     # (a multi-byte character cut at 120 bytes shows as hex too)
            preview = body[:60].hex()
        return {"msg_id": m.msg_id, "topic": m.topic, "queue": m.queue_id,
                "queue_offset": m.queue_offset, "commitlog_offset": m.commitlog_offset,
                "keys": list(m.keys), "tags": m.tags, "size": m.size,
                "born_ms": m.born_timestamp, "stored_ms": m.store_timestamp,
                "from_tier": self._from_tier(m), "preview": preview}

    def messages(self, q: dict[str, str]) -> dict:
        """The message finder: by ``id``; by ``topic`` + ``key`` (``begin``/``end`` ms); by
        ``topic`` + ``queue`` + offsets (``from``, ``to``, ``order`` newest|oldest,
        ``limit``); by ``topic`` + ``time`` (ms: the first message at or after it per queue)."""
        s = self.store
        limit = _int(q, "limit", 50, 1, MAX_PAGE)
        if q.get("id"):
            m = self.message(q["id"])
            return {"by": "id", "messages": [] if m is None else [m]}
        topic = q.get("topic", "")
        if not is_topic_name(topic):
            raise InvalidInputError(f"topic {topic!r} is not a topic name ([%|a-zA-Z0-9_-], "
                                    "1-127 characters)")
        n = s.queue_count(topic)
        if n == 0:
            raise InvalidInputError(f"no topic {topic!r} in this store")
        if q.get("key"):
            found = s.query(topic, q["key"], begin_ms=_int(q, "begin", 0, 0),
                            end_ms=_int(q, "end", None, 0), max_results=limit)
            return {"by": "key", "messages": [self._summary(m) for m in found]}
        if q.get("time"):
            at = _int(q, "time", 0, 0)
            out = []
            for qid in range(n):
                off = s.offset_for_time(topic, qid, at, "lower")
                if off < s.max_offset(topic, qid):
                    got = s.get(topic, qid, off, 1)
                    out += [self._summary(m) for m in got.messages]
            out.sort(key=lambda d: d["stored_ms"])
            return {"by": "time", "messages": out[:limit]}
        qid = _int(q, "queue", 0, 0, n - 1)
        lo, hi = s.min_offset(topic, qid), s.max_offset(topic, qid)
        newest = q.get("order", "newest") != "oldest"
        if newest:
            end = min(hi, _int(q, "to", hi, 0))          # exclusive
            start = max(lo, end - limit)
        else:
            start = max(lo, _int(q, "from", lo, 0))
            end = min(hi, start + limit)
        msgs = []
        at = start
        while at < end:
            got = s.get(topic, qid, at, min(32, end - at))
            if not got.messages:
                if got.next_offset <= at:
                    break
                at = got.next_offset
                continue
            msgs += [self._summary(m) for m in got.messages if m.queue_offset < end]
            at = got.next_offset
        if newest:
            msgs.reverse()
        return {"by": "queue", "topic": topic, "queue": qid, "min_offset": lo,
                "max_offset": hi, "from": start, "to": end, "order":
                "newest" if newest else "oldest", "messages": msgs,
                "older": start if start > lo else None, "newer": end if end < hi else None}


def _int(q: dict, name: str, default, lo: int | None = None, hi: int | None = None):
    raw = q.get(name)
    if raw is None or raw == "":
        return default
    try:
        v = int(raw)
    except ValueError:
        raise InvalidInputError(f"{name}={raw!r} is not an integer") from None
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        rng = f"{lo}..{hi}" if hi is not None else f">= {lo}"
        raise InvalidInputError(f"{name}={v} is out of range ({rng})")
    return v


_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def _as_text(body: bytes) -> str | None:
    """The body as text if it is UTF-8 without control characters (else it is shown as hex)."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return None if _CONTROL.search(text) else text


def _host(h) -> str:
    """A stored host as ``ip:port``."""
    try:
        ip, port = h
    except (TypeError, ValueError):
        return str(h)
    return f"[{ip}]:{port}" if ":" in str(ip) else f"{ip}:{port}"


def _report_dict(report) -> dict | None:
    if report is None:
        return None
    d = asdict(report)
    d["lost_anything"] = report.lost_anything
    for k in ("corrupt_records", "closed_gaps"):
        d[k] = [str(x) for x in getattr(report, k)]
    return d


def is_internal(topic: str) -> bool:
    """Topics the broker makes for itself (dead letters, retries)."""
    return topic.startswith((DLQ_PREFIX, RETRY_PREFIX))
