"""kdelay.testing.tiering.moto_server: the S3 endpoint the tiered tests and benchmarks
start on loopback."""

from __future__ import annotations

import socket
from urllib.parse import urlparse

from kdelay.remote.store import RemoteStore
from kdelay.testing.tiering import moto_server


def test_moto_server_serves_its_bucket_until_left():
    with moto_server("kdelay-moto-test") as options:
        store = RemoteStore.open("s3://kdelay-moto-test/x", options, "p-0")
        store.put("00000000000000000000.manifest", b"m")
        assert store.list() == {"00000000000000000000.manifest": 1}
        port = urlparse(options["endpoint"]).port
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0  # stopped
