"""The durable image of a classic Kafka group: what Kafka keeps as a GroupMetadata record in
``__consumer_offsets`` — protocol type and name, generation, leader, and per member its ids,
client, timeouts, the metadata of the chosen protocol and its assignment. strata keeps it in
the broker's group journal as a MEMBERS record (``strata.broker.journal``); the bytes are
described in docs/format.md ("Kafka group membership image").

The coordinator (``strata.broker.kafka.groups``) writes an image when a generation's
assignment is complete (the leader's SyncGroup), when the group empties, and when a static
member is replaced without a rebalance; a broker that restarts loads each group Stable (or
Empty) with its members, whose session timeouts start again at load, so consumers that keep
heartbeating with their member id go on without a rebalance.

Versions: 1 is the image above; 2 adds, after the leader, the leader the members were told
when a static replacement of the leader answered its new incarnation as a follower
(``Group.told_leader``; kept so that its repeated JoinGroup after a broker restart is still a
follower's, no rebalance). An image is written as version 1 whenever it has no told leader
(byte for byte as before), so only a group in that state needs a strata that reads 2; both
versions load.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from strata.broker.errors import CorruptJournalError

IMAGE_VERSION = 1                    # an image without a told leader
TOLD_LEADER_VERSION = 2              # one with it (a string after the leader)
_HEAD = struct.Struct("<BiI")        # image version, generation id, member count
_STR = struct.Struct("<H")           # string length; 0xFFFF: null
_BYTES = struct.Struct("<I")         # byte-string length
_TIMEOUTS = struct.Struct("<ii")     # session timeout ms, rebalance timeout ms
NULL = 0xFFFF


@dataclass(frozen=True)
class MemberImage:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    metadata: bytes          # the member's metadata for the group's protocol
    assignment: bytes


@dataclass(frozen=True)
class GroupImage:
    generation_id: int
    protocol_type: str | None
    protocol_name: str | None
    leader_id: str | None
    members: tuple[MemberImage, ...] = ()
    # the leader id the members were told, when it is not ``leader_id`` (a replaced static
    # leader's new incarnation was told it follows); None otherwise
    told_leader: str | None = None


def _str(s: str | None) -> bytes:
    if s is None:
        return _STR.pack(NULL)
    b = s.encode()
    if len(b) >= NULL:
        raise ValueError(f"string of {len(b)} bytes is too long for a group image")
    return _STR.pack(len(b)) + b


def _bytes(b: bytes) -> bytes:
    return _BYTES.pack(len(b)) + b


def encode(image: GroupImage) -> bytes:
    """The image's bytes (never empty: an empty image means a deleted group)."""
    told = image.told_leader is not None
    out = [_HEAD.pack(TOLD_LEADER_VERSION if told else IMAGE_VERSION, image.generation_id,
                      len(image.members)),
           _str(image.protocol_type), _str(image.protocol_name), _str(image.leader_id)]
    if told:
        out.append(_str(image.told_leader))
    for m in image.members:
        out += [_str(m.member_id), _str(m.group_instance_id), _str(m.client_id),
                _str(m.client_host), _TIMEOUTS.pack(m.session_timeout_ms,
                                                    m.rebalance_timeout_ms),
                _bytes(m.metadata), _bytes(m.assignment)]
    return b"".join(out)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, st: struct.Struct) -> tuple:
        v = st.unpack_from(self.data, self.pos)
        self.pos += st.size
        return v

    def raw(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise ValueError("a length runs past the end of the image")
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return bytes(b)

    def str(self) -> str | None:
        (n,) = self.take(_STR)
        return None if n == NULL else self.raw(n).decode()

    def bytes(self) -> bytes:
        (n,) = self.take(_BYTES)
        return self.raw(n)


def decode(data: bytes, group: str = "") -> GroupImage:
    """An image from its bytes; ``CorruptJournalError`` naming the group if they do not
    parse whole (the journal's CRC held, so this is a bug or a newer strata's image)."""
    try:
        r = _Reader(data)
        version, generation, n = r.take(_HEAD)
        if version not in (IMAGE_VERSION, TOLD_LEADER_VERSION):
            raise ValueError(f"image version {version} is not one this strata reads")
        ptype, pname, leader = r.str(), r.str(), r.str()
        told = r.str() if version == TOLD_LEADER_VERSION else None
        members = []
        for _ in range(n):
            mid, iid, cid, host = r.str(), r.str(), r.str(), r.str()
            session, rebalance = r.take(_TIMEOUTS)
            members.append(MemberImage(mid or "", iid, cid or "", host or "", session,
                                       rebalance, r.bytes(), r.bytes()))
        if r.pos != len(data):
            raise ValueError(f"{len(data) - r.pos} bytes too many")
    except (ValueError, struct.error, UnicodeDecodeError) as exc:
        raise CorruptJournalError(f"membership image of group {group!r} does not parse: "
                                  f"{exc}") from None
    return GroupImage(generation, ptype, pname, leader, tuple(members), told)
