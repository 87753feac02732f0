"""RemoteTier: what one open log directory with tiered storage shares between its parts.

It holds the partition's RemoteStore (kdelay.remote.store), the request counters, the local
cache directory for remote segments' indexes and byte ranges, and the last error any part
met (for `metrics()["remote"]`). The copier and the retention of remote copies (sync.py,
copier.py) write through it; remote segments (remote_segment.py) read through it.

The directory records the store's URL and its options, credentials left out, in
`remote-storage.json` (`record_settings`), so that the CLI and Spark, given only the
directory, reach the same store (credentials then come from the environment, as the AWS
SDKs read them: AWS_ACCESS_KEY_ID, ...).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable

from ... import fsio
from ...config import LogConfig
from ...errors import CorruptLogError
from ...remote.store import RemoteCounters, RemoteStore, public_options
from .cache_budget import CacheBudget

__all__ = ["CACHE_DIR", "SETTINGS_FILE", "RemoteTier", "partition_name", "read_settings",
           "record_settings", "recorded_store"]

SETTINGS_FILE = "remote-storage.json"
CACHE_DIR = "remote-cache"


class RemoteTier:
    def __init__(self, directory: str, config: LogConfig):
        assert config.remote_storage is not None
        self.directory = directory
        self.config = config
        self.counters = RemoteCounters()
        self.store = RemoteStore.open(config.remote_storage, config.remote_storage_options,
                                      partition_name(directory),
                                      timeout_ms=config.remote_timeout_ms,
                                      counters=self.counters)
        self.cache_dir = os.path.join(directory, CACHE_DIR)
        self.cache_budget = CacheBudget(config.remote_cache_bytes)  # remote_segment.py
        self._error_lock = threading.Lock()
        self.last_error: str | None = None

    def failed(self, error: BaseException) -> None:
        """Remember the last error a copy, deletion or read met (None once one succeeds)."""
        with self._error_lock:
            self.last_error = str(error)

    def succeeded(self) -> None:
        with self._error_lock:
            self.last_error = None


def record_settings(directory: str, config: LogConfig) -> None:
    """Write `remote-storage.json` (URL and options without credentials) if it differs."""
    body = json.dumps({"remote_storage": config.remote_storage,
                       "remote_storage_options": public_options(config.remote_storage_options)},
                      sort_keys=True, indent=1).encode("utf-8") + b"\n"
    path = os.path.join(directory, SETTINGS_FILE)
    if fsio.read_small(path) != body:
        fsio.atomic_write(path, body)


def read_settings(directory: str) -> tuple[str, dict] | None:
    """(URL, options) recorded in the directory, or None if it has no tiered storage.
    Raises CorruptLogError if the file is damaged."""
    path = os.path.join(directory, SETTINGS_FILE)
    raw = fsio.read_small(path)
    if raw is None:
        return None
    try:
        f = json.loads(raw)
        url, options = f["remote_storage"], f["remote_storage_options"]
        if not isinstance(url, str) or not isinstance(options, dict):
            raise ValueError("bad fields")
    except (ValueError, KeyError, TypeError) as e:
        raise CorruptLogError(f"damaged tiered-storage settings: {e}", path) from None
    return url, options


def partition_name(directory: str) -> str:
    """The partition's place in its store (`<url>/<name>/`): the directory's base name."""
    return os.path.basename(os.path.abspath(directory))


def recorded_store(directory: str,
                   open_store: Callable[[str, dict, str], RemoteStore] = RemoteStore.open
                   ) -> RemoteStore | None:
    """The store `remote-storage.json` records for the directory, opened by `open_store`
    (url, options, partition name), or None if it records none. Raises CorruptLogError
    if the file is damaged, RemoteStorageError if the store refuses the settings."""
    settings = read_settings(directory)
    if settings is None:
        return None
    url, options = settings
    return open_store(url, options, partition_name(directory))
