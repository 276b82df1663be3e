"""Kafka's classic consumer-group coordinator as a pure state machine (no sockets, no clock,
no asyncio): the I/O layer (``strata.broker.kafka.group_handlers``) feeds it requests with
the current time and resolves what it owes.

The classic protocol keeps the broker ignorant of what is assigned: each member joins with
opaque protocol metadata (its subscription, per assignor it supports), the broker picks one
protocol all members support, a generation id and a leader; the leader alone receives the
members' metadata, runs the assignor on the client side and sends every member's opaque
assignment in its SyncGroup, which the broker hands to the followers waiting in theirs.

States (as DescribeGroups names them): Empty (no members), PreparingRebalance (waiting for
members to (re)join), CompletingRebalance (joined; waiting for the leader's assignment),
Stable, Dead (a group the coordinator does not know).

Rules, following Kafka's classic coordinator:

- A join completes when every known member has rejoined (and no member id handed out with
  MEMBER_ID_REQUIRED is still expected), or when the rebalance timeout (the largest of the
  members') passes: members that did not rejoin by then are removed.
- Initial rebalance delay (Kafka's ``group.initial.rebalance.delay.ms``): a rebalance that
  starts from Empty does not complete before the delay has passed, even if every member
  joined, so that members starting together form one first generation instead of a leader
  alone (which may assign before it knows the topics' partitions, and rejoin at once). Each
  member new to the group's first generation (generation 0) extends the wait by another delay,
  for at most the rebalance timeout in all; then the join completes as above.
- JoinGroup v4+ with an empty member id gets MEMBER_ID_REQUIRED and a new id to join with.
- Heartbeat answers REBALANCE_IN_PROGRESS while the group prepares a rebalance, which makes
  members rejoin; a member that neither heartbeats nor waits in a join or sync for its session
  timeout is removed (and the group rebalances).
- A leader that never sends its SyncGroup: after the rebalance timeout the members that did
  not sync are removed and the group rebalances.
- Requests of an old generation get ILLEGAL_GENERATION, of an unknown member id
  UNKNOWN_MEMBER_ID.

Static membership (KIP-345, ``group.instance.id``): a member with an instance id joins
without MEMBER_ID_REQUIRED; one that joins with an empty member id while the group has a
member of its instance id *replaces* it (a new member id, the old one's assignment): in a
Stable group whose chosen protocol and the member's metadata for it are unchanged this is no
rebalance at all (the group's image is stored again, and the answer names the current leader,
so the member does not assign); otherwise the group rebalances. A replaced leader's new
incarnation was told it does not lead: its repeated JoinGroup (same generation, and
metadata that would not have rebalanced its replacement) is a follower's — answered at once,
naming the same leader, no rebalance, also after a broker restart (the leader it was told is
part of the stored image). (Kafka
rebalances there, as for any leader's JoinGroup; but a member never told that it leads is not
asking for a new assignment, and kafka-python 3.0.12 sends such a JoinGroup when it drops the
answer of its first join — see docs/kafka.md.) A request naming an instance
id with another member id than the group has for it gets FENCED_INSTANCE_ID; LeaveGroup v3+
may name a member by its instance id alone. Static members that do not rejoin a rebalance in
time are kept (they are expected back under their instance id) until their session expires.

Durable membership: ``dirty`` collects the groups whose image (``strata.broker.kafka.
group_image``) must be stored — when the leader's assignment makes a group Stable, when a
group empties, and when a static member is replaced without a rebalance; the I/O layer stores
them and answers those requests once stored. ``load`` brings a stored image back after a
restart: the group is Stable (Empty without members) and its members' sessions start then;
the leader a replaced leader's incarnation was told (``Group.told_leader``) comes back too.

Waiting (JoinGroup, SyncGroup) is a ``Pending`` the coordinator resolves later; the I/O layer
calls ``tick(now_ms)`` at ``next_deadline()`` and after each request.
"""

from __future__ import annotations

import uuid
from typing import Callable

from strata.broker.kafka.defaults import INITIAL_REBALANCE_DELAY_MS
from strata.broker.kafka.errors import (FENCED_INSTANCE_ID, ILLEGAL_GENERATION,
                                       INCONSISTENT_GROUP_PROTOCOL, INVALID_GROUP_ID,
                                       INVALID_SESSION_TIMEOUT, MEMBER_ID_REQUIRED, NONE,
                                       REBALANCE_IN_PROGRESS, UNKNOWN_MEMBER_ID)
from strata.broker.kafka.group_image import GroupImage, MemberImage
# the groups' data (importable from here too, as the handlers and tests do)
from strata.broker.kafka.group_model import (Group, GroupView, JoinResult, Member,  # noqa: F401
                                            MemberView, Pending, State, SyncResult)

MIN_SESSION_TIMEOUT_MS = 6_000        # Kafka's group.min.session.timeout.ms
MAX_SESSION_TIMEOUT_MS = 1_800_000    # Kafka's group.max.session.timeout.ms


class Coordinator:
    """All classic groups of one broker. Every method takes ``now_ms`` and runs on one
    thread; nothing here blocks or sleeps."""

    def __init__(self, *, min_session_timeout_ms: int = MIN_SESSION_TIMEOUT_MS,
                 max_session_timeout_ms: int = MAX_SESSION_TIMEOUT_MS,
                 initial_rebalance_delay_ms: int = INITIAL_REBALANCE_DELAY_MS,
                 new_member_id: Callable[[str], str] | None = None) -> None:
        self.groups: dict[str, Group] = {}
        self.min_session_timeout_ms = min_session_timeout_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.initial_rebalance_delay_ms = initial_rebalance_delay_ms
        self._new_member_id = new_member_id or (lambda client_id: f"{client_id}-{uuid.uuid4()}")
        self.rebalances = 0     # completed joins (for metrics and tests)
        self.dirty: set[str] = set()    # groups whose image is to be stored (``image``)

    # ------------------------------------------------------------------ JoinGroup

    def join(self, group_id: str, member_id: str, *, client_id: str, client_host: str,
             session_timeout_ms: int, rebalance_timeout_ms: int, protocol_type: str,
             protocols: list[tuple[str, bytes]], now_ms: int,
             require_known_member_id: bool = False,
             group_instance_id: str | None = None) -> Pending[JoinResult]:
        """A JoinGroup; ``rebalance_timeout_ms`` is the session timeout for v0 clients."""
        if not group_id:
            return Pending.resolved(JoinResult(INVALID_GROUP_ID, member_id=member_id))
        if not self.min_session_timeout_ms <= session_timeout_ms <= self.max_session_timeout_ms:
            return Pending.resolved(JoinResult(INVALID_SESSION_TIMEOUT, member_id=member_id))
        group = self.groups.get(group_id)
        if group is None:
            if member_id:
                return Pending.resolved(JoinResult(UNKNOWN_MEMBER_ID, member_id=member_id))
            group = self.groups[group_id] = Group(group_id)
        if not group.supports(protocol_type, protocols):
            return Pending.resolved(JoinResult(INCONSISTENT_GROUP_PROTOCOL, member_id=member_id))
        protocols = list(protocols)
        if group_instance_id is not None:
            if not member_id:
                return self._static_join(group, group_instance_id, client_id=client_id,
                                         client_host=client_host,
                                         session_timeout_ms=session_timeout_ms,
                                         rebalance_timeout_ms=rebalance_timeout_ms,
                                         protocol_type=protocol_type, protocols=protocols,
                                         now_ms=now_ms)
            if group.fenced(group_instance_id, member_id):
                return Pending.resolved(JoinResult(FENCED_INSTANCE_ID, member_id=member_id))
        if not member_id or member_id in group.pending:
            if not member_id:
                member_id = self._new_member_id(client_id)
                if require_known_member_id:
                    group.pending[member_id] = now_ms + session_timeout_ms
                    return Pending.resolved(JoinResult(MEMBER_ID_REQUIRED, member_id=member_id))
            group.pending.pop(member_id, None)
            m = Member(member_id, client_id, client_host, session_timeout_ms,
                       rebalance_timeout_ms, protocols, group_instance_id,
                       expires_ms=now_ms + session_timeout_ms)
            return self._add_member(group, m, protocol_type, now_ms)
        m = group.members.get(member_id)
        if m is None:
            return Pending.resolved(JoinResult(UNKNOWN_MEMBER_ID, member_id=member_id))
        m.client_id, m.client_host = client_id, client_host
        m.session_timeout_ms, m.rebalance_timeout_ms = session_timeout_ms, rebalance_timeout_ms
        m.expires_ms = now_ms + session_timeout_ms
        if group.state is State.PREPARING_REBALANCE:
            m.protocols = protocols
            if m.join is not None:      # a second join from the same member replaces the first
                m.join._resolve(JoinResult(REBALANCE_IN_PROGRESS, member_id=member_id))
            m.join = waiter = Pending()
            self._maybe_complete_join(group, now_ms)
            return waiter
        unchanged = protocols == m.protocols
        told_follower = member_id != (group.told_leader or group.leader_id)
        if group.state is State.STABLE and told_follower and member_id == group.leader_id:
            # the replaced leader's incarnation, told it follows: the replacement's own test
            # (after a restart it is a loaded member, which knows only the chosen protocol)
            unchanged = self._keeps_protocol(group, m, protocols)
        if unchanged and (group.state is State.COMPLETING_REBALANCE
                          or (group.state is State.STABLE and told_follower)):
            return Pending.resolved(self._join_result(group, m))     # a repeated join
        m.protocols = protocols
        m.join = waiter = Pending()
        self._prepare_rebalance(group, now_ms)
        self._maybe_complete_join(group, now_ms)
        return waiter

    @staticmethod
    def _keeps_protocol(group: Group, m: Member, protocols: list[tuple[str, bytes]]) -> bool:
        """Would ``m`` joining with ``protocols`` keep its metadata for the group's chosen
        protocol and that choice (a static replacement without a rebalance)? Then ``m``
        takes them (and True). The whole lists are not compared: a member loaded from an
        image knows only the chosen protocol's metadata."""
        if m.metadata(group.protocol_name) != Member.metadata_of(protocols,
                                                                 group.protocol_name):
            return False
        before, m.protocols = m.protocols, protocols
        if group.select_protocol() == group.protocol_name:
            return True
        m.protocols = before
        return False

    def _add_member(self, group: Group, m: Member, protocol_type: str,
                    now_ms: int) -> Pending[JoinResult]:
        if not group.members:
            group.protocol_type = protocol_type
        if group.leader_id is None:
            group.leader_id = m.member_id
        group.members[m.member_id] = m
        if m.group_instance_id is not None:
            group.static[m.group_instance_id] = m.member_id
        m.join = waiter = Pending()
        if group.state is not State.PREPARING_REBALANCE:
            self._prepare_rebalance(group, now_ms)
        elif group.initial_delay and group.generation_id == 0:
            group.new_member_added = True
        self._maybe_complete_join(group, now_ms)
        return waiter

    def _static_join(self, group: Group, instance_id: str, *, client_id: str,
                     client_host: str, session_timeout_ms: int, rebalance_timeout_ms: int,
                     protocol_type: str, protocols: list[tuple[str, bytes]],
                     now_ms: int) -> Pending[JoinResult]:
        """A JoinGroup with an instance id and no member id: a new static member, or the
        instance's new incarnation replacing the old one (see the module's docstring)."""
        new_id = self._new_member_id(instance_id)
        old_id = group.static.get(instance_id)
        old = group.members.get(old_id) if old_id is not None else None
        if old is None:
            m = Member(new_id, client_id, client_host, session_timeout_ms, rebalance_timeout_ms,
                       protocols, instance_id, expires_ms=now_ms + session_timeout_ms)
            return self._add_member(group, m, protocol_type, now_ms)
        leader_before = group.told_leader or group.leader_id or ""   # whom the others were told
        for w in (old.join, old.sync):          # the old incarnation is fenced
            if w is not None:
                w._resolve(JoinResult(FENCED_INSTANCE_ID, member_id=old_id)
                           if w is old.join else SyncResult(FENCED_INSTANCE_ID))
        # no rebalance: Stable, and the new incarnation's protocols keep the old one's
        # metadata for the chosen protocol and the choice (tried on the old member)
        quiet = group.state is State.STABLE and self._keeps_protocol(group, old, protocols)
        m = Member(new_id, client_id, client_host, session_timeout_ms, rebalance_timeout_ms,
                   protocols, instance_id, expires_ms=now_ms + session_timeout_ms,
                   assignment=old.assignment)
        group.members = {(new_id if k == old_id else k): (m if k == old_id else v)
                         for k, v in group.members.items()}
        group.static[instance_id] = new_id
        if group.leader_id == old_id:
            group.leader_id = new_id
        if group.state is State.STABLE:
            if quiet:
                self.dirty.add(group.group_id)
                if group.leader_id == new_id:
                    group.told_leader = leader_before
                return Pending.resolved(JoinResult(
                    NONE, group.generation_id, group.protocol_type, group.protocol_name,
                    leader_before, new_id, replaced=True))
            m.join = waiter = Pending()
            self._prepare_rebalance(group, now_ms)
        else:
            m.join = waiter = Pending()
            if group.state is State.COMPLETING_REBALANCE:
                self._prepare_rebalance(group, now_ms)
        self._maybe_complete_join(group, now_ms)
        return waiter

    def _join_result(self, group: Group, m: Member) -> JoinResult:
        leader = group.told_leader or group.leader_id or ""
        members: tuple[tuple[str, str | None, bytes], ...] = ()
        if m.member_id == leader:
            members = tuple((o.member_id, o.group_instance_id, o.metadata(group.protocol_name))
                            for o in group.members.values())
        return JoinResult(NONE, group.generation_id, group.protocol_type, group.protocol_name,
                          leader, m.member_id, members)

    def _prepare_rebalance(self, group: Group, now_ms: int) -> None:
        if group.state is State.COMPLETING_REBALANCE:
            self._fail_syncs(group, REBALANCE_IN_PROGRESS)
        delay = self.initial_rebalance_delay_ms
        if group.state is State.EMPTY and delay > 0:
            # the initial delay (see the module's docstring): the join waits for it alone
            group.initial_delay, group.new_member_added = True, False
            group.initial_step_ms = delay
            group.initial_remaining_ms = max(group.rebalance_timeout_ms() - delay, 0)
            group.state = State.PREPARING_REBALANCE
            group.rebalance_deadline_ms = now_ms + delay
            return
        group.state = State.PREPARING_REBALANCE
        group.rebalance_deadline_ms = now_ms + group.rebalance_timeout_ms()

    def _initial_delay_over(self, group: Group, now_ms: int) -> None:
        """The initial delay's step ended: another step if a member new to the first
        generation came meanwhile and time remains, else the join waits as any rebalance
        does, until the rest of the rebalance timeout (completing at once if all joined)."""
        if group.new_member_added and group.initial_remaining_ms > 0:
            step = min(self.initial_rebalance_delay_ms, group.initial_remaining_ms)
            group.initial_remaining_ms = max(group.initial_remaining_ms - group.initial_step_ms,
                                             0)
            group.initial_step_ms, group.new_member_added = step, False
            group.rebalance_deadline_ms = now_ms + step
            return
        group.initial_delay = group.new_member_added = False
        group.rebalance_deadline_ms = now_ms + group.initial_remaining_ms
        if group.initial_remaining_ms > 0:
            self._maybe_complete_join(group, now_ms)
        else:                           # the rebalance timeout is spent too
            self._complete_join(group, now_ms)

    def _fail_syncs(self, group: Group, error: int) -> None:
        for m in group.members.values():
            if m.sync is not None:
                m.sync._resolve(SyncResult(error))
                m.sync = None

    def _maybe_complete_join(self, group: Group, now_ms: int) -> None:
        if (group.state is State.PREPARING_REBALANCE and not group.pending
                and (not group.initial_delay or not group.members)     # all left: no wait
                and all(m.join is not None for m in group.members.values())):
            self._complete_join(group, now_ms)

    def _complete_join(self, group: Group, now_ms: int) -> None:
        group.initial_delay = group.new_member_added = False
        group.told_leader = None            # a new generation tells everyone who leads
        for m in [m for m in group.members.values()
                  if m.join is None and m.group_instance_id is None]:
            self._remove(group, m, now_ms, rebalance=False)      # did not rejoin in time
        if group.members and all(m.join is None for m in group.members.values()):
            # only static members that did not rejoin: wait another rebalance timeout (their
            # sessions remove them if they never come back)
            group.rebalance_deadline_ms = now_ms + group.rebalance_timeout_ms()
            return
        group.generation_id += 1
        self.rebalances += 1
        for m in group.members.values():
            m.assignment = b""
        if not group.members:
            group.state, group.protocol_name, group.leader_id = State.EMPTY, None, None
            self.dirty.add(group.group_id)
            return
        if group.leader_id not in group.members:
            group.leader_id = next(iter(group.members))
        group.protocol_name = group.select_protocol()
        group.state = State.COMPLETING_REBALANCE
        group.sync_deadline_ms = now_ms + group.rebalance_timeout_ms()
        if group.leader_id not in group.members or group.members[group.leader_id].join is None:
            # the leader must be a member that is told it leads (a static member kept without
            # rejoining is not)
            group.leader_id = next(mid for mid, m in group.members.items() if m.join is not None)
        for m in group.members.values():
            waiter, m.join = m.join, None
            m.expires_ms = now_ms + m.session_timeout_ms
            if waiter is not None:
                waiter._resolve(self._join_result(group, m))

    # ------------------------------------------------------------------ SyncGroup

    def sync(self, group_id: str, generation_id: int, member_id: str,
             assignments: dict[str, bytes], now_ms: int, *, protocol_type: str | None = None,
             protocol_name: str | None = None,
             group_instance_id: str | None = None) -> Pending[SyncResult]:
        """A SyncGroup; ``assignments`` (member id -> opaque assignment) from the leader."""
        group = self.groups.get(group_id)
        if group is not None and group.fenced(group_instance_id, member_id):
            return Pending.resolved(SyncResult(FENCED_INSTANCE_ID))
        m = group.members.get(member_id) if group is not None else None
        if group is None or m is None:
            return Pending.resolved(SyncResult(UNKNOWN_MEMBER_ID))
        if generation_id != group.generation_id:
            return Pending.resolved(SyncResult(ILLEGAL_GENERATION))
        if ((protocol_type is not None and protocol_type != group.protocol_type)
                or (protocol_name is not None and protocol_name != group.protocol_name)):
            return Pending.resolved(SyncResult(INCONSISTENT_GROUP_PROTOCOL))
        m.expires_ms = now_ms + m.session_timeout_ms
        if group.state is State.PREPARING_REBALANCE:
            return Pending.resolved(SyncResult(REBALANCE_IN_PROGRESS))
        if group.state is State.STABLE:
            return Pending.resolved(self._sync_result(group, m))
        # CompletingRebalance
        if m.sync is not None:
            m.sync._resolve(SyncResult(REBALANCE_IN_PROGRESS))
        m.sync = waiter = Pending()
        if member_id == group.leader_id:
            for o in group.members.values():
                o.assignment = bytes(assignments.get(o.member_id, b""))
            group.state = State.STABLE
            self.dirty.add(group.group_id)
            for o in group.members.values():
                if o.sync is not None:
                    w, o.sync = o.sync, None
                    w._resolve(self._sync_result(group, o))
        return waiter

    @staticmethod
    def _sync_result(group: Group, m: Member) -> SyncResult:
        return SyncResult(NONE, m.assignment, group.protocol_type, group.protocol_name)

    # ------------------------------------------------------------------ Heartbeat, leave

    def heartbeat(self, group_id: str, generation_id: int, member_id: str, now_ms: int,
                  group_instance_id: str | None = None) -> int:
        """The error code of a Heartbeat (NONE, REBALANCE_IN_PROGRESS, ...)."""
        group = self.groups.get(group_id)
        if group is not None and group.fenced(group_instance_id, member_id):
            return FENCED_INSTANCE_ID
        m = group.members.get(member_id) if group is not None else None
        if group is None or m is None:
            return UNKNOWN_MEMBER_ID
        if generation_id != group.generation_id:
            return ILLEGAL_GENERATION
        m.expires_ms = now_ms + m.session_timeout_ms
        return REBALANCE_IN_PROGRESS if group.state is State.PREPARING_REBALANCE else NONE

    def leave(self, group_id: str, member_id: str, now_ms: int,
              group_instance_id: str | None = None) -> int:
        """A member leaves (LeaveGroup); the group rebalances without it. With an instance
        id (v3+), the static member of that instance leaves; ``member_id`` may be empty then,
        and another one than the instance's is FENCED_INSTANCE_ID."""
        group = self.groups.get(group_id)
        if group is None:
            return UNKNOWN_MEMBER_ID
        if group_instance_id is not None:
            known = group.static.get(group_instance_id)
            if known is None or known not in group.members:
                return UNKNOWN_MEMBER_ID
            if member_id and member_id != known:
                return FENCED_INSTANCE_ID
            self._remove(group, group.members[known], now_ms)
            return NONE
        if group.pending.pop(member_id, None) is not None:
            self._maybe_complete_join(group, now_ms)
            return NONE
        m = group.members.get(member_id)
        if m is None:
            return UNKNOWN_MEMBER_ID
        self._remove(group, m, now_ms)
        return NONE

    def _remove(self, group: Group, m: Member, now_ms: int, rebalance: bool = True) -> None:
        del group.members[m.member_id]
        if m.group_instance_id is not None and \
                group.static.get(m.group_instance_id) == m.member_id:
            del group.static[m.group_instance_id]
        for w in (m.join, m.sync):
            if w is not None:
                w._resolve(JoinResult(UNKNOWN_MEMBER_ID, member_id=m.member_id)
                           if w is m.join else SyncResult(UNKNOWN_MEMBER_ID))
        m.join = m.sync = None
        if group.leader_id == m.member_id:
            group.leader_id = next(iter(group.members), None)
        if not rebalance:
            return
        if group.state in (State.STABLE, State.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, now_ms)
        self._maybe_complete_join(group, now_ms)

    # ------------------------------------------------------------------ OffsetCommit checks

    def check_commit(self, group_id: str, generation_id: int, member_id: str,
                     now_ms: int, group_instance_id: str | None = None) -> int:
        """May this OffsetCommit store offsets? Generation -1 (no member) is a standalone
        commit (a consumer that assign()s partitions), allowed while the group has no
        members; a member's commit needs its current generation, and not while the group
        waits for the leader's assignment."""
        group = self.groups.get(group_id)
        if generation_id < 0 and not member_id:
            if group is None or group.state is State.EMPTY:
                return NONE
            return UNKNOWN_MEMBER_ID
        if group is not None and group.fenced(group_instance_id, member_id):
            return FENCED_INSTANCE_ID
        m = group.members.get(member_id) if group is not None else None
        if group is None:
            return ILLEGAL_GENERATION if generation_id >= 0 else UNKNOWN_MEMBER_ID
        if group.state is State.COMPLETING_REBALANCE:
            return REBALANCE_IN_PROGRESS
        if m is None:
            return UNKNOWN_MEMBER_ID
        if generation_id != group.generation_id:
            return ILLEGAL_GENERATION
        m.expires_ms = now_ms + m.session_timeout_ms
        return NONE

    # ------------------------------------------------------------------ time

    def next_deadline(self) -> int | None:
        """When ``tick`` has something to do next (ms), or None."""
        times: list[int] = []
        for g in self.groups.values():
            times.extend(g.pending.values())
            times.extend(m.expires_ms for m in g.members.values() if not m.kept_alive)
            if g.state is State.PREPARING_REBALANCE:
                times.append(g.rebalance_deadline_ms)
            elif g.state is State.COMPLETING_REBALANCE:
                times.append(g.sync_deadline_ms)
        return min(times) if times else None

    def tick(self, now_ms: int) -> None:
        """Expire sessions and end rebalances whose time is up."""
        for group in list(self.groups.values()):
            for mid, until in list(group.pending.items()):
                if now_ms >= until:
                    del group.pending[mid]
            for m in list(group.members.values()):
                if m.member_id in group.members and not m.kept_alive and now_ms >= m.expires_ms:
                    self._remove(group, m, now_ms)
            if group.state is State.PREPARING_REBALANCE:
                if group.initial_delay:
                    if now_ms >= group.rebalance_deadline_ms:
                        self._initial_delay_over(group, now_ms)
                elif now_ms >= group.rebalance_deadline_ms:
                    self._complete_join(group, now_ms)
                else:
                    self._maybe_complete_join(group, now_ms)
            elif (group.state is State.COMPLETING_REBALANCE
                  and now_ms >= group.sync_deadline_ms):
                late = [m for m in group.members.values() if m.sync is None]
                for m in late:
                    self._remove(group, m, now_ms, rebalance=False)
                self._prepare_rebalance(group, now_ms)
                self._maybe_complete_join(group, now_ms)

    # ------------------------------------------------------------------ views

    def describe(self, group_id: str) -> GroupView:
        group = self.groups.get(group_id)
        if group is None:
            return GroupView(group_id, State.DEAD, "", "", -1)
        members = tuple(
            MemberView(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                       m.metadata(group.protocol_name),
                       m.assignment if group.state is State.STABLE else b"")
            for m in group.members.values())
        return GroupView(group_id, group.state, group.protocol_type or "",
                         group.protocol_name or "", group.generation_id, members)

    def listing(self) -> list[tuple[str, str, State]]:
        """(group id, protocol type, state) of every group with a member or a past one."""
        return [(g.group_id, g.protocol_type or "", g.state) for g in self.groups.values()]

    # ------------------------------------------------------------------ durable images

    def image(self, group_id: str) -> GroupImage | None:
        """What to store of a group (None: it is gone). Members' metadata is the one of the
        chosen protocol, as Kafka stores it."""
        group = self.groups.get(group_id)
        if group is None:
            return None
        return GroupImage(group.generation_id, group.protocol_type, group.protocol_name,
                          group.leader_id, tuple(
                              MemberImage(m.member_id, m.group_instance_id, m.client_id,
                                          m.client_host, m.session_timeout_ms,
                                          m.rebalance_timeout_ms,
                                          m.metadata(group.protocol_name), m.assignment)
                              for m in group.members.values()), group.told_leader)

    def take_dirty(self) -> list[str]:
        """The groups whose image changed since the last call (to be stored)."""
        out, self.dirty = sorted(self.dirty), set()
        return out

    def load(self, group_id: str, image: GroupImage, now_ms: int) -> None:
        """Bring back a stored group (after a restart): Stable with its members and their
        assignments (Empty without members); sessions start at ``now_ms``."""
        group = self.groups[group_id] = Group(group_id, generation_id=image.generation_id,
                                              protocol_type=image.protocol_type)
        for mi in image.members:
            protocols = ([(image.protocol_name, mi.metadata)]
                         if image.protocol_name is not None else [])
            group.members[mi.member_id] = Member(
                mi.member_id, mi.client_id, mi.client_host, mi.session_timeout_ms,
                mi.rebalance_timeout_ms, protocols, mi.group_instance_id,
                expires_ms=now_ms + mi.session_timeout_ms, assignment=mi.assignment)
            if mi.group_instance_id is not None:
                group.static[mi.group_instance_id] = mi.member_id
        if group.members:
            group.state = State.STABLE
            group.protocol_name = image.protocol_name
            group.leader_id = (image.leader_id if image.leader_id in group.members
                               else next(iter(group.members)))
            # a replaced leader's incarnation told it follows still is after the restart
            group.told_leader = image.told_leader

    def rebalance_unstored(self, group_id: str, now_ms: int) -> None:
        """The group's image could not be stored (a full disk): a Stable group rebalances,
        so that the next generation's assignment is stored again."""
        group = self.groups.get(group_id)
        if group is not None and group.state is State.STABLE:
            self._prepare_rebalance(group, now_ms)
