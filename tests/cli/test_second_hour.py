"""What tripped a new user in their second hour (docs/guide.md), each fixed and kept so:
negative offsets and counts refused by the option parser, a closed pipe ends a command
quietly, a full disk's line has no ``[Errno 28]`` noise and says what to do, and a store
opened twice in one process says so instead of blaming "another process"."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import strata
from strata.cli.main import _strata_error_line
from strata.errors import DiskFullError, StoreLockedError

from support import run_strata, small_store_config, tree_digest


def flip(store: Path, offset: int, at: int) -> None:
    """Flip one bit of byte ``at`` of the record at commit-log ``offset`` (docs/format.md: a
    segment is named by its first offset; its data follows a 4 KiB header page)."""
    seg = max((p for p in (store / "commitlog").iterdir() if p.name.isdigit()
               and int(p.name) <= offset), key=lambda p: int(p.name))
    with open(seg, "r+b") as f:
        f.seek(4096 + offset - int(seg.name) + at)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0x40]))


@pytest.fixture
def store_dir(tmp_path) -> Path:
    path = tmp_path / "s"
    with strata.open(path, small_store_config()) as store:
        store.create_topic("t", queues=2)
        store.put_batch([strata.Message("t", b"m%04d" % i + b"." * 200, keys=[f"k{i}"])
                         for i in range(3000)])
    return path


@pytest.mark.parametrize("args, named", [
    (["scan", "{d}", "--from-offset", "-1"], "--from-offset"),
    (["scan", "{d}", "--limit", "-3"], "--limit"),
    (["get", "{d}", "t", "0", "0", "-n", "0"], "--max-messages"),
    (["get", "{d}", "t", "0", "--", "-4"], "OFFSET"),
    (["query", "{d}", "t", "k1", "-n", "0"], "--max-results"),
    (["query", "{d}", "t", "k1", "--begin-ms", "-5"], "--begin-ms"),
])
def test_a_negative_offset_or_count_is_refused_naming_the_option(store_dir, args, named):
    before = tree_digest(store_dir)
    r = run_strata([a.format(d=store_dir) for a in args])
    assert r.returncode == 2, r.stderr                   # a usage error, before any read
    assert "Traceback" not in r.stderr
    assert named in r.stderr and "not in the range" in r.stderr, r.stderr
    assert r.stdout == ""
    assert tree_digest(store_dir) == before


def test_a_reader_that_goes_away_ends_the_command_without_a_word(store_dir):
    """``strata get DIR t 0 0 -n 1500 | head -1``: once the pipe closes the command stops,
    exit 0 with nothing on stderr, as ``scan`` does (``get`` printed ``Error: BrokenPipeError:
    Broken pipe``)."""
    proc = subprocess.Popen([sys.executable, "-m", "strata.cli.main", "get", str(store_dir),
                             "t", "0", "0", "-n", "1500"],       # far more than a pipe holds
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = proc.stdout.readline()
    proc.stdout.close()                                   # as head does after its line
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 0
    assert b'"queue_offset": 0' in first
    assert stderr == "", stderr


def test_a_full_disk_line_says_what_and_what_to_do_without_the_errno_prefix():
    exc = DiskFullError(errno.ENOSPC, "no space left to reserve 4096 bytes of d/commitlog/0")
    line = _strata_error_line(exc)
    assert line.startswith("DiskFullError: no space left to reserve 4096 bytes of d/commitlog/0")
    assert "[Errno" not in line
    assert "free space" in line and "strata topics delete" in line


def test_opening_a_store_twice_in_one_process_says_so_and_changes_nothing(store_dir):
    with strata.open(store_dir) as store:
        before = tree_digest(store_dir)
        with pytest.raises(StoreLockedError) as info:
            strata.open(store_dir)
        message = str(info.value)
        assert f"already open for writing in this process (pid {os.getpid()})" in message
        assert "another process" not in message
        assert tree_digest(store_dir) == before
        assert store.get("t", 0, 0).status is strata.GetStatus.FOUND   # the first one works


def test_a_store_held_by_another_process_still_names_that_process(store_dir):
    child = subprocess.Popen(
        [sys.executable, "-c", "import strata, sys; s = strata.open(sys.argv[1]); "
         "print('open', flush=True); sys.stdin.read()", str(store_dir)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "open\n"
        with pytest.raises(StoreLockedError) as info:
            strata.open(store_dir)
        assert f"by another process (pid {child.pid})" in str(info.value)
        assert "in this process" not in str(info.value)
    finally:
        child.stdin.close()
        child.wait(timeout=60)


def test_verify_prints_each_problem_on_one_line_however_narrow_the_output(store_dir):
    """``strata verify DIR 2> problems.txt`` (or ``| grep``) gets one line per problem: the
    lines were wrapped at 80 columns, so a grep for the kind missed the detail."""
    with strata.open(store_dir, readonly=True) as store:
        m = store.get("t", 0, 5).messages[0]
    flip(store_dir, m.commitlog_offset, m.size - 20)     # a body byte: its CRC fails
    before = tree_digest(store_dir)
    r = subprocess.run([sys.executable, "-m", "strata.cli.main", "verify", str(store_dir)],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120,
                       env=dict(os.environ, COLUMNS="40"))
    assert r.returncode == 1 and "Traceback" not in r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert lines and all(ln.startswith("CORRUPT ") for ln in lines), r.stderr
    assert any(f"offset {m.commitlog_offset}: crc-mismatch: CRC32C mismatch" in ln
               and "passed over" in ln for ln in lines), r.stderr
    assert tree_digest(store_dir) == before


def test_verify_names_a_damaged_record_once_not_as_index_problems_of_its_noise(store_dir):
    """A bit flipped in a record's queue-offset field (record bytes 20-27): verify named the
    record's CRC mismatch, then checked the units by the damaged fields and listed a unit
    "missing" at queue offset 2**54 + 5 in a consume-queue file that never was, and the
    record's own (sound) unit as a mismatch. The record is the one problem."""
    with strata.open(store_dir, readonly=True) as store:
        m = store.get("t", 1, 5).messages[0]
    flip(store_dir, m.commitlog_offset, 26)
    r = run_strata(["verify", store_dir])
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert summary["index_problems"] == 0, r.stderr
    assert any(f"offset {m.commitlog_offset}: crc-mismatch" in ln for ln in lines)
    # the record, and its sealed segment's footer CRC: commit-log problems only
    assert all(ln.startswith("CORRUPT commitlog/") for ln in lines), r.stderr
    with strata.open(store_dir, readonly=True) as store:     # the damaged record: passed over
        got = store.get("t", 1, 5, max_messages=2)
        assert [c.queue_offset for c in got.corrupt] == [5]
        assert [x.queue_offset for x in got.messages] == [6]


@pytest.mark.parametrize("typo, meant", [("subscibe", "subscribe"), ("SubscribePatern",
                                         "subscribePattern"), ("asign", "assign")])
def test_a_misspelt_spark_topic_option_is_named_with_what_was_meant(typo, meant):
    """``.option("subscibe", "orders")``: Spark hands the source every option, so the typo
    was silent and the error said only "got none" (strata.spark.options, the read's first
    step: source.py's schema() calls it)."""
    from strata.spark.options import OptionError, parse_read_options
    with pytest.raises(OptionError) as info:
        parse_read_options({"path": "./shop", typo: "orders"})
    assert f"option {typo!r} is not one: did you mean {meant!r}?" in str(info.value)
    with pytest.raises(OptionError) as info:                 # nothing near: no guess
        parse_read_options({"path": "./shop", "topic": "orders"})
    assert "did you mean" not in str(info.value)


def test_a_full_memory_file_system_says_why_a_first_segment_does_not_fit(tmp_path):
    """On tmpfs every file is reserved whole (FileOps.holes_are_safe), so a 1 GiB segment
    does not fit a small tmpfs: the DiskFullError says so and what fits, instead of only "no
    space left to create ... (1073750016 bytes)" for a store holding nothing. The FileOps
    seam stands in for the file system: holes unsafe (tmpfs), and fallocate short of room."""
    from strata.files.io import FileOps

    class SmallTmpfs(FileOps):
        def holes_are_safe(self, directory):
            return False

        def fallocate(self, fd, offset, length, path):
            if length > 1 << 20:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            super().fallocate(fd, offset, length, path)

    with pytest.raises(DiskFullError) as info:
        SmallTmpfs().create_preallocated(tmp_path / "seg.alloc", 8 << 20)
    text = str(info.value)
    assert "no space left to create" in text and "memory file system" in text
    assert "segment_size" in text
    assert not (tmp_path / "seg.alloc").exists()              # nothing left behind
    fd = FileOps().create_preallocated(tmp_path / "ok", 4096)  # a disk with room: no change
    os.close(fd)


def serve_start_line(store: Path) -> str:
    """``strata serve STORE --kafka 127.0.0.1:0``'s start line; then a clean stop."""
    proc = subprocess.Popen([sys.executable, "-m", "strata.cli.main", "serve", str(store),
                             "--kafka", "127.0.0.1:0", "--exit-with-parent"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        for line in proc.stderr:
            if "listening on" in line or "Error" in line:
                return line
        return ""
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)


def test_serve_says_when_its_directory_held_no_store(tmp_path, store_dir):
    """``strata serve ./shpo`` (a typo) served a new, empty store without a word; ``put`` and
    ``topics create`` said "created a new store" already."""
    line = serve_start_line(tmp_path / "shpo")
    assert "listening on" in line and "a NEW store: there was none" in line, line
    line = serve_start_line(store_dir)
    assert "listening on" in line and "NEW" not in line, line


@pytest.mark.parametrize("option, said", [
    ("segmnet_size=1", "did you mean 'segment_size'?"),
    ("segment_size=big", "segment_size takes an integer"),
    ("prefault=flase", "prefault takes true or false"),       # was read as False, silently
])
def test_a_wrong_store_option_is_refused_with_what_was_meant(tmp_path, option, said):
    r = run_strata(["serve", tmp_path / "s", "--kafka", "127.0.0.1:0", "--store-option", option])
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert said in r.stderr and "--store-option" in r.stderr, r.stderr
    assert not (tmp_path / "s").exists()                       # refused before any store
