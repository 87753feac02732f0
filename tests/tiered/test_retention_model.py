"""A model of local + remote retention (hypothesis state machine, file:// store): appends,
rolls, clock advances, syncs and whole-log retention, with the store up or down.

Invariants: the log reads the records the model holds from its log start (retention
only ever takes a prefix, and only records whose batch is due); after a sync with the
store up, the local sealed bytes are at most local_retention_bytes; a segment without a
committed copy always keeps its .log; nothing local goes while the store is down."""

from __future__ import annotations

import os
import shutil
import tempfile

from conftest import FakeClock
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from kdelay import Log, LogConfig, Record, RemoteStorageError
from kdelay.log.segments.layout import LOG_SUFFIX, segment_file
from kdelay.log.segments.segment import LogSegment
from kdelay.log.tiered.sync import RemoteSync
from kdelay.testing.store_faults import StoreFaults

LOCAL_BYTES = 2500


class RetentionModel(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self._start = RemoteSync.start
        RemoteSync.start = lambda self: None  # only the model's own passes
        self.root = tempfile.mkdtemp(prefix="kdelay-tier-model-")
        self.clock = FakeClock()
        self.log = Log.open(os.path.join(self.root, "p-0"), config=LogConfig(
            remote_storage=f"file://{self.root}/store", segment_bytes=1024,
            index_interval_bytes=128, retention_ms=3000, local_retention_bytes=LOCAL_BYTES,
            compaction_min_ratio=0),  # retention by whole segments only: a prefix goes
            clock=self.clock)
        self.values: dict[int, bytes] = {}
        self.down = False

    def teardown(self):
        self.log.close()
        RemoteSync.start = self._start
        shutil.rmtree(self.root, ignore_errors=True)

    def _local_logs(self) -> set[int]:
        return {b for b in self.log.segments
                if os.path.exists(segment_file(self.log.path, b, LOG_SUFFIX))}

    @rule(n=st.integers(1, 6), delay=st.sampled_from([0, 500, 5000]))
    def append(self, n, delay):
        result = self.log.append([Record(b"%d" % self.log.log_end_offset + b"v" * 50)] * n,
                                 delay_ms=delay)
        for o in range(result.base_offset, result.last_offset + 1):
            self.values[o] = b"%d" % result.base_offset + b"v" * 50

    @rule()
    def roll(self):
        self.log.roll()

    @rule(ms=st.sampled_from([100, 1000, 4000]))
    def advance(self, ms):
        self.clock.advance(ms)

    @rule()
    def toggle_store(self):
        self.down = not self.down

    @rule()
    def sync(self):
        local_before = self._local_logs()
        with StoreFaults(unreachable=self.down):
            try:
                self.log.sync_remote()
            except RemoteStorageError:
                assert self.down
        if self.down:  # nothing local goes while the store is down
            assert self._local_logs() >= local_before
        else:
            sealed = [s for s in self.log._segments
                      if isinstance(s, LogSegment) and s is not self.log._segments.active]
            assert sum(s.size for s in sealed) <= LOCAL_BYTES

    @rule()
    def retention(self):
        self.log.enforce_retention()

    @invariant()
    def reads_the_model_from_the_log_start(self):
        start = self.log.log_start_offset
        got, offset = [], start
        while batch := self.log.read(offset, max_records=200):
            got += [(r.offset, r.value) for r in batch]
            offset = batch[-1].offset + 1
        assert got == [(o, v) for o, v in sorted(self.values.items()) if o >= start]

    @invariant()
    def uncopied_segments_stay_local(self):
        for seg in self.log._segments:
            if seg.remote is None:
                assert os.path.exists(segment_file(self.log.path, seg.base_offset, LOG_SUFFIX))


RetentionModel.TestCase.settings = settings(max_examples=60, stateful_step_count=30,
                                            deadline=None,
                                            suppress_health_check=list(HealthCheck))
TestRetentionModel = RetentionModel.TestCase
