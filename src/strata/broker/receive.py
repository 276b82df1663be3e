"""Popping messages for a consumer group across a topic's queues: due redeliveries first,
then messages never delivered, each handed out until its invisible time ends."""

from __future__ import annotations

from dataclasses import dataclass

from strata.broker.dead_letter import dead_letter
from strata.broker.errors import InvalidMessageError
from strata.broker.group_state import ConsumerGroups
from strata.broker.protocol import Code
from strata.broker.receipt import Receipt, ReceiptSigner
from strata.store.message import GetStatus, StoredMessage
from strata.store.message_store import MessageStore


@dataclass(frozen=True)
class Delivered:
    message: StoredMessage
    receipt_handle: str
    attempt: int


def parse_tag_expression(expression: str) -> frozenset[str] | None:
    """``"a||b"`` -> {"a", "b"}; ``""`` or ``"*"`` -> None (every message)."""
    text = expression.strip()
    if not text or text == "*":
        return None
    tags = [t.strip() for t in text.split("||")]
    if any(not t for t in tags):
        raise InvalidMessageError(Code.ILLEGAL_FILTER_EXPRESSION,
                                  f"tag expression {expression!r} has an empty tag")
    return None if "*" in tags else frozenset(tags)


class Popper:
    """Pops for the server (one event-loop thread)."""

    def __init__(self, store: MessageStore, groups: ConsumerGroups, signer: ReceiptSigner,
                 max_attempts: int = 16) -> None:
        self.store = store
        self.max_attempts = max_attempts
        self.dead_lettered = 0
        self.groups = groups
        self.signer = signer
        self._rotation: dict[tuple[str, str], int] = {}

    def pop(self, group: str, topic: str, tags: frozenset[str] | None, max_messages: int,
            invisible_ms: int, now_ms: int) -> list[Delivered]:
        n = self.store.queue_count(topic)
        if n == 0:
            return []
        start = self._rotation.get((group, topic), 0) % n
        self._rotation[(group, topic)] = start + 1
        out: list[Delivered] = []
        deadline = now_ms + invisible_ms
        for i in range(n):
            need = max_messages - len(out)
            if need <= 0:
                break
            out += self._pop_queue(group, topic, (start + i) % n, tags, need, deadline,
                                   now_ms)
        return out

    def _pop_queue(self, group: str, topic: str, q: int, tags: frozenset[str] | None,
                   need: int, deadline: int, now_ms: int) -> list[Delivered]:
        store, qs = self.store, self.groups.queue(group, topic, q)
        picked: list[tuple[int, int]] = []
        msgs: list[StoredMessage] = []
        gone: list[int] = []
        dead = []
        if qs is not None:
            for off, attempt in qs.due(now_ms, need):
                r = store.get(topic, q, off, 1)
                m = r.messages[0] if r.found and r.messages[0].queue_offset == off else None
                if m is None or (tags is not None and m.tags not in tags):
                    gone.append(off)       # removed by retention, or no longer subscribed
                elif attempt >= self.max_attempts:
                    dead.append(dead_letter(m, group, attempt))
                    gone.append(off)
                else:
                    picked.append((off, attempt))
                    msgs.append(m)
        if dead:
            # rare: stored right here, before the deliveries leave the group's flight
            store.put_batch(dead)
            self.dead_lettered += len(dead)
        if gone:
            self.groups.forget(group, topic, q, gone)
        pop_offset = qs.pop_offset if qs is not None else store.min_offset(topic, q)
        new_pop = pop_offset
        if len(picked) < need:
            r = store.get(topic, q, new_pop, need - len(picked), tags=tags)
            if r.status is GetStatus.OFFSET_TOO_SMALL:      # retention passed it
                new_pop = r.next_offset
                r = store.get(topic, q, new_pop, need - len(picked), tags=tags)
            if r.status in (GetStatus.FOUND, GetStatus.NO_MATCHED_MESSAGE,
                            GetStatus.OFFSET_FOUND_NULL):
                new_pop = r.next_offset
                for m in r.messages:
                    picked.append((m.queue_offset, 0))
                    msgs.append(m)
        if not picked and new_pop == pop_offset and qs is not None:
            return []
        handles = self.groups.pop(group, topic, q, pop_offset, picked, new_pop, deadline)
        return [Delivered(m, self.signer.encode(Receipt(group, topic, q, off, h, deadline)),
                          attempt + 1)
                for m, (off, attempt), h in zip(msgs, picked, handles)]
