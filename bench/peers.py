"""Engines compared by bench/compare.py: kdelay through its public API, and its peers.

Every engine is a small adapter with the same consumer-shaped interface:

- ``prepare(work)`` (untimed) builds the engine's native inputs from the shared,
  pre-generated workload (for kdelay: ``Record`` lists, as a producer would hold them);
- ``open(path, clock)``, ``append(i)`` (batch ``i``, one write per batch), ``close()``;
- ``fetch(max_records)`` returns the next page of due records in ``(deliver_after, offset)``
  order after the adapter's own cursor (a consumer that continues where it left off);
- ``norm(rec)`` turns one returned record into ``(deliver_after, offset, key, value)`` so the
  harness can check the drained order outside the timed regions.

Peers store what the workload carries (deliverAfter, offset, the record's timestamp, key,
value); kdelay stores more (the retry header where the workload has one, CRCs, offset and
time indexes), which is part of what is measured.
Durability is "page cache" everywhere (no fsync per batch), matching kdelay's default
``flush_messages=None``.
"""

from __future__ import annotations

import contextlib
import heapq
import mmap
import os
import shutil
import socket
import struct
import subprocess
import time
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


class FakeClock:
    """The injected clock: a callable returning integer ms that the harness moves by hand."""

    __slots__ = ("now",)

    def __init__(self, now: int) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


@dataclass
class Workload:
    """Pre-generated data every engine receives. Batch ``i`` holds records
    ``i*batch_size .. (i+1)*batch_size-1`` (offsets start at 0), all sharing
    ``deliver_after[i]``; batch ``i`` is appended when the clock reads ``append_time[i]``."""

    name: str
    batch_size: int
    append_time: list[int]
    deliver_after: list[int]
    keys: list[bytes]
    values: list[bytes]
    # a producer's CreateTime per record (None: the old shape, stamped at append time)
    timestamps: list[int] | None = None
    # per record deliver_after wishes (their max is the batch's deliver_after), else None:
    # the batch's deliver_after is passed explicitly
    record_da: list[int] | None = None
    # per batch: the retry header's value carried by every record of it, or None
    attempt: list[int | None] | None = None

    @property
    def n_batches(self) -> int:
        return len(self.deliver_after)

    @property
    def n_records(self) -> int:
        return len(self.keys)

    def batch_keys(self, i: int) -> list[bytes]:
        b = self.batch_size
        return self.keys[i * b:(i + 1) * b]

    def batch_values(self, i: int) -> list[bytes]:
        b = self.batch_size
        return self.values[i * b:(i + 1) * b]

    def batch_timestamps(self, i: int) -> list[int]:
        """Each record's timestamp (the append time when the workload has none): what every
        engine stores with the record."""
        b = self.batch_size
        if self.timestamps is None:
            return [self.append_time[i]] * b
        return self.timestamps[i * b:(i + 1) * b]


def dir_bytes(path: str) -> int:
    """Total size of the regular files under ``path``."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.path.getsize(os.path.join(root, f))
    return total


class Engine:
    """Base adapter. Subclasses override what they need."""

    name = "?"
    ordered = True  # False: no delivery order (the raw-file limit); the order check is skipped
    models = ""

    @classmethod
    def unavailable(cls) -> str | None:
        """A reason this engine cannot run here, or None."""
        return None

    def prepare(self, work: Workload) -> None:
        self.work = work

    def open(self, path: str, clock: FakeClock) -> None:
        raise NotImplementedError

    def append(self, i: int) -> None:
        raise NotImplementedError

    def fetch(self, max_records: int) -> list:
        raise NotImplementedError

    def count(self, page: list) -> int:
        return len(page)

    @staticmethod
    def norm(rec: Any) -> tuple[int, int, bytes | None, bytes | None]:
        return rec

    def close(self) -> None:
        raise NotImplementedError

    def disk_bytes(self, path: str) -> int:
        return dir_bytes(path)

    def external_memory(self) -> int | None:
        """Bytes held outside this process for the pending records (Redis), else None."""
        return None

    def external_cpu(self) -> float:
        """CPU seconds used so far by helper processes (a server), 0.0 when there are none."""
        return 0.0

    def shutdown(self) -> None:
        """Release anything that outlives close() (servers); called once at the end."""


# --------------------------------------------------------------------------- kdelay


def _warm_codec() -> None:
    """Load the codec and run it once (its compiled loops, the modules a first batch
    imports), as the peers' imports are loaded before they are timed: a long-running
    producer or consumer pays it once, not per batch."""
    from kdelay.log.batch import codec

    batch = codec.encode_batch(base_offset=0, base_timestamp=0, deliver_after=0,
                               keys=[b"k", None], values=[b"v", None],
                               timestamp_deltas=[0, 1], headers=[[("h", b"1")], []])
    codec.decode_records(batch, codec.parse_header(batch))


class KdelayEngine(Engine):
    name = "kdelay"
    models = "the engine under test, public API only (Log.open / append / fetch / close)"

    @classmethod
    def unavailable(cls) -> str | None:
        try:
            from kdelay import Log, LogConfig, Record  # noqa: F401
        except ImportError as e:
            return f"kdelay.Log not importable yet ({e})"
        return None

    def prepare(self, work: Workload) -> None:
        from kdelay import Record

        super().prepare(work)
        b = work.batch_size
        self.batches = []
        for i in range(work.n_batches):
            keys, values = work.batch_keys(i), work.batch_values(i)
            ts = [None] * b if work.timestamps is None else work.timestamps[i * b:(i + 1) * b]
            das = [None] * b if work.record_da is None else work.record_da[i * b:(i + 1) * b]
            att = None if work.attempt is None else work.attempt[i]
            hs = () if att is None else (("kdelay.attempt", b"%d" % att),)
            self.batches.append([Record(v, key=k, headers=hs, timestamp=t, deliver_after=d)
                                 for k, v, t, d in zip(keys, values, ts, das, strict=True)])
        # the record-level variant passes no batch deliver_after: the max of the records' wins
        self.explicit_da = None if work.record_da is not None else work.deliver_after
        _warm_codec()

    def open(self, path: str, clock: FakeClock) -> None:
        from kdelay import Log, LogConfig

        self.log = Log.open(path, config=LogConfig(), clock=clock)
        self.cursor = None

    def append(self, i: int) -> None:
        da = self.explicit_da
        self.log.append(self.batches[i], deliver_after=None if da is None else da[i])

    def fetch(self, max_records: int) -> list:
        res = self.log.fetch(after=self.cursor, max_records=max_records)
        self.cursor = res.next
        return res.records

    @staticmethod
    def norm(rec: Any) -> tuple[int, int, bytes | None, bytes | None]:
        return rec.deliver_after, rec.offset, rec.key, rec.value

    def close(self) -> None:
        self.log.close()


# --------------------------------------------------------------------------- SQLite


class SqliteEngine(Engine):
    name = "sqlite"
    models = ("a relational delay queue: WITHOUT ROWID table clustered on (deliver_after, offset), "
              "WAL, synchronous=OFF (page-cache durability, like the others), one transaction per batch (executemany of a cached "
              "prepared INSERT), keyset-paginated ordered SELECT")

    INSERT = "INSERT INTO q (deliver_after, off, ts, key, value) VALUES (?, ?, ?, ?, ?)"
    PAGE = ("SELECT deliver_after, off, key, value FROM q "
            "WHERE (deliver_after, off) > (?, ?) AND deliver_after <= ? "
            "ORDER BY deliver_after, off LIMIT ?")

    def open(self, path: str, clock: FakeClock) -> None:
        import sqlite3

        os.makedirs(path, exist_ok=True)
        self.clock = clock
        self.db = sqlite3.connect(os.path.join(path, "q.db"), isolation_level=None,
                                  check_same_thread=False, cached_statements=64)
        for pragma in ("journal_mode=WAL", "synchronous=OFF", "cache_size=-65536",
                       "temp_store=MEMORY", "mmap_size=268435456"):
            self.db.execute(f"PRAGMA {pragma}")
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS q (deliver_after INTEGER NOT NULL, off INTEGER NOT NULL, "
            "ts INTEGER NOT NULL, key BLOB, value BLOB, PRIMARY KEY (deliver_after, off)) "
            "WITHOUT ROWID")
        self.cursor: tuple[int, int] = (-1, -1)

    def append(self, i: int) -> None:
        w = self.work
        da = w.deliver_after[i]
        base = i * w.batch_size
        rows = [(da, base + j, t, k, v)
                for j, (k, v, t) in enumerate(zip(w.batch_keys(i), w.batch_values(i),
                                                  w.batch_timestamps(i), strict=True))]
        db = self.db
        db.execute("BEGIN")
        db.executemany(self.INSERT, rows)
        db.execute("COMMIT")

    def fetch(self, max_records: int) -> list:
        da, off = self.cursor
        rows = self.db.execute(self.PAGE, (da, off, self.clock.now, max_records)).fetchall()
        if rows:
            last = rows[-1]
            self.cursor = (last[0], last[1])
        return rows

    def close(self) -> None:
        self.db.close()


# --------------------------------------------------------------------------- heapq tracker


class HeapqEngine(Engine):
    """Pulsar's InMemoryDelayedDeliveryTracker shape: a per-message priority queue of positions
    in memory, the payloads in an append-only file (the "ledger"), and a reopen that has to
    replay that file to rebuild the queue. Delivery pops from the queue (destructive)."""

    name = "heapq"
    models = ("Pulsar's in-memory delayed-delivery tracker: a heapq of per-record keys "
              "(deliver_after << 40 | offset, one int each) + an offset->position array in "
              "memory, payloads in an append-only file read back through mmap; reopen replays "
              "the whole file")

    BATCH = struct.Struct(">qqII")  # deliver_after, base_offset, count, body bytes
    REC = struct.Struct(">HIq")  # key length, value length, timestamp
    SHIFT = 40

    def open(self, path: str, clock: FakeClock) -> None:
        os.makedirs(path, exist_ok=True)
        self.clock = clock
        self.path = os.path.join(path, "ledger.bin")
        self.heap: list[int] = []
        self.pos = array("q")
        self.mm: mmap.mmap | None = None
        self.mm_size = 0
        if os.path.exists(self.path):
            self._replay()
        self.f = open(self.path, "ab", buffering=1 << 16)  # noqa: SIM115
        self.end = self.f.tell()

    def _replay(self) -> None:
        with open(self.path, "rb") as f:
            buf = f.read()
        unpack_b = self.BATCH.unpack_from
        unpack_r = self.REC.unpack_from
        bsize, rsize, shift = self.BATCH.size, self.REC.size, self.SHIFT
        keys: list[int] = []
        pos = self.pos
        p, end = 0, len(buf)
        while p + bsize <= end:
            da, base, count, nbytes = unpack_b(buf, p)
            body = p + bsize
            if body + nbytes > end:
                break  # torn tail
            q = body
            for _ in range(count):
                pos.append(q)
                kl, vl, _ = unpack_r(buf, q)
                q += rsize + kl + vl
            start = (da << shift) | base
            keys.extend(range(start, start + count))
            p = body + nbytes
        heapq.heapify(keys)
        self.heap = keys

    def append(self, i: int) -> None:
        w = self.work
        da = w.deliver_after[i]
        base = i * w.batch_size
        keys, values, stamps = w.batch_keys(i), w.batch_values(i), w.batch_timestamps(i)
        pack_r = self.REC.pack
        parts: list[bytes] = []
        pos = self.pos
        q = self.end + self.BATCH.size
        rsize = self.REC.size
        for k, v, ts in zip(keys, values, stamps, strict=True):
            pos.append(q)
            parts.append(pack_r(len(k), len(v), ts))
            parts.append(k)
            parts.append(v)
            q += rsize + len(k) + len(v)
        body = b"".join(parts)
        self.f.write(self.BATCH.pack(da, base, len(keys), len(body)))
        self.f.write(body)
        self.end = q
        start = (da << self.SHIFT) | base
        heap, push = self.heap, heapq.heappush
        for key in range(start, start + len(keys)):
            push(heap, key)

    def fetch(self, max_records: int) -> list:
        heap = self.heap
        if not heap:
            return []
        limit = ((self.clock.now + 1) << self.SHIFT) - 1
        if heap[0] > limit:
            return []
        if self.mm is None or self.mm_size < self.end:
            self.f.flush()
            if self.mm is not None:
                self.mm.close()
            with open(self.path, "rb") as f:
                self.mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            self.mm_size = self.end
        mm, pos, pop = self.mm, self.pos, heapq.heappop
        unpack_r, rsize = self.REC.unpack_from, self.REC.size
        mask = (1 << self.SHIFT) - 1
        shift = self.SHIFT
        out = []
        while heap and heap[0] <= limit and len(out) < max_records:
            key = pop(heap)
            off = key & mask
            p = pos[off]
            kl, vl, _ = unpack_r(mm, p)
            p += rsize
            out.append((key >> shift, off, mm[p:p + kl], mm[p + kl:p + kl + vl]))
        return out

    def close(self) -> None:
        if self.mm is not None:
            self.mm.close()
            self.mm = None
        self.f.close()


class HeapqPerBatchEngine(HeapqEngine):
    """`heapq` with kdelay's guarantee: the same tracker and ledger, but each batch handed
    to the kernel with one ``write()`` as it is appended (heapq's buffer flushed), so a
    batch whose append returned is in the page cache and survives a killed process, as
    kdelay's and
    ``heap-payload``'s. ``heapq`` itself stays as it is (64 KiB buffered): the best peer
    is judged against both."""

    name = "heapq-per-batch"
    models = ("heapq with its buffer flushed each batch, one write() (an acknowledged batch survives "
              "kill -9, as kdelay's)")

    def append(self, i: int) -> None:
        # heapq's append leaves the header and the body in its 64 KiB buffer; the flush
        # hands them to the kernel as one write() (a batch under 64 KiB: all of them here)
        super().append(i)
        self.f.flush()


class HeapPayloadEngine(HeapqEngine):
    """An in-memory tracker that keeps the payloads: a ``heapq`` whose entries hold each
    record's sort key (``deliver_after << 40 | offset``), timestamp, key and value, so a fetch
    pops what is due and returns it without touching the file. The file is the same ledger
    as ``heapq``'s, written unbuffered with one ``write()`` per batch (as kdelay writes its
    segment); reopen replays it into the heap. Delivery pops (destructive)."""

    name = "heap-payload"
    models = ("an in-memory tracker that keeps payloads: a heapq of (deliver_after << 40 | "
              "offset, timestamp, key, value) tuples; the ledger file written unbuffered, one "
              "write() per batch; reopen replays the whole file")

    def open(self, path: str, clock: FakeClock) -> None:
        os.makedirs(path, exist_ok=True)
        self.clock = clock
        self.path = os.path.join(path, "ledger.bin")
        self.heap: list[tuple] = []
        if os.path.exists(self.path):
            self._replay_payloads()
        self.f = open(self.path, "ab", buffering=0)  # noqa: SIM115

    def _replay_payloads(self) -> None:
        with open(self.path, "rb") as f:
            buf = f.read()
        unpack_b = self.BATCH.unpack_from
        unpack_r = self.REC.unpack_from
        bsize, rsize, shift = self.BATCH.size, self.REC.size, self.SHIFT
        entries: list[tuple] = []
        add = entries.append
        p, end = 0, len(buf)
        while p + bsize <= end:
            da, base, count, nbytes = unpack_b(buf, p)
            body = p + bsize
            if body + nbytes > end:
                break  # torn tail
            q = body
            start = da << shift | base
            for j in range(count):
                kl, vl, ts = unpack_r(buf, q)
                q += rsize
                add((start + j, ts, buf[q:q + kl], buf[q + kl:q + kl + vl]))
                q += kl + vl
            p = body + nbytes
        heapq.heapify(entries)
        self.heap = entries

    def append(self, i: int) -> None:
        w = self.work
        da = w.deliver_after[i]
        base = i * w.batch_size
        keys, values, stamps = w.batch_keys(i), w.batch_values(i), w.batch_timestamps(i)
        pack_r = self.REC.pack
        parts: list[bytes] = [b""]
        heap, push = self.heap, heapq.heappush
        sort_key = da << self.SHIFT | base
        for k, v, ts in zip(keys, values, stamps, strict=True):
            parts.append(pack_r(len(k), len(v), ts))
            parts.append(k)
            parts.append(v)
            push(heap, (sort_key, ts, k, v))
            sort_key += 1
        body_bytes = sum(map(len, parts))
        parts[0] = self.BATCH.pack(da, base, len(keys), body_bytes)
        self.f.write(b"".join(parts))

    def fetch(self, max_records: int) -> list:
        heap = self.heap
        limit = ((self.clock.now + 1) << self.SHIFT) - 1
        if not heap or heap[0][0] > limit:
            return []
        pop = heapq.heappop
        mask, shift = (1 << self.SHIFT) - 1, self.SHIFT
        out = []
        while heap and heap[0][0] <= limit and len(out) < max_records:
            sort_key, _ts, k, v = pop(heap)
            out.append((sort_key >> shift, sort_key & mask, k, v))
        return out

    def close(self) -> None:
        self.f.close()


# --------------------------------------------------------------------------- RocksDB


class RocksdbEngine(Engine):
    name = "rocksdb"
    models = ("an LSM key-value store (RocksDB via rocksdict, raw bytes mode) keyed by big-endian "
              "(deliverAfter, offset); one WriteBatch per batch, WAL on without fsync; drain = "
              "range iteration with an upper bound at (now + 1, 0)")

    KEY = struct.Struct(">qq")
    VHDR = struct.Struct(">qH")  # timestamp, key length

    @classmethod
    def unavailable(cls) -> str | None:
        try:
            import rocksdict  # noqa: F401
        except ImportError:
            return "rocksdict is not installed (pip install rocksdict)"
        return None

    def open(self, path: str, clock: FakeClock) -> None:
        from rocksdict import Options, Rdict

        self.clock = clock
        opts = Options(raw_mode=True)
        opts.create_if_missing(True)
        opts.increase_parallelism(2)
        self.db = Rdict(path, opts)
        self.cursor = self.KEY.pack(0, 0)

    def append(self, i: int) -> None:
        from rocksdict import WriteBatch

        w = self.work
        da = w.deliver_after[i]
        base = i * w.batch_size
        pack_k, pack_h = self.KEY.pack, self.VHDR.pack
        wb = WriteBatch(raw_mode=True)
        put = wb.put
        for j, (k, v, t) in enumerate(zip(w.batch_keys(i), w.batch_values(i),
                                          w.batch_timestamps(i), strict=True)):
            put(pack_k(da, base + j), pack_h(t, len(k)) + k + v)
        self.db.write(wb)

    def fetch(self, max_records: int) -> list:
        from rocksdict import ReadOptions

        ro = ReadOptions()
        ro.set_iterate_upper_bound(self.KEY.pack(self.clock.now + 1, 0))
        unpack_k, unpack_h = self.KEY.unpack, self.VHDR.unpack_from
        out = []
        it = self.db.items(from_key=self.cursor, read_opt=ro)
        for k, v in it:
            _, kl = unpack_h(v)
            da, off = unpack_k(k)
            out.append((da, off, v[10:10 + kl], v[10 + kl:]))
            if len(out) >= max_records:
                break
        if out:
            last = out[-1]
            self.cursor = self.KEY.pack(last[0], last[1] + 1)
        return out

    def close(self) -> None:
        self.db.close()


# --------------------------------------------------------------------------- Redis


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_POP_DUE = """
local items = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'WITHSCORES', 'LIMIT', 0, ARGV[2])
if #items > 0 then
  local members = {}
  for i = 1, #items, 2 do members[#members + 1] = items[i] end
  redis.call('ZREM', KEYS[1], unpack(members))
end
return items
"""


class RedisEngine(Engine):
    """A delay queue in a Redis sorted set on a private redis-server (127.0.0.1, free port).
    score = deliverAfter (exact in a double), member = 8-byte big-endian offset + key length +
    key + value, so ties on score fall back to byte order = offset order. One ZADD per batch;
    a fetch is one Lua script (ZRANGEBYSCORE ... LIMIT + ZREM: the classic atomic "pop due"),
    so delivery is destructive. Persistence: AOF with appendfsync no; reopen = restart the
    server (it reloads the AOF) and pop the first page."""

    name = "redis"
    models = ("a Redis sorted-set delay queue on a private redis-server (AOF, appendfsync no): "
              "one ZADD per batch, a Lua 'pop due' (ZRANGEBYSCORE LIMIT + ZREM) per page; "
              "reopen = server restart reloading the AOF")

    KEY = "q"
    MHDR = struct.Struct(">qqH")  # offset, timestamp, key length

    @classmethod
    def unavailable(cls) -> str | None:
        if shutil.which("redis-server") is None:
            return "redis-server binary not found (apt-get install redis-server)"
        try:
            import redis  # noqa: F401
        except ImportError:
            return "redis Python client not installed (pip install redis)"
        return None

    def open(self, path: str, clock: FakeClock) -> None:
        os.makedirs(path, exist_ok=True)
        self.clock = clock
        self.path = path
        self.proc: subprocess.Popen | None = None
        self._start()

    def _start(self) -> None:
        import redis

        self.port = _free_port()
        self.proc = subprocess.Popen(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port),
             "--protected-mode", "yes", "--dir", os.path.abspath(self.path), "--save", "",
             "--appendonly", "yes", "--appendfsync", "no", "--daemonize", "no",
             "--logfile", os.path.join(os.path.abspath(self.path), "redis.log")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.r = redis.Redis(host="127.0.0.1", port=self.port)
        deadline = time.monotonic() + 30
        while True:
            try:
                self.r.ping()
                break
            except (redis.exceptions.ConnectionError, redis.exceptions.BusyLoadingError):
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("redis-server did not start") from None
                time.sleep(0.002)
        self.pop_due = self.r.register_script(_POP_DUE)

    def append(self, i: int) -> None:
        w = self.work
        da = w.deliver_after[i]
        base = i * w.batch_size
        pack = self.MHDR.pack
        mapping = {pack(base + j, t, len(k)) + k + v: da
                   for j, (k, v, t) in enumerate(zip(w.batch_keys(i), w.batch_values(i),
                                                     w.batch_timestamps(i), strict=True))}
        self.r.zadd(self.KEY, mapping)

    def fetch(self, max_records: int) -> list:
        items = self.pop_due(keys=[self.KEY], args=[self.clock.now, max_records])
        unpack, hs = self.MHDR.unpack_from, self.MHDR.size
        out = []
        for j in range(0, len(items), 2):
            m = items[j]
            off, _, kl = unpack(m)
            out.append((int(items[j + 1]), off, m[hs:hs + kl], m[hs + kl:]))
        return out

    def external_memory(self) -> int | None:
        return int(self.r.info("memory")["used_memory"])

    def external_cpu(self) -> float:
        if self.proc is None:
            return 0.0
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime

    def close(self) -> None:
        if self.proc is None:
            return
        self.r.close()
        self.proc.terminate()  # SIGTERM = a clean SHUTDOWN: redis fsyncs the AOF and exits
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def shutdown(self) -> None:
        self.close()


# --------------------------------------------------------------------------- raw file


class RawFileEngine(Engine):
    """The physical limit: the same payload bytes (per batch one pre-encoded buffer of
    deliverAfter, offset, lengths, key, value per record) written with one write() per batch,
    and read back sequentially in 500-record chunks. No order, no index, no parsing."""

    name = "rawfile"
    ordered = False
    models = ("the physical limit: one write() per pre-encoded batch of the same payload bytes; "
              "drain = sequential pread of 500-record chunks (no ordering, no parsing)")

    REC = struct.Struct(">qqqHI")  # deliverAfter, offset, timestamp, lengths

    def prepare(self, work: Workload) -> None:
        super().prepare(work)
        pack = self.REC.pack
        self.bufs: list[bytes] = []
        self.rec_sizes: list[int] = []
        for i in range(work.n_batches):
            da = work.deliver_after[i]
            base = i * work.batch_size
            parts = []
            for j, (k, v, t) in enumerate(zip(work.batch_keys(i), work.batch_values(i),
                                              work.batch_timestamps(i), strict=True)):
                parts.append(pack(da, base + j, t, len(k), len(v)) + k + v)
                self.rec_sizes.append(len(parts[-1]))
            self.bufs.append(b"".join(parts))

    def open(self, path: str, clock: FakeClock) -> None:
        os.makedirs(path, exist_ok=True)
        self.path = os.path.join(path, "raw.bin")
        self.f = open(self.path, "ab", buffering=0)  # noqa: SIM115
        self.fd = os.open(self.path, os.O_RDONLY)
        self.read_pos = 0
        self.read_rec = 0
        self.written = self.f.tell()

    def append(self, i: int) -> None:
        self.written += self.f.write(self.bufs[i])

    def fetch(self, max_records: int) -> list:
        n = min(max_records, len(self.rec_sizes) - self.read_rec)
        if n <= 0:
            return []
        nbytes = sum(self.rec_sizes[self.read_rec:self.read_rec + n])
        if self.read_pos + nbytes > self.written:
            return []
        data = os.pread(self.fd, nbytes, self.read_pos)
        self.read_pos += len(data)
        self.read_rec += n
        return [(n, data)]

    def count(self, page: list) -> int:
        return page[0][0] if page else 0

    def close(self) -> None:
        self.f.close()
        os.close(self.fd)


ENGINES: dict[str, type[Engine]] = {
    e.name: e for e in (KdelayEngine, SqliteEngine, HeapqEngine, HeapqPerBatchEngine,
                        HeapPayloadEngine, RocksdbEngine, RedisEngine, RawFileEngine)
}


def make_engine(name: str) -> Engine:
    return ENGINES[name]()


def available_engines(names: Sequence[str], say: Callable[[str], None] = print) -> list[str]:
    """The names that can run here; prints why the others are skipped."""
    out = []
    for n in names:
        if n not in ENGINES:
            raise SystemExit(f"unknown engine {n!r}; choose from {', '.join(ENGINES)}")
        why = ENGINES[n].unavailable()
        if why:
            say(f"skipping {n}: {why}")
        else:
            out.append(n)
    return out
