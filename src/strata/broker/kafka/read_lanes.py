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
once. A lane's call goes to the least busy thread, the first one on a tie: with one consumer
every read runs on the same thread, as on one shared reader (reads spread over a pool's
threads in turn measured ~25% more broker CPU per consumed message: the encoded answers and
the store's pages stay in one core's cache). A thread is started only when every running
one is busy. The lanes' bookkeeping runs on the event loop (no lock): a read's completion
comes back to the loop as the executor's future does, which starts the lane's next read.
"""

from __future__ import annotations

import asyncio
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Hashable

# connections whose reads can wait at once before others wait too (--kafka-read-threads)
from strata.broker.kafka.defaults import READ_THREADS


class ReadLanes:
    """Calls run on a shared pool of ``threads`` threads, one at a time per lane, in order."""

    def __init__(self, threads: int = READ_THREADS, name: str = "kafka-read") -> None:
        if threads < 1:
            raise ValueError(f"ReadLanes needs at least one thread, got {threads}")
        self.threads = threads
        self._name = name
        self._workers: list[ThreadPoolExecutor] = []     # one thread each, started on need
        self._load: list[int] = []                       # lanes running on each
        self._closed = False
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
        """Lanes with a call running or waiting."""
        return len(self._lanes)

    def _pick(self) -> int:
        """The thread for a lane's next call: the least busy, the first on a tie; a new one
        if every thread is busy and there may be more."""
        load = self._load
        best = min(range(len(load)), key=load.__getitem__, default=-1)
        if best < 0 or (load[best] and len(load) < self.threads):
            self._workers.append(ThreadPoolExecutor(
                1, thread_name_prefix=f"{self._name}-{len(load)}"))
            load.append(0)
            best = len(load) - 1
        return best

    def _start(self, loop: asyncio.AbstractEventLoop, lane: Hashable, fn: Callable,
               args: tuple, fut: asyncio.Future) -> None:
        try:
            if self._closed:
                raise RuntimeError("the Kafka listener's read lanes are shut down")
            w = self._pick()
            work = loop.run_in_executor(self._workers[w], fn, *args)
        except RuntimeError as exc:           # shut down: the listener stops
            waiting = self._lanes.pop(lane, None) or ()
            for f in (fut, *(item[2] for item in waiting)):
                if not f.done():
                    f.set_exception(exc)
            return
        self._load[w] += 1
        work.add_done_callback(lambda done: self._done(loop, lane, w, done, fut))

    def _done(self, loop: asyncio.AbstractEventLoop, lane: Hashable, w: int,
              work: asyncio.Future, fut: asyncio.Future) -> None:
        """On the loop: hand the call's outcome over, then start the lane's next call."""
        self._load[w] -= 1
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
        self._closed = True
        for worker in self._workers:
            worker.shutdown(wait=True, cancel_futures=True)
