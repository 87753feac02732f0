"""Helpers of the produce and topic tests: the broker in a child process (`kdelay serve`,
stopped by its PID), raw Kafka requests over a socket (kio writes them, as a client would),
Kafka v2 batches built by kafka-python's builder (an oracle nobody here wrote), and what a
partition stores, read with kdelay's own reader once the broker is gone."""

from __future__ import annotations

import contextlib
import io
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

from kafka.record.default_records import DefaultRecordBatchBuilder
from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from kdelay import Topic
from kdelay.broker.apis import all_apis
from kdelay.broker.responses import element, make
from kdelay.testing.processes import child_env

TIMEOUT_S = 60.0  # an upper bound for anything to finish under load, never a measurement


@contextlib.contextmanager
def broker_process(root: str, *config: str) -> Iterator[tuple[subprocess.Popen, str]]:
    """`kdelay serve ROOT --config ...` on a free port: (process, bootstrap address);
    killed and reaped on leaving if still running."""
    args = [sys.executable, "-m", "kdelay", "serve", root, "--listen", "127.0.0.1:0",
            "--log-level", "WARNING"]
    for c in config:
        args += ["--config", c]
    # stderr to a file, not a pipe: a pipe nobody reads would block a chatty broker
    with tempfile.TemporaryFile(mode="w+") as errors:
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=errors, text=True,
                                env=child_env())
        try:
            line = proc.stdout.readline()
            if not line.startswith("kdelay broker serving"):
                proc.kill()
                proc.wait()
                errors.seek(0)
                raise AssertionError(f"no broker: {line!r} {errors.read()[-2000:]}")
            yield proc, line.split(" on ", 1)[1].split()[0]
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()


def stop(proc: subprocess.Popen, sig: int = signal.SIGTERM) -> int:
    """Send `sig` to the broker by its PID and reap it; its exit status."""
    os.kill(proc.pid, sig)
    return proc.wait(TIMEOUT_S)


def answers(key: int) -> bool:
    """Whether this checkout's broker answers API `key` (librdkafka sends v2 batches only
    to a broker that answers Fetch v4+, which another part of the broker provides)."""
    return any(api.key == key for api in all_apis())


# ---------------------------------------------------------------------------- raw requests

class RawClient:
    """One connection speaking Kafka's framing: requests written with kio, answers read."""

    def __init__(self, bootstrap: str, client_id: str = "raw-test"):
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=TIMEOUT_S)
        self.client_id = client_id
        self.correlation = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def frame(self, key: int, version: int, request: Any) -> bytes:
        self.correlation += 1
        req_cls = load_request_schema(key, version)
        header_cls = req_cls.__header_schema__
        fields = {"request_api_key": key, "request_api_version": version,
                  "correlation_id": self.correlation, "client_id": self.client_id}
        names = header_cls.__dataclass_fields__
        header = header_cls(**{k: v for k, v in fields.items() if k in names})
        out = io.BytesIO()
        entity_writer(header_cls)(out, header)
        entity_writer(req_cls)(out, request)
        body = out.getvalue()
        return struct.pack(">i", len(body)) + body

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def request(self, key: int, version: int, request: Any) -> Any:
        self.send(self.frame(key, version, request))
        return self.read(key, version)

    def read_frame(self) -> bytes:
        """One answer frame (EOFError if the broker closed the connection)."""
        size = struct.unpack(">i", self._exactly(4))[0]
        return self._exactly(size)

    def read(self, key: int, version: int) -> Any:
        data = self.read_frame()
        resp_cls = load_response_schema(key, version)
        _, used = entity_reader(resp_cls.__header_schema__)(data, 0)
        return entity_reader(resp_cls)(data, used)[0]

    def _exactly(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise EOFError("the broker closed the connection")
            buf += chunk
        return buf

    def closed_by_broker(self) -> bool:
        """True once the broker has closed this connection (waits up to TIMEOUT_S)."""
        try:
            while self.sock.recv(65536):
                pass
        except ConnectionError:
            pass
        return True


def produce_request(version: int, topic: str, partition: int, records: bytes | None, *,
                    acks: int = -1, transactional_id: str | None = None) -> Any:
    import datetime
    req_cls = load_request_schema(0, version)
    topic_cls = element(req_cls, "topic_data")
    part_cls = element(topic_cls, "partition_data")
    return make(req_cls, transactional_id=transactional_id, acks=acks,
                timeout=datetime.timedelta(seconds=30),
                topic_data=(make(topic_cls, name=topic, partition_data=(
                    make(part_cls, index=partition, records=records),)),))


def partition_answer(response: Any) -> Any:
    return response.responses[0].partition_responses[0]


def v2_batch(values: list[bytes | None], *, headers: list[list] | None = None,
             timestamps: list[int] | None = None, keys: list[bytes | None] | None = None,
             producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
             compression: int = 0, transactional: bool = False) -> bytes:
    """A Kafka v2 batch, as kafka-python's producer builds one."""
    b = DefaultRecordBatchBuilder(magic=2, compression_type=compression,
                                  is_transactional=transactional, producer_id=producer_id,
                                  producer_epoch=producer_epoch, base_sequence=base_sequence,
                                  batch_size=1 << 24)
    for i, v in enumerate(values):
        b.append(i, timestamp=(timestamps or [1_000_000 + j for j in range(len(values))])[i],
                 key=(keys or [None] * len(values))[i], value=v,
                 headers=(headers or [[]] * len(values))[i])
    return bytes(b.build())


# ---------------------------------------------------------------------------- what is stored

def stored(root: str, topic: str, partition: int = 0) -> list:
    """Every record of a partition in offset order (FetchedRecord), read in process: call
    once the broker has stopped (it holds the partition's lock while it serves)."""
    t = Topic.open(root, topic)
    try:
        log = t.partition(partition)
        out, offset = [], log.log_start_offset
        while offset < log.log_end_offset:
            page = log.read(offset, max_records=10_000)
            if not page:
                break
            out += page
            offset = page[-1].offset + 1
        return out
    finally:
        t.close()
