"""Prometheus metrics of a running broker, with prometheus_client.

Counters of the request path (per API: requests, errors, a latency histogram) are updated
as requests are answered (a dict lookup and an increment each). Everything about topics and
groups is read when scraped, from each partition's `Log.metrics()`, so serving costs nothing
per record; a scrape costs one metrics call per partition plus one small due-order read per
(consumer group, partition) for the age of its oldest due record.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import generate_latest

if TYPE_CHECKING:
    from ..state import BrokerState

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                   2.5, 5.0, 10.0, 30.0)


class BrokerMetrics:
    """The broker's registry: request counters and a collector over the topics."""

    def __init__(self, state: BrokerState):
        self.state = state
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter("kdelay_broker_requests", "Requests answered, by API",
                                ["api"], registry=self.registry)
        self.errors = Counter("kdelay_broker_request_errors",
                              "Requests that failed inside the broker, by API",
                              ["api"], registry=self.registry)
        self.latency = Histogram("kdelay_broker_request_seconds",
                                 "Time to answer a request, by API", ["api"],
                                 buckets=LATENCY_BUCKETS, registry=self.registry)
        self.registry.register(_TopicCollector(state))
        self._names = {key: (api.name or str(key)) for key, api in
                       state.dispatcher.apis.items()}
        self._children: dict[int, tuple] = {}

    def observe(self, api_key: int, error: str | None, seconds: float) -> None:
        """The dispatcher's observer: one answered request."""
        children = self._children.get(api_key)
        if children is None:
            name = self._names.get(api_key, str(api_key))
            children = (self.requests.labels(name), self.errors.labels(name),
                        self.latency.labels(name))
            self._children[api_key] = children
        children[0].inc()
        if error is not None:
            children[1].inc()
        children[2].observe(seconds)

    def exposition(self) -> bytes:
        """The text format Prometheus scrapes."""
        return generate_latest(self.registry)


def _gauge(name: str, doc: str, labels: list[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=labels)


class _TopicCollector:
    """Per partition, per group and connection gauges, read at scrape time."""

    def __init__(self, state: BrokerState):
        self.state = state

    def describe(self) -> list:
        return []  # values are read at scrape time only

    def collect(self) -> Iterator[GaugeMetricFamily]:
        part = ["topic", "partition"]
        group = ["group", "topic", "partition"]
        g = {
            "leo": _gauge("kdelay_partition_log_end_offset", "The next log offset", part),
            "hw": _gauge("kdelay_partition_high_watermark",
                         "The next delivery offset to be given out (log end offset on a "
                         "plain topic)", part),
            "pending": _gauge("kdelay_partition_pending_records", "Records not yet due (cancelled ones included)", part),
            "due": _gauge("kdelay_partition_due_records", "Records due", part),
            "cancelled": _gauge("kdelay_partition_cancelled_records",
                                "Cancelled records still in the log", part),
            "local": _gauge("kdelay_partition_local_bytes", "Bytes of local segments", part),
            "remote": _gauge("kdelay_partition_remote_bytes",
                             "Bytes of segments in the object store", part),
            "lag": _gauge("kdelay_group_lag_records",
                          "Due records after a consumer group's position", group),
            "oldest": _gauge("kdelay_group_oldest_due_age_seconds",
                             "Age of the oldest due record the group has not consumed "
                             "(0: none)", group),
        }
        q = {name: _gauge(f"kdelay_share_group_{name}_records", doc, group) for name, doc in (
            ("acquired", "Records acquired by a member and not yet acknowledged"),
            ("available", "Records due and free to acquire"),
            ("delayed", "Records released with a delay, not yet due again"),
            ("acked", "Records acknowledged"))}
        for topic in self.state.topics:
            for index, log in enumerate(topic.logs):
                labels = [topic.name, str(index)]
                m = log.metrics()
                g["leo"].add_metric(labels, log.log_end_offset)
                g["hw"].add_metric(labels, _high_watermark(self.state, topic.name, index, log))
                g["pending"].add_metric(labels, m.get("pending_records", 0))
                g["due"].add_metric(labels, m.get("due_records", 0))
                g["cancelled"].add_metric(labels, m.get("cancelled_records", 0))
                remote = m.get("remote") or {}
                g["local"].add_metric(labels, remote.get("bytes_local", m.get("bytes", 0)))
                g["remote"].add_metric(labels, remote.get("bytes_remote", 0))
                now = m.get("now") or log.now()
                for name, gm in (m.get("groups") or {}).items():
                    if gm.get("error"):  # its position unreadable (kdelay verify names it)
                        continue
                    g["lag"].add_metric([name, *labels], gm.get("lag", 0))
                    g["oldest"].add_metric([name, *labels], _oldest_due_age(log, name, now))
                for name, qm in (m.get("queues") or {}).items():
                    for key, fam in q.items():
                        fam.add_metric([name, *labels], qm.get(key, 0))
        conns = _gauge("kdelay_broker_connections", "Open client connections", [])
        conns.add_metric([], len(self.state.connections))
        yield from g.values()
        yield from q.values()
        yield conns


def _high_watermark(state: BrokerState, topic: str, index: int, log) -> int:
    view = getattr(state, "due_views", None)  # the due-order view, where the broker has one
    if view is not None and hasattr(view, "high_watermark"):
        return view.high_watermark(topic, index)
    return log.log_end_offset


def _oldest_due_age(log, group: str, now: int) -> float:
    """Seconds since the group's next record came due (0 when none is due)."""
    page = log.fetch(after=log.committed(group), max_records=1)
    if not page.records:
        return 0.0
    return max(0, now - page.records[0].deliver_after) / 1000.0
