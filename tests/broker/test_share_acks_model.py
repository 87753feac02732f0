"""Share-group acknowledgement (ShareGroups.acquire and .acknowledge, what ShareFetch and
ShareAcknowledge call) held to a model by hypothesis: batch expansion (one type for a
range, or one per offset, 0 a gap), ACCEPT / RELEASE / REJECT, a refused request (a record
not held, an unknown type) changing nothing, and a released record back exactly when
delay x multiplier^(delivery count - 1), capped, has passed on the log clock, with its
delivery count. Runs over a real topic and the real queue group, on an injected clock."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from kdelay import Record, Topic
from kdelay.broker.groups.share import ShareGroups, ShareMember
from kdelay.broker.groups.share_configs import GroupConfigStore

N = 8  # records in the partition
T0 = 1_700_000_000_000
DELAY, CAP = 100, 250


class Clock:
    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> int:
        return self.t


class OneTopic:
    """The registry ShareGroups looks topics up in, holding the one topic of the test."""

    def __init__(self, topic: Topic):
        self.topic = topic

    def get(self, name: str) -> Topic | None:
        return self.topic if name == "t" else None


@dataclass
class Held:
    count: int  # deliveries so far


types = st.integers(0, 3) | st.just(7)  # 7: no such acknowledge type
batch_lists = st.lists(st.tuples(st.integers(0, N + 1), st.integers(0, 3),
                                 st.booleans(), st.lists(types, min_size=1, max_size=4)),
                       max_size=4)


def disjoint(drawn: list) -> list[tuple[int, int, list[int]]]:
    """Non-overlapping ascending (first, last, types) batches, as a client sends them:
    one type for the range, or one per offset."""
    out, next_free = [], 0
    for first, extra, per_offset, kinds in sorted(drawn):
        first = max(first, next_free)
        last = first + extra
        out.append((first, last, kinds[:1] if not per_offset
                    else (kinds * (extra + 1))[:extra + 1]))
        next_free = last + 1
    return out


@settings(max_examples=60, deadline=None)
@given(multiplier=st.sampled_from([1, 2, 3]),
       rounds=st.lists(st.tuples(batch_lists, st.sampled_from(["early", "due", 0, 1, 120])),
                       min_size=1, max_size=8))
def test_acknowledgements_match_the_model(tmp_path_factory, multiplier, rounds):
    root = str(tmp_path_factory.mktemp("share-acks"))
    clock = Clock()
    topic = Topic.open(root, "t", partitions=1, clock=clock)
    try:
        topic.partition(0).append([Record(b"r%d" % i) for i in range(N)])
        configs = GroupConfigStore(root, {
            "kdelay.share.release.delay.ms": str(DELAY),
            "kdelay.share.release.backoff.multiplier": str(multiplier),
            "kdelay.share.release.delay.max.ms": str(CAP),
            "share.delivery.count.limit": "100", "share.auto.offset.reset": "earliest"})
        shares = ShareGroups(OneTopic(topic), configs, 45_000, 5_000)
        member = ShareMember("m", 1, ["t"], session={("t", 0)})
        available = {o: T0 for o in range(N)}  # offset -> when it may be acquired
        counts = dict.fromkeys(range(N), 0)
        held: set[int] = set()
        for drawn, step in rounds:
            got = shares.acquire("g", member, 100).get(("t", 0), [])
            due = sorted(o for o, t in available.items() if t <= clock.t)
            assert [r.offset for r in got] == due
            for o in due:
                del available[o]
                counts[o] += 1
                held.add(o)
            assert [r.delivery_count for r in got] == [counts[o] for o in due]
            batches = disjoint(drawn)
            expanded = [(o, kinds[0] if len(kinds) == 1 else kinds[o - first])
                        for first, last, kinds in batches for o in range(first, last + 1)]
            acted = [(o, k) for o, k in expanded if k != 0]
            refused = any(o not in held or k not in (1, 2, 3) for o, k in acted)
            error = shares.acknowledge("g", member, "t", 0, batches)
            if refused:
                assert error == ErrorCode.invalid_record_state
            else:
                assert error == ErrorCode.none
                for o, k in acted:
                    held.discard(o)
                    if k == 2:  # released: back after its backoff
                        delay = min(DELAY * multiplier ** (counts[o] - 1), CAP)
                        available[o] = clock.t + delay
            assert set(o for _, _, o in member.held) == held
            later = [t for t in available.values() if t > clock.t]
            if step == "early" and later:  # a ms before the next release is due
                clock.t = min(later) - 1
            elif step == "due" and later:  # exactly when it is due
                clock.t = min(later)
            elif isinstance(step, int):
                clock.t += step
        # nothing comes back early: one ms before the next release is due, none is offered
        if available and min(available.values()) > clock.t:
            clock.t = min(available.values()) - 1
            assert shares.acquire("g", member, 100) == {}
    finally:
        shares.close()
        topic.close()
