"""Transactional messages: a half message is held (``strata.broker.held``) where no consumer
sees it until ``EndTransaction`` commits it (put into its topic, once) or rolls it back
(dropped). A half message left unresolved is checked back: a
``RecoverOrphanedTransactionCommand`` goes to a live producer of its topic over Telemetry
(the one that sent it, if it is still there), whose transaction checker answers with an
``EndTransaction``; after ``max_checks`` checks without an answer it is dropped and logged.

The transaction id a send answers is the half message's held id in hex (32 digits): unknown,
resolved or malformed ids are refused with ``INVALID_TRANSACTION_ID``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable

from strata.broker import held_journal as hj
from strata.broker.rocketmq.convert import PROP_TRANSACTION, to_protocol
from strata.broker.due_queue import DueQueue
from strata.broker.errors import InvalidMessageError
from strata.broker.held import HeldEntry, HeldMessages
from strata.broker.rocketmq.protocol import Code, pb, svc
from strata.broker.rocketmq.sessions import Sessions
from strata.store.message import Message
from strata.store.message_store import now_ms

log = logging.getLogger(__name__)

CHECK_INTERVAL_MS = 60_000      # first check this long after the send, then as often
MAX_CHECKS = 15


def is_transactional(m: Message) -> bool:
    props = m.properties
    return bool(props) and props.get(PROP_TRANSACTION) == "true"


def _refuse(message: str) -> InvalidMessageError:
    return InvalidMessageError(Code.INVALID_TRANSACTION_ID, message)


class Transactions(DueQueue):
    """The half messages of one broker and their checks."""

    def __init__(self, held: HeldMessages, sessions: Sessions, on_moved: Callable[[], None], *,
                 check_interval_ms: int = CHECK_INTERVAL_MS,
                 max_checks: int = MAX_CHECKS) -> None:
        super().__init__(held, hj.Kind.TRANSACTION)
        self.sessions = sessions
        self.on_moved = on_moved
        self.check_interval_ms = check_interval_ms
        self.max_checks = max_checks
        self._senders: dict[bytes, str] = {}     # held id -> client id that sent it (memory)
        self.committed = 0
        self.rolled_back = 0
        self.checks_sent = 0
        self.dropped = 0

    # ------------------------------------------------------------------ half messages

    async def hold(self, msgs: list[tuple[Message, str]], client_id: str) -> list[HeldEntry]:
        """Hold half messages (message, client message id each)."""
        due = now_ms() + self.check_interval_ms
        entries = await self.held.hold([(m, hj.Kind.TRANSACTION, due, mid) for m, mid in msgs])
        for e in entries:
            self.push(e.due_ms, e.id)
            self._senders[e.id] = client_id
        return entries

    @staticmethod
    def transaction_id(e: HeldEntry) -> str:
        return e.id.hex()

    def lookup(self, transaction_id: str, topic: str, message_id: str) -> HeldEntry:
        """The half message an EndTransaction names; InvalidMessageError
        (INVALID_TRANSACTION_ID) saying why not."""
        try:
            held_id = bytes.fromhex(transaction_id)
        except ValueError:
            held_id = b""
        if len(held_id) != hj.ID_BYTES:
            raise _refuse(f"transaction id {transaction_id[:80]!r} is not one this broker "
                          f"issues ({2 * hj.ID_BYTES} hex digits)")
        e = self.held.entries.get(held_id)
        if e is None or e.kind is not hj.Kind.TRANSACTION:
            raise _refuse(f"no open transaction {transaction_id}: it was committed, rolled "
                          "back or dropped after its checks, or this broker never issued it")
        if e.topic != topic:
            raise _refuse(f"transaction {transaction_id} belongs to topic {e.topic!r}, not "
                          f"{topic!r}")
        if message_id and e.message_id and message_id != e.message_id:
            raise _refuse(f"transaction {transaction_id} holds message {e.message_id}, not "
                          f"{message_id}")
        if e.busy:
            raise _refuse(f"transaction {transaction_id} is being resolved right now")
        return e

    async def end(self, e: HeldEntry, resolution: int) -> None:
        """Commit (put into its topic) or roll back (drop) a half message; an unspecified
        resolution (a checker that does not know yet) leaves it to the next check."""
        self._senders.pop(e.id, None)
        if resolution == pb.TransactionResolution.COMMIT:
            await self.held.move([e])
            self.committed += 1
            self.on_moved()
        elif resolution == pb.TransactionResolution.ROLLBACK:
            await self.held.drop([e], hj.Reason.ROLLED_BACK)
            self.rolled_back += 1

    # ------------------------------------------------------------------ checks

    async def _check(self, e: HeldEntry, now: int) -> None:
        checks = e.checks + 1
        if checks > self.max_checks:
            log.warning("transaction %s (topic %s, message %s) is still unresolved after %d "
                        "checks; its half message is dropped", e.id.hex(), e.topic,
                        e.message_id, e.checks)
            self._senders.pop(e.id, None)
            self.dropped += 1
            await self.held.drop([e], hj.Reason.DROPPED)
            return
        await self.held.checked(e, checks, now + self.check_interval_ms)
        self.push(e.due_ms, e.id)
        s = self.sessions.producer_for(e.topic, self._senders.get(e.id, ""))
        if s is None:
            log.info("transaction %s (topic %s): no live producer of the topic to check it "
                     "with (check %d of %d)", e.id.hex(), e.topic, checks, self.max_checks)
            return
        sm = await asyncio.get_running_loop().run_in_executor(None, self.held.read, e)
        if sm is None:
            return
        s.push(svc.TelemetryCommand(
            status=pb.Status(code=Code.OK, message="OK"),
            recover_orphaned_transaction_command=svc.RecoverOrphanedTransactionCommand(
                message=to_protocol(sm, "", 0, 0), transaction_id=e.id.hex())))
        self.checks_sent += 1

    async def _run(self) -> None:
        while not self._stopping:
            now = now_ms()
            for e in self.pop_due(now):
                try:
                    await self._check(e, now)
                except Exception:  # noqa: BLE001 - one bad half message stops no check
                    log.exception("checking transaction %s failed", e.id.hex())
            await self.wait_for_due()
