"""verify's checks of one segment's batches: CRCs, framing, and offset continuity within
the segment (with the forward gaps compaction leaves in a segment it rewrote), from a
tolerant walk of its .log (scanning.scan_segment). Shared by `kdelay verify` and its
check of remote copies (verify_remote.py)."""

from __future__ import annotations

from ..log.batch.offset_continuity import continues
from ..log.batch.walker import Batch, FramingBreak, base_offsets_crc
from ..log.segments.layout import SegmentFiles
from ..log.segments.live_tail import in_flight_message
from .scanning import SegmentScan, VerifyReport, in_flight


def check_batches(rep: VerifyReport, seg: SegmentFiles, scan: SegmentScan, active: bool,
                   clean: bool) -> None:
    path = seg.log_path
    expected = seg.base_offset
    # compaction removes records: in a segment it rewrote (and only there) offsets may
    # skip forward, but every batch must still lie before the end its marker gives
    compacted = scan.end_offset is not None
    items: list[Batch | FramingBreak] = sorted(
        [*scan.batches, *scan.breaks], key=lambda x: (x.position, isinstance(x, Batch)))
    after_break = False
    for item in items:
        if isinstance(item, FramingBreak):
            torn_tail = item.resume_at is None and active and not clean
            if torn_tail and in_flight(seg, item):
                rep.add(False, path, item.position,
                        in_flight_message(item.position, item.file_size))
                continue
            note = " (a torn tail from a crash: the next open truncates it)" if torn_tail else ""
            rep.add(True, path, item.position, item.describe() + note)
            after_break = True
            continue
        b = item
        if not b.crc_valid:
            rep.add(True, path, b.position,
                    f"CRC-32C mismatch in batch of offsets {b.base_offset}..{b.last_offset} "
                    f"({b.size} bytes)")
        if after_break and b.base_offset > expected:
            rep.add(True, path, b.position,
                    f"offsets {expected}..{b.base_offset - 1} are lost in the damaged bytes "
                    f"before this batch")
        elif not after_break and not continues(b.base_offset, expected, compacted):
            if b.base_offset > expected:
                msg = (f"offset gap: batch starts at offset {b.base_offset}, expected "
                       f"{expected} (offsets {expected}..{b.base_offset - 1} missing)")
            else:
                msg = (f"offsets go backwards: batch starts at offset {b.base_offset}, "
                       f"expected {expected}")
            if expected == seg.base_offset and b is scan.batches[0]:
                msg = (f"first batch starts at offset {b.base_offset} but the file name says "
                       f"{seg.base_offset}")
            rep.add(True, path, b.position, msg)
        if scan.end_offset is not None and b.last_offset >= scan.end_offset:  # compacted
            rep.add(True, path, b.position,
                    f"batch of offsets {b.base_offset}..{b.last_offset} lies past the end "
                    f"offset {scan.end_offset} of this compacted segment")
        after_break = False
        expected = b.last_offset + 1
    if (scan.bases_crc is not None and not scan.breaks
            and base_offsets_crc([b.entry() for b in scan.batches]) != scan.bases_crc):
        rep.add(True, path, 0, "batch base offsets differ from those compaction wrote (the "
                "checksum in its marker): one is damaged; once its indexes are rebuilt, the "
                "segment reads as empty")
