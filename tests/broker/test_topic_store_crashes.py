"""The broker's topic files (topic_store.py) and topic changes (topics.py) under a crash at
every file operation, in every crash mode: a CreateTopics, a config change, a
CreatePartitions or a DeleteTopics interrupted anywhere leaves, at the next start, the
topic as it was before or as it is after (never a half: a deleted topic's directories all
gone, a created one with its id and configs, a grown one with all its partitions), and
whatever was acknowledged before stays. A damaged topic file stops the start, naming it."""

from __future__ import annotations

import os

import pytest

from kdelay import CorruptLogError, Record
from kdelay.broker.topic_store import TopicStore
from kdelay.broker.topics import TopicRegistry
from kdelay.testing.faults import CRASH_MODES, FaultInjector, SimulatedCrash, close_abandoned


@pytest.fixture(autouse=True)
def _no_real_fsync(monkeypatch):
    monkeypatch.setattr(os, "fsync", lambda fd: None)


def prepared(root: str) -> TopicRegistry:
    reg = TopicRegistry(root, {})
    reg.open_existing()
    reg.create("keep", 1, {"retention.ms": "60000"})
    reg.get("keep").partition(0).append([Record(b"kept")])
    reg.create("gone", 2)
    reg.close()
    reg = TopicRegistry(root, {})
    reg.open_existing()
    return reg


def state(root: str) -> dict:
    reg = TopicRegistry(root, {})
    reg.open_existing()
    try:
        out = {name: (reg.get(name).partitions, dict(reg.configs(name).overrides),
                      reg.topic_id(name)) for name in reg.names()}
        out["kept"] = [r.value for r in reg.get("keep").partition(0).read(0)]
        dirs = sorted(d for d in os.listdir(root) if not d.startswith("."))
        out["dirs"] = dirs
        return out
    finally:
        reg.close()


CHANGES = {
    "create": lambda reg: reg.create("new", 2, {"segment.ms": "1000"}),
    "alter": lambda reg: reg.alter("keep", {"retention.ms": None, "segment.bytes": "4096"}),
    "grow": lambda reg: reg.add_partitions("keep", 3),
    "delete": lambda reg: reg.delete("gone"),
}


@pytest.mark.parametrize("mode", CRASH_MODES)
@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_crash_anywhere_leaves_before_or_after(tmp_path, change, mode):
    point = 0
    while True:
        root = str(tmp_path / f"{point}")
        reg = prepared(root)
        before = state_of(reg)
        inj = FaultInjector([root], crash_at=point)
        done = False
        with inj:
            try:
                CHANGES[change](reg)
                done = True
            except SimulatedCrash:
                pass
        for topic in list(reg):
            for log in topic.logs:
                close_abandoned(log)
        inj.apply_crash(mode)
        after = state(root)
        assert after["kept"] == [b"kept"], (point, after)
        tidy = {k: v for k, v in after.items() if k not in ("kept",)}
        if change == "create":
            assert ("new" not in tidy) or tidy["new"][:2] == (2, {"segment.ms": "1000"})
            news = [d for d in tidy["dirs"] if d.startswith("new-")]
            assert news == (["new-0", "new-1"] if "new" in tidy else [])
        elif change == "alter":
            assert tidy["keep"][1] in ({"retention.ms": "60000"}, {"segment.bytes": "4096"})
        elif change == "grow":
            assert tidy["keep"][0] in (1, 3)
            assert [d for d in tidy["dirs"] if d.startswith("keep-")] == \
                [f"keep-{i}" for i in range(tidy["keep"][0])]
        else:
            if "gone" not in tidy:
                assert not [d for d in tidy["dirs"] if d.startswith("gone-")]
            else:
                assert tidy["gone"] == before["gone"]
        if done and mode == "process":  # a change that returned is there after kill -9
            assert after_change(change, tidy)
        for name in set(before) & set(tidy):  # ids never change
            assert tidy[name][2] == before[name][2]
        if not inj.crashed:
            break
        point += 1
    assert point >= 2


def state_of(reg: TopicRegistry) -> dict:
    return {name: (reg.get(name).partitions, dict(reg.configs(name).overrides),
                   reg.topic_id(name)) for name in reg.names()}


def after_change(change: str, tidy: dict) -> bool:
    return {"create": "new" in tidy, "alter": tidy["keep"][1] == {"segment.bytes": "4096"},
            "grow": tidy["keep"][0] == 3, "delete": "gone" not in tidy}[change]


def test_a_damaged_topic_file_stops_the_start_naming_it(tmp_path):
    root = str(tmp_path)
    prepared(root).close()
    path = os.path.join(TopicStore(root).dir, "keep")
    with open(path, "r+b") as f:
        f.write(b"{garbage")
    reg = TopicRegistry(root, {})
    with pytest.raises(CorruptLogError, match="keep"):
        reg.open_existing()
    reg.close()


def test_kdelay_verify_checks_the_topic_records(tmp_path):
    import subprocess
    import sys

    from kdelay.testing.processes import child_env
    root = str(tmp_path)
    prepared(root).close()

    def verify() -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "kdelay", "verify", root],
                              capture_output=True, text=True, env=child_env(), timeout=120)

    assert verify().returncode == 0
    path = os.path.join(TopicStore(root).dir, "keep")
    with open(path, "r+b") as f:
        f.write(b"{garbage")
    damaged = verify()
    assert damaged.returncode == 1 and path in damaged.stdout
    assert "does not parse" in damaged.stdout
