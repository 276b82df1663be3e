"""Prometheus metrics of ``strata serve --metrics HOST:PORT`` (prometheus-client, the broker
extra): what the requests did (counted by each protocol's layer around its handlers), the
store's put batches and their flush latency, and — computed at each scrape from the
consumer-group state — every group's lag and deliveries in flight, and the lag of the groups
that commit offsets (Kafka consumers). docs/broker.md lists them.
"""

from __future__ import annotations

from typing import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from strata.broker.group_state import ConsumerGroups
from strata.store.message_store import MessageStore

# fsync waits run from well under a millisecond (an idle SSD) to seconds (a busy disk)
FLUSH_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)


class GroupCollector(Collector):
    """Per consumer group and topic, at scrape time: lag (messages stored and not acked:
    the queues' max offset minus the group's first offset not acked) and in-flight
    deliveries (receipts handed out and not acked)."""

    def __init__(self, store: MessageStore, groups: ConsumerGroups) -> None:
        self.store = store
        self.groups = groups

    def collect(self) -> Iterator[GaugeMetricFamily]:
        lag = GaugeMetricFamily("strata_group_lag", "Messages of the topic the group has not "
                                "acked yet (queue max offset minus the first offset not acked, "
                                "summed over the topic's queues)", labels=["topic", "group"])
        flying = GaugeMetricFamily("strata_group_inflight", "Deliveries handed out to the "
                                   "group and not acked yet (live receipt handles)",
                                   labels=["topic", "group"])
        # a copy taken in one step: the event loop changes the dict while we read
        queues = list(self.groups.queues.items())
        done: dict[tuple[str, str], dict[int, int]] = {}
        inflight: dict[tuple[str, str], int] = {}
        for (group, topic, qid), q in queues:
            done.setdefault((topic, group), {})[qid] = q.commit_offset()
            inflight[(topic, group)] = inflight.get((topic, group), 0) + len(q.in_flight)
        store = self.store
        for (topic, group), commit in sorted(done.items()):
            behind = 0
            for qid in range(store.queue_count(topic)):
                start = commit.get(qid)
                low = store.min_offset(topic, qid)
                behind += max(0, store.max_offset(topic, qid) - max(low, start or low))
            lag.add_metric([topic, group], behind)
            flying.add_metric([topic, group], inflight[(topic, group)])
        yield lag
        yield flying
        yield self._committed_lag()

    def _committed_lag(self) -> GaugeMetricFamily:
        """Groups that commit offsets (Kafka consumers): per topic, messages past the
        committed offsets (from a queue's oldest message where nothing was committed)."""
        lag = GaugeMetricFamily("strata_group_committed_lag", "Messages of the topic past the "
                                "group's committed offsets (queue max offset minus committed "
                                "offset, summed over the topic's queues; Kafka consumer "
                                "groups)", labels=["topic", "group"])
        store = self.store
        # copies taken in one step each: the event loop changes the dicts while we read
        for group, offsets in sorted(list(self.groups.committed.items())):
            per_topic: dict[str, dict[int, int]] = {}
            for (topic, qid), c in dict(offsets).items():
                per_topic.setdefault(topic, {})[qid] = c.offset
            for topic, done in sorted(per_topic.items()):
                behind = 0
                for qid in range(store.queue_count(topic)):
                    low = store.min_offset(topic, qid)
                    behind += max(0, store.max_offset(topic, qid) - max(low, done.get(qid, low)))
                lag.add_metric([topic, group], behind)
        return lag


class BrokerMetrics:
    """The metrics of one broker, whatever protocols it serves: request and message counters
    (fed by each listener's own layer: ``strata.broker.rocketmq.metrics`` for gRPC), the send
    batcher (``stored``), and the group collector."""

    def __init__(self, store: MessageStore, groups: ConsumerGroups) -> None:
        self.registry = r = CollectorRegistry()
        self.flush_sync = store.config.flush == "sync"
        self.requests = Counter("strata_requests", "RPCs answered, by method and protocol "
                                "status code", ["method", "code"], registry=r)
        self.sent = Counter("strata_messages_sent", "Messages stored by SendMessage",
                            ["topic"], registry=r)
        self.sent_bytes = Counter("strata_sent_bytes", "Body bytes of the messages stored "
                                  "by SendMessage", ["topic"], registry=r)
        self.received = Counter("strata_messages_received", "Deliveries by ReceiveMessage "
                                "(redeliveries count again)", ["topic", "group"], registry=r)
        self.received_bytes = Counter("strata_received_bytes", "Body bytes delivered by "
                                      "ReceiveMessage", ["topic", "group"], registry=r)
        self.acked = Counter("strata_messages_acked", "Deliveries acknowledged by AckMessage",
                             ["topic", "group"], registry=r)
        self.put_batches = Counter("strata_put_batches", "put_batch calls of the send path "
                                   "(messages sent / batches = group commit size)", registry=r)
        self.flush_latency = Histogram(
            "strata_flush_latency_seconds", "With --flush sync: time from a put_batch's start "
            "until an fsync covers its messages (the sends' wait for durability)",
            buckets=FLUSH_BUCKETS, registry=r)
        r.register(GroupCollector(store, groups))
        self._http = None
        # labelled children by (metric, labels): labels() costs ~6x an inc() (lock, checks)
        self._children: dict[tuple, object] = {}

    def child(self, metric, *labels: str):
        """The child of ``metric`` with these label values, made once and kept."""
        key = (id(metric), *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    # ------------------------------------------------------------------ the store side

    def stored(self, messages: int, seconds: float) -> None:
        """One put_batch of the send path stored ``messages`` in ``seconds``."""
        self.put_batches.inc()
        if self.flush_sync:
            self.flush_latency.observe(seconds)

    # ------------------------------------------------------------------ the endpoint

    def serve(self, host: str, port: int) -> int:
        """Serve ``/metrics`` over HTTP on a thread; returns the port (0 picks a free one)."""
        self._http, _thread = start_http_server(port, addr=host, registry=self.registry)
        return self._http.server_port

    def close(self) -> None:
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None
