"""``strata refstore stat|verify|compact``: output, exit codes, clear errors."""

from __future__ import annotations

from click.testing import CliRunner

import strata.refstore as rs
from strata.cli.refstore_cmd import refstore_group
from strata.refstore import layout

from refstore_support import body, mid


def make_store(path, close=True):
    s = rs.open(path, file_size_limit=2000, auto_gc=False, sync_interval=0.01)
    c = s.client("q")
    c.write_batch([(mid(i), body(i)) for i in range(60)])
    s.sync()                                        # so the removes do not cancel the writes
    c.remove([mid(i) for i in range(60) if i % 4])
    if close:
        s.close()
    return s


def run(*args):
    return CliRunner().invoke(refstore_group, list(args), catch_exceptions=False)


def test_stat_reports_files_bytes_and_garbage_ratio(tmp_path):
    make_store(tmp_path / "rs")
    r = run("stat", str(tmp_path / "rs"))
    assert r.exit_code == 0, r.output
    assert "0000000000.rsd" in r.output and "garbage ratio" in r.output
    assert "messages: 15" in r.output


def test_missing_or_foreign_directory_is_a_clear_error(tmp_path):
    r = run("stat", str(tmp_path / "nope"))
    assert r.exit_code != 0 and "does not exist" in r.output
    (tmp_path / "empty").mkdir()
    for cmd in ("stat", "verify", "compact"):
        r = run(cmd, str(tmp_path / "empty"))
        assert r.exit_code != 0 and "no ref-store files" in r.output


def test_verify_passes_a_clean_store_and_fails_a_damaged_one(tmp_path):
    make_store(tmp_path / "rs")
    r = run("verify", str(tmp_path / "rs"))
    assert r.exit_code == 0 and "ok" in r.output, r.output
    path = tmp_path / "rs" / layout.data_name(0)
    data = bytearray(path.read_bytes())
    data[50] ^= 0xFF                                # message 0 (live) is damaged
    path.write_bytes(bytes(data))
    r = run("verify", str(tmp_path / "rs"))
    assert r.exit_code != 0
    assert "not a whole, checksummed record" in r.output
    assert mid(0).hex() in r.output


def test_compact_reduces_garbage_and_keeps_every_live_message(tmp_path):
    make_store(tmp_path / "rs")
    r = run("compact", str(tmp_path / "rs"))
    assert r.exit_code == 0, r.output
    assert "combines" in r.output and "files 4 -> 2" in r.output
    s = rs.open(tmp_path / "rs", file_size_limit=2000)
    assert s.recovered_clean
    st = s.stats()
    assert st.garbage_ratio <= 0.5 or st.total_bytes <= 2 * 2000
    c = s.client("q")
    assert [c.read(mid(i)) for i in range(0, 60, 4)] == [body(i) for i in range(0, 60, 4)]
    s.close()
    assert run("verify", str(tmp_path / "rs")).exit_code == 0


def test_compact_refuses_an_open_or_uncleanly_stopped_store(tmp_path):
    s = make_store(tmp_path / "rs", close=False)
    r = run("compact", str(tmp_path / "rs"))
    assert r.exit_code != 0 and "not closed cleanly" in r.output
    s.crash()
    r = run("compact", str(tmp_path / "rs"))
    assert r.exit_code != 0 and "recover_refs" in r.output
