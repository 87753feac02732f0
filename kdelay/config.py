"""LogConfig: the per-log settings, named as in docs/api.md (and after their Kafka topic configs)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import numpy as np

from .errors import InvalidConfigError

_MAX_INT64 = (1 << 63) - 1

DAY_MS = 86_400_000
# checked by LogConfig._check_remote and the int checks at the end of __post_init__
_REMOTE_FIELDS = ("remote_storage", "remote_storage_options")


@dataclass(frozen=True)
class LogConfig:
    segment_bytes: int = 1 << 30
    segment_ms: int = 7 * DAY_MS
    index_interval_bytes: int = 4096
    max_delivery_delay_ms: int = 0
    delayed_delivery_enable: bool = True
    retention_ms: int = 7 * DAY_MS
    retention_bytes: int = -1
    flush_messages: int | None = None
    flush_ms: int | None = None
    max_batch_bytes: int = 1 << 20
    # rewrite a sealed segment once this share of its bytes is removable (0: never compact)
    compaction_min_ratio: float = 0.5
    # tiered storage (kdelay/log/tiered/): sealed segments copied to an object store at this
    # URL ("s3://bucket/prefix", "file:///dir"; None: off), with the store's options
    remote_storage: str | None = None
    remote_storage_options: dict = field(default_factory=dict, repr=False)  # may hold secrets
    local_retention_ms: int = -2      # -2: the same as retention_ms (Kafka's value)
    local_retention_bytes: int = -2   # -2: the same as retention_bytes
    remote_timeout_ms: int = 30_000   # a store request that takes longer fails
    # local copies of remote segments' indexes and byte ranges, at most this many bytes
    remote_cache_bytes: int = 1 << 30

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in _REMOTE_FIELDS:
                continue
            if f.name == "delayed_delivery_enable":
                if not isinstance(value, bool):
                    raise InvalidConfigError(f"LogConfig.{f.name} must be a bool, got {value!r}")
                continue
            if value is None and f.name in ("flush_messages", "flush_ms"):
                continue
            if f.name == "compaction_min_ratio":
                if isinstance(value, bool) or not isinstance(value, (int, float)) \
                        or not 0 <= value <= 1:
                    raise InvalidConfigError(f"LogConfig.compaction_min_ratio must be a number "
                                             f"in [0, 1] (0: never compact), got {value!r}")
                continue
            if isinstance(value, np.integer):  # a numpy integer is an int; stored as one
                value = int(value)
                object.__setattr__(self, f.name, value)
            if not isinstance(value, int) or isinstance(value, bool):
                raise InvalidConfigError(f"LogConfig.{f.name} must be an int, got {value!r}")
            if value > _MAX_INT64:
                raise InvalidConfigError(f"LogConfig.{f.name} must be below 2**63, got {value}")
        positive = ("segment_bytes", "segment_ms", "index_interval_bytes", "max_batch_bytes")
        for name in positive:
            if getattr(self, name) <= 0:
                raise InvalidConfigError(f"LogConfig.{name} must be > 0, got {getattr(self, name)}")
        if self.max_delivery_delay_ms < 0:
            raise InvalidConfigError("LogConfig.max_delivery_delay_ms must be >= 0 (0 = no limit)")
        for name in ("retention_ms", "retention_bytes"):
            v = getattr(self, name)
            if v < -1:
                raise InvalidConfigError(f"LogConfig.{name} must be >= 0, or -1 for no limit")
        for name in ("flush_messages", "flush_ms"):
            v = getattr(self, name)
            if v is not None and v <= 0:
                raise InvalidConfigError(f"LogConfig.{name} must be > 0 or None")
        for name in ("local_retention_ms", "local_retention_bytes"):
            if getattr(self, name) < -2:
                raise InvalidConfigError(f"LogConfig.{name} must be >= 0, -1 for no limit or "
                                         f"-2 for the same as {name.replace('local_', '')}")
        for name in ("remote_timeout_ms", "remote_cache_bytes"):
            if getattr(self, name) <= 0:
                raise InvalidConfigError(f"LogConfig.{name} must be > 0, got {getattr(self, name)}")
        self._check_remote()

    def _check_remote(self) -> None:
        url, options = self.remote_storage, self.remote_storage_options
        if url is not None and (not isinstance(url, str) or "://" not in url):
            raise InvalidConfigError(f"LogConfig.remote_storage must be None or a URL such as "
                                     f"'s3://bucket/prefix' or 'file:///dir', got {url!r}")
        if options is None:
            object.__setattr__(self, "remote_storage_options", {})
        elif not isinstance(options, dict) or not all(
                isinstance(k, str) and isinstance(v, (str, bool, int)) for k, v in options.items()):
            raise InvalidConfigError("LogConfig.remote_storage_options must be a dict of str to "
                                     f"str, bool or int, got {options!r}")

    @property
    def effective_local_retention_ms(self) -> int:
        """local_retention_ms, with -2 resolved to retention_ms."""
        v = self.local_retention_ms
        return self.retention_ms if v == -2 else v

    @property
    def effective_local_retention_bytes(self) -> int:
        """local_retention_bytes, with -2 resolved to retention_bytes."""
        v = self.local_retention_bytes
        return self.retention_bytes if v == -2 else v
