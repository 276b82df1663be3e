"""FIFO consumption order: on a FIFO topic a consumer group has at most one message of each
message group in flight, and a message group's messages go out in queue order.

Per queue and consumer group the in-flight table (``group_state.QueueState``) holds, beside
the deliveries, the messages a pop passed over because their message group was busy
("held": attempt 0). A message group's oldest entry heads it: a delivery still invisible
blocks the group; one whose invisible time is over is delivered again (attempt counted, or
to the dead-letter topic after the last attempt, and the group moves on); a held one is
delivered. Then new messages are read from the pop offset: a message of a group with
anything in flight is held, else delivered. The message group is the record's
``__SHARDINGKEY`` property; a message without one is ordered with nothing.

``QueuePick`` is what one pop of one queue decided, for FIFO and normal topics alike
(``strata.broker.receive`` carries it out).
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field

from strata.broker.properties import PROP_MESSAGE_GROUP
from strata.broker.group_state import ConnectedUntil, QueueState, nobody_connected
from strata.store.message import GetStatus, StoredMessage
from strata.store.message_store import MessageStore

# held-back messages per queue and consumer group: past it a pop reads no further in that
# queue (a message group that stays busy cannot make the broker hold a whole backlog)
MAX_HELD = 1024
SCAN_BATCH = 32
READ_GAP = 4            # offsets this close are read by one get


@dataclass
class QueuePick:
    """What one pop of one queue does: deliver ``picked`` ((offset, attempts so far), with
    their ``messages``), take ``gone`` out of flight, copy ``dead`` (message, attempts) to
    the dead-letter topic, hold back ``held``, and move the pop offset from ``pop_offset``
    to ``new_pop``."""

    pop_offset: int
    new_pop: int = 0
    picked: list[tuple[int, int]] = field(default_factory=list)
    messages: list[StoredMessage] = field(default_factory=list)
    gone: list[int] = field(default_factory=list)
    dead: list[tuple[StoredMessage, int]] = field(default_factory=list)
    held: list[int] = field(default_factory=list)

    def hands_out_nothing(self) -> bool:
        """No delivery, nothing held, the pop offset where it was."""
        return not (self.picked or self.held) and self.new_pop == self.pop_offset


def ordering_key(m: StoredMessage) -> object:
    """The message group of ``m`` (its ``__SHARDINGKEY``), or for a message without one its
    own offset: it is then ordered with nothing."""
    g = m.properties.get(PROP_MESSAGE_GROUP)
    return m.queue_offset if g is None else g


class _GroupIndex:
    """Of one consumer group's queue: message group -> its in-flight offsets, ascending (the
    first is the group's head). Built from the in-flight table once, then extended by each
    pop; offsets acked or forgotten since are dropped when met (not in flight any more)."""

    def __init__(self, state: QueueState | None) -> None:
        self.state = state
        self.groups: dict[object, deque[int]] = {}


class FifoPicker:
    """Picks the deliveries of one queue of a FIFO topic (on the group worker's thread only)."""

    def __init__(self, store: MessageStore) -> None:
        self.store = store
        self._index: dict[tuple[str, str, int], _GroupIndex] = {}

    def _read_many(self, topic: str, q: int, offsets: list[int]) -> dict[int, StoredMessage]:
        """The messages at ``offsets`` (missing: gone), nearby ones read by one get."""
        out: dict[int, StoredMessage] = {}
        want = sorted(offsets)
        i = 0
        while i < len(want):
            j = i
            while j + 1 < len(want) and want[j + 1] - want[j] <= READ_GAP:
                j += 1
            first, last = want[i], want[j]
            r = self.store.get(topic, q, first, last - first + 1)
            if r.found:
                for m in r.messages:
                    out[m.queue_offset] = m
            for off in want[i:j + 1]:
                if off not in out:          # past a get's byte limit: read it alone
                    r = self.store.get(topic, q, off, 1)
                    if r.found and r.messages[0].queue_offset == off:
                        out[off] = r.messages[0]
            i = j + 1
        return out

    def _index_of(self, group: str, topic: str, q: int, qs: QueueState | None,
                  gone: list[int]) -> _GroupIndex:
        ix = self._index.get((group, topic, q))
        if ix is None or ix.state is not qs:
            ix = self._index[(group, topic, q)] = _GroupIndex(qs)
            offsets = sorted(qs.in_flight) if qs is not None else []
            msgs = self._read_many(topic, q, offsets)
            for off in offsets:
                m = msgs.get(off)
                if m is None:
                    gone.append(off)             # removed by retention
                else:
                    ix.groups.setdefault(ordering_key(m), deque()).append(off)
        return ix

    def pick(self, group: str, qs: QueueState | None, topic: str, q: int,
             tags: frozenset[str] | None, need: int, now_ms: int,
             max_attempts: int,
             connected_until: ConnectedUntil = nobody_connected) -> QueuePick:
        pick = QueuePick(qs.pop_offset if qs is not None else self.store.min_offset(topic, q))
        ix = self._index_of(group, topic, q, qs, pick.gone)
        in_flight = qs.in_flight if qs is not None else {}
        heads: list[tuple[int, object]] = []     # (offset, message group): may go out now
        delivered = 0                            # (a group has one delivery, its head)
        for key in list(ix.groups):
            dq = ix.groups[key]
            while dq and dq[0] not in in_flight:
                dq.popleft()                     # acked or forgotten since
            if not dq:
                del ix.groups[key]
                continue
            d = in_flight[dq[0]]
            delivered += not d.held
            if d.held or d.due_ms(connected_until) <= now_ms:
                heads.append((dq[0], key))       # else still invisible: the group waits
        held = len(in_flight) - delivered
        heapq.heapify(heads)
        msgs = self._read_many(topic, q, [o for o, _k in heapq.nsmallest(need, heads)])
        while heads and len(pick.picked) < need:
            off, key = heapq.heappop(heads)
            d = in_flight[off]
            m = msgs.get(off) or self._read_many(topic, q, [off]).get(off)
            if m is None or (tags is not None and m.tags not in tags) or \
                    d.attempt >= max_attempts:
                if m is not None and d.attempt >= max_attempts and \
                        (tags is None or m.tags in tags):
                    pick.dead.append((m, d.attempt))
                pick.gone.append(off)            # gone, unsubscribed or dead: the group's
                held -= d.held                   # next message heads it now
                dq = ix.groups[key]
                dq.popleft()
                while dq and dq[0] not in in_flight:
                    dq.popleft()
                if not dq:
                    del ix.groups[key]
                elif in_flight[dq[0]].held:
                    heapq.heappush(heads, (dq[0], key))
                continue
            pick.picked.append((off, d.attempt))
            pick.messages.append(m)
            held -= d.held
        pick.new_pop = self._scan(pick, ix, held, topic, q, tags, need)
        return pick

    def _scan(self, pick: QueuePick, ix: _GroupIndex, held: int, topic: str, q: int,
              tags: frozenset[str] | None, need: int) -> int:
        """Read new messages from the pop offset (a message of a group with anything in
        flight is held, else delivered); returns the pop offset after them."""
        pos = pick.pop_offset
        while len(pick.picked) < need and held < MAX_HELD:
            n = min(SCAN_BATCH, MAX_HELD - held + need - len(pick.picked))
            r = self.store.get(topic, q, pos, n, tags=tags)
            if r.status is GetStatus.OFFSET_TOO_SMALL:      # retention passed it
                pos = r.next_offset
                r = self.store.get(topic, q, pos, n, tags=tags)
            if r.status not in (GetStatus.FOUND, GetStatus.NO_MATCHED_MESSAGE,
                                GetStatus.OFFSET_FOUND_NULL):
                return pos
            for m in r.messages:
                if len(pick.picked) >= need or held >= MAX_HELD:
                    return m.queue_offset
                off, key = m.queue_offset, ordering_key(m)
                dq = ix.groups.get(key)
                if dq:
                    pick.held.append(off)
                    held += 1
                    dq.append(off)
                else:
                    pick.picked.append((off, 0))
                    pick.messages.append(m)
                    ix.groups[key] = deque((off,))
            if r.next_offset <= pos:
                return pos
            pos = r.next_offset
        return pos

