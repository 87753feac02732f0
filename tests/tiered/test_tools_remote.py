"""`kdelay stats` and `kdelay verify --remote` on a tiered log (kdelay/tools/stats.py,
verify.py, verify_remote.py), against file:// and moto's S3: counts from the directory's
markers alone, every remote copy checked, damage to remote objects found and named."""

from __future__ import annotations

import json
import os

import pytest
from conftest import run_cli

from kdelay import Log, Record
from kdelay.log.segments.layout import LOG_SUFFIX, REMOTE_SUFFIX, segment_file
from kdelay.log.tiered import inventory
from kdelay.log.tiered.manifest import manifest_name
from kdelay.log.tiered.remote_marker import read_remote_marker
from kdelay.log.tiered.tier import RemoteTier
from kdelay.testing.tiering import tier_out

T0 = 1_700_000_000_000


@pytest.fixture
def tiered(tmp_path, remote, monkeypatch):
    """A log of six segments: the first three remote-only, two more copied and local, the
    active one local; the store's credentials only in the environment, as the CLI gets
    them."""
    for k, v in (("AWS_ACCESS_KEY_ID", "x"), ("AWS_SECRET_ACCESS_KEY", "x")):
        monkeypatch.setenv(k, v)
    path = os.fspath(tmp_path / "p-0")
    cfg = remote.config(segment_bytes=4096)
    t = [T0]
    with Log.open(path, config=cfg, clock=lambda: t[0]) as log:
        for i in range(300):
            t[0] += 1
            log.append([Record(b"v%d" % i, key=b"k")], deliver_after=T0 + 10_000 + i % 50)
        assert log.cancel([3, 4]) == 2
    bases = tier_out(path, cfg, remote_only=3)
    return path, cfg, bases


def _verify(path):
    rc, out, err = run_cli("verify", "--remote", "--json", path)
    return rc, json.loads(out), err


def test_stats_counts_local_and_remote_segments_from_the_markers(tiered):
    path, cfg, bases = tiered
    rc, out, _ = run_cli("stats", "--json", "--now", str(T0), path)
    assert rc == 0
    stats = json.loads(out)
    listed = inventory.list_all_segments(path)
    r = stats["remote"]
    assert r["storage"] == cfg.remote_storage
    assert (r["segments_local"], r["segments_remote"], r["segments_remote_only"]) == \
        (len(listed) - 3, len(bases), 3)
    assert r["bytes_remote"] == sum(s.remote.size for s in listed if s.remote is not None)
    assert r["bytes_local"] == sum(os.path.getsize(segment_file(path, s.base_offset, LOG_SUFFIX))
                                   for s in listed if not s.remote_only)
    assert r["remote_only_records"] == bases[3] - bases[0]
    assert stats["log_start_offset"] == 0 and stats["log_end_offset"] == 300
    rc, text, _ = run_cli("stats", path)
    assert "3 held only remotely" in text and cfg.remote_storage in text


@pytest.mark.parametrize("remote", ["file"], indirect=True)  # the format, not the store
def test_verify_without_remote_accepts_remote_only_segments(tiered):
    path, _, _ = tiered
    rc, out, err = run_cli("verify", path)
    assert rc == 0, out + err
    assert "held only in the object store" in out and "leftover" not in out


def test_verify_remote_checks_every_copy(tiered):
    path, _, bases = tiered
    rc, rep, err = _verify(path)
    assert rc == 0, (rep, err)
    part = rep["partitions"][0]
    assert part["remote_copies"] == len(bases)
    assert part["records"] == 300  # the remote-only segments' records are counted too


def _damage(path, cfg, base, suffix, how):
    tier = RemoteTier(path, cfg)
    copy = read_remote_marker(path, base)
    name = copy.object_name(suffix)
    data = tier.store.get(name)
    if how == "missing":
        tier.store.delete(name)
    elif how == "truncated":
        tier.store.put(name, data[: len(data) // 2])
    else:
        tier.store.put(name, data[:100] + bytes([data[100] ^ 0xFF]) + data[101:])
    return tier.store.describe(name)


@pytest.mark.parametrize("how", ["missing", "truncated", "corrupted"])
def test_verify_remote_finds_damaged_objects(tiered, how, remote):
    path, cfg, bases = tiered
    where = _damage(path, cfg, bases[1], LOG_SUFFIX, how)
    rc, rep, _ = _verify(path)
    assert rc == 1
    problems = [f for f in rep["partitions"][0]["findings"] if f["severity"] == "problem"]
    assert problems and all(f["path"] == where for f in problems), problems
    if how == "corrupted":  # the batch checks run over the copy: the bad batch is named
        assert any("CRC-32C mismatch in batch" in f["message"] and f["position"] is not None
                   for f in problems)


@pytest.mark.parametrize("remote", ["file"], indirect=True)  # the format, not the store
def test_verify_remote_finds_a_damaged_index_object(tiered):
    path, cfg, bases = tiered
    where = _damage(path, cfg, bases[0], ".dlyindex", "corrupted")
    rc, rep, _ = _verify(path)
    assert rc == 1
    assert {f["path"] for f in rep["partitions"][0]["findings"]
            if f["severity"] == "problem"} == {where}


@pytest.mark.parametrize("remote", ["file"], indirect=True)  # the format, not the store
def test_verify_remote_a_marker_without_its_manifest_fails(tiered):
    path, cfg, bases = tiered
    RemoteTier(path, cfg).store.delete(manifest_name(bases[4]))
    rc, rep, _ = _verify(path)
    assert rc == 1
    problems = [f for f in rep["partitions"][0]["findings"] if f["severity"] == "problem"]
    assert [f["path"] for f in problems] == [segment_file(path, bases[4], REMOTE_SUFFIX)]
    # and the copy's objects, no longer named by a manifest, are orphans: notes only
    assert any("orphan" in f["message"] for f in rep["partitions"][0]["findings"])


@pytest.mark.parametrize("remote", ["file"], indirect=True)  # the format, not the store
def test_verify_names_a_damaged_marker_once(tiered):
    path, _, bases = tiered
    marker = segment_file(path, bases[3], REMOTE_SUFFIX)  # a copied segment still local
    with open(marker, "wb") as f:
        f.write(b"garbage")
    rc, rep, _ = _verify(path)
    assert rc == 1
    problems = [f for f in rep["partitions"][0]["findings"] if f["severity"] == "problem"]
    assert [f["path"] for f in problems] == [marker], problems
    held = [f for f in rep["partitions"][0]["findings"] if "held only in" in f["message"]]
    assert len(held) == 3  # the remote-only segments beside it are still listed


@pytest.mark.parametrize("remote", ["file"], indirect=True)  # the format, not the store
def test_verify_remote_orphans_are_notes(tiered):
    path, cfg, bases = tiered
    store = RemoteTier(path, cfg).store
    store.put(f"{bases[0]:020d}.0123456789abcdef.log", b"half a copy")
    rc, rep, _ = _verify(path)
    assert rc == 0
    notes = [f for f in rep["partitions"][0]["findings"] if "orphan" in f["message"]]
    assert len(notes) == 1 and notes[0]["severity"] == "info"


@pytest.mark.parametrize("remote", ["file"], indirect=True)  # the format, not the store
def test_verify_remote_an_unreachable_store_fails(tiered, tmp_path):
    path, cfg, _ = tiered
    settings = os.path.join(path, "remote-storage.json")
    with open(settings) as f:
        doc = json.load(f)
    doc["remote_storage"] = "s3://kdelay-test/x"
    doc["remote_storage_options"] = {"endpoint": "http://127.0.0.1:9", "region": "us-east-1",
                                     "allow_http": True}
    with open(settings, "w") as f:
        json.dump(doc, f)
    rc, rep, _ = _verify(path)
    assert rc == 1
    assert any("unreachable" in f["message"] for f in rep["partitions"][0]["findings"])
