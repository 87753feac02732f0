"""SIGKILL a real process that appends and syncs to a file:// store (copies, local
retention, orphans in the making), again and again on one directory. After each kill the
directory reopens and syncs: every acknowledged record reads exactly once, and the store
holds nothing that no manifest names."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import textwrap
import time

from kdelay import Log, LogConfig
from kdelay.log.tiered import manifest
from kdelay.testing.processes import child_env, kill_9

CONFIG = dict(segment_bytes=2048, index_interval_bytes=256, flush_messages=1,
              local_retention_bytes=4096)

WRITER = textwrap.dedent("""
    import sys
    from kdelay import Log, LogConfig, Record
    path, store = sys.argv[1], sys.argv[2]
    log = Log.open(path, config=LogConfig(remote_storage=store, segment_bytes=2048,
                                          index_interval_bytes=256, flush_messages=1,
                                          local_retention_bytes=4096))
    print("open", flush=True)
    while True:
        res = log.append([Record(b"%d" % log.log_end_offset + b"." * 200)])
        print("ack", res.base_offset, flush=True)
        if res.base_offset % 7 == 0:
            log.sync_remote()
""")


def test_kill_9_while_syncing_loses_no_acknowledged_record(tmp_path):
    path, store = os.fspath(tmp_path / "p-0"), f"file://{tmp_path / 'store'}"
    rng = random.Random(7)
    acked: set[int] = set()
    for _ in range(4):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, path, store],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=child_env())
        try:
            assert proc.stdout.readline().startswith("open"), proc.stderr.read()[-2000:]
            deadline = time.monotonic() + rng.uniform(0.3, 1.2)
            while time.monotonic() < deadline:
                line = proc.stdout.readline()
                if line.startswith("ack"):
                    acked.add(int(line.split()[1]))
            kill_9(proc, acked)  # and the acks it printed before the kill landed
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
    assert len(acked) > 20
    with Log.open(path, config=LogConfig(remote_storage=store, **CONFIG)) as log:
        log.sync_remote()
        got, offset = [], log.log_start_offset
        while batch := log.read(offset, max_records=500):
            got += [r.offset for r in batch]
            assert all(r.value.startswith(b"%d." % r.offset) for r in batch)
            offset = batch[-1].offset + 1
        assert got == list(range(log.log_start_offset, log.log_end_offset))  # each once
        assert acked <= set(got)
        assert log.metrics()["remote"]["segments_local"] < len(log.segments)  # some remote
        listing = log._tier.store.list()
        named = set()
        for name in listing:
            if name.endswith(manifest.MANIFEST_SUFFIX):
                copy = manifest.decode(log._tier.store.get(name), name)
                named |= {copy.object_name(s) for s in copy.objects}
        assert {n for n in listing if not n.endswith(manifest.MANIFEST_SUFFIX)} == named
