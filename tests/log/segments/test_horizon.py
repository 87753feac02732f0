"""The append horizon (kdelay/log/segments/append_horizon.py): what a writer publishes for lock-free readers,
how a reader bounds what it may have missed, and how damage and dead writers are treated."""

from __future__ import annotations

import os
import subprocess
import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from kdelay import Log, Record
from kdelay.log.segments import append_horizon
from kdelay.tools.verify import verify_partition

T0 = 1_700_000_000_000


def test_horizon_states(tmp_path):
    path = str(tmp_path / "p")
    assert append_horizon.read_state(path) is None  # no writer ever
    assert append_horizon.read_bound(path, T0) == T0 - 1
    log = Log.open(path, clock=lambda: T0)
    try:
        assert append_horizon.read_state(path) == (False, 0)  # idle
        log.append([Record(b"x")])
        assert append_horizon.read_state(path) == (False, T0)
        log._life.horizon.begin(T0 + 5)  # as an append does before it reads the clock
        assert append_horizon.read_state(path) == (True, T0 + 5)
        assert append_horizon.read_bound(path, T0 + 10) == T0 + 4
        assert append_horizon.read_bound(path, T0 + 3) == T0 + 2
        log._life.horizon.end(T0 + 5)
        assert append_horizon.read_bound(path, T0 + 10) == T0 + 9
    finally:
        log.close()
    # a closed writer is no writer; nor is a garbled file
    assert append_horizon.read_state(path) is None
    with open(os.path.join(path, append_horizon.HORIZON_FILE), "r+b") as f:
        f.write(b"garbage!")
    assert append_horizon.read_state(path) is None


def test_horizon_of_a_dead_writer_is_ignored(tmp_path):
    """A writer killed in the middle of an append must not stall readers forever."""
    path = str(tmp_path / "p")
    code = ("import os, sys\nfrom kdelay import Log\nlog = Log.open(sys.argv[1])\n"
            "log._life.horizon.begin(123)\nos._exit(0)\n")
    subprocess.run([sys.executable, "-c", code, path], check=True,
                   env=dict(os.environ, PYTHONPATH=os.getcwd()))
    assert append_horizon.read_state(path) is None
    assert append_horizon.read_bound(path, T0) == T0 - 1


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=40))
def test_any_damage_reads_as_no_writer_or_a_state(tmp_path_factory, raw):
    """Whatever the file holds, a reader gets None or a state, never an exception, and a
    file that is not exactly a horizon is never trusted."""
    d = str(tmp_path_factory.mktemp("h"))
    with open(os.path.join(d, append_horizon.HORIZON_FILE), "wb") as f:
        f.write(raw)
    state = append_horizon.read_state(d)
    bound = append_horizon.read_bound(d, T0)
    assert bound <= T0 - 1
    if len(raw) != append_horizon.SIZE or raw[:8] != append_horizon.MAGIC:
        assert state is None and bound == T0 - 1
        assert append_horizon.check_file(d) is not None


def test_verify_warns_about_a_damaged_horizon(tmp_path):
    path = str(tmp_path / "p")
    with Log.open(path) as log:
        log.append([Record(b"x")])
    assert not [f for f in verify_partition(path).findings if "horizon" in f.message]
    with open(os.path.join(path, append_horizon.HORIZON_FILE), "r+b") as f:
        f.write(b"XXXX")
    rep = verify_partition(path)
    (finding,) = [f for f in rep.findings if "horizon" in f.message]
    assert not finding.problem and "bad magic" in finding.message
    assert rep.ok  # a warning: readers ignore it, the next open rewrites it
    with Log.open(path):
        assert append_horizon.check_file(path) is None


def test_a_write_is_published_from_before_the_clock_is_read_until_it_ends(tmp_path):
    """Horizon.writing: under way (floor) while the clock is read and the write runs, then
    idle at the clock it used, also when the write raises; a clock that raises ends it at
    the floor."""
    path = str(tmp_path / "p")
    log = Log.open(path, clock=lambda: T0)
    horizon = log._life.horizon
    seen = []

    def clock():
        seen.append(append_horizon.read_state(path))
        return T0 + 7

    try:
        with horizon.writing(T0 + 5, clock) as now:
            assert now == T0 + 7
            assert append_horizon.read_state(path) == (True, T0 + 5)
        assert seen == [(True, T0 + 5)]
        assert append_horizon.read_state(path) == (False, T0 + 7)
        try:
            with horizon.writing(T0 + 8, lambda: T0 + 9):
                raise ValueError("the write failed")
        except ValueError:
            pass
        assert append_horizon.read_state(path) == (False, T0 + 9)

        def broken_clock():
            raise ValueError("no clock")

        try:
            with horizon.writing(T0 + 10, broken_clock):
                raise AssertionError("the block must not run")
        except ValueError:
            pass
        assert append_horizon.read_state(path) == (False, T0 + 10)
    finally:
        log.close()
