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

from dataclasses import dataclass, field

from strata.broker.convert import PROP_MESSAGE_GROUP
from strata.broker.group_state import QueueState
from strata.store.message import GetStatus, StoredMessage
from strata.store.message_store import MessageStore

# held-back messages per queue and consumer group: past it a pop reads no further in that
# queue (a message group that stays busy cannot make the broker hold a whole backlog)
MAX_HELD = 1024
SCAN_BATCH = 32
GROUP_CACHE = 8192      # message groups remembered per queue (offset -> group), then dropped


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


def message_group(m: StoredMessage) -> str | None:
    return m.properties.get(PROP_MESSAGE_GROUP)


class FifoPicker:
    """Picks the deliveries of one queue of a FIFO topic (server thread only)."""

    def __init__(self, store: MessageStore) -> None:
        self.store = store
        # (topic, queue) -> queue offset -> ordering key (the message group, or the offset
        # itself for a message without one); None: the message is gone
        self._keys: dict[tuple[str, int], dict[int, object]] = {}

    def _read(self, topic: str, q: int, off: int) -> StoredMessage | None:
        r = self.store.get(topic, q, off, 1)
        return r.messages[0] if r.found and r.messages[0].queue_offset == off else None

    def _remember(self, topic: str, q: int, m: StoredMessage) -> object:
        keys = self._keys.setdefault((topic, q), {})
        if len(keys) >= GROUP_CACHE:
            keys.clear()
        g = message_group(m)
        key = keys[m.queue_offset] = m.queue_offset if g is None else g
        return key

    def pick(self, qs: QueueState | None, topic: str, q: int, tags: frozenset[str] | None,
             need: int, now_ms: int, max_attempts: int) -> QueuePick:
        pick = QueuePick(qs.pop_offset if qs is not None else self.store.min_offset(topic, q))
        busy: set[object] = set()      # message groups with a message in flight after the pop
        held = 0
        if qs is not None and qs.in_flight:
            keys = self._keys.get((topic, q), {})
            for off in sorted(qs.in_flight):          # oldest first: each group's head
                d = qs.in_flight[off]
                m = None
                key = keys.get(off)
                if key is None:
                    m = self._read(topic, q, off)
                    if m is None:
                        pick.gone.append(off)       # removed by retention
                        continue
                    key = self._remember(topic, q, m)
                    keys = self._keys[(topic, q)]
                if key in busy:                      # not the head of its group
                    held += d.held
                    continue
                if not d.held and d.deadline_ms > now_ms:
                    busy.add(key)                    # still invisible: the group waits
                    continue
                if len(pick.picked) >= need:
                    busy.add(key)
                    held += d.held
                    continue
                m = m or self._read(topic, q, off)
                if m is None or (tags is not None and m.tags not in tags):
                    pick.gone.append(off)            # gone, or no longer subscribed
                    continue
                if d.attempt >= max_attempts:
                    pick.dead.append((m, d.attempt))
                    pick.gone.append(off)            # the group's next message heads it now
                    continue
                pick.picked.append((off, d.attempt))
                pick.messages.append(m)
                busy.add(key)
        pick.new_pop = self._scan(pick, busy, held, topic, q, tags, need)
        return pick

    def _scan(self, pick: QueuePick, busy: set[object], held: int, topic: str, q: int,
              tags: frozenset[str] | None, need: int) -> int:
        """Read new messages from the pop offset; returns the pop offset after them."""
        pos = pick.pop_offset
        while len(pick.picked) < need and held < MAX_HELD:
            r = self.store.get(topic, q, pos, SCAN_BATCH, tags=tags)
            if r.status is GetStatus.OFFSET_TOO_SMALL:      # retention passed it
                pos = r.next_offset
                r = self.store.get(topic, q, pos, SCAN_BATCH, tags=tags)
            if r.status not in (GetStatus.FOUND, GetStatus.NO_MATCHED_MESSAGE,
                                GetStatus.OFFSET_FOUND_NULL):
                return pos
            for m in r.messages:
                if len(pick.picked) >= need or held >= MAX_HELD:
                    return m.queue_offset
                key = self._remember(topic, q, m)
                if key in busy:
                    pick.held.append(m.queue_offset)
                    held += 1
                else:
                    pick.picked.append((m.queue_offset, 0))
                    pick.messages.append(m)
                    busy.add(key)
            if r.next_offset <= pos:
                return pos
            pos = r.next_offset
        return pos
