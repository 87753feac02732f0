"""Crashes of GroupStore.commit at every file operation, in every crash mode (kill -9, power
loss, power loss with the page cache part-written back, which tears an in-place slot), over
files in every state a commit meets: none yet, one slot, two slots, the first format. After
the reboot each group's position is its last acknowledged commit or, for the commit in
flight, the new one: never garbage, never an error, never older than acknowledged. Then the
same against a model, with hypothesis choosing the commits, reopens and the crash; and a real
process committing in a loop, killed with SIGKILL."""

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
from kdelay.groups.open_files import DescriptorPool
from kdelay.groups.position_file import encode_legacy
from kdelay.groups.positions import GROUPS_DIR, GroupStore
from kdelay.testing.faults import CRASH_MODES, FaultInjector, SimulatedCrash

# the state each group's file is in before the run: two slots, one slot, first format, none
BEFORE = {"two": DeliveryKey(1, 1), "one": DeliveryKey(2, 2), "legacy": DeliveryKey(3, 3),
          "fresh": None}
# the run: two rounds of single commits, then a group commit (so every group's file passes
# through every kind of write: created whole, upgraded, each slot overwritten)
RUN = [(g, DeliveryKey(10 + r, i)) for r in range(2) for i, g in enumerate(BEFORE)]
MANY = {g: DeliveryKey(20, i) for i, g in enumerate(BEFORE)}


def prepare(path: str) -> None:
    store = GroupStore(path)
    store.commit("two", DeliveryKey(0, 0), clock=1)
    store.commit("two", BEFORE["two"], clock=1)
    store.commit("one", BEFORE["one"], clock=1)
    with open(os.path.join(path, GROUPS_DIR, b"legacy".hex() + ".pos"), "wb") as f:
        f.write(encode_legacy("legacy", BEFORE["legacy"], 1))
    store.close()


def run(store: GroupStore, acked: dict, in_flight: dict) -> None:
    """The run, noting what each commit acknowledged and what was in flight."""
    for clock, (group, key) in enumerate(RUN, start=10):
        in_flight.clear()
        in_flight[group] = key
        store.commit(group, key, clock=clock)
        acked[group] = key
    in_flight.clear()
    in_flight.update(MANY)
    store.commit_many(MANY, clock=50)
    acked.update(MANY)
    in_flight.clear()


def count_ops(tmp_path) -> int:
    path = os.fspath(tmp_path / "count")
    prepare(path)
    with FaultInjector([path]) as inj:
        store = GroupStore(path, pool=DescriptorPool())
        run(store, {}, {})
        store.close()
    kinds = {op for op, _ in inj.ops}
    assert {"write", "fdatasync", "rename", "fsync_dir"} <= kinds, kinds
    return len(inj.ops)


def check(path: str, acked: dict, in_flight: dict) -> None:
    again = GroupStore(path)
    for group, before in BEFORE.items():
        got = again.committed(group)  # raises if a file has no valid slot
        want = acked.get(group, before)
        allowed = {want, in_flight.get(group, want)}
        assert got in allowed, (group, got, allowed)
    again.close()


@pytest.mark.parametrize("mode", CRASH_MODES)
def test_a_crash_at_every_operation_leaves_acknowledged_positions(tmp_path, mode):
    ops = count_ops(tmp_path)
    for crash_at in range(ops + 1):
        path = os.fspath(tmp_path / f"{mode}-{crash_at}")
        prepare(path)
        acked: dict = {}
        in_flight: dict = {}
        store = GroupStore(path, pool=DescriptorPool())
        with FaultInjector([path], crash_at=crash_at, seed=crash_at) as inj, \
                contextlib.suppress(SimulatedCrash):
            run(store, acked, in_flight)
        store.close()  # as the dead process's descriptors went
        inj.apply_crash(mode)
        check(path, acked, in_flight)
        # and it goes on: a commit after recovery is read back
        store = GroupStore(path)
        store.commit("two", DeliveryKey(99, 99), clock=99)
        store.close()
        assert GroupStore(path).committed("two") == DeliveryKey(99, 99)


# ------------------------------------------------------------------------- against a model

GROUPS = ["a", "b", "c"]
keys = st.builds(DeliveryKey, st.integers(0, 3), st.integers(0, 2**40))
steps = st.lists(st.one_of(
    st.tuples(st.just("commit"), st.sampled_from(GROUPS), st.none() | keys),
    st.tuples(st.just("many"), st.dictionaries(st.sampled_from(GROUPS), st.none() | keys,
                                               min_size=1)),
    st.tuples(st.just("reopen"))), min_size=1, max_size=25)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=steps, crash=st.none() | st.tuples(st.integers(0, 80), st.sampled_from(CRASH_MODES)),
       budget=st.integers(1, 4))
def test_commits_and_reopens_match_a_model(steps, crash, budget):
    """Each group reads back its last acknowledged commit, after any reopen and after a
    crash at any operation (then the commit in flight may have landed), with a descriptor
    budget small enough that files are closed and opened again between commits."""
    with tempfile.TemporaryDirectory() as path:
        pool = DescriptorPool(budget=budget)
        model: dict[str, DeliveryKey | None] = {}
        in_flight: dict[str, DeliveryKey | None] = {}
        clock = acked_clock = 0
        store = GroupStore(path, pool=pool)
        crash_at, mode = crash if crash is not None else (None, "process")
        with FaultInjector([path], crash_at=crash_at, seed=crash_at or 0) as inj:
            try:
                for step in steps:
                    clock += 1
                    if step[0] == "commit":
                        in_flight = {step[1]: step[2]}
                        store.commit(step[1], step[2], clock=clock)
                    elif step[0] == "many":
                        in_flight = dict(step[1])
                        store.commit_many(step[1], clock=clock)
                    else:
                        store.close()
                        store = GroupStore(path, pool=pool)
                        assert {g: store.committed(g) for g in GROUPS} == \
                            {g: model.get(g) for g in GROUPS}
                        assert store.max_clock() == acked_clock  # clocks only grow
                        continue
                    model.update(in_flight)
                    in_flight = {}
                    acked_clock = clock
            except SimulatedCrash:
                pass
        store.close()
        inj.apply_crash(mode)
        again = GroupStore(path)
        for g in GROUPS:
            got = again.committed(g)
            assert got in {model.get(g), in_flight.get(g, model.get(g))}, (g, got)
        again.close()


# ------------------------------------------------------------------------- kill -9

CHILD = textwrap.dedent("""
    import sys
    from kdelay import DeliveryKey, Log
    log = Log.open(sys.argv[1])
    i = 0
    while True:
        log.commit("g%d" % (i % 3), DeliveryKey(i, i))
        print(i, flush=True)  # acknowledged
        i += 1
""")


def test_kill_9_of_a_process_committing_in_a_loop(tmp_path):
    path = os.fspath(tmp_path / "p")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    for _ in range(2):  # a second life starts over the first one's files
        child = subprocess.Popen([sys.executable, "-c", CHILD, path],
                                 stdout=subprocess.PIPE, text=True, env=env)
        assert child.stdout is not None
        last = -1
        for line in child.stdout:  # until enough commits are acknowledged, however slow
            last = int(line)
            if last >= 60:
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
