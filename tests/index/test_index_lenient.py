"""index_file's tools-facing side: the lenient reader (whatever a damaged file holds, and
why it is unreadable), the one currency rule, and the column names each kind declares."""

from __future__ import annotations

import os

import numpy as np
import pytest

from kdelay.errors import IndexFileError
from kdelay.index.deliver_after_index import DeliverAfterIndex
from kdelay.index.index_file import HEADER_SIZE, IndexMeta, currency_mismatches
from kdelay.index.offset_index import OffsetIndex
from kdelay.index.time_index import TimeIndex

ENTRIES = [(100 + i, 10 * i, 64 * i, 0, 64) for i in range(5)]


def _persisted(tmp_path) -> str:
    path = str(tmp_path / "x.dlyindex")
    DeliverAfterIndex.from_entries(0, ENTRIES).persist(path, log_bytes=320, next_offset=41)
    return path


def _patch(path: str, pos: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(pos)
        f.write(data)


@pytest.mark.parametrize("cls", [DeliverAfterIndex, OffsetIndex, TimeIndex])
def test_each_kind_names_its_columns(cls):
    assert len(cls.COLUMNS) == len(cls.DTYPES) and cls.NAME
    assert cls.entry_size() == sum(d.itemsize for d in cls.DTYPES)


def test_lenient_reads_a_good_file(tmp_path):
    r = DeliverAfterIndex.read_lenient(_persisted(tmp_path))
    assert r.problems == [] and r.header_crc_ok and r.data_crc_ok
    assert r.meta == IndexMeta(0, 320, 41, 5) and r.entries == 5
    assert [tuple(int(c[i]) for c in r.columns) for i in range(5)] == ENTRIES


def test_lenient_keeps_entries_of_a_bad_data_checksum(tmp_path):
    path = _persisted(tmp_path)
    _patch(path, HEADER_SIZE, b"\x7f")
    r = DeliverAfterIndex.read_lenient(path)
    assert r.problems == ["data checksum mismatch"] and not r.data_crc_ok
    assert r.columns is not None and r.entries == 5  # shown, flagged
    with pytest.raises(IndexFileError):
        DeliverAfterIndex.load(path, base_offset=0, log_bytes=320)


@pytest.mark.parametrize("damage, problem", [
    (lambda p: _patch(p, 0, b"XXXX"), "not a kdelay index: magic"),
    (lambda p: _patch(p, 30, b"\x01"), "header checksum mismatch"),
    (lambda p: os.truncate(p, 40), "truncated: 40 bytes"),
    (lambda p: os.truncate(p, os.path.getsize(p) - 4), "but the header's 5 entries need"),
    (os.unlink, "missing"),
])
def test_lenient_says_why_a_file_is_unreadable(tmp_path, damage, problem):
    path = _persisted(tmp_path)
    damage(path)
    r = DeliverAfterIndex.read_lenient(path)
    assert r.columns is None and len(r.problems) == 1 and problem in r.problems[0]
    assert r.missing == (problem == "missing")


def test_lenient_reports_the_magic_of_another_kind(tmp_path):
    path = str(tmp_path / "x.index")
    OffsetIndex(0).persist(path, log_bytes=0, next_offset=0)
    r = DeliverAfterIndex.read_lenient(path)
    assert r.magic == OffsetIndex.MAGIC and r.columns is None


def test_lenient_refuses_a_directory(tmp_path):
    with pytest.raises(IsADirectoryError):
        TimeIndex.read_lenient(str(tmp_path))


def test_currency_rule():
    meta = IndexMeta(10, 500, 20, 3)
    assert currency_mismatches(meta, base_offset=10, log_bytes=500) == []
    assert [m.field for m in currency_mismatches(meta, base_offset=11, log_bytes=499)] == \
        ["base_offset", "log_bytes"]
    (m,) = currency_mismatches(meta, base_offset=None, log_bytes=600)
    assert (m.field, m.found, m.expected) == ("log_bytes", 500, 600)
    assert currency_mismatches(meta, base_offset=None, log_bytes=None) == []


def test_strict_loader_applies_the_currency_rule(tmp_path):
    path = _persisted(tmp_path)
    with pytest.raises(IndexFileError, match="stale"):
        DeliverAfterIndex.load(path, base_offset=0, log_bytes=321)
    with pytest.raises(IndexFileError, match="base offset 0, expected 7"):
        DeliverAfterIndex.load(path, base_offset=7, log_bytes=320)
    idx = DeliverAfterIndex.load(path, base_offset=0, log_bytes=320)
    assert np.array_equal(idx.disk_columns[0], [e[0] for e in ENTRIES])
