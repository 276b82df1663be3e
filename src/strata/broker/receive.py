"""Popping messages for a consumer group across a topic's queues: due redeliveries first,
then messages never delivered, each handed out until its invisible time ends. A FIFO topic's
queues are picked by ``strata.broker.fifo`` (one message per message group in flight)."""

from __future__ import annotations

from dataclasses import dataclass

from strata.broker.dead_letter import dead_letter
from strata.broker.errors import InvalidMessageError
from strata.broker.fifo import FifoPicker, QueuePick
from strata.broker.group_state import ConsumerGroups, QueueState
from strata.broker.status import Status
from strata.broker.receipt import Receipt, ReceiptSigner
from strata.store.message import GetStatus, StoredMessage
from strata.store.message_store import MessageStore
from strata.store.topics import TopicType


@dataclass(frozen=True)
class Delivered:
    message: StoredMessage
    receipt_handle: str
    attempt: int
    receipt: Receipt         # what the handle says (to give the delivery back unsent)


def parse_tag_expression(expression: str) -> frozenset[str] | None:
    """``"a||b"`` -> {"a", "b"}; ``""`` or ``"*"`` -> None (every message)."""
    text = expression.strip()
    if not text or text == "*":
        return None
    tags = [t.strip() for t in text.split("||")]
    if any(not t for t in tags):
        raise InvalidMessageError(Status.ILLEGAL_FILTER_EXPRESSION,
                                  f"tag expression {expression!r} has an empty tag")
    return None if "*" in tags else frozenset(tags)


class Popper:
    """Pops for the server (on its group worker's thread: ``strata.broker.group_worker``)."""

    def __init__(self, store: MessageStore, groups: ConsumerGroups, signer: ReceiptSigner,
                 max_attempts: int = 16) -> None:
        self.store = store
        self.max_attempts = max_attempts
        self.dead_lettered = 0
        self.groups = groups
        self.signer = signer
        self.fifo = FifoPicker(store)
        self._rotation: dict[tuple[str, str], int] = {}

    def pop(self, group: str, topic: str, tags: frozenset[str] | None, max_messages: int,
            invisible_ms: int, now_ms: int,
            renew: tuple[str, int] | None = None) -> list[Delivered]:
        """Up to ``max_messages`` deliveries, invisible for ``invisible_ms``; with ``renew``
        (client id, renew until ms) renewed while that client is connected."""
        n = self.store.queue_count(topic)
        if n == 0:
            return []
        fifo = self.store.topic_type(topic) is TopicType.FIFO
        start = self._rotation.get((group, topic), 0) % n
        self._rotation[(group, topic)] = start + 1
        out: list[Delivered] = []
        deadline = now_ms + invisible_ms
        for i in range(n):
            need = max_messages - len(out)
            if need <= 0:
                break
            q = (start + i) % n
            qs = self.groups.queue(group, topic, q)
            if fifo:
                pick = self.fifo.pick(group, qs, topic, q, tags, need, now_ms,
                                      self.max_attempts, self.groups.connected_until)
            else:
                pick = self._pick(qs, topic, q, tags, need, now_ms)
            out += self._carry_out(group, topic, q, pick, deadline, renew)
        return out

    def _pick(self, qs: QueueState | None, topic: str, q: int, tags: frozenset[str] | None,
              need: int, now_ms: int) -> QueuePick:
        """A normal topic: due redeliveries first (oldest deadline first), then new
        messages."""
        store = self.store
        pick = QueuePick(qs.pop_offset if qs is not None else store.min_offset(topic, q))
        if qs is not None:
            for off, attempt in qs.due(now_ms, need, self.groups.connected_until):
                r = store.get(topic, q, off, 1)
                m = r.messages[0] if r.found and r.messages[0].queue_offset == off else None
                if m is None or (tags is not None and m.tags not in tags):
                    pick.gone.append(off)       # removed by retention, or no longer subscribed
                elif attempt >= self.max_attempts:
                    pick.dead.append((m, attempt))
                    pick.gone.append(off)
                else:
                    pick.picked.append((off, attempt))
                    pick.messages.append(m)
        new_pop = pick.pop_offset
        if len(pick.picked) < need:
            r = store.get(topic, q, new_pop, need - len(pick.picked), tags=tags)
            if r.status is GetStatus.OFFSET_TOO_SMALL:      # retention passed it
                new_pop = r.next_offset
                r = store.get(topic, q, new_pop, need - len(pick.picked), tags=tags)
            if r.status in (GetStatus.FOUND, GetStatus.NO_MATCHED_MESSAGE,
                            GetStatus.OFFSET_FOUND_NULL):
                new_pop = r.next_offset
                for m in r.messages:
                    pick.picked.append((m.queue_offset, 0))
                    pick.messages.append(m)
        pick.new_pop = new_pop
        return pick

    def _carry_out(self, group: str, topic: str, q: int, pick: QueuePick,
                   deadline: int, renew: tuple[str, int] | None = None) -> list[Delivered]:
        if pick.dead:
            # rare: stored right here, before the deliveries leave the group's flight
            self.store.put_batch([dead_letter(m, group, attempt) for m, attempt in pick.dead])
            self.dead_lettered += len(pick.dead)
        if pick.gone:
            self.groups.forget(group, topic, q, pick.gone)
        if pick.hands_out_nothing() and self.groups.queue(group, topic, q) is not None:
            return []
        handles = self.groups.pop(group, topic, q, pick.pop_offset, pick.picked, pick.new_pop,
                                  deadline, pick.held, renew)
        out = []
        for m, (off, attempt), h in zip(pick.messages, pick.picked, handles):
            r = Receipt(group, topic, q, off, h, deadline)
            out.append(Delivered(m, self.signer.encode(r), attempt + 1, r))
        return out
