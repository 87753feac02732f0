"""A store client's panic (obstore's Rust code panicking surfaces as pyo3's
PanicException, a BaseException that `except Exception` lets through) is a
RemoteStorageError like every other store failure: at open, and from every operation
(each call into obstore is guarded), for new and existing directories."""

from __future__ import annotations

import os

import obstore
import pytest

from kdelay import Log, LogConfig, Record, RemoteStorageError
from kdelay.remote import store as store_module
from kdelay.remote.store import RemoteStore

BAD = {"endpoint": "not a url at all", "region": "us-east-1"}


@pytest.fixture
def credentials(monkeypatch):
    """Credentials in the environment, as the panic needs (without them the client
    refuses earlier, politely)."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")


def _panic_type() -> type[BaseException]:
    """pyo3's PanicException, taken from a real panic of the client."""
    try:
        s = obstore.store.from_url("s3://kdelay-test/p", endpoint="not a url at all",
                                   region="us-east-1", access_key_id="x",
                                   secret_access_key="x")
        obstore.put(s, "k", b"x")
    except BaseException as e:  # (what is under test: not an Exception)
        assert not isinstance(e, Exception)
        return type(e)
    pytest.skip("this obstore does not panic on a bad endpoint")


def test_a_bad_endpoint_fails_the_open_of_a_new_and_an_existing_directory(tmp_path,
                                                                          credentials):
    directory = os.fspath(tmp_path / "p-0")
    with Log.open(directory) as log:
        log.append([Record(b"x")])
    config = LogConfig(remote_storage="s3://kdelay-test/p", remote_storage_options=BAD)
    for path in (directory, os.fspath(tmp_path / "new")):
        with pytest.raises(RemoteStorageError, match="endpoint"):
            Log.open(path, config=config)
    with Log.open(directory) as log:  # nothing was left open or locked
        assert [r.value for r in log.read(0)] == [b"x"]


def test_every_operation_turns_a_panic_into_a_remote_storage_error(tmp_path, monkeypatch):
    panic = _panic_type()
    store = RemoteStore.open(f"file://{tmp_path}", {}, "p-0")
    store.put("a", b"x")

    def panicking(*args, **kwargs):
        raise panic("called `Result::unwrap()` on an `Err` value (injected)")

    for name in ("put", "get", "get_ranges", "head", "list", "delete"):
        monkeypatch.setattr(obstore, name, panicking)
    for op in (lambda: store.put("a", b"y"), lambda: store.get("a"),
               lambda: store.get_ranges("a", [0], [1]), lambda: store.size("a"),
               lambda: store.list(), lambda: store.delete("a")):
        with pytest.raises(RemoteStorageError, match="panicked"):
            op()
    monkeypatch.setattr(store_module, "_open_obstore", panicking)
    with pytest.raises(RemoteStorageError, match="panicked"):
        RemoteStore.open(f"file://{tmp_path}", {}, "p-0")


def test_a_panic_while_listing_pages_is_a_remote_storage_error(tmp_path, monkeypatch):
    panic = _panic_type()
    store = RemoteStore.open(f"file://{tmp_path}", {}, "p-0")

    def pages(*args, **kwargs):
        yield []
        raise panic("injected in the second page")

    monkeypatch.setattr(obstore, "list", pages)
    with pytest.raises(RemoteStorageError, match="panicked"):
        store.list()
