"""The Fetch frames' buffer pool (strata.broker.kafka.frame_pool): a buffer is handed out
again only when nothing refers to a frame of it — not the frame, not a memoryview of it, not
an event-loop transport still writing it — and the bytes a slow reader receives are the
bytes written, however many frames are encoded meanwhile."""

from __future__ import annotations

import asyncio
import gc
import threading

import numpy as np
import pytest
import uvloop

from strata.broker.kafka import frame_pool


@pytest.fixture(autouse=True)
def _fresh_pool():
    frame_pool.clear()
    yield
    frame_pool.clear()


def _base(a: np.ndarray) -> np.ndarray:
    return a.base if a.base is not None else a


def test_small_frames_are_not_pooled() -> None:
    a = frame_pool.take(1000)
    assert len(a) == 1000 and a.dtype == np.uint8 and a.base is None
    assert frame_pool.pooled_bytes() == 0


def test_a_frame_in_use_is_never_handed_out_again() -> None:
    size = frame_pool.MIN_POOLED + 5
    a = frame_pool.take(size)
    b = frame_pool.take(size)
    assert len(a) == len(b) == size
    assert not np.shares_memory(a, b)
    view = memoryview(a)                    # what the event loop writes
    del a
    c = frame_pool.take(size)
    assert not np.shares_memory(np.frombuffer(view, np.uint8), c)
    del view, b, c
    gc.collect()
    pooled = frame_pool.pooled_bytes()
    assert pooled == 3 * (1 << (size - 1).bit_length())
    d = frame_pool.take(size)               # every frame gone: pooled buffers again
    e = frame_pool.take(size)
    assert not np.shares_memory(d, e)
    assert frame_pool.pooled_bytes() == pooled


def test_a_free_buffer_is_reused() -> None:
    size = 3 << 20
    a = frame_pool.take(size)
    base = id(_base(a))                     # (a reference would keep it in use)
    a[:] = 7
    del a
    b = frame_pool.take(size - 100)         # the same power-of-two size
    assert id(_base(b)) == base
    assert b[0] == 7                        # the same bytes: not cleared


def test_the_pool_keeps_at_most_its_cap() -> None:
    size = 16 << 20
    frames = [frame_pool.take(size) for _ in range(6)]     # all held at once
    assert frame_pool.pooled_bytes() <= frame_pool.MAX_POOLED_BYTES
    for i, f in enumerate(frames):
        f[:8] = i
    assert [int(f[0]) for f in frames] == list(range(6))   # none shares another's bytes
    for i in range(len(frames)):
        for j in range(i):
            assert not np.shares_memory(frames[i], frames[j])


def test_threads_taking_at_once_never_share_a_buffer() -> None:
    size = frame_pool.MIN_POOLED * 2
    held: list[list[np.ndarray]] = [[] for _ in range(4)]
    start = threading.Barrier(4)

    def work(k: int) -> None:
        start.wait()
        for _ in range(200):
            f = frame_pool.take(size)
            held[k].append(f)
            if len(held[k]) > 3:
                held[k].pop(0)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    alive = [f for h in held for f in h]
    for i in range(len(alive)):
        for j in range(i):
            assert not np.shares_memory(alive[i], alive[j])


def test_a_transport_still_writing_a_frame_keeps_its_buffer() -> None:
    """Frames written to a real socket whose reader is slow: the transport holds what it
    could not send yet; frames encoded meanwhile must not write over it."""
    size = 4 << 20
    frames = 6

    async def run() -> list[bytes]:
        got: list[bytes] = []
        release, done = asyncio.Event(), asyncio.Event()

        async def reader_side(reader, writer):
            await release.wait()            # read nothing until every frame is written
            for _ in range(frames):
                got.append(await reader.readexactly(size))
            done.set()
            writer.close()

        server = await asyncio.start_server(reader_side, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        _r, w = await asyncio.open_connection("127.0.0.1", port)
        for i in range(frames):
            f = frame_pool.take(size)
            f[:] = i + 1
            w.write(memoryview(f))          # as serve_connection writes an answer
            del f
        release.set()
        await w.drain()
        await asyncio.wait_for(done.wait(), 60)
        w.close()
        server.close()
        return got

    got = uvloop.run(run())
    assert [set(g) for g in got] == [{i + 1} for i in range(frames)]
