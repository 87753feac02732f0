"""KIP-848's consumer group protocol (`group.protocol=consumer`): the broker assigns.

Members heartbeat (ConsumerGroupHeartbeat) with their subscriptions and the partitions they
own. The group epoch goes up whenever the members, their subscriptions or the subscribed
topics' partition counts change, and the target assignment is then computed again by the
broker (range over each topic's subscribers, members in the order they joined, so that a
new member takes partitions from the end). Each member converges to its target as Kafka's
CurrentAssignmentBuilder does:

1. a member whose epoch is behind the group's first gives up what is no longer its target
   (it keeps its epoch; the partitions wait as "revoking" until its heartbeat no longer lists
   them, or its rebalance timeout fences it);
2. then it moves to the group epoch and receives its target, less any partition another
   member still owns; those follow on later heartbeats, once their owner released them.

So a partition never has two owners, and a partition's committed offset is only written by
its owner. A member that leaves (epoch -1) or misses its session timeout releases everything
at once; a static member leaving with epoch -2 keeps its partitions for its session timeout
and hands them to the member that comes back with its `group.instance.id`.

Deadlines (one per member session, one per revocation) are entries of one `Timers` heap on
an injectable clock (a heartbeat only moves its member's deadline: O(1)); nothing scans the
groups. A heartbeat costs O(the member's partitions + the group's
subscribed topics); a change of membership recomputes the target in O(group's partitions +
members). Call from the broker's event loop only.
"""

from __future__ import annotations

import itertools
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from .timers import Timers

TopicPartition = tuple[str, int]
LEAVE, STATIC_LEAVE = -1, -2
EMPTY, RECONCILING, STABLE = "Empty", "Reconciling", "Stable"
ASSIGNOR = "range"


@dataclass(eq=False)
class ConsumerMember:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    rebalance_ms: int
    topics: tuple[str, ...]
    joined: int  # join order: the range assignor's member order
    epoch: int = 0
    previous_epoch: int = -1
    assigned: set[TopicPartition] = field(default_factory=set)  # may consume now
    revoking: set[TopicPartition] = field(default_factory=set)  # given up, not confirmed
    answered: tuple | None = None  # (epoch, assignment) as last sent to the client
    left: bool = False  # a static member that left with epoch -2, waiting to be replaced


class ConsumerGroup:
    def __init__(self, group_id: str):
        self.group_id = group_id
        self.epoch = 0
        self.target_epoch = 0
        self.members: dict[str, ConsumerMember] = {}
        self.static: dict[str, str] = {}  # group.instance.id -> member id
        self.target: dict[str, set[TopicPartition]] = {}
        self.owners: dict[TopicPartition, str] = {}  # assigned or revoking, by member id
        self.subscribed: Counter[str] = Counter()  # topic -> members subscribing to it
        self.shape: tuple = ()  # the subscribed topics' partition counts of the target

    @property
    def state(self) -> str:
        if not self.members:
            return EMPTY
        settled = all(m.epoch == self.target_epoch and not m.revoking
                      and m.assigned == self.target.get(m.member_id, set())
                      for m in self.members.values())
        return STABLE if settled else RECONCILING


@dataclass
class HeartbeatAnswer:
    error: ErrorCode
    member: ConsumerMember | None = None
    assignment: list[tuple[str, list[int]]] | None = None  # None: unchanged, not sent
    message: str | None = None


def range_assign(members: list[ConsumerMember], partitions: Callable[[str], int]
                 ) -> dict[str, set[TopicPartition]]:
    """Kafka's range assignor over each topic's subscribers, in join order: a topic's
    partitions in contiguous runs, the first members one more where they do not divide."""
    out: dict[str, set[TopicPartition]] = {m.member_id: set() for m in members}
    topics = sorted({t for m in members for t in m.topics})
    for topic in topics:
        subscribers = [m for m in members if topic in m.topics]
        n = partitions(topic)
        per, extra = divmod(n, len(subscribers))
        start = 0
        for i, m in enumerate(subscribers):
            count = per + (1 if i < extra else 0)
            out[m.member_id].update((topic, p) for p in range(start, start + count))
            start += count
    return out


class ConsumerGroups:
    """Every consumer-protocol group of the broker. `partitions(topic)` is a topic's
    partition count (0 for a topic that does not exist)."""

    def __init__(self, partitions: Callable[[str], int], session_timeout_ms: int,
                 heartbeat_interval_ms: int, clock: Callable[[], float] | None = None):
        """`clock()`: now in ms; None: the event loop fires the deadlines (else the caller
        advances its clock and calls `timers.run_due()`)."""
        self.partitions = partitions
        self.session_ms = session_timeout_ms
        self.timers = Timers(clock)
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.groups: dict[str, ConsumerGroup] = {}
        self._joins = itertools.count()

    def has_members(self, group_id: str) -> bool:
        g = self.groups.get(group_id)
        return g is not None and bool(g.members)

    # ------------------------------------------------------------------ heartbeat

    def heartbeat(self, group_id: str, member_id: str, epoch: int, instance_id: str | None,
                  rebalance_ms: int, subscribed: Iterable[str] | None,
                  owned: set[TopicPartition] | None, client_id: str = "",
                  client_host: str = "") -> HeartbeatAnswer:
        """One ConsumerGroupHeartbeat (None fields: unchanged since the last one). A group
        left with no members is dropped: its committed offsets are the engine's."""
        answer = self._heartbeat(group_id, member_id, epoch, instance_id, rebalance_ms,
                                 subscribed, owned, client_id, client_host)
        self._drop_if_empty(group_id)
        return answer

    def _drop_if_empty(self, group_id: str) -> None:
        g = self.groups.get(group_id)
        if g is not None and not g.members:
            del self.groups[group_id]

    def _heartbeat(self, group_id: str, member_id: str, epoch: int, instance_id: str | None,
                   rebalance_ms: int, subscribed: Iterable[str] | None,
                   owned: set[TopicPartition] | None, client_id: str,
                   client_host: str) -> HeartbeatAnswer:
        g = self.groups.get(group_id)
        if g is None:
            g = self.groups[group_id] = ConsumerGroup(group_id)
        if epoch in (LEAVE, STATIC_LEAVE):
            return self._leave(g, member_id, instance_id, epoch)
        member = g.members.get(member_id)
        if epoch == 0:
            if not subscribed and (member is None or not member.topics):
                return HeartbeatAnswer(ErrorCode.invalid_request,
                                       message="a joining member names its topics")
            if member is not None:  # joining again under the same id: start afresh
                self._remove(g, member)
            refused = self._join(g, member_id or str(uuid.uuid4()), instance_id,
                                 rebalance_ms, tuple(sorted(set(subscribed or ()))),
                                 client_id, client_host)
            if isinstance(refused, HeartbeatAnswer):
                return refused
            member = refused
            owned = None
        elif member is None or member.left:
            return HeartbeatAnswer(ErrorCode.unknown_member_id)
        elif epoch != member.epoch and not (
                epoch == member.previous_epoch and owned is not None
                and owned <= member.assigned):  # its answer was lost: it may go on
            return HeartbeatAnswer(ErrorCode.fenced_member_epoch)
        else:
            if rebalance_ms >= 0:
                member.rebalance_ms = rebalance_ms
            if subscribed is not None:
                topics = tuple(sorted(set(subscribed)))
                if topics != member.topics:
                    g.subscribed.subtract(member.topics)
                    g.subscribed.update(topics)
                    member.topics = topics
                    g.epoch += 1
        self._touch(g, member)
        self._refresh_target(g)
        self._reconcile(g, member, owned)
        full = subscribed is not None and owned is not None and rebalance_ms >= 0
        now = (member.epoch, frozenset(member.assigned))
        send = full or now != member.answered or epoch == 0
        member.answered = now
        return HeartbeatAnswer(ErrorCode.none, member,
                               partitions_by_topic(member.assigned) if send else None)

    def _join(self, g: ConsumerGroup, member_id: str, instance_id: str | None,
              rebalance_ms: int, topics: tuple[str, ...], client_id: str,
              client_host: str) -> ConsumerMember | HeartbeatAnswer:
        old = g.members.get(g.static.get(instance_id, "")) if instance_id else None
        if old is not None and not old.left:
            return HeartbeatAnswer(ErrorCode.unreleased_instance_id,
                                   message=f"{instance_id} is in use by another member")
        member = ConsumerMember(member_id, instance_id, client_id, client_host,
                                max(rebalance_ms, 0), topics, next(self._joins))
        if old is not None:  # a static member back: it takes over the old one's place
            self._cancel(g, old)
            del g.members[old.member_id]
            member.joined, member.epoch = old.joined, old.epoch
            member.assigned, member.revoking = old.assigned, old.revoking
            for tp in old.assigned | old.revoking:
                g.owners[tp] = member_id
            g.target[member_id] = g.target.pop(old.member_id, set())
            g.subscribed.subtract(old.topics)
            if old.topics != topics:
                g.epoch += 1
        else:
            g.epoch += 1
        g.members[member_id] = member
        g.subscribed.update(topics)
        if instance_id:
            g.static[instance_id] = member_id
        return member

    def _leave(self, g: ConsumerGroup, member_id: str, instance_id: str | None,
               epoch: int) -> HeartbeatAnswer:
        member = g.members.get(member_id)
        if member is None:
            return HeartbeatAnswer(ErrorCode.unknown_member_id)
        if epoch == STATIC_LEAVE and member.instance_id:
            member.left = True  # its partitions wait for it until its session times out
            return HeartbeatAnswer(ErrorCode.none, member)
        self._remove(g, member)
        return HeartbeatAnswer(ErrorCode.none, member)

    # ------------------------------------------------------------------ assignment

    def _refresh_target(self, g: ConsumerGroup) -> None:
        shape = tuple((t, self.partitions(t)) for t in sorted(+g.subscribed))
        if shape != g.shape:
            g.shape = shape
            g.epoch += 1
        if g.target_epoch == g.epoch:
            return
        counts = dict(shape)
        members = sorted(g.members.values(), key=lambda m: m.joined)
        g.target = range_assign(members, counts.__getitem__)
        g.target_epoch = g.epoch

    def _reconcile(self, g: ConsumerGroup, m: ConsumerMember,
                   owned: set[TopicPartition] | None) -> None:
        target = g.target.get(m.member_id, set())
        if owned is not None and m.revoking:
            self._release(g, m, m.revoking - owned)  # what it no longer lists is given up
        if m.epoch != g.target_epoch:
            extra = m.assigned - target
            if extra:  # step 1: revoke first, keeping the epoch
                m.assigned -= extra
                m.revoking |= extra
                self._arm_revocation(g, m)
            if m.revoking:
                return
            m.previous_epoch, m.epoch = m.epoch, g.target_epoch
        for tp in target - m.assigned:  # step 2: take what is free
            if g.owners.setdefault(tp, m.member_id) == m.member_id:
                m.assigned.add(tp)

    def _release(self, g: ConsumerGroup, m: ConsumerMember,
                 partitions: set[TopicPartition]) -> None:
        for tp in partitions:
            if g.owners.get(tp) == m.member_id:
                del g.owners[tp]
        m.revoking -= partitions
        m.assigned -= partitions
        if not m.revoking:
            self.timers.cancel(("revoke", g.group_id, m.member_id))

    def _arm_revocation(self, g: ConsumerGroup, m: ConsumerMember) -> None:
        """A member that does not give up its partitions in its rebalance timeout is fenced
        (Kafka's rule), so that the others are not kept waiting for ever."""
        key = ("revoke", g.group_id, m.member_id)
        if self.timers.deadline(key) is None:
            self.timers.schedule(key, max(m.rebalance_ms, 1), lambda: self._expire(g, m))

    # ------------------------------------------------------------------ departures

    def _remove(self, g: ConsumerGroup, m: ConsumerMember) -> None:
        self._cancel(g, m)
        self._release(g, m, m.assigned | m.revoking)
        g.members.pop(m.member_id, None)
        g.target.pop(m.member_id, None)
        g.subscribed.subtract(m.topics)
        if m.instance_id and g.static.get(m.instance_id) == m.member_id:
            del g.static[m.instance_id]
        g.epoch += 1

    def _cancel(self, g: ConsumerGroup, m: ConsumerMember) -> None:
        self.timers.cancel(("session", g.group_id, m.member_id))
        self.timers.cancel(("revoke", g.group_id, m.member_id))

    def _touch(self, g: ConsumerGroup, m: ConsumerMember) -> None:
        self.timers.schedule(("session", g.group_id, m.member_id), self.session_ms,
                             lambda: self._expire(g, m))

    def _expire(self, g: ConsumerGroup, m: ConsumerMember) -> None:
        if g.members.get(m.member_id) is m:
            self._remove(g, m)
            if self.groups.get(g.group_id) is g:
                self._drop_if_empty(g.group_id)

    # ------------------------------------------------------------------ commits

    def commit_error(self, group_id: str, member_id: str, epoch: int,
                     partitions: Iterable[TopicPartition]) -> ErrorCode | None:
        """Kafka's check of an OffsetCommit against a consumer-protocol group (None: the
        group is not one). A commit at the member's epoch is taken; one at an older epoch
        (a commit that crossed a heartbeat answer) only for partitions it still owns."""
        g = self.groups.get(group_id)
        if g is None or not g.members:
            return None
        member = g.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        if epoch == member.epoch:
            return ErrorCode.none
        if epoch < member.epoch and set(partitions) <= member.assigned | member.revoking:
            return ErrorCode.none
        return ErrorCode.stale_member_epoch

    def fetch_error(self, group_id: str, member_id: str | None, epoch: int) -> ErrorCode:
        """Kafka's check of an OffsetFetch (v9+) naming a member: O(1). Without a member
        (null id, epoch -1: admin clients, classic consumers) it is taken; a member of a
        KIP-848 group must be known (UNKNOWN_MEMBER_ID) and at its epoch
        (STALE_MEMBER_EPOCH)."""
        if member_id is None and epoch < 0:
            return ErrorCode.none
        g = self.groups.get(group_id)
        if g is None:  # not a KIP-848 group (or one with no members): nothing to check
            return ErrorCode.none
        member = g.members.get(member_id or "")
        if member is None or member.left:
            return ErrorCode.unknown_member_id
        return ErrorCode.none if epoch == member.epoch else ErrorCode.stale_member_epoch

    def close(self) -> None:
        self.timers.close()


def partitions_by_topic(partitions: Iterable[TopicPartition]) -> list[tuple[str, list[int]]]:
    out: dict[str, list[int]] = {}
    for t, p in sorted(partitions):
        out.setdefault(t, []).append(p)
    return list(out.items())
