"""SIGKILL a real process while it restores a lost directory from a file:// store (the
adoption of 80 copies, newest first), again and again on the same directory, the last
time once it appends. Then the directory reopens with the whole copied history: every
record once in offset and due order, the cancelled ones still cancelled, every
acknowledged append after the history, every `N.remote` its manifest."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import time

from kdelay import Log, LogConfig
from kdelay.log.segments.layout import REMOTE_SUFFIX
from kdelay.testing.processes import child_env, kill_9
from kdelay.testing.tiering import check_restored, tiered_history

CONFIG = dict(segment_bytes=1024, index_interval_bytes=128)

RESTORER = textwrap.dedent("""
    import sys
    from kdelay import Log, LogConfig, Record
    path, store = sys.argv[1], sys.argv[2]
    log = Log.open(path, config=LogConfig(remote_storage=store, segment_bytes=1024,
                                          index_interval_bytes=128, flush_messages=1))
    print("open", flush=True)
    for _ in range(300):
        res = log.append([Record(b"a%d" % log.log_end_offset)])
        print("ack", res.base_offset, flush=True)
    sys.stdin.read()  # waits for the kill
""")


def _markers(path: str) -> int:
    try:
        return sum(name.endswith(REMOTE_SUFFIX) for name in os.listdir(path))
    except FileNotFoundError:
        return 0


def test_kill_9_while_restoring_loses_nothing(tmp_path, clock):
    path, store = os.fspath(tmp_path / "p-0"), f"file://{tmp_path / 'store'}"
    config = LogConfig(remote_storage=store, **CONFIG)
    history = tiered_history(path, config, clock, 560)
    copies = _markers(path)
    assert copies >= 70
    shutil.rmtree(path)
    acked: set[int] = set()
    interrupted = 0
    # the first kills once a share of the copies is adopted, the last one once it appends
    for target in (copies // 4, copies // 2, 3 * copies // 4, None):
        proc = subprocess.Popen([sys.executable, "-c", RESTORER, path, store],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=child_env())
        try:
            if target is None:
                assert proc.stdout.readline().startswith("open"), proc.stderr.read()[-2000:]
                for _ in range(20):
                    acked.add(int(proc.stdout.readline().split()[1]))
            else:
                deadline = time.monotonic() + 60
                while _markers(path) < target and proc.poll() is None \
                        and time.monotonic() < deadline:
                    time.sleep(0.001)
            kill_9(proc, acked)  # and the acks it printed before the kill landed
            proc.wait()
            interrupted += _markers(path) < copies
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
    assert interrupted >= 2  # the kills landed in the middle of restores
    with Log.open(path, config=config) as log:  # the wall clock: everything is due
        check_restored(log, history, {o: b"a%d" % o for o in range(history.end,
                                                                   log.log_end_offset)},
                       must_have=acked)


def test_kill_9_collects_the_acks_printed_before_the_kill():
    script = ("import sys; print('ack 5'); print('noise'); print('ack 7', flush=True); "
              "print('printed', file=sys.stderr, flush=True); input()")
    proc = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    acked = {1}
    assert proc.stderr.readline() == "printed\n"
    assert proc.stdout.readline() == "ack 5\n"  # read already: not collected again
    kill_9(proc, acked)
    assert proc.wait() == -9 and acked == {1, 7}
