"""The classic group coordinator's state machine, driven directly on an event loop: joins
answered in one generation, the leader alone gets the members, a leave or a missed session
rebalances, and a group with no initial delay completes a join at once."""

from __future__ import annotations

import asyncio

from kio.schema.errors import ErrorCode

from kdelay.broker.groups.coordinator import EMPTY, STABLE, GroupCoordinator

PROTOCOLS = [("range", b"meta")]


def join(c: GroupCoordinator, member: str = "", session_ms: int = 10_000):
    return c.join("g", member, None, "consumer", PROTOCOLS, session_ms, 10_000, "client",
                  "host")


def test_a_lone_member_with_no_initial_delay_joins_and_syncs_at_once():
    async def scenario():
        c = GroupCoordinator(initial_rebalance_delay_ms=0)
        answer = await join(c)
        assert answer.error == ErrorCode.none and answer.generation == 1
        assert answer.leader == answer.member_id and len(answer.members) == 1
        error, assignment = await c.sync("g", 1, answer.member_id, {answer.member_id: b"a"})
        assert (error, assignment) == (ErrorCode.none, b"a")
        assert c.groups["g"].state == STABLE
        c.close()
    asyncio.run(scenario())


def test_members_joining_together_share_a_generation_and_a_leave_rebalances():
    async def scenario():
        c = GroupCoordinator(initial_rebalance_delay_ms=50)
        a, b = await asyncio.gather(join(c), join(c))
        assert a.generation == b.generation == 1
        leader, follower = (a, b) if a.member_id == a.leader else (b, a)
        assert len(leader.members) == 2 and follower.members == []
        plan = {leader.member_id: b"p0", follower.member_id: b"p1"}
        got = await asyncio.gather(c.sync("g", 1, follower.member_id, {}),
                                   c.sync("g", 1, leader.member_id, plan))
        assert [x[1] for x in got] == [b"p1", b"p0"]
        assert c.leave("g", follower.member_id, None) == ErrorCode.none
        assert c.heartbeat("g", 1, leader.member_id) == ErrorCode.rebalance_in_progress
        again = await join(c, leader.member_id)
        assert again.generation == 2 and len(again.members) == 1
        c.close()
    asyncio.run(scenario())


def test_a_member_that_misses_its_session_timeout_is_removed():
    async def scenario():
        c = GroupCoordinator(initial_rebalance_delay_ms=0)
        a = await join(c, session_ms=50)
        await c.sync("g", a.generation, a.member_id, {})
        await asyncio.sleep(0.3)  # no heartbeat: the session runs out (a lower bound only)
        assert c.heartbeat("g", a.generation, a.member_id) == ErrorCode.unknown_member_id
        assert c.groups["g"].state == EMPTY
        c.close()
    asyncio.run(scenario())
