"""Crashes of the group commit journal (kdelay.groups.positions) at every file operation, in
every crash mode (kill -9, power loss, power loss with the page cache part-written back,
which garbles an unsynced append): the first write of an upgraded directory (its per-group
files of both earlier formats folded in, then removed), appends of single commits and of
group commits, deletes, and the rewrite that swaps a compacted journal in. After the reboot
each group's position is its last acknowledged commit or, for the write in flight, the new
one: never garbage, never an error, never older than acknowledged, never a deleted group
back. Then the same against a model, with hypothesis choosing the steps, reopens and the
crash; and a real process committing in a loop, killed with SIGKILL."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import textwrap

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kdelay import DeliveryKey, Log
from kdelay.groups.legacy_positions import legacy_path
from kdelay.groups.position_file import SLOT_SPAN, encode_legacy, encode_slot
from kdelay.groups.positions import GROUPS_DIR, GroupStore
from kdelay.testing.faults import CRASH_MODES, FaultInjector, SimulatedCrash

GONE = "deleted"  # the model's value for a group with no position
SMALL = 600  # compact_min_bytes: small enough that a run swaps a compacted journal in


def write_old_files(path: str, files: dict) -> None:
    """Per-group files of the earlier versions: ("slots", key, clock) for the two-slot
    format (both slots: the newer in slot 1), ("text", key, clock) for the first."""
    directory = os.path.join(path, GROUPS_DIR)
    os.makedirs(directory, exist_ok=True)
    for group, (kind, key, clock) in files.items():
        if kind == "text":
            raw = encode_legacy(group, key, clock)
        else:
            older = encode_slot(group, 1, DeliveryKey(0, 0), clock - 1)
            raw = older + bytes(SLOT_SPAN - len(older)) + encode_slot(group, 2, key, clock)
        with open(legacy_path(directory, group), "wb") as f:
            f.write(raw)


def upgraded(path: str) -> dict:
    """A directory of an earlier version: per-group files only."""
    write_old_files(path, {"slots": ("slots", DeliveryKey(1, 1), 5),
                           "text": ("text", DeliveryKey(2, 2), 6),
                           "none": ("text", None, 3)})
    return {"slots": DeliveryKey(1, 1), "text": DeliveryKey(2, 2), "none": None}


def journaled(path: str) -> dict:
    """A journal, plus an old file of a group the journal already holds (what a crash
    between a fold and the removal of the old files leaves): the journal's position wins."""
    store = GroupStore(path)
    store.commit("a", DeliveryKey(1, 1), clock=1)
    store.commit("b", None, clock=2)
    store.commit("gone", DeliveryKey(3, 3), clock=3)
    store.delete("gone", clock=4)
    store.close()
    write_old_files(path, {"a": ("slots", DeliveryKey(0, 9), 1),
                           "gone": ("text", DeliveryKey(0, 8), 1)})
    return {"a": DeliveryKey(1, 1), "b": None, "gone": GONE}


SCENARIOS = {"upgraded": upgraded, "journaled": journaled}
GROUPS = ["slots", "text", "none", "a", "b", "gone", "new"]


def steps_of_a_run() -> list:
    """Single commits, a group commit, deletes, commits again: enough bytes for a swap."""
    out: list = [("commit", g, DeliveryKey(10, i)) for i, g in enumerate(GROUPS)]
    out.append(("many", {g: DeliveryKey(20, i) for i, g in enumerate(GROUPS)}))
    out += [("delete", "text"), ("delete", "a"), ("commit", "gone", None)]
    out += [("commit", g, DeliveryKey(30 + r, i)) for r in range(2)
            for i, g in enumerate(GROUPS[:3])]
    out.append(("many", {"text": DeliveryKey(40, 0), "new": DeliveryKey(40, 1)}))
    return out


def apply(store: GroupStore, step: tuple, clock: int) -> dict:
    """Run one step; returns what it changes (group -> key or GONE)."""
    if step[0] == "commit":
        store.commit(step[1], step[2], clock=clock)
        return {step[1]: step[2]}
    if step[0] == "many":
        store.commit_many(step[1], clock=clock)
        return dict(step[1])
    store.delete(step[1], clock=clock)
    return {step[1]: GONE}


def changes_of(step: tuple) -> dict:
    if step[0] == "commit":
        return {step[1]: step[2]}
    return dict(step[1]) if step[0] == "many" else {step[1]: GONE}


def position(store: GroupStore, group: str):
    return store.committed(group) if store.has_position(group) else GONE


def run(path: str, acked: dict, in_flight: dict) -> None:
    store = GroupStore(path, compact_min_bytes=SMALL)
    try:
        for clock, step in enumerate(steps_of_a_run(), start=100):
            in_flight.clear()
            in_flight.update(changes_of(step))
            acked.update(apply(store, step, clock))
            in_flight.clear()
    finally:
        store.close()  # as the dead process's descriptors went


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("mode", CRASH_MODES)
def test_a_crash_at_every_operation_leaves_acknowledged_positions(tmp_path, scenario, mode):
    count = os.fspath(tmp_path / "count")
    SCENARIOS[scenario](count)
    with FaultInjector([count]) as inj:
        run(count, {}, {})
    kinds = [op for op, _ in inj.ops]
    # the fold and the swaps (create, write, fsync, rename, directory fsync), the appends,
    # the removal of the old files
    assert {"create", "write", "fsync", "fdatasync", "rename", "fsync_dir", "unlink"} <= \
        set(kinds), kinds
    # the upgraded directory's journal is made by a rename: then one swap in either
    assert kinds.count("rename") >= {"upgraded": 2, "journaled": 1}[scenario], kinds
    assert kinds.count("fdatasync") >= 10, kinds
    assert sorted(os.listdir(os.path.join(count, GROUPS_DIR))) == ["positions.journal"]
    for crash_at in range(len(kinds) + 1):
        path = os.fspath(tmp_path / f"{mode}-{crash_at}")
        acked = SCENARIOS[scenario](path)
        in_flight: dict = {}
        with FaultInjector([path], crash_at=crash_at, seed=crash_at) as inj, \
                contextlib.suppress(SimulatedCrash):
            run(path, acked, in_flight)
        inj.apply_crash(mode)
        again = GroupStore(path)
        for group in GROUPS:
            want = acked.get(group, GONE)
            got = position(again, group)  # raises if anything is unreadable
            assert got in (want, in_flight.get(group, want)), (crash_at, group, got, want)
        # and it goes on: a commit after recovery is read back, and no old file is left
        again.commit("slots", DeliveryKey(99, 99), clock=999)
        again.close()
        final = GroupStore(path)
        assert final.committed("slots") == DeliveryKey(99, 99)
        assert sorted(os.listdir(os.path.join(path, GROUPS_DIR))) == ["positions.journal"]
        assert final.max_clock() == 999


# ------------------------------------------------------------------------- against a model

NAMES = ["a", "b", "c"]
keys = st.builds(DeliveryKey, st.integers(0, 3), st.integers(0, 2**40))
steps = st.lists(st.one_of(
    st.tuples(st.just("commit"), st.sampled_from(NAMES), st.none() | keys),
    st.tuples(st.just("many"), st.dictionaries(st.sampled_from(NAMES), st.none() | keys,
                                               min_size=1)),
    st.tuples(st.just("delete"), st.sampled_from(NAMES)),
    st.tuples(st.just("reopen"))), min_size=1, max_size=30)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=steps, crash=st.none() | st.tuples(st.integers(0, 90), st.sampled_from(CRASH_MODES)),
       old=st.booleans(), compact_min_bytes=st.sampled_from([0, 200, 1 << 20]))
def test_commits_deletes_and_reopens_match_a_model(steps, crash, old, compact_min_bytes):
    """Each group reads back its last acknowledged commit (or nothing once deleted), after
    any reopen and after a crash at any operation (then the write in flight may have
    landed), starting from old per-group files or from nothing, with journals rewritten
    often (compact_min_bytes 0: whenever the journal is 4x its live positions) or never."""
    with tempfile.TemporaryDirectory() as path:
        model: dict = {}
        if old:
            write_old_files(path, {"a": ("slots", DeliveryKey(7, 7), 1),
                                   "b": ("text", None, 1)})
            model = {"a": DeliveryKey(7, 7), "b": None}
        in_flight: dict = {}
        clock = 1
        acked_clock = 1 if old else 0  # the old files' clock
        store = GroupStore(path, compact_min_bytes=compact_min_bytes)
        crash_at, mode = crash if crash is not None else (None, "process")
        with FaultInjector([path], crash_at=crash_at, seed=crash_at or 0) as inj:
            try:
                for step in steps:
                    clock += 1
                    if step[0] == "reopen":
                        store.close()
                        store = GroupStore(path, compact_min_bytes=compact_min_bytes)
                        assert {g: position(store, g) for g in NAMES} == \
                            {g: model.get(g, GONE) for g in NAMES}
                        assert store.groups() == sorted(g for g in NAMES if g in model)
                        assert store.max_clock() == acked_clock  # clocks only grow
                        continue
                    in_flight = changes_of(step)
                    writes = step[0] != "delete" or step[1] in model  # else a no-op
                    apply(store, step, clock)
                    for g, v in in_flight.items():
                        if v is GONE:
                            model.pop(g, None)
                        else:
                            model[g] = v
                    in_flight = {}
                    acked_clock = clock if writes else acked_clock
            except SimulatedCrash:
                pass
        store.close()
        inj.apply_crash(mode)
        again = GroupStore(path)
        for g in NAMES:
            got = position(again, g)
            want = model.get(g, GONE)
            assert got in {want, in_flight.get(g, want)}, (g, got, want)
        again.close()


# ------------------------------------------------------------------------- kill -9

CHILD = textwrap.dedent("""
    import sys
    from kdelay import DeliveryKey, Log
    from kdelay.groups import positions
    positions.COMPACT_MIN_BYTES = 0  # rewritten whenever 4x the live positions
    log = Log.open(sys.argv[1])
    i = int(sys.argv[2])
    while True:
        if i % 7 == 6:
            log.commit_many({"g%d" % (i % 3): DeliveryKey(i, i), "many": DeliveryKey(i, i)})
        else:
            log.commit("g%d" % (i % 3), DeliveryKey(i, i))
        print(i, flush=True)  # acknowledged
        i += 1
""")


def test_kill_9_of_a_process_committing_in_a_loop(tmp_path):
    """Hundreds of commits per life, with the journal rewritten (swapped in) whenever it
    reaches 4x its live positions, so the kill may land in an append or in a swap."""
    path = os.fspath(tmp_path / "p")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    start = 0
    for _ in range(2):  # a second life starts over the first one's journal
        child = subprocess.Popen([sys.executable, "-c", CHILD, path, str(start)],
                                 stdout=subprocess.PIPE, text=True, env=env)
        assert child.stdout is not None
        last = -1
        for line in child.stdout:  # until enough commits are acknowledged, however slow
            last = int(line)
            if last >= start + 300:
                break
        child.send_signal(signal.SIGKILL)
        child.wait()
        for line in child.stdout.read().splitlines():  # what it said before it died
            last = int(line)  # one write per line: whole lines only
        with Log.open(path) as log:
            for g in range(3):
                acked = max(i for i in range(last + 1) if i % 3 == g)
                allowed = {DeliveryKey(acked, acked)}
                if (last + 1) % 3 == g:  # in flight at the kill (or done but not yet said)
                    allowed.add(DeliveryKey(last + 1, last + 1))
                got = log.committed(f"g{g}")
                assert got in allowed, (g, got, last)
            many = max(i for i in range(last + 1) if i % 7 == 6)
            assert log.committed("many") in {DeliveryKey(many, many),
                                             DeliveryKey(last + 1, last + 1)}
        start = last + 2
