"""Hygiene: files are created with sane permissions that honour the umask, the engine
writes nothing outside the directory it is given, and nothing read from disk is ever
unpickled or evaluated."""

from __future__ import annotations

import os
import pathlib
import re
import stat
import sys

import pytest

from kdelay import DeliveryKey, Log, LogConfig, QueueConsumer, Record
from kdelay.testing.faults import close_abandoned

T0 = 1_700_000_000_000
CFG = LogConfig(segment_bytes=400, index_interval_bytes=64, flush_messages=1)

# ---------------------------------------------------------------------- audit hook
# Python audit hooks cannot be removed, so one hook records into whichever list is active.
_RECORDING: list[tuple[str, tuple]] | None = None
_WATCHED = {"open", "os.rename", "os.remove", "os.truncate", "os.mkdir", "os.rmdir",
            "os.chmod", "os.symlink", "os.link", "shutil.rmtree", "pickle.find_class",
            "marshal.loads", "os.system", "subprocess.Popen"}


def _hook(event: str, args: tuple) -> None:
    if _RECORDING is not None and event in _WATCHED:
        _RECORDING.append((event, args))


sys.addaudithook(_hook)


def _lifecycle(path: str) -> None:
    """Everything that writes: create, append (rolling), commit (odd group names too),
    retention, clean close, reopen, crash, recovery with an index rebuild."""
    clock = [T0]
    log = Log.open(path, config=CFG, clock=lambda: clock[0])
    for i in range(30):
        log.append([Record(b"x" * (i % 50), key=b"k")], deliver_after=T0 + i)
    log.commit("../../escape", DeliveryKey(T0, 1))
    log.commit("/etc/passwd", DeliveryKey(T0, 2))
    log.commit("g\x00\n", None)
    q = QueueConsumer(log, "work", compact_min_bytes=0)  # a queue group's files, compacted
    q.ack(q.poll(max_records=3))
    q.release(q.poll(max_records=2), delay_ms=5)
    q.close()
    log.roll()
    clock[0] = T0 + 30 * 86_400_000
    log.enforce_retention()
    log.append([Record(b"after")])
    log.close()
    log = Log.open(path, config=CFG, clock=lambda: clock[0])
    log.append([Record(b"more")])
    close_abandoned(log)  # crash
    for name in os.listdir(path):
        if name.endswith(".dlyindex"):
            os.unlink(os.path.join(path, name))  # force rebuilds
            break
    with Log.open(path, config=CFG, clock=lambda: clock[0]) as log:
        log.fetch(max_records=1000)
        log.metrics()


def _is_write(event: str, args: tuple) -> bool:
    if event != "open":
        return event not in ("pickle.find_class", "marshal.loads")
    _path, mode, flags = args
    if mode is not None:
        return any(c in str(mode) for c in "wax+")
    return bool(flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND))


def _paths(event: str, args: tuple) -> list[str]:
    out = []
    for a in args[:2]:
        if isinstance(a, (str, bytes, os.PathLike)):
            out.append(os.fsdecode(a))
    return out


def test_engine_writes_only_inside_its_directory(tmp_path) -> None:
    global _RECORDING
    root = tmp_path / "outer"
    root.mkdir()
    path = str(root / "part-0")
    _RECORDING = []
    try:
        _lifecycle(path)
    finally:
        events, _RECORDING = _RECORDING, None
    writes = [(e, a) for e, a in events if _is_write(e, a)]
    assert writes, "the audit hook saw no writes: it is not watching"
    real = os.path.realpath(path)
    for event, args in writes:
        for p in _paths(event, args):
            if isinstance(args[0], int):
                continue  # an fd-relative call: its fd was opened (and checked) above
            full = os.path.realpath(p)
            assert full == real or full.startswith(real + os.sep), \
                f"{event} outside the log directory: {p}"
    assert sorted(os.listdir(root)) == ["part-0"]
    assert not [e for e, _ in events if e in ("pickle.find_class", "marshal.loads",
                                               "os.system", "subprocess.Popen")]


@pytest.mark.parametrize("umask", [0o027, 0o077, 0o022])
def test_files_honour_umask(tmp_path, umask) -> None:
    path = str(tmp_path / "p")
    old = os.umask(umask)
    try:
        _lifecycle(path)
    finally:
        os.umask(old)
    seen = 0
    for dirpath, dirnames, filenames in os.walk(path):
        for name in filenames + dirnames:
            full = os.path.join(dirpath, name)
            mode = stat.S_IMODE(os.lstat(full).st_mode)
            assert not os.path.islink(full), f"{full} is a symlink"
            assert mode & umask == 0, f"{full}: mode {mode:o} ignores umask {umask:o}"
            if name in filenames:
                assert mode & 0o111 == 0, f"{full}: executable file ({mode:o})"
                assert mode & 0o600 == 0o600, f"{full}: owner cannot read/write ({mode:o})"
            seen += 1
    top = stat.S_IMODE(os.stat(path).st_mode)
    assert top & umask == 0
    assert seen > 5


_FORBIDDEN = [
    (r"\bimport\s+pickle\b|\bfrom\s+pickle\b|\bpickle\.", "pickle"),
    (r"\bcPickle\b|\bdill\b|\bshelve\b|\bmarshal\.loads?\b", "pickle-like loader"),
    (r"(?<![\w.])eval\s*\(", "eval"),
    (r"(?<![\w.])exec\s*\(", "exec"),
    (r"allow_pickle\s*=\s*True", "numpy allow_pickle"),
    (r"yaml\.load\s*\((?![^)]*SafeLoader)", "yaml.load"),
    (r"\bos\.system\s*\(|shell\s*=\s*True", "shell"),
]


def test_no_pickle_eval_or_exec_in_the_engine() -> None:
    """A source scan of kdelay/ (kdelay/testing, test support, included)."""
    pkg = pathlib.Path(__file__).resolve().parents[1] / "kdelay"
    files = sorted(pkg.rglob("*.py"))
    assert len(files) > 10
    hits = []
    for f in files:
        text = f.read_text()
        for pattern, what in _FORBIDDEN:
            for m in re.finditer(pattern, text):
                line = text.count("\n", 0, m.start()) + 1
                hits.append(f"{f.relative_to(pkg.parent)}:{line}: {what}")
    assert not hits, "\n".join(hits)


def test_numpy_loads_of_index_files_never_unpickle(tmp_path) -> None:
    """Index files are mapped as raw little-endian columns; a file holding a numpy pickle
    payload is rejected as a corrupt index, never executed."""
    path = str(tmp_path / "p")
    with Log.open(path, config=CFG, clock=lambda: T0) as log:
        for i in range(10):
            log.append([Record(b"v%d" % i)])
    import pickle  # building the hostile payload is the test's business, not the engine's

    class Boom:
        def __reduce__(self):
            return (os.system, ("touch " + os.path.join(path, "PWNED"),))
    for name in os.listdir(path):
        if name.endswith((".dlyindex", ".index", ".timeindex")):
            with open(os.path.join(path, name), "wb") as f:
                f.write(pickle.dumps(Boom()))
    with Log.open(path, config=CFG, clock=lambda: T0) as log:
        assert [r.value for r in log.read(0, max_records=100)] == [b"v%d" % i
                                                                    for i in range(10)]
    assert not os.path.exists(os.path.join(path, "PWNED"))
