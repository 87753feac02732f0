"""The open/close protocol on its own (kdelay.log.local.open_and_close): the clean-shutdown marker
survives a clean open until the first change, a clean close writes it with the clock, and
the finalizer releases the directory lock of a dropped owner."""

from __future__ import annotations

import gc
import os

import pytest

from kdelay.errors import LogLockedError
from kdelay.log.local import open_and_close
from kdelay.log.local.loader import CLEAN_SHUTDOWN_FILE


class Owner:
    """Stands in for a Log: the finalizer is tied to its lifetime."""


def _open(d: str) -> tuple[Owner, open_and_close.Lifetime]:
    owner = Owner()
    return owner, open_and_close.Lifetime(owner, d, open_and_close.open_log_directory(d, 4096))


def test_marker_written_by_clean_close_and_removed_by_first_change(tmp_path):
    d = str(tmp_path / "p")
    owner, life = _open(d)
    assert not life.marker_present
    life.close_clean(1234)
    life.release()
    marker = os.path.join(d, CLEAN_SHUTDOWN_FILE)
    with open(marker, "rb") as f:
        assert f.read() == b"1234"

    opened = open_and_close.open_log_directory(d, 4096)
    assert opened.marker_present and opened.clock_floor == 1234 and opened.report.clean
    owner = Owner()  # kept alive: its finalizer would release the descriptors
    life = open_and_close.Lifetime(owner, d, opened)
    assert os.path.exists(marker)  # a clean open writes nothing
    life.mark_dirty()
    assert not os.path.exists(marker) and not life.marker_present
    life.mark_dirty()  # once only
    life.release()


def test_dropped_owner_releases_the_lock(tmp_path):
    d = str(tmp_path / "p")
    owner, life = _open(d)
    with pytest.raises(LogLockedError):
        open_and_close.open_log_directory(d, 4096)
    del owner
    gc.collect()
    assert not life.finalizer.alive
    owner, again = _open(d)  # recovered, not refused
    again.release()
