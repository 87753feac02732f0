"""Damage to the cancellation files (.cancels journal, .cancelindex cache): bit flips,
truncations, zeroed ranges, junk, deletion, swaps. Log.open raises nothing but KdelayError
and never hangs; a damaged cache loses nothing (the journal is the truth); a damaged journal
loses at most its damaged entries, each reported with file and byte position by the open
and by `kdelay verify`; the outcome is stable across a clean reopen."""

from __future__ import annotations

import os
import pathlib
import shutil

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kdelay import KdelayError, Log, LogConfig, Record
from kdelay.log.cancellation.journal import SLOT
from kdelay.tools.verify import verify_partition

T0 = 1_700_000_000_000
FAR = T0 + 10 ** 9
CFG = LogConfig(segment_bytes=600, index_interval_bytes=100)
N = st.integers(0, 1 << 20)


def _build(path: str) -> tuple[set[int], set[int]]:
    """A closed log with cancellations in several segments; (all offsets, cancelled)."""
    log = Log.open(path, config=CFG, clock=lambda: T0)
    for i in range(30):
        log.append([Record(b"v%d-%d" % (i, k)) for k in range(1 + i % 3)],
                   deliver_after=T0 + 1000 + i)
    cancelled = set(range(0, log.log_end_offset, 4))
    assert log.cancel(cancelled) == len(cancelled)
    for off in (1, 9, 30):
        log.reschedule(off, T0 + 5000)
        cancelled.add(off)
    everything = set(range(log.log_end_offset))
    log.close()
    return everything, cancelled


def _delivered(path: str) -> set[int]:
    with Log.open(path, config=CFG, clock=lambda: FAR) as log:
        got, after = set(), None
        while True:
            page = log.fetch(after, max_records=50)
            if not page.records:
                return got
            got |= {r.offset for r in page.records}
            after = page.next


_TEMPLATE: dict = {}


def _template(tmp_path_factory):
    if not _TEMPLATE:
        path = str(tmp_path_factory.mktemp("tpl") / "p")
        everything, cancelled = _build(path)
        files = {n: pathlib.Path(path, n).read_bytes() for n in os.listdir(path)
                 if n != ".lock"}
        _TEMPLATE.update(everything=everything, cancelled=cancelled, files=files)
    return _TEMPLATE


@settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES", 40)), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(which=st.sampled_from([".cancels", ".cancelindex"]), pick=N,
       mutation=st.one_of(
           st.tuples(st.just("flip"), N, st.integers(0, 7)),
           st.tuples(st.just("truncate"), N),
           st.tuples(st.just("zero"), N, st.integers(1, 100)),
           st.tuples(st.just("junk"), N, st.binary(min_size=1, max_size=40)),
           st.tuples(st.just("delete"),),
           st.tuples(st.just("swap"), N)))
def test_damaged_cancellation_files(tmp_path_factory, which, pick, mutation):
    t = _template(tmp_path_factory)
    files = dict(t["files"])
    names = sorted(n for n in files if n.endswith(which))
    name = names[pick % len(names)]
    data = bytearray(files[name])
    kind = mutation[0]
    if kind == "flip" and data:
        data[mutation[1] % len(data)] ^= 1 << mutation[2]
    elif kind == "truncate":
        del data[mutation[1] % (len(data) + 1):]
    elif kind == "zero" and data:
        i = mutation[1] % len(data)
        data[i:i + mutation[2]] = bytes(len(data[i:i + mutation[2]]))
    elif kind == "junk" and data:
        i = mutation[1] % len(data)
        data[i:i + len(mutation[2])] = mutation[2]
    elif kind == "swap":
        other = names[mutation[1] % len(names)]
        data = bytearray(files[other])
    if kind == "delete":
        del files[name]
    else:
        files[name] = bytes(data)
    path = str(tmp_path_factory.mktemp("fz") / "p")
    if os.path.exists(path):
        shutil.rmtree(path)
    os.makedirs(path)
    for n, d in files.items():
        with open(os.path.join(path, n), "wb") as f:
            f.write(d)
    damaged_journal = which == ".cancels" and files.get(name) != t["files"][name]
    report = verify_partition(path)
    if damaged_journal and kind != "delete":
        # every damaged slot (or the header) is named with its byte position
        assert any(f.problem and f.path.endswith(name) and f.position is not None
                   and f.position % SLOT == 0 for f in report.findings), report.findings
    try:
        got = _delivered(path)
    except KdelayError:
        return  # refusing is allowed
    assert got <= t["everything"]
    if which == ".cancelindex":
        assert got == t["everything"] - t["cancelled"], "a damaged cache lost cancellations"
    else:
        assert got >= t["everything"] - t["cancelled"], "damage cancelled a live record"
    # what the open settled is stable
    assert _delivered(path) == got
