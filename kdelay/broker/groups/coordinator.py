"""The classic group protocol's coordinator (JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
and the membership checks of OffsetCommit), with Kafka's rules (its GroupMetadataManager's
classic groups) for a one-node cluster.

A group moves Empty -> PreparingRebalance -> CompletingRebalance -> Stable. A rebalance
starts when a member joins, leaves, changes its protocols or misses its session timeout (and
when the leader joins again); it ends when every member has joined again, or when the
rebalance timeout drops the dynamic members that did not (static ones stay until their
session runs out). The broker then answers every pending JoinGroup with the new generation,
the leader's with every member's metadata; the leader's SyncGroup hands the assignments
over. A follower that joins again with the same metadata, a static member back under a new
member id (`group.instance.id`) with the same selected protocol, and a member joining again
while the group completes a rebalance get the current generation without a rebalance.

Requests are answered through callbacks (`reply`), so the state machine runs synchronously:
the wire handlers wrap it in futures and the property tests drive it directly. Deadlines
(sessions, rebalances, the initial delay) are in one `Timers` heap on an injectable clock.
Costs: a heartbeat or a commit check O(1); a join O(its protocols) unless it completes a
rebalance, which costs O(the group's members); nothing scans the groups. A group with no
members is dropped (its committed offsets are the engine's, not the coordinator's).
Call from one thread (the broker's event loop) only.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from .timers import Timers

EMPTY, PREPARING, COMPLETING, STABLE = (
    "Empty", "PreparingRebalance", "CompletingRebalance", "Stable")
SyncAnswer = tuple[ErrorCode, bytes]


@dataclass
class JoinAnswer:
    error: ErrorCode
    generation: int = -1
    protocol_name: str | None = None
    leader: str = ""
    member_id: str = ""
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)  # leader only
    skip_assignment: bool = False  # a static leader back in a Stable group (KIP-814)


@dataclass(eq=False)
class Member:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    session_ms: int
    rebalance_ms: int
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join_reply: Callable[[JoinAnswer], None] | None = None  # its JoinGroup waits
    sync_reply: Callable[[SyncAnswer], None] | None = None  # its SyncGroup waits

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
        self.support: Counter[str] = Counter()  # protocol name -> members supporting it
        self.awaiting_join = 0  # members whose JoinGroup waits
        self.initial_wait = False  # a new group's initial delay runs
        self.new_member_added = False  # ... and a member joined during it

    def all_joined(self) -> bool:
        return self.awaiting_join == len(self.members)

    def supports(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        """Kafka's check of a joining member's protocols: O(its protocols)."""
        if not self.members:
            return bool(protocol_type) and bool(protocols)
        return protocol_type == self.protocol_type and any(
            self.support[name] == len(self.members) for name, _ in protocols)

    def select_protocol(self) -> str:
        """Kafka's vote: among the protocols every member supports, each member votes for
        the first of its own; the most votes win (ties: the leader's preference)."""
        candidates = {name for name, n in self.support.items() if n == len(self.members)}
        votes: Counter[str] = Counter(
            next(name for name, _ in m.protocols if name in candidates)
            for m in self.members.values())
        order = [name for name, _ in self.members[self.leader].protocols] if self.leader \
            else sorted(votes)
        best = max(votes.values())
        return next(name for name in order if votes.get(name) == best)


class GroupCoordinator:
    """Every classic group of the broker."""

    def __init__(self, initial_rebalance_delay_ms: int = 3000,
                 clock: Callable[[], float] | None = None):
        """`clock()`: now in ms; None: the event loop fires the deadlines by itself, else
        the caller advances its clock and calls `run_due()`."""
        self.groups: dict[str, Group] = {}
        self.initial_delay_ms = initial_rebalance_delay_ms
        self.timers = Timers(clock)

    def run_due(self) -> int:
        """Fire the deadlines that have passed (with an injected clock)."""
        return self.timers.run_due()

    # ------------------------------------------------------------------ JoinGroup

    def join(self, group_id: str, member_id: str, instance_id: str | None,
             protocol_type: str, protocols: list[tuple[str, bytes]], session_ms: int,
             rebalance_ms: int, client_id: str, client_host: str,
             reply: Callable[[JoinAnswer], None]) -> None:
        """One JoinGroup; `reply` is called once, maybe before this returns."""
        g = self.groups.get(group_id)
        if g is None and member_id:
            return reply(JoinAnswer(ErrorCode.unknown_member_id, member_id=member_id))
        if g is None:
            g = Group(group_id)
        if not g.supports(protocol_type, protocols):
            return reply(JoinAnswer(ErrorCode.inconsistent_group_protocol,
                                    member_id=member_id))
        self.groups[group_id] = g
        if not g.members:
            g.protocol_type = protocol_type
        if not member_id:
            new_id = self._new_member_id(client_id, instance_id)
            old_id = g.static.get(instance_id) if instance_id is not None else None
            if old_id is not None:
                return self._static_member_back(g, old_id, new_id, protocols, session_ms,
                                                rebalance_ms, reply)
            member = Member(new_id, instance_id, client_id, client_host, session_ms,
                            rebalance_ms, list(protocols))
            self._add(g, member)
            g.new_member_added = True
            self._await_join(g, member, reply)
            self._schedule_session(g, member)
            return self._rebalance_or_complete(g)
        error = self._member_error(g, member_id, instance_id)
        if error is not None:
            return reply(JoinAnswer(error, member_id=member_id))
        member = g.members[member_id]
        same = member.protocols == list(protocols)
        if g.state == COMPLETING and same or (
                g.state == STABLE and same and member_id != g.leader):
            # its answer was lost, or a follower with nothing new: the current generation
            return reply(self._join_answer(g, member, g.state == COMPLETING))
        self._update(g, member, protocols, session_ms, rebalance_ms)
        self._await_join(g, member, reply)
        self._rebalance_or_complete(g)

    def _static_member_back(self, g: Group, old_id: str, new_id: str,
                            protocols: list[tuple[str, bytes]], session_ms: int,
                            rebalance_ms: int, reply: Callable[[JoinAnswer], None]) -> None:
        """A static member joining under a new member id takes the old one's place (the
        old id is fenced). In a Stable group whose selected protocol stays, that is all:
        no rebalance, its old assignment, the leader told it leads (KIP-814)."""
        member = g.members.pop(old_id)
        self.timers.cancel(("session", g.group_id, old_id))
        was_leader = g.leader == old_id
        self._fail_waiters(g, member, ErrorCode.fenced_instance_id)
        member.member_id = new_id
        g.members[new_id] = member
        g.static[member.instance_id] = new_id  # type: ignore[index]
        if was_leader:
            g.leader = new_id
        self._update(g, member, protocols, session_ms, rebalance_ms)
        self._schedule_session(g, member)
        if g.state == STABLE and g.select_protocol() == g.protocol_name:
            answer = self._join_answer(g, member, was_leader)
            answer.skip_assignment = was_leader
            return reply(answer)
        self._await_join(g, member, reply)
        self._rebalance_or_complete(g)

    def _join_answer(self, g: Group, member: Member, with_members: bool) -> JoinAnswer:
        everyone = [(m.member_id, m.instance_id, m.metadata_for(g.protocol_name or ""))
                    for m in g.members.values()] if with_members else []
        return JoinAnswer(ErrorCode.none, g.generation, g.protocol_name, g.leader or "",
                          member.member_id, everyone if member.member_id == g.leader else [])

    def _rebalance_or_complete(self, g: Group) -> None:
        if g.state in (EMPTY, STABLE, COMPLETING):
            self._prepare(g)
        else:
            self._maybe_complete_join(g)

    def _prepare(self, g: Group) -> None:
        """Start a rebalance: pending SyncGroups are told to join again; a new group waits
        the initial delay (longer while members keep coming, up to the rebalance
        timeout), so that members starting together land in one generation."""
        if g.state == COMPLETING:
            for m in g.members.values():
                m.assignment = b""
                self._answer_sync(m, (ErrorCode.rebalance_in_progress, b""))
        initial = g.state == EMPTY and self.initial_delay_ms > 0
        g.state = PREPARING
        key = ("join", g.group_id)
        if initial:
            g.initial_wait, g.new_member_added = True, False
            delay = self.initial_delay_ms
            self.timers.schedule(key, delay, lambda: self._initial_delay_over(
                g, max(self._rebalance_ms(g) - delay, 0)))
            return
        self.timers.schedule(key, self._rebalance_ms(g), lambda: self._complete_join(g))
        self._maybe_complete_join(g)

    def _initial_delay_over(self, g: Group, remaining_ms: int) -> None:
        if self.groups.get(g.group_id) is not g or g.state != PREPARING:
            return
        if g.new_member_added and remaining_ms > 0:
            g.new_member_added = False
            delay = min(self.initial_delay_ms, remaining_ms)
            self.timers.schedule(("join", g.group_id), delay, lambda: self._initial_delay_over(
                g, remaining_ms - delay))
            return
        g.initial_wait = False
        self._complete_join(g)

    def _rebalance_ms(self, g: Group) -> int:
        return max((m.rebalance_ms for m in g.members.values()), default=0)

    def _maybe_complete_join(self, g: Group) -> None:
        if g.state == PREPARING and g.all_joined() and not g.initial_wait:
            self._complete_join(g)

    def _complete_join(self, g: Group) -> None:
        if self.groups.get(g.group_id) is not g or g.state != PREPARING:
            return
        self.timers.cancel(("join", g.group_id))
        g.initial_wait = False
        for m in [m for m in g.members.values() if m.join_reply is None
                  and m.instance_id is None]:
            self._remove(g, m)  # dynamic members that did not join again in time
        if g.members and g.awaiting_join == 0:  # nobody joined: wait for the sessions
            self.timers.schedule(("join", g.group_id), self._rebalance_ms(g),
                                 lambda: self._complete_join(g))
            return
        g.generation += 1
        if not g.members:
            g.state, g.leader, g.protocol_name = EMPTY, None, None
            self._drop(g)
            return
        if g.leader is None or g.members[g.leader].join_reply is None:
            g.leader = next(m.member_id for m in g.members.values() if m.join_reply)
        g.protocol_name = g.select_protocol()
        g.state = COMPLETING
        for m in g.members.values():
            answer = self._join_answer(g, m, True)
            reply, m.join_reply = m.join_reply, None
            if reply is not None:
                g.awaiting_join -= 1
                reply(answer)
            self._schedule_session(g, m)

    # ------------------------------------------------------------------ SyncGroup

    def sync(self, group_id: str, generation: int, member_id: str, instance_id: str | None,
             assignments: dict[str, bytes], reply: Callable[[SyncAnswer], None],
             protocol_type: str | None = None, protocol_name: str | None = None) -> None:
        """One SyncGroup; `reply` is called once, maybe before this returns."""
        g = self.groups.get(group_id)
        if g is None:
            return reply((ErrorCode.unknown_member_id, b""))
        error = self._member_error(g, member_id, instance_id)
        if error is not None:
            return reply((error, b""))
        if generation != g.generation:
            return reply((ErrorCode.illegal_generation, b""))
        if (protocol_type is not None and protocol_type != g.protocol_type) or (
                protocol_name is not None and protocol_name != g.protocol_name):
            return reply((ErrorCode.inconsistent_group_protocol, b""))
        if g.state == PREPARING:
            return reply((ErrorCode.rebalance_in_progress, b""))
        member = g.members[member_id]
        if g.state == STABLE:
            return reply((ErrorCode.none, member.assignment))
        self._answer_sync(member, (ErrorCode.rebalance_in_progress, b""))  # a second one
        member.sync_reply = reply
        if member_id == g.leader:
            for m in g.members.values():
                m.assignment = assignments.get(m.member_id, b"")
            g.state = STABLE
            for m in g.members.values():
                if m.sync_reply is not None:
                    self._answer_sync(m, (ErrorCode.none, m.assignment))
                    self._schedule_session(g, m)

    # ------------------------------------------------------------------ Heartbeat, leave

    def heartbeat(self, group_id: str, generation: int, member_id: str,
                  instance_id: str | None = None) -> ErrorCode:
        """One Heartbeat: O(1)."""
        g = self.groups.get(group_id)
        if g is None:
            return ErrorCode.unknown_member_id
        error = self._member_error(g, member_id, instance_id)
        if error is not None:
            return error
        if generation != g.generation:
            return ErrorCode.illegal_generation
        self._schedule_session(g, g.members[member_id])
        if g.state == PREPARING:
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def leave(self, group_id: str, member_id: str, instance_id: str | None) -> ErrorCode:
        """One member of a LeaveGroup: by member id, or (v3+) by instance id alone."""
        g = self.groups.get(group_id)
        if g is None:
            return ErrorCode.unknown_member_id
        if not member_id:
            member_id = g.static.get(instance_id, "") if instance_id is not None else ""
            if not member_id:
                return ErrorCode.unknown_member_id
        else:
            error = self._member_error(g, member_id, instance_id)
            if error is not None:
                return error
        self._remove_and_rebalance(g, g.members[member_id])
        return ErrorCode.none

    def commit_error(self, group_id: str, member_id: str, instance_id: str | None,
                     generation: int) -> ErrorCode:
        """Kafka's check of an OffsetCommit against a classic group: O(1). A group with no
        members takes commits with generation -1 (admin clients, consumers that assign
        their own partitions); while it has members, only a current member at the current
        generation commits, also during PreparingRebalance (what a consumer commits when
        its partitions are revoked), not during CompletingRebalance."""
        g = self.groups.get(group_id)
        if g is None:
            return ErrorCode.none if generation < 0 else ErrorCode.illegal_generation
        if generation < 0 and not member_id and instance_id is None:
            return ErrorCode.unknown_member_id
        error = self._member_error(g, member_id, instance_id)
        if error is not None:
            return error
        if generation != g.generation:
            return ErrorCode.illegal_generation
        if g.state == COMPLETING:
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    # ------------------------------------------------------------------ members

    def _member_error(self, g: Group, member_id: str,
                      instance_id: str | None) -> ErrorCode | None:
        """Kafka's validateMember: a known instance id under another member id is fenced."""
        if instance_id is not None:
            known = g.static.get(instance_id)
            if known is None:
                return ErrorCode.unknown_member_id
            return ErrorCode.fenced_instance_id if known != member_id else None
        return None if member_id in g.members else ErrorCode.unknown_member_id

    def _new_member_id(self, client_id: str, instance_id: str | None) -> str:
        return f"{instance_id or client_id or 'member'}-{uuid.uuid4()}"

    def _add(self, g: Group, m: Member) -> None:
        g.members[m.member_id] = m
        g.support.update(name for name, _ in m.protocols)
        if m.instance_id is not None:
            g.static[m.instance_id] = m.member_id
        if g.leader is None:
            g.leader = m.member_id

    def _update(self, g: Group, m: Member, protocols: list[tuple[str, bytes]],
                session_ms: int, rebalance_ms: int) -> None:
        g.support.subtract(name for name, _ in m.protocols)
        m.protocols = list(protocols)
        g.support.update(name for name, _ in m.protocols)
        m.session_ms, m.rebalance_ms = session_ms, rebalance_ms

    def _await_join(self, g: Group, m: Member, reply: Callable[[JoinAnswer], None]) -> None:
        if m.join_reply is not None:  # a second JoinGroup: the first one is answered
            m.join_reply(JoinAnswer(ErrorCode.rebalance_in_progress, member_id=m.member_id))
        else:
            g.awaiting_join += 1
        m.join_reply = reply

    def _remove(self, g: Group, m: Member) -> None:
        self._fail_waiters(g, m, ErrorCode.unknown_member_id)
        del g.members[m.member_id]
        g.support.subtract(name for name, _ in m.protocols)
        g.support = +g.support
        if m.instance_id is not None and g.static.get(m.instance_id) == m.member_id:
            del g.static[m.instance_id]
        if g.leader == m.member_id:
            g.leader = next(iter(g.members), None)
        self.timers.cancel(("session", g.group_id, m.member_id))

    def _remove_and_rebalance(self, g: Group, m: Member) -> None:
        self._remove(g, m)
        if not g.members:  # the last one: no rebalance to run, nothing to keep
            g.state = EMPTY
            self._drop(g)
        elif g.state in (STABLE, COMPLETING):
            self._prepare(g)
        else:
            self._maybe_complete_join(g)

    def _drop(self, g: Group) -> None:
        """A group with no members holds no memory (its offsets live in the engine)."""
        if self.groups.get(g.group_id) is g:
            del self.groups[g.group_id]
        self.timers.cancel(("join", g.group_id))

    def _fail_waiters(self, g: Group, m: Member, error: ErrorCode) -> None:
        if m.join_reply is not None:
            reply, m.join_reply = m.join_reply, None
            g.awaiting_join -= 1
            reply(JoinAnswer(error, member_id=m.member_id))
        self._answer_sync(m, (error, b""))

    def _answer_sync(self, m: Member, answer: SyncAnswer) -> None:
        if m.sync_reply is not None:
            reply, m.sync_reply = m.sync_reply, None
            reply(answer)

    # ------------------------------------------------------------------ sessions

    def _schedule_session(self, g: Group, m: Member) -> None:
        self.timers.schedule(("session", g.group_id, m.member_id), m.session_ms,
                             lambda: self._expire(g, m))

    def _expire(self, g: Group, m: Member) -> None:
        if self.groups.get(g.group_id) is not g or g.members.get(m.member_id) is not m:
            return
        if m.join_reply is not None or m.sync_reply is not None:
            self._schedule_session(g, m)  # waiting in a rebalance, which has its timeout
            return
        self._remove_and_rebalance(g, m)

    def close(self) -> None:
        for g in self.groups.values():
            for m in g.members.values():
                self._fail_waiters(g, m, ErrorCode.coordinator_not_available)
        self.timers.close()
