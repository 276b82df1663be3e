"""``strata warm`` on a copy of the sources with an empty numba cache: it leaves cache entries
for every kernel module it promises, a second run compiles nothing, and afterwards a put, a
read and a tier upload in a new process (what ``/tmp/tierdbg``'s slow first tier_sync did),
large keyed batches as a broker puts them, and reads the tier answers compile nothing
either."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import strata
from strata import warm

pytestmark = pytest.mark.slow     # the cold run compiles every kernel: tens of seconds of CPU

SRC = Path(strata.__file__).resolve().parents[1]


def _env(src: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env["PYTHONPATH"] = str(src)
    return env


def _run(src: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], env=_env(src), cwd=src.parent,
                          capture_output=True, text=True, timeout=900)


# a new process using the store the way tierdbg's t.py did, then as a broker does (large
# batches of keyed messages, of one topic and gathered from several: the columnar encoder,
# the compiled queue choice and key-index entries) and reading what only the tier holds
# (local retention deleted the first segment); prints the kernels it compiled
_FIRST_CALLS = textwrap.dedent("""
    import json, sys, threading, time
    from pathlib import Path
    from numba.core import event
    import strata
    names = []
    class L(event.Listener):
        def on_start(self, ev): names.append(ev.data["dispatcher"].py_func.__qualname__)
        def on_end(self, ev): pass
    d = Path(sys.argv[1])
    cfg = strata.StoreConfig(segment_size=1 << 20, consume_queue_units=4096, index_slots=1024,
                             index_entries=8192, tier_url=(d / "tier").as_uri())
    later = int(time.time() * 1000) + 30 * 86_400_000
    with event.install_listener("numba:compile", L()):
        with strata.open(d / "store", cfg) as store:
            store.put(strata.Message("orders", b"hello", keys=["o-1"]))
            store.tier_sync(timeout_s=600)
            store.wait_dispatched(600)
            store.get("orders", 0, 0, 8)
            store.query("orders", "o-1")
            body = bytes(20_000)
            for b in range(2):
                store.put_batch([strata.Message("orders", body, keys=[f"o-{b}-{i}"],
                                                tags="x" if i % 3 else None)
                                 for i in range(50)])
            store.put_batch([strata.Message(t, b"gathered", keys=["g"], tags="y",
                                            properties={"p": "v"})
                             for t in ("orders", "users") * 25])
            store.tier_sync(timeout_s=600)
            store.clean_expired(later)
            store.wait_dispatched(600)
            assert store.log.min_offset() > 0          # the oldest reads go to the tier
            for q in range(store.queue_count("orders")):
                store.get("orders", q, 0, 8)
                store.get("orders", q, 0, 8, tags="x")
                store.get_columns("orders", q, 0, 8)
            store.query("orders", "o-0-1")
    print(json.dumps(names))
""")


def test_warm_fills_the_cache_once(tmp_path: Path) -> None:
    src = tmp_path / "src"
    shutil.copytree(SRC, src, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    pkg = src / "strata"
    modules = (list(warm.MODULES) + (list(warm.KAFKA_MODULES) if warm.kafka_available() else [])
               + (list(warm.SPARK_MODULES) if warm.spark_available() else []))
    assert not list(pkg.rglob("*.nbi"))          # the copy starts with an empty cache

    cold = _run(src, "-m", "strata.cli.main", "warm", "--json")
    assert cold.returncode == 0, cold.stderr
    first = json.loads(cold.stdout)
    assert first["compiled"] > 0
    for module in modules:
        path = pkg / module
        entries = list((path.parent / "__pycache__").glob(f"{path.stem}.*.nbi"))
        assert entries, f"strata warm left no numba cache entry for {module}"
        dotted = "strata." + module.removesuffix(".py").replace("/", ".")
        assert any(k.startswith(dotted + ".") for k in first["kernels"]), module

    again = _run(src, "-m", "strata.warm", "--json")
    assert again.returncode == 0, again.stderr
    second = json.loads(again.stdout)
    assert second["compiled"] == 0, second
    assert set(second["steps"]) == set(first["steps"])

    script = tmp_path / "first_calls.py"
    script.write_text(_FIRST_CALLS)
    store_dir = tmp_path / "data"
    store_dir.mkdir()
    calls = _run(src, str(script), str(store_dir))
    assert calls.returncode == 0, calls.stderr
    assert json.loads(calls.stdout.splitlines()[-1]) == []
