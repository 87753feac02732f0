"""The broker's own `--config` names (settings.BROKER_CONFIGS): each bad value refused at
start with a message naming it, each good one in force, and a name nothing reads named in
a warning instead of taken silently."""

from __future__ import annotations

import logging
import os
import re

import pytest

from kdelay import Broker
from kdelay.broker.errors import BrokerConfigError
from kdelay.broker.server import check_defaults, known_config
from kdelay.broker.settings import BROKER_CONFIGS, settings_from

INTEGERS = [c for c in BROKER_CONFIGS.values() if not isinstance(c.default, bool)]
BOOLEANS = [c for c in BROKER_CONFIGS.values() if isinstance(c.default, bool)]
BROKER_PACKAGE = os.path.join(os.path.dirname(__file__), "..", "..", "kdelay", "broker")


@pytest.mark.parametrize("spec", INTEGERS, ids=lambda c: c.name)
def test_an_integer_config_is_refused_below_its_least_value_or_as_text(spec):
    for bad in ("soon", "1.5", str(spec.minimum - 1)):
        with pytest.raises(BrokerConfigError, match=re.escape(spec.name)):
            check_defaults(settings_from("127.0.0.1:0", config={spec.name: bad}))
    settings = settings_from("127.0.0.1:0", config={spec.name: str(spec.minimum + 7)})
    check_defaults(settings)
    assert settings.config(spec.name) == spec.minimum + 7


@pytest.mark.parametrize("spec", BOOLEANS, ids=lambda c: c.name)
def test_a_boolean_config_takes_true_or_false_only(spec):
    with pytest.raises(BrokerConfigError, match=re.escape(spec.name)):
        check_defaults(settings_from("127.0.0.1:0", config={spec.name: "yes"}))
    for text, value in (("TRUE", True), ("false", False)):
        assert settings_from("127.0.0.1:0", config={spec.name: text}).config(spec.name) \
            is value


def test_every_name_the_package_reads_is_listed():
    """Handlers read the broker's names through settings.config(NAME); a name read but
    not listed would have no default and be warned about as unknown."""
    read = set()
    for folder, _, files in os.walk(BROKER_PACKAGE):
        for f in files:
            if f.endswith((".py", ".pyx")):
                with open(os.path.join(folder, f)) as src:
                    read |= set(re.findall(r"\.config\(\s*\"([a-z0-9.]+)\"", src.read()))
    assert read and read <= set(BROKER_CONFIGS)
    assert {"num.partitions", "producer.id.expiration.ms"} <= read


def test_defaults_are_in_force_without_configs():
    settings = settings_from("127.0.0.1:0")
    for spec in BROKER_CONFIGS.values():
        if spec.default is not None:
            assert settings.config(spec.name) == spec.default
    assert settings.socket_request_max_bytes == BROKER_CONFIGS[
        "socket.request.max.bytes"].default


def test_names_of_other_kinds_are_known():
    for name in ("retention.ms", "delayed.delivery.max.spread.ms",  # topic configs
                 "share.record.lock.duration.ms",                     # share group configs
                 "kdelay.remote.storage", "kdelay.remote.storage.region",  # the store
                 "num.partitions"):
        assert known_config(name), name
    assert not known_config("retention.msx")
    assert not known_config("broker.id")


def test_an_unknown_name_is_warned_about_and_the_broker_serves(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="kdelay.broker"), \
            Broker(tmp_path, listen="127.0.0.1:0",
                   config={"retention.msx": "5", "num.partitions": "2",
                           "broker.id": "1"}) as broker:
        assert broker._server.state.settings.config("num.partitions") == 2
    warned = [r.getMessage() for r in caplog.records if "does not know" in r.getMessage()]
    assert warned == ["ignoring --config names the broker does not know: broker.id, "
                      "retention.msx"]


def test_a_bad_default_stops_the_start_and_creates_nothing(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    with pytest.raises(BrokerConfigError, match="group.share.session.timeout.ms"), \
            Broker(root, listen="127.0.0.1:0", config={"group.share.session.timeout.ms": "0"}):
        pass
    assert not any(p.suffix == ".log" for p in root.rglob("*"))
