"""The store a directory records (kdelay/log/tiered/tier.py): `partition_name` and
`recorded_store`, how the CLI and Spark reach a directory's copies from its files alone."""

from __future__ import annotations

import os

import pytest

from kdelay import CorruptLogError, LogConfig
from kdelay.log.tiered.tier import SETTINGS_FILE, partition_name, record_settings, recorded_store


@pytest.mark.parametrize("suffix", ["", "/"])
def test_partition_name_is_the_directory_base_name(tmp_path, monkeypatch, suffix):
    monkeypatch.chdir(tmp_path)
    assert partition_name(f"p-3{suffix}") == "p-3"
    assert partition_name(f"{tmp_path}/topic/p-3{suffix}") == "p-3"
    assert partition_name(".") == os.path.basename(tmp_path)


def test_recorded_store_opens_the_recorded_settings(tmp_path):
    directory = os.fspath(tmp_path / "p-0")
    os.mkdir(directory)
    assert recorded_store(directory) is None
    url = f"file://{tmp_path}/store"
    record_settings(directory, LogConfig(remote_storage=url,
                                         remote_storage_options={"secret_access_key": "s"}))
    store = recorded_store(directory)
    assert (store.url, store.partition) == (url, "p-0")
    opened = []
    recorded_store(directory, lambda *args: opened.append(args))
    assert opened == [(url, {}, "p-0")]  # credentials are never recorded


def test_recorded_store_refuses_damaged_settings(tmp_path):
    (tmp_path / SETTINGS_FILE).write_text("{not json")
    with pytest.raises(CorruptLogError) as e:
        recorded_store(os.fspath(tmp_path))
    assert e.value.path == os.path.join(tmp_path, SETTINGS_FILE)
