"""Fields a writer changes in place while readers in other processes look: each reader sees a
field whole, old or new, never zero and never a mix of two values (CI once saw a read-only get
come back empty because its confirmed offset read as 0 while the writer stored a new one)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

from strata.files.checkpoint import StatePage

# Every byte differs between the two values, so a store done a byte at a time shows a mix.
OLD, NEW = 0x0102030405060708, 0x1112131415161718

WRITER_SRC = textwrap.dedent(f"""
    import sys, time
    from strata.files.checkpoint import StatePage
    page = StatePage(sys.argv[1], readonly=False)
    page.open({OLD}, {OLD}, {OLD})
    print("ready", flush=True)
    end = time.monotonic() + float(sys.argv[2])
    while time.monotonic() < end:
        for _ in range(1000):
            page.set_confirmed({NEW}); page.set_dispatched({NEW}); page.set_min({NEW})
            page.set_confirmed({OLD}); page.set_dispatched({OLD}); page.set_min({OLD})
    page.close()
""")


def test_reader_never_sees_a_torn_or_zeroed_offset(tmp_path):
    writer = subprocess.Popen([sys.executable, "-c", WRITER_SRC, str(tmp_path), "1.5"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline().strip() == "ready"
        page = StatePage(tmp_path, readonly=True)
        assert page.open()
        seen, bad = set(), []
        end = time.monotonic() + 1.0
        reads = 0
        while time.monotonic() < end and not bad:
            for _ in range(2000):
                _pid, confirmed, dispatched, min_offset = page.read()
                for v in (confirmed, dispatched, min_offset):
                    if v not in (OLD, NEW):
                        bad.append(hex(v))
                    seen.add(v)
            reads += 2000
        page.close()
    finally:
        writer.wait(timeout=30)
    assert bad == [], f"{len(bad)} torn reads in {reads}, e.g. {bad[:5]}"
    assert seen == {OLD, NEW}    # the reader did watch the writer change them


def test_writer_values_round_trip(tmp_path):
    page = StatePage(tmp_path, readonly=False)
    page.open(10, 20, 30)
    page.set_confirmed(2**40 + 7)
    page.set_min(5)
    reader = StatePage(tmp_path, readonly=True)
    assert reader.open()
    assert reader.read()[1:] == (2**40 + 7, 20, 5)
    reader.close()
    page.close()
    assert page.mm is None


COUNTERS_WRITER_SRC = textwrap.dedent("""
    import mmap, sys, time
    from strata.format import key_index as fmt
    f = open(sys.argv[1], "r+b")
    mm = mmap.mmap(f.fileno(), 4096)
    old = (1, 0x0102030405060708, 0x01020304, 0x01020304, -0x01020304, 0x01020304)
    new = (2, 0x1112131415161718, 0x11121314, 0x11121314, -0x11121314, 0x11121314)
    fmt.write_counters(mm, *old)
    print("ready", flush=True)
    end = time.monotonic() + float(sys.argv[2])
    while time.monotonic() < end:
        for _ in range(1000):
            fmt.write_counters(mm, *new)
            fmt.write_counters(mm, *old)
""")


def test_key_index_counters_are_never_seen_torn(tmp_path):
    """A read-only query reads a key-index file's counters while the writer rewrites them."""
    import mmap

    from strata.format import key_index as fmt
    path = tmp_path / "index"
    path.write_bytes(bytes(4096))
    writer = subprocess.Popen([sys.executable, "-c", COUNTERS_WRITER_SRC, str(path), "1.5"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline().strip() == "ready"
        with open(path, "rb") as f:
            mm = mmap.mmap(f.fileno(), 4096, access=mmap.ACCESS_READ)
            seen, bad = set(), []
            end = time.monotonic() + 1.0
            while time.monotonic() < end and not bad:
                for _ in range(2000):
                    c = fmt.peek_counters(mm)
                    # each field whole: all from one write or the other, field by field
                    if c[0] not in (1, 2) or any(
                            v not in (a, b) for v, a, b in zip(c[1:], (0x0102030405060708,
                            0x01020304, 0x01020304, -0x01020304, 0x01020304),
                            (0x1112131415161718, 0x11121314, 0x11121314, -0x11121314,
                             0x11121314))):
                        bad.append(c)
                    seen.add(c[1])
            mm.close()
    finally:
        writer.wait(timeout=30)
    assert bad == [], f"torn counters, e.g. {bad[:3]}"
    assert len(seen) == 2
