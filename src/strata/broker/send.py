"""Group commit across clients: the sends that arrive while the store is busy with a put go
into the next ``put_batch`` together, so under ``--flush sync`` one fsync covers them all.
Each send is answered only when its batch is stored as the flush mode counts it.

Puts start at most once per gather interval (``--gather-ms``, 2 ms by default): after a quiet
spell the first send is put at once; under load the sends that arrive meanwhile share the
next put. Every put wakes the store's dispatch thread, and handing the GIL to it and back
cost about as much as the rest of a one-message send (bench/README.md), so fewer, larger puts
are what keeps the broker's CPU per message down.

``put_soon`` (the Kafka listener's async-flush Produce) stores on the writer thread as well,
never on the event loop: requests arriving while the thread stores share its next put, and
their answers go back to the loop in one hop per put.
"""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Sequence, Union

from strata.errors import InvalidInputError
from strata.store.message import ColumnBatch, Message, PutResult
from strata.store.message_store import MessageStore


GATHER_S = 0.002

Item = Union[list[Message], ColumnBatch]


class SendBatcher:
    """Runs on the server's event loop; puts run on one writer thread.

    A submission is a list of items, each a list of ``Message`` (``submit``) or a
    ``ColumnBatch`` (``submit_many``: a Kafka produce's partitions as columns, no Message
    object per record). Everything gathered goes to the store in ONE ``put_many``, so under
    sync flush one fsync covers every request and connection that arrived together."""

    def __init__(self, store: MessageStore, gather_s: float = GATHER_S) -> None:
        self.store = store
        self.gather_s = gather_s
        self._last_put = float("-inf")     # loop time the last put started
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="strata-put")
        self._pending: list[tuple[list[Item], asyncio.Future]] = []
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        # put_soon's requests for the writer thread, and whether it is draining them
        self._soon: list[tuple[list[Item], asyncio.Future]] = []
        self._soon_lock = threading.Lock()
        self._soon_running = False
        self._open: set[asyncio.Future] = set()   # every submission not yet answered
        self.batches = 0       # put_many calls (under sync flush: at most one fsync each)
        self.messages = 0      # messages stored through them
        # called after each put with (messages, seconds it took): the metrics
        self.on_stored: Callable[[int, float], None] | None = None

    def start(self) -> None:
        self._wake = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def submit(self, msgs: list[Message]) -> Sequence[PutResult]:
        """Store ``msgs``; their results once stored (raises what put_batch raises)."""
        (out,) = await self.submit_many([msgs])
        if isinstance(out, BaseException):
            raise out
        return out

    async def submit_many(self, items: list[Item]) -> list:
        """Store ``items`` (lists of messages or ``ColumnBatch``es) with the next gathered
        put; per item its ``PutResults`` or the ``InvalidInputError`` that refused it (the
        other items are stored). A store-level failure (closed, disk full) raises."""
        fut = self._opened(asyncio.get_running_loop())
        self._pending.append((items, fut))
        self._wake.set()
        return await fut

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            loop = asyncio.get_running_loop()
            while self._pending:
                # let the sends already received (and those of the gather interval) join
                await asyncio.sleep(max(0.0, self._last_put + self.gather_s - loop.time()))
                self._last_put = loop.time()
                batch, self._pending = self._pending, []
                try:
                    answers = await self._store([items for items, _f in batch])
                except Exception as exc:  # noqa: BLE001 - handed to every waiting send
                    _fail_all(batch, exc)
                    continue
                for (_items, fut), answer in zip(batch, answers):
                    if not fut.done():
                        fut.set_result(answer)

    async def _store(self, subs: list[list[Item]]) -> list[list]:
        """``_store_now`` on the writer thread: off the event loop in every flush mode (a sync
        put waits for its fsync, and even an async one can block in the kernel's dirty-page
        throttling), one hop per gathered put; counted once it is back."""
        began = time.perf_counter()
        loop = asyncio.get_running_loop()
        answers, puts = await loop.run_in_executor(self._executor, self._store_now, subs)
        self._count(answers, time.perf_counter() - began, puts)
        return answers

    async def put_soon(self, items: list[Item]) -> list:
        """Async flush only: store ``items`` on the writer thread, off the event loop (the loop
        goes on reading and decoding the next requests meanwhile); per item its
        ``PutResults`` or the ``InvalidInputError`` that refused it, as ``submit_many``.

        No hop per request: a request that arrives while the thread is storing others waits
        for the thread's next ``put_many``, which takes every such request at once (merged as
        gathered puts are), and the thread hands all their answers back to the loop with ONE
        ``call_soon_threadsafe``. Only a request that finds the thread idle starts it."""
        loop = asyncio.get_running_loop()
        fut = self._opened(loop)
        with self._soon_lock:
            self._soon.append((items, fut))
            start = not self._soon_running
            self._soon_running = True
        if start:
            self._executor.submit(self._drain_soon, loop)
        return await fut

    def _drain_soon(self, loop: asyncio.AbstractEventLoop) -> None:
        """The writer thread: store what ``put_soon`` queued, in turns, until none is left."""
        while True:
            with self._soon_lock:
                batch, self._soon = self._soon, []
                if not batch:
                    self._soon_running = False
                    return
            began = time.perf_counter()
            try:
                answers, puts = self._store_now([items for items, _f in batch])
            except BaseException as exc:  # noqa: BLE001 - handed to every waiting request
                loop.call_soon_threadsafe(_fail_all, batch, exc)
                continue
            loop.call_soon_threadsafe(self._answer_all, batch, answers,
                                      time.perf_counter() - began, puts)

    def _answer_all(self, batch: list, answers: list[list], took: float, puts: int) -> None:
        """On the loop: the answers of one of the writer thread's puts."""
        for (_items, fut), answer in zip(batch, answers):
            if not fut.done():
                fut.set_result(answer)
        self._count(answers, took, puts)

    def _count(self, answers: list[list], took: float, puts: int) -> None:
        """``puts`` put_many calls that took ``took`` seconds and gave ``answers``: their
        stored messages counted, and told to the metrics."""
        n = sum(len(r) for answer in answers for r in answer if not isinstance(r, BaseException))
        self.batches += puts
        self.messages += n
        if self.on_stored is not None:
            self.on_stored(n, took)

    def _store_now(self, subs: list[list[Item]]) -> tuple[list[list], int]:
        """Put every item of the submissions ``subs`` with one ``put_many``, on the calling
        thread; per submission the answers of its items, and how many put_many calls it took.
        Neighbouring message lists go to the store as ONE list (one prepared batch: what the
        per-message RocketMQ sends need to stay cheap); if the store refuses such a merged list
        as bad input, each of its parts is put alone, so a bad message fails its own send only."""
        flat, where, parts = _merge(subs)
        results = self.store.put_many(flat)
        puts = 1
        alone: dict[tuple[int, int], object] = {}
        for k, lists in parts.items():
            if isinstance(results[k], InvalidInputError) and len(lists) > 1:
                _alone(alone, k, lists, self.store.put_many(lists))
                puts += 1
        return _split(where, results, alone), puts

    def _opened(self, loop: asyncio.AbstractEventLoop) -> asyncio.Future:
        """A submission's answer future, kept in ``_open`` until it is answered."""
        fut = loop.create_future()
        self._open.add(fut)
        fut.add_done_callback(self._open.discard)
        return fut

    async def close(self) -> None:
        """Finish every submitted send (woken as their answers arrive), then stop."""
        while self._open:
            await asyncio.wait(list(self._open))
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        # the writer thread only has its last empty-queue check left: joined off the loop
        await asyncio.to_thread(self._executor.shutdown, wait=True)


def _fail_all(batch: list, exc: BaseException) -> None:
    """Every waiting submission of ``batch`` fails with ``exc``."""
    for _items, fut in batch:
        if not fut.done():
            fut.set_exception(exc)


def _merge(subs: list[list[Item]]):
    """The store items for submissions ``subs``: neighbouring message lists joined into one.
    Returns (items, per submission per item (item index, start, count; start -1 for a
    ColumnBatch), {item index: the message lists joined in it})."""
    flat: list[Item] = []
    where: list[list[tuple[int, int, int]]] = []
    merged: list[Message] | None = None
    parts: dict[int, list[list[Message]]] = {}
    for items in subs:
        w = []
        for it in items:
            if isinstance(it, ColumnBatch):
                flat.append(it)
                merged = None
                w.append((len(flat) - 1, -1, 0))
            else:
                if merged is None:
                    merged = []
                    flat.append(merged)
                k = len(flat) - 1
                parts.setdefault(k, []).append(it)
                w.append((k, len(merged), len(it)))
                merged.extend(it)
        where.append(w)
    return flat, where, parts


def _alone(alone: dict, k: int, lists: list[list[Message]], own: list) -> None:
    """Record the answers of the parts of refused merged item ``k``, each put alone."""
    start = 0
    for lst, r in zip(lists, own):
        alone[(k, start)] = r
        start += len(lst)


def _split(where, results: list, alone: dict) -> list[list]:
    """Per submission, the answer of each of its items."""
    answers = []
    for w in where:
        a = []
        for k, start, n in w:
            r = results[k]
            if start < 0:                   # a ColumnBatch: its own answer
                a.append(r)
            elif (k, start) in alone:       # part of a refused merge, put alone
                a.append(alone[(k, start)])
            elif isinstance(r, BaseException):
                a.append(r)
            else:
                a.append(r[start:start + n])
        answers.append(a)
    return answers
