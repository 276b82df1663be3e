"""Where the Kafka listener's Fetch reads run: off the event loop, on a small pool of
threads, in one lane per connection.

A Fetch's store read can take long (a cold segment, a tiered segment fetched from S3). On
one shared thread such a read held every consumer of the process; here it holds its own
connection only:

* a connection's reads run one at a time, in the order they were asked (its answers come
  back in order, its read ahead never overtakes the read before it), so one connection
  never holds more than one thread;
* different connections' reads run side by side on up to ``threads`` threads (the store's
  reads are safe from many threads: the gRPC listener's group workers read beside them).

So a read that waits stops other connections only once ``threads`` connections wait at
once. The lanes' bookkeeping runs on the event loop (no lock): a read's completion comes
back to the loop as the executor's future does, which starts the lane's next read.
"""

from __future__ import annotations

import asyncio
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Hashable

READ_THREADS = 4          # connections whose reads can wait at once before others wait too


class ReadLanes:
    """Calls run on a shared pool of ``threads`` threads, one at a time per lane, in order."""

    def __init__(self, threads: int = READ_THREADS, name: str = "kafka-read") -> None:
        if threads < 1:
            raise ValueError(f"ReadLanes needs at least one thread, got {threads}")
        self.threads = threads
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix=name)
        # per lane with a call running: the calls waiting behind it
        self._lanes: dict[Hashable, deque] = {}

    def run(self, lane: Hashable, fn: Callable[..., Any], *args: Any) -> asyncio.Future:
        """``fn(*args)`` on a pool thread once ``lane``'s earlier calls are done; a future
        of its result on the running loop. Cancelling it before it starts skips the call;
        after, its result is dropped."""
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        waiting = self._lanes.get(lane)
        if waiting is None:
            self._lanes[lane] = deque()
            self._start(loop, lane, fn, args, fut)
        else:
            waiting.append((fn, args, fut))
        return fut

    def busy(self) -> int:
        """Lanes with a call running (for tests and metrics)."""
        return len(self._lanes)

    def _start(self, loop: asyncio.AbstractEventLoop, lane: Hashable, fn: Callable,
               args: tuple, fut: asyncio.Future) -> None:
        try:
            work = loop.run_in_executor(self._pool, fn, *args)
        except RuntimeError as exc:           # the pool is shut down: the listener stops
            waiting = self._lanes.pop(lane, None) or ()
            for f in (fut, *(w[2] for w in waiting)):
                if not f.done():
                    f.set_exception(exc)
            return
        work.add_done_callback(lambda w: self._done(loop, lane, w, fut))

    def _done(self, loop: asyncio.AbstractEventLoop, lane: Hashable, work: asyncio.Future,
              fut: asyncio.Future) -> None:
        """On the loop: hand the call's outcome over, then start the lane's next call."""
        if not fut.done():
            if work.cancelled():
                fut.cancel()
            elif work.exception() is not None:
                fut.set_exception(work.exception())
            else:
                fut.set_result(work.result())
        waiting = self._lanes.get(lane)
        while waiting:
            fn, args, nxt = waiting.popleft()
            if not nxt.done():               # not cancelled while it waited
                self._start(loop, lane, fn, args, nxt)
                return
        self._lanes.pop(lane, None)

    def shutdown(self) -> None:
        """Stop: calls not started are cancelled, running ones finished."""
        self._pool.shutdown(wait=True, cancel_futures=True)
