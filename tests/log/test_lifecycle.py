"""The open/close protocol on its own (kdelay.log.lifecycle): the clean-shutdown marker
survives a clean open until the first change, a clean close writes it with the clock, and
the finalizer releases the directory lock of a dropped owner."""

from __future__ import annotations

import gc
import os

import pytest

from kdelay.errors import LogLockedError
from kdelay.log import lifecycle
from kdelay.log.loader import CLEAN_SHUTDOWN_FILE


class Owner:
    """Stands in for a Log: the finalizer is tied to its lifetime."""


def _open(d: str) -> tuple[Owner, lifecycle.Lifetime]:
    owner = Owner()
    return owner, lifecycle.Lifetime(owner, d, lifecycle.open_log_directory(d, 4096))


def test_marker_written_by_clean_close_and_removed_by_first_change(tmp_path):
    d = str(tmp_path / "p")
    owner, life = _open(d)
    assert not life.marker_present
    life.close_clean(1234)
    life.release()
    marker = os.path.join(d, CLEAN_SHUTDOWN_FILE)
    with open(marker, "rb") as f:
        assert f.read() == b"1234"

    opened = lifecycle.open_log_directory(d, 4096)
    assert opened.marker_present and opened.clock_floor == 1234 and opened.report.clean
    owner = Owner()  # kept alive: its finalizer would release the descriptors
    life = lifecycle.Lifetime(owner, d, opened)
    assert os.path.exists(marker)  # a clean open writes nothing
    life.mark_dirty()
    assert not os.path.exists(marker) and not life.marker_present
    life.mark_dirty()  # once only
    life.release()


def test_dropped_owner_releases_the_lock(tmp_path):
    d = str(tmp_path / "p")
    owner, life = _open(d)
    with pytest.raises(LogLockedError):
        lifecycle.open_log_directory(d, 4096)
    del owner
    gc.collect()
    assert not life.finalizer.alive
    owner, again = _open(d)  # recovered, not refused
    again.release()
