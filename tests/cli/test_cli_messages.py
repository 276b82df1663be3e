"""What the ``strata`` command says and how it exits: run as a user runs it, in a child process."""

from __future__ import annotations

import io
import json
import os
import pty
import re
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console

import strata
from strata.cli.demo import run_demo
from strata.store.geometry import stored_geometry

from support import small_store_config

KiB = 1 << 10


def small_config() -> strata.StoreConfig:
    return strata.StoreConfig(segment_size=64 * KiB, prefault=False, consume_queue_units=4096,
                              index_slots=1024, index_entries=8192)


def strata_cmd(*args: str, stderr=subprocess.PIPE) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "strata.cli.main", *map(str, args)],
                          stdout=subprocess.PIPE, stderr=stderr, text=True, timeout=120)


def make_store(path: Path, n: int = 5) -> list[strata.PutResult]:
    with strata.open(path, small_config()) as store:
        store.create_topic("t", queues=2)
        return [store.put(strata.Message("t", b"body-%d" % i, keys=[f"k{i}"])) for i in range(n)]


# --------------------------------------------------------------------------- info


def test_info_names_a_running_writer_and_its_pid_instead_of_an_unclean_shutdown(tmp_path):
    with strata.open(tmp_path / "s", small_config()) as store:
        store.put(strata.Message("t", b"x"))
        r = strata_cmd("info", tmp_path / "s")
        assert r.returncode == 0, r.stderr
        assert f"open for writing by a running process (pid {os.getpid()})" in r.stdout
        assert "UNCLEAN" not in r.stdout
    r = strata_cmd("info", tmp_path / "s")
    assert "no writer running; last shutdown clean" in r.stdout


def test_info_says_unclean_after_a_writer_died(tmp_path):
    store = strata.open(tmp_path / "s", small_config())
    store.put(strata.Message("t", b"x"))
    store._abandon()                                  # as a crash leaves it
    r = strata_cmd("info", tmp_path / "s")
    assert r.returncode == 0, r.stderr
    assert "no writer running; last shutdown UNCLEAN" in r.stdout


# --------------------------------------------------------------------------- scan


def test_scan_from_inside_a_record_starts_at_the_next_one_and_says_so(tmp_path):
    results = make_store(tmp_path / "s")
    first, second = results[0].commitlog_offset, results[1].commitlog_offset
    r = strata_cmd("scan", tmp_path / "s", "--from-offset", first + 7)
    assert r.returncode == 0, r.stderr
    printed = [line for line in r.stdout.splitlines() if line]
    assert len(printed) == len(results) - 1
    assert f'"commitlog_offset": {second}' in printed[0]
    assert (f"offset {first + 7} is inside the record at {first} ({results[0].size} bytes); "
            f"starting at the next record, {second}") in r.stderr


def test_scan_at_a_record_start_or_past_the_end(tmp_path):
    results = make_store(tmp_path / "s")
    r = strata_cmd("scan", tmp_path / "s", "--from-offset", results[2].commitlog_offset)
    assert r.returncode == 0 and r.stderr == ""
    assert len(r.stdout.splitlines()) == 3
    end = results[-1].commitlog_offset + results[-1].size
    r = strata_cmd("scan", tmp_path / "s", "--from-offset", end + 5)
    assert r.returncode == 0 and r.stdout == ""
    assert f"offset {end + 5} is at or beyond the end of the log ({end}): no records" in r.stderr


def test_scan_shows_progress_on_a_terminal_and_nothing_on_a_pipe(tmp_path):
    make_store(tmp_path / "s", n=3000)
    r = strata_cmd("scan", tmp_path / "s")
    assert r.returncode == 0 and r.stderr == "" and len(r.stdout.splitlines()) == 3000
    leader, follower = pty.openpty()
    try:
        r = strata_cmd("scan", tmp_path / "s", stderr=follower)
        os.close(follower)
        shown = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:                       # EIO: the child's side is closed
                break
            if not chunk:
                break
            shown += chunk
    finally:
        os.close(leader)
    assert r.returncode == 0 and len(r.stdout.splitlines()) == 3000
    assert b"scanning" in shown


def test_scan_into_a_reader_that_stops_early_ends_quietly(tmp_path):
    make_store(tmp_path / "s", n=3000)             # far more than a pipe's buffer holds
    p = subprocess.Popen([sys.executable, "-m", "strata.cli.main", "scan", str(tmp_path / "s")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = p.stdout.readline()
    p.stdout.close()                               # as `strata scan DIR | head -1` does
    stderr = p.stderr.read()
    assert p.wait(timeout=60) == 0 and stderr == ""
    assert '"commitlog_offset": 0' in first


# --------------------------------------------------------------------------- get, query


def test_get_of_an_unknown_topic_or_queue_fails_with_a_clear_message(tmp_path):
    make_store(tmp_path / "s")
    r = strata_cmd("get", tmp_path / "s", "nope", 0, 0)
    assert r.returncode == 1 and r.stdout == ""
    assert "no topic 'nope' in" in r.stderr and "(its topics: t)" in r.stderr
    r = strata_cmd("get", tmp_path / "s", "t", 2, 0)
    assert r.returncode == 1 and "topic 't' has 2 queue(s), 0..1; there is no queue 2" in r.stderr
    r = strata_cmd("query", tmp_path / "s", "nope", "k1")
    assert r.returncode == 1 and "no topic 'nope' in" in r.stderr
    r = strata_cmd("get", tmp_path / "s", "t", 0, 0)
    assert r.returncode == 0 and "status FOUND" in r.stderr


# --------------------------------------------------------------------------- put


def test_put_stamps_the_born_time(tmp_path):
    make_store(tmp_path / "s", n=1)
    before = time.time_ns() // 1_000_000
    r = strata_cmd("put", tmp_path / "s", "t", "--body", "hello")
    after = time.time_ns() // 1_000_000
    assert r.returncode == 0, r.stderr
    with strata.open(tmp_path / "s", readonly=True) as store:
        m = list(store.scan())[-1]
    assert m.body == b"hello"
    assert before <= m.born_timestamp <= after


def test_put_says_when_it_creates_a_store_and_inspection_creates_none(tmp_path):
    new = tmp_path / "mistyped" / "store"
    for cmd in (("info", new), ("scan", new), ("topics", new), ("get", new, "t", "0", "0"),
                ("verify", new)):
        r = strata_cmd(*cmd)
        assert r.returncode != 0 and "Traceback" not in r.stderr, (cmd, r.stderr)
        assert not (tmp_path / "mistyped").exists(), cmd    # inspection never creates
    r = strata_cmd("put", new, "t", "--body", "x")
    assert r.returncode == 0, r.stderr
    assert f"created a new store at {new}" in r.stderr
    r = strata_cmd("put", new, "t", "--body", "y")              # it exists now: said once
    assert r.returncode == 0 and "created" not in r.stderr, r.stderr


def test_put_keeps_the_store_geometry(tmp_path):
    make_store(tmp_path / "s", n=1)
    for extra in ((), ("--sync",)):
        r = strata_cmd("put", tmp_path / "s", "t", "--body", "x", *extra)
        assert r.returncode == 0, r.stderr
        assert stored_geometry(tmp_path / "s")["segment_size"] == 64 * KiB
    with strata.open(tmp_path / "s", readonly=True) as store:
        assert [m.body for m in store.scan()][-2:] == [b"x", b"x"]


# --------------------------------------------------------------------------- demo


def test_demo_stamps_born_times_and_shows_the_plain_batch_rate_beside_its_own(tmp_path):
    out = io.StringIO()
    before = time.time_ns() // 1_000_000
    ok = run_demo(str(tmp_path / "d"), 600, 128, Console(file=out, width=400), spark=False,
                  config=small_config())
    shown = out.getvalue()
    assert ok, shown
    assert "append, rich messages" in shown and "append, plain messages" in shown
    assert "column-by-column" in shown and "a batch at a time" in shown
    assert shown.count("msg/s") >= 2
    assert re.search(r"rich ÷ plain rate: \d+\.\d\d \(goal >= 0\.5: (met|NOT met)", shown)
    with strata.open(tmp_path / "d", readonly=True) as store:
        msgs = list(store.scan())
        rich = [m for m in msgs if m.topic != "plain"]
        plain = [m for m in msgs if m.topic == "plain"]
    assert len(rich) == len(plain) == 600
    assert [m.body for m in plain] == [m.body for m in rich]
    assert all(m.born_timestamp >= before for m in rich)
    # the plain messages give no born time: each is born at its put
    assert all(m.born_timestamp == m.store_timestamp >= before for m in plain)


def test_stat_shows_disk_use_and_apparent_size_and_info_human_units(tmp_path):
    """Issue 26.5: the sparse files' apparent sizes are not disk use; both are shown, in
    binary units, and the JSON's disk_bytes is what the blocks take (du), not ls -l."""
    path = tmp_path / "s"
    with strata.open(path, small_store_config()) as store:
        store.put_batch([strata.Message("t", b"x" * 1000) for _ in range(10)])
    doc = json.loads(strata_cmd("stat", "--json", path).stdout)
    files = [p for p in (path / "commitlog").rglob("*") if p.is_file()]
    assert doc["disk_bytes"]["commitlog"] == sum(p.stat().st_blocks * 512 for p in files)
    assert doc["apparent_bytes"]["commitlog"] == sum(p.stat().st_size for p in files)
    r = strata_cmd("stat", path)
    assert r.returncode == 0 and "disk used: commitlog" in r.stdout and "sparse" in r.stdout
    r = strata_cmd("info", path)
    assert r.returncode == 0 and "64.0 KiB" in r.stdout, r.stdout


def test_a_binary_body_is_shown_as_marked_hex(tmp_path):
    """Issue 26.7: a body that is not UTF-8 is printed as hex and says so."""
    path = tmp_path / "s"
    with strata.open(path, small_store_config()) as store:
        store.put(strata.Message("t", b"\xff\x00", queue_id=0))
        store.put(strata.Message("t", b"text", queue_id=0))
    lines = [json.loads(x) for x in strata_cmd("get", path, "t", "0", "0").stdout.splitlines()]
    assert [(d["body"], d["body_encoding"]) for d in lines] == [("ff00", "hex"),
                                                                ("text", "utf-8")]
