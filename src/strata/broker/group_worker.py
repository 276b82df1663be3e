"""The consumer groups' work off the event loop: one thread runs every operation on the
groups' deliveries (pops with the store reads they make, acks, invisible-time changes,
renewals, releases, an operator's reset) one after another, in the order they were asked.

Why a thread: a pop reads the store, and a store read can reach S3 through the tier; a
group change appends to the groups journal, whose writer may wait for an fsync under way. On
the event loop either would hold every other client's call (routes, heartbeats, sends) for
as long. Why one: the groups' state is changed by one thread at a time, so two receives of a
group never pick the same message and an ack never races the pop it acknowledges.

Calls asked while the thread is busy go over together: one hop to the thread and one back
for the whole batch, not one per call (a hop hands the GIL over twice). A short change that
reads nothing from the store (an ack: one journal append) runs at once on the event loop
when the worker is idle (``run_light``) — nothing can run beside it then, and a hop would
cost more than the change — and queues behind the worker's work when it is not.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")
Job = tuple[Callable[[], Any], asyncio.Future]


def _run_all(jobs: list[Job]) -> list[tuple[bool, Any]]:
    """On the worker thread: each job's (True, result) or (False, exception)."""
    out: list[tuple[bool, Any]] = []
    for fn, _fut in jobs:
        try:
            out.append((True, fn()))
        except BaseException as exc:      # noqa: BLE001 - handed to its caller
            out.append((False, exc))
    return out


class GroupWorker:
    """One thread for the consumer groups' operations (used from one event loop); the held
    messages' journal writer (``strata.broker.held``) is another of its kind."""

    def __init__(self, name: str = "strata-groups", what: str = "consumer-group") -> None:
        self._executor = ThreadPoolExecutor(1, thread_name_prefix=name)
        self._what = what       # whose operations (for the log)
        self._pending: list[Job] = []
        self._drainer: asyncio.Task | None = None
        self.batches = 0        # hops to the thread
        self.calls = 0          # operations run there
        self.inline = 0         # light operations run on the loop (the worker idle)

    def submit(self, fn: Callable[..., T], *args: Any) -> asyncio.Future:
        """Queue ``fn(*args)``; the future of its result. For callers that cannot wait (a
        stream's cleanup): a failure is logged if nobody asks for it."""
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._pending.append(((lambda: fn(*args)) if args else fn, fut))
        if self._drainer is None or self._drainer.done():
            self._drainer = loop.create_task(self._drain())
        return fut

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the worker thread, after every call asked before it."""
        return await self.submit(fn, *args)

    @property
    def idle(self) -> bool:
        """Nothing queued or running on the thread."""
        return not self._pending and (self._drainer is None or self._drainer.done())

    async def run_light(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` — short, no store read — right here if the worker is idle, else on
        its thread after what is asked before it (the same order either way)."""
        if self.idle:
            self.inline += 1
            return fn(*args)
        return await self.submit(fn, *args)

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        while self._pending:
            jobs, self._pending = self._pending, []
            self.batches += 1
            self.calls += len(jobs)
            try:
                results = await loop.run_in_executor(self._executor, _run_all, jobs)
            except BaseException as exc:   # the executor is shut down (the server stops)
                for _fn, fut in jobs:
                    if not fut.done():
                        fut.set_exception(exc if isinstance(exc, Exception)
                                          else RuntimeError("group worker stopped"))
                if not isinstance(exc, Exception):
                    raise
                continue
            for (_fn, fut), (ok, value) in zip(jobs, results):
                if fut.done():                # its caller was cancelled meanwhile
                    if not ok:
                        log.error("a %s operation failed after its caller left: %s",
                                  self._what, value)
                    continue
                if ok:
                    fut.set_result(value)
                else:
                    fut.set_exception(value)

    async def close(self) -> None:
        """Finish what was asked, then stop the thread."""
        while self._drainer is not None and not self._drainer.done():
            await asyncio.shield(self._drainer)
        self.shutdown()

    def shutdown(self) -> None:
        """Stop the thread (after its running batch; off any event loop)."""
        self._executor.shutdown(wait=True)
