"""The orphan rule (kdelay/log/tiered/copier.py `orphans`, `read_manifest`), which the
sync's sweep and `kdelay verify --remote` share: which objects no committed copy names."""

from __future__ import annotations

import json
import os

import pytest
from conftest import run_cli
from hypothesis import given
from hypothesis import strategies as st

from kdelay import CorruptLogError, Log, LogConfig, Record
from kdelay.log.segments.layout import segment_name
from kdelay.log.tiered.copier import orphans, read_manifest, sweep_orphans
from kdelay.log.tiered.manifest import manifest_name, object_name
from kdelay.log.tiered.tier import RemoteTier
from kdelay.testing.tiering import tier_out

COPY_IDS = ["00000000000000aa", "00000000000000bb", "00000000000000cc"]
# (name, base, copy id) of a copy's object; (name, None, None) of anything else listed
objects = st.builds(lambda base, copy_id, suffix: (object_name(base, copy_id, suffix), base,
                                                   copy_id),
                    st.integers(0, 3), st.sampled_from(COPY_IDS),
                    st.sampled_from([".log", ".index", ".cancelled"]))
others = st.builds(lambda name: (name, None, None),
                   st.one_of(st.builds(manifest_name, st.integers(0, 3)),
                             st.sampled_from(["not-kdelay.txt", "00000000000000000001.log"])))


@given(listed=st.lists(st.one_of(objects, others), unique_by=lambda t: t[0]),
       committed=st.dictionaries(st.integers(0, 3), st.one_of(st.none(),
                                                               st.sampled_from(COPY_IDS))))
def test_orphans_are_the_objects_of_no_committed_copy(listed, committed):
    got = orphans([name for name, _, _ in listed], committed)
    assert got == sorted(got)
    for name, base, copy_id in listed:
        if base is None:
            assert name not in got  # a manifest, or not kdelay's: never an orphan
        elif base in committed and committed[base] in (None, copy_id):
            assert name not in got  # its copy is committed, or its manifest unreadable
        else:
            assert name in got


@pytest.fixture
def tiered(tmp_path, file_remote):
    path = os.fspath(tmp_path / "p-0")
    cfg = file_remote.config(segment_bytes=2048, local_retention_ms=-1,
                             local_retention_bytes=-1)
    with Log.open(path, config=LogConfig(segment_bytes=2048)) as log:
        for i in range(60):
            log.append([Record(b"v%03d" % i + b"x" * 60)], delay_ms=5)
    bases = tier_out(path, cfg, remote_only=0)
    return path, cfg, bases, RemoteTier(path, cfg).store


def test_read_manifest_refuses_one_of_another_segment(tiered):
    _, _, bases, store = tiered
    assert read_manifest(store, bases[1]).base_offset == bases[1]
    store.put(manifest_name(bases[1]), store.get(manifest_name(bases[0])))
    with pytest.raises(CorruptLogError, match="describes segment") as e:
        read_manifest(store, bases[1])
    assert e.value.path == store.describe(manifest_name(bases[1]))


def test_verify_and_the_sweep_agree_on_orphans(tiered):
    path, _, bases, store = tiered
    store.put(object_name(bases[0], COPY_IDS[0], ".log"), b"an interrupted copy")
    # a damaged manifest: its copy id is unknown, so every object of its segment stays
    store.put(manifest_name(bases[1]), b"damaged")
    store.put(object_name(bases[1], COPY_IDS[1], ".log"), b"unjudged")
    rc, out, _ = run_cli("verify", "--remote", "--json", path)
    findings = json.loads(out)["partitions"][0]["findings"]
    removed = {f["path"] for f in findings if "next sync removes it" in f["message"]}
    assert removed == {store.describe(object_name(bases[0], COPY_IDS[0], ".log"))}
    # by the segment's file name: a bare base offset is a substring of many paths (the
    # pytest directory's number, other segments' names)
    assert not any(segment_name(bases[1]) in f["path"] and "orphan" in f["message"]
                   for f in findings)
    known = {}  # as the sync passes it: the copies its markers record
    for base in bases:
        if base != bases[1]:
            known[base] = read_manifest(store, base).copy_id
    before = set(store.list())
    assert sweep_orphans(store, store.list(), known) == 1
    assert {store.describe(n) for n in before - set(store.list())} == removed
