"""Compiling strata's numba kernels once, at install, instead of in the first real call.

Every kernel is ``@njit(cache=True)``: its machine code is kept in ``__pycache__`` next to
its module (or under ``NUMBA_CACHE_DIR``), one entry per argument-type specialization. A
cold cache (a fresh checkout, an upgrade, a kernel whose source changed) costs about 25 s of
CPU the first time a put, a read and a tier upload run, which under load pushed a
``tier_sync(timeout_s=60)`` past its deadline. ``make setup`` therefore runs ``strata warm``
(or ``python -m strata.warm``): it exercises the main paths on a throwaway store in a
temporary directory, with the same argument types the real callers pass, so each kernel's
specializations land in the cache. Run again on a warm cache it only loads them (< 2 s) and
compiles nothing; ``numba:compile`` events, which numba fires only on a cache miss, count
what a run compiled.

The steps: put_batch of plain and of rich messages (keys, tags, properties, shard keys),
small (message by message) and large (``COLUMNAR_BATCH`` or more: the columnar encoder, the
compiled queue choice and key-index entries), of one topic and of several; put_columns, get
(plain and by tag), scan, get_columns, query by key, an upload to a tier in a temporary
directory and reads that the tier answers (its compiled record check), the ref-store's batch
encoder, and, when the broker extra is installed, one Kafka record batch encoded and parsed
and, with the spark extra, the Spark source's decode of the warm-up queues (what a Spark
worker runs). ``MODULES`` names the kernel modules whose cache the run fills (the test
checks each one).

The throwaway directories are ``strata-warm-<pid>-*`` in the temporary directory; a process
killed in its warm-up (a broker SIGKILLed as it starts) leaves its own behind, so each warm
first removes those whose process is gone (``warm_directory``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from numba.core import event

import strata
from strata.store.config import StoreConfig
from strata.store.message import Message
from strata.store.prepared import COLUMNAR_BATCH

log = logging.getLogger(__name__)

WAIT_S = 300.0     # a cold compile on a loaded machine; never wait forever

# the kernel modules a run leaves cache entries for (relative to the strata package)
MODULES = ("format/record_kernels.py", "format/column_kernels.py",
           "format/property_kernels.py", "format/key_index_kernels.py",
           "format/record_objects.py", "format/object_gather.py", "format/view_kernels.py",
           "format/arrow_c.py",
           "format/unit_kernels.py",
           "tiered/chunk_kernels.py", "tiered/blake2b.py", "refstore/encode.py",
           "refstore/hash_kernels.py", "refstore/append.py", "refstore/batch_split.py")
KAFKA_MODULES = ("broker/kafka/batch_kernels.py", "broker/kafka/batch_encode_kernels.py",
                 "broker/kafka/fetch_kernels.py")
SPARK_MODULES = ("spark/kernels.py",)

_SMALL = dict(segment_size=1 << 20, consume_queue_units=4096, index_slots=1024,
              index_entries=8192, prefault=False)
DIR_PREFIX = "strata-warm-"
_OWNED = re.compile(re.escape(DIR_PREFIX) + r"(\d+)-")      # strata-warm-<pid>-<random>
_LARGE = COLUMNAR_BATCH + 8     # a batch the columnar encoder takes (not message by message)


class _Compiles(event.Listener):
    """Counts the kernels numba compiles (cache misses) while installed, in any thread."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self._lock = threading.Lock()

    def on_start(self, ev: event.Event) -> None:
        disp = ev.data["dispatcher"]
        with self._lock:
            self.names.append(f"{disp.py_func.__module__}.{disp.py_func.__qualname__}")

    def on_end(self, ev: event.Event) -> None:
        pass


@dataclass
class WarmReport:
    """What one run did: per step, the kernels it compiled (empty on a warm cache)."""
    steps: dict[str, list[str]] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def compiled(self) -> int:
        return sum(len(v) for v in self.steps.values())

    def as_dict(self) -> dict:
        return {"steps": {k: len(v) for k, v in self.steps.items()}, "compiled": self.compiled,
                "kernels": sorted({n for v in self.steps.values() for n in v}),
                "skipped": self.skipped, "seconds": round(self.seconds, 3)}


def _wait(store) -> None:
    if not store.wait_dispatched(WAIT_S):
        raise TimeoutError(f"the warm-up store's dispatch took over {WAIT_S:.0f} s")


def _puts(store) -> None:
    for n in (4, _LARGE):
        store.put_batch([Message("warm", b"plain %d" % i) for i in range(n)])
    _wait(store)


def _rich(topic: str, n: int, **extra) -> list[Message]:
    return [Message(topic, b"rich %d" % i, keys=[f"k-{i}", "k"], tags="t",
                    properties={"p": str(i)}, **extra) for i in range(n)]


def _rich_puts(store) -> None:
    store.put(Message("warm", b"one", keys=["k-0"], tags="t"))
    # message by message, then columnar: the compiled walk over the messages
    # (format/object_gather.py) and the compiled queue choice
    for n in (4, _LARGE):
        store.put_batch([Message("warm", b"rich %d" % i, keys=[f"k-{i}", "k"], tags="t",
                                 properties={"p": str(i)}, shard_key=f"s-{i % 2}")
                         for i in range(n)])
    store.put_batch([Message("warm", b"keyed %d" % i, keys=[f"k-{i}"],
                             tags="t" if i % 2 else None) for i in range(_LARGE)])
    store.put_batch([*_rich("warm", _LARGE // 2), *_rich("warm-2", _LARGE // 2)])  # gathered
    store.put_columns("warm", None, [b"c0", b"c1"], keys=["k", "k"], tags=["t", "t"],
                      properties=[{"p": "0"}, {"p": "1"}])
    _wait(store)


def _reads(store) -> None:
    for q in range(store.queue_counts()["warm"]):
        store.get("warm", q, 0, 32)
        store.get("warm", q, 0, 32, tags=frozenset({"t"}))
        store.get_columns("warm", q, 0, 32)
    for _ in store.scan(0, verify_crc=True):
        pass
    store.query("warm", "k")
    # a get of large records, read in place (``batch_reader.IN_PLACE_MIN_BYTES``): its
    # messages made from the segment's map, all of them and one alone
    if "warm-big" not in store.queue_counts():
        store.create_topic("warm-big", queues=1)
    store.put_batch([Message("warm-big", bytes(700)) for _ in range(4)])
    _wait(store)
    got = store.get("warm-big", 0, 0, 4).messages
    _ = got[1], list(got)


# the steps a store's clients reach; ``strata serve``'s head start (strata.broker.warm) runs
# these too, through ``exercise_store``
STORE_STEPS: tuple[tuple[str, Callable], ...] = (
    ("put_batch", _puts), ("put_batch rich", _rich_puts), ("reads", _reads))


def exercise_store(directory: str | Path) -> None:
    """``STORE_STEPS`` on a new small store in ``directory`` (no tier; nothing reported)."""
    with strata.open(directory, StoreConfig(**_SMALL)) as store:
        for _name, step in STORE_STEPS:
            step(store)


def _tier(store) -> None:
    store.tier_sync(timeout_s=WAIT_S)


def _tier_reads(directory: Path) -> None:
    """Reads the tier answers: a store of two segments whose first one, uploaded, local
    retention deleted; then its reads from offset 0 go to the tier (a store of its own, so
    that the main one keeps its whole history for the steps after)."""
    cfg = StoreConfig(tier_url=Path(directory, "tier").as_uri(), **_SMALL)
    body = bytes(16 << 10)
    later = int((datetime.now() + timedelta(days=30)).timestamp() * 1000)  # all expired
    with strata.open(Path(directory, "store"), cfg) as store:
        for _ in range(2):          # 2 x 40 x 16 KiB: past the first 1 MiB segment
            store.put_batch([Message("warm", body, keys=["k"], tags="t" if i % 2 else None)
                             for i in range(_LARGE)])
        store.tier_sync(timeout_s=WAIT_S)
        store.clean_expired(later)
        _wait(store)
        if store.log.min_offset() == 0:
            raise RuntimeError("the warm-up tier store kept its first segment locally")
        _reads(store)


def _refstore() -> None:
    from strata.refstore import append, batch_split, encode, index
    encode.warm()
    index.warm()
    append.warm()
    batch_split.warm()


def _spark(path: Path, ends: list[int]) -> None:
    """The Spark source's decode of every warm-up queue, as a Spark worker runs it."""
    from strata.spark.planning import QueueRange
    from strata.spark.schema import arrow_schema, read_schema
    from strata.spark.source import read_range
    schema = arrow_schema(read_schema(include_metadata=True, include_headers=True))
    for q, end in enumerate(ends):
        for _batch in read_range(str(path), QueueRange("warm", q, 0, end), schema, 1024):
            pass


def _kafka() -> None:
    from strata.broker.kafka import fetch_read
    fetch_read.warm()


def kafka_available() -> bool:
    """Whether the broker extra (the Kafka listener's codecs) is installed."""
    return _importable("strata.broker.kafka.record_batch")


def spark_available() -> bool:
    """Whether the spark extra (PySpark's data source API, pyarrow) is installed."""
    return _importable("strata.spark.source")


def _importable(module: str) -> bool:
    import importlib
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:       # another user's process: alive
        return True
    return True


def remove_stale(parent: str | Path | None = None) -> list[Path]:
    """Remove the warm-up directories (``strata-warm-<pid>-*`` in ``parent``, the temporary
    directory by default) of this user whose process is gone; returns them. Only those: a
    directory whose process runs (or whose name carries no pid) is left alone."""
    root = Path(parent if parent is not None else tempfile.gettempdir())
    removed = []
    try:
        found = list(root.iterdir())
    except OSError:
        return removed
    uid = os.getuid()
    for d in found:
        m = _OWNED.match(d.name)
        if m is None or int(m.group(1)) == os.getpid() or _alive(int(m.group(1))):
            continue
        try:
            if not d.is_dir() or d.is_symlink() or d.stat().st_uid != uid:
                continue
            shutil.rmtree(d)
        except OSError as exc:
            log.warning("could not remove the stale warm-up directory %s: %s", d, exc)
            continue
        removed.append(d)
    return removed


@contextlib.contextmanager
def warm_directory() -> Iterator[Path]:
    """A new throwaway directory for a warm-up, removed after it; the stale ones of killed
    warm-ups are removed first (``remove_stale``)."""
    for d in remove_stale():
        log.info("removed %s, left by a warm-up whose process is gone", d)
    with tempfile.TemporaryDirectory(prefix=f"{DIR_PREFIX}{os.getpid()}-") as d:
        yield Path(d)


def run(on_step: Callable[[str], None] = lambda _name: None) -> WarmReport:
    """Exercise the main paths once, so that every kernel they reach is compiled into (or
    loaded from) numba's cache; ``on_step(name)`` is called as each step starts."""
    report = WarmReport()
    started = time.perf_counter()
    compiles = _Compiles()
    with warm_directory() as tmp:
        cfg = StoreConfig(tier_url=Path(tmp, "tier").as_uri(), **_SMALL)
        store_steps = [*STORE_STEPS, ("tier upload", _tier)]
        with event.install_listener("numba:compile", compiles):
            on_step("open")
            with strata.open(Path(tmp, "store"), cfg) as store:
                report.steps["open"] = _take(compiles)
                for name, step in store_steps:
                    on_step(name)
                    step(store)
                    report.steps[name] = _take(compiles)
                ends = [store.max_offset("warm", q)
                        for q in range(store.queue_counts()["warm"])]
            report.steps["close"] = _take(compiles)
            on_step("tier reads")
            _tier_reads(Path(tmp, "tiered"))
            report.steps["tier reads"] = _take(compiles)
            if spark_available():
                on_step("spark decode")
                _spark(Path(tmp, "store"), ends)
                report.steps["spark decode"] = _take(compiles)
            else:
                report.skipped["spark decode"] = "the spark extra is not installed"
            on_step("refstore encode")
            _refstore()
            report.steps["refstore encode"] = _take(compiles)
            if kafka_available():
                on_step("kafka batches")
                _kafka()
                report.steps["kafka batches"] = _take(compiles)
            else:
                report.skipped["kafka batches"] = "the broker extra is not installed"
    report.seconds = time.perf_counter() - started
    return report


def _take(compiles: _Compiles) -> list[str]:
    with compiles._lock:
        names, compiles.names = compiles.names, []
    return names


def main(argv: list[str] | None = None) -> int:
    """``python -m strata.warm [--json]``: a progress line, then what was compiled."""
    argv = sys.argv[1:] if argv is None else argv
    as_json = "--json" in argv
    from rich.console import Console
    err = Console(stderr=True)
    with err.status("strata warm: compiling the numba kernels (once per install)") as status:
        report = run(lambda name: status.update(f"strata warm: {name} (compiling the numba "
                                                "kernels, once per install)"))
    if as_json:
        print(json.dumps(report.as_dict()))
    else:
        where = os.environ.get("NUMBA_CACHE_DIR") or "__pycache__ next to each module"
        err.print(f"strata warm: {report.compiled} kernel specializations compiled in "
                  f"{report.seconds:.1f} s (cache: {where})"
                  + "".join(f"; skipped {k}: {v}" for k, v in report.skipped.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
