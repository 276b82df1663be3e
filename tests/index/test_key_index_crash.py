"""Kill a writing process at random points; reopening must give a consistent index."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import textwrap
import time

from strata.index.key_index import KeyIndex

T0 = 1_700_000_000_000

WRITER = textwrap.dedent(f"""
    import sys
    from strata.index.key_index import KeyIndex
    ki = KeyIndex(sys.argv[1], slots=97, entries=3001)
    i = ki.indexed_end() // 10          # resume like the store's replay
    print("ready", flush=True)
    while True:
        batch = []
        for _ in range(50):
            batch += [("T#k%d" % (i % 40), i * 10, {T0} + i), ("T#u%d" % i, i * 10, {T0} + i)]
            i += 1
        ki.put_batch(batch)
""")


def expected(key: str, end: int) -> list[int]:
    if key.startswith("T#u"):
        n = int(key[3:])
        return [n * 10] if n * 10 < end else []
    k = int(key[3:])
    return [i * 10 for i in range((end - 1) // 10, -1, -1) if i % 40 == k]


def test_sigkill_while_indexing(tmp_path):
    rng = random.Random(7)
    last_end = repaired = 0
    for _round in range(6):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)],
                                stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.05, 0.3))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        ki = KeyIndex(tmp_path, slots=97, entries=3001)
        end = ki.indexed_end()
        assert end >= last_end and end % 10 == 1          # whole messages only
        for key in [f"T#k{k}" for k in range(40)] + [f"T#u{rng.randrange(end // 10 + 5)}"
                                                    for _ in range(50)]:
            assert list(ki.candidates(key, 0, 1 << 62)) == expected(key, end), key
        info = ki.files()
        assert sum(f["entries"] for f in info) == 2 * (end // 10 + 1)
        repaired += len(ki.repairs)
        ki.close()
        last_end = end
    print('rounds with a repair:', repaired)
