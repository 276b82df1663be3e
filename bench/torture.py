"""Torture suite (issue 17): try to break a store the way an operations team would, and count
what breaks. Prints JSON lines: one per failure found (``"event": "failure"``, with the seed,
round, file, offset and error needed to reproduce it), one per scenario, and a final summary
``{"event": "summary", "lost": .., "wrong": .., "tracebacks": .., "kills": .., "flips": ..}``.

Scenarios, each checked against a model of every acknowledged message (a put that returned OK),
read back by ``get`` (a walk of every queue), ``read_at``, ``get_by_id`` and ``query`` (by key):

* kills: a child process appends (several topics, keys, tags, single puts and batches, two
  threads) under flush=sync and flush=async and is SIGKILLed at a random moment; it reports each
  acknowledgement over a pipe only after the put returned OK. A process crash loses nothing.
* power: the fault-injection file layer drops every unsynced byte after a random partial
  write-back of dirty pages and one torn write; under sync flush every acknowledged message
  survives, under async every one below the flushed offset.
* flips: one bit flipped in a copy of a small store, in a commit-log record (header field,
  topic, properties, body, trailer), a segment header or footer, a consume-queue unit, a
  key-index header/slot/entry, the checkpoint, config/topics.json or config/geometry.json. A
  flip may cost at most the record it hits; damaged bytes are never served as good. A flip in a
  key-index entry may cost its own message's ``query`` lookup (decoded from the entry before
  the flip; such rounds are counted as ``"cost"``, not as lost), nothing else.
* disk: a 16 MiB tmpfs (as root; the fault layer's full-disk mode otherwise) filled up while
  appending: DiskFullError (never a raw OSError), nothing acknowledged lost, and everything
  readable again once space is freed.

* tailflips (issue 22): one bit flipped in a record of a store that crashed under sync flush
  after a checkpoint and more acknowledged puts; half the flips hit records written after the
  checkpoint (every other one of those in the active segment), half records before it. Only the
  hit record may be lost; ``strata verify``'s log check run before the open must name it, and so
  must the open's ``recovery_report`` for a record after the checkpoint (``silent`` counts the
  rounds where one did not).
* lostseg (issue 22): the last commit-log segment file deleted after a clean close or a crash
  right after a checkpoint: only its messages may be lost, and the open must say so
  (``lost_anything``, the file in ``problem``; else ``silent``).

Counts: ``lost`` = acknowledged (and required to survive) but not returned by some read path;
``wrong`` = another message or different bytes returned, a duplicate, a non-consecutive queue
offset; ``tracebacks`` = an exception that is not a deliberate strata error; ``errors`` = a
strata error where none should be (also counted as lost for the message it hid); ``refused`` =
a config file flip the store refused to open with a named strata error (allowed).

    .venv/bin/python bench/torture.py --kills 200 --flips 1000 --seconds 1800 --seed 1
    .venv/bin/python bench/torture.py --kills 200 --flips 1000 --power 100 --disk 4 \
        --tailflips 1000 --lostseg 100 --seconds 5400 --seed 22        # the long run of issue 22

The short CI run is tests/torture/test_torture_short.py; it imports this file.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import strata
from strata.errors import DiskFullError, StrataError

HERE = Path(__file__).resolve()
REPO = HERE.parent.parent
KiB = 1 << 10
MiB = 1 << 20
SEGMENT = 64 * KiB
HEADER_PAGE = 4096
PAGE = 4096
TOPICS = ("t0", "t1", "t2", "t3", "t4")
MAX_FAILURE_LINES = 400        # failure events printed per run (counts are always complete)
LINES_PER_ROUND = 6            # and per round of a scenario

# Small files so that each round is fast and every file kind has several instances.
GEOMETRY = dict(segment_size=SEGMENT, prefault=False, consume_queue_units=32, index_slots=64,
                index_entries=128, default_queues=2)


def store_config(**kw) -> strata.StoreConfig:
    cfg = dict(GEOMETRY)
    cfg.update(kw)
    return strata.StoreConfig(**cfg)


# --------------------------------------------------------------------------- the model


def body_of(seq: int) -> bytes:
    """The body of message ``seq``: 10 to 1500 deterministic bytes."""
    h = hashlib.blake2b(seq.to_bytes(8, "little"), digest_size=32).digest()
    size = 10 + int.from_bytes(h[:2], "little") % 1491
    return (h * (size // 32 + 1))[:size]


def tag_of(seq: int) -> str | None:
    return None if seq % 4 == 3 else f"g{seq % 4}"


def message_of(seq: int, topic: str) -> strata.Message:
    return strata.Message(topic, body_of(seq), keys=[f"k{seq}"], tags=tag_of(seq),
                          properties={"seq": str(seq)})


@dataclass(frozen=True)
class Ack:
    """An acknowledged put: where the store said it put message ``seq``."""
    seq: int
    topic: str
    queue_id: int
    queue_offset: int
    offset: int
    size: int
    msg_id: str

    def line(self) -> str:
        return (f"A {self.seq} {self.topic} {self.queue_id} {self.queue_offset} {self.offset} "
                f"{self.size} {self.msg_id}\n")

    @staticmethod
    def parse(line: str) -> "Ack | None":
        p = line.split()
        if len(p) != 8 or p[0] != "A":
            return None
        return Ack(int(p[1]), p[2], int(p[3]), int(p[4]), int(p[5]), int(p[6]), p[7])


def ack_of(seq: int, r) -> Ack:
    return Ack(seq, r.topic, r.queue_id, r.queue_offset, r.commitlog_offset, r.size, r.msg_id)


def put_random(store, rng: random.Random, next_seq, topics=TOPICS) -> list[Ack]:
    """One single put or batch of random topics; the acknowledgements of what returned OK."""
    n = 1 if rng.random() < 0.4 else rng.randint(2, 8)
    seqs = [next_seq() for _ in range(n)]
    one_topic = rng.random() < 0.5
    t0 = rng.choice(topics)
    msgs = [message_of(s, t0 if one_topic else rng.choice(topics)) for s in seqs]
    results = [store.put(msgs[0])] if n == 1 else store.put_batch(msgs)
    return [ack_of(s, r) for s, r in zip(seqs, results) if r.status is strata.PutStatus.OK]


# --------------------------------------------------------------------------- results


@dataclass
class Tally:
    """Counts of one scenario (or the whole run) and the failures behind them."""
    lost: int = 0
    wrong: int = 0
    tracebacks: int = 0
    errors: int = 0
    refused: int = 0
    checks: int = 0
    # query lookups missed by a message whose own key-index entry a flip hit (allowed: see
    # check_store's query_victims); the flip scenario reports the rounds as "cost"
    cost: int = 0
    failures: list = field(default_factory=list)
    failed_rounds: list = field(default_factory=list)
    # "kind or phase/problem/via" -> [count, rounds hit, the first failure of that signature]
    signatures: dict = field(default_factory=dict)
    _lines_per_round: dict = field(default_factory=dict)

    def fail(self, what: str, ctx: dict, **detail) -> None:
        setattr(self, what, getattr(self, what) + 1)
        rnd = ctx.get("round")
        if rnd not in self.failed_rounds and what != "refused":
            self.failed_rounds.append(rnd)
        line = {"event": "failure", "problem": what, **ctx, **detail}
        sig = f"{ctx.get('kind') or ctx.get('phase') or ctx.get('flush')}/{what}/" \
              f"{detail.get('via')}"
        seen = self.signatures.setdefault(sig, [0, set(), line])
        seen[0] += 1
        seen[1].add(rnd)
        shown = self._lines_per_round.get(rnd, 0)
        if len(self.failures) < MAX_FAILURE_LINES and shown < LINES_PER_ROUND:
            self._lines_per_round[rnd] = shown + 1
            self.failures.append(line)
        elif len(seen[1]) == 1 and seen[0] == 1:
            self.failures.append(line)   # every signature shows at least one example

    def table(self) -> dict:
        """signature -> {count, rounds}: what failed how often, and in how many rounds."""
        return {sig: {"count": n, "rounds": len(rounds)}
                for sig, (n, rounds, _) in sorted(self.signatures.items())}

    def raised(self, ctx: dict, via: str, e: BaseException) -> None:
        """An exception where none belonged: a traceback, or a strata error."""
        self.fail("errors" if deliberate(e) else "tracebacks", ctx, via=via, error=describe(e))

    def add(self, other: "Tally") -> None:
        for k in ("lost", "wrong", "tracebacks", "errors", "refused", "checks"):
            setattr(self, k, getattr(self, k) + getattr(other, k))
        room = MAX_FAILURE_LINES - len(self.failures)
        self.failures.extend(other.failures[:max(0, room)])

    def counts(self) -> dict:
        return {k: getattr(self, k) for k in ("lost", "wrong", "tracebacks", "errors",
                                              "refused", "checks")}

    def ok(self) -> bool:
        return self.lost == self.wrong == self.tracebacks == self.errors == 0


def describe(e: BaseException) -> str:
    """An exception as one line: type, message and the innermost frame."""
    tb = traceback.extract_tb(e.__traceback__)
    where = f" at {Path(tb[-1].filename).name}:{tb[-1].lineno} in {tb[-1].name}" if tb else ""
    return f"{type(e).__name__}: {e}{where}"[:500]


def deliberate(e: BaseException) -> bool:
    return isinstance(e, StrataError)


# --------------------------------------------------------------------------- checking a store


def _same(m, a: Ack, exact: dict[int, tuple] | None = None) -> str | None:
    """None if stored message ``m`` is exactly what ``a`` acknowledged, else what differs;
    ``exact``: every field of each message as first stored, when known."""
    if exact is not None and a.seq in exact and tuple(m) != exact[a.seq]:
        names = strata.StoredMessage.FIELDS
        return "fields differ: " + ", ".join(n for n, x, y in zip(names, m, exact[a.seq])
                                             if x != y)
    if m.commitlog_offset != a.offset:
        return f"commit-log offset {m.commitlog_offset} != {a.offset}"
    if m.topic != a.topic or m.queue_id != a.queue_id or m.queue_offset != a.queue_offset:
        return (f"position {m.topic}/{m.queue_id}@{m.queue_offset} != "
                f"{a.topic}/{a.queue_id}@{a.queue_offset}")
    return _content_differs(m, a.seq)


def _content_differs(m, seq: int) -> str | None:
    if m.body != body_of(seq):
        return f"body differs ({len(m.body)} bytes, acknowledged {len(body_of(seq))})"
    if tuple(m.keys) != (f"k{seq}",):
        return f"keys {m.keys!r}"
    if m.tags != tag_of(seq):
        return f"tags {m.tags!r}"
    if m.properties.get("seq") != str(seq):
        return f"properties {m.properties!r}"
    return None


def check_store(store, acks: dict[int, Ack], tally: Tally, ctx: dict, *,
                required: set[int] | None = None, victims: frozenset[int] = frozenset(),
                sample: set[int] | None = None, exact: dict[int, tuple] | None = None,
                query_victims: frozenset[int] = frozenset()) -> None:
    """Read every acknowledged message back four ways and count what is lost or wrong.

    ``required``: the seqs that must survive (None: all of ``acks``); the others may be gone but
    must be exact if returned. ``victims``: seqs whose record a fault hit: they may be missing or
    raise a strata error, never come back different. ``sample``: the seqs read by ``read_at``,
    ``get_by_id`` and ``query`` (None: all); the queue walk always covers every queue.
    ``query_victims``: seqs whose key-index entry a fault hit: ``query`` may miss them (counted
    as ``cost``), every other read path must still serve them.
    """
    must = set(acks) if required is None else required
    must = must - victims
    by_queue: dict[tuple[str, int], dict[int, Ack]] = {}
    for a in acks.values():
        by_queue.setdefault((a.topic, a.queue_id), {})[a.queue_offset] = a

    def guarded(via: str, seq: int | None, fn):
        """fn() or None; exceptions are counted (and a strata error hides the message)."""
        try:
            return fn(), None
        except Exception as e:  # noqa: BLE001 - counting every kind is the point
            if not deliberate(e):
                tally.fail("tracebacks", ctx, via=via, seq=seq, error=describe(e))
                return None, e
            if seq is not None and seq in victims:
                return None, e
            tally.fail("errors", ctx, via=via, seq=seq, error=describe(e))
            return None, e

    # 1. get: walk every queue from its minimum offset to its maximum; a batch whose messages
    # do not cover its units one for one is read again unit by unit, so that each message
    # returned is judged against the queue position it was served for
    seen_in_queues: dict[int, int] = {}

    def judge(topic: str, q: int, pos: int, m) -> None:
        tally.checks += 1
        try:
            seq_text = m.properties.get("seq", "")
        except Exception as e:  # noqa: BLE001 - the store failed to decode what it served
            if not deliberate(e):
                tally.fail("tracebacks", ctx, via="get", queue=f"{topic}/{q}",
                           error=describe(e))
            seq_text = ""
        # a seq that is not a number: damaged bytes were served (judged wrong below)
        seq = int(seq_text) if seq_text.isdigit() else -1
        a = acks.get(seq)
        where = dict(via="get", queue=f"{topic}/{q}", queue_offset=pos, seq=seq)
        if m.topic != topic or m.queue_id != q or m.queue_offset != pos:
            exp = by_queue.get((topic, q), {}).get(pos)
            tally.fail("wrong", ctx, **where, expected_seq=exp.seq if exp else None,
                       detail=f"asked {topic}/{q}@{pos}, got {m.topic}/{m.queue_id}@"
                              f"{m.queue_offset} at commit-log offset {m.commitlog_offset}")
        elif a is not None:
            diff = _safe(lambda: _same(m, a, exact))
            if diff:
                tally.fail("wrong", ctx, **where, detail=diff)
        elif seq < 0 or _safe(lambda: _content_differs(m, seq)):
            tally.fail("wrong", ctx, **where,
                       detail="an unacknowledged message whose bytes are not any put's")
        if seq >= 0:
            if seq in seen_in_queues:
                tally.fail("wrong", ctx, **where, detail="served twice")
            seen_in_queues[seq] = pos

    passed_over: set[tuple[str, int, int]] = set()   # units a get reported damaged

    def note_passed(topic: str, q: int, res) -> None:
        for c in getattr(res, "corrupt", ()) or ():
            passed_over.add((topic, q, c.queue_offset))

    topics, _ = guarded("topics", None, store.topics)
    for topic in topics or []:
        nq, _ = guarded("queue_count", None, lambda: store.queue_count(topic))
        for q in range(nq or 0):
            off = store.min_offset(topic, q)
            mx = store.max_offset(topic, q)
            expect = by_queue.get((topic, q), {})
            while off < mx:
                try:
                    res = store.get(topic, q, off, 32)
                    note_passed(topic, q, res)
                    end = res.next_offset if res.next_offset > off else off + 1
                except Exception:  # noqa: BLE001 - read unit by unit below, counted there
                    res, end = None, min(mx, off + 32)
                if res is not None and len(res.messages) == end - off:
                    for i, m in enumerate(res.messages):
                        judge(topic, q, off + i, m)
                else:
                    for pos in range(off, end):
                        exp = expect.get(pos)
                        one, _ = guarded("get", exp.seq if exp else None,
                                         lambda: store.get(topic, q, pos, 1))
                        note_passed(topic, q, one)
                        if one is not None and one.messages:
                            judge(topic, q, pos, one.messages[0])
                off = end
    # reads never write: a unit a get found leading to another record was reported and passed
    # over, and the writer re-derives it in the background; once it has, get serves it. It
    # may have done so before this check (so not only while repairs.pending()): wait for any
    # repair left, and read again what was passed over
    missing = [seq for seq in sorted(must) if seq not in seen_in_queues
               and (acks[seq].topic, acks[seq].queue_id, acks[seq].queue_offset) in passed_over]
    if missing and not store.readonly:
        store.wait_repaired()
        for seq in missing:
            a = acks[seq]
            one, _ = guarded("get", seq, lambda: store.get(a.topic, a.queue_id,
                                                           a.queue_offset, 1))
            if one is not None and one.messages:
                judge(a.topic, a.queue_id, a.queue_offset, one.messages[0])
    for seq in sorted(must):
        if seq not in seen_in_queues:
            a = acks[seq]
            tally.fail("lost", ctx, via="get", seq=seq, queue=f"{a.topic}/{a.queue_id}",
                       queue_offset=a.queue_offset, offset=a.offset)

    # 2-4. read_at, get_by_id, query
    for seq in sorted(acks if sample is None else sample & set(acks)):
        a = acks[seq]
        present = False
        for via, fn in (("read_at", lambda: store.read_at(a.offset)),
                        ("get_by_id", lambda: store.get_by_id(a.msg_id))):
            tally.checks += 1
            m, err = guarded(via, seq, fn)
            if m is not None:
                present = True
                diff = _safe(lambda: _same(m, a, exact))
                if diff:
                    tally.fail("wrong", ctx, via=via, seq=seq, offset=a.offset, detail=diff)
            elif seq in must:   # (a strata error that hid it was counted as well)
                tally.fail("lost", ctx, via=via, seq=seq, offset=a.offset)
        tally.checks += 1
        found, err = guarded("query", seq, lambda: store.query(a.topic, f"k{seq}"))
        if found is None and seq in must:
            tally.fail("lost", ctx, via="query", seq=seq, offset=a.offset)
        elif found is not None:
            mine = 0
            for m in found:
                diff = _safe(lambda: _same(m, a, exact))
                if diff:
                    tally.fail("wrong", ctx, via="query", seq=seq, offset=a.offset,
                               detail=f"query {a.topic}#k{seq}: {diff}")
                else:
                    mine += 1
            if mine > 1:
                tally.fail("wrong", ctx, via="query", seq=seq, detail=f"returned {mine} times")
            if mine == 0 and seq in query_victims:
                tally.cost += 1
            elif mine == 0 and (seq in must or (present and seq not in victims)):
                tally.fail("lost", ctx, via="query", seq=seq, offset=a.offset)


def _safe(fn):
    """fn(); an exception while comparing a message counts as a difference."""
    try:
        return fn()
    except Exception as e:  # noqa: BLE001
        return f"decoding it raised {describe(e)}"


def open_checked(opener, tally: Tally, ctx: dict, n_required: int, *,
                 refusal_allowed: bool = False):
    """``opener()`` (a store); an exception is counted, and every required message as lost
    unless a named strata error is an allowed answer (``refusal_allowed``)."""
    try:
        return opener()
    except Exception as e:  # noqa: BLE001
        if refusal_allowed and deliberate(e):
            tally.fail("refused", ctx, via="open", error=describe(e))
        else:
            tally.raised(ctx, "open", e)
            tally.lost += n_required
        return None


def open_and_check(path: Path, cfg, acks: dict[int, Ack], tally: Tally, ctx: dict,
                   n_required: int, *, refusal_allowed: bool = False, **check) -> bool:
    """Open the store, check it (``check``: check_store's options), close it; False if it
    did not open."""
    store = open_checked(lambda: strata.MessageStore(path, cfg), tally, ctx, n_required,
                         refusal_allowed=refusal_allowed)
    if store is None:
        return False
    try:
        rep = store.recovery_report
        ctx["recovery"] = rep.summary()[:300] if rep is not None else None
        check_store(store, acks, tally, ctx, **check)
    except Exception as e:  # noqa: BLE001
        tally.raised(ctx, "check", e)
    finally:
        close_checked(store, tally, ctx)
    return True


def close_checked(store, tally: Tally, ctx: dict, *, disk_full_ok: bool = False) -> None:
    """Close; an exception is counted (DiskFullError is a fair answer on a full disk: the
    checkpoint cannot be written) and the store is then dropped as a crash would."""
    try:
        store.close()
    except Exception as e:  # noqa: BLE001
        if not (disk_full_ok and isinstance(e, DiskFullError)):
            tally.raised(ctx, "close", e)
        try:
            store._abandon()
        except Exception:  # noqa: BLE001
            pass


# --------------------------------------------------------------------------- kills


def child_main(store_dir: str, flush: str, first_seq: int, seed: int) -> None:
    """The process that gets killed: append until killed, acknowledging on stdout."""
    store = strata.open(store_dir, store_config(flush=flush))
    counter = iter(range(first_seq, first_seq + 10**8))
    lock = threading.Lock()

    def next_seq() -> int:
        with lock:
            return next(counter)

    def worker(i: int) -> None:
        rng = random.Random(seed * 10 + i)
        try:
            while True:
                acks = put_random(store, rng, next_seq)
                if acks:
                    os.write(1, "".join(a.line() for a in acks).encode())  # one write
                if rng.random() < 0.5:
                    time.sleep(rng.random() * 0.002)
        except BaseException:
            traceback.print_exc()
            os._exit(3)

    parent = os.getppid()
    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(2)]
    os.write(1, b"ready\n")
    for t in threads:
        t.start()
    while os.getppid() == parent:   # never outlive the harness (its kill is the normal end)
        time.sleep(0.2)
    os._exit(4)


def kill_round(store_dir: Path, flush: str, first_seq: int, rng: random.Random,
               before_ready: bool) -> tuple[dict[int, Ack], str, bool]:
    """Run the child and SIGKILL it; returns (acknowledgements, its stderr, killed mid-write)."""
    err_file = tempfile.TemporaryFile()
    proc = subprocess.Popen([sys.executable, str(HERE), "--child", str(store_dir), flush,
                             str(first_seq), str(rng.randrange(1 << 30))],
                            stdout=subprocess.PIPE, stderr=err_file, stdin=subprocess.DEVNULL)
    lines: list[str] = []
    got_ack = threading.Event()

    def reader() -> None:
        buf = b""
        while True:
            chunk = proc.stdout.read1(65536)
            if not chunk:
                break
            buf += chunk
            *done, buf = buf.split(b"\n")
            lines.extend(x.decode() for x in done)
            if any(x.startswith(b"A ") for x in done):
                got_ack.set()

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    try:
        if before_ready:
            time.sleep(rng.uniform(0.05, 0.6))   # somewhere in start-up or recovery
        else:
            got_ack.wait(30)
            time.sleep(rng.uniform(0.0, 0.4))
        proc.send_signal(signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        t.join(10)
        proc.stdout.close()
        err_file.seek(0)
        err = err_file.read().decode(errors="replace")
        err_file.close()
    acks = {}
    for line in lines:   # an unfinished last line was never split off: not an acknowledgement
        a = Ack.parse(line)
        if a is not None:
            acks[a.seq] = a
    mid_write = bool(acks) and proc.returncode == -signal.SIGKILL
    if proc.returncode != -signal.SIGKILL:
        err = f"child ended on its own (exit {proc.returncode}): {err}"
    elif not err.strip():
        err = ""
    return acks, err, mid_write


def scenario_kills(n: int, workdir: Path, seed: int, deadline: float) -> tuple[Tally, dict]:
    """``n`` kills, on stores of up to 10 kills each (a short run: half sync, half async)."""
    kills_per_store = max(1, min(10, n // 2))
    tally = Tally()
    stats = {"kills": 0, "kills_mid_write": 0, "acked": 0, "stores": 0,
             "by_mode": {"sync": 0, "async": 0}}
    acks: dict[int, Ack] = {}
    store_dir = None
    for rnd in range(n):
        flush = ("sync", "async")[(rnd // kills_per_store) % 2]
        if time.monotonic() > deadline:
            # the budget is spent: stop, unless a flush mode has had no kill yet (a loaded
            # machine must not drop a whole mode); then skip ahead to that mode's next store
            if min(stats["by_mode"].values()) > 0:
                break
            if stats["by_mode"][flush] > 0:
                continue
        if rnd % kills_per_store == 0:
            if store_dir is not None:
                shutil.rmtree(store_dir, ignore_errors=True)
            store_dir = workdir / f"kills-{rnd // kills_per_store}"
            acks = {}
            stats["stores"] += 1
        rng = random.Random(f"{seed}-kill-{rnd}")
        ctx = {"scenario": "kill", "seed": seed, "round": rnd, "flush": flush,
               "store": store_dir.name}
        before_ready = rng.random() < 0.15
        new, err, mid = kill_round(store_dir, flush, (rnd + 1) * 10**7, rng, before_ready)
        stats["kills"] += 1
        stats["by_mode"][flush] += 1
        stats["kills_mid_write"] += mid
        if err:
            if "Traceback" in err or "ended on its own" in err:
                tally.fail("tracebacks", ctx, via="child", error=err[-800:])
        acks.update(new)
        stats["acked"] += len(new)
        # every acknowledged message of this store, four ways
        open_and_check(store_dir, store_config(flush=flush), acks, tally, ctx, len(acks))
    if store_dir is not None:
        shutil.rmtree(store_dir, ignore_errors=True)
    return tally, stats


# --------------------------------------------------------------------------- power loss


def scenario_power(rounds: int, workdir: Path, seed: int, deadline: float,
                   first: int = 0) -> tuple[Tally, dict]:
    from strata.testing.faults import FaultInjectingFileOps

    tally = Tally()
    stats = {"power_losses": 0, "by_mode": {"sync": 0, "async": 0}, "acked": 0,
             "required": 0, "zeroed_bytes": 0}
    for rnd in range(first, first + rounds):
        if time.monotonic() > deadline and rnd >= first + 2:
            break
        flush = ("sync", "async")[rnd % 2]
        rng = random.Random(f"{seed}-power-{rnd}")
        path = workdir / f"power-{rnd}"
        ctx = {"scenario": "power", "seed": seed, "round": rnd, "flush": flush}
        fops = FaultInjectingFileOps()
        # background flushes and checkpoints land in the middle of the appends (queue units
        # written after the last checkpoint are what a power loss can tear); what is durable
        # is read from the store's flushed offset just before the power goes
        cfg = store_config(flush=flush, flush_interval_ms=rng.choice((20, 50, 200)),
                           checkpoint_interval_ms=rng.choice((1, 30, 100)))
        acks: dict[int, Ack] = {}
        seqs = iter(range(10**9))
        store = strata.MessageStore(path, cfg, file_ops=fops)
        flushed = 0
        try:
            for _ in range(rng.randint(40, 160)):
                for a in put_random(store, rng, lambda: next(seqs)):
                    acks[a.seq] = a
                if flush == "async" and rng.random() < 0.05:
                    store.flush()
                if rng.random() < 0.05:
                    time.sleep(rng.random() * 0.05)
            if flush == "async" and rng.random() < 0.5:
                store.flush()
            if rng.random() < 0.5:
                store.wait_dispatched(10)
            flushed = store.flushed_offset()
        except Exception as e:  # noqa: BLE001
            tally.raised(ctx, "put", e)
        store._abandon()
        # the kernel wrote back some dirty pages before the power went, one write half done
        tears = []
        for p, ranges in list(fops.synced.items()):
            if not p.exists():
                continue
            size = p.stat().st_size
            for _ in range(rng.choice((0, 0, 1, 2, 4))):
                a = rng.randrange(0, max(1, size // PAGE)) * PAGE
                ranges.append((a, a + PAGE))
            # torn writes: some bytes of a data page reached the disk, their neighbours not
            lo, hi = (HEADER_PAGE, size - HEADER_PAGE) if size > 2 * HEADER_PAGE else (0, size)
            for _ in range(rng.choice((0, 1, 1, 2, 3)) if hi > lo else 0):
                a = rng.randrange(lo, hi)
                ranges.append((a, a + rng.choice((rng.randint(1, 24), rng.randint(1, 600)))))
                tears.append(f"{p.relative_to(path)}@{a}")
        ctx["tears"] = tears[:5]
        lost_bytes = fops.power_loss()
        stats["zeroed_bytes"] += sum(lost_bytes.values())
        stats["power_losses"] += 1
        stats["by_mode"][flush] += 1
        stats["acked"] += len(acks)
        required = {s for s, a in acks.items()
                    if flush == "sync" or a.offset + a.size <= flushed}
        stats["required"] += len(required)
        ctx["flushed_offset"] = flushed
        for reopen in range(2):   # the damage must not come back after a clean restart
            ctx["open"] = reopen
            # an unflushed record that lost pages while a later one survived is damage with
            # good records after it (issue 22): kept out of the log, named, never served; a
            # read of it may raise the strata error that says so
            if not open_and_check(path, store_config(flush=flush), acks, tally, ctx,
                                  len(required), required=required,
                                  victims=frozenset(set(acks) - required)):
                break
        shutil.rmtree(path, ignore_errors=True)
    return tally, stats


# --------------------------------------------------------------------------- bit flips


FLIP_KINDS = ("record_header", "record_topic", "record_properties", "record_body",
              "record_trailer", "segment_header", "segment_footer", "consume_queue_unit",
              "key_index_header", "key_index_slot", "key_index_entry", "checkpoint",
              "topics_json", "geometry_json")
CONFIG_KINDS = ("topics_json", "geometry_json")
U16 = struct.Struct("<H")
KX_HEADER = 72


@dataclass
class Pristine:
    """A small store to copy and damage; ``exact``: every message as stored, field by field."""
    path: Path
    acks: dict[int, Ack]
    unclean: bool
    exact: dict[int, tuple]


def build_pristine(path: Path, seed: int, unclean: bool) -> Pristine:
    """A small store of a few hundred messages, all flushed: closed cleanly, or left as a crash
    would (abort marker present) after a checkpoint that says everything is flushed."""
    rng = random.Random(f"{seed}-pristine-{unclean}")
    cfg = store_config(flush_interval_ms=20, checkpoint_interval_ms=1)
    acks: dict[int, Ack] = {}
    seqs = iter(range(10**9))
    store = strata.open(path, cfg)
    while len(acks) < 320:
        for a in put_random(store, rng, lambda: next(seqs)):
            acks[a.seq] = a
    exact = {s: tuple(store.read_at(a.offset)) for s, a in acks.items()}
    if unclean:   # a crash right after a checkpoint that covers everything
        store._abandon(checkpointed=True)
    else:
        store.close()
    return Pristine(path, acks, unclean, exact)


def flip_target(kind: str, p: Pristine, rng: random.Random) -> tuple[Path, int, int | None]:
    """(file, byte offset, seq of the record hit or None) for a flip of ``kind``."""
    root = p.path
    if kind.startswith("record_"):
        a = rng.choice(list(p.acks.values()))
        seg = root / "commitlog" / f"{a.offset - a.offset % SEGMENT:020d}"
        pos = HEADER_PAGE + a.offset % SEGMENT
        rec = seg.read_bytes()[pos:pos + a.size]
        topic_at = 76 + 12
        topic_len = len(a.topic)
        props_at = topic_at + topic_len
        (props_len,) = U16.unpack_from(rec, 74)
        body_at = props_at + props_len
        span = {"record_header": (0, topic_at), "record_topic": (topic_at, props_at),
                "record_properties": (props_at, body_at),
                "record_body": (body_at, a.size - 4),
                "record_trailer": (a.size - 4, a.size)}[kind]
        return seg, pos + rng.randrange(*span), a.seq
    if kind in ("segment_header", "segment_footer"):
        segs = sorted((root / "commitlog").iterdir())
        if kind == "segment_footer":
            segs = segs[:-1] or segs   # sealed ones carry a footer
            return rng.choice(segs), HEADER_PAGE + SEGMENT + rng.randrange(56), None
        return rng.choice(segs), rng.randrange(36), None
    if kind == "consume_queue_unit":
        files = [f for f in (root / "consumequeue").rglob("*") if f.is_file()]
        f = rng.choice(files)
        data = f.read_bytes()[HEADER_PAGE:-HEADER_PAGE]
        used = [i for i in range(len(data) // 20) if data[20 * i + 8:20 * i + 12] != bytes(4)]
        i = rng.choice(used) if used else 0
        return f, HEADER_PAGE + 20 * i + rng.randrange(20), None
    if kind.startswith("key_index_"):
        files = sorted((root / "index").iterdir())
        f = rng.choice(files)
        data = f.read_bytes()
        slots = GEOMETRY["index_slots"]
        if kind == "key_index_header":
            return f, rng.randrange(KX_HEADER), None
        if kind == "key_index_slot":
            used = [i for i in range(slots) if data[KX_HEADER + 4 * i:KX_HEADER + 4 * i + 4]
                    != bytes(4)]
            return f, KX_HEADER + 4 * rng.choice(used or [0]) + rng.randrange(4), None
        (count,) = struct.unpack_from("<I", data, 56)
        e = rng.randrange(1, max(2, count))
        return f, KX_HEADER + 4 * slots + 20 * e + rng.randrange(20), None
    name = {"checkpoint": "checkpoint", "topics_json": "config/topics.json",
            "geometry_json": "config/geometry.json"}[kind]
    f = root / name
    return f, rng.randrange(f.stat().st_size), None


def entry_owner(p: Pristine, f: Path, off: int) -> int | None:
    """The seq of the message whose key-index entry holds byte ``off`` of index file ``f``
    (decoded before the flip: the entry's commit-log offset), or None."""
    entries_at = KX_HEADER + 4 * GEOMETRY["index_slots"]
    at = off - (off - entries_at) % 20
    (offset,) = struct.unpack_from("<q", f.read_bytes(), at + 4)
    return next((s for s, a in p.acks.items() if a.offset == offset), None)


def scenario_flips(n: int, workdir: Path, seed: int, deadline: float,
                   first: int = 0) -> tuple[Tally, dict]:
    from strata.testing.faults import flip_bit

    tally = Tally()
    stats = {"flips": 0, "by_kind": {k: 0 for k in FLIP_KINDS},
             "failed_by_kind": {k: 0 for k in FLIP_KINDS}, "cost": 0}
    pristine = [build_pristine(workdir / "pristine-clean", seed, False),
                build_pristine(workdir / "pristine-unclean", seed, True)]
    for rnd in range(first, first + n):
        if time.monotonic() > deadline:
            break
        rng = random.Random(f"{seed}-flip-{rnd}")
        kind = FLIP_KINDS[rnd % len(FLIP_KINDS)]
        src = pristine[rng.randrange(2)]
        work = workdir / "flip"
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(src.path, work)
        p = Pristine(work, src.acks, src.unclean, src.exact)
        f, off, victim = flip_target(kind, p, rng)
        # a key-index entry hit may cost its own message's query lookup, nothing else
        entry_of = entry_owner(p, f, off) if kind == "key_index_entry" else None
        bit = rng.randrange(8)
        flip_bit(f, off, bit)
        ctx = {"scenario": "flip", "seed": seed, "round": rnd, "kind": kind,
               "stop": "unclean" if src.unclean else "clean",
               "file": str(f.relative_to(work)), "file_offset": off, "bit": bit,
               "victim_seq": victim, "entry_of_seq": entry_of}
        stats["flips"] += 1
        stats["by_kind"][kind] += 1
        before = tally.lost + tally.wrong + tally.tracebacks + tally.errors
        victims = frozenset() if victim is None else frozenset({victim})
        query_victims = frozenset() if entry_of is None else frozenset({entry_of})
        cost_before = tally.cost
        for reopen in range(2):
            ctx["open"] = reopen
            # a config-less open, as the CLI does: it reads config/geometry.json
            if not open_and_check(work, None, p.acks, tally, ctx, len(p.acks) - len(victims),
                                  refusal_allowed=kind in CONFIG_KINDS, victims=victims,
                                  exact=p.exact, query_victims=query_victims):
                break
        if tally.cost > cost_before:
            stats["cost"] += 1
        if tally.lost + tally.wrong + tally.tracebacks + tally.errors > before:
            stats["failed_by_kind"][kind] += 1
    shutil.rmtree(workdir / "flip", ignore_errors=True)
    for p in pristine:
        shutil.rmtree(p.path, ignore_errors=True)
    return tally, stats


# ------------------------------------------------------- flips after the checkpoint (issue 22)


@dataclass
class TailPristine:
    """A store stopped by a crash under sync flush, ``flushed``: where its last checkpoint said
    the log was flushed; records past it were acknowledged (each covered by an fsync) after
    that checkpoint, the common case a bit flip meets."""
    path: Path
    acks: dict[int, Ack]
    exact: dict[int, tuple]
    flushed: int


def build_tail_pristine(path: Path, seed: int) -> TailPristine:
    rng = random.Random(f"{seed}-tail-pristine")
    cfg = store_config(flush="sync", checkpoint_interval_ms=3_600_000)
    acks: dict[int, Ack] = {}
    seqs = iter(range(10**9))
    store = strata.open(path, cfg)
    target = rng.randint(100, 220)
    while len(acks) < 320:
        for a in put_random(store, rng, lambda: next(seqs)):
            acks[a.seq] = a
        if target and len(acks) >= target:   # a checkpoint, then more acknowledged puts
            store.wait_dispatched(30)
            store._write_checkpoint(clean_end=-1)
            target = 0
    store.wait_dispatched(30)
    exact = {s: tuple(store.read_at(a.offset)) for s, a in acks.items()}
    flushed = store.checkpoint.load().flushed_offset
    store._abandon()
    return TailPristine(path, acks, exact, flushed)


def verify_names(path: Path, offset: int) -> bool:
    """Whether ``strata verify``'s log check (run on the store before any writer opened it)
    names a problem at commit-log ``offset``."""
    from strata.log.verify import recovery_problems, verify_log

    with strata.open(path, readonly=True) as store:
        found = verify_log(store.log.segments, store.confirmed_offset())
        found.problems += recovery_problems(store.recovery_report, store.log.segments)
    return any(p.offset == offset for p in found.problems)


def scenario_tail_flips(n: int, workdir: Path, seed: int, deadline: float,
                        first: int = 0) -> tuple[Tally, dict]:
    """One bit flipped in a record of a crashed sync-flush store, half of them in records
    written after the last checkpoint. The flip may cost the hit record only; ``strata verify``
    before the open must name it, and so must the open's report when the record lies past the
    checkpoint (``silent`` counts the rounds where one of them did not)."""
    from strata.testing.faults import flip_bit

    tally = Tally()
    stats = {"tail_flips": 0, "after_checkpoint": 0, "before_checkpoint": 0, "silent": 0,
             "verify_missed": 0, "report_missed": 0, "cut": 0}
    pristine = build_tail_pristine(workdir / "pristine-tail", seed)
    after = [a for a in pristine.acks.values() if a.offset >= pristine.flushed]
    before = [a for a in pristine.acks.values() if a.offset < pristine.flushed]
    last_base = max(a.offset for a in after) // SEGMENT * SEGMENT
    active = [a for a in after if a.offset >= last_base]
    for rnd in range(first, first + n):
        if time.monotonic() > deadline and rnd >= first + 2:
            break
        rng = random.Random(f"{seed}-tailflip-{rnd}")
        late = rnd % 2 == 0 or not before
        # after the checkpoint: every other one in the active (unsealed) segment, the others
        # anywhere past the checkpoint (sealed segments rolled since it included)
        a = rng.choice((active if rnd % 4 == 0 else after) if late else before)
        work = workdir / "tailflip"
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(pristine.path, work)
        seg = work / "commitlog" / f"{a.offset - a.offset % SEGMENT:020d}"
        off = HEADER_PAGE + a.offset % SEGMENT + rng.randrange(a.size)
        bit = rng.randrange(8)
        flip_bit(seg, off, bit)
        ctx = {"scenario": "tailflip", "seed": seed, "round": rnd,
               "kind": "after_checkpoint" if late else "before_checkpoint",
               "file": str(seg.relative_to(work)), "file_offset": off, "bit": bit,
               "victim_seq": a.seq, "victim_offset": a.offset}
        stats["tail_flips"] += 1
        stats["after_checkpoint" if late else "before_checkpoint"] += 1
        try:
            seen_by_verify = verify_names(work, a.offset)
        except Exception as e:  # noqa: BLE001
            tally.raised(ctx, "verify", e)
            seen_by_verify = True
        store = open_checked(lambda: strata.MessageStore(work, None), tally, ctx,
                             len(pristine.acks) - 1)
        if store is None:
            continue
        try:
            rep = store.recovery_report
            ctx["recovery"] = rep.summary()[:300]
            named = any(d.offset <= a.offset < d.end for d in rep.corrupt_records)
            if rep.truncated_at == a.offset:
                named = getattr(rep, "quarantine", None) is not None   # the last record: a torn tail, kept aside
                stats["cut"] += 1
            check_store(store, pristine.acks, tally, ctx, victims=frozenset({a.seq}),
                        exact=pristine.exact)
        except Exception as e:  # noqa: BLE001
            tally.raised(ctx, "check", e)
            named = True
        finally:
            close_checked(store, tally, ctx)
        if not seen_by_verify:
            stats["verify_missed"] += 1
        if late and not named:
            stats["report_missed"] += 1
        if not seen_by_verify or (late and not named):
            stats["silent"] += 1
            tally.fail("errors", ctx, via="silent", verify_named=seen_by_verify,
                       report_named=named)
        open_and_check(work, None, pristine.acks, tally, {**ctx, "open": 1},
                       len(pristine.acks) - 1, victims=frozenset({a.seq}), exact=pristine.exact)
    shutil.rmtree(workdir / "tailflip", ignore_errors=True)
    shutil.rmtree(pristine.path, ignore_errors=True)
    return tally, stats


def scenario_lost_segment(n: int, workdir: Path, seed: int, deadline: float,
                          first: int = 0) -> tuple[Tally, dict]:
    """The last commit-log segment file deleted, after a clean close or a crash right after a
    checkpoint: the messages in it may be lost, every other one not, and the open must say so
    (``lost_anything``, the file named in ``problem``); ``silent`` counts the rounds where it
    did not."""
    tally = Tally()
    stats = {"lost_segments": 0, "silent": 0, "by_stop": {"clean": 0, "unclean": 0}}
    pristine = [build_pristine(workdir / "pristine-ls-clean", seed, False),
                build_pristine(workdir / "pristine-ls-unclean", seed, True)]
    for rnd in range(first, first + n):
        if time.monotonic() > deadline and rnd >= first + 2:
            break
        src = pristine[rnd % 2]
        work = workdir / "lostseg"
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(src.path, work)
        files = sorted((work / "commitlog").iterdir())
        gone = files[-1]
        base = int(gone.name)
        gone.unlink()
        stop = "unclean" if src.unclean else "clean"
        ctx = {"scenario": "lostseg", "seed": seed, "round": rnd, "kind": stop,
               "file": str(gone.relative_to(work))}
        stats["lost_segments"] += 1
        stats["by_stop"][stop] += 1
        victims = frozenset(s for s, a in src.acks.items() if a.offset >= base)
        store = open_checked(lambda: strata.MessageStore(work, None), tally, ctx,
                             len(src.acks) - len(victims))
        if store is None:
            continue
        try:
            rep = store.recovery_report
            ctx["recovery"] = rep.summary()[:300]
            if victims and not (rep.lost_anything and rep.problem and gone.name in rep.problem):
                stats["silent"] += 1
                tally.fail("errors", ctx, via="silent", lost=len(victims))
            check_store(store, src.acks, tally, ctx, victims=victims, exact=src.exact)
        except Exception as e:  # noqa: BLE001
            tally.raised(ctx, "check", e)
        finally:
            close_checked(store, tally, ctx)
    shutil.rmtree(workdir / "lostseg", ignore_errors=True)
    for p in pristine:
        shutil.rmtree(p.path, ignore_errors=True)
    return tally, stats


# --------------------------------------------------------------------------- full disk


def _mount_tmpfs(where: Path, size: str) -> bool:
    if os.geteuid() != 0 or not shutil.which("mount"):
        return False
    where.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                       capture_output=True)
    return r.returncode == 0


def _umount(where: Path) -> None:
    r = subprocess.run(["umount", str(where)], capture_output=True)
    if r.returncode != 0:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def _fill_and_check(store_factory, free_space, tally: Tally, ctx: dict, rng: random.Random,
                    stats: dict, deadline: float) -> None:
    """Append (new topics among them) until the disk is full, then check the refusals, the
    data, the close, a reopen while full and a reopen after space is freed."""
    acks: dict[int, Ack] = {}
    seqs = iter(range(10**9))
    ctx["phase"] = "filling"
    store = store_factory()
    full_errors = 0
    topics = list(TOPICS)
    try:
        for i in range(200_000):
            if i % 40 == 39:
                topics.append(f"d{i}")   # a put that creates a topic
            try:
                if rng.random() < 0.02:
                    store.create_topic(f"c{i}", 2)
                for a in put_random(store, rng, lambda: next(seqs), topics[-3:]):
                    acks[a.seq] = a
            except Exception as e:  # noqa: BLE001
                if isinstance(e, DiskFullError):
                    full_errors += 1
                    if full_errors >= 8:
                        break
                    continue
                tally.raised(ctx, "put", e)
                if sum(1 for f in tally.failures if f.get("via") == "put") > 5:
                    break
            if time.monotonic() > deadline:
                break
        stats["disk_full_errors"] += full_errors
        stats["acked"] += len(acks)
        ctx["acked"] = len(acks)
        ctx["disk_full_errors"] = full_errors
        if not full_errors:
            tally.fail("errors", ctx, via="put", error="the disk never filled up")
        ctx["phase"] = "full, still open"
        try:   # get reads what the dispatcher has put in the queues
            store.wait_dispatched(10)
        except Exception as e:  # noqa: BLE001 - counted; what it cost is counted below
            tally.raised(ctx, "wait_dispatched", e)
        check_store(store, acks, tally, ctx, sample=set(rng.sample(sorted(acks),
                                                                      min(300, len(acks)))))
    except Exception as e:  # noqa: BLE001
        tally.raised(ctx, "check", e)
    ctx["phase"] = "close while full"
    close_checked(store, tally, ctx, disk_full_ok=True)
    ctx["phase"] = "reopen while full"
    try:
        s = store_factory()
    except DiskFullError:
        s = None
    except Exception as e:  # noqa: BLE001
        tally.raised(ctx, "open", e)
        s = None
    if s is not None:
        try:
            check_store(s, acks, tally, ctx, sample=set())
        finally:
            close_checked(s, tally, ctx, disk_full_ok=True)
    free_space()
    ctx["phase"] = "after freeing space"
    s = open_checked(store_factory, tally, ctx, len(acks))
    if s is None:
        return
    try:
        check_store(s, acks, tally, ctx)
        for a in put_random(s, rng, lambda: next(seqs), topics[-3:]):
            acks[a.seq] = a
        s.flush()
        s.wait_dispatched(10)
        check_store(s, acks, tally, ctx, sample=set())
    except Exception as e:  # noqa: BLE001
        tally.raised(ctx, "check", e)
    finally:
        close_checked(s, tally, ctx)


def scenario_disk(rounds: int, workdir: Path, seed: int, deadline: float, first: int = 0,
                  use_tmpfs: bool = True) -> tuple[Tally, dict]:
    from strata.testing.faults import FaultInjectingFileOps

    tally = Tally()
    stats = {"disk_rounds": 0, "tmpfs": 0, "fault_layer": 0, "disk_full_errors": 0, "acked": 0}
    for rnd in range(first, first + rounds):
        if time.monotonic() > deadline and rnd > first:
            break
        rng = random.Random(f"{seed}-disk-{rnd}")
        mnt = workdir / f"disk-{rnd}"
        round_deadline = time.monotonic() + 60
        if use_tmpfs and _mount_tmpfs(mnt, "16m"):
            stats["tmpfs"] += 1
            ctx = {"scenario": "disk", "seed": seed, "round": rnd, "via_fs": "tmpfs 16m"}
            try:
                filler = mnt / "filler"
                # leave ~2.5 MiB: a few segments, queue and index files
                with open(filler, "wb") as f:
                    f.write(bytes(13 * MiB + rng.randrange(MiB)))
                path = mnt / "store"
                _fill_and_check(lambda: strata.open(path, store_config()),
                                lambda: filler.unlink(), tally, ctx, rng, stats,
                                round_deadline)
            finally:
                _umount(mnt)
                shutil.rmtree(mnt, ignore_errors=True)
        else:
            stats["fault_layer"] += 1
            ctx = {"scenario": "disk", "seed": seed, "round": rnd, "via_fs": "fault layer"}
            fops = FaultInjectingFileOps()
            path = mnt / "store"
            made = []

            def factory():
                s = strata.MessageStore(path, store_config(), file_ops=fops)
                if not made:   # the disk fills up a little after the first open
                    fops.fill_disk(rng.randrange(1, 6) * SEGMENT)
                made.append(s)
                return s

            try:
                _fill_and_check(factory, fops.free_disk, tally, ctx, rng, stats,
                                round_deadline)
            finally:
                shutil.rmtree(mnt, ignore_errors=True)
        stats["disk_rounds"] += 1
    return tally, stats


# --------------------------------------------------------------------------- driver


def code_under_test() -> dict:
    """Which strata ran: its directory, and the repository's commit when it ran from there
    (``dirty``: the working tree's src/ differs from that commit)."""
    src = Path(strata.__file__).resolve().parent
    out: dict = {"strata": str(src)}
    if REPO / "src" in src.parents:
        try:
            git = ["git", "-C", str(REPO)]
            out["commit"] = subprocess.run(git + ["rev-parse", "--short", "HEAD"],
                                           capture_output=True, text=True).stdout.strip()
            out["dirty"] = bool(subprocess.run(git + ["status", "--porcelain", "src"],
                                               capture_output=True, text=True).stdout.strip())
        except OSError:
            pass
    return out


# --------------------------------------------------------------------------- derived files

# Issue 22: consume-queue and key-index files deleted or zeroed (after a clean close or a crash
# right after a checkpoint) must be rebuilt from the commit log at open and reported; a round
# whose damage the first open does not report is counted as "silent".
DERIVED_KINDS = ("cq_file_deleted", "cq_queue_deleted", "cq_folder_deleted", "cq_units_zeroed",
                 "cq_file_zeroed", "ki_first_deleted", "ki_last_deleted", "ki_file_deleted",
                 "ki_folder_deleted", "ki_file_zeroed", "ki_entries_zeroed")


def damage_derived(kind: str, root: Path, rng: random.Random) -> str:
    """Delete or zero a derived file of the store at ``root``; returns what was done."""
    cq = root / "consumequeue"
    if kind.startswith("cq_"):
        files = sorted(f for f in cq.rglob("*") if f.is_file() and f.name.isdigit())
        f = rng.choice(files)
        if kind == "cq_file_deleted":
            f.unlink()
        elif kind == "cq_queue_deleted":
            shutil.rmtree(f.parent)
            return str(f.parent.relative_to(root))
        elif kind == "cq_folder_deleted":
            shutil.rmtree(cq)
            return "consumequeue"
        else:
            data = f.read_bytes()[HEADER_PAGE:]
            used = [i for i in range(len(data) // 20) if data[20 * i + 8:20 * i + 12] != bytes(4)]
            if kind == "cq_file_zeroed" or not used:
                lo, hi = 0, len(data) // 20
            else:
                lo = rng.choice(used)
                hi = rng.randint(lo + 1, used[-1] + 1)
            with open(f, "r+b") as fh:
                fh.seek(HEADER_PAGE + 20 * lo)
                fh.write(bytes(20 * (hi - lo)))
            return f"{f.relative_to(root)} units {lo}..{hi - 1} zeroed"
        return str(f.relative_to(root))
    ix = root / "index"
    files = sorted(f for f in ix.iterdir() if f.name[:1].isdigit()
                   and not f.name.endswith(".damaged"))
    if kind == "ki_folder_deleted":
        shutil.rmtree(ix)
        return "index"
    f = {"ki_first_deleted": files[0], "ki_last_deleted": files[-1]}.get(kind) \
        or rng.choice(files)
    if kind == "ki_file_zeroed":
        with open(f, "r+b") as fh:
            fh.write(bytes(f.stat().st_size))
    elif kind == "ki_entries_zeroed":   # a stretch of counted entries (a lost page, say)
        data = f.read_bytes()
        entries_at = KX_HEADER + 4 * GEOMETRY["index_slots"]
        (count,) = struct.unpack_from("<I", data, 56)
        lo = rng.randrange(1, max(2, count))
        hi = rng.randint(lo + 1, max(lo + 1, count))
        with open(f, "r+b") as fh:
            fh.seek(entries_at + 20 * lo)
            fh.write(bytes(20 * (hi - lo)))
        return f"{f.relative_to(root)} entries {lo}..{hi - 1} zeroed"
    else:
        f.unlink()
    return str(f.relative_to(root))


def _open_report_check(work: Path, acks: dict[int, Ack], tally: Tally, ctx: dict,
                       **check) -> list[str] | None:
    """Open (config-less, as the CLI does), check every acknowledged message, close; the
    repairs the open reported (None: it did not open)."""
    store = open_checked(lambda: strata.MessageStore(work, None), tally, ctx, len(acks))
    if store is None:
        return None
    try:
        rep = store.recovery_report
        repaired = list(rep.repaired_files) if rep is not None else []
        check_store(store, acks, tally, ctx, **check)
    except Exception as e:  # noqa: BLE001
        tally.raised(ctx, "check", e)
        repaired = []
    finally:
        close_checked(store, tally, ctx)
    return repaired


def scenario_derived(n: int, workdir: Path, seed: int, deadline: float,
                     first: int = 0) -> tuple[Tally, dict]:
    tally = Tally()
    stats = {"derived_damaged": 0, "by_kind": {k: 0 for k in DERIVED_KINDS}, "silent": 0,
             "failed_by_kind": {k: 0 for k in DERIVED_KINDS}}
    pristine = [build_pristine(workdir / "pristine-clean", seed, False),
                build_pristine(workdir / "pristine-unclean", seed, True)]
    for rnd in range(first, first + n):
        # every kind once whatever the budget (a loaded machine cuts rounds, never a kind)
        if rnd - first >= len(DERIVED_KINDS) and time.monotonic() > deadline:
            break
        rng = random.Random(f"{seed}-derived-{rnd}")
        kind = DERIVED_KINDS[rnd % len(DERIVED_KINDS)]
        src = pristine[rng.randrange(2)]
        work = workdir / "derived"
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(src.path, work)
        what = damage_derived(kind, work, rng)
        ctx = {"scenario": "derived", "seed": seed, "round": rnd, "kind": kind,
               "stop": "unclean" if src.unclean else "clean", "damage": what}
        stats["derived_damaged"] += 1
        stats["by_kind"][kind] += 1
        before = tally.lost + tally.wrong + tally.tracebacks + tally.errors
        for reopen in range(2):
            ctx["open"] = reopen
            repaired = _open_report_check(work, src.acks, tally, ctx, exact=src.exact)
            if repaired is None:
                break
            if reopen == 0 and not repaired:
                stats["silent"] += 1
                tally.failures.append({"event": "failure", "problem": "silent", **ctx})
        if tally.lost + tally.wrong + tally.tracebacks + tally.errors > before:
            stats["failed_by_kind"][kind] += 1
    shutil.rmtree(workdir / "derived", ignore_errors=True)
    for p in pristine:
        shutil.rmtree(p.path, ignore_errors=True)
    return tally, stats


SECTOR = 512


def _sealed(index_file: bytes) -> bool:
    from strata.format import key_index as kx
    return bool(kx.peek_counters(index_file)[0] & kx.FLAG_SEALED)


def _durable_at_creation(f: Path, new: bytes) -> bytes:
    """What a derived file made since the checkpoint holds for sure after a power loss: the
    header its creation synced before the file got its name (a key-index file's geometry with
    empty counters; a consume-queue file's header page), zeros after it."""
    if f.parent.name == "index":
        import dataclasses

        from strata.format import key_index as kx
        h = kx.KeyIndexHeader.decode(new[:kx.HEADER_BYTES])
        return dataclasses.replace(h, flags=0, end_offset=-1, entry_count=1, used_slots=0,
                                   min_delta=0, max_delta=0).encode()
    return new[:HEADER_PAGE]


def scenario_torn(n: int, workdir: Path, seed: int, deadline: float,
                  first: int = 0) -> tuple[Tally, dict]:
    """512-byte-sector tearing of consume-queue units and key-index entries: a checkpoint
    makes the derived files durable, more messages are put (their log records flushed, their
    units and entries not) and the process stops; each 512-byte sector of a derived file that
    changed since the checkpoint then holds its old or its new bytes, at random, as a power
    loss leaves them (entries and units straddle sectors: 512 is no multiple of 20). Every
    acknowledged message must be served by every read path, ``query`` included."""
    tally = Tally()
    stats = {"torn_rounds": 0, "torn_sectors": 0, "acked": 0}
    cfg = store_config(flush_interval_ms=60_000, flush_thorough_interval_ms=60_000,
                       checkpoint_interval_ms=3_600_000)
    for rnd in range(first, first + n):
        if rnd > first and time.monotonic() > deadline:   # one round whatever the budget
            break
        rng = random.Random(f"{seed}-torn-{rnd}")
        work = workdir / "torn"
        shutil.rmtree(work, ignore_errors=True)
        ctx = {"scenario": "torn", "seed": seed, "round": rnd, "kind": "torn_sectors"}
        acks: dict[int, Ack] = {}
        seqs = iter(range(10**9))
        store = strata.MessageStore(work, cfg)
        target = rng.randint(60, 200)
        while len(acks) < target:
            for a in put_random(store, rng, lambda: next(seqs)):
                acks[a.seq] = a
        store.wait_dispatched()
        store._write_checkpoint(clean_end=-1)
        derived = lambda: sorted(f for d in ("consumequeue", "index")   # noqa: E731
                                 for f in (work / d).rglob("*")
                                 if f.is_file() and f.name[:1].isdigit())
        old = {f: f.read_bytes() for f in derived()}
        while len(acks) < 400 and rng.random() < 0.97:
            for a in put_random(store, rng, lambda: next(seqs)):
                acks[a.seq] = a
        store.flush()
        store.wait_dispatched()
        store._abandon()
        for f in derived():
            new = f.read_bytes()
            was = old.get(f)
            if was is None:
                was = _durable_at_creation(f, new)
            elif f.parent.name == "index" and _sealed(new) and not _sealed(was):
                continue     # sealing syncs the whole file before it writes the flag
            was = was + bytes(len(new) - len(was))
            torn = bytearray(new)
            changed = [at for at in range(SECTOR, len(new), SECTOR)
                       if new[at:at + SECTOR] != was[at:at + SECTOR]]
            if rng.random() < 0.5:   # write-back in file order, stopped at a random sector
                lost = changed[rng.randint(0, len(changed)):]
            else:                    # any subset of the sectors
                lost = [at for at in changed if rng.random() < 0.5]
            # the first sector (header, counters, slot heads) reaches the disk more often
            # than not: the torn entries behind it are then counted and must be cut
            if new[:SECTOR] != was[:SECTOR] and rng.random() < 0.2:
                lost.append(0)
            for at in lost:
                torn[at:at + SECTOR] = was[at:at + SECTOR]
            stats["torn_sectors"] += len(lost)
            f.write_bytes(bytes(torn))
        stats["torn_rounds"] += 1
        stats["acked"] += len(acks)
        for reopen in range(2):
            ctx["open"] = reopen
            if _open_report_check(work, acks, tally, ctx) is None:
                break
    shutil.rmtree(workdir / "torn", ignore_errors=True)
    return tally, stats


SHARES = {"kills": 0.40, "power": 0.10, "flips": 0.40, "disk": 0.10,
          "tailflips": 0.25, "lostseg": 0.05, "derived": 0.15, "torn": 0.10}
SCENARIOS = ("kills", "power", "flips", "disk", "tailflips", "lostseg", "derived", "torn")
EXTRA = {"tailflips": scenario_tail_flips, "lostseg": scenario_lost_segment,   # (issue 22)
         "derived": scenario_derived, "torn": scenario_torn}


def run(*, kills: int = 10, flips: int = 100, power: int = 2, disk: int = 1,
        tailflips: int = 0, lostseg: int = 0, derived: int = 0, torn: int = 0,
        seconds: float = 60.0, seed: int | None = None, directory: Path | None = None,
        only: tuple[str, ...] = SCENARIOS, emit=print, use_tmpfs: bool = True,
        first_round: int = 0) -> dict:
    """Run the scenarios within about ``seconds`` (each gets a share of it; a scenario that
    finishes early leaves its time to the next); emits JSON lines and returns the summary,
    whose ``failures`` holds the failure events."""
    unknown = set(only) - set(SCENARIOS)
    if unknown:
        raise ValueError(f"unknown scenarios {sorted(unknown)}; choose from {SCENARIOS}")
    seed = seed if seed is not None else int.from_bytes(os.urandom(4), "little")
    strata_log = logging.getLogger("strata")
    log_level = strata_log.level
    strata_log.setLevel(logging.CRITICAL)   # the faults make it report damage: expected here
    began = time.monotonic()
    own_dir = directory is None
    base = Path(tempfile.mkdtemp(prefix="strata-torture-")) if own_dir else Path(directory)
    base.mkdir(parents=True, exist_ok=True)
    total = Tally()
    scenarios: dict[str, dict] = {}
    plan = [(name, n) for name, n in (("kills", kills), ("power", power), ("flips", flips),
                                      ("disk", disk), ("tailflips", tailflips),
                                      ("lostseg", lostseg), ("derived", derived),
                                      ("torn", torn)) if name in only and n > 0]
    share_sum = sum(SHARES[name] for name, _ in plan) or 1.0
    cum = 0.0
    try:
        for name, n in plan:
            cum += SHARES[name] / share_sum
            deadline = began + seconds * cum
            t0 = time.monotonic()
            work = base / name
            work.mkdir(exist_ok=True)
            if name == "kills":
                tally, stats = scenario_kills(n, work, seed, deadline)
            elif name == "power":
                tally, stats = scenario_power(n, work, seed, deadline, first_round)
            elif name == "flips":
                tally, stats = scenario_flips(n, work, seed, deadline, first_round)
            elif name in EXTRA:
                tally, stats = EXTRA[name](n, work, seed, deadline, first_round)
            else:
                tally, stats = scenario_disk(n, work, seed, deadline, first_round, use_tmpfs)
            for f in tally.failures:
                emit(json.dumps(f, default=str))
            line = {"event": "scenario", "scenario": name, "seed": seed, **tally.counts(),
                    **stats, "failed_rounds": tally.failed_rounds, "signatures": tally.table(),
                    "seconds": round(time.monotonic() - t0, 1)}
            emit(json.dumps(line))
            total.add(tally)
            scenarios[name] = line
    finally:
        strata_log.setLevel(log_level)
        if own_dir:
            shutil.rmtree(base, ignore_errors=True)
    summary = {"event": "summary", "seed": seed, **code_under_test(), **total.counts(),
               "kills": scenarios.get("kills", {}).get("kills", 0),
               "power_losses": scenarios.get("power", {}).get("power_losses", 0),
               "flips": scenarios.get("flips", {}).get("flips", 0),
               "disk_rounds": scenarios.get("disk", {}).get("disk_rounds", 0),
               "tail_flips": scenarios.get("tailflips", {}).get("tail_flips", 0),
               "lost_segments": scenarios.get("lostseg", {}).get("lost_segments", 0),
               "derived_damaged": scenarios.get("derived", {}).get("derived_damaged", 0),
               "torn_rounds": scenarios.get("torn", {}).get("torn_rounds", 0),
               "silent": sum(sc.get("silent", 0) for sc in scenarios.values()),
               "acked": sum(sc.get("acked", 0) for sc in scenarios.values()),
               "failed": {name: sc["failed_rounds"] for name, sc in scenarios.items()
                          if sc["failed_rounds"]},
               "seconds": round(time.monotonic() - began, 1)}
    emit(json.dumps(summary))
    summary["failures"] = total.failures
    summary["scenarios"] = scenarios
    return summary


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--child":
        child_main(argv[1], argv[2], int(argv[3]), int(argv[4]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kills", type=int, default=20, help="SIGKILL rounds (sync and async)")
    ap.add_argument("--flips", type=int, default=200, help="single-bit flips")
    ap.add_argument("--power", type=int, default=4, help="power-loss rounds (sync and async)")
    ap.add_argument("--disk", type=int, default=1, help="full-disk rounds")
    ap.add_argument("--tailflips", type=int, default=200,
                    help="bit flips in a crashed sync store, half after its last checkpoint")
    ap.add_argument("--lostseg", type=int, default=10,
                    help="rounds with the last commit-log segment deleted")
    ap.add_argument("--derived", type=int, default=40,
                    help="deleted or zeroed consume-queue / key-index files")
    ap.add_argument("--torn", type=int, default=10,
                    help="512-byte-sector tearing of units and index entries after a stop")
    ap.add_argument("--first-round", type=int, default=0,
                    help="power, flip and disk rounds start here: with --seed and --only, "
                         "repeats a reported round (kill rounds depend on the ones before)")
    ap.add_argument("--seconds", type=float, default=300, help="time budget (roughly kept)")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--dir", type=Path, default=None,
                    help="work directory (default: a temporary one, removed afterwards)")
    ap.add_argument("--only", default=",".join(SCENARIOS),
                    help="comma-separated scenarios to run")
    ap.add_argument("--no-tmpfs", action="store_true",
                    help="full disk through the fault layer even as root")
    a = ap.parse_args(argv)
    # a SIGTERM unwinds like ^C: children are killed and a tmpfs unmounted on the way out
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    s = run(kills=a.kills, flips=a.flips, power=a.power, disk=a.disk, tailflips=a.tailflips,
            lostseg=a.lostseg, derived=a.derived, torn=a.torn, seconds=a.seconds,
            seed=a.seed, directory=a.dir, only=tuple(a.only.split(",")),
            use_tmpfs=not a.no_tmpfs, first_round=a.first_round,
            emit=lambda line: print(line, flush=True))
    return 0 if s["lost"] == s["wrong"] == s["tracebacks"] == s["silent"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
