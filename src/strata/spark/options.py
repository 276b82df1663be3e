"""Option parsing for the strata Spark data source: plain Python, no Spark, errors name the option.

Spark hands options over as strings in a case-insensitive dict; everything is parsed and checked
here at planning time so a bad option fails before any task runs.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from typing import Mapping

from strata.errors import InvalidInputError

EARLIEST = -2  # Kafka's JSON codes inside startingOffsets / endingOffsets
LATEST = -1
DEFAULT_MAX_RECORDS_PER_BATCH = 65536
# verifyCrc: check each record's CRC32C as it is read (docs/spark.md, "Damaged records")
DEFAULT_VERIFY_CRC = True

TIMESTAMP_STRATEGIES = ("error", "latest")  # startingOffsetsByTimestampStrategy (Kafka's)


class OptionError(InvalidInputError):
    """A data source option is missing, malformed or contradicts another; names the option."""

    def __init__(self, option: str, problem: str) -> None:
        self.option = option
        super().__init__(f"strata data source option '{option}': {problem}")


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): v for k, v in options.items()}


def _bool(opts: dict, name: str, default: bool) -> bool:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    v = str(raw).strip().lower()
    if v in ("true", "1", "yes"):
        return True
    if v in ("false", "0", "no"):
        return False
    raise OptionError(name, f"must be true or false, got {raw!r}")


def _positive_int(opts: dict, name: str, default: int | None) -> int | None:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    try:
        v = int(str(raw).strip())
    except ValueError:
        raise OptionError(name, f"must be a positive integer, got {raw!r}") from None
    if v < 1:
        raise OptionError(name, f"must be a positive integer, got {raw!r}")
    return v


def _path(opts: dict) -> str:
    path = opts.get("path")
    if not path:
        raise OptionError("path", "is required: the store directory "
                                  "(.option('path', DIR) or .load(DIR) / .save(DIR))")
    return str(path)


OffsetSpec = str | dict  # "earliest" | "latest" | {topic: {queue_id: offset}}


def _offsets(opts: dict, name: str, default: str, *, allow_earliest: bool,
             allow_latest: bool) -> OffsetSpec:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    text = str(raw).strip()
    if text.lower() in ("earliest", "latest"):
        word = text.lower()
        if (word == "earliest" and not allow_earliest) or (word == "latest" and not allow_latest):
            raise OptionError(name, f"{word!r} is not allowed here")
        return word
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError:
        raise OptionError(name, 'must be "earliest", "latest" or JSON like '
                                f'{{"topic": {{"0": 23, "1": -2}}}}, got {text!r}') from None
    if not isinstance(parsed, dict) or not parsed:
        raise OptionError(name, f"JSON must be a non-empty object of topics, got {text!r}")
    out: dict[str, dict[int, int]] = {}
    for topic, queues in parsed.items():
        if not isinstance(queues, dict):
            raise OptionError(name, f"topic {topic!r} must map queue ids to offsets, got {queues!r}")
        per: dict[int, int] = {}
        for q, off in queues.items():
            try:
                qid = int(q)
            except (TypeError, ValueError):
                raise OptionError(name, f"queue id {q!r} of topic {topic!r} is not an integer") \
                    from None
            if qid < 0:
                raise OptionError(name, f"queue id {q!r} of topic {topic!r} is negative")
            if not isinstance(off, int) or isinstance(off, bool) or off < EARLIEST:
                raise OptionError(name, f"offset {off!r} of {topic}/{qid} must be an integer "
                                        ">= 0, -2 (earliest) or -1 (latest)")
            if off == EARLIEST and not allow_earliest:
                raise OptionError(name, f"-2 (earliest) is not allowed ({topic}/{qid})")
            if off == LATEST and not allow_latest:
                raise OptionError(name, f"-1 (latest) is not allowed ({topic}/{qid})")
            per[qid] = off
        out[str(topic)] = per
    return out


def _timestamp(opts: dict, name: str) -> int | None:
    raw = opts.get(name.lower())
    if raw is None:
        return None
    try:
        v = int(str(raw).strip())
    except ValueError:
        v = -1
    if v < 0:
        raise OptionError(name, f"must be a timestamp in milliseconds since the epoch "
                                f"(an integer >= 0), got {raw!r}")
    return v


def _timestamps_json(opts: dict, name: str) -> dict[str, dict[int, int]] | None:
    """``{"topic": {"0": 1700000000000}}``: a timestamp (ms) per queue."""
    raw = opts.get(name.lower())
    if raw is None:
        return None
    text = str(raw).strip()
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError:
        parsed = None
    if not isinstance(parsed, dict) or not parsed:
        raise OptionError(name, 'must be JSON like {"topic": {"0": 1700000000000}} (ms since '
                                f"the epoch per queue), got {text!r}")
    out: dict[str, dict[int, int]] = {}
    for topic, queues in parsed.items():
        if not isinstance(queues, dict) or not queues:
            raise OptionError(name, f"topic {topic!r} must map queue ids to timestamps, "
                                    f"got {queues!r}")
        per: dict[int, int] = {}
        for q, ts in queues.items():
            try:
                qid = int(q)
            except (TypeError, ValueError):
                qid = -1
            if qid < 0:
                raise OptionError(name, f"queue id {q!r} of topic {topic!r} is not an integer "
                                        ">= 0")
            if not isinstance(ts, int) or isinstance(ts, bool) or ts < 0:
                raise OptionError(name, f"timestamp {ts!r} of {topic}/{qid} must be an integer "
                                        ">= 0 (ms since the epoch)")
            per[qid] = ts
        out[str(topic)] = per
    return out


@dataclass(frozen=True)
class ReadOptions:
    path: str
    subscribe: tuple[str, ...] | None
    subscribe_pattern: str | None
    assign: dict[str, tuple[int, ...]] | None
    starting: OffsetSpec
    ending: OffsetSpec
    min_partitions: int | None
    max_records_per_batch: int
    include_metadata: bool
    include_headers: bool
    fail_on_data_loss: bool
    # Kafka's timestamp options (ms); per queue they take precedence over the offset options
    starting_timestamp: int | None = None
    starting_by_timestamp: dict[str, dict[int, int]] | None = None
    starting_timestamp_strategy: str = "error"
    ending_timestamp: int | None = None
    ending_by_timestamp: dict[str, dict[int, int]] | None = None
    filter_pushdown: bool = True  # used when Spark's filter pushdown is on
    verify_crc: bool = DEFAULT_VERIFY_CRC
    # a tier read alone (no store directory: ``path`` is ""), README "Tiered storage"
    tier_url: str | None = None
    tier_endpoint_url: str | None = None


def _tier(opts: dict) -> tuple[str | None, str | None]:
    """``tierUrl`` and ``tierEndpointUrl``, checked (the store's own rules for tier_url)."""
    from strata.errors import InvalidConfigError
    from strata.store.tier_url import check_endpoint_url, parse_tier_url

    url, endpoint = opts.get("tierurl"), opts.get("tierendpointurl")
    if url is None:
        if endpoint is not None:
            raise OptionError("tierEndpointUrl", "needs option 'tierUrl' (an s3:// tier)")
        return None, None
    if opts.get("path"):
        raise OptionError("tierUrl", f"give either a store directory (path {opts['path']!r}: "
                                     "its own tier is read with it) or 'tierUrl' (a tier "
                                     "alone), not both")
    try:
        loc = parse_tier_url(str(url), "tierUrl")
        if endpoint is not None:
            if loc.scheme != "s3":
                raise InvalidConfigError(f"tierEndpointUrl={endpoint!r}: only an s3:// tier "
                                         "has an endpoint")
            check_endpoint_url(str(endpoint), "tierEndpointUrl")
    except InvalidConfigError as exc:
        raise OptionError("tierUrl" if endpoint is None or "tierEndpointUrl" not in str(exc)
                          else "tierEndpointUrl", str(exc)) from None
    return loc.url, None if endpoint is None else str(endpoint)


def _misspelt(options: Mapping[str, str], given: list[str]) -> str:
    """'; did you mean ...' for a given option that is a misspelt topic selector
    (``subscibe``): Spark hands a source every option, so a typo is otherwise silent."""
    if given:
        return ""
    names = {"subscribe": "subscribe", "subscribepattern": "subscribePattern",
             "assign": "assign"}
    for key in options:
        near = difflib.get_close_matches(str(key).lower(), names, n=1, cutoff=0.75)
        if near:
            return f"; option {str(key)!r} is not one: did you mean {names[near[0]]!r}?"
    return ""


def parse_read_options(options: Mapping[str, str]) -> ReadOptions:
    opts = _lower(options)
    tier_url, tier_endpoint = _tier(opts)
    if tier_url is None and not opts.get("path"):
        raise OptionError("path", "is required: the store directory (.option('path', DIR) "
                                  "or .load(DIR)), or option 'tierUrl' to read a tier alone")
    path = "" if tier_url is not None else str(opts["path"])
    given = [n for n in ("subscribe", "subscribePattern", "assign") if n.lower() in opts]
    if len(given) != 1:
        raise OptionError("subscribe", "exactly one of 'subscribe', 'subscribePattern' or "
                                       f"'assign' must be given, got {given or 'none'}"
                                       f"{_misspelt(options, given)}")
    subscribe = pattern = assign = None
    if given[0] == "subscribe":
        subscribe = tuple(t.strip() for t in str(opts["subscribe"]).split(",") if t.strip())
        if not subscribe:
            raise OptionError("subscribe", "must list at least one topic (comma separated)")
    elif given[0] == "subscribePattern":
        pattern = str(opts["subscribepattern"])
        try:
            re.compile(pattern)
        except re.error as e:
            raise OptionError("subscribePattern", f"is not a valid Python regex: {e}") from None
    else:
        text = str(opts["assign"])
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError:
            raise OptionError("assign", f'must be JSON like {{"topic": [0, 1]}}, got {text!r}') \
                from None
        if not isinstance(parsed, dict) or not parsed or not all(
                isinstance(v, list) and all(isinstance(q, int) and not isinstance(q, bool)
                                            and q >= 0 for q in v) for v in parsed.values()):
            raise OptionError("assign", f'must be JSON like {{"topic": [0, 1]}}, got {text!r}')
        assign = {str(t): tuple(sorted(set(qs))) for t, qs in parsed.items()}
    starting = _offsets(opts, "startingOffsets", "earliest", allow_earliest=True,
                        allow_latest=True)
    ending = _offsets(opts, "endingOffsets", "latest", allow_earliest=False, allow_latest=True)
    return ReadOptions(
        path=path, subscribe=subscribe, subscribe_pattern=pattern, assign=assign,
        starting=starting, ending=ending,
        min_partitions=_positive_int(opts, "minPartitions", None),
        max_records_per_batch=_positive_int(opts, "maxRecordsPerBatch",
                                            DEFAULT_MAX_RECORDS_PER_BATCH),
        include_metadata=_bool(opts, "includeMetadata", False),
        include_headers=_bool(opts, "includeHeaders", False),
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        starting_timestamp=_timestamp(opts, "startingTimestamp"),
        starting_by_timestamp=_timestamps_json(opts, "startingOffsetsByTimestamp"),
        starting_timestamp_strategy=_strategy(opts),
        ending_timestamp=_timestamp(opts, "endingTimestamp"),
        ending_by_timestamp=_timestamps_json(opts, "endingOffsetsByTimestamp"),
        filter_pushdown=_bool(opts, "filterPushdown", True),
        verify_crc=_bool(opts, "verifyCrc", DEFAULT_VERIFY_CRC),
        tier_url=tier_url, tier_endpoint_url=tier_endpoint,
    )


def _strategy(opts: dict) -> str:
    raw = opts.get("startingoffsetsbytimestampstrategy")
    if raw is None:
        return "error"
    v = str(raw).strip().lower()
    if v not in TIMESTAMP_STRATEGIES:
        raise OptionError("startingOffsetsByTimestampStrategy",
                          f"must be 'error' or 'latest', got {raw!r}")
    return v


@dataclass(frozen=True)
class WriteOptions:
    path: str
    topic: str | None


def parse_write_options(options: Mapping[str, str]) -> WriteOptions:
    opts = _lower(options)
    topic = opts.get("topic")
    if topic is not None:
        from strata.format.record import encode_topic
        try:
            encode_topic(str(topic))
        except ValueError as e:
            raise OptionError("topic", str(e)) from None
    return WriteOptions(path=_path(opts), topic=None if topic is None else str(topic))


# ---------------------------------------------------------------- streaming read

DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60 * 1000   # Kafka's default for maxTriggerDelay: 15m
_DURATION = re.compile(r"(\d+)\s*(ms|s|sec|m|min|h|d)?", re.IGNORECASE)
_DURATION_UNIT_MS = {"": 1, "ms": 1, "s": 1000, "sec": 1000, "m": 60_000, "min": 60_000,
                     "h": 3_600_000, "d": 86_400_000}


def _duration_ms(opts: dict, name: str, default_ms: int) -> int:
    """A duration like Spark's time strings: ``500ms``, ``10s``, ``15m``, ``1h``, ``2d``;
    a bare number is milliseconds."""
    raw = opts.get(name.lower())
    if raw is None:
        return default_ms
    m = _DURATION.fullmatch(str(raw).strip())
    if m is None:
        raise OptionError(name, f"must be a duration like 500ms, 30s, 15m, 1h or 2d "
                                f"(a bare number is milliseconds), got {raw!r}")
    return int(m.group(1)) * _DURATION_UNIT_MS[(m.group(2) or "").lower()]


@dataclass(frozen=True)
class StreamReadOptions:
    """Options of ``spark.readStream.format("strata")``: the batch read options (with
    ``startingOffsets`` defaulting to latest) plus the per-trigger limits."""
    read: ReadOptions
    max_offsets_per_trigger: int | None
    min_offsets_per_trigger: int | None
    max_trigger_delay_ms: int


def parse_stream_read_options(options: Mapping[str, str]) -> StreamReadOptions:
    from dataclasses import replace

    opts = _lower(options)
    if "tierurl" in opts:
        raise OptionError("tierUrl", "a tier alone is read in batch (spark.read); a stream "
                                     "reads a store directory")
    for name in ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp"):
        if name.lower() in opts:
            raise OptionError(name, "is for batch reads only; a stream has no end "
                                    "(use trigger(availableNow=True) to stop at the data "
                                    "present when the query starts)")
    read = parse_read_options(options)
    if "startingoffsets" not in opts:
        read = replace(read, starting="latest")   # Kafka: streams start at latest by default
    max_rows = _positive_int(opts, "maxOffsetsPerTrigger", None)
    min_rows = _positive_int(opts, "minOffsetsPerTrigger", None)
    if max_rows is not None and min_rows is not None and min_rows > max_rows:
        raise OptionError("minOffsetsPerTrigger", f"{min_rows} is larger than "
                                                  f"maxOffsetsPerTrigger {max_rows}")
    return StreamReadOptions(
        read=read, max_offsets_per_trigger=max_rows, min_offsets_per_trigger=min_rows,
        max_trigger_delay_ms=_duration_ms(opts, "maxTriggerDelay", DEFAULT_MAX_TRIGGER_DELAY_MS))
