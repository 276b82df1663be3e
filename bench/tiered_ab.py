"""Two strata source trees' tier uploads side by side against a plain file copy; JSON.

    python bench/tiered_ab.py OLD_SRC NEW_SRC [--mib M] [--rounds R]
    python bench/tiered_ab.py NAME=SRC NAME=SRC ... [--mib M] [--rounds R]

e.g. ``git archive main src | tar -x -C /tmp/tier-before`` then ``python bench/tiered_ab.py
/tmp/tier-before/src src``. One store of ``--mib`` MiB of 1 KiB messages (one key each, 8
queues, built by NEW_SRC: the formats are the same) is uploaded by ``tier_sync`` to a fresh
POSIX tier by each tree in its own process (each process first uploads once untimed: imports
and compiled code load as in a running store), and copied as ``bench/tiered.py``'s ``raw``
does; ``--rounds`` rounds, the order of the trees and the copy rotating and reversing from
round to round. Per tree: ratios to the copy of best rounds, medians and every round's ratio,
and ``vs_<first tree>`` (its best time over this tree's).
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

MiB = 1 << 20
HERE = Path(__file__).resolve().parent


def child(mode: str, directory: Path, url: str) -> None:
    """In a child process: one timed upload (``up``) or copy (``raw``), printed as JSON."""
    sys.path.insert(0, str(HERE))
    import strata
    import tiered
    from strata.tiered.connect import open_backend

    def upload(url: str):
        shutil.rmtree(directory / "tiered", ignore_errors=True)
        (directory / "config" / "tier.json").unlink(missing_ok=True)
        shutil.rmtree(url[len("file://"):], ignore_errors=True)
        cfg = strata.StoreConfig(segment_size=256 * MiB, tier_url=url, index_slots=100_000,
                                 index_entries=2_000_000)
        with strata.open(directory, cfg) as store:
            t, c = time.perf_counter(), time.process_time()
            store.tier_sync(timeout_s=7200)
            took, cpu = time.perf_counter() - t, time.process_time() - c
            nbytes = store.tier.dispatcher.uploaded.bytes
            sizes = [c.log_bytes for q in store.tier.meta.meta.queues.values()
                     for c in q.chunks]
        shutil.rmtree(url[len("file://"):], ignore_errors=True)
        return took, cpu, nbytes, sizes

    if mode == "up":
        upload(url + "-warm")
        took, cpu, nbytes, sizes = upload(url)
        (directory.parent / "sizes.json").write_text(json.dumps(sizes))
        print(json.dumps({"s": took, "cpu": cpu, "bytes": nbytes}))
        return
    sizes = json.loads((directory.parent / "sizes.json").read_text())
    backend = open_backend(url, None)
    t = time.perf_counter()
    for i, piece in enumerate(tiered.file_pieces(directory / "commitlog", sizes)):
        backend.put(f"raw/{i}", piece)
    took = time.perf_counter() - t
    for i in range(len(sizes)):
        backend.delete(f"raw/{i}")
    print(json.dumps({"s": took, "bytes": sum(sizes)}))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("trees", nargs="+", help="OLD_SRC NEW_SRC, or NAME=SRC ... (any number)")
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=6)
    a = ap.parse_args()
    named = [t.split("=", 1) if "=" in t else [None, t] for t in a.trees]
    if len(named) == 2 and all(n is None for n, _ in named):
        named = [["old", named[0][1]], ["new", named[1][1]]]
    trees = {(n or f"t{i}"): str(Path(p).resolve()) for i, (n, p) in enumerate(named)}
    names = list(trees)
    root = Path(tempfile.mkdtemp(prefix="strata-bench-tiered-ab-"))

    def run(tree: str, mode: str, url: str) -> dict:
        env = dict(os.environ, PYTHONPATH=trees[tree])
        out = subprocess.run([sys.executable, __file__, "--child", mode, str(root / "store"),
                              url], env=env, capture_output=True, text=True, check=True)
        return json.loads(out.stdout.strip().splitlines()[-1])

    try:
        subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {str(HERE)!r}); "
                        f"import tiered; from pathlib import Path; tiered.build(Path("
                        f"{str(root / 'store')!r}), {a.mib}, 1024, 'file://{root}/t', None)"],
                       env=dict(os.environ, PYTHONPATH=trees[names[-1]]), check=True)
        tier = f"file://{root}/tier"
        run(names[0], "up", tier)      # page cache and sizes.json before the first round
        got: dict[str, list[dict]] = {k: [] for k in names + ["raw"]}
        for r in range(a.rounds):
            order = names + ["raw"]
            order = order[r % len(order):] + order[:r % len(order)]   # each first in turn
            if r % 2:
                order.reverse()
            for k in order:
                got[k].append(run(names[-1], "raw", tier + "-raw") if k == "raw"
                              else run(k, "up", tier))
        raw = [x["s"] for x in got["raw"]]
        out = {"bench": "tiered_ab", "mib": a.mib, "rounds": a.rounds,
               "bytes": got[names[-1]][0]["bytes"], "raw_mb_s": round(
                   got["raw"][0]["bytes"] / min(raw) / 1e6, 1)}
        for k in names:
            s = [x["s"] for x in got[k]]
            out[k] = {"mb_s": round(got[k][0]["bytes"] / min(s) / 1e6, 1),
                      "cpu_s": round(min(x["cpu"] for x in got[k]), 3),
                      "ratio": round(min(raw) / min(s), 2),
                      "median_ratio": round(statistics.median(
                          r / u for r, u in zip(raw, s)), 2),
                      "rounds_ratio": [round(r / u, 2) for r, u in zip(raw, s)],
                      f"vs_{names[0]}": round(min(x["s"] for x in got[names[0]]) / min(s), 2)}
        print(json.dumps(out), flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], Path(sys.argv[3]), sys.argv[4])
    else:
        main()
