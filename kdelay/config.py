"""LogConfig: the per-log settings, named as in API.md (and after their Kafka topic configs)."""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from .errors import InvalidConfigError

_MAX_INT64 = (1 << 63) - 1

DAY_MS = 86_400_000


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

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
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
