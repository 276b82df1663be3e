"""Shared fixtures for the whole suite. Keep them small and generic; layer-specific helpers
belong in the test module (or a conftest.py in that layer's folder)."""

from __future__ import annotations

import hashlib
import signal
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

import strata

KiB = 1 << 10
MiB = 1 << 20

SMALL_SEGMENT = 64 * KiB


def body_for(seq: int, size: int = 100) -> bytes:
    """A deterministic body for sequence number ``seq``: tests recompute it to check integrity."""
    seed = hashlib.blake2b(seq.to_bytes(8, "little"), digest_size=16).digest()
    return (seed * (size // len(seed) + 1))[:size]


def body_source(base: int, step: int, spread: int, digest: int) -> str:
    """Python source defining ``body_of(seq)``: a deterministic body of
    ``base + seq * step % spread`` bytes. Crash tests prepend it to their child process's
    script and run it in the parent too (``shared_code``), so both compute the same bodies."""
    return f'''
import hashlib

def body_of(seq):
    size = {base} + (seq * {step}) % {spread}
    seed = hashlib.blake2b(seq.to_bytes(8, "little"), digest_size={digest}).digest()
    return (seed * (size // {digest} + 1))[:size]
'''


def shared_code(src: str) -> dict:
    """The names ``src`` defines, run in this process."""
    ns: dict = {}
    exec(src, ns)
    return ns


def make_message(seq: int = 0, *, topic: str = "t", size: int = 100, **kw) -> strata.Message:
    """A message whose body is ``body_for(seq, size)`` and whose key is ``k<seq>``."""
    kw.setdefault("keys", (f"k{seq}",))
    return strata.Message(topic, body_for(seq, size), **kw)


@pytest.fixture(scope="session")
def spark():
    """One local[2] SparkSession for every test marked ``spark`` (tests/spark, tests/docs)."""
    from strata.spark.jobs import spark_session  # checks Java first: a clear error without it
    s = spark_session("local[2]", "strata-tests")
    s.conf.set("spark.sql.shuffle.partitions", "2")
    yield s
    s.stop()


@pytest.fixture
def tmp_store_dir(tmp_path: Path) -> Path:
    """A path where a store may be created (the directory does not exist yet)."""
    return tmp_path / "store"


def small_store_config(**overrides) -> strata.StoreConfig:
    """64 KiB segments, small consume-queue and key-index files, no page pre-faulting:
    many segments from few messages, and a store that opens fast."""
    kw = dict(segment_size=SMALL_SEGMENT, prefault=False, consume_queue_units=4096,
              index_slots=1024, index_entries=8192)
    kw.update(overrides)
    return strata.StoreConfig(**kw)


@pytest.fixture
def small_config() -> strata.StoreConfig:
    return small_store_config()


def expect_line(proc: subprocess.Popen, want: bytes) -> None:
    """Read the child's next stdout line; it must be ``want`` (else show its stderr)."""
    line = proc.stdout.readline()
    assert line.strip() == want, proc.stderr.read().decode()


def run_and_sigkill(args: list[str], pick_moment: Callable[[subprocess.Popen], None]) -> None:
    """Run ``python args...``, let ``pick_moment(proc)`` wait for the moment to strike, then
    SIGKILL the child; it must not have ended on its own (its stderr is shown if it did)."""
    proc = subprocess.Popen([sys.executable, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        pick_moment(proc)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
        proc.stdout.close()
        err = proc.stderr.read().decode()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL, f"child ended on its own: {err}"


class StrataProcess:
    """A `strata` command running as its own process (``strata serve``, ``strata console``):
    started, read until its start line, stopped with a signal; its stderr kept in ``lines``.
    The broker, Kafka and console test supports build on it."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.lines: list[str] = []

    def _spawn(self, cmd: list[str], pattern: str, seconds: float, what: str):
        """Start ``cmd`` and read its stderr until a line matches ``pattern``; the match."""
        import re
        import time
        self.proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                     text=True)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                raise RuntimeError(f"{what} exited: {''.join(self.lines)}")
            self.lines.append(line)
            m = re.search(pattern, line)
            if m:
                return m
        raise RuntimeError(f"{what} did not start in {seconds:g} s: {''.join(self.lines)}")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20) -> int:
        """Stop with ``sig``; returns the exit code and keeps the remaining log lines."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(sig)
        try:
            _, rest = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, rest = self.proc.communicate()
        self.lines.append(rest or "")
        if self.proc.returncode != 0 and sig in (signal.SIGTERM, signal.SIGINT):
            # a graceful stop that did not end with 0: its last log lines in the test's
            # captured stderr (pytest shows them with the failure)
            print(f"{' '.join(map(str, self.proc.args[:4]))}... ended with "
                  f"{self.proc.returncode} on {signal.Signals(sig).name}; its log ends:\n"
                  f"{''.join(self.lines)[-6000:]}", file=sys.stderr)
        return self.proc.returncode

    @property
    def log(self) -> str:
        return "".join(self.lines)


def run_strata(args: list[str], *, timeout: float = 120, env: dict | None = None,
               ) -> subprocess.CompletedProcess:
    """``strata ARGS...`` as its own process (text output captured). If it outlives
    ``timeout`` (a hang: the bound is generous and decides nothing else), its threads' stacks
    are dumped (faulthandler, on SIGABRT) into the AssertionError, so the hang can be found."""
    cmd = [sys.executable, "-X", "faulthandler", "-m", "strata.cli.main", *map(str, args)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)
        try:
            out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        raise AssertionError(f"strata {' '.join(map(str, args))} still ran after {timeout:g} s; "
                             f"its stacks and output:\n{err[-12000:]}\n{out[-2000:]}") from None
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def tree_digest(root: Path) -> dict[str, str]:
    """Every file under ``root`` (relative path -> blake2b of its bytes): a refused command
    or call must leave it equal, byte for byte."""
    return {str(p.relative_to(root)): hashlib.blake2b(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}
