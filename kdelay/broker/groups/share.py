"""Share groups (KIP-932) over kdelay's queue groups: the share group `g` over the wire and
`QueueConsumer(topic, "g")` in process are one group state.

A member (ShareGroupHeartbeat) is assigned every partition of the topics it subscribes to
(queues: members share partitions); for each topic it holds one `QueueConsumer` of the group,
with the group's configs (lock duration, delivery limit, dead-letter topic, `latest` or
`earliest` start, and the delayed release, also for locks that run out). A share session
(ShareFetch epoch 0) names partitions; later requests name none and use the session's.
Acknowledgements (ACCEPT, RELEASE, REJECT) are the queue's ack, release (with the group's
backoff for the record's delivery count) and reject, durable when answered. A member that
leaves or misses its session timeout closes its consumers, which releases what it holds.

Timers are the loop's `call_later`, one per member: nothing scans the members.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from ...clients.queue.consumer import QueueConsumer
from ...errors import KdelayError
from ...groups.queue.group import QueueRecord
from .share_configs import GroupConfigs, GroupConfigStore

if TYPE_CHECKING:
    from ..topics import TopicRegistry

ACCEPT, RELEASE, REJECT = 1, 2, 3
LEAVE_GRACE_S = 5.0  # how long a member that left may still acknowledge (its session)


@dataclass(eq=False)
class ShareMember:
    member_id: str
    epoch: int
    topics: list[str]
    consumers: dict[str, QueueConsumer] = field(default_factory=dict)
    held: dict[tuple[str, int, int], QueueRecord] = field(default_factory=dict)
    session: set[tuple[str, int]] = field(default_factory=set)
    session_open: bool = False  # a share session (ShareFetch epoch 0) not yet ended
    timer: asyncio.TimerHandle | None = None


class ShareGroups:
    def __init__(self, topics: TopicRegistry, configs: GroupConfigStore,
                 session_timeout_ms: int, heartbeat_interval_ms: int):
        self.topics = topics
        self.configs = configs
        self.session_s = session_timeout_ms / 1000
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.groups: dict[str, dict[str, ShareMember]] = {}
        self.leaving: dict[str, dict[str, ShareMember]] = {}  # left, session still open

    # ------------------------------------------------------------------ membership

    def heartbeat(self, group: str, member_id: str, epoch: int,
                  subscribed: list[str] | None) -> tuple[ErrorCode, ShareMember | None]:
        members = self.groups.setdefault(group, {})
        if epoch == -1:  # leaving: its share session may still acknowledge what it holds
            member = members.pop(member_id, None)
            if member is not None and member.session_open:
                self.leaving.setdefault(group, {})[member.member_id] = member
                self._arm(member, LEAVE_GRACE_S, self._expire_leaving, group)
            elif member is not None:
                self._close(member)
            return ErrorCode.none, None
        member = members.get(member_id)
        if member is None:
            if epoch != 0:
                return ErrorCode.unknown_member_id, None
            member = ShareMember(member_id or str(uuid.uuid4()), 1, list(subscribed or []))
            members[member.member_id] = member
        elif subscribed is not None and sorted(subscribed) != sorted(member.topics):
            member.topics = list(subscribed)
            member.epoch += 1
        self._touch(group, member)
        return ErrorCode.none, member

    def assignment(self, member: ShareMember) -> list[tuple[str, list[int]]]:
        """Every partition of the member's topics (those that exist)."""
        out = []
        for name in member.topics:
            topic = self.topics.get(name)
            if topic is not None:
                out.append((name, list(range(topic.partitions))))
        return out

    def member(self, group: str, member_id: str) -> ShareMember | None:
        """A member, or one that has left whose share session is still open."""
        found = self.groups.get(group, {}).get(member_id)
        if found is not None:
            self._touch(group, found)
            return found
        return self.leaving.get(group, {}).get(member_id)

    def session_closed(self, group: str, member: ShareMember) -> None:
        """The member's share session ended (epoch -1): a member that left is gone now."""
        member.session_open = False
        if self.leaving.get(group, {}).pop(member.member_id, None) is not None:
            self._close(member)

    def _touch(self, group: str, member: ShareMember) -> None:
        self._arm(member, self.session_s, self._expire, group)

    def _arm(self, member: ShareMember, seconds: float, then, group: str) -> None:
        if member.timer is not None:
            member.timer.cancel()
        member.timer = asyncio.get_running_loop().call_later(seconds, then, group, member)

    def _expire_leaving(self, group: str, member: ShareMember) -> None:
        self.session_closed(group, member)

    def _expire(self, group: str, member: ShareMember) -> None:
        members = self.groups.get(group, {})
        if members.get(member.member_id) is member:
            del members[member.member_id]
            self._close(member)

    def _close(self, member: ShareMember) -> None:
        """Leave: every record the member holds is released (QueueConsumer.close)."""
        if member.timer is not None:
            member.timer.cancel()
        for qc in member.consumers.values():
            # its topic may have closed first (deleted or reopened): nothing is held then
            with contextlib.suppress(KdelayError):
                qc.close()
        member.consumers.clear()
        member.held.clear()

    def forget_topic(self, name: str, event: str) -> None:
        """A topic reopened or deleted: consumers of it are closed (made again on use)."""
        for members in self.groups.values():
            for m in members.values():
                qc = m.consumers.pop(name, None)
                if qc is not None:
                    with contextlib.suppress(KdelayError):
                        qc.close()
                    m.held = {k: r for k, r in m.held.items() if k[0] != name}

    def consumer(self, group: str, member: ShareMember, topic_name: str) -> QueueConsumer:
        qc = member.consumers.get(topic_name)
        if qc is None:
            topic = self.topics.get(topic_name)
            if topic is None:
                raise KeyError(topic_name)
            cfg = self.configs.configs(group)
            qc = QueueConsumer(topic, group, lock_ms=cfg.lock_ms,
                               max_delivery_count=cfg.delivery_limit,
                               dead_letter=self._dead_letter(cfg), start=cfg.auto_reset,
                               expired_lock_delay=cfg.release_delay)
            member.consumers[topic_name] = qc
        return qc

    def _dead_letter(self, cfg: GroupConfigs):
        if not cfg.dead_letter_topic:
            return None
        topic = self.topics.get(cfg.dead_letter_topic)
        if topic is None:
            topic = self.topics.create(cfg.dead_letter_topic, 1)
        return topic

    # ------------------------------------------------------------------ records

    def acquire(self, group: str, member: ShareMember, max_records: int
                ) -> dict[tuple[str, int], list[QueueRecord]]:
        """Acquire up to `max_records` due records for the member, over the session's
        partitions' topics; by (topic, partition)."""
        out: dict[tuple[str, int], list[QueueRecord]] = {}
        wanted = {t for t, _ in member.session}
        for name in sorted(wanted):
            if max_records <= 0:
                break
            try:
                qc = self.consumer(group, member, name)
            except KeyError:
                continue
            for rec in qc.poll(max_records=max_records):
                p = rec.partition
                assert p is not None  # (a Topic's records carry their partition)
                member.held[(name, p, rec.offset)] = rec
                out.setdefault((name, p), []).append(rec)
                max_records -= 1
        return out

    def acknowledge(self, group: str, member: ShareMember, topic: str, partition: int,
                    batches: list[tuple[int, int, list[int]]]) -> ErrorCode:
        """Apply one partition's acknowledgement batches ((first, last, types): one type
        for the whole range, or one per offset; 0 is a gap). All or nothing: a record not
        held (or whose lock ran out) refuses the partition's acks with INVALID_RECORD_STATE."""
        by_kind: dict[int, list[QueueRecord]] = {ACCEPT: [], RELEASE: [], REJECT: []}
        for first, last, types in batches:
            for i, offset in enumerate(range(first, last + 1)):
                kind = types[0] if len(types) == 1 else types[i] if i < len(types) else 0
                if kind == 0:
                    continue
                rec = member.held.get((topic, partition, offset))
                if rec is None or kind not in by_kind:
                    return ErrorCode.invalid_record_state
                by_kind[kind].append(rec)
        qc = member.consumers.get(topic)
        if qc is None:
            return ErrorCode.invalid_record_state if any(by_kind.values()) else ErrorCode.none
        cfg = self.configs.configs(group)
        try:
            if by_kind[ACCEPT]:
                qc.ack(by_kind[ACCEPT])
            if by_kind[REJECT]:
                qc.reject(by_kind[REJECT])
            by_delay: dict[int, list[QueueRecord]] = {}
            for rec in by_kind[RELEASE]:
                by_delay.setdefault(cfg.release_delay(rec.delivery_count), []).append(rec)
            for delay, recs in by_delay.items():
                qc.release(recs, delay_ms=delay)
        except KdelayError:
            return ErrorCode.invalid_record_state
        finally:
            for recs in by_kind.values():
                for rec in recs:
                    member.held.pop((topic, partition, rec.offset), None)
        return ErrorCode.none

    def close(self) -> None:
        for members in [*self.groups.values(), *self.leaving.values()]:
            for m in members.values():
                self._close(m)
        self.groups.clear()
        self.leaving.clear()
