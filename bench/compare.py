"""Side-by-side benchmark: kdelay against its peers on the standard delayed-topic workload.

    python bench/compare.py                  # 1,000,000 records, 3 rounds, all engines
    python bench/compare.py --quick          # 100,000 records, 1 round (under a minute)
    python bench/compare.py --records 200000 --rounds 5 --engines kdelay,sqlite

Every engine gets the same pre-generated data (generated and converted to each engine's input
form outside the timed regions), in the same process. See bench/README.md for what each peer
models and how each figure is measured.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import ctypes
import gc
import io
import json
import os
import platform
import pstats
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from array import array
from typing import Any, NamedTuple

from peers import ENGINES, Engine, FakeClock, Workload, available_engines, make_engine
from proc_memory import memory_figures

HERE = os.path.dirname(os.path.abspath(__file__))
T0 = 1_700_000_000_000  # the injected clock's starting time (ms)
KEY_BYTES = 16
VALUE_BYTES = 100
PAGE = 500


class Shape(NamedTuple):
    spread_ms: int  # deliverAfter = append time + uniform(0, spread_ms)
    batch: int  # records per batch
    stamped: bool  # every record carries its own timestamp (a producer's CreateTime)
    record_da: bool  # deliver_after per record (the batch takes the max), not per batch
    retry_share: float  # share of batches whose records all carry the kdelay.attempt header
    about: str


WORKLOADS = {
    "producer": Shape(15 * 60_000, 100, True, False, 0.0,
                      "a timestamp per record, deliver_after per batch (the default)"),
    "producer-record-da": Shape(15 * 60_000, 100, True, True, 0.0,
                                "a timestamp per record, deliver_after per record"),
    "retry": Shape(100, 100, True, False, 0.25,
                   "almost sorted (due within 100 ms), 1 batch in 4 carries kdelay.attempt "
                   "on every record"),
    "small-batch": Shape(15 * 60_000, 10, True, False, 0.0,
                         "10-record batches, a timestamp per record"),
    "no-timestamps": Shape(15 * 60_000, 100, False, False, 0.0,
                           "the old benchmark shape: no record timestamps, no headers"),
    "almost-sorted": Shape(100, 100, False, False, 0.0,
                           "the old retry-topic shape: no timestamps, due within 100 ms"),
    "single-record": Shape(15 * 60_000, 1, True, False, 0.0,
                           "one record per batch, a timestamp per record"),
}
DEFAULT_WORKLOADS = ["producer", "producer-record-da", "retry", "small-batch", "no-timestamps"]
DEFAULT_ENGINES = ["kdelay", "sqlite", "heapq", "heapq-per-batch", "heap-payload", "rocksdb",
                   "redis", "rawfile"]
# --small-calls: the cells of the small-call comparison (1-, 10- and 100-record batches, a
# timestamp on every record) against the ordered peers that run in this process
SMALL_CALL_WORKLOADS = ["single-record", "small-batch", "producer"]
SMALL_CALL_ENGINES = ["kdelay", "sqlite", "heapq", "heapq-per-batch", "heap-payload", "rocksdb"]
# the cells kdelay is held to against the best peer: key, label
BEST_PEER_CELLS = [("interleaved_batches_s", "append+fetch steps/s"),
                   ("append_rec_s", "append rec/s"), ("drain_rec_s", "drain rec/s")]
# the same cells per CPU second (less moved by other work on a shared machine)
BEST_PEER_CPU_CELLS = [("interleaved_batches_cpu_s", "append+fetch steps/CPU-s"),
                       ("append_rec_cpu_s", "append rec/CPU-s"),
                       ("drain_rec_cpu_s", "drain rec/CPU-s")]
perf = time.perf_counter
cpu = time.process_time  # CPU seconds of this process, all threads


def generate(name: str, n_records: int, seed: int) -> Workload:
    """Batch i is appended at T0 + i ms (the clock moves 1 ms per batch) and is due at its
    append time plus a random delay; 16-byte keys and 100-byte values are random bytes.
    Stamped records carry increasing timestamps from the 20 ms before their append (a
    producer's linger); per-record deliver_after wishes lie up to 1 s below the batch's,
    with the first record's equal to it (so the batch's deliverAfter is known)."""
    shape = WORKLOADS[name]
    bs = shape.batch
    if n_records % bs:
        raise SystemExit(f"--records must be a multiple of the batch size {bs}")
    rng = random.Random(f"{seed}-{name}")
    n_batches = n_records // bs
    append_time = [T0 + i for i in range(n_batches)]
    deliver_after = [t + rng.randint(0, shape.spread_ms) for t in append_time]
    kb = rng.randbytes(KEY_BYTES * n_records)
    vb = rng.randbytes(VALUE_BYTES * n_records)
    keys = [kb[i:i + KEY_BYTES] for i in range(0, len(kb), KEY_BYTES)]
    values = [vb[i:i + VALUE_BYTES] for i in range(0, len(vb), VALUE_BYTES)]
    timestamps = record_da = attempt = None
    if shape.stamped:
        timestamps = []
        for t in append_time:
            timestamps.extend(sorted(t - rng.randint(0, 20) for _ in range(bs)))
    if shape.record_da:
        record_da = []
        for da in deliver_after:
            record_da.append(da)
            record_da.extend(da - rng.randint(0, 1000) for _ in range(bs - 1))
    if shape.retry_share:
        attempt = [rng.randint(1, 5) if rng.random() < shape.retry_share else None
                   for _ in range(n_batches)]
    return Workload(name, bs, append_time, deliver_after, keys, values, timestamps, record_da,
                    attempt)


def expected_offsets(work: Workload) -> array:
    """All offsets in (deliver_after, offset) order."""
    order = sorted(range(work.n_batches), key=lambda i: (work.deliver_after[i], i))
    out = array("q")
    b = work.batch_size
    for i in order:
        out.extend(range(i * b, (i + 1) * b))
    return out


class OrderCheck:
    """Checks, record by record and outside the timed regions, that a consumer sees exactly
    the expected (deliver_after, offset) sequence with the right keys and values, and never a
    record before it is due."""

    def __init__(self, work: Workload, expected: array, engine: Engine) -> None:
        self.work, self.expected, self.engine = work, expected, engine
        self.n = 0
        self.unordered_records = 0

    def page(self, page: list, now: int) -> None:
        eng = self.engine
        if not eng.ordered:
            self.unordered_records += eng.count(page)
            return
        w, exp, norm = self.work, self.expected, eng.norm
        bs = w.batch_size
        for rec in page:
            da, off, key, value = norm(rec)
            i = self.n
            if i >= len(exp):
                raise AssertionError(f"{eng.name}: more records than appended (offset {off})")
            if off != exp[i] or da != w.deliver_after[off // bs]:
                raise AssertionError(
                    f"{eng.name}: record #{i} is (deliver_after={da}, offset={off}); expected "
                    f"(deliver_after={w.deliver_after[exp[i] // bs]}, offset={exp[i]})")
            if da > now:
                raise AssertionError(f"{eng.name}: offset {off} delivered at {now}, due at {da}")
            if bytes(key) != w.keys[off] or bytes(value) != w.values[off]:
                raise AssertionError(f"{eng.name}: offset {off} came back with the wrong key/value")
            self.n = i + 1

    def complete(self) -> None:
        want = self.work.n_records
        got = self.n if self.engine.ordered else self.unordered_records
        if got != want:
            raise AssertionError(f"{self.engine.name}: drained {got} records, appended {want}")


def _clean(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)


def _noop() -> None:
    pass


def run_once(eng: Engine, work: Workload, expected: array, root: str,
             profilers: dict[str, cProfile.Profile] | None = None) -> dict[str, Any]:
    """One round for one engine on one workload: append all, reopen + first page, drain the
    rest in due order, then (on a fresh store) the interleaved run. With `profilers`
    (phase name -> Profile), each phase's timed regions are profiled separately."""
    n, nb = work.n_records, work.n_batches
    last_due = max(work.deliver_after)
    out: dict[str, Any] = {}

    def phase(name: str) -> tuple:
        if profilers is None:
            return _noop, _noop
        prof = profilers.setdefault(name, cProfile.Profile())
        return prof.enable, prof.disable

    prof_on, prof_off = phase("append")

    # --- append everything -------------------------------------------------------------
    path = tempfile.mkdtemp(prefix=f"{eng.name}-", dir=root)
    clock = FakeClock(T0)
    eng.open(path, clock)
    at = work.append_time
    gc.collect()
    x = eng.external_cpu()
    prof_on()
    c = cpu()
    t = perf()
    for i in range(nb):
        clock.now = at[i]
        eng.append(i)
    dt = perf() - t
    dc = cpu() - c
    prof_off()
    out["append_rec_s"] = n / dt
    out["append_rec_cpu_s"] = n / (dc + eng.external_cpu() - x)
    eng.close()
    out["disk_bytes_per_rec"] = eng.disk_bytes(path) / n

    # --- reopen + first page, then drain the rest in due order --------------------------
    clock.now = last_due + 1
    check = OrderCheck(work, expected, eng)
    prof_on, prof_off = phase("reopen + drain")
    gc.collect()
    prof_on()
    t = perf()
    eng.open(path, clock)
    page = eng.fetch(PAGE)
    dt = perf() - t
    prof_off()
    out["reopen_first_page_ms"] = dt * 1000
    if eng.count(page) != min(PAGE, n):
        raise AssertionError(f"{eng.name}: first page after reopen has {eng.count(page)} records")
    check.page(page, clock.now)
    drained, dt, dc = 0, 0.0, 0.0
    gc.collect()
    x = eng.external_cpu()
    while True:
        prof_on()
        c = cpu()
        t = perf()
        page = eng.fetch(PAGE)
        dt += perf() - t
        dc += cpu() - c
        prof_off()
        c = eng.count(page)
        if not c:
            break
        drained += c
        check.page(page, clock.now)
    check.complete()
    dc += eng.external_cpu() - x
    out["drain_rec_s"] = drained / dt if dt else float("nan")
    out["drain_rec_cpu_s"] = drained / dc if dc else float("nan")
    out["drained_in_drain_phase"] = drained
    eng.close()
    _clean(path)

    # --- interleaved: append a batch, fetch what is due, clock + 1 ms -----------------------
    path = tempfile.mkdtemp(prefix=f"{eng.name}-i-", dir=root)
    clock = FakeClock(T0)
    eng.open(path, clock)
    check = OrderCheck(work, expected, eng)
    prof_on, prof_off = phase("interleaved")
    steps = array("d")
    delivered, dc = 0, 0.0
    gc.collect()
    x = eng.external_cpu()
    for i in range(nb):
        pages = []
        prof_on()
        c = cpu()
        t = perf()
        clock.now = at[i]
        eng.append(i)
        while True:
            page = eng.fetch(PAGE)
            pages.append(page)
            if eng.count(page) < PAGE:
                break
        steps.append(perf() - t)
        dc += cpu() - c
        prof_off()
        for p in pages:
            delivered += eng.count(p)
            check.page(p, clock.now)
    dc += eng.external_cpu() - x
    clock.now = last_due + 1  # untimed: deliver the rest so the whole sequence is checked
    while True:
        page = eng.fetch(PAGE)
        if not eng.count(page):
            break
        check.page(page, clock.now)
    check.complete()
    eng.close()
    _clean(path)
    total = sum(steps)
    srt = sorted(steps)
    out["interleaved_batches_s"] = nb / total
    out["interleaved_batches_cpu_s"] = nb / dc
    out["interleaved_p50_ms"] = srt[len(srt) // 2] * 1000
    out["interleaved_p99_ms"] = srt[min(len(srt) - 1, int(len(srt) * 0.99))] * 1000
    out["interleaved_max_ms"] = srt[-1] * 1000
    out["interleaved_delivered_while_running"] = delivered
    return out


# --------------------------------------------------------------------------- memory


def _trim() -> None:
    """Collect garbage and hand freed heap back to the OS (glibc malloc_trim), so that what
    remains is what the process really holds."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def memory_child(engine: str, workload: str, n_records: int, seed: int, root: str) -> None:
    """Runs in a fresh process: process memory growth from an empty open store to one holding
    every record pending, as a user sees it in `top`. The baseline is taken with the store
    open and before the input exists; after the appends, the input records are freed and the
    allocator trimmed, so the growth is what the engine holds (and what the input it freed
    leaves pinned). USS is the headline; RssAnon and a server's used_memory are reported too.
    Prints one JSON line."""
    eng = make_engine(engine)
    path = tempfile.mkdtemp(prefix=f"mem-{engine}-", dir=root)
    clock = FakeClock(T0)
    # an empty store, opened once and closed, so that imports and one-time caches are warm
    work0 = generate(workload, WORKLOADS[workload].batch, seed + 1)
    eng.prepare(work0)
    eng.open(path, clock)
    eng.append(0)
    eng.close()
    _clean(path)
    del work0
    eng.open(path, clock)
    _trim()
    before = memory_figures()
    ext_before = eng.external_memory()
    work = generate(workload, n_records, seed)
    eng.prepare(work)
    for i in range(work.n_batches):
        clock.now = work.append_time[i]
        eng.append(i)
    eng.prepare(generate(workload, WORKLOADS[workload].batch, seed + 2))  # drops its input
    del work
    _trim()
    after = memory_figures()
    ext_after = eng.external_memory()
    eng.close()
    eng.shutdown()
    _clean(path)
    res = {"uss_delta": after["uss"] - before["uss"],
           "rss_anon_delta": after["rss_anon"] - before["rss_anon"]}
    if ext_before is not None and ext_after is not None:
        res["server_used_memory_delta"] = ext_after - ext_before
    res["bytes_per_pending_record"] = (res["uss_delta"]
                                       + res.get("server_used_memory_delta", 0)) / n_records
    print(json.dumps(res))


def measure_memory(engine: str, workload: str, n_records: int, seed: int, root: str) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--memory-child", engine,
           "--workloads", workload, "--records", str(n_records), "--seed", str(seed),
           "--dir", root]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if proc.returncode:
        return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr else "failed"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------- reporting

METRICS = [
    # key, header, higher_is_better, format
    ("append_rec_s", "append rec/s", True, "rate"),
    ("drain_rec_s", "drain rec/s", True, "rate"),
    ("reopen_first_page_ms", "reopen + 1st page ms", False, "ms"),
    ("interleaved_batches_s", "interleaved batches/s", True, "rate"),
    ("interleaved_p99_ms", "interleaved p99 step ms", False, "ms"),
    ("interleaved_max_ms", "interleaved max step ms", False, "ms"),
]
CPU_METRICS = [
    ("append_rec_cpu_s", "append rec/CPU-s", True, "rate"),
    ("drain_rec_cpu_s", "drain rec/CPU-s", True, "rate"),
    ("interleaved_batches_cpu_s", "interleaved batches/CPU-s", True, "rate"),
]


def fmt_rate(v: float) -> str:
    if v != v:  # nan
        return "n/a"
    if v >= 1e6:
        return f"{v / 1e6:.2f} M"
    if v >= 1e3:
        return f"{v / 1e3:.0f} k"
    return f"{v:.0f}"


def fmt_ms(v: float) -> str:
    return f"{v:.1f}" if v >= 10 else f"{v:.2f}"


def fmt(v: float | None, kind: str) -> str:
    if v is None:
        return "n/a"
    return fmt_rate(v) if kind == "rate" else fmt_ms(v)


def medians(runs: list[dict]) -> dict[str, float]:
    keys = runs[0].keys()
    return {k: statistics.median(r[k] for r in runs) for k in keys}


def metric_cells(figures: dict, ref: dict | None, is_ref: bool, metrics: list) -> list[str]:
    """One table cell per metric: the value, and its ratio to kdelay's."""
    cells = []
    for key, _h, _hib, kind in metrics:
        v = figures.get(key)
        cell = fmt(v, kind)
        if ref and not is_ref and v is not None and ref.get(key):
            cell += f" (×{v / ref[key]:.2f})"
        cells.append(cell)
    return cells


def best_peer(med: dict, key: str) -> tuple[str, float] | None:
    """The ordered peer with the highest figure for ``key`` in one workload's medians."""
    peers = [(e, fig[key]) for e, fig in med.items()
             if e != "kdelay" and ENGINES[e].ordered and fig.get(key) == fig.get(key)]
    return max(peers, key=lambda p: p[1]) if peers else None


def best_peer_ratios(summary: dict, workloads: list[str]) -> dict:
    """Per workload and cell: kdelay's median, the best ordered peer's (name and median),
    and kdelay / best (above 1: kdelay is ahead)."""
    out: dict[str, dict] = {}
    for w in workloads:
        med = summary.get(w, {})
        if "kdelay" not in med:
            continue
        out[w] = {}
        for key, _label in BEST_PEER_CELLS + BEST_PEER_CPU_CELLS:
            best = best_peer(med, key)
            if best is None:
                continue
            mine = med["kdelay"][key]
            out[w][key] = {"kdelay": mine, "peer": best[0], "peer_value": best[1],
                           "ratio": mine / best[1]}
    return out


def best_peer_table(ratios: dict, workloads: list[str]) -> str:
    """Per workload, wall time then CPU time: each cell is kdelay's figure, the best peer's,
    and the ratio."""
    lines = ["### kdelay against the best peer in the same run\n",
             "Each cell: kdelay's median / the best ordered peer's median (which peer), and "
             "the ratio (above 1: kdelay is ahead). Wall time, then CPU time.\n"]
    for cells in (BEST_PEER_CELLS, BEST_PEER_CPU_CELLS):
        lines.extend(_best_peer_rows(ratios, workloads, cells))
    return "\n".join(lines)


def _best_peer_rows(ratios: dict, workloads: list[str], cells: list) -> list[str]:
    head = ["workload", "batch"] + [label for _k, label in cells]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for w in workloads:
        if w not in ratios:
            continue
        row = [f"`{w}`", str(WORKLOADS[w].batch)]
        for key, _label in cells:
            c = ratios[w].get(key)
            row.append("—" if c is None else
                       f"{fmt_rate(c['kdelay'])} / {fmt_rate(c['peer_value'])} ({c['peer']}): "
                       f"**{c['ratio']:.2f}x**")
        lines.append("| " + " | ".join(row) + " |")
    lines.append("")
    return lines


def build_tables(summary: dict, memory: dict, engines: list[str], workloads: list[str]) -> str:
    lines = []
    for w in workloads:
        med = summary.get(w, {})
        ref = med.get("kdelay")
        sh = WORKLOADS[w]
        lines.append(f"### Workload `{w}`: {sh.about}\n")
        lines.append(f"{sh.batch}-record batches, due within {sh.spread_ms:,} ms of the append.\n")
        head = ["engine"] + [m[1] for m in METRICS] + ["B / pending rec", "disk B / rec", "order check"]
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|" + "---|" * len(head))
        for e in engines:
            if e not in med:
                continue
            row = [e, *metric_cells(med[e], ref, e == "kdelay", METRICS)]
            mem = memory.get(w, {}).get(e)
            if mem and "bytes_per_pending_record" in mem:
                cell = f"{mem['bytes_per_pending_record']:.0f}"
                if "server_used_memory_delta" in mem:
                    cell += " (server)"
            elif mem and "error" in mem:
                cell = "error"
            else:
                cell = "—"
            row.append(cell)
            row.append(f"{med[e]['disk_bytes_per_rec']:.0f}")
            row.append("ok" if ENGINES[e].ordered else "n/a (count only)")
            lines.append("| " + " | ".join(row) + " |")
        lines.append("")
        lines.append(f"CPU time instead of wall time (`{w}`; this process's CPU seconds, all "
                     "threads, plus redis-server's; less sensitive to other load on the machine):\n")
        head = ["engine"] + [m[1] for m in CPU_METRICS]
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|" + "---|" * len(head))
        for e in engines:
            if e not in med:
                continue
            row = [e, *metric_cells(med[e], ref, e == "kdelay", CPU_METRICS)]
            lines.append("| " + " | ".join(row) + " |")
        lines.append("")
    extra = [w for w in memory if w not in workloads]
    if extra:
        lines.append("### Memory only\n")
        lines.append("| workload | " + " | ".join(e for e in engines) + " |")
        lines.append("|" + "---|" * (len(engines) + 1))
        for w in extra:
            cells = []
            for e in engines:
                mem = memory[w].get(e) or {}
                cells.append(f"{mem['bytes_per_pending_record']:.0f}"
                             if "bytes_per_pending_record" in mem else "—")
            lines.append(f"| `{w}` ({WORKLOADS[w].about}) | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


# --------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--small-calls", action="store_true",
                   help="the small-call cells: 1-, 10- and 100-record batches, 200,000 records, "
                        "3 rounds, kdelay against sqlite, heapq, heapq-per-batch, heap-payload and "
                        "rocksdb, no memory subprocesses (explicit flags still win)")
    p.add_argument("--quick", action="store_true",
                   help="100,000 records, 1 round, memory measured (about a minute in all)")
    p.add_argument("--records", type=int, default=None, help="records per workload (default 1,000,000)")
    p.add_argument("--rounds", type=int, default=None, help="rounds; medians are reported (default 3)")
    p.add_argument("--engines", default=None,
                   help=f"comma-separated subset of {','.join(DEFAULT_ENGINES)}")
    p.add_argument("--workloads", default=None,
                   help=f"comma-separated subset of {','.join(WORKLOADS)}")
    p.add_argument("--no-memory", action="store_true", help="skip the per-engine memory subprocesses")
    p.add_argument("--memory-workloads", default=None,
                   help="workloads whose memory is measured (default: the first one); e.g. "
                        "producer,single-record")
    p.add_argument("--profile", action="store_true",
                   help="also profile kdelay's timed phases with cProfile (an extra, untimed run)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--dir", default=None, help="where the engines' data directories go (default: a temp dir)")
    p.add_argument("--out", default=os.path.join(HERE, "results"), help="where compare.md/.json go")
    p.add_argument("--memory-child", default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.small_calls:
        a.engines = a.engines or ",".join(SMALL_CALL_ENGINES)
        a.workloads = a.workloads or ",".join(SMALL_CALL_WORKLOADS)
        a.records = a.records or 200_000
        a.no_memory = True
    a.engines = a.engines or ",".join(DEFAULT_ENGINES)
    a.workloads = a.workloads or ",".join(DEFAULT_WORKLOADS)
    if a.records is None:
        a.records = 100_000 if a.quick else 1_000_000
    if a.rounds is None:
        a.rounds = 1 if a.quick else 3
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    workloads = [w for w in a.workloads.split(",") if w]
    for w in workloads:
        if w not in WORKLOADS:
            raise SystemExit(f"unknown workload {w!r}; choose from {', '.join(WORKLOADS)}")
    if a.memory_child:
        memory_child(a.memory_child, workloads[0], a.records, a.seed, a.dir or tempfile.gettempdir())
        return 0

    engines = available_engines([e for e in a.engines.split(",") if e])
    if not engines:
        raise SystemExit("no engine can run")
    own_root = a.dir is None
    root = tempfile.mkdtemp(prefix="kdelay-bench-") if own_root else a.dir
    os.makedirs(root, exist_ok=True)
    print(f"{a.records:,} records x {len(workloads)} workloads, {a.rounds} round(s), engines: "
          f"{', '.join(engines)}; data under {root}", flush=True)

    t_gen = perf()
    works = {w: generate(w, a.records, a.seed) for w in workloads}
    expected = {w: expected_offsets(works[w]) for w in workloads}
    prepared: dict[tuple[str, str], Engine] = {}
    for w in workloads:
        for e in engines:
            eng = make_engine(e)
            eng.prepare(works[w])
            prepared[(w, e)] = eng
    gc.collect()
    gc.freeze()  # the pre-generated data is permanent: keep it out of the timed GC passes
    print(f"generated and prepared in {perf() - t_gen:.1f} s (untimed)", flush=True)

    raw: dict[str, dict[str, list[dict]]] = {w: {e: [] for e in engines} for w in workloads}
    try:
        for r in range(a.rounds):
            order = engines[r % len(engines):] + engines[:r % len(engines)]
            for w in workloads:
                for e in order:
                    t = perf()
                    res = run_once(prepared[(w, e)], works[w], expected[w], root)
                    raw[w][e].append(res)
                    print(f"round {r + 1} {w:>13} {e:>8}: append {fmt_rate(res['append_rec_s'])}/s, "
                          f"drain {fmt_rate(res['drain_rec_s'])}/s, reopen "
                          f"{fmt_ms(res['reopen_first_page_ms'])} ms, interleaved "
                          f"{fmt_rate(res['interleaved_batches_s'])} batches/s (p99 "
                          f"{fmt_ms(res['interleaved_p99_ms'])} ms) [{perf() - t:.1f} s]",
                          flush=True)

        memory: dict[str, dict[str, dict]] = {}
        if not a.no_memory:
            mws = a.memory_workloads.split(",") if a.memory_workloads else workloads[:1]
            for mw in mws:
                if mw not in WORKLOADS:
                    raise SystemExit(f"unknown workload {mw!r}")
                memory[mw] = {}
                for e in engines:
                    memory[mw][e] = measure_memory(e, mw, a.records, a.seed, root)
                    print(f"memory {mw} {e}: {memory[mw][e]}", flush=True)

        profile_text = None
        if a.profile and "kdelay" in engines:
            profile_text = profile_kdelay(prepared, works, expected, workloads, root)
    finally:
        for eng in prepared.values():
            eng.shutdown()
        if own_root:
            _clean(root)

    summary = {w: {e: medians(raw[w][e]) for e in engines if raw[w][e]} for w in workloads}
    table = build_tables(summary, memory, engines, workloads)
    vs_best = best_peer_ratios(summary, workloads)
    notes = report_notes(a, engines)
    md = f"## kdelay vs peers\n\n{notes}\n\n{best_peer_table(vs_best, workloads)}\n{table}"
    print()
    print(md)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "compare.md"), "w") as f:
        f.write(md + "\n")
    ratios = {
        w: {e: {k: (summary[w][e][k] / summary[w]["kdelay"][k])
                for k, *_ in METRICS + CPU_METRICS if summary[w]["kdelay"].get(k)}
            for e in summary[w]} for w in workloads if "kdelay" in summary[w]
    }
    with open(os.path.join(a.out, "compare.json"), "w") as f:
        json.dump({"config": {"records": a.records, "rounds": a.rounds,
                              "page": PAGE, "key_bytes": KEY_BYTES, "value_bytes": VALUE_BYTES,
                              "workloads": {w: WORKLOADS[w]._asdict() for w in workloads},
                              "engines": engines, "seed": a.seed, "quick": a.quick},
                   "machine": machine_info(),
                   "runs": raw, "medians": summary, "ratios_vs_kdelay": ratios,
                   "kdelay_vs_best_peer": vs_best,
                   "memory": memory}, f, indent=1)
    if profile_text:
        with open(os.path.join(a.out, "profile_kdelay.txt"), "w") as f:
            f.write(profile_text)
        print(profile_text)
    print(f"wrote {os.path.join(a.out, 'compare.md')} and compare.json")
    return 0


def profile_kdelay(prepared: dict, works: dict, expected: dict, workloads: list[str],
                   root: str) -> str:
    """One extra kdelay round under cProfile (profiling only the timed regions)."""
    buf = io.StringIO()
    for w in workloads:
        profs: dict[str, cProfile.Profile] = {}
        run_once(prepared[(w, "kdelay")], works[w], expected[w], root, profilers=profs)
        for name, prof in profs.items():
            buf.write(f"=== kdelay, workload {w}, phase {name}: top 20 by own time ===\n")
            pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(20)
    return buf.getvalue()


def machine_info() -> dict:
    info = {"python": platform.python_version(), "platform": platform.platform(),
            "cpus": os.cpu_count(), "loadavg": os.getloadavg()}
    with contextlib.suppress(OSError):
        info["git"] = subprocess.run(["git", "-C", HERE, "rev-parse", "--short", "HEAD"],
                                     capture_output=True, text=True).stdout.strip()
    return info


def report_notes(a: argparse.Namespace, engines: list[str]) -> str:
    mi = machine_info()
    return (
        f"{a.records:,} records per workload (16-byte keys, 100-byte values, pages of 500), median of {a.rounds} round(s) with the engine order rotated each round; "
        f"Python {mi['python']}, {mi['cpus']} CPUs (1-min load average at the end "
        f"{mi['loadavg'][0]:.1f}: other work on the machine adds noise), commit "
        f"{mi.get('git', '?')}. "
        "`(×r)` = this engine's figure / kdelay's (for rec/s and batches/s above 1 means faster "
        "than kdelay; for ms, above 1 means slower). Drain = records after the reopen's first "
        "page, clock past the last deliverAfter. B / pending rec = growth of the process's "
        "USS (private memory, as `smem`/`top` see it) from an empty open store to one holding "
        "every record pending, measured once in a fresh process after the input records were "
        "freed and the allocator trimmed (malloc_trim); `(server)` adds redis-server's "
        "used_memory growth. Peers store each record's timestamp as kdelay does (not the "
        "retry header). Disk B / rec = file "
        "bytes after close. Every ordered engine's full delivered sequence was checked against the "
        "expected (deliverAfter, offset) order, keys and values included, in both the drain and "
        "the interleaved run.")


if __name__ == "__main__":
    sys.exit(main())
