"""A batch's records encoded from its columns (``strata.format.columns``) in compiled code.

``encode_records`` lays out the records of a batch back to back (headers and trailers left zero
for ``record_batch.seal_records``) from its prefix, key, tag, properties and body columns, after
checking every limit and every text column, so bad input is refused — naming the message —
before anything is written. The compiled work is ``column_kernels``' (``record_lengths``,
``build_records``). Pure: no file I/O.
"""

from __future__ import annotations

import numpy as np

from strata.errors import MessageTooLargeError, PropertiesTooLargeError
from strata.format import record as rec
from strata.format.columns import (_EMPTY_U8, _NO_ITEMS, KEY_ENTRY, MAX_TEXT, TAG_ENTRY,
                                   BytesColumn, check_text, kernels)


class EncodedRecords:
    """A batch's records back to back (``blob``: headers and trailers zero) with each record's
    length (``totals``), body length and properties length (int64 arrays)."""

    __slots__ = ("blob", "totals", "body_lens", "props_lens")

    def __init__(self, blob: np.ndarray, totals: np.ndarray, body_lens: np.ndarray,
                 props_lens: np.ndarray) -> None:
        self.blob, self.totals, self.body_lens, self.props_lens = (
            blob, totals, body_lens, props_lens)


def encode_records(prefix: bytes | list[bytes], bodies: BytesColumn, *,
                   prefix_of: np.ndarray | None = None, keys: BytesColumn | None = None,
                   key_groups: np.ndarray | None = None, tags: BytesColumn | None = None,
                   properties: BytesColumn | None = None, max_body: int,
                   max_record: int) -> EncodedRecords:
    """The records of ``len(bodies)`` messages: ``prefix`` (the fixed header's zeros, born and
    store host, topic: one for all, or a list of them and ``prefix_of``, which one each
    message's record starts with), properties (a KEYS entry per non-empty key, a TAGS
    entry for a non-empty tag, the pre-encoded properties), body, a zero trailer.

    Checks (InvalidInputError / MessageTooLargeError naming the message) every length limit
    and that keys and tags are well-formed UTF-8; ``properties`` must already be checked
    (``properties_column``).

    Every length and limit is one compiled pass (``record_lengths``), then the records another
    (``build_records``): two calls where a numpy pass per length and limit took ~25 (on a batch
    of 1,024 rich messages those cost more than laying out the records). A batch past some
    limit goes to ``_encode_checked``, which finds the first problem and names it."""
    k = kernels()
    n = len(bodies)
    key_data, key_off, groups = ((keys.data, keys.offsets, key_groups)
                                 if keys is not None and len(keys) else
                                 (_EMPTY_U8, _NO_ITEMS, np.zeros(n + 1, np.int64)))
    tag_data, tag_off = (tags.data, tags.offsets) if tags is not None else (_EMPTY_U8, _NO_ITEMS)
    prop_data, prop_off = ((properties.data, properties.offsets) if properties is not None
                           else (_EMPTY_U8, _NO_ITEMS))
    if isinstance(prefix, bytes):
        prefix_data = np.frombuffer(prefix, np.uint8)
        prefix_off = np.array([0, len(prefix)], np.int64)
        prefix_of = np.zeros(n, np.int64)
    else:
        pc = BytesColumn.of(prefix)
        prefix_data, prefix_off = pc.data, pc.offsets
    lens = np.empty((3, n), np.int64)
    body_lens, props_lens, totals = lens
    limits = np.array([max_body, MAX_TEXT, rec.MAX_PROPERTIES_BYTES, max_record], np.int64)
    size = k.record_lengths(prefix_off, prefix_of, bodies.offsets, key_off, groups, tag_off,
                            prop_off, limits, body_lens, props_lens, totals)
    if size < 0:   # some length past its limit: the checked path names the first
        return _encode_checked(prefix, bodies, prefix_of=prefix_of, keys=keys,
                               key_groups=key_groups, tags=tags, properties=properties,
                               max_body=max_body, max_record=max_record)
    if keys is not None and len(keys):
        check_text(keys, "key")
    if tags is not None:
        check_text(tags, "tag")
    out = np.empty(size, np.uint8)
    made = np.empty(n, np.int64)
    end = k.build_records(prefix_data, prefix_off, prefix_of, bodies.data, bodies.offsets,
                          key_data, key_off, groups, tag_data, tag_off, prop_data, prop_off,
                          made, out)
    assert end == size
    return EncodedRecords(out, totals, body_lens, props_lens)


def _encode_checked(prefix: bytes | list[bytes], bodies: BytesColumn, *,
                    prefix_of: np.ndarray | None = None, keys: BytesColumn | None = None,
                    key_groups: np.ndarray | None = None, tags: BytesColumn | None = None,
                    properties: BytesColumn | None = None, max_body: int,
                    max_record: int) -> EncodedRecords:
    """``encode_records`` with each limit checked by numpy in turn, so that the first problem
    (in the order: body, keys, tags, properties, record) is the one named."""
    n = len(bodies)
    body_lens = bodies.lengths()
    if n and int(body_lens.max()) > max_body:
        i = int(np.argmax(body_lens))
        raise MessageTooLargeError(f"message {i}: body of {int(body_lens[i])} bytes exceeds "
                                   f"max_body_size {max_body}")
    props_lens = np.zeros(n, np.int64)
    if keys is not None and len(keys):
        check_text(keys, "key")
        klen = keys.lengths()
        if int(klen.max()) > MAX_TEXT:
            raise MessageTooLargeError("a message key is longer than 65535 encoded bytes")
        cost = np.where(klen > 0, klen + KEY_ENTRY, 0)
        csum = np.zeros(len(cost) + 1, np.int64)
        np.cumsum(cost, out=csum[1:])
        props_lens += csum[key_groups[1:]] - csum[key_groups[:-1]]
        key_data, key_off = keys.data, keys.offsets
    else:
        key_data, key_off = _EMPTY_U8, _NO_ITEMS
        key_groups = np.zeros(n + 1, np.int64)
    if tags is not None:
        check_text(tags, "tag")
        tlen = tags.lengths()
        if n and int(tlen.max()) > MAX_TEXT:
            raise MessageTooLargeError("tags are longer than 65535 encoded bytes")
        props_lens += np.where(tlen > 0, tlen + TAG_ENTRY, 0)
        tag_data, tag_off = tags.data, tags.offsets
    else:
        tag_data, tag_off = _EMPTY_U8, _NO_ITEMS
    if properties is not None:
        props_lens += properties.lengths()
        prop_data, prop_off = properties.data, properties.offsets
    else:
        prop_data, prop_off = _EMPTY_U8, _NO_ITEMS
    if n and int(props_lens.max()) > rec.MAX_PROPERTIES_BYTES:
        i = int(np.argmax(props_lens))
        raise PropertiesTooLargeError(
            f"message {i}: properties take {int(props_lens[i])} encoded bytes; the limit is "
            f"{rec.MAX_PROPERTIES_BYTES}")
    if isinstance(prefix, bytes):
        prefixes = BytesColumn(prefix, [0, len(prefix)])
        prefix_of = np.zeros(n, np.int64)
        prefix_lens = len(prefix)
    else:
        prefixes = BytesColumn.of(prefix)
        prefix_lens = prefixes.lengths()[prefix_of]
    totals = body_lens + props_lens + prefix_lens + rec.TRAILER_SIZE
    if n and int(totals.max()) > max_record:
        i = int(np.argmax(totals))
        raise MessageTooLargeError(f"message {i}: its record of {int(totals[i])} bytes cannot "
                                   f"fit a segment")
    out = np.empty(int(totals.sum()), np.uint8)
    made = np.empty(n, np.int64)
    kernels().build_records(prefixes.data, prefixes.offsets, prefix_of, bodies.data,
                            bodies.offsets,
                            key_data, key_off, key_groups, tag_data, tag_off, prop_data,
                            prop_off, made, out)
    assert (made == totals).all()
    return EncodedRecords(out, totals, body_lens, props_lens)
