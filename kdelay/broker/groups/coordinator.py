"""The classic group protocol's coordinator (JoinGroup, SyncGroup, Heartbeat, LeaveGroup),
as Kafka's GroupCoordinator runs it for a one-node cluster.

A group moves Empty -> PreparingRebalance -> CompletingRebalance -> Stable. A rebalance
starts when a member joins, leaves, changes its protocols or misses its session timeout; it
ends when every known member has joined again (or the rebalance timeout drops those that
did not), when the broker answers every pending JoinGroup with the new generation (the
leader also gets every member's metadata, to run the client-side assignor). The leader's
SyncGroup hands the assignments over; every member's SyncGroup returns its own.

Timers are the event loop's (one `call_later` per member session and per rebalance), so
the cost of a heartbeat, a join or an expiry is O(1) plus the loop's O(log n) timer heap:
nothing scans the groups.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

EMPTY, PREPARING, COMPLETING, STABLE, DEAD = (
    "Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead")


@dataclass
class JoinAnswer:
    error: ErrorCode
    generation: int = -1
    protocol_name: str | None = None
    leader: str = ""
    member_id: str = ""
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)  # leader only


@dataclass(eq=False)
class Member:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    session_ms: int
    rebalance_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    joining: asyncio.Future | None = None   # its JoinGroup waits on this
    syncing: asyncio.Future | None = None   # its SyncGroup waits on this
    timer: asyncio.TimerHandle | None = None

    def metadata_for(self, protocol: str) -> bytes:
        return next(m for name, m in self.protocols if name == protocol)


class Group:
    def __init__(self, group_id: str):
        self.group_id = group_id
        self.state = EMPTY
        self.generation = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader: str | None = None
        self.members: dict[str, Member] = {}
        self.static: dict[str, str] = {}  # group.instance.id -> member id
        self.rebalance_timer: asyncio.TimerHandle | None = None
        self.initial = False  # the rebalance under way is a new group's (waits its delay)

    def all_joined(self) -> bool:
        return all(m.joining is not None for m in self.members.values())


class GroupCoordinator:
    """Every classic group of the broker. Call from the broker's event loop only."""

    def __init__(self, initial_rebalance_delay_ms: int = 3000):
        self.groups: dict[str, Group] = {}
        self.initial_delay_s = initial_rebalance_delay_ms / 1000

    def group(self, group_id: str) -> Group:
        found = self.groups.get(group_id)
        if found is None:
            found = self.groups[group_id] = Group(group_id)
        return found

    # ------------------------------------------------------------------ JoinGroup

    async def join(self, group_id: str, member_id: str, instance_id: str | None,
                   protocol_type: str, protocols: list[tuple[str, bytes]], session_ms: int,
                   rebalance_ms: int, client_id: str, client_host: str) -> JoinAnswer:
        g = self.group(group_id)
        if not protocols or (g.protocol_type is not None and g.members
                             and protocol_type != g.protocol_type):
            return JoinAnswer(ErrorCode.inconsistent_group_protocol)
        if g.members and not self._common_protocols(g, protocols):
            return JoinAnswer(ErrorCode.inconsistent_group_protocol)
        member = g.members.get(member_id) if member_id else None
        if member_id and member is None and (instance_id is None
                                              or instance_id not in g.static):
            return JoinAnswer(ErrorCode.unknown_member_id, member_id=member_id)
        if member is None and instance_id is not None and instance_id in g.static:
            # a static member back (under a new member id): the old id is fenced
            old = g.members.pop(g.static[instance_id], None)
            if old is not None:
                self._cancel(old)
        if member is None:
            member = Member(f"{client_id or 'member'}-{uuid.uuid4()}", instance_id, client_id,
                            client_host, session_ms, rebalance_ms, protocol_type, protocols)
            g.members[member.member_id] = member
            if instance_id is not None:
                g.static[instance_id] = member.member_id
        else:
            member.protocols, member.session_ms = protocols, session_ms
            member.rebalance_ms = rebalance_ms
        g.protocol_type = protocol_type
        loop = asyncio.get_running_loop()
        if member.joining is not None and not member.joining.done():
            member.joining.set_result(JoinAnswer(ErrorCode.rebalance_in_progress))
        joining = member.joining = loop.create_future()
        self._touch(g, member)
        if g.state in (EMPTY, STABLE, COMPLETING):
            self._prepare(g, initial=g.state == EMPTY)
        elif g.all_joined() and not g.initial:  # the initial delay runs its course
            self._complete_join(g)
        return await joining  # completing the join may already have answered it

    def _common_protocols(self, g: Group, protocols: list[tuple[str, bytes]]) -> set[str]:
        names = {name for name, _ in protocols}
        for m in g.members.values():
            names &= {name for name, _ in m.protocols}
        return names

    def _prepare(self, g: Group, initial: bool = False) -> None:
        """Start a rebalance: wait for every member to join again (a new group waits the
        initial delay, so that members starting together land in one generation)."""
        g.state = PREPARING
        for m in g.members.values():
            if m.syncing is not None and not m.syncing.done():
                m.syncing.set_result((ErrorCode.rebalance_in_progress, b""))
        if g.rebalance_timer is not None:
            g.rebalance_timer.cancel()
        loop = asyncio.get_running_loop()
        timeout = self.initial_delay_s if initial else \
            max((m.rebalance_ms for m in g.members.values()), default=0) / 1000
        g.initial = initial and self.initial_delay_s > 0
        if g.initial or not g.all_joined():
            g.rebalance_timer = loop.call_later(timeout, self._rebalance_timeout, g)
        else:
            g.rebalance_timer = None
            self._complete_join(g)

    def _rebalance_timeout(self, g: Group) -> None:
        g.rebalance_timer, g.initial = None, False
        if g.state != PREPARING:
            return
        for m in [m for m in g.members.values() if m.joining is None]:
            self._remove(g, m)  # did not join in time
        self._complete_join(g)

    def _complete_join(self, g: Group) -> None:
        if g.rebalance_timer is not None:
            g.rebalance_timer.cancel()
            g.rebalance_timer = None
        if not g.members:
            g.state, g.leader, g.protocol_name = EMPTY, None, None
            g.generation += 1
            return
        g.generation += 1
        if g.leader not in g.members:
            g.leader = next(iter(g.members))
        leader = g.members[g.leader]
        common = self._common_protocols(g, leader.protocols)
        g.protocol_name = next(name for name, _ in leader.protocols if name in common)
        g.state = COMPLETING
        everyone = [(m.member_id, m.instance_id, m.metadata_for(g.protocol_name))
                    for m in g.members.values()]
        g.initial = False
        for m in g.members.values():
            m.assignment = b""
            self._touch(g, m)
            answer = JoinAnswer(ErrorCode.none, g.generation, g.protocol_name, g.leader,
                                m.member_id, everyone if m.member_id == g.leader else [])
            if m.joining is not None and not m.joining.done():
                m.joining.set_result(answer)
            m.joining = None

    # ------------------------------------------------------------------ SyncGroup

    async def sync(self, group_id: str, generation: int, member_id: str,
                   assignments: dict[str, bytes]) -> tuple[ErrorCode, bytes]:
        g = self.groups.get(group_id)
        member = g.members.get(member_id) if g is not None else None
        if g is None or member is None:
            return ErrorCode.unknown_member_id, b""
        if generation != g.generation:
            return ErrorCode.illegal_generation, b""
        if g.state == PREPARING:
            return ErrorCode.rebalance_in_progress, b""
        self._touch(g, member)
        if g.state == STABLE:
            return ErrorCode.none, member.assignment
        syncing = member.syncing = asyncio.get_running_loop().create_future()
        if member_id == g.leader:
            for m in g.members.values():
                m.assignment = assignments.get(m.member_id, b"")
            g.state = STABLE
            for m in g.members.values():
                if m.syncing is not None and not m.syncing.done():
                    m.syncing.set_result((ErrorCode.none, m.assignment))
        result = await syncing
        member.syncing = None
        return result

    # ------------------------------------------------------------------ Heartbeat, leave

    def heartbeat(self, group_id: str, generation: int, member_id: str) -> ErrorCode:
        g = self.groups.get(group_id)
        member = g.members.get(member_id) if g is not None else None
        if g is None or member is None:
            return ErrorCode.unknown_member_id
        self._touch(g, member)
        if generation != g.generation:
            return ErrorCode.illegal_generation
        if g.state == PREPARING:
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def leave(self, group_id: str, member_id: str, instance_id: str | None) -> ErrorCode:
        g = self.groups.get(group_id)
        if g is None:
            return ErrorCode.unknown_member_id
        if instance_id is not None and not member_id:
            member_id = g.static.get(instance_id, "")
        member = g.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        self._remove(g, member)
        self._after_departure(g)
        return ErrorCode.none

    def _after_departure(self, g: Group) -> None:
        if not g.members:
            if g.rebalance_timer is not None:
                g.rebalance_timer.cancel()
                g.rebalance_timer = None
            g.state, g.leader, g.protocol_name = EMPTY, None, None
            g.generation += 1
        elif g.state == PREPARING and g.all_joined():
            self._complete_join(g)
        elif g.state in (STABLE, COMPLETING):
            self._prepare(g)

    def _remove(self, g: Group, member: Member) -> None:
        g.members.pop(member.member_id, None)
        if member.instance_id is not None and g.static.get(member.instance_id) == \
                member.member_id:
            del g.static[member.instance_id]
        self._cancel(member)

    def _cancel(self, member: Member) -> None:
        if member.timer is not None:
            member.timer.cancel()
        for waiting, answer in ((member.joining, JoinAnswer(ErrorCode.unknown_member_id)),
                                (member.syncing, (ErrorCode.unknown_member_id, b""))):
            if waiting is not None and not waiting.done():
                waiting.set_result(answer)

    def _touch(self, g: Group, member: Member) -> None:
        """Restart the member's session timer."""
        if member.timer is not None:
            member.timer.cancel()
        member.timer = asyncio.get_running_loop().call_later(
            member.session_ms / 1000, self._expire, g, member)

    def _expire(self, g: Group, member: Member) -> None:
        if g.members.get(member.member_id) is not member:
            return
        if member.joining is not None:  # waiting in a rebalance: the rebalance timeout rules
            self._touch(g, member)
            return
        self._remove(g, member)
        self._after_departure(g)

    def close(self) -> None:
        for g in self.groups.values():
            if g.rebalance_timer is not None:
                g.rebalance_timer.cancel()
            for m in g.members.values():
                self._cancel(m)
