"""RemoteStore (kdelay/remote/store.py) against file:// and moto's S3: a missing object is
told apart from a failing store the same way by every operation."""

from __future__ import annotations

import pytest

from kdelay import RemoteStorageError
from kdelay.remote.store import ObjectMissingError, RemoteStore


def test_a_missing_object_is_named_and_told_apart(remote):
    store = RemoteStore.open(remote.url, remote.options, "p-0")
    store.put("here", b"0123456789")
    with pytest.raises(ObjectMissingError, match="p-0/gone"):
        store.get("gone")
    with pytest.raises(ObjectMissingError, match="p-0/gone"):
        store.get_ranges("gone", [0], [4])
    assert store.size("gone") is None
    store.delete("gone")  # idempotent
    assert store.get_ranges("here", [2], [5]) == [b"234"]


def test_an_unreachable_store_is_a_failure_not_a_missing_object():
    store = RemoteStore.open("s3://kdelay-test/x", {
        "endpoint": "http://127.0.0.1:9", "region": "us-east-1", "access_key_id": "x",
        "secret_access_key": "x", "allow_http": True}, "p-0", timeout_ms=1000)
    for op in (lambda: store.get("a"), lambda: store.get_ranges("a", [0], [1]),
               lambda: store.size("a"), lambda: store.delete("a")):
        with pytest.raises(RemoteStorageError) as e:
            op()
        assert not isinstance(e.value, ObjectMissingError) and "p-0/a" in str(e.value)
