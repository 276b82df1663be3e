"""``strata serve`` keeps freed memory for reuse (strata.broker.allocator): after it, a block
of megabytes freed and allocated again comes back without the kernel faulting its pages in
once more; an operator's own allocator settings are left alone. Each case runs in a process
of its own (the settings are process-wide)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

# what a broker does: one thread allocates blocks of 0.3-4 MiB and writes them (a read lane
# encoding answers), another frees them a little later (the event loop, once sent)
PROBE = r'''
import ctypes, resource, sys, threading, queue, random
from strata.broker.allocator import keep_freed_memory
done = keep_freed_memory() if sys.argv[1] == "keep" else None
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
q = queue.Queue()
rnd = random.Random(5)
sizes = [rnd.choice([300 << 10, 1 << 20, 2700 << 10, 4 << 20, 600 << 10]) for _ in range(400)]
def producer():
    for s in sizes:
        p = libc.malloc(s); libc.memset(p, 1, s); q.put(p)
    q.put(None)
def consumer():
    held = []
    while True:
        p = q.get()
        if p is None: break
        held.append(p)
        if len(held) > 2: libc.free(held.pop(0))
    for p in held: libc.free(p)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
t1 = threading.Thread(target=producer); t2 = threading.Thread(target=consumer)
t1.start(); t2.start(); t1.join(); t2.join()
tot = sum(sizes) // 4096
print(done, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before, tot)
'''


def _probe(mode: str, **env) -> tuple[str, int, int]:
    """(whether set, page faults, pages written) of one run of PROBE."""
    out = subprocess.run([sys.executable, "-c", PROBE, mode], check=True, text=True,
                         capture_output=True, timeout=120,
                         env=dict(os.environ, **env)).stdout.split()
    return out[0], int(out[1]), int(out[2])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator")
def test_freed_blocks_are_reused_without_page_faults() -> None:
    done, kept, pages = _probe("keep")
    assert done == "True"
    assert kept < pages // 10        # nearly every page written was one written before
    done, faults, _pages = _probe("default")
    assert faults > 4 * kept         # glibc's defaults: measured ~14x as many


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator")
def test_an_operators_own_settings_are_left_alone() -> None:
    done, faults, pages = _probe("keep", MALLOC_TRIM_THRESHOLD_="131072")
    assert done == "False"
    assert faults > pages // 10
    done, _faults, _pages = _probe("keep", GLIBC_TUNABLES="glibc.malloc.mmap_threshold=4194304")
    assert done == "False"
