"""RemoteStore: one partition's place in an object store, the only module that talks to it.

The store is reached through obstore (the Python binding of Apache Arrow's `object_store`):
S3 and S3-compatible servers (`s3://bucket/prefix`), a local directory (`file:///dir`) and
an in-process store (`memory://`). Every key a RemoteStore takes is relative to
`<prefix>/<partition directory name>/`, so one prefix holds a whole topic.

Every operation is bounded by `timeout_ms` (obstore's request timeout and its retry budget)
and raises RemoteStorageError, naming the store and the key, for anything the store does:
unreachable, refused, timed out, an object missing where one must be. A put with
`create=True` is a conditional create (S3's If-None-Match): it raises ObjectExistsError
when the key exists, which is how a copy's commit point detects an earlier commit.

Requests and bytes are counted (`counters`), for `metrics()["remote"]`. A module-level seam
(`STORE_OPS`) lets kdelay.testing.store_faults wrap every operation with crash points, as
kdelay.testing.faults wraps kdelay.fsio.

Thread-safe: obstore's stores may be shared between threads; the counters are updated
under a lock. Not fork-safe: in a child forked after a request, every open and request
raises RemoteStorageError (after_fork.py says why) instead of waiting forever.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

from ..errors import RemoteStorageError
from . import after_fork

__all__ = ["ObjectExistsError", "RemoteCounters", "RemoteStore", "StorePanic", "public_options"]

T = TypeVar("T")

# options that go to obstore's HTTP client rather than to the store's own configuration
_CLIENT_OPTIONS = {"allow_http", "allow_invalid_certificates", "proxy_url", "user_agent",
                   "root_certificate"}
# options never written to the partition directory (credentials come from the caller or
# from the environment, as the AWS SDKs read them)
_SECRET_WORDS = ("secret", "token", "password", "access_key", "credential", "sas", "key_id")


class ObjectExistsError(RemoteStorageError):
    """A conditional create found the key already there."""


class ObjectMissingError(RemoteStorageError):
    """An object that must exist is not in the store."""


def public_options(options: dict) -> dict:
    """The options that may be written down beside the data: everything but credentials."""
    return {k: v for k, v in options.items()
            if not any(word in k.lower() for word in _SECRET_WORDS)}


@dataclass
class RemoteCounters:
    """Requests made and bytes moved, for `metrics()["remote"]` (cumulative per Log)."""

    requests: int = 0
    bytes_fetched: int = 0
    bytes_put: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def count(self, requests: int, fetched: int = 0, put: int = 0) -> None:
        with self._lock:
            self.requests += requests
            self.bytes_fetched += fetched
            self.bytes_put += put


class StorePanic(Exception):  # noqa: N818 (what the client did, not an error of ours)
    """The store client panicked: obstore's Rust code surfaces a panic as pyo3's
    PanicException, a BaseException that `except Exception` would let escape."""


def _is_panic(e: BaseException) -> bool:
    t = type(e)
    return t.__name__ == "PanicException" and t.__module__ == "pyo3_runtime"


def _guarded(fn: Callable[..., T], *args, **kwargs) -> T:
    """`fn(*args, **kwargs)` (a call into obstore), a panic turned into StorePanic, an
    Exception like any other failure of the store. Every call into obstore goes through
    here (a listing's pages too)."""
    try:
        return fn(*args, **kwargs)
    except Exception:
        raise
    except BaseException as e:
        if _is_panic(e):
            raise StorePanic(f"the store client panicked: "
                             f"{(str(e).strip().splitlines() or [''])[0]}") from e
        raise


def _check_endpoint(options: dict) -> None:
    """An endpoint that is not an http(s) URL: refused here, as the client would only
    panic on the first request."""
    endpoint = options.get("endpoint", options.get("aws_endpoint"))
    if endpoint is None:
        return
    parts = urlsplit(str(endpoint))
    if parts.scheme not in ("http", "https") or not parts.netloc or any(
            c.isspace() for c in str(endpoint)):
        raise RemoteStorageError(f"endpoint {endpoint!r} is not an http(s) URL")


def _open_obstore(url: str, options: dict, timeout_ms: int):
    from obstore.store import from_url  # an optional dependency: `pip install kdelay[remote]`

    scheme = urlsplit(url).scheme
    timeout = timedelta(milliseconds=timeout_ms)
    if scheme == "file":
        path = urlsplit(url).path
        os.makedirs(path, exist_ok=True)  # obstore's LocalStore wants the directory there
        return from_url(url)
    if scheme == "memory":
        return from_url(url)
    config = {k: v for k, v in options.items() if k not in _CLIENT_OPTIONS}
    client = {k: v for k, v in options.items() if k in _CLIENT_OPTIONS}
    client.update(timeout=timeout, connect_timeout=timeout)
    retry = {"max_retries": 3, "retry_timeout": timeout,
             "backoff": {"init_backoff": timedelta(milliseconds=min(100, timeout_ms)),
                         "max_backoff": timedelta(milliseconds=max(1, timeout_ms // 4)),
                         "base": 2}}
    if scheme in ("s3", "s3a"):
        config.setdefault("virtual_hosted_style_request", False)
    _check_endpoint(config)
    # the options are the user's, for whichever backend the URL names (obstore checks
    # them): not one of obstore's per-backend TypedDicts
    return from_url(url, client_options=client, retry_config=retry,  # type: ignore[call-overload]
                    **config)


class RemoteStore:
    """The objects of one partition under `<url>/<partition>/`. Open with `RemoteStore.open`."""

    def __init__(self, url: str, partition: str, store, counters: RemoteCounters | None = None,
                 options: dict | None = None, timeout_ms: int = 30_000):
        self.url = url.rstrip("/")
        self.partition = partition
        self._store = store
        self.counters = counters or RemoteCounters()
        self._options = dict(options or {})  # for uploads.py (S3's multipart API)
        self._timeout_ms = timeout_ms

    @classmethod
    def open(cls, url: str, options: dict, partition: str, *, timeout_ms: int = 30_000,
             counters: RemoteCounters | None = None) -> RemoteStore:
        """A store for partition directory `partition` (its base name) under `url`. Raises
        RemoteStorageError if the URL or options are refused (no request is made)."""
        after_fork.check_usable()
        try:
            store = _guarded(_open_obstore, url, options, timeout_ms)
        except ImportError as e:
            raise RemoteStorageError("tiered storage needs obstore: pip install 'kdelay[remote]'"
                                     ) from e
        except RemoteStorageError:
            raise
        except Exception as e:  # obstore's configuration errors
            raise RemoteStorageError(f"object store {url}: {e}") from e
        return cls(url, partition, store, counters, options, timeout_ms)

    @property
    def volatile(self) -> bool:
        """Does the store vanish with the process (`memory://`)? Its copies are then no
        lasting record: local retention keeps every local file, and a directory whose
        segments only such a store holds is refused."""
        return urlsplit(self.url).scheme == "memory"

    def key(self, name: str) -> str:
        return f"{self.partition}/{name}"

    def describe(self, name: str) -> str:
        """The object's full name, for messages: `<url>/<partition>/<name>`."""
        return f"{self.url}/{self.key(name)}"

    # ------------------------------------------------------------------ operations

    def put(self, name: str, data: bytes | memoryview | str, *, create: bool = False) -> None:
        """Store `data` (bytes, or the path of a local file, sent in parts when large) at
        `name`. With `create`, raise ObjectExistsError if it exists. Atomic: a reader sees
        the whole object or none of it."""
        after_fork.before_request()
        return STORE_OPS["put"](self, name, data, create)

    def get(self, name: str) -> bytes:
        """The whole object. Raises ObjectMissingError if there is none."""
        after_fork.before_request()
        return STORE_OPS["get"](self, name)

    def get_ranges(self, name: str, starts: Sequence[int], ends: Sequence[int]) -> list[bytes]:
        """The bytes [starts[i], ends[i]) of the object, one request per range or fewer
        (obstore coalesces ranges less than 1 MiB apart)."""
        after_fork.before_request()
        return STORE_OPS["get_ranges"](self, name, starts, ends)

    def size(self, name: str) -> int | None:
        """The object's size, or None if there is none."""
        after_fork.before_request()
        return STORE_OPS["size"](self, name)

    def list(self) -> dict[str, int]:
        """name -> size of every object of the partition."""
        after_fork.before_request()
        return STORE_OPS["list"](self)

    def delete(self, name: str) -> None:
        """Remove the object; a missing one is no error (deletion is idempotent)."""
        after_fork.before_request()
        return STORE_OPS["delete"](self, name)

    def abort_uploads(self) -> int:
        """Abort the multipart uploads left open under the partition's place (uploads.py:
        what an interrupted copy of a large file left); returns how many. Call only while
        no upload of this partition is under way."""
        return STORE_OPS["abort_uploads"](self)


def _failure(store: RemoteStore, name: str | None, what: str, e: Exception) -> RemoteStorageError:
    where = store.describe(name) if name is not None else f"{store.url}/{store.partition}/"
    first_line = (str(e).strip().splitlines() or [""])[0]  # obstore appends a debug dump
    return RemoteStorageError(f"{what} {where} failed: {type(e).__name__}: {first_line}")


def _not_found(e: Exception) -> bool:
    """Does obstore's `e` say the object is not there? (FileNotFoundError from a local
    store, its NotFoundError from the others.)"""
    from obstore.exceptions import NotFoundError

    return isinstance(e, FileNotFoundError | NotFoundError)


def _read_failure(store: RemoteStore, name: str, e: Exception) -> RemoteStorageError:
    """What a failed read of `name` raises: ObjectMissingError, or a RemoteStorageError."""
    if _not_found(e):
        return ObjectMissingError(f"{store.describe(name)} is missing")
    return _failure(store, name, "reading", e)


def _put(store: RemoteStore, name: str, data, create: bool) -> None:
    import obstore
    from obstore.exceptions import AlreadyExistsError, PreconditionError

    # a path is sent as a file (in parts when large), bytes as they are
    source, size = (Path(data), os.path.getsize(data)) if isinstance(data, str) \
        else (data, len(data))
    try:
        _guarded(obstore.put, store._store, store.key(name), source,
                 mode="create" if create else None)
    except (AlreadyExistsError, PreconditionError) as e:  # (S3 answers a create with 412)
        raise ObjectExistsError(f"{store.describe(name)} exists already") from e
    except Exception as e:
        raise _failure(store, name, "writing", e) from e
    finally:
        store.counters.count(1, put=size)


def _get(store: RemoteStore, name: str) -> bytes:
    import obstore

    try:
        data = bytes(_guarded(lambda: obstore.get(store._store, store.key(name)).bytes()))
    except Exception as e:
        raise _read_failure(store, name, e) from e
    finally:
        store.counters.count(1)
    store.counters.count(0, fetched=len(data))
    return data


def _get_ranges(store: RemoteStore, name: str, starts: Sequence[int], ends: Sequence[int]
                ) -> list[bytes]:
    import obstore

    try:
        parts = _guarded(obstore.get_ranges, store._store, store.key(name),
                         starts=list(starts), ends=list(ends))
    except Exception as e:
        raise _read_failure(store, name, e) from e
    finally:
        store.counters.count(_requests_for(starts, ends))
    out = [bytes(p) for p in parts]
    store.counters.count(0, fetched=sum(map(len, out)))
    return out


def _requests_for(starts: Sequence[int], ends: Sequence[int]) -> int:
    """How many requests obstore makes for these ranges: it merges ranges less than
    1 MiB apart (object_store's OBJECT_STORE_COALESCE_DEFAULT)."""
    n, last_end = 0, None
    for s, e in sorted(zip(starts, ends, strict=True)):
        if last_end is None or s - last_end > (1 << 20):
            n += 1
        last_end = e if last_end is None else max(last_end, e)
    return n


def _size(store: RemoteStore, name: str) -> int | None:
    import obstore

    try:
        return int(_guarded(obstore.head, store._store, store.key(name))["size"])
    except Exception as e:
        if _not_found(e):
            return None
        raise _failure(store, name, "looking up", e) from e
    finally:
        store.counters.count(1)


def _list(store: RemoteStore) -> dict[str, int]:
    import obstore

    prefix = store.key("")
    out: dict[str, int] = {}
    pages = 0
    try:
        for page in _guarded(lambda: list(obstore.list(store._store, prefix))):
            pages += 1
            for meta in page:
                out[meta["path"][len(prefix):]] = int(meta["size"])
    except FileNotFoundError:
        return out  # a local store without the directory yet: nothing stored
    except Exception as e:
        raise _failure(store, None, "listing", e) from e
    finally:
        store.counters.count(max(pages, 1))
    return out


def _delete(store: RemoteStore, name: str) -> None:
    import obstore

    try:
        _guarded(obstore.delete, store._store, store.key(name))
    except Exception as e:
        if _not_found(e):
            return
        raise _failure(store, name, "deleting", e) from e
    finally:
        store.counters.count(1)


def _abort_uploads(store: RemoteStore) -> int:
    from .uploads import abort_open_uploads

    try:
        return abort_open_uploads(store.url, store._options, store.partition,
                                  store._timeout_ms)
    finally:
        store.counters.count(1)


# The seam for fault injection: kdelay.testing.store_faults replaces these entries (each
# called through the RemoteStore method of its name, with that operation's arguments).
STORE_OPS: dict[str, Callable[..., Any]] = {
    "put": _put, "get": _get, "get_ranges": _get_ranges, "size": _size, "list": _list,
    "delete": _delete, "abort_uploads": _abort_uploads}
