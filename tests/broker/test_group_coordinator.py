"""The classic group coordinator's state machine, driven directly on an injected clock (no
event loop, no sleeps): joins answered in one generation, the leader alone gets the members,
a leave or a missed session rebalances; static membership as Kafka has it (a static member
back under a new member id keeps its assignment without a rebalance, its old id is fenced,
LeaveGroup by instance id); a group with no members is dropped; heartbeats cost the timer
heap nothing."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from kdelay.broker.groups.coordinator import COMPLETING, STABLE, GroupCoordinator

PROTOCOLS = [("range", b"meta")]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def coordinator(initial_delay_ms: int = 0) -> tuple[GroupCoordinator, Clock]:
    clock = Clock()
    return GroupCoordinator(initial_delay_ms, clock=clock), clock


def join(c: GroupCoordinator, member: str = "", instance: str | None = None,
         session_ms: int = 10_000, protocols=PROTOCOLS) -> list:
    """The JoinGroup's answer lands in the list (at once, or when the rebalance ends)."""
    box: list = []
    c.join("g", member, instance, "consumer", protocols, session_ms, 10_000, "client",
           "host", box.append)
    return box


def sync(c: GroupCoordinator, generation: int, member: str, plan=None,
         instance: str | None = None) -> list:
    box: list = []
    c.sync("g", generation, member, instance, plan or {}, box.append)
    return box


def stable_pair(c: GroupCoordinator, clock: Clock, instances=(None, None)):
    """Two members (a leader and a follower) in a Stable group, their plan synced."""
    a, b = join(c, instance=instances[0]), join(c, instance=instances[1])
    for _ in range(2):  # the initial delay, twice as the second member came during it
        clock.now += 10
        c.run_due()
    (a,), (b,) = a, b
    leader, follower = (a, b) if a.member_id == a.leader else (b, a)
    plan = {leader.member_id: b"p0", follower.member_id: b"p1"}
    got = sync(c, follower.generation, follower.member_id, instance=instances[1]
               if follower is b else instances[0])
    assert got == []  # waits for the leader
    sync(c, leader.generation, leader.member_id, plan,
         instance=instances[0] if leader is a else instances[1])
    assert got == [(ErrorCode.none, b"p1")] and c.groups["g"].state == STABLE
    return leader, follower


def test_a_lone_member_with_no_initial_delay_joins_and_syncs_at_once():
    c, _ = coordinator()
    (answer,) = join(c)
    assert answer.error == ErrorCode.none and answer.generation == 1
    assert answer.leader == answer.member_id and len(answer.members) == 1
    assert sync(c, 1, answer.member_id, {answer.member_id: b"a"}) == [(ErrorCode.none, b"a")]
    assert c.groups["g"].state == STABLE


def test_members_joining_together_share_a_generation_and_a_leave_rebalances():
    c, clock = coordinator(initial_delay_ms=50)
    a, b = join(c), join(c)
    assert a == b == []  # the initial delay runs
    clock.now += 50
    c.run_due()
    assert a == b == []  # ... once more, as a member joined during it (Kafka's rule)
    clock.now += 50
    c.run_due()
    (a,), (b,) = a, b
    assert a.generation == b.generation == 1
    leader, follower = (a, b) if a.member_id == a.leader else (b, a)
    assert len(leader.members) == 2 and follower.members == []
    assert c.leave("g", follower.member_id, None) == ErrorCode.none
    assert c.heartbeat("g", 1, leader.member_id) == ErrorCode.rebalance_in_progress
    (again,) = join(c, leader.member_id)
    assert again.generation == 2 and len(again.members) == 1


def test_a_member_that_misses_its_session_timeout_is_removed_and_the_group_dropped():
    c, clock = coordinator()
    (a,) = join(c, session_ms=50)
    sync(c, a.generation, a.member_id, {})
    clock.now += 49
    c.run_due()
    assert c.heartbeat("g", a.generation, a.member_id) == ErrorCode.none
    clock.now += 49
    c.run_due()
    assert "g" in c.groups  # the heartbeat moved its deadline
    clock.now += 2
    c.run_due()
    assert c.heartbeat("g", a.generation, a.member_id) == ErrorCode.unknown_member_id
    assert "g" not in c.groups and len(c.timers) == 0  # nothing kept of an empty group


def test_a_follower_joining_again_unchanged_gets_the_generation_without_a_rebalance():
    c, clock = coordinator(initial_delay_ms=10)
    leader, follower = stable_pair(c, clock)
    (again,) = join(c, follower.member_id)
    assert (again.error, again.generation, again.members) == (ErrorCode.none, 1, [])
    assert c.groups["g"].state == STABLE
    box = join(c, follower.member_id, protocols=[("range", b"other")])
    assert box == [] and c.groups["g"].state != STABLE  # new metadata: a rebalance


def test_a_static_member_back_keeps_its_assignment_and_its_old_id_is_fenced():
    c, clock = coordinator(initial_delay_ms=10)
    leader, follower = stable_pair(c, clock, instances=("i-a", "i-b"))
    static_follower = "i-b" if c.groups["g"].static["i-b"] == follower.member_id else "i-a"
    (back,) = join(c, instance=static_follower)  # restarted: no member id
    g = c.groups["g"]
    assert back.error == ErrorCode.none and back.member_id != follower.member_id
    assert (back.generation, g.generation, g.state) == (1, 1, STABLE)  # no rebalance
    assert back.leader == leader.member_id and back.members == [] and not back.skip_assignment
    assert sync(c, 1, back.member_id, instance=static_follower) == [(ErrorCode.none, b"p1")]
    old = follower.member_id
    fenced = ErrorCode.fenced_instance_id
    assert c.heartbeat("g", 1, old, static_follower) == fenced
    assert sync(c, 1, old, instance=static_follower) == [(fenced, b"")]
    (rejoin,) = join(c, old, static_follower)
    assert rejoin.error == fenced
    assert c.commit_error("g", old, static_follower, 1) == fenced
    assert c.leave("g", old, static_follower) == fenced
    assert c.commit_error("g", back.member_id, static_follower, 1) == ErrorCode.none
    assert c.heartbeat("g", 1, leader.member_id) == ErrorCode.none  # the other saw nothing


def test_the_static_leader_back_is_told_it_leads_and_skips_the_assignment():
    c, clock = coordinator(initial_delay_ms=10)
    leader, follower = stable_pair(c, clock, instances=("i-a", "i-b"))
    instance = next(i for i, m in c.groups["g"].static.items() if m == leader.member_id)
    (back,) = join(c, instance=instance)
    assert back.leader == back.member_id and back.skip_assignment
    assert {m for m, _, _ in back.members} == {back.member_id, follower.member_id}
    # its SyncGroup (with whatever plan it computes) changes nothing in a Stable group
    assert sync(c, 1, back.member_id, {back.member_id: b"x"}, instance) == \
        [(ErrorCode.none, b"p0")]
    assert c.groups["g"].generation == 1


def test_leave_group_by_instance_id_alone_removes_the_static_member():
    c, clock = coordinator(initial_delay_ms=10)
    leader, follower = stable_pair(c, clock, instances=("i-a", "i-b"))
    assert c.leave("g", "", "i-zz") == ErrorCode.unknown_member_id
    assert c.leave("g", "", "i-b") == ErrorCode.none
    g = c.groups["g"]
    assert "i-b" not in g.static and len(g.members) == 1


def test_commits_follow_kafkas_rules_through_a_rebalance():
    c, clock = coordinator(initial_delay_ms=10)
    leader, follower = stable_pair(c, clock)
    assert c.commit_error("g", follower.member_id, None, 1) == ErrorCode.none
    assert c.commit_error("g", follower.member_id, None, 0) == ErrorCode.illegal_generation
    assert c.commit_error("g", "nobody", None, 1) == ErrorCode.unknown_member_id
    assert c.commit_error("g", "", None, -1) == ErrorCode.unknown_member_id  # has members
    assert c.commit_error("other", "", None, -1) == ErrorCode.none  # no members: simple
    assert c.commit_error("other", "x", None, 3) == ErrorCode.illegal_generation
    join(c)  # a third member: PreparingRebalance; the others may still commit
    assert c.commit_error("g", follower.member_id, None, 1) == ErrorCode.none
    join(c, leader.member_id), join(c, follower.member_id)
    assert c.groups["g"].state == COMPLETING
    assert c.commit_error("g", follower.member_id, None, 2) == ErrorCode.rebalance_in_progress


def test_heartbeats_leave_the_timer_heap_as_it_is():
    c, clock = coordinator(initial_delay_ms=10)
    leader, follower = stable_pair(c, clock)
    entries = len(c.timers._heap)
    for _ in range(1000):
        clock.now += 5
        assert c.heartbeat("g", 1, leader.member_id) == ErrorCode.none
        assert c.heartbeat("g", 1, follower.member_id) == ErrorCode.none
    assert len(c.timers._heap) == entries


def test_the_timer_heap_fires_by_the_loop_in_deadline_order_with_moved_deadlines():
    """Production mode (no injected clock): the loop fires the heap's timers, earliest
    first; a deadline moved later fires at the new one, a cancelled timer never."""
    import asyncio

    from kdelay.broker.groups.timers import Timers

    async def scenario() -> list[str]:
        timers, fired, done = Timers(), [], asyncio.Event()
        for key, ms in (("a", 10), ("b", 20), ("c", 30), ("gone", 15)):
            timers.schedule(key, ms, lambda key=key: fired.append(key))
        timers.schedule("a", 40, lambda: fired.append("a"))  # moved later: lazily
        timers.cancel("gone")
        timers.schedule("last", 50, done.set)
        await asyncio.wait_for(done.wait(), 30)  # an upper bound only
        timers.close()
        return fired

    assert asyncio.run(scenario()) == ["b", "c", "a"]
