"""Both backends behind one interface: whole-object writes, ranged reads, sizes, deletes,
listing, conditional writes, leftovers of interrupted writes."""

from __future__ import annotations

import os

import numpy as np
import pytest

from strata.tiered.errors import TierConflictError, TierUnavailableError
from strata.tiered.posix import PosixBackend

MiB = 1 << 20


def test_objects_round_trip(tier):
    b = tier.backend()
    b.put("a/b/one", b"0123456789")
    b.put("a/two", memoryview(b"xy"))
    b.put("c", b"")
    assert b.read("a/b/one") == b"0123456789"
    assert b.read("a/b/one", 3, 4) == b"3456"
    assert b.read("a/b/one", 8, 100) == b"89"      # fewer bytes only at the end
    assert b.read("a/b/one", 10, 5) == b""
    assert b.size("a/b/one") == 10 and b.size("c") == 0 and b.size("nothing") is None
    assert b.list() == ["a/b/one", "a/two", "c"]
    assert b.list("a/") == ["a/b/one", "a/two"]
    b.put("a/b/one", b"new")                        # replaced whole
    assert b.read("a/b/one") == b"new"
    b.delete("a/b/one")
    b.delete("a/b/one")                             # deleting what is gone is no error
    assert b.size("a/b/one") is None
    with pytest.raises(FileNotFoundError):
        b.read("a/b/one")
    assert b.list() == ["a/two", "c"]


def test_bad_paths_are_refused(tier):
    b = tier.backend()
    for bad in ("", "/abs", "a//b", "a/../b", "./a"):
        with pytest.raises(ValueError, match="bad tier object path"):
            b.put(bad, b"x")
    assert b.list() == []


def test_conditional_writes(tier):
    b = tier.backend()
    v1 = b.put_if("meta/m", b"first", None)
    assert b.version("meta/m") == v1
    with pytest.raises(TierConflictError):      # create-only, but it exists
        b.put_if("meta/m", b"other", None)
    with pytest.raises(TierConflictError):      # replace-only over a version never seen
        b.put_if("meta/m", b"other", "not-a-version")
    assert b.read("meta/m") == b"first"
    v2 = b.put_if("meta/m", b"second", v1)
    assert v2 != v1 and b.read("meta/m") == b"second"
    with pytest.raises(TierConflictError):      # v1 is stale now
        b.put_if("meta/m", b"third", v1)
    assert b.read("meta/m") == b"second"


def test_large_object(tier):
    """Above the threshold the S3 backend uploads in parts (its ETag says how many)."""
    b = tier.backend(multipart_threshold=5 * MiB, part_size=5 * MiB) if tier.kind == "s3" \
        else tier.backend()
    data = os.urandom(11 * MiB + 17)
    b.put("big", data)
    assert b.size("big") == len(data)
    assert b.read("big", 5 * MiB - 3, 10) == data[5 * MiB - 3:5 * MiB + 7]
    assert b.read("big") == data
    if tier.kind == "s3":
        assert b.version("big").strip('"').endswith("-3")   # three parts


def test_leftovers_of_interrupted_writes_are_cleaned(tier):
    b = tier.backend()
    b.put("q/keep", b"k")
    if tier.kind == "posix":
        (b.root / "q" / "half.tmp").write_bytes(b"torn")
    else:
        b.client.create_multipart_upload(Bucket=b.bucket, Key=b._key("q/half"))
    assert b.list() == ["q/keep"]
    assert b.clean_partial() == 1
    assert b.clean_partial() == 0
    assert b.list() == ["q/keep"]
    if tier.kind == "s3":
        assert not b.client.list_multipart_uploads(Bucket=b.bucket).get("Uploads")


def test_unreachable_s3_endpoint_is_a_clear_error(s3_endpoint):
    from tier_helpers import free_port
    from strata.tiered.s3 import S3Backend
    url = f"http://127.0.0.1:{free_port()}"   # nobody listens there
    b = S3Backend("bucket", "p", endpoint_url=url, max_attempts=2, connect_timeout_s=0.5)
    with pytest.raises(TierUnavailableError, match="127.0.0.1"):
        b.put("x", b"1")
    with pytest.raises(TierUnavailableError):
        b.read("x")


def test_missing_bucket_is_named(s3_endpoint):
    from strata.tiered.s3 import S3Backend
    b = S3Backend("no-such-bucket-here", endpoint_url=s3_endpoint, max_attempts=1)
    with pytest.raises(TierUnavailableError, match="no bucket 'no-such-bucket-here'"):
        b.put("x", b"1")


def test_posix_backend_that_cannot_write_says_where(tmp_path):
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(TierUnavailableError, match="cannot create the directory"):
        PosixBackend(tmp_path / "file" / "tier")
    b = PosixBackend(tmp_path / "t")
    (tmp_path / "t" / "a").write_bytes(b"")     # a file where a directory must go
    with pytest.raises(TierUnavailableError, match="a/b"):
        b.put("a/b", b"x")


def test_put_many_writes_every_object_whole(tier):
    """A chunk's objects in one call (the POSIX backend fsyncs them together): each whole,
    replacing what was there, nothing temporary left."""
    b = tier.backend()
    b.put("q/0/x.cq", b"old")
    log = os.urandom(3 * MiB + 5)
    b.put_many([("q/0/x.log", memoryview(log)), ("q/0/x.cq", b"cq"), ("q/1/x.keys", b"")])
    assert b.read("q/0/x.log") == log and b.read("q/0/x.cq") == b"cq"
    assert b.size("q/1/x.keys") == 0
    assert b.list() == ["q/0/x.cq", "q/0/x.log", "q/1/x.keys"]
    assert b.clean_partial() == 0
    b.put_many([("one", b"1")])
    assert b.read("one") == b"1"


def test_put_many_that_fails_leaves_no_object_and_no_temporary_file(tmp_path):
    """A failed fsync: none of the objects is there (nor half of one), the error names the
    object and the old bytes of a replaced object stay."""
    from strata.files.io import FileOps

    class FsyncFails(FileOps):
        def fsync(self, path, fd):
            if path.name.startswith("b"):
                raise OSError(5, "Input/output error")
            os.fsync(fd)

    b = PosixBackend(tmp_path / "t", file_ops=FsyncFails())
    b.put("d/a", b"old")
    with pytest.raises(TierUnavailableError, match="d/b.*Input/output error"):
        b.put_many([("d/a", b"new"), ("d/b", b"x"), ("d/c", b"y")])
    assert b.list() == ["d/a"] and b.read("d/a") == b"old"
    assert sorted(os.listdir(tmp_path / "t" / "d")) == ["a"]


def test_faulty_backend_counts_put_many_object_by_object(tmp_path):
    """The fault layer hits the object it counts to; those before it are written."""
    from strata.testing.tier_faults import Fault, FaultyBackend
    b = FaultyBackend(PosixBackend(tmp_path / "t"), Fault(at_put=2))
    with pytest.raises(TierUnavailableError, match="injected"):
        b.put_many([("x.log", b"l"), ("x.cq", b"c"), ("x.keys", b"k")])
    assert b.list() == ["x.log"] and b.puts == 2


def _opens(monkeypatch, refuse_direct: bool = False) -> list[int]:
    """Flags of every os.open from here on (O_DIRECT ones refused with EINVAL, as tmpfs does,
    when ``refuse_direct``)."""
    import errno
    flags: list[int] = []
    real = os.open

    def spy(path, how, *a, **k):
        flags.append(how)
        if refuse_direct and how & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument", str(path))
        return real(path, how, *a, **k)
    monkeypatch.setattr(os, "open", spy)
    return flags


@pytest.mark.parametrize("size", [MiB, 3 * MiB + 5, 5 * MiB - 4095])
def test_put_many_writes_aligned_objects_with_o_direct_byte_for_byte(tmp_path, monkeypatch,
                                                                      size):
    """A large object in 4 KiB-aligned memory (a chunk's .log buffer) goes to the disk with
    O_DIRECT, its last partial block buffered: the object holds exactly its bytes."""
    from strata.tiered.chunk import aligned_empty
    buf = aligned_empty(size + 100)
    buf[:] = np.frombuffer(os.urandom(len(buf)), np.uint8)
    b = PosixBackend(tmp_path / "t")
    flags = _opens(monkeypatch)
    b.put_many([("q/x.log", memoryview(buf)[:size]), ("q/x.cq", b"cq")])
    assert any(f & os.O_DIRECT for f in flags)
    assert b.read("q/x.log") == buf[:size].tobytes() and b.read("q/x.cq") == b"cq"
    assert b.clean_partial() == 0
    unaligned = memoryview(buf)[1:size + 1]          # not aligned: buffered, same bytes
    flags.clear()
    b.put_many([("q/y.log", unaligned), ("q/y.cq", b"")])
    assert not any(f & os.O_DIRECT for f in flags)
    assert b.read("q/y.log") == bytes(unaligned)


def test_put_many_falls_back_to_buffered_writes_where_o_direct_is_refused(tmp_path,
                                                                          monkeypatch):
    from strata.tiered.chunk import aligned_empty
    buf = aligned_empty(2 * MiB + 7)
    buf[:] = 7
    b = PosixBackend(tmp_path / "t")
    flags = _opens(monkeypatch, refuse_direct=True)
    b.put_many([("x.log", memoryview(buf)), ("x.cq", b"c")])
    assert b.read("x.log") == buf.tobytes() and b.read("x.cq") == b"c"
    n = len(flags)
    b.put_many([("y.log", memoryview(buf)), ("y.cq", b"c")])   # not tried again
    assert not any(f & os.O_DIRECT for f in flags[n:])
    assert b.read("y.log") == buf.tobytes() and b.clean_partial() == 0
