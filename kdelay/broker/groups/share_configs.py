"""Share group configs: Kafka's (`share.record.lock.duration.ms`, `share.delivery.count.limit`,
`share.auto.offset.reset`, `errors.deadletterqueue.topic.name`) and kdelay's delayed
release (`kdelay.share.release.delay.ms`, `.backoff.multiplier`, `.delay.max.ms`).

Defaults come from the broker's `--config`; a group's own values are set through
IncrementalAlterConfigs on a GROUP resource and kept in ROOT/.kdelay-broker/groups/ (one
small JSON file per group, written atomically). A bad name or value refuses the whole
change with INVALID_CONFIG naming the config.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ... import fsio
from ...errors import InvalidConfigError
from ..topic_configs import DOUBLE, INT, LONG, STRING, _int, _long
from ..topic_store import BROKER_DIR

GROUPS_DIR = "groups"
_FORMAT = "kdelay-broker-group-configs v1"


def _reset(text: str) -> str:
    if text not in ("latest", "earliest"):
        raise ValueError("must be latest or earliest")
    return text


def _multiplier(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError("must be a number") from None
    if not 1.0 <= value <= 1000.0:
        raise ValueError("must be in [1, 1000]")
    return value


def _topic_name(text: str) -> str:
    from ...clients.topic import validate_topic_name
    return validate_topic_name(text) if text else ""


@dataclass(frozen=True)
class GroupSpec:
    name: str
    config_type: int
    default: str
    parse: Callable[[str], Any]
    doc: str


SPECS = {s.name: s for s in (
    GroupSpec("share.record.lock.duration.ms", INT, "30000", _int(1000),
              "how long a member holds an acquired record"),
    GroupSpec("share.delivery.count.limit", INT, "5", _int(2),
              "deliveries before a record is rejected instead"),
    GroupSpec("share.auto.offset.reset", STRING, "latest", _reset,
              "where a new share group starts: latest or earliest"),
    GroupSpec("errors.deadletterqueue.topic.name", STRING, "", _topic_name,
              "the topic rejected records are appended to (empty: none)"),
    GroupSpec("kdelay.share.release.delay.ms", LONG, "0", _long(0),
              "how long a released record waits before its next delivery"),
    GroupSpec("kdelay.share.release.backoff.multiplier", DOUBLE, "1", _multiplier,
              "the release delay's factor per earlier delivery"),
    GroupSpec("kdelay.share.release.delay.max.ms", LONG, "3600000", _long(0),
              "the release delay's cap"),
)}


def check(name: str, text: str | None) -> Any:
    """The parsed value of one config (InvalidConfigError naming it when bad)."""
    spec = SPECS.get(name)
    if spec is None:
        raise InvalidConfigError(f"unknown group config {name!r}")
    try:
        return spec.parse(spec.default if text is None else text)
    except (ValueError, InvalidConfigError) as e:
        raise InvalidConfigError(f"group config {name}={text!r}: {e}") from None


@dataclass(frozen=True)
class GroupConfigs:
    lock_ms: int
    delivery_limit: int
    auto_reset: str
    dead_letter_topic: str
    release_delay_ms: int
    backoff: float
    release_delay_max_ms: int

    def release_delay(self, delivery_count: int) -> int:
        """How long a record released after its `delivery_count`-th delivery waits: delay x
        multiplier^(count - 1), capped."""
        if self.release_delay_ms <= 0:
            return 0
        delay = self.release_delay_ms * self.backoff ** max(0, delivery_count - 1)
        return int(min(delay, self.release_delay_max_ms))


class GroupConfigStore:
    """Every share group's own configs over the broker-wide defaults."""

    def __init__(self, root: str, defaults: dict[str, str]):
        self.dir = os.path.join(root, BROKER_DIR, GROUPS_DIR)
        self.defaults = {k: v for k, v in defaults.items() if k in SPECS}
        for name, text in self.defaults.items():
            check(name, text)  # a bad --config refuses the start
        self._own: dict[str, dict[str, str]] = {}

    def _path(self, group: str) -> str:
        return os.path.join(self.dir, group.encode().hex() + ".json")

    def own(self, group: str) -> dict[str, str]:
        """The group's own settings (read once from disk)."""
        found = self._own.get(group)
        if found is None:
            raw = fsio.read_small(self._path(group))
            found = {}
            if raw is not None:
                body = json.loads(raw)
                if body.get("format") != _FORMAT or body.get("group") != group:
                    raise InvalidConfigError(f"group config file {self._path(group)} is "
                                             "damaged")
                found = dict(body["configs"])
            self._own[group] = found
        return found

    def text(self, group: str, name: str) -> tuple[str, int]:
        """(value, Kafka's ConfigSource: 1 set on the group, 4 broker default, 5 default)."""
        own = self.own(group)
        if name in own:
            return own[name], 1
        if name in self.defaults:
            return self.defaults[name], 4
        return SPECS[name].default, 5

    def configs(self, group: str) -> GroupConfigs:
        v = {name: check(name, self.text(group, name)[0]) for name in SPECS}
        return GroupConfigs(v["share.record.lock.duration.ms"], v["share.delivery.count.limit"],
                            v["share.auto.offset.reset"], v["errors.deadletterqueue.topic.name"],
                            v["kdelay.share.release.delay.ms"],
                            v["kdelay.share.release.backoff.multiplier"],
                            v["kdelay.share.release.delay.max.ms"])

    def alter(self, group: str, changes: dict[str, str | None], validate_only: bool) -> None:
        """Set (or, for None, return to the default) configs: all checked first."""
        for name, text in changes.items():
            check(name, text)
        if validate_only:
            return
        own = dict(self.own(group))
        for name, text in changes.items():
            if text is None:
                own.pop(name, None)
            else:
                own[name] = text
        os.makedirs(self.dir, exist_ok=True)
        body = {"format": _FORMAT, "group": group, "configs": own}
        fsio.atomic_write(self._path(group), (json.dumps(body) + "\n").encode())
        self._own[group] = own
