"""Recovery: clean restart without a scan, dirty rebuild from ref counts, transient wipe,
crashes at every GC step (fault hook and SIGKILL), leftover temp files, corrupt files."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

import strata.refstore as rs
from strata.errors import CorruptRecordError, InvalidInputError
from strata.refstore import layout

from refstore_support import body, mid
from test_refstore_gc import R, build_diagram, dbody


def test_clean_restart_loads_index_summary_and_refs_without_a_scan(open_store, tmp_path):
    s = open_store(file_size_limit=4096)
    a, b = s.client("q1"), s.client("q2")
    a.write_batch([(mid(i), body(i)) for i in range(200)])
    b.write_batch([(mid(i), body(i)) for i in range(0, 200, 2)])
    a.remove([mid(i) for i in range(0, 200, 4)])
    s.sync()
    before = {i: s.locate(mid(i)) for i in range(200)}
    stats = s.stats()
    s.close()
    names = set(os.listdir(tmp_path / "rs"))
    assert {layout.INDEX_NAME, layout.SUMMARY_NAME, layout.CLEAN_NAME} <= names
    s2 = open_store(file_size_limit=4096, client_refs=["q1", "q2"])
    assert s2.recovered_clean and s2.recovery.scanned_bytes == 0
    assert sorted(s2.client_refs()) == ["q1", "q2"]
    assert {i: s2.locate(mid(i)) for i in range(200)} == before
    assert s2.stats().valid_bytes == stats.valid_bytes
    assert s2.stats().total_bytes == stats.total_bytes
    # the clean marker is consumed at start: a crash now would mean a dirty start
    assert layout.CLEAN_NAME not in os.listdir(tmp_path / "rs")
    c = s2.client("q1")
    for i in range(200):
        want = None if before[i][0] == 0 else body(i)
        assert c.read(mid(i)) == want
    c.write(mid(500), body(500))
    c.remove([mid(1)])
    s2.sync()
    assert s2.locate(mid(1))[0] == 0 and c.read(mid(500)) == body(500)


def test_changed_client_refs_force_the_dirty_path(open_store):
    s = open_store()
    s.client("q1").write(mid(1), body(1))
    s.close()
    with pytest.raises(rs.RecoveryNeedsRefsError, match="client refs"):
        open_store(client_refs=["q1", "q-new"])
    s2 = open_store(client_refs=["q1", "q-new"], recover_refs=[(mid(1), 1)])
    assert not s2.recovered_clean
    assert s2.client().read(mid(1)) == body(1)


def test_unclean_recovery_keeps_only_referenced_messages_with_their_counts(open_store):
    s = open_store(file_size_limit=2048)
    a, b = s.client(), s.client()
    a.write_batch([(mid(i), body(i)) for i in range(60)])
    b.write_batch([(mid(i), body(i)) for i in range(30)])
    s.sync()
    s.crash()

    def refs():                                  # what the queues' own indexes would say
        for i in range(60):
            yield mid(i), 1
        for i in range(30):
            yield mid(i), 1
        for i in range(0, 60, 3):
            yield mid(i), -1                     # acked since
        yield mid(777), 1                        # referenced but never stored: dropped

    s2 = open_store(file_size_limit=2048, recover_refs=refs())
    assert not s2.recovered_clean and s2.recovery.scanned_bytes > 0
    assert s2.recovery.dropped_refs == 1
    c = s2.client()
    for i in range(60):
        want = (1 if i < 30 else 0) + 1 - (1 if i % 3 == 0 else 0)
        loc = s2.locate(mid(i))
        if want == 0:
            assert loc is None and c.read(mid(i)) is None
        else:
            assert loc[0] == want and c.read(mid(i)) == body(i)
    assert s2.locate(mid(777)) is None
    assert s2.stats().valid_bytes == sum(s2.locate(mid(i))[3] for i in range(60)
                                         if s2.locate(mid(i)))


def test_unclean_start_without_refs_is_refused_and_keep_all_salvages(open_store):
    s = open_store()
    s.client().write_batch([(mid(i), body(i)) for i in range(10)])
    s.sync()
    s.crash()
    with pytest.raises(rs.RecoveryNeedsRefsError, match="recover_refs"):
        open_store()
    with pytest.raises(InvalidInputError, match="pairs"):
        open_store(recover_refs=[b"no delta"])
    s2 = open_store(recover_refs=rs.KEEP_ALL)
    assert s2.message_count() == 10
    assert s2.client().read(mid(3)) == body(3)


def test_a_torn_tail_is_cut_and_writing_resumes_after_the_last_whole_record(open_store,
                                                                            tmp_path):
    s = open_store()
    s.client().write_batch([(mid(i), body(i)) for i in range(5)])
    s.sync()
    s.crash()
    path = tmp_path / "rs" / layout.data_name(0)
    with open(path, "ab") as f:
        f.write(b"\x90\x00\x00\x00" + b"partial record")
    s2 = open_store(recover_refs=[(mid(i), 1) for i in range(6)])
    assert os.path.getsize(path) == 5 * (100 + 25)
    c = s2.client()
    c.write(mid(5), body(5))
    s2.close()
    s3 = open_store()
    assert s3.recovered_clean
    assert [s3.client().read(mid(i)) for i in range(6)] == [body(i) for i in range(6)]


def test_transient_store_is_wiped_at_every_start(open_store, tmp_path):
    s = open_store(kind="transient")
    s.client().write(mid(1), body(1))
    s.close()
    other = tmp_path / "rs" / "unrelated.txt"
    other.write_text("not ours")
    s2 = open_store(kind="transient")
    assert s2.message_count() == 0 and s2.client().read(mid(1)) is None
    assert other.exists()
    assert s2.stats().total_bytes == 0


def test_corrupt_record_reads_fail_clearly_and_dirty_scan_skips_it(open_store, tmp_path):
    s = open_store(file_size_limit=1000)
    c = s.client()
    c.write_batch([(mid(i), body(i)) for i in range(12)])
    s.close()
    path = tmp_path / "rs" / layout.data_name(0)
    data = bytearray(path.read_bytes())
    data[R + 40] ^= 0xFF                              # inside message 1's body
    path.write_bytes(bytes(data))
    s2 = open_store(file_size_limit=1000)
    c2 = s2.client()
    with pytest.raises(CorruptRecordError, match="offset"):
        c2.read(mid(1))
    assert c2.read(mid(0)) == body(0) and c2.read(mid(2)) == body(2)
    s2.crash()
    s3 = open_store(file_size_limit=1000, recover_refs=[(mid(i), 1) for i in range(12)])
    assert s3.recovery.dropped_refs == 1 and s3.locate(mid(1)) is None
    assert all(s3.client().read(mid(i)) == body(i) for i in range(12) if i != 1)


def test_damaged_clean_files_fall_back_to_the_dirty_path(open_store, tmp_path):
    s = open_store()
    s.client().write_batch([(mid(i), body(i)) for i in range(10)])
    s.close()
    idx = tmp_path / "rs" / layout.INDEX_NAME
    raw = bytearray(idx.read_bytes())
    raw[30] ^= 1
    idx.write_bytes(bytes(raw))
    with pytest.raises(rs.RecoveryNeedsRefsError, match="unusable"):
        open_store()
    s2 = open_store(recover_refs=[(mid(i), 1) for i in range(10)])
    assert s2.message_count() == 10


def test_leftover_temp_file_is_folded_back(open_store, tmp_path):
    s = open_store()
    c = s.client()
    c.write_batch([(mid(i), body(i)) for i in range(3)])
    s.sync()
    s.crash()
    from strata.format import refstore_record as rec
    (tmp_path / "rs" / layout.temp_name(0)).write_bytes(rec.encode(mid(9), body(9)))
    s2 = open_store(recover_refs=[(mid(i), 1) for i in (0, 1, 2, 9)])
    assert s2.recovery.folded_temp_files == [0]
    assert s2.client().read(mid(9)) == body(9)
    assert not any(n.endswith(".rst") for n in os.listdir(tmp_path / "rs"))


LIVE = ["A", "B", "C", "D", "E", "F", "G", "Z"]


def _live_refs(ids):
    for n in LIVE:
        yield ids[n], 1
    for n in ids:
        if n.startswith("X"):
            yield ids[n], 1
            yield ids[n], -1


@pytest.mark.parametrize("step", rs.COMBINE_STEPS)
def test_crash_at_every_combine_step_loses_nothing_live(open_store, step):
    def hook(at, info):
        if at == step:
            raise rs.InjectedFault(f"crash at {at}")

    s, c, ids, names = build_diagram(open_store, fault_hook=hook)
    with pytest.raises(Exception, match="crash at"):
        s.compact(timeout=30)
    s.crash()
    s2 = open_store(file_size_limit=7 * R, recover_refs=_live_refs(ids), auto_gc=False,
                    gc_garbage_ratio=0.4)
    c2 = s2.client()
    for n in LIVE:
        assert c2.read(ids[n]) == dbody(n), (step, n)
    for n in ids:
        if n.startswith("X"):
            assert c2.read(ids[n]) is None
    st = s2.compact(timeout=30)                   # and the store can still be compacted
    assert st.utilisation >= 0.5
    for n in LIVE:
        assert c2.read(ids[n]) == dbody(n)


@pytest.mark.parametrize("step", rs.DELETE_STEPS)
def test_crash_at_every_delete_step_loses_nothing_live(open_store, step):
    def hook(at, info):
        if at == step:
            raise rs.InjectedFault(f"crash at {at}")

    s = open_store(file_size_limit=4 * R, fault_hook=hook)
    c = s.client()
    c.write_batch([(mid(i), body(i)) for i in range(10)])
    s.sync()
    c.remove([mid(i) for i in range(4)])          # file 0 is now empty
    s.sync()
    with pytest.raises(Exception, match="crash at"):
        s.wait_gc_idle(timeout=30)
    s.crash()
    s2 = open_store(file_size_limit=4 * R,
                    recover_refs=[(mid(i), 1) for i in range(4, 10)])
    st = s2.wait_gc_idle(timeout=30)
    assert 0 not in [f.number for f in st.files]
    assert [s2.client().read(mid(i)) for i in range(10)] == \
        [None] * 4 + [body(i) for i in range(4, 10)]


CHILD = textwrap.dedent("""
    import os, signal, sys
    sys.path[:0] = {paths!r}
    import strata.refstore as rs
    from test_refstore_gc import build_diagram

    def hook(at, info):
        if at == {step!r}:
            os.kill(os.getpid(), signal.SIGKILL)

    def open_store(**opts):
        opts.setdefault("sync_interval", 0.01)
        return rs.open({path!r}, **opts)

    s, c, ids, names = build_diagram(open_store, fault_hook=hook)
    print("ready", flush=True)
    s.compact(timeout=30)
    print("finished", flush=True)
""")


@pytest.mark.parametrize("step", ["temp_written", "left_truncated", "temp_appended",
                                  "right_appended", "index_updated"])
def test_sigkill_during_gc_loses_nothing_live(open_store, tmp_path, step):
    here = os.path.dirname(__file__)
    path = str(tmp_path / "rs")
    code = CHILD.format(paths=[here] + [p for p in sys.path if p], step=step, path=path)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert "ready" in proc.stdout and "finished" not in proc.stdout
    ids = {n: mid(k) for k, n in enumerate(["A", "B", "X1", "C", "X2", "D", "X3", "E", "X4",
                                            "X5", "F", "X6", "X7", "G", "Z"])}
    s2 = open_store(file_size_limit=7 * R, recover_refs=_live_refs(ids), auto_gc=False)
    c2 = s2.client()
    for n in LIVE:
        assert c2.read(ids[n]) == dbody(n), (step, n)
    assert all(c2.read(ids[n]) is None for n in ids if n.startswith("X"))
