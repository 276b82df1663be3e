"""A registered client of a ref store: the handle one queue (or other owner) writes through."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterable, Sequence

from strata.format import refstore_record as rec

from .batch_split import split_pairs
from .errors import ClientTerminatedError

if TYPE_CHECKING:  # pragma: no cover
    from .store import RefStore

OnDisk = Callable[[list], None]


class StoreClient:
    """Writes, reads, removes and contains for one owner of references.

    Writes and removes are asynchronous: they return at once and the store's server thread
    applies them in order. ``on_disk(msg_ids)`` is called from the store's sync thread once the
    writes are durable (fsynced), or once a write was cancelled by a remove that overtook it.
    """

    __slots__ = ("_store", "ref", "on_disk", "dying_mark", "closed", "_max_body")

    def __init__(self, store: "RefStore", ref: str, on_disk: OnDisk | None) -> None:
        self._store = store
        self.ref = ref
        self.on_disk = on_disk
        self.dying_mark: tuple[int, int] | None = None   # set by the server on delete
        self.closed = False
        self._max_body = store.max_body_size

    def _check_open(self) -> None:
        if self.closed:
            raise ClientTerminatedError(f"client {self.ref!r} has terminated")

    def write(self, msg_id: bytes, body: bytes) -> None:
        """Store ``body`` under ``msg_id``, or add a reference if the id is already stored."""
        self._check_open()
        m = rec.check_msg_id(msg_id)
        b = rec.check_body(body, self._max_body)
        self._store._submit_writes(self, [m], [b])

    def write_batch(self, messages: Iterable[tuple[bytes, bytes]]) -> None:
        """Write many (msg_id, body) pairs in one step (all are checked before any is sent)."""
        self._check_open()
        if type(messages) is not list:
            messages = list(messages)
        split = split_pairs(messages, self._max_body)     # the plain case, compiled
        if split is None:
            ids, bodies = _checked(messages, self._max_body)
            nbytes = None
        else:
            ids, bodies, nbytes = split
        if ids:
            self._store._submit_writes(self, ids, bodies, nbytes)

    def read(self, msg_id: bytes) -> bytes | None:
        """The body stored under ``msg_id``, or None if the store does not hold it."""
        if self.closed:
            self._check_open()
        if type(msg_id) is not bytes or len(msg_id) != rec.MSG_ID_SIZE:
            msg_id = rec.check_msg_id(msg_id)
        return self._store._read(msg_id)

    def read_many(self, msg_ids: Sequence[bytes]) -> list[bytes | None]:
        self._check_open()
        return [self._store._read(rec.check_msg_id(m)) for m in msg_ids]

    def contains(self, msg_id: bytes) -> bool:
        """True if the store holds ``msg_id`` with a reference, after this client's earlier ops."""
        self._check_open()
        return self._store._call_contains(self, rec.check_msg_id(msg_id))

    def remove(self, msg_ids: Iterable[bytes]) -> None:
        """Drop one reference to each id (a write still in flight is cancelled instead)."""
        self._check_open()
        ids = [m if type(m) is bytes and len(m) == 16 else rec.check_msg_id(m)
               for m in _as_list(msg_ids)]
        if ids:
            self._store._submit_removes(self, ids)

    def terminate(self) -> None:
        """Return once everything this client issued is applied and its confirms delivered.

        The client's ref stays registered with the store (and is saved at clean shutdown).
        """
        self._check_open()
        self.closed = True
        self._store._call_terminate(self)

    def delete_and_terminate(self) -> None:
        """Deregister without waiting; in-flight writes of unseen messages are dropped."""
        self._check_open()
        self.closed = True
        self._store._submit_delete(self)

    def __repr__(self) -> str:
        return f"StoreClient(ref={self.ref!r}, closed={self.closed})"


def _as_list(msg_ids) -> list:
    if isinstance(msg_ids, (bytes, bytearray, memoryview)):
        raise rec.InvalidInputError(
            "remove takes an iterable of message ids, not a single id; wrap it in a list")
    return list(msg_ids)


def _checked(pairs, max_body: int) -> tuple[list, list]:
    """(ids, bodies) of a batch checked pair by pair (where ``split_pairs`` did not take it:
    a pair, id or body of another type, or a bad one); the first bad pair raises
    InvalidInputError or MessageTooLargeError naming the problem."""
    ids: list[bytes] = []
    bodies: list[bytes] = []
    for pair in pairs:
        try:
            m, b = pair
        except (TypeError, ValueError):
            raise rec.InvalidInputError(
                f"write_batch takes (msg_id, body) pairs, got {pair!r:.60}") from None
        if type(m) is not bytes or len(m) != rec.MSG_ID_SIZE:
            m = rec.check_msg_id(m)
        if type(b) is not bytes or len(b) > max_body:
            b = rec.check_body(b, max_body)
        ids.append(m)
        bodies.append(b)
    return ids, bodies
