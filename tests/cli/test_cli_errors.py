"""Refused input at the ``strata`` command changes nothing on disk, and every error (strata's own
or the operating system's) is one clear line and a non-zero exit, never a traceback."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

import strata
from strata.store.geometry import GEOMETRY_FILE

from support import SMALL_SEGMENT, small_store_config, tree_digest

SMALL = SMALL_SEGMENT


def strata_cmd(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "strata.cli.main", *map(str, args)],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)


def one_error_line(r: subprocess.CompletedProcess) -> str:
    assert r.returncode != 0
    assert "Traceback" not in r.stderr, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    return lines[0]


@pytest.fixture
def small_store(tmp_path) -> Path:
    path = tmp_path / "s"
    with strata.open(path, small_store_config()) as store:
        store.create_topic("t", queues=2)
        store.put(strata.Message("t", b"kept"))
    return path


@pytest.mark.parametrize("args, named", [
    (["../x", "--body", "x"], "topic"),
    (["t", "--body", "x", "--queue", "7"], "queue"),
    (["t", "--body", "x", "--sync", "--queue", "-1"], "queue_id"),
])
def test_a_refused_put_touches_no_file_and_the_store_keeps_its_sizes(small_store, args, named):
    before = tree_digest(small_store)
    r = strata_cmd("put", small_store, *args)
    assert named in one_error_line(r)
    assert tree_digest(small_store) == before            # byte for byte, every file
    with strata.open(small_store) as store:              # config-less: the sizes it was made with
        assert store.config.segment_size == SMALL
        store.put(strata.Message("t", b"y"))
    assert {p.stat().st_size for p in (small_store / "commitlog").iterdir()
            if p.name.isdigit()} == {SMALL + 4096 + 4096}


def test_a_refused_put_creates_no_store(tmp_path):
    r = strata_cmd("put", tmp_path / "new", "../x", "--body", "x")
    assert "topic" in one_error_line(r)
    assert not (tmp_path / "new").exists()


def test_a_config_less_open_never_replaces_the_remembered_geometry(small_store):
    """At the root: a writer's open without a config writes config/geometry.json only when it
    is missing, never over what it remembers (here: sizes no file shows yet)."""
    geometry = small_store / GEOMETRY_FILE
    remembered = geometry.read_bytes()
    with strata.open(small_store, dataclasses.replace(small_store_config(), index_slots=2048)):
        pass                                              # an explicit config is remembered
    assert geometry.read_bytes() != remembered
    changed = geometry.read_bytes()
    for _ in range(2):
        with strata.open(small_store):
            pass
        assert geometry.read_bytes() == changed


def test_an_os_error_is_one_line_without_a_traceback(small_store):
    (small_store / "config" / "topics.json").unlink()
    (small_store / "config" / "topics.json").mkdir()      # reading it fails: IsADirectoryError
    r = strata_cmd("put", small_store, "t", "--body", "x")
    line = one_error_line(r)
    assert "topics.json" in line


@pytest.mark.parametrize("args, named", [
    (["../x"], "topic"),
    (["ok", "--queues", "0"], "queues"),
    (["ok", "--queues", "5000"], "queues"),
    (["t", "--queues", "3"], "exists with 2 queues"),       # the store's t has 2
    (["t", "--type", "fifo"], "accepting normal messages"),
])
def test_a_refused_topics_create_touches_no_file(small_store, args, named):
    """Issue 22.5: the name and count are checked before the store opens, so a refused
    command rewrites no lock, state or checkpoint file."""
    before = tree_digest(small_store)
    r = strata_cmd("topics", "create", small_store, *args)
    assert named in one_error_line(r)
    assert tree_digest(small_store) == before


def test_a_refused_topics_create_creates_no_store(tmp_path):
    r = strata_cmd("topics", "create", tmp_path / "new", "../x")
    assert "topic" in one_error_line(r)
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("option", ["--body", "--tags", "--key"])
def test_a_non_utf8_option_is_one_clear_error_and_touches_no_file(small_store, option):
    """Issue 22.6: ``strata put DIR t --body $'\\xff'`` was a UnicodeEncodeError traceback."""
    before = tree_digest(small_store)
    args = [b"put", bytes(small_store), b"t", b"--body", b"x", option.encode(), b"a\xff"]
    r = subprocess.run([sys.executable.encode(), b"-m", b"strata.cli.main", *args],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    r = subprocess.CompletedProcess(r.args, r.returncode, r.stdout.decode(),
                                    r.stderr.decode("utf-8", "replace"))
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr
    assert f"{option}: is not valid UTF-8 (byte 0xff" in r.stderr
    assert tree_digest(small_store) == before
