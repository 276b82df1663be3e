"""Open time of a cleanly closed store (issue 22: checking the derived files at open must not
rescan the commit log when nothing is wrong). Builds one store, then opens and closes it
``--opens`` times with this tree's code and, with ``--compare-src DIR``, with another tree's
(``DIR`` is a ``src`` directory, e.g. a worktree of the commit before), alternating, in the
same run. Prints JSON lines: one per code tree (median and best open time, and the share of
it spent checking derived files) and the ratio.

    .venv/bin/python bench/open_clean.py --messages 500000 --compare-src /tmp/base/src
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()


def build(path: Path, messages: int, topics: int, queues: int) -> None:
    import strata
    with strata.open(path) as store:
        for t in range(topics):
            store.create_topic(f"t{t}", queues)
        body = b"x" * 100
        batch = 1000
        for i in range(0, messages, batch):
            store.put_batch([strata.Message(f"t{(i // batch + j) % topics}", body,
                                            keys=(f"k{i + j}",)) for j in range(batch)])
        store.wait_dispatched(120)


def time_opens(path: Path, opens: int) -> dict:
    """Open and close ``opens`` times with the code on sys.path; seconds of each open, and of
    the derived-file checks inside it (queue units and key-index chains, when this code has
    them)."""
    import strata
    try:
        import strata.index.derived_check as dc
    except ImportError:
        dc = None
    spent = [0.0]
    if dc is not None:
        inner = dc.check_queues

        def timed(*a, **k):
            t0 = time.perf_counter()
            try:
                return inner(*a, **k)
            finally:
                spent[0] += time.perf_counter() - t0
        import strata.store.message_store as ms
        ms.check_queues = timed
        from strata.index.key_index import KeyIndex
        chains = KeyIndex.check_chains

        def timed_chains(self, *a, **k):
            t0 = time.perf_counter()
            try:
                return chains(self, *a, **k)
            finally:
                spent[0] += time.perf_counter() - t0
        KeyIndex.check_chains = timed_chains
    out, checks = [], []
    for _ in range(opens):
        spent[0] = 0.0
        t0 = time.perf_counter()
        store = strata.open(path)
        out.append(time.perf_counter() - t0)
        checks.append(spent[0])
        assert not store.recovery_report.repaired_files, store.recovery_report.repaired_files
        assert store.recovery_report.redispatched_records == 0
        store.close()
    return {"open_s": out, "check_s": checks, "strata": strata.__file__}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--topics", type=int, default=8)
    ap.add_argument("--queues", type=int, default=8)
    ap.add_argument("--opens", type=int, default=7)
    ap.add_argument("--compare-src", type=Path, default=None)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        print(json.dumps(time_opens(Path(a.child), a.opens)))
        return 0
    work = Path(tempfile.mkdtemp(prefix="strata-open-"))
    try:
        store = work / "store"
        t0 = time.perf_counter()
        build(store, a.messages, a.topics, a.queues)
        print(json.dumps({"event": "built", "messages": a.messages,
                          "queues": a.topics * a.queues,
                          "bytes": sum(f.stat().st_size for f in store.rglob("*") if f.is_file()),
                          "seconds": round(time.perf_counter() - t0, 1)}), flush=True)
        here = str(HERE.parent.parent / "src")
        trees = {"this": here}
        if a.compare_src is not None:
            trees["compare"] = str(a.compare_src.resolve())
        results: dict[str, dict] = {k: {"open_s": [], "check_s": []} for k in trees}
        for _ in range(a.opens):   # alternate the trees, one open each, in the same run
            for name, src in trees.items():
                env = dict(os.environ, PYTHONPATH=src)
                r = subprocess.run([sys.executable, str(HERE), "--child", str(store),
                                    "--opens", "1"], env=env, capture_output=True, text=True,
                                   check=True)
                got = json.loads(r.stdout.strip().splitlines()[-1])
                results[name]["open_s"] += got["open_s"]
                results[name]["check_s"] += got["check_s"]
                results[name]["strata"] = got["strata"]
        for name, r in results.items():
            print(json.dumps({"event": "open", "code": name, "strata": r["strata"],
                              "median_ms": round(1000 * statistics.median(r["open_s"]), 2),
                              "best_ms": round(1000 * min(r["open_s"]), 2),
                              "derived_check_median_ms":
                                  round(1000 * statistics.median(r["check_s"]), 2)}))
        if "compare" in results:
            m = {k: statistics.median(r["open_s"]) for k, r in results.items()}
            print(json.dumps({"event": "ratio", "this_over_compare":
                              round(m["this"] / m["compare"], 3)}))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
