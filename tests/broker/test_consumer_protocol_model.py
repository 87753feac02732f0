"""KIP-848 reconciliation (groups/consumer_protocol.py) driven by hypothesis through joins,
leaves and heartbeats in any order, members confirming revocations or not yet: a partition
never has two owners (assigned or being revoked), a member at the group's epoch only
holds partitions of its target, and once every member has heartbeated with what it owns the group is Stable with
every partition assigned, as the range assignor splits them in join order."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from kdelay.broker.groups.consumer_protocol import STABLE, ConsumerGroups

PARTITIONS = {"a": 3, "b": 2}
ops = st.lists(st.tuples(st.sampled_from(["join", "leave", "beat", "lazy"]),
                         st.integers(0, 3), st.sampled_from([("a",), ("b",), ("a", "b")])),
               max_size=30)


def check_owners(groups: ConsumerGroups) -> None:
    g = groups.groups["g"]
    seen: dict = {}
    for m in g.members.values():
        for tp in m.assigned | m.revoking:
            assert tp not in seen, f"{tp} owned by {seen[tp]} and {m.member_id}"
            seen[tp] = m.member_id
        if m.epoch == g.target_epoch:  # behind it, it has not heard of the new target yet
            assert m.assigned <= g.target.get(m.member_id, set())
        assert not (m.assigned & m.revoking)
    assert seen == g.owners


@settings(max_examples=80, deadline=None)
@given(steps=ops)
def test_reconciliation_never_gives_a_partition_two_owners(steps):
    async def run() -> None:
        groups = ConsumerGroups(lambda t: PARTITIONS.get(t, 0), 45_000, 5_000)
        epochs: dict[str, int] = {}  # member id -> the epoch its client knows
        for op, who, topics in steps:
            mid = f"m{who}"
            if op == "join" and mid not in epochs:
                a = groups.heartbeat("g", mid, 0, None, 60_000, topics, None)
                assert a.error == ErrorCode.none and a.assignment is not None
                epochs[mid] = a.member.epoch
            elif op == "leave" and mid in epochs:
                assert groups.heartbeat("g", mid, -1, None, -1, None, None).error == \
                    ErrorCode.none
                del epochs[mid]
            elif op in ("beat", "lazy") and mid in epochs:
                m = groups.groups["g"].members[mid]
                # "beat": the client has done what it was told (revoked partitions are
                # gone from what it owns); "lazy": it still lists them
                owned = set(m.assigned) if op == "beat" else m.assigned | m.revoking
                a = groups.heartbeat("g", mid, epochs[mid], None, -1, None, owned)
                assert a.error == ErrorCode.none
                epochs[mid] = a.member.epoch
            if "g" in groups.groups:
                check_owners(groups)
        if not epochs:
            return
        for _ in range(3):  # everyone confirms: the group settles
            for mid in sorted(epochs):
                m = groups.groups["g"].members[mid]
                a = groups.heartbeat("g", mid, epochs[mid], None, -1, None, set(m.assigned))
                epochs[mid] = a.member.epoch
                check_owners(groups)
        g = groups.groups["g"]
        assert g.state == STABLE
        wanted = {(t, p) for m in g.members.values() for t in m.topics
                  for p in range(PARTITIONS[t])}
        assert set(g.owners) == wanted
        groups.close()

    asyncio.run(run())


def test_offset_fetch_checks_the_member_epoch_and_empty_groups_are_dropped():
    """OffsetFetch v9 names the member: Kafka's STALE_MEMBER_EPOCH and UNKNOWN_MEMBER_ID
    for a KIP-848 group; no member named (admin clients, classic consumers) is taken. A
    group whose last member leaves is dropped."""
    async def run() -> None:
        groups = ConsumerGroups(lambda t: PARTITIONS.get(t, 0), 45_000, 5_000)
        a = groups.heartbeat("g", "m1", 0, None, 60_000, ("a",), None)
        epoch = a.member.epoch
        assert groups.fetch_error("g", "m1", epoch) == ErrorCode.none
        assert groups.fetch_error("g", "m1", epoch - 1) == ErrorCode.stale_member_epoch
        assert groups.fetch_error("g", "m1", epoch + 1) == ErrorCode.stale_member_epoch
        assert groups.fetch_error("g", "m9", epoch) == ErrorCode.unknown_member_id
        assert groups.fetch_error("g", None, -1) == ErrorCode.none
        assert groups.fetch_error("classic", "x", 3) == ErrorCode.none  # not KIP-848's
        assert groups.heartbeat("g", "m1", -1, None, -1, None, None).error == ErrorCode.none
        assert "g" not in groups.groups
        assert groups.heartbeat("h", "m1", 3, None, -1, None, None).error == \
            ErrorCode.unknown_member_id
        assert "h" not in groups.groups  # a refused heartbeat makes no group
        groups.close()

    asyncio.run(run())


def test_revocations_and_sessions_run_out_on_the_injected_clock():
    """A member that does not give up its partitions within its rebalance timeout is
    fenced; one that stops heartbeating is removed at its session timeout; the group with
    no members is dropped and holds no timer. No sleeps: an injected clock."""
    now = [0.0]
    groups = ConsumerGroups(lambda t: PARTITIONS.get(t, 0), 1_000, 100,
                            clock=lambda: now[0])
    a = groups.heartbeat("g", "m1", 0, None, 500, ("a",), None)
    assert a.member.assigned == {("a", 0), ("a", 1), ("a", 2)}
    b = groups.heartbeat("g", "m2", 0, None, 500, ("a",), None)
    m1 = groups.groups["g"].members["m1"]
    groups.heartbeat("g", "m1", a.member.epoch, None, -1, None, set(m1.assigned))  # told
    # to give some up
    assert m1.revoking  # ... and it never confirms
    now[0] = 499
    groups.timers.run_due()
    assert "m1" in groups.groups["g"].members
    now[0] = 501
    groups.timers.run_due()
    assert set(groups.groups["g"].members) == {"m2"}  # fenced: its partitions are free
    groups.heartbeat("g", "m2", b.member.epoch, None, -1, None, set())
    assert groups.groups["g"].members["m2"].assigned == {("a", 0), ("a", 1), ("a", 2)}
    now[0] = 501 + 1_001  # no heartbeat from m2 for a session
    groups.timers.run_due()
    assert "g" not in groups.groups and len(groups.timers) == 0
