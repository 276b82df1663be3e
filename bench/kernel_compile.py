"""What a cold numba cache costs, kernel by kernel: the compile time and the number of
specializations (argument-type combinations, one cache entry each) of every ``@njit``
kernel in strata, after ``strata warm``'s paths ran once on a copy of the sources with an
empty cache; then the same run on the now-warm cache, side by side.

    python bench/kernel_compile.py            # JSON lines: one per kernel, then a summary

Per kernel: ``compile_s`` is the wall time numba spent compiling it, excluding kernels it
called that compiled inside it (their own lines); ``specializations`` the entries it has after
the run, with their ``signatures``; 0 means no warm path reached it (error paths, Spark).
The machine is shared: read the times as a ranking and a cold/warm ratio, not absolutes.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_CHILD = r"""
import importlib, json, pkgutil, sys, threading, time
from numba.core import event
from numba.core.registry import CPUDispatcher
import strata, strata.warm as warm

spent, local = {}, threading.local()
class Timer(event.Listener):
    def on_start(self, ev):
        stack = getattr(local, "stack", None) or []
        local.stack = stack
        stack.append([ev.data["dispatcher"], time.perf_counter(), 0.0])
    def on_end(self, ev):
        disp, t0, inner = local.stack.pop()
        took = time.perf_counter() - t0
        if local.stack:
            local.stack[-1][2] += took
        spent[disp] = spent.get(disp, 0.0) + took - inner

t0 = time.perf_counter()
with event.install_listener("numba:compile", Timer()):
    report = warm.run()
total = time.perf_counter() - t0

kernels = {}
for info in pkgutil.walk_packages(strata.__path__, "strata."):
    try:
        mod = importlib.import_module(info.name)
    except Exception:      # an extra that is not installed
        continue
    for name, obj in vars(mod).items():
        if isinstance(obj, CPUDispatcher) and obj.py_func.__module__ == info.name:
            kernels[f"{info.name}.{name}"] = obj
for name, disp in sorted(kernels.items()):
    print(json.dumps({"bench": "kernel_compile", "case": "kernel", "kernel": name,
                      "specializations": len(disp.overloads),
                      "compile_s": round(spent.get(disp, 0.0), 3),
                      "signatures": [str(s) for s in disp.signatures]}))
other = sum(t for d, t in spent.items() if d not in kernels.values())
print(json.dumps({"run": "summary", "seconds": round(total, 2),
                  "compiled": report.compiled, "numba_library_s": round(other, 2),
                  "kernels": len(kernels),
                  "not_reached": sorted(k for k, d in kernels.items() if not d.overloads)}))
"""


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="strata-kc-") as tmp:
        src = Path(tmp, "src")
        shutil.copytree(ROOT / "src", src, ignore=shutil.ignore_patterns("__pycache__"))
        env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
        env["PYTHONPATH"] = str(src)
        rows = {}
        for cache in ("cold", "warm"):
            out = subprocess.run([sys.executable, "-c", _CHILD], env=env, cwd=tmp, check=True,
                                 capture_output=True, text=True).stdout.splitlines()
            rows[cache] = [json.loads(line) for line in out]
        for row in rows["cold"][:-1]:
            print(json.dumps(row))
        cold, warm = rows["cold"][-1], rows["warm"][-1]
        print(json.dumps({"bench": "kernel_compile", "case": "cold vs warm cache",
                          "cold_s": cold["seconds"], "warm_s": warm["seconds"], "cold_compiled": cold["compiled"],
                          "warm_compiled": warm["compiled"],
                          "ratio": round(cold["seconds"] / max(warm["seconds"], 1e-9), 1),
                          "numba_library_s": cold["numba_library_s"],
                          "kernels": cold["kernels"], "not_reached": cold["not_reached"]}))


if __name__ == "__main__":
    main()
