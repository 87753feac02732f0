"""The `kdelay` command line, run as a person would: in a subprocess, on logs written with
kdelay.Log, and on damaged copies of them (flipped byte, truncation, missing or garbled
index, a deleted middle segment)."""

from __future__ import annotations

import json
import os
import pty
import select
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kdelay import Log, LogConfig, Record
from kdelay.log.segments.layout import SegmentFiles, segment_name
from kdelay.testing.damage import flip_byte
from kdelay.tools.scanning import scan_segment
from kdelay.tools.verify import verify_partition

T0 = 1_700_000_000_000
CFG = LogConfig(segment_bytes=2500, index_interval_bytes=300)


def kdelay(*args: str, env: dict | None = None, stderr=subprocess.PIPE, timeout: float = 60,
           script: bool = False) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("KDELAY_")}
    full_env.update(env or {})
    cmd = ([str(Path(sys.executable).parent / "kdelay")] if script
           else [sys.executable, "-m", "kdelay"])
    return subprocess.run([*cmd, *args], stdout=subprocess.PIPE, stderr=stderr, text=True,
                          env=full_env, timeout=timeout)


def jsonl(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def build_log(path: str, batches: int = 60) -> dict:
    """A closed log of several segments with delayed batches, headers, null keys and binary
    values; returns what Log.read gave back before closing, and the segment bases."""
    t = [T0]
    with Log.open(path, config=CFG, clock=lambda: t[0]) as log:
        for i in range(batches):
            recs = [Record(bytes([j, 255 - j, i]) * (i % 4 + 1) if j % 2 else b"text %d-%d" % (i, j),
                           key=None if j == 1 else b"key-%d" % j,
                           headers=[("h", b"v%d" % j), ("n", None)] if i % 5 == 0 else ())
                    for j in range(i % 5 + 1)]
            # delays from 0 to days, out of append order, some in the past (due at once)
            da = T0 + [0, 30_000, 7_200_000, -5_000, 90_000_000, 400_000][i % 6] + i
            log.append(recs, deliver_after=max(0, da))
            t[0] += 1_000
        records = log.read(0, max_records=10_000)
        segments = log.segments
    return {"records": records, "segments": segments, "now": t[0]}


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict:
    path = os.fspath(tmp_path_factory.mktemp("cli") / "orders-0")
    info = build_log(path)
    info["path"] = path
    assert len(info["segments"]) >= 4
    return info


@pytest.fixture
def copy(built, tmp_path) -> str:
    dst = os.fspath(tmp_path / "copy-0")
    shutil.copytree(built["path"], dst)
    return dst


def seg_file(directory: str, base: int, suffix: str) -> str:
    return os.path.join(directory, segment_name(base) + suffix)


def problem_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("PROBLEM")]


def dump_batches(path: str) -> list[dict]:
    r = kdelay("dump-log", path, "--json")
    assert r.returncode == 0, r.stderr
    return jsonl(r.stdout)


# ---------------------------------------------------------------------------- healthy


def test_verify_healthy_log_exits_0(built):
    r = kdelay("verify", built["path"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert not problem_lines(r.stdout)
    assert r.stdout.splitlines()[-1].startswith("OK:")
    assert f"{len(built['records'])} records" in r.stdout


def test_console_script_is_installed(built):
    r = kdelay("verify", "-q", built["path"], script=True)
    assert r.returncode == 0, r.stderr
    assert "OK:" in r.stdout


def test_dump_log_json_matches_log_read(built):
    by_offset = {rec.offset: rec for rec in built["records"]}
    seen = []
    for base in built["segments"]:
        r = kdelay("dump-log", seg_file(built["path"], base, ".log"), "--json", "--print-data")
        assert r.returncode == 0, r.stderr
        batches = jsonl(r.stdout)
        assert batches[0]["base_offset"] == base and batches[0]["position"] == 0
        for prev, b in zip(batches, batches[1:], strict=False):
            assert b["position"] == prev["position"] + prev["size"]
            assert b["base_offset"] == prev["last_offset"] + 1
        for b in batches:
            assert b["crc_valid"] is True
            assert b["record_count"] == b["last_offset"] - b["base_offset"] + 1
            assert len(b["records"]) == b["record_count"]
            for rec in b["records"]:
                want = by_offset[rec["offset"]]
                assert b["deliver_after"] == want.deliver_after
                assert rec["timestamp"] == want.timestamp
                key = None if rec["key_hex"] is None else bytes.fromhex(rec["key_hex"])
                assert key == want.key
                assert bytes.fromhex(rec["value_hex"]) == want.value
                if rec["value"] is not None:
                    assert rec["value"].encode() == want.value
                assert [(h["key"], None if h["value_hex"] is None else
                         bytes.fromhex(h["value_hex"])) for h in rec["headers"]] == \
                    [tuple(h) for h in want.headers]
                seen.append(rec["offset"])
    assert seen == sorted(by_offset)


def test_dump_log_human_output(built):
    path = seg_file(built["path"], built["segments"][0], ".log")
    first = dump_batches(path)[0]
    r = kdelay("dump-log", path, "--print-data")
    assert r.returncode == 0
    # readable times next to the raw ms, sizes with units, records shown safely
    assert "(" + str(first["deliver_after"]) + ")" in r.stdout
    assert "2023-11-14T22:13:20" in r.stdout
    assert " B " in r.stdout
    assert '"text 0-0"' in r.stdout and "0x" in r.stdout  # text quoted, binary as hex
    assert "key null" in r.stdout


def test_dump_log_offsets_range(built):
    base = built["segments"][1]
    path = seg_file(built["path"], base, ".log")
    allb = dump_batches(path)
    lo, hi = allb[2]["base_offset"] + 1, allb[3]["base_offset"]
    r = kdelay("dump-log", path, "--json", "--print-data", "--offsets", f"{lo}..{hi}")
    assert r.returncode == 0, r.stderr
    got = jsonl(r.stdout)
    assert [b["base_offset"] for b in got] == [allb[2]["base_offset"], allb[3]["base_offset"]]
    offsets = [rec["offset"] for b in got for rec in b["records"]]
    assert offsets == list(range(lo, hi + 1))


def test_dump_log_offsets_outside_the_segment_say_where_it_is(built):
    second = built["segments"][1]
    path = seg_file(built["path"], second, ".log")
    last = dump_batches(path)[-1]["last_offset"]
    r = kdelay("dump-log", path, "--offsets", f"{last + 100}..")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == f"# 0 batches, 0 records: this segment ends at offset " \
                                        f"{last}"
    r = kdelay("dump-log", path, "--offsets", f"..{second - 1}")
    assert r.stdout.splitlines()[-1] == f"# 0 batches, 0 records: this segment starts at " \
                                        f"offset {second}"


def test_verify_quiet_prints_only_the_verdict_on_a_healthy_log(copy, built):
    """-q: no notes (a crash leaves some about the active segment's indexes, which lived in
    memory) and no progress bar, even where one would be drawn."""
    os.unlink(os.path.join(copy, ".kdelay_cleanshutdown"))  # as after a crash
    for suffix in (".index", ".timeindex", ".dlyindex"):
        os.unlink(seg_file(copy, built["segments"][-1], suffix))
    env = {"KDELAY_PROGRESS": "always", "KDELAY_PROGRESS_DELAY": "0"}
    loud = kdelay("verify", copy, env=env)
    assert loud.returncode == 0 and "info" in loud.stdout and loud.stderr  # notes and bar
    r = kdelay("verify", "-q", copy, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stderr == "" and len(r.stdout.splitlines()) == 1
    assert r.stdout.startswith("OK: ")


def test_demo_help_describes_every_option():
    r = kdelay("demo", "--help")
    assert r.returncode == 0, r.stderr
    options = r.stdout.split("options:\n", 1)[1]
    entries: list[str] = []  # one option's help text, its continuation lines joined
    for line in options.splitlines():
        if line.startswith("  -"):
            entries.append(line.strip())
        elif line.strip():
            entries[-1] += " " + line.strip()
    assert len(entries) == 8  # -h and the demo's seven options
    for entry in entries:
        flags, _, text = entry.partition("  ")
        assert text.strip(), f"no description: {flags}"


def test_dump_index_matches_the_log(built):
    for base in built["segments"][:-1]:
        batches = dump_batches(seg_file(built["path"], base, ".log"))
        want = sorted((b["deliver_after"], b["base_offset"], b["position"], b["last_offset"],
                       b["size"]) for b in batches)
        r = kdelay("dump-index", seg_file(built["path"], base, ".dlyindex"), "--json")
        assert r.returncode == 0, r.stderr
        got = [(e["deliver_after"], e["offset"], e["position"], e["last_offset"], e["size"])
               for e in jsonl(r.stdout)]
        assert got == want
        s = kdelay("dump-index", seg_file(built["path"], base, ".dlyindex"), "--summary",
                   "--json")
        summary = json.loads(s.stdout)
        assert summary["current"] is True and summary["entries"] == len(batches)
        assert summary["log_bytes"] == os.path.getsize(seg_file(built["path"], base, ".log"))
    human = kdelay("dump-index", seg_file(built["path"], built["segments"][0], ".dlyindex"))
    assert "current:      yes" in human.stdout and "DeliverAfterIndex" in human.stdout


def test_dump_offset_and_time_index(built):
    base = built["segments"][0]
    starts = {b["base_offset"]: b["position"] for b in dump_batches(
        seg_file(built["path"], base, ".log"))}
    r = kdelay("dump-index", seg_file(built["path"], base, ".index"), "--json")
    entries = jsonl(r.stdout)
    assert entries and all(starts[e["offset"]] == e["position"] for e in entries)
    r = kdelay("dump-index", seg_file(built["path"], base, ".timeindex"), "--json")
    entries = jsonl(r.stdout)
    assert entries and all(e["offset"] in starts for e in entries)
    assert [e["timestamp"] for e in entries] == sorted({e["timestamp"] for e in entries})


def test_stats_json(built):
    recs = built["records"]
    now = T0 + 60_000
    r = kdelay("stats", built["path"], "--json", "--now", str(now))
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    pending = [x for x in recs if x.deliver_after > now]
    assert s["records"] == len(recs)
    assert s["segments"] == len(built["segments"])
    assert s["pending_records"] == len(pending)
    assert s["due_records"] == len(recs) - len(pending)
    assert s["earliest_pending_deliver_after"] == min(x.deliver_after for x in pending)
    for name, ms in (("within_1m", 60_000), ("within_1h", 3_600_000),
                     ("within_1d", 86_400_000)):
        assert s["forecast"][name] == sum(1 for x in pending if x.deliver_after <= now + ms)
    assert s["forecast"]["beyond_1d"] == sum(1 for x in pending
                                             if x.deliver_after > now + 86_400_000)
    assert s["log_end_offset"] == recs[-1].offset + 1
    assert s["segments_from_index"] == len(built["segments"])  # closed cleanly: no scan
    human = kdelay("stats", built["path"], "--now", str(now))
    assert "coming due" in human.stdout and "KiB" in human.stdout


def test_stats_and_verify_on_a_topic_root(tmp_path):
    for p in range(2):
        build_log(os.fspath(tmp_path / f"t-{p}"), batches=6)
    r = kdelay("stats", os.fspath(tmp_path), "--json", "--now", str(T0))
    s = json.loads(r.stdout)
    assert len(s["partitions"]) == 2
    assert s["records"] == sum(p["records"] for p in s["partitions"])
    assert kdelay("verify", os.fspath(tmp_path)).returncode == 0


# ---------------------------------------------------------------------------- damage


def test_flipped_byte_in_sealed_batch(copy, built):
    base = built["segments"][1]
    path = seg_file(copy, base, ".log")
    victim = dump_batches(path)[2]
    with open(path, "r+b") as f:
        f.seek(victim["position"] + victim["size"] - 3)
        b = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([b[0] ^ 0x40]))
    r = kdelay("verify", copy)
    assert r.returncode == 1
    lines = problem_lines(r.stdout)
    assert len(lines) == 1
    assert path in lines[0] and f"at byte {victim['position']}" in lines[0]
    assert "CRC" in lines[0]
    one = kdelay("verify", path)  # one segment file: only it is checked
    assert one.returncode == 1 and problem_lines(one.stdout) == lines
    assert kdelay("verify", seg_file(copy, built["segments"][0], ".log")).returncode == 0
    d = kdelay("dump-log", path, "--json")
    assert d.returncode == 1
    assert [b["crc_valid"] for b in jsonl(d.stdout)].count(False) == 1
    assert f"at byte {victim['position']}" in d.stderr


def test_truncated_sealed_log(copy, built):
    base = built["segments"][0]
    path = seg_file(copy, base, ".log")
    batches = dump_batches(path)
    torn = batches[-2]
    os.truncate(path, torn["position"] + 20)
    r = kdelay("verify", copy)
    assert r.returncode == 1
    lines = problem_lines(r.stdout)
    assert any(path in x and f"at byte {torn['position']}" in x and "framing" in x
               for x in lines), lines
    assert any("stale" in x and x.startswith(f"PROBLEM {seg_file(copy, base, '.dlyindex')}")
               for x in lines)
    assert any("offsets" in x and "missing" in x for x in lines)  # the next segment's gap
    d = kdelay("dump-log", path)
    assert d.returncode == 1
    assert f"at byte {torn['position']}" in d.stderr and "truncated" in d.stderr


def test_deleted_and_garbled_dlyindex(copy, built):
    a, b = built["segments"][0], built["segments"][1]
    os.unlink(seg_file(copy, a, ".dlyindex"))
    garbled = seg_file(copy, b, ".dlyindex")
    with open(garbled, "r+b") as f:
        f.seek(100)
        f.write(b"\xde\xad\xbe\xef")
    r = kdelay("verify", copy)
    assert r.returncode == 1
    lines = problem_lines(r.stdout)
    assert any(seg_file(copy, a, ".dlyindex") in x and "missing" in x for x in lines)
    assert any(garbled in x and "checksum" in x for x in lines)
    assert len(lines) == 2
    d = kdelay("dump-index", garbled)
    assert d.returncode == 1 and "checksum" in d.stderr


def test_index_pointing_at_the_wrong_batch(copy, built):
    """A well-formed index whose entries do not match the log is caught entry by entry."""
    base = built["segments"][1]
    other = built["segments"][2]
    # a valid index, but for another segment's bytes: relabel it via a rebuilt copy
    path = seg_file(copy, base, ".index")
    shutil.copyfile(seg_file(copy, other, ".index"), path)
    r = kdelay("verify", copy)
    assert r.returncode == 1
    assert any(path in x and "base offset" in x for x in problem_lines(r.stdout))


def test_offset_gap_from_deleted_middle_segment(copy, built):
    segs = built["segments"]
    for suffix in (".log", ".index", ".timeindex", ".dlyindex"):
        os.unlink(seg_file(copy, segs[1], suffix))
    r = kdelay("verify", copy)
    assert r.returncode == 1
    lines = problem_lines(r.stdout)
    assert len(lines) == 1
    assert seg_file(copy, segs[2], ".log") in lines[0] and "at byte 0" in lines[0]
    assert f"offsets {segs[1]}..{segs[2] - 1} are missing" in lines[0]


def test_stale_index_of_sealed_segment_is_a_problem(copy, built):
    base = built["segments"][0]
    path = seg_file(copy, base, ".log")
    last = dump_batches(path)[-1]
    os.truncate(path, last["position"])  # a whole batch gone: framing stays intact
    r = kdelay("verify", copy)
    lines = problem_lines(r.stdout)
    assert r.returncode == 1
    assert sum("stale" in x and "next open" in x for x in lines) == 3


def test_active_segment_index_stale_after_clean_close_is_a_problem(copy, built):
    """The active segment's index may lag only while the log is open or after a crash;
    with the clean-shutdown marker present it must be current."""
    last = built["segments"][-1]
    path = seg_file(copy, last, ".log")
    with open(path, "ab") as f:  # bytes the persisted index does not cover
        f.write(Path(path).read_bytes()[:80])
    r = kdelay("verify", copy)
    assert r.returncode == 1
    assert any(seg_file(copy, last, ".dlyindex") in x and "stale" in x
               for x in problem_lines(r.stdout))
    os.unlink(os.path.join(copy, ".kdelay_cleanshutdown"))  # as after a crash
    r = kdelay("verify", copy)
    assert any("stale" in x for x in r.stdout.splitlines() if x.startswith("info"))
    assert any("framing breaks" in x and "torn tail" in x for x in problem_lines(r.stdout))


# ---------------------------------------------------------------------------- live log


def snapshot(directory: str) -> dict:
    out = {}
    for root, _, files in os.walk(directory):
        for name in files:
            p = os.path.join(root, name)
            st_ = os.stat(p)
            out[p] = (st_.st_size, st_.st_mtime_ns, Path(p).read_bytes())
    return out


def test_verify_and_stats_on_a_live_log(copy):
    t = [T0 + 10_000_000]
    log = Log.open(copy, config=CFG, clock=lambda: t[0])
    try:
        log.roll()
        log.append([Record(b"live")], deliver_after=t[0] + 5_000)
        before = snapshot(copy)
        r = kdelay("verify", copy)
        assert r.returncode == 0, r.stdout
        info = [x for x in r.stdout.splitlines() if x.startswith("info")]
        assert info and all(segment_name(log.segments[-1]) in x for x in info)
        s = kdelay("stats", copy, "--json", "--now", str(t[0]))
        assert json.loads(s.stdout)["records"] == log.log_end_offset - log.log_start_offset
        assert snapshot(copy) == before  # read only: nothing written, no lock taken
        log.append([Record(b"still writable")])
        rb = kdelay("rebuild-index", copy)
        assert rb.returncode == 1 and "locked" in rb.stderr
        assert rb.stderr.count("\n") == 1
    finally:
        log.close()


def test_rebuild_index(copy, built):
    originals = {}
    for base in built["segments"]:
        originals[base] = kdelay("dump-index", seg_file(copy, base, ".dlyindex"),
                                 "--json").stdout
        for suffix in (".index", ".timeindex", ".dlyindex"):
            os.unlink(seg_file(copy, base, suffix))
    assert kdelay("verify", copy).returncode == 1
    r = kdelay("rebuild-index", copy, "--index-interval-bytes", "300")
    assert r.returncode == 0, r.stderr
    assert kdelay("verify", copy).returncode == 0
    for base in built["segments"]:
        assert kdelay("dump-index", seg_file(copy, base, ".dlyindex"),
                      "--json").stdout == originals[base]
    with Log.open(copy, config=CFG) as log:
        assert log.load_report.indexes_rebuilt == 0  # the open trusts what we wrote
        assert log.read(0, max_records=10_000) == built["records"]


def test_rebuild_index_leaves_a_damaged_segment_alone(copy, built):
    base = built["segments"][1]
    path = seg_file(copy, base, ".log")
    victim = dump_batches(path)[1]
    idx = seg_file(copy, base, ".dlyindex")
    before = Path(idx).read_bytes()
    with open(path, "r+b") as f:
        f.seek(victim["position"] + 30)
        f.write(b"\x00\x01\x02")
    r = kdelay("rebuild-index", copy)
    assert r.returncode == 1
    assert "NOT rebuilt" in r.stderr and f"at byte {victim['position']}" in r.stderr
    assert Path(idx).read_bytes() == before


# ---------------------------------------------------------------------------- bad input


@pytest.fixture
def junk(tmp_path, built) -> dict:
    garbage = tmp_path / (segment_name(0) + ".log")
    garbage.write_bytes(bytes(range(256)) * 20)
    trunc_idx = tmp_path / (segment_name(0) + ".dlyindex")
    trunc_idx.write_bytes(Path(seg_file(built["path"], 0, ".dlyindex")).read_bytes()[:30])
    wrong = tmp_path / "wrong.dlyindex"
    wrong.write_bytes(Path(seg_file(built["path"], 0, ".index")).read_bytes())
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "notes.txt").write_text("hello")
    return {"garbage": str(garbage), "trunc_idx": str(trunc_idx), "wrong": str(wrong),
            "plain": str(plain), "log": seg_file(built["path"], 0, ".log"),
            "index": seg_file(built["path"], 0, ".index")}


@pytest.mark.parametrize("argv", [
    ["verify", "/nonexistent/dir"],
    ["stats", "/nonexistent/dir"],
    ["dump-log", "/nonexistent.log"],
    ["dump-index", "/nonexistent.dlyindex"],
    ["rebuild-index", "/nonexistent"],
    ["verify", "{plain}"],
    ["stats", "{plain}"],
    ["rebuild-index", "{plain}"],
    ["dump-log", "{plain}"],
    ["dump-log", "{garbage}"],
    ["dump-log", "{index}"],
    ["dump-index", "{log}"],
    ["dump-index", "{trunc_idx}"],
    ["dump-index", "{wrong}"],
    ["verify", "{plain}/notes.txt"],
    ["stats", "{log}"],
])
def test_bad_input_gives_one_clear_line(junk, argv):
    r = kdelay(*[a.format(**junk) for a in argv])
    assert r.returncode != 0
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kdelay: "), r.stderr


def test_usage_errors_exit_2(built):
    assert kdelay().returncode == 2
    assert kdelay("frobnicate").returncode == 2
    assert kdelay("stats", built["path"], "--now", "soon").returncode == 2
    assert kdelay("dump-log", "x.log", "--offsets", "9..3").returncode == 2
    assert kdelay("verify", "/nonexistent").returncode == 2


def test_demo_passes_arguments_through(tmp_path):
    """`kdelay demo ...` hands every later argument to kdelay.tools.demo.main untouched."""
    code = ("import sys, types\n"
            "fake = types.ModuleType('kdelay.tools.demo')\n"
            "fake.main = lambda argv: print('ARGS', argv) or 7\n"
            "sys.modules['kdelay.tools.demo'] = fake\n"
            "from kdelay.tools.cli import main\n"
            "sys.exit(main(['demo', '--records', '5', '-x', 'pos']))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 7
    assert "ARGS ['--records', '5', '-x', 'pos']" in r.stdout


# ---------------------------------------------------------------------------- progress


def read_all(fd: int) -> bytes:
    out = b""
    while select.select([fd], [], [], 0.2)[0]:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    return out


def test_progress_bar_only_on_a_terminal(built):
    env = {"KDELAY_PROGRESS_DELAY": "0"}
    piped = kdelay("verify", built["path"], env=env)
    assert "[" not in piped.stderr and piped.returncode == 0
    master, slave = pty.openpty()
    try:
        r = kdelay("verify", built["path"], env=env, stderr=slave)
        os.close(slave)
        slave = -1
        shown = read_all(master).decode(errors="replace")
    finally:
        os.close(master)
        if slave >= 0:
            os.close(slave)
    assert r.returncode == 0
    assert "verify [" in shown and "%" in shown


# ---------------------------------------------------------------------------- properties


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_flipped_byte_in_a_sealed_segment_is_reported(built, tmp_path_factory, data):
    """Flip any one bit of a sealed .log: verify names that segment's .log or one of its
    indexes — unless the bit is in partitionLeaderEpoch (bytes 12..15 of a batch), which,
    as in Kafka, no CRC covers."""
    d = os.fspath(tmp_path_factory.mktemp("flip") / "p-0")
    shutil.copytree(built["path"], d)
    base = data.draw(st.sampled_from(built["segments"][:-1]))
    path = seg_file(d, base, ".log")
    size = os.path.getsize(path)
    pos = data.draw(st.integers(0, size - 1))
    bit = data.draw(st.integers(0, 7))
    starts = [b.position for b in scan_segment(SegmentFiles(d, base, size)).batches]
    batch_start = max(s for s in starts if s <= pos)
    with open(path, "r+b") as f:
        f.seek(pos)
        byte = f.read(1)[0]
        f.seek(pos)
        f.write(bytes([byte ^ (1 << bit)]))
    rep = verify_partition(d)
    stem = os.path.join(d, segment_name(base))
    if 12 <= pos - batch_start < 16:
        assert rep.ok
    else:
        assert not rep.ok
        assert any(f.path.startswith(stem) for f in rep.problems)
        log_hits = [f for f in rep.problems if f.path == path]
        assert not log_hits or log_hits[0].position <= pos


def test_engine_keeps_damage_visible_after_rebuilding_a_damaged_sealed_segment(copy, built):
    base = built["segments"][1]
    path = seg_file(copy, base, ".log")
    victim = dump_batches(path)[1]
    with open(path, "r+b") as f:
        f.seek(victim["position"] + 40)
        f.write(b"\xff\xff")
    os.unlink(seg_file(copy, base, ".dlyindex"))  # the open rebuilds it from the damaged log
    with Log.open(copy, config=CFG) as log:
        assert any("damaged" in p for p in log.load_report.problems)
    # An index of the undamaged prefix must not be persisted as if it covered the whole
    # file: the next open has to find the damage again, and verify must still see it.
    with Log.open(copy, config=CFG) as log:
        assert any("damaged" in p for p in log.load_report.problems)
    rep = verify_partition(copy)
    assert any(f.path == path and f.position == victim["position"] for f in rep.problems)


def test_stats_and_verify_read_committed_group_positions(tmp_path):
    path = os.fspath(tmp_path / "g")
    with Log.open(path, clock=lambda: T0) as log:
        log.append([Record(b"a"), Record(b"b")])
        log.append([Record(b"c")])
        log.commit("billing", log.fetch(max_records=2).next)
    r = kdelay("stats", path, "--json", "--now", str(T0))
    assert r.returncode == 0, r.stderr
    groups = json.loads(r.stdout)["groups"]
    assert [g["group"] for g in groups] == ["billing"]
    assert groups[0]["due_not_consumed"] == 1
    assert kdelay("verify", path).returncode == 0
    (gfile,) = [os.path.join(path, "groups", n) for n in os.listdir(os.path.join(path, "groups"))]
    with Log.open(path, clock=lambda: T0) as log:
        log.commit("other", None)  # a sound record after billing's
    flip_byte(gfile, 30)  # a flipped byte in billing's record of the commit journal
    r = kdelay("verify", path)
    assert r.returncode == 1
    assert gfile in r.stdout and "unreadable" in r.stdout
