"""A fault-injecting backend for tests: wraps a real one and fails, hangs or kills the
process on command, counting object writes (as ``strata.testing.faults`` does for files)."""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import dataclass

from strata.tiered.backend import TierBackend
from strata.tiered.errors import TierUnavailableError


@dataclass
class Fault:
    """What happens at write number ``at_put`` (1-based, counted over put and put_if) and,
    with ``times`` > 1, the writes after it: "error" raises TierUnavailableError, "hang"
    sleeps ``hang_s`` and then raises (a timeout), "kill" SIGKILLs this process after writing
    ``partial`` of the object's bytes (``partial`` < 1 leaves nothing, as a real crash
    mid-upload does on a backend with atomic writes)."""

    at_put: int
    mode: str = "error"
    times: int = 1
    hang_s: float = 1.0
    path_contains: str = ""


class FaultyBackend(TierBackend):
    def __init__(self, inner: TierBackend, fault: Fault | None = None) -> None:
        self.inner = inner
        self.url = inner.url
        self.fault = fault
        self.puts = 0
        self.failures = 0
        self._lock = threading.Lock()

    def _due(self, path: str) -> bool:
        """Counts a write of ``path``; whether the fault hits it."""
        f = self.fault
        if f is None or f.path_contains not in path:
            return False
        with self._lock:
            self.puts += 1
            n = self.puts
        return f.at_put <= n < f.at_put + f.times

    def _maybe_fail(self, path: str) -> None:
        if self._due(path):
            self._fail(path)

    def _fail(self, path: str) -> None:
        f = self.fault
        self.failures += 1
        if f.mode == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if f.mode == "hang":
            time.sleep(f.hang_s)
            raise TierUnavailableError(f"tier {self.url}: writing {path}: timed out (injected)")
        raise TierUnavailableError(f"tier {self.url}: writing {path}: 503 (injected)")

    def put(self, path: str, data) -> None:
        self._maybe_fail(path)
        self.inner.put(path, data)

    def put_many(self, items) -> None:
        """Counted object by object: the objects before the one a fault hits are written
        (as ``put`` one by one would leave them), that one and the rest are not."""
        for i, (path, _data) in enumerate(items):
            if self._due(path):
                if i:
                    self.inner.put_many(items[:i])
                self._fail(path)
        self.inner.put_many(items)

    def put_if(self, path: str, data: bytes, expect: str | None) -> str:
        self._maybe_fail(path)
        return self.inner.put_if(path, data, expect)

    def version(self, path: str) -> str | None:
        return self.inner.version(path)

    def read(self, path: str, start: int = 0, length: int | None = None) -> bytes:
        return self.inner.read(path, start, length)

    def size(self, path: str) -> int | None:
        return self.inner.size(path)

    def delete(self, path: str) -> None:
        self.inner.delete(path)

    def list(self, prefix: str = "") -> list[str]:
        return self.inner.list(prefix)

    def clean_partial(self) -> int:
        return self.inner.clean_partial()

    def close(self) -> None:
        self.inner.close()
