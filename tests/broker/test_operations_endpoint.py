"""The operations endpoint: metrics checked against a known workload with prometheus_client's
own parser, cancel and reschedule with the log's semantics (also across a kill -9 of the
broker right after the answer), and bad requests answered with JSON 4xx and no change."""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kdelay import Broker, Consumer, Log, QueueConsumer, Record, Topic

START = 1_800_000_000_000


def call(base: str, method: str, path: str, body: object = None, *,
         auth: tuple[str, str] | None = None) -> tuple[int, dict | str]:
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method)
    if auth is not None:
        req.add_header("Authorization",
                       "Basic " + base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode())
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            raw, status = resp.read(), resp.status
    except urllib.error.HTTPError as e:
        raw, status = e.read(), e.code
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode()


def samples(text: str) -> dict[tuple[str, tuple], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


@pytest.fixture
def workload(tmp_path):
    """A topic of 2 partitions: partition 0 holds 3 due and 4 pending records; group g has
    consumed 1 due record; queue group q holds 1 acquired record."""
    root = str(tmp_path / "root")
    with Topic.open(root, "jobs", partitions=2) as topic:
        log = topic.partition(0)
        now = log.now()
        for i in range(3):
            log.append([Record(b"due-%d" % i)])
        for i in range(4):
            log.append([Record(b"later-%d" % i)], deliver_after=now + 3_600_000)
        consumer = Consumer(topic.partition(0), "g")
        assert len(consumer.poll(max_records=1)) == 1
        consumer.commit()
        q = QueueConsumer(topic.partition(0), "q", lock_ms=600_000)
        assert len(q.poll(max_records=1)) == 1
        # left open: its acquisition is durable and holds until the lock runs out
    return root


def test_metrics_match_the_workload(workload):
    with Broker(workload, listen="127.0.0.1:0", http="127.0.0.1:0") as broker:
        base = "http://" + broker.http_address
        status, health = call(base, "GET", "/healthz")
        assert status == 200 and health == {"status": "serving"}
        status, _ = call(base, "POST", "/v1/topics/jobs/partitions/0/cancel",
                         {"offsets": [3, 4]})
        assert status == 200
        status, text = call(base, "GET", "/metrics")
        assert status == 200
        m = samples(text)
        p0 = (("partition", "0"), ("topic", "jobs"))
        p1 = (("partition", "1"), ("topic", "jobs"))
        assert m[("kdelay_partition_log_end_offset", p0)] == 7
        assert m[("kdelay_partition_log_end_offset", p1)] == 0
        assert m[("kdelay_partition_due_records", p0)] == 3
        # not yet due, as the engine counts them (cancelled ones included: see cancelled)
        assert m[("kdelay_partition_pending_records", p0)] == 4
        assert m[("kdelay_partition_cancelled_records", p0)] == 2
        assert m[("kdelay_partition_local_bytes", p0)] > 0
        g = (("group", "g"), ("partition", "0"), ("topic", "jobs"))
        assert m[("kdelay_group_lag_records", g)] == 2
        assert m[("kdelay_group_oldest_due_age_seconds", g)] >= 0
        q = (("group", "q"), ("partition", "0"), ("topic", "jobs"))
        assert m[("kdelay_share_group_acquired_records", q)] == 1
        assert m[("kdelay_share_group_available_records", q)] == 2
        # the endpoint's own requests are not Kafka requests: no API was answered yet
        assert not any(name == "kdelay_broker_requests_total" for name, _ in m)
        assert m[("kdelay_broker_connections", ())] == 0


def test_cancel_and_reschedule_follow_the_logs_rules(workload):
    with Broker(workload, listen="127.0.0.1:0", http="127.0.0.1:0") as broker:
        base = "http://" + broker.http_address
        # offsets a cancel skips (due, unknown, twice) are not counted: a 2xx answer
        status, body = call(base, "POST", "/v1/topics/jobs/partitions/0/cancel",
                            {"offsets": [0, 3, 3, 99]})
        assert (status, body) == (200, {"cancelled": 1})
        status, body = call(base, "POST", "/v1/topics/jobs/partitions/0/reschedule",
                            {"offset": 4, "delay_ms": 0})
        assert status == 200 and body["base_offset"] == 7
        # a reschedule the log refuses (cancelled, due, unknown) is a 409 and changes nothing
        for offset in (3, 4, 0, 1234):
            status, body = call(base, "POST", "/v1/topics/jobs/partitions/0/reschedule",
                                {"offset": offset, "deliver_after": START})
            assert status == 409 and body["error"] == "refused", (offset, body)
        status, stats = call(base, "GET", "/v1/topics/jobs")
        assert status == 200 and stats["partitions"][0]["log_end_offset"] == 8
        assert stats["cancelled_records"] == 2 and "configs" in stats
    with Log.open(os.path.join(workload, "jobs-0")) as log:
        values = [r.value for r in log.fetch(max_records=100).records]
    assert values == [b"due-0", b"due-1", b"due-2", b"later-1"]


@pytest.mark.parametrize("path,body,status,error", [
    ("/v1/topics/nope/partitions/0/cancel", {"offsets": [1]}, 404, "unknown_topic"),
    ("/v1/topics/jobs/partitions/2/cancel", {"offsets": [1]}, 404, "unknown_partition"),
    ("/v1/topics/jobs/partitions/x/cancel", {"offsets": [1]}, 404, "unknown_partition"),
    ("/v1/topics/jobs/partitions/0/cancel", b"{not json", 400, "bad_json"),
    ("/v1/topics/jobs/partitions/0/cancel", b"NaN", 400, "bad_json"),
    ("/v1/topics/jobs/partitions/0/cancel", [3], 400, "bad_request"),
    ("/v1/topics/jobs/partitions/0/cancel", {"offsets": [3, -1]}, 400, "bad_request"),
    ("/v1/topics/jobs/partitions/0/cancel", {"offsets": [3.0]}, 400, "bad_request"),
    ("/v1/topics/jobs/partitions/0/cancel", {"offsets": "3"}, 400, "bad_request"),
    ("/v1/topics/jobs/partitions/0/reschedule", {"offset": 3}, 400, "bad_request"),
    ("/v1/topics/jobs/partitions/0/reschedule",
     {"offset": 3, "delay_ms": 1, "deliver_after": 1}, 400, "bad_request"),
    ("/v1/topics/jobs/partitions/0/reschedule", {"offset": 3, "delay_ms": True}, 400,
     "bad_request"),
    ("/v1/topics/jobs/partitions/0/cancel", b"[" + b"1," * 600_000 + b"1]", 413,
     "body_too_large"),
    ("/v1/nothing", None, 404, "not_found"),
])
def test_bad_requests_are_json_4xx_and_change_nothing(workload, path, body, status, error):
    with Broker(workload, listen="127.0.0.1:0", http="127.0.0.1:0") as broker:
        got_status, got = call("http://" + broker.http_address,
                               "GET" if body is None else "POST", path, body)
        assert got_status == status and got["error"] == error and got["message"]
    with Topic.open(workload, "jobs") as topic:
        assert topic.metrics()["cancelled_records"] == 0
        assert topic.partition(0).log_end_offset == 7


def test_endpoint_needs_basic_credentials_when_the_broker_uses_sasl(workload, tmp_path):
    from kdelay.broker.security.credentials import add_user
    users = str(tmp_path / "users")
    add_user(users, "ops", "pw", iterations=4096)
    with Broker(workload, listen="127.0.0.1:0", http="127.0.0.1:0",
                sasl_users=users) as broker:
        base = "http://" + broker.http_address
        assert call(base, "GET", "/healthz")[0] == 200  # health needs no credentials
        for auth in (None, ("ops", "wrong"), ("nobody", "pw")):
            status, body = call(base, "POST", "/v1/topics/jobs/partitions/0/cancel",
                                {"offsets": [3]}, auth=auth)
            assert status == 401 and body["error"] == "unauthorized"
        assert call(base, "GET", "/metrics")[0] == 401
        status, body = call(base, "POST", "/v1/topics/jobs/partitions/0/cancel",
                            {"offsets": [3]}, auth=("ops", "pw"))
        assert (status, body) == (200, {"cancelled": 1})


def start_serving(root: str) -> tuple[subprocess.Popen, str, str]:
    """`kdelay serve ROOT --http`: (process, endpoint URL, Kafka bootstrap address)."""
    proc = subprocess.Popen([sys.executable, "-m", "kdelay", "serve", root, "--listen",
                             "127.0.0.1:0", "--http", "127.0.0.1:0", "--log-level", "WARNING"],
                            stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    found = re.search(r"http on ([\d.]+:\d+)", line)
    assert found, f"the broker did not start: {line!r}"
    kafka_at = re.search(r" on ([\d.]+:\d+)", line)
    return proc, "http://" + found.group(1), kafka_at.group(1)


def test_answered_cancel_and_reschedule_survive_kill_9(workload):
    proc, base, _ = start_serving(workload)
    try:
        assert call(base, "POST", "/v1/topics/jobs/partitions/0/cancel",
                    {"offsets": [3]})[1] == {"cancelled": 1}
        status, body = call(base, "POST", "/v1/topics/jobs/partitions/0/reschedule",
                            {"offset": 5, "delay_ms": 0})
        assert status == 200
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    with Log.open(os.path.join(workload, "jobs-0")) as log:
        got = [r.value for r in log.fetch(max_records=100).records]
        assert log.metrics()["cancelled_records"] == 2  # offset 3, and 5 (rescheduled)
    assert got == [b"due-0", b"due-1", b"due-2", b"later-2"]  # the copy, once


def test_cli_reaches_the_endpoint_and_exits_nonzero_on_refusal(workload):
    proc, base, _ = start_serving(workload)
    try:
        kdelay = [sys.executable, "-m", "kdelay"]
        ok = subprocess.run(kdelay + ["cancel", "--broker", base, "jobs", "0", "3", "4",
                                      "--json"], capture_output=True, text=True)
        assert ok.returncode == 0 and json.loads(ok.stdout) == {"cancelled": 2}
        moved = subprocess.run(kdelay + ["reschedule", "--broker", base.removeprefix("http://"),
                                         "jobs", "0", "5", "--delay-ms", "0", "--json"],
                               capture_output=True, text=True)
        assert moved.returncode == 0 and json.loads(moved.stdout)["base_offset"] == 7
        refused = subprocess.run(kdelay + ["reschedule", "--broker", base, "jobs", "0", "3",
                                           "--delay-ms", "0"], capture_output=True, text=True)
        assert refused.returncode == 1 and "refused" in refused.stderr
        stats = subprocess.run(kdelay + ["stats", "--broker", base, "jobs", "--json"],
                               capture_output=True, text=True)
        assert stats.returncode == 0 and json.loads(stats.stdout)["cancelled_records"] == 3
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0


def test_wire_consumers_never_see_a_cancelled_record_and_see_a_rescheduled_one_once(tmp_path):
    """Records produced over the wire with a delay; one cancelled and one moved later over
    HTTP, then the broker killed with kill -9 right after the answers; consumers reading
    the restarted broker get the others, the moved one once and never before its new time,
    and never the cancelled one."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    root = str(tmp_path / "root")
    Topic.open(root, "jobs", partitions=1).close()
    proc, base, bootstrap = start_serving(root)
    try:
        producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap})
        offsets: dict[bytes, int] = {}
        for name in (b"keep", b"cancel", b"move"):
            producer.produce("jobs", name, headers=[("kdelay.delay_ms", b"1500")],
                             on_delivery=lambda err, msg: offsets.__setitem__(
                                 msg.value(), msg.offset()))
        assert producer.flush(60) == 0 and len(offsets) == 3
        assert call(base, "POST", "/v1/topics/jobs/partitions/0/cancel",
                    {"offsets": [offsets[b"cancel"]]})[1] == {"cancelled": 1}
        status, moved = call(base, "POST", "/v1/topics/jobs/partitions/0/reschedule",
                             {"offset": offsets[b"move"], "delay_ms": 3000})
        assert status == 200
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    proc, base, bootstrap = start_serving(root)
    try:
        got = []
        consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "w",
                                             "auto.offset.reset": "earliest"})
        consumer.subscribe(["jobs"])
        deadline = time.monotonic() + 60
        while len(got) < 2 and time.monotonic() < deadline:
            m = consumer.poll(0.2)
            if m is not None and m.error() is None:
                got.append((m.value(), time.time() * 1000))
        extra = consumer.poll(1.0)  # nothing more comes: the cancelled one never does
        consumer.close()
        assert extra is None or extra.error() is not None
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    assert [v for v, _ in got] == [b"keep", b"move"]
    assert got[1][1] >= moved["deliver_after"]  # never before its new time

