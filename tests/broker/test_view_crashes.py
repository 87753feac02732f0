"""The due-order view's file under crashes and damage: the crash-point injector stops the
machine before every file operation of the view's write path (creation, appends, the
rewrite that drops a dead head) and of retention between them, in each crash mode; the
reopened view numbers every record the log still holds exactly as a run without a crash
did. Damage that is not a torn tail is refused (never wrong offsets served), and
`kdelay verify` names it."""

from __future__ import annotations

import os
import shutil

import pytest
from view_support import T0, FakeClock, numbering, segmented_log

from kdelay import Log, LogConfig, Record
from kdelay.broker import delivery_view
from kdelay.broker.delivery_view import DeliveryView
from kdelay.broker.view_file import ENTRY_SIZE, HEADER_SIZE, VIEW_FILE, ViewDamagedError
from kdelay.testing.damage import flip_byte
from kdelay.testing.faults import CRASH_MODES, FaultInjector, SimulatedCrash, close_abandoned
from kdelay.tools.cli import main as cli_main

CONFIG = LogConfig(retention_ms=1000, compaction_min_ratio=0)


def _setup(path: str) -> None:
    """segmented_log with records 4 and 31 cancelled, closed."""
    segmented_log(path, CONFIG, FakeClock(T0), [4, 31]).close()


def _script(path: str, clock: FakeClock, opened: list, seen: dict[int, int]) -> None:
    """The view's life: created, extended as the clock moves, synced, retention deletes
    what has been due long enough, the view's head is dropped, more comes due. `seen`
    gathers every numbering the view held."""
    log = Log.open(path, config=CONFIG, clock=clock)
    opened.append(log)
    view = DeliveryView.open(log)
    opened.append(view)
    for _ in range(3):
        clock.advance(350)
        view.extend()
    seen.update(numbering(view))
    view.sync()  # before retention may delete numbered records (what the broker does)
    clock.advance(2000)
    log.enforce_retention()
    assert view.log_start > 0  # drops the dead head: the rewrite path
    log.append([Record(b"late")])
    view.extend()
    seen.update(numbering(view))


def _final(path: str, clock: FakeClock) -> dict[int, int]:
    log = Log.open(path, config=CONFIG, clock=clock)
    try:
        view = DeliveryView.open(log)
        view.extend()
        held = {r.offset for r in log.read(0, max_records=1000)}
        got = {off: n for off, n in numbering(view).items() if off in held}
        view.close()
        return got
    finally:
        log.close()


@pytest.mark.parametrize("mode", CRASH_MODES)
def test_a_crash_at_every_file_operation_keeps_the_numbering(tmp_path, monkeypatch,
                                                             mode) -> None:
    monkeypatch.setattr(delivery_view, "_REWRITE_DEAD", 2)
    setup = os.fspath(tmp_path / "setup" / "t-0")
    _setup(setup)
    ref = os.fspath(tmp_path / "ref" / "t-0")
    shutil.copytree(setup, ref)
    clock = FakeClock(T0)
    expected: dict[int, int] = {}
    with FaultInjector(roots=[os.path.dirname(ref)]) as counting:
        opened: list = []
        _script(ref, clock, opened, expected)
    for o in reversed(opened):
        o.close()
    total = len(counting.ops)
    assert _final(ref, clock).items() <= expected.items()
    assert len(expected) > 20 and any(op == "rename" for op, _ in counting.ops)
    for k in range(total):
        run = os.fspath(tmp_path / f"{mode}-{k}" / "t-0")
        shutil.copytree(setup, run)
        clock = FakeClock(T0)
        opened = []
        with FaultInjector(roots=[os.path.dirname(run)], crash_at=k, seed=k) as faults, \
                pytest.raises(SimulatedCrash):
            _script(run, clock, opened, {})
        for o in opened:
            if isinstance(o, DeliveryView):
                o.close()
            else:
                close_abandoned(o)
        faults.apply_crash(mode)
        got = _final(run, FakeClock(clock.t))
        # records retention removed before the crash are gone; every one left keeps the
        # delivery offset a crash-free run gave it
        assert got and got.items() <= expected.items(), (mode, k)
        shutil.rmtree(os.path.dirname(run))


def _numbered_view(tmp_path) -> tuple[str, dict[int, int]]:
    path = os.fspath(tmp_path / "t-0")
    _setup(path)
    clock = FakeClock(T0 + 5000)
    log = Log.open(path, config=CONFIG, clock=clock)
    view = DeliveryView.open(log)
    view.extend()
    numbered = numbering(view)
    view.close()
    log.close()
    return path, numbered


def _reopen(path: str):
    log = Log.open(path, config=CONFIG, clock=FakeClock(T0 + 5000))
    try:
        view = DeliveryView.open(log)
    except BaseException:
        log.close()
        raise
    return log, view


@pytest.mark.parametrize("cut", [1, ENTRY_SIZE - 1, ENTRY_SIZE, 2 * ENTRY_SIZE + 5])
def test_a_torn_tail_is_cut_off_and_numbered_again_identically(tmp_path, cut) -> None:
    path, numbered = _numbered_view(tmp_path)
    view_path = os.path.join(path, VIEW_FILE)
    size = os.path.getsize(view_path)
    with open(view_path, "r+b") as f:
        f.truncate(size - cut)
    rc = cli_main(["verify", path])
    assert rc == 0  # a torn tail is information: the next open repairs it
    log, view = _reopen(path)
    try:
        assert len(numbering(view)) < len(numbered)
        view.extend()
        assert numbering(view) == numbered
    finally:
        view.close()
        log.close()


def _appended_and_numbered(path: str, config: LogConfig, crash: str | None
                           ) -> tuple[Log, DeliveryView, FakeClock]:
    """Two records appended and numbered, then a third under the injector (appended,
    numbered, the view synced as before a retention pass), the machine crashed in mode
    `crash` (None: no crash), the log and view reopened and a fourth record appended."""
    clock = FakeClock(T0)
    log = Log.open(path, config=config, clock=clock)
    view = DeliveryView.open(log)
    log.append([Record(b"x0")])
    log.append([Record(b"x1")])
    log.flush()
    view.extend()
    view.sync()
    with FaultInjector([os.path.dirname(path)]) as faults:
        log.append([Record(b"lost?")])
        view.extend()
        view.sync()
    view.close()
    close_abandoned(log)
    if crash is not None:
        faults.apply_crash(crash)
    clock.advance(10)
    log = Log.open(path, config=config, clock=clock)
    view = DeliveryView.open(log)
    log.append([Record(b"next")])
    view.extend()
    return log, view, clock


@pytest.mark.parametrize("config", [LogConfig(flush_messages=2), LogConfig()],
                         ids=["flush.messages=2", "no flush policy"])
def test_a_durable_view_entry_never_names_a_record_the_log_can_lose(tmp_path, config):
    """Syncing the view fsyncs the log first: after a power failure the view's entries
    name only records the log still holds, and the next record takes the next number."""
    path = os.fspath(tmp_path / "t-0")
    log, view, _ = _appended_and_numbered(path, config, "power")
    try:
        values = {r.offset: r.value for r in log.read(0)}
        assert values == {0: b"x0", 1: b"x1", 2: b"lost?", 3: b"next"}
        assert numbering(view) == {0: 0, 1: 1, 2: 2, 3: 3}
    finally:
        view.close()
        log.close()
    assert cli_main(["verify", path]) == 0


def test_view_entries_past_the_log_end_are_cut_off_and_numbered_again(tmp_path):
    """Without a sync of the view, power loss may still write its page cache back and not
    the log's: entries naming records past the log end are cut off at the next open, as a
    torn tail, and what the log holds is numbered again from there."""
    path = os.fspath(tmp_path / "t-0")
    clock = FakeClock(T0)
    with Log.open(path, config=LogConfig(), clock=clock) as log:
        view = DeliveryView.open(log)
        log.append([Record(b"x0")])
        log.append([Record(b"x1")])
        log.flush()
        view.extend()
        size = os.path.getsize(os.path.join(path, "00000000000000000000.log"))
        log.append([Record(b"lost")])
        view.extend()
        view.close()
    with open(os.path.join(path, "00000000000000000000.log"), "r+b") as f:
        f.truncate(size)  # the log's last append did not reach the disk, the view's did
    os.unlink(os.path.join(path, ".kdelay_cleanshutdown"))
    log = Log.open(path, config=LogConfig(), clock=clock)
    try:
        view = DeliveryView.open(log)
        assert numbering(view) == {0: 0, 1: 1}
        log.append([Record(b"next")])
        view.extend()
        assert numbering(view) == {0: 0, 1: 1, 2: 2}
        assert {r.offset: r.value for r in log.read(0)}[2] == b"next"
        view.close()
    finally:
        log.close()
    assert cli_main(["verify", path]) == 0


def test_garbage_after_the_last_entry_is_a_torn_tail(tmp_path) -> None:
    path, numbered = _numbered_view(tmp_path)
    with open(os.path.join(path, VIEW_FILE), "ab") as f:
        f.write(b"\xff" * (ENTRY_SIZE * 2))
    log, view = _reopen(path)
    try:
        view.extend()
        assert numbering(view) == numbered
    finally:
        view.close()
        log.close()


def _flip(path: str, at: int) -> None:
    flip_byte(path, at, 0x40)


@pytest.mark.parametrize("where", ["first entry", "middle entry"])
def test_damage_the_log_can_renumber_identically_is_repaired(tmp_path, where) -> None:
    """A damaged entry with sound ones after it, where numbering the log again from before
    it gives every sound entry after it exactly (no record of theirs removed since): what
    a torn page cache leaves when a garbled block reached the disk. Cut off and numbered
    again, identically."""
    path, numbered = _numbered_view(tmp_path)
    _flip(os.path.join(path, VIEW_FILE),
          {"first entry": HEADER_SIZE + 3, "middle entry": HEADER_SIZE + 2 * ENTRY_SIZE + 17}[
              where])
    log, view = _reopen(path)
    try:
        view.extend()
        assert numbering(view) == numbered
    finally:
        view.close()
        log.close()
    assert cli_main(["verify", path]) == 0


@pytest.mark.parametrize("where", ["header", "first entry", "middle entry"])
def test_damage_is_refused_and_verify_names_it(tmp_path, capsys, where) -> None:
    """Damage where the log cannot give the numbers again (retention removed the records
    of the first entries since they were numbered) is refused, never renumbered."""
    path, numbered = _numbered_view(tmp_path)
    assert len(numbered) > 4
    with Log.open(path, config=CONFIG, clock=FakeClock(T0 + 5000)) as log:
        assert log.enforce_retention() > 0
    view_path = os.path.join(path, VIEW_FILE)
    at = {"header": 9, "first entry": HEADER_SIZE + 3,
          "middle entry": HEADER_SIZE + 2 * ENTRY_SIZE + 17}[where]
    with open(view_path, "r+b") as f:
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ 0x40]))
    with pytest.raises(ViewDamagedError):
        _reopen(path)
    capsys.readouterr()
    assert cli_main(["verify", path]) == 1
    out = capsys.readouterr().out
    assert VIEW_FILE in out and "damaged" in out


def test_verify_finds_an_entry_the_log_disagrees_with(tmp_path, capsys) -> None:
    path, _ = _numbered_view(tmp_path)
    assert cli_main(["verify", path]) == 0
    view_path = os.path.join(path, VIEW_FILE)
    from kdelay.broker.view_file import encode_entries, read_view
    reading = read_view(view_path)
    rows = [tuple(int(x) for x in r)[:4] for r in reading.rows.tolist()]
    base, da, first, count = rows[-1]
    rows[-1] = (base, da + 1, first, count)  # a sound entry (its CRC recomputed), wrong key
    with open(view_path, "r+b") as f:
        f.seek(HEADER_SIZE)
        f.write(encode_entries(rows))
    capsys.readouterr()
    assert cli_main(["verify", path]) == 1
    assert "which the log holds otherwise" in capsys.readouterr().out


def test_a_broker_refuses_a_damaged_view_and_serves_the_other_partitions(tmp_path) -> None:
    from kio.schema.errors import ErrorCode
    from view_support import decode_served
    from wire_support import connect, fetch

    from kdelay import Broker, Topic

    root = os.fspath(tmp_path)
    with Topic.open(root, "d", partitions=2) as t:
        for p in range(2):
            for i in range(4):
                t.partition(p).append([Record(b"%d-%d" % (p, i))])
    for damaged in (False, True):
        if damaged:
            path = os.path.join(root, "d-0", VIEW_FILE)
            with open(path, "r+b") as f:
                f.seek(9)  # the header: never a torn tail
                f.write(b"\xee")
        with Broker(root, listen="127.0.0.1:0") as b:
            conn = connect(b.bootstrap_servers, b._server.state.topics.topic_id("d"))
            with conn.sock:
                r = fetch(conn, 16, [(conn.w_id, [(0, 0, 1 << 20), (1, 0, 1 << 20)])])
                p0, p1 = r.responses[0].partitions
                assert len(decode_served(p1.records or b"")) == 4
                if damaged:
                    assert p0.error_code == ErrorCode.kafka_storage_error
                    assert not p0.records
                else:
                    assert len(decode_served(p0.records)) == 4
                # the connection goes on being served
                r = fetch(conn, 12, [("d", [(1, 2, 1 << 20)])])
                assert r.responses[0].partitions[0].high_watermark == 4


def test_a_batch_failing_its_crc_is_never_served(tmp_path) -> None:
    """A byte of a stored record flipped (the file read through its memory mapping) after
    the batch was served once: the fetch reaching that batch answers KAFKA_STORAGE_ERROR,
    serving none of it (each serve checks the stored CRC again: a batch served from the
    mapping is never trusted for having passed before); the batches before it are
    served."""
    from kio.schema.errors import ErrorCode
    from view_support import decode_served
    from wire_support import connect, fetch

    from kdelay import Broker, Topic

    root = os.fspath(tmp_path)
    with Topic.open(root, "c", partitions=1) as t:
        sizes = [t.partition(0).append([Record(b"v%d" % i)]) for i in range(3)]
    assert [r.base_offset for r in sizes] == [0, 1, 2]
    log_path = os.path.join(root, "c-0", "0" * 20 + ".log")
    with Broker(root, listen="127.0.0.1:0") as b:
        conn = connect(b.bootstrap_servers, b._server.state.topics.topic_id("c"))
        with conn.sock:
            r = fetch(conn, 12, [("c", [(0, 0, 1 << 20)])])
            part = r.responses[0].partitions[0]
            assert [v for _, _, _, v, *_ in decode_served(part.records)] == [b"v0", b"v1",
                                                                             b"v2"]
            with open(log_path, "r+b") as f:
                at = f.read().rindex(b"v2")  # inside the last batch's record
                f.seek(at)
                f.write(b"X")
            r = fetch(conn, 12, [("c", [(0, 0, 1 << 20)])])
            part = r.responses[0].partitions[0]
            assert part.error_code == ErrorCode.kafka_storage_error
            assert not part.records
            r = fetch(conn, 12, [("c", [(0, 0, 40)])])  # room for one batch: the first
            part = r.responses[0].partitions[0]
            assert [(o, v) for _, o, _, v, *_ in decode_served(part.records)] == [(0, b"v0")]
