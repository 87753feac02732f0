"""PackedBinary lengths against the compiled encoder's preconditions.

`Log.append_columns` hands PackedBinary lengths to compiled code (record_loops.pyx), which
indexes the data with them. columns._packed must refuse, with InvalidRecordError and
nothing written, every column whose lengths are not each in [-1, len(data)] adding up
exactly to the data, however they are typed (signed or unsigned, any width) and however
their fixed-width sum would wrap around; every other column must round-trip exactly.

The appends run in a child process, so that a crash in compiled code is a failed example
(with the input that caused it), not a dead test run.
"""

from __future__ import annotations

import pickle
import struct
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from kdelay import InvalidRecordError, PackedBinary
from kdelay.log.batch.columns import batch_columns
from kdelay.validation import MAX_INT64

# reads (column, lengths, data) frames from stdin; answers each with what append_columns did
CHILD = textwrap.dedent("""
    import pickle, struct, sys, tempfile
    import numpy as np
    from kdelay import InvalidRecordError, Log, PackedBinary

    def frame(obj):
        blob = pickle.dumps(obj)
        sys.stdout.buffer.write(struct.pack("<I", len(blob)) + blob)
        sys.stdout.buffer.flush()

    log = Log.open(tempfile.mkdtemp())
    while True:
        head = sys.stdin.buffer.read(4)
        if len(head) < 4:
            break
        column, lengths, data = pickle.loads(sys.stdin.buffer.read(struct.unpack("<I", head)[0]))
        packed = PackedBinary(lengths, data)
        rows = len(lengths) if isinstance(lengths, np.ndarray) and lengths.ndim == 1 else 1
        other = PackedBinary(np.full(max(rows, 1), -1, np.int64), b"")
        args = (packed, other) if column == "values" else (other, packed)
        end = log.log_end_offset
        try:
            r = log.append_columns(args[0], keys=args[1])
        except InvalidRecordError as e:
            frame(("refused", str(e), log.log_end_offset - end))
            continue
        except Exception as e:
            frame(("error", repr(e), log.log_end_offset - end))
            continue
        got = log.read(r.base_offset, max_records=r.last_offset - r.base_offset + 1)
        field = column[:-1]  # values -> value, keys -> key
        frame(("appended", [getattr(rec, field) for rec in got], len(got)))
""")


class _Child:
    """The child process, started on first use and again after it died."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None

    def append(self, column: str, lengths: object, data: bytes) -> tuple:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE)
        blob = pickle.dumps((column, lengths, data))
        try:
            self.proc.stdin.write(struct.pack("<I", len(blob)) + blob)
            self.proc.stdin.flush()
            head = self.proc.stdout.read(4)
        except BrokenPipeError:
            head = b""
        if len(head) < 4:
            rc = self.proc.wait()
            raise AssertionError(f"the child died (exit status {rc}) appending {column} "
                                 f"lengths {lengths!r} ({getattr(lengths, 'dtype', None)}) "
                                 f"over {len(data)} bytes")
        return pickle.loads(self.proc.stdout.read(struct.unpack("<I", head)[0]))

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:  # a death failed its example
            self.proc.stdin.close()
            assert self.proc.wait(timeout=60) == 0


@pytest.fixture(scope="module")
def child():
    c = _Child()
    yield c
    c.close()


INT_DTYPES = [np.dtype(f"{k}{w}") for k in "iu" for w in (1, 2, 4, 8)]
# values near every boundary a length or a sum of lengths could cross
EDGES = [-1, -2, 0, 1, 2 ** 31 - 1, 2 ** 31, 2 ** 32 - 1, 2 ** 62, MAX_INT64, 2 ** 63,
         2 ** 64 - 1, -(2 ** 63)]


@st.composite
def adversarial_lengths(draw, data_size: int) -> object:
    """Lengths for `data_size` bytes of data: valid splits, nudged ones, values near the
    edges, sums that wrap around in 64 bits, any integer width and sign (each value as
    that type holds it: wrapped), and arrays that are not 1-D integers at all."""
    n = draw(st.integers(1, 6))
    shape = draw(st.sampled_from(["split", "nudged", "edges", "wrapping", "not_ints"]))
    if shape == "not_ints":
        return draw(st.sampled_from([
            np.zeros(n, np.float64), np.zeros(n, bool), np.array([0] * n, dtype=object),
            np.zeros((1, n), np.int64), np.int64(data_size), [2 ** 70] * n, "abc"]))
    if shape in ("split", "nudged"):
        cuts = sorted(draw(st.lists(st.integers(0, data_size), min_size=n - 1,
                                    max_size=n - 1)))
        values = [b - a for a, b in zip([0, *cuts], [*cuts, data_size], strict=True)]
        values = [draw(st.sampled_from([-1, v])) if v == 0 else v for v in values]
        if shape == "nudged":
            i = draw(st.integers(0, n - 1))
            values[i] += draw(st.sampled_from([-2, -1, 1, 2 ** 32, 2 ** 63, 2 ** 64]))
    elif shape == "edges":
        values = draw(st.lists(st.sampled_from(EDGES) | st.integers(-3, data_size + 3),
                               min_size=n, max_size=n))
    else:  # large values whose sum is data_size modulo 2**64 (or 2**width)
        big = draw(st.lists(st.integers(2 ** 40, MAX_INT64), min_size=1, max_size=4))
        values = [*big, (data_size - sum(big)) % 2 ** 64]
    dtype = draw(st.sampled_from(INT_DTYPES))
    bits = 8 * dtype.itemsize
    wrapped = [v % 2 ** bits for v in values]  # what that integer type holds
    return np.array(wrapped, dtype=f"u{dtype.itemsize}").view(dtype)


def _expected(lengths: object, data: bytes) -> list | None:
    """The values that lengths cut out of data, None when the column must be refused
    (the rule in exact arithmetic)."""
    if not isinstance(lengths, np.ndarray) or lengths.ndim != 1 \
            or lengths.dtype.kind not in "iu":
        return None
    values = [int(v) for v in lengths]
    if not all(-1 <= v <= len(data) for v in values) \
            or sum(v for v in values if v != -1) != len(data):
        return None
    out, at = [], 0
    for v in values:
        out.append(None if v == -1 else data[at:at + v])
        at += max(v, 0)
    return out


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), st.binary(max_size=24), st.sampled_from(["values", "keys"]))
def test_packed_lengths_refused_or_round_trip_in_a_child(child, data, payload, column):
    lengths = data.draw(adversarial_lengths(len(payload)))
    outcome, detail, written = child.append(column, lengths, payload)
    want = _expected(lengths, payload)
    event(outcome)
    if want is None:
        assert outcome == "refused", (outcome, detail)
        assert written == 0
    else:
        assert outcome == "appended", (outcome, detail)
        assert detail == want and written == len(want)


def test_wrapping_and_unsigned_lengths_are_refused():
    # the two reported cases: an int64 sum that wraps to the data's size, and 2**64 - 1
    # (-1, a null, once cast to int64)
    wrapping = np.array([MAX_INT64, MAX_INT64, 2], np.int64)
    for lengths in (wrapping, np.array([2 ** 64 - 1], np.uint64)):
        with pytest.raises(InvalidRecordError):
            batch_columns(PackedBinary(lengths, b""))


@given(st.integers(0, MAX_INT64), st.data())
def test_exact_sum_never_wraps(bound, data):
    from kdelay.log.batch.columns import _exact_sum
    values = data.draw(st.lists(st.integers(-1, bound), min_size=0, max_size=8))
    assert _exact_sum(np.array(values, np.int64), bound) == sum(values)
