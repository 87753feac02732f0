"""Topic configs: Kafka's names, checked, and mapped onto `LogConfig`.

A topic's configs are its overrides (what CreateTopics or IncrementalAlterConfigs set),
over the broker-wide defaults (`--config NAME=VALUE` with a topic config's name), over the
defaults below (LogConfig's own). `TopicConfigs.log_config()` is what its partitions are
opened with; the two that are not LogConfig fields (`delayed.delivery.max.spread.ms` and
`message.timestamp.type`) are read by the produce path from `TopicConfigs.spread_ms` and
`.log_append_time`.

Cost: checking a set of configs builds one LogConfig (microseconds); nothing here is on a
per-request hot path (the produce path reads the two attributes).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..config import LogConfig
from ..errors import InvalidConfigError

_MAX_LONG = (1 << 63) - 1
_DEFAULT = LogConfig()

# config types as DescribeConfigs v3+ names them (Kafka's ConfigType)
BOOLEAN, STRING, INT, LONG, DOUBLE = 1, 2, 3, 5, 6


@dataclass(frozen=True)
class ConfigSpec:
    """One topic config: its type, default (as Kafka shows it), how a value is checked and
    turned into the field of `LogConfig` (or of TopicConfigs) it sets."""
    name: str
    config_type: int
    default: str
    parse: Callable[[str], Any]
    field: str | None   # the LogConfig field it sets (None: read by the broker itself)
    doc: str


def _bool(text: str) -> bool:
    if text.lower() not in ("true", "false"):
        raise ValueError("must be true or false")
    return text.lower() == "true"


def _long(lo: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise ValueError("must be an integer") from None
        if not lo <= value <= _MAX_LONG:
            raise ValueError(f"must be in [{lo}, {_MAX_LONG}]")
        return value
    return parse


def _int(lo: int) -> Callable[[str], int]:
    check = _long(lo)

    def parse(text: str) -> int:
        value = check(text)
        if value > (1 << 31) - 1:
            raise ValueError(f"must be in [{lo}, {(1 << 31) - 1}]")
        return value
    return parse


def _flush(text: str) -> int | None:
    """Kafka's 'never' is Long.MAX_VALUE; LogConfig's is None."""
    value = _long(1)(text)
    return None if value == _MAX_LONG else value


def _ratio(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError("must be a number") from None
    if not 0 <= value <= 1:
        raise ValueError("must be in [0, 1]")
    return value


def _timestamp_type(text: str) -> bool:
    if text not in ("CreateTime", "LogAppendTime"):
        raise ValueError("must be CreateTime or LogAppendTime")
    return text == "LogAppendTime"


def _cleanup_policy(text: str) -> str:
    if text.strip() != "delete":
        raise ValueError("only 'delete' is supported (Kafka's key compaction is not; "
                         "delayed topics compact by kdelay.compaction.min.ratio)")
    return "delete"


def _flush_default(value: int | None) -> str:
    return str(_MAX_LONG if value is None else value)


SPECS: dict[str, ConfigSpec] = {s.name: s for s in (
    ConfigSpec("delayed.delivery.enable", BOOLEAN, "true", _bool, "delayed_delivery_enable",
               "false makes a plain FIFO topic, fetched by offset"),
    ConfigSpec("delayed.delivery.max.delay.ms", LONG, "0", _long(0), "max_delivery_delay_ms",
               "the longest delay a record may ask for (0: no limit)"),
    ConfigSpec("delayed.delivery.max.spread.ms", LONG, "0", _long(0), None,
               "how much later than it asked a produced record may come due when it shares "
               "a stored batch"),
    ConfigSpec("segment.bytes", INT, str(_DEFAULT.segment_bytes), _int(1), "segment_bytes",
               "roll before the active segment would pass this size"),
    ConfigSpec("segment.ms", LONG, str(_DEFAULT.segment_ms), _long(1), "segment_ms",
               "roll when the active segment's first batch is older than this"),
    ConfigSpec("retention.ms", LONG, str(_DEFAULT.retention_ms), _long(-1), "retention_ms",
               "delete a segment this long after its last record came due (-1: never)"),
    ConfigSpec("retention.bytes", LONG, str(_DEFAULT.retention_bytes), _long(-1),
               "retention_bytes", "delete the oldest segments past this size (-1: no limit)"),
    ConfigSpec("max.message.bytes", INT, str(_DEFAULT.max_batch_bytes), _int(1),
               "max_batch_bytes", "the largest record batch a producer may send"),
    ConfigSpec("flush.messages", LONG, _flush_default(_DEFAULT.flush_messages), _flush,
               "flush_messages", "fsync after this many records"),
    ConfigSpec("flush.ms", LONG, _flush_default(_DEFAULT.flush_ms), _flush, "flush_ms",
               "fsync when the oldest unflushed append is this old"),
    ConfigSpec("index.interval.bytes", INT, str(_DEFAULT.index_interval_bytes), _int(1),
               "index_interval_bytes", "bytes of log between offset index entries"),
    ConfigSpec("remote.storage.enable", BOOLEAN, "false", _bool, None,
               "copy sealed segments to the store kdelay.remote.storage names"),
    ConfigSpec("local.retention.ms", LONG, "-2", _long(-2), "local_retention_ms",
               "keep local copies of copied segments this long (-2: retention.ms)"),
    ConfigSpec("local.retention.bytes", LONG, "-2", _long(-2), "local_retention_bytes",
               "keep local copies of copied segments up to this size (-2: retention.bytes)"),
    ConfigSpec("message.timestamp.type", STRING, "CreateTime", _timestamp_type, None,
               "LogAppendTime: records take the broker's append time as their timestamp"),
    ConfigSpec("kdelay.compaction.min.ratio", DOUBLE, str(_DEFAULT.compaction_min_ratio),
               _ratio, "compaction_min_ratio",
               "rewrite a sealed segment once this share of its bytes is removable"),
    ConfigSpec("cleanup.policy", STRING, "delete", _cleanup_policy, None,
               "only delete (delay-aware retention)"),
)}

REMOTE_STORAGE = "kdelay.remote.storage"  # broker-wide: the store's URL
REMOTE_OPTION_PREFIX = "kdelay.remote.storage."  # broker-wide: the store's options


def parse_value(name: str, value: str | None) -> Any:
    """A config's value checked; InvalidConfigError naming the config otherwise."""
    spec = SPECS.get(name)
    if spec is None:
        raise InvalidConfigError(f"unknown topic config {name!r}")
    if value is None:
        raise InvalidConfigError(f"config {name} needs a value")
    try:
        return spec.parse(value)
    except ValueError as e:
        raise InvalidConfigError(f"config {name}={value!r}: {e}") from None


class TopicConfigs:
    """One topic's configs: its overrides over the broker-wide defaults. Construction
    checks everything (each value, and the LogConfig they make together) and raises
    InvalidConfigError naming the config at fault."""

    def __init__(self, overrides: Mapping[str, str], broker_defaults: Mapping[str, str]):
        self.overrides = dict(overrides)
        self.broker_defaults = {k: v for k, v in broker_defaults.items() if k in SPECS}
        for source in (self.broker_defaults, self.overrides):
            for name, value in source.items():
                parse_value(name, value)
        self._remote_url = broker_defaults.get(REMOTE_STORAGE)
        self._remote_options = {k[len(REMOTE_OPTION_PREFIX):]: v
                                for k, v in broker_defaults.items()
                                if k.startswith(REMOTE_OPTION_PREFIX)}
        self.spread_ms: int = self.value("delayed.delivery.max.spread.ms")
        self.log_append_time: bool = self.value("message.timestamp.type")
        self._log_config = self._make_log_config()

    def text(self, name: str) -> tuple[str, int]:
        """(the value as text, its DescribeConfigs source: 1 topic, 4 broker, 5 default)."""
        if name in self.overrides:
            return self.overrides[name], 1
        if name in self.broker_defaults:
            return self.broker_defaults[name], 4
        return SPECS[name].default, 5

    def value(self, name: str) -> Any:
        return SPECS[name].parse(self.text(name)[0])

    def log_config(self) -> LogConfig:
        return self._log_config

    def _make_log_config(self) -> LogConfig:
        fields: dict[str, Any] = {}
        for spec in SPECS.values():
            if spec.field is not None:
                fields[spec.field] = self.value(spec.name)
        if self.value("remote.storage.enable"):
            if not self._remote_url:
                raise InvalidConfigError(
                    f"config remote.storage.enable=true needs the broker-wide "
                    f"{REMOTE_STORAGE} (a store URL) set with --config")
            fields["remote_storage"] = self._remote_url
            fields["remote_storage_options"] = {k: _option(v) for k, v in
                                                self._remote_options.items()}
        try:
            return LogConfig(**fields)
        except InvalidConfigError as e:  # name the config, not the field
            message = str(e)
            for spec in SPECS.values():
                if spec.field and f"LogConfig.{spec.field}" in message:
                    raise InvalidConfigError(
                        f"config {spec.name}={self.text(spec.name)[0]!r}: "
                        f"{message.replace(f'LogConfig.{spec.field}', spec.name)}") from None
            raise

    def with_changes(self, changes: Mapping[str, str | None]) -> TopicConfigs:
        """These configs with `changes` applied (None: back to the default); checked."""
        overrides = dict(self.overrides)
        for name, value in changes.items():
            if value is None:
                if name not in SPECS:
                    raise InvalidConfigError(f"unknown topic config {name!r}")
                overrides.pop(name, None)
            else:
                overrides[name] = value
        return TopicConfigs(overrides, {**self.broker_defaults, **self._remote_settings()})

    def _remote_settings(self) -> dict[str, str]:
        out = {REMOTE_OPTION_PREFIX + k: v for k, v in self._remote_options.items()}
        if self._remote_url:
            out[REMOTE_STORAGE] = self._remote_url
        return out


def _option(text: str) -> str | bool:
    return text.lower() == "true" if text.lower() in ("true", "false") else text
