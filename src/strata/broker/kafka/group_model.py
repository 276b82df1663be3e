"""The data of Kafka's classic consumer groups, as the coordinator
(``strata.broker.kafka.groups``) keeps them: a group's ``State``, its ``Member`` objects and
``Group`` record, the ``JoinResult``/``SyncResult`` answers, the ``MemberView``/``GroupView``
that DescribeGroups shows, and the ``Pending`` answer a waiting JoinGroup or SyncGroup gets.

No rules live here beyond what a group can say of itself (protocol votes, fencing of a static
member's older incarnation); the state machine is the coordinator's.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Callable, Generic, TypeVar

T = TypeVar("T")


class State(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


class Pending(Generic[T]):
    """A response owed to a request that waits; resolved once by the coordinator. The I/O
    layer turns it into a future with ``add_done_callback`` (called at once if done)."""

    __slots__ = ("_result", "_done", "_callbacks")

    def __init__(self) -> None:
        self._done = False
        self._result: T | None = None
        self._callbacks: list[Callable[[T], None]] = []

    @classmethod
    def resolved(cls, result: T) -> "Pending[T]":
        p: Pending[T] = cls()
        p._resolve(result)
        return p

    @property
    def done(self) -> bool:
        return self._done

    @property
    def result(self) -> T:
        if not self._done:
            raise RuntimeError("the pending response is not resolved yet")
        return self._result         # type: ignore[return-value]

    def add_done_callback(self, fn: Callable[[T], None]) -> None:
        if self._done:
            fn(self._result)        # type: ignore[arg-type]
        else:
            self._callbacks.append(fn)

    def _resolve(self, result: T) -> None:
        if self._done:
            return
        self._done, self._result = True, result
        callbacks, self._callbacks = self._callbacks, []
        for fn in callbacks:
            fn(result)


@dataclass(frozen=True)
class JoinResult:
    """A JoinGroup answer; ``members`` (member id, group instance id, metadata of the chosen
    protocol) only for the leader."""

    error: int
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    member_id: str = ""
    members: tuple[tuple[str, str | None, bytes], ...] = ()
    replaced: bool = False      # a static member replaced without a rebalance (to be stored)


@dataclass(frozen=True)
class SyncResult:
    error: int
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None


@dataclass
class Member:
    member_id: str
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: list[tuple[str, bytes]]
    group_instance_id: str | None = None
    expires_ms: int = 0
    assignment: bytes = b""
    join: Pending[JoinResult] | None = None
    sync: Pending[SyncResult] | None = None

    def metadata(self, protocol: str | None) -> bytes:
        return self.metadata_of(self.protocols, protocol)

    @staticmethod
    def metadata_of(protocols: list[tuple[str, bytes]], protocol: str | None) -> bytes:
        for name, meta in protocols:
            if name == protocol:
                return meta
        return b""

    @property
    def kept_alive(self) -> bool:
        """Waiting in a join or sync counts as alive (the rebalance deadlines cover those)."""
        return self.join is not None or self.sync is not None


@dataclass(frozen=True)
class MemberView:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True)
class GroupView:
    """What DescribeGroups shows of a group."""

    group_id: str
    state: State
    protocol_type: str
    protocol_name: str
    generation_id: int
    members: tuple[MemberView, ...] = ()


@dataclass
class Group:
    group_id: str
    state: State = State.EMPTY
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    pending: dict[str, int] = field(default_factory=dict)   # member id -> must join by (ms)
    rebalance_deadline_ms: int = 0
    sync_deadline_ms: int = 0
    static: dict[str, str] = field(default_factory=dict)    # group instance id -> member id
    # the leader id this generation's members were told, when a static replacement of the
    # leader made ``leader_id`` a member that was told it does not lead (None otherwise)
    told_leader: str | None = None
    # the initial rebalance delay of a group formed from Empty (``Coordinator``): the join
    # completes only at ``rebalance_deadline_ms`` while ``initial_delay``; a member new to a
    # first generation (``new_member_added``) extends it, out of ``initial_remaining_ms``
    initial_delay: bool = False
    initial_step_ms: int = 0
    initial_remaining_ms: int = 0
    new_member_added: bool = False

    def fenced(self, group_instance_id: str | None, member_id: str) -> bool:
        """A request naming ``group_instance_id`` with another member id than the group has
        for that instance (an older incarnation of a static member)."""
        if group_instance_id is None:
            return False
        known = self.static.get(group_instance_id)
        return known is not None and known != member_id

    def candidate_protocols(self) -> set[str]:
        names: set[str] | None = None
        for m in self.members.values():
            mine = {n for n, _ in m.protocols}
            names = mine if names is None else names & mine
        return names or set()

    def supports(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        if not protocol_type or not protocols:
            return False
        if not self.members:
            return True
        return (protocol_type == self.protocol_type
                and bool(self.candidate_protocols() & {n for n, _ in protocols}))

    def select_protocol(self) -> str:
        """Each member votes for the first protocol of its own list that all support; most
        votes win, ties go to the leader's (or the first member's) preference."""
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        for m in self.members.values():
            vote = next(n for n, _ in m.protocols if n in candidates)
            votes[vote] = votes.get(vote, 0) + 1
        first = self.members.get(self.leader_id or "") or next(iter(self.members.values()))
        order = [n for n, _ in first.protocols if n in votes]
        return max(order, key=lambda n: (votes[n], -order.index(n)))

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)
