"""The Kafka group APIs: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
OffsetCommit, OffsetFetch, DescribeGroups and ListGroups, registered with the listener's
dispatcher (``strata.broker.kafka.api``).

They translate requests to the pure coordinator (``strata.broker.kafka.groups``) and to the
broker's protocol-neutral committed offsets (``strata.broker.group_state``, written durably
off the event loop by ``strata.broker.offset_commits``). This broker is one node, so it is
every group's coordinator. A request that waits (JoinGroup, SyncGroup) awaits a future the
coordinator resolves; the coordinator's deadlines (session and rebalance timeouts) are one
``loop.call_at`` timer, moved whenever the next deadline changes.

Group membership is durable: the images the coordinator marks (``Coordinator.dirty``) go to
the group journal through the same writer as committed offsets, and a SyncGroup (or a static
member's JoinGroup answered without a rebalance) is answered once its group's image is
stored; the service loads the stored images when it starts (``Coordinator.load``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from kafka.protocol.admin.groups import (DescribeGroupsRequest, DescribeGroupsResponse,
                                         ListGroupsRequest, ListGroupsResponse)
from kafka.protocol.consumer.group import (HeartbeatRequest, HeartbeatResponse,
                                           JoinGroupRequest, JoinGroupResponse,
                                           LeaveGroupRequest, LeaveGroupResponse,
                                           OffsetCommitRequest, OffsetCommitResponse,
                                           OffsetFetchRequest, OffsetFetchResponse,
                                           SyncGroupRequest, SyncGroupResponse)
from kafka.protocol.metadata.find_coordinator import (FindCoordinatorRequest,
                                                      FindCoordinatorResponse)

from strata.broker.acl import Kind, Perm
from strata.broker.group_state import Committed, ConsumerGroups
from strata.broker.kafka import group_image
from strata.broker.kafka import groups as g
from strata.broker.kafka.api import RequestContext, handles
from strata.broker.kafka.errors import (COORDINATOR_NOT_AVAILABLE, GROUP_AUTHORIZATION_FAILED,
                                       TOPIC_AUTHORIZATION_FAILED, UNKNOWN_TOPIC_OR_PARTITION)
from strata.broker.kafka.groups import Coordinator, Pending, State
from strata.broker.kafka.sasl import allowed
from strata.broker.offset_commits import CommitWriter
from strata.store.message_store import MessageStore

log = logging.getLogger(__name__)

OFFSET_METADATA_TOO_LARGE = 12
MAX_METADATA = 4096            # Kafka's offset.metadata.max.bytes
GROUP_KEY, TRANSACTION_KEY = 0, 1

_JoinMember = JoinGroupResponse.JoinGroupResponseMember
_CommitTopic = OffsetCommitResponse.OffsetCommitResponseTopic
_CommitPartition = _CommitTopic.OffsetCommitResponsePartition
_FetchTopic = OffsetFetchResponse.OffsetFetchResponseTopic
_FetchPartition = _FetchTopic.OffsetFetchResponsePartition
_Described = DescribeGroupsResponse.DescribedGroup
_DescribedMember = _Described.DescribedGroupMember
_Listed = ListGroupsResponse.ListedGroup
_LeftMember = LeaveGroupResponse.MemberResponse
_Coordinator = FindCoordinatorResponse.Coordinator


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


class GroupService:
    """The Kafka groups of one listener: the coordinator, its timer and the commit writer."""

    def __init__(self, store: MessageStore, groups: ConsumerGroups, *, flush_sync: bool,
                 coordinator: Coordinator | None = None) -> None:
        self.store = store
        self.groups = groups
        self.coord = coordinator or Coordinator()
        self.writer = CommitWriter(groups, sync=flush_sync)
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: int | None = None
        self._storing: dict[str, asyncio.Future] = {}     # group -> its latest image's store
        now = _now_ms()
        for gid, data in sorted(groups.memberships.items()):
            self.coord.load(gid, group_image.decode(data, gid), now)
        self.loaded = len(groups.memberships)

    # ------------------------------------------------------------------ durable membership

    def _store_dirty(self) -> None:
        """Start storing the image of every group the coordinator marked (in order, through
        the commit writer)."""
        for gid in self.coord.take_dirty():
            image = self.coord.image(gid)
            data = group_image.encode(image) if image is not None else b""
            fut = asyncio.ensure_future(self.writer.store_membership(gid, data))
            self._storing[gid] = fut
            fut.add_done_callback(lambda f, gid=gid: self._stored(gid, f))

    def _stored(self, gid: str, fut: asyncio.Future) -> None:
        if self._storing.get(gid) is fut:
            del self._storing[gid]
        if fut.cancelled():
            return
        exc = fut.exception()
        if exc is not None:
            log.error("membership of Kafka group %r not stored: %s", gid, exc)
            self.coord.rebalance_unstored(gid, _now_ms())
            self.touched()

    async def stored(self, group_id: str) -> int:
        """Wait until the group's latest image is stored; NONE, or the error to answer
        (COORDINATOR_NOT_AVAILABLE: the journal refused it, and the group rebalances)."""
        self._store_dirty()
        fut = self._storing.get(group_id)
        if fut is None:
            return g.NONE
        try:
            await asyncio.shield(fut)
        except OSError:
            return COORDINATOR_NOT_AVAILABLE
        return g.NONE

    # ------------------------------------------------------------------ time

    def touched(self) -> None:
        """After each coordinator call: run what is due, and move the timer to the next
        deadline."""
        now = _now_ms()
        nd = self.coord.next_deadline()
        if nd is not None and nd <= now:
            self.coord.tick(now)
            nd = self.coord.next_deadline()
        if self.coord.dirty:
            self._store_dirty()
        if nd == self._timer_at:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_at = nd
        if nd is not None:
            loop = asyncio.get_running_loop()
            # loop.time() is monotonic seconds, as _now_ms
            self._timer = loop.call_at(loop.time() + (nd - now) / 1000, self._fire)

    def _fire(self) -> None:
        self._timer = self._timer_at = None
        self.touched()

    @staticmethod
    async def wait(pending: Pending):
        if pending.done:
            return pending.result
        fut = asyncio.get_running_loop().create_future()
        pending.add_done_callback(lambda r: fut.done() or fut.set_result(r))
        return await fut

    async def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._store_dirty()
        for fut in list(self._storing.values()):
            try:
                await asyncio.shield(fut)
            except OSError:
                pass            # logged by _stored
        await self.writer.close()


def service(ctx: RequestContext) -> GroupService:
    """The listener's group service (made on first use from the broker's shared state)."""
    broker = ctx.broker
    svc = broker.state.get("groups")
    if svc is None:
        delay = broker.cfg.kafka_initial_rebalance_delay_ms
        svc = broker.state["groups"] = GroupService(
            broker.store, broker.groups, flush_sync=broker.flush_sync,
            coordinator=Coordinator(initial_rebalance_delay_ms=delay))
    return svc


def _group_allowed(ctx: RequestContext, group: str, perm: Perm) -> bool:
    return allowed(ctx, Kind.GROUP, group, perm)


# ---------------------------------------------------------------------- FindCoordinator


@handles(10, 0, 4, flexible_from=3)
async def find_coordinator(ctx: RequestContext, req: FindCoordinatorRequest):
    v = ctx.api_version
    host, port = ctx.broker.host, ctx.broker.port
    node = ctx.broker.node_id
    keys = req.coordinator_keys if v >= 4 else [req.key]
    key_type = req.key_type if v >= 1 else GROUP_KEY
    answers = []
    for key in keys:
        if key_type != GROUP_KEY:
            answers.append((key, COORDINATOR_NOT_AVAILABLE, "transactions are not supported"))
        elif not _group_allowed(ctx, key, Perm.ANY):
            answers.append((key, GROUP_AUTHORIZATION_FAILED, f"group {key!r} is not allowed"))
        else:
            answers.append((key, g.NONE, None))
    if v >= 4:
        return FindCoordinatorResponse(version=v, throttle_time_ms=0, coordinators=[
            _Coordinator(key=k, node_id=node if e == 0 else -1, host=host if e == 0 else "",
                         port=port if e == 0 else -1, error_code=e, error_message=m)
            for k, e, m in answers])
    _k, e, m = answers[0]
    return FindCoordinatorResponse(version=v, throttle_time_ms=0, error_code=e,
                                   error_message=m, node_id=node if e == 0 else -1,
                                   host=host if e == 0 else "", port=port if e == 0 else -1)


# ---------------------------------------------------------------------- join, sync, beat, leave


@handles(11, 0, 7, flexible_from=6)
async def join_group(ctx: RequestContext, req: JoinGroupRequest):
    v = ctx.api_version
    svc = service(ctx)
    if not _group_allowed(ctx, req.group_id, Perm.SUB):
        r = g.JoinResult(GROUP_AUTHORIZATION_FAILED, member_id=req.member_id)
    else:
        pending = svc.coord.join(
            req.group_id, req.member_id, client_id=ctx.client_id or "",
            client_host="/" + ctx.peer.rpartition(":")[0],
            session_timeout_ms=req.session_timeout_ms,
            rebalance_timeout_ms=req.rebalance_timeout_ms if v >= 1 else req.session_timeout_ms,
            protocol_type=req.protocol_type,
            protocols=[(p.name, bytes(p.metadata)) for p in req.protocols],
            now_ms=_now_ms(), require_known_member_id=v >= 4,
            group_instance_id=req.group_instance_id if v >= 5 else None)
        svc.touched()
        r = await svc.wait(pending)
        if r.error == g.NONE and r.replaced:
            # a static member replaced in a Stable group: answered once the group's image
            # (with its new member id) is stored
            err = await svc.stored(req.group_id)
            if err:
                r = g.JoinResult(err, member_id=r.member_id)
    return JoinGroupResponse(
        version=v, throttle_time_ms=0, error_code=r.error, generation_id=r.generation_id,
        protocol_type=r.protocol_type, protocol_name=r.protocol_name if v >= 7 else
        (r.protocol_name or ""), leader=r.leader, member_id=r.member_id,
        members=[_JoinMember(member_id=m, group_instance_id=i, metadata=meta)
                 for m, i, meta in r.members])


@handles(14, 0, 5, flexible_from=4)
async def sync_group(ctx: RequestContext, req: SyncGroupRequest):
    v = ctx.api_version
    svc = service(ctx)
    if not _group_allowed(ctx, req.group_id, Perm.SUB):
        r = g.SyncResult(GROUP_AUTHORIZATION_FAILED)
    else:
        pending = svc.coord.sync(
            req.group_id, req.generation_id, req.member_id,
            {a.member_id: bytes(a.assignment) for a in req.assignments}, _now_ms(),
            protocol_type=req.protocol_type if v >= 5 else None,
            protocol_name=req.protocol_name if v >= 5 else None,
            group_instance_id=req.group_instance_id if v >= 3 else None)
        svc.touched()
        r = await svc.wait(pending)
        if r.error == g.NONE:
            err = await svc.stored(req.group_id)    # the generation's assignment is durable
            if err:
                r = g.SyncResult(err)
    return SyncGroupResponse(version=v, throttle_time_ms=0, error_code=r.error,
                             protocol_type=r.protocol_type, protocol_name=r.protocol_name,
                             assignment=r.assignment)


@handles(12, 0, 4, flexible_from=4)
async def heartbeat(ctx: RequestContext, req: HeartbeatRequest):
    svc = service(ctx)
    if not _group_allowed(ctx, req.group_id, Perm.SUB):
        err = GROUP_AUTHORIZATION_FAILED
    else:
        err = svc.coord.heartbeat(req.group_id, req.generation_id, req.member_id, _now_ms(),
                                  req.group_instance_id if ctx.api_version >= 3 else None)
        svc.touched()
    return HeartbeatResponse(version=ctx.api_version, throttle_time_ms=0, error_code=err)


@handles(13, 0, 5, flexible_from=4)
async def leave_group(ctx: RequestContext, req: LeaveGroupRequest):
    v = ctx.api_version
    svc = service(ctx)
    ids = ([(m.member_id, m.group_instance_id) for m in req.members] if v >= 3
           else [(req.member_id, None)])
    if not _group_allowed(ctx, req.group_id, Perm.SUB):
        return LeaveGroupResponse(version=v, throttle_time_ms=0,
                                  error_code=GROUP_AUTHORIZATION_FAILED, members=[])
    now = _now_ms()
    errors = [svc.coord.leave(req.group_id, mid, now, iid) for mid, iid in ids]
    svc.touched()
    if v < 3:
        return LeaveGroupResponse(version=v, throttle_time_ms=0, error_code=errors[0])
    return LeaveGroupResponse(version=v, throttle_time_ms=0, error_code=g.NONE, members=[
        _LeftMember(member_id=m.member_id, group_instance_id=m.group_instance_id,
                    error_code=e) for m, e in zip(req.members, errors)])


# ---------------------------------------------------------------------- offsets


@handles(8, 2, 8, flexible_from=8)
async def offset_commit(ctx: RequestContext, req: OffsetCommitRequest):
    v = ctx.api_version
    svc = service(ctx)
    group = req.group_id
    if not _group_allowed(ctx, group, Perm.SUB):
        err = GROUP_AUTHORIZATION_FAILED
    else:
        err = svc.coord.check_commit(group, req.generation_id_or_member_epoch, req.member_id,
                                     _now_ms(), req.group_instance_id if v >= 7 else None)
        svc.touched()
    results: list[tuple[str, list[tuple[int, int]]]] = []
    todo: list[tuple[str, int, Committed]] = []
    wall = int(time.time() * 1000)
    for t in req.topics:
        parts: list[tuple[int, int]] = []
        results.append((t.name, parts))
        topic_ok = err == g.NONE and allowed(ctx, Kind.TOPIC, t.name, Perm.SUB)
        n = svc.store.queue_count(t.name) if topic_ok else 0
        for p in t.partitions:
            if err:
                e = err
            elif not topic_ok:
                e = TOPIC_AUTHORIZATION_FAILED
            elif not 0 <= p.partition_index < n:
                e = UNKNOWN_TOPIC_OR_PARTITION
            elif p.committed_metadata is not None and \
                    len(p.committed_metadata.encode()) > MAX_METADATA:
                e = OFFSET_METADATA_TOO_LARGE
            else:
                e = g.NONE
                todo.append((t.name, p.partition_index, Committed(
                    p.committed_offset, p.committed_leader_epoch if v >= 6 else -1,
                    p.committed_metadata, wall)))
            parts.append((p.partition_index, e))
    if todo:
        try:
            await svc.writer.commit(group, todo)
        except OSError:
            results = [(name, [(i, COORDINATOR_NOT_AVAILABLE if e == g.NONE else e)
                               for i, e in parts]) for name, parts in results]
    return OffsetCommitResponse(version=v, throttle_time_ms=0, topics=[
        _CommitTopic(name=name, partitions=[_CommitPartition(partition_index=i, error_code=e)
                                            for i, e in parts])
        for name, parts in results])


@handles(9, 1, 7, flexible_from=6)
async def offset_fetch(ctx: RequestContext, req: OffsetFetchRequest):
    v = ctx.api_version
    svc = service(ctx)
    group = req.group_id
    if not _group_allowed(ctx, group, Perm.SUB):
        if v >= 2:
            return OffsetFetchResponse(version=v, throttle_time_ms=0, topics=[],
                                       error_code=GROUP_AUTHORIZATION_FAILED)
        return OffsetFetchResponse(version=v, topics=[
            _FetchTopic(name=t.name, partitions=[
                _FetchPartition(partition_index=i, committed_offset=-1, metadata="",
                                error_code=GROUP_AUTHORIZATION_FAILED)
                for i in t.partition_indexes]) for t in req.topics])
    committed = svc.groups.committed_offsets(group)
    asked: list[tuple[str, list[int]]]
    if req.topics is None:          # v2+: every topic the group committed
        by_topic: dict[str, list[int]] = {}
        for (t, q) in sorted(committed):
            by_topic.setdefault(t, []).append(q)
        asked = [(t, qs) for t, qs in by_topic.items() if allowed(ctx, Kind.TOPIC, t, Perm.SUB)]
    else:
        asked = [(t.name, list(t.partition_indexes)) for t in req.topics]
    topics = []
    for name, indexes in asked:
        ok = allowed(ctx, Kind.TOPIC, name, Perm.SUB)
        parts = []
        for i in indexes:
            c = committed.get((name, i)) if ok else None
            parts.append(_FetchPartition(
                partition_index=i, committed_offset=c.offset if c else -1,
                committed_leader_epoch=c.leader_epoch if c else -1,
                metadata=c.metadata if c else "",
                error_code=g.NONE if ok else TOPIC_AUTHORIZATION_FAILED))
        topics.append(_FetchTopic(name=name, partitions=parts))
    return OffsetFetchResponse(version=v, throttle_time_ms=0, topics=topics, error_code=g.NONE)


# ---------------------------------------------------------------------- operators' views


@handles(15, 0, 5, flexible_from=5)
async def describe_groups(ctx: RequestContext, req: DescribeGroupsRequest):
    v = ctx.api_version
    svc = service(ctx)
    known = set(svc.groups.committed_groups())
    out = []
    for group in req.groups:
        if not _group_allowed(ctx, group, Perm.ANY):
            out.append(_Described(error_code=GROUP_AUTHORIZATION_FAILED, group_id=group,
                                  group_state="", protocol_type="", protocol_data="",
                                  members=[]))
            continue
        view = svc.coord.describe(group)
        state = view.state
        if state is State.DEAD and group in known:
            state = State.EMPTY            # only committed offsets: an Empty group
        out.append(_Described(
            error_code=g.NONE, group_id=group, group_state=state.value,
            protocol_type=view.protocol_type, protocol_data=view.protocol_name,
            members=[_DescribedMember(member_id=m.member_id,
                                      group_instance_id=m.group_instance_id,
                                      client_id=m.client_id, client_host=m.client_host,
                                      member_metadata=m.metadata,
                                      member_assignment=m.assignment)
                     for m in view.members]))
    return DescribeGroupsResponse(version=v, throttle_time_ms=0, groups=out)


@handles(16, 0, 4, flexible_from=3)
async def list_groups(ctx: RequestContext, req: ListGroupsRequest):
    v = ctx.api_version
    svc = service(ctx)
    wanted = {s.lower() for s in (req.states_filter or ())} if v >= 4 else set()
    listed = {gid: (ptype, state) for gid, ptype, state in svc.coord.listing()}
    for gid in svc.groups.committed_groups():
        listed.setdefault(gid, ("", State.EMPTY))
    return ListGroupsResponse(version=v, throttle_time_ms=0, error_code=g.NONE, groups=[
        _Listed(group_id=gid, protocol_type=ptype, group_state=state.value)
        for gid, (ptype, state) in sorted(listed.items())
        if (not wanted or state.value.lower() in wanted)
        and _group_allowed(ctx, gid, Perm.ANY)])
