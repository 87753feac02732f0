"""The classic group coordinator (groups/coordinator.py) driven by hypothesis through joins
(dynamic and static members, restarts under a new member id), syncs, heartbeats, leaves,
commits with right and wrong generations and member ids, and time passing on an injected
clock (sessions and rebalance timeouts run out; no sleeps). After every step:

- a Stable group's members hold exactly what the leader's SyncGroup gave their client
  (a static member back without a rebalance keeps its assignment), and every SyncGroup
  answered without error returns that;
- the generation only moves by one, when a rebalance completes: every member then waiting
  in a JoinGroup is answered with it;
- a commit is taken only from a current member at the current generation, outside
  CompletingRebalance (errors as Kafka gives them: UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID,
  ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS), and with generation -1 only by a group with no
  members;
- a member whose session ran out while it waited for nothing is gone, and a group with no
  members holds nothing."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from kio.schema.errors import ErrorCode

from kdelay.broker.groups.coordinator import COMPLETING, STABLE, GroupCoordinator

SESSION_MS, REBALANCE_MS, INITIAL_DELAY_MS = 1_000, 600, 100
SLOTS = 4  # clients 0 and 1 are static (group.instance.id i0, i1), 2 and 3 dynamic
slots = st.integers(0, SLOTS - 1)


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


class Client:
    """What one consumer knows: its member id, generation, and requests in flight."""

    def __init__(self, slot: int):
        self.slot = slot
        self.instance = f"i{slot}" if slot < 2 else None
        self.member_id = ""
        self.generation = -1
        self.members: list = []  # the leader's member list of its last join
        self.joining: list | None = None
        self.syncing: list | None = None
        self.old_ids: list[str] = []


class CoordinatorModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = Clock()
        self.c = GroupCoordinator(INITIAL_DELAY_MS, clock=self.clock)
        self.clients = [Client(i) for i in range(SLOTS)]
        self.slot_of: dict[str, int] = {}  # every member id handed out -> its client
        self.plans: dict[int, dict[int, bytes]] = {}  # generation -> slot -> assignment
        self.touched: dict[str, float] = {}  # member id -> last time its session restarted
        self.generation = 0  # as last seen
        self.plan_serial = 0

    # ---------------------------------------------------------------- helpers

    def group(self):
        return self.c.groups.get("g")

    def after_join_answers(self) -> None:
        """Take the answers that arrived; a member's session restarts when it is answered
        (it stops waiting)."""
        for cl in self.clients:
            if cl.joining:
                (a,) = cl.joining
                cl.joining = None
                if a.error == ErrorCode.none:
                    cl.member_id, cl.generation, cl.members = a.member_id, a.generation, \
                        a.members
                    self.slot_of[a.member_id] = cl.slot
                    g = self.group()
                    assert g is not None and a.generation == g.generation
                elif a.error in (ErrorCode.unknown_member_id, ErrorCode.fenced_instance_id):
                    cl.member_id, cl.generation = "", -1
                else:
                    assert a.error == ErrorCode.rebalance_in_progress, a.error
                self.touched[cl.member_id] = self.clock.now
            if cl.syncing:
                ((error, assignment),) = cl.syncing
                cl.syncing = None
                if error == ErrorCode.none:
                    assert assignment == self.plans[cl.generation].get(cl.slot, b"")
                self.touched[cl.member_id] = self.clock.now

    def step_done(self) -> None:
        """The generation moves by one, when a rebalance completes, which answers every
        member waiting in a JoinGroup (and restarts every member's session)."""
        g = self.group()
        if g is None:
            self.generation = 0
            self.plans.clear()  # a group made again starts from generation 0
        else:
            assert g.generation - self.generation in (0, 1), (self.generation, g.generation)
            if g.generation != self.generation and g.state == COMPLETING:
                assert all(cl.joining != [] for cl in self.clients), "a join not answered"
                for mid in g.members:
                    self.touched[mid] = self.clock.now
            self.generation = g.generation
        self.after_join_answers()

    # ---------------------------------------------------------------- rules

    @rule(slot=slots, restart=st.booleans())
    def join(self, slot: int, restart: bool) -> None:
        cl = self.clients[slot]
        if cl.joining is not None:
            return
        if restart and cl.member_id:  # a restarted process: no member id
            cl.old_ids.append(cl.member_id)
            cl.member_id = ""
        cl.joining = []
        self.c.join("g", cl.member_id, cl.instance, "consumer",
                    [("range", b"sub")], SESSION_MS, REBALANCE_MS, f"c{slot}", "h",
                    cl.joining.append)
        self.step_done()

    @rule(slot=slots, data=st.data())
    def sync(self, slot: int, data) -> None:
        cl = self.clients[slot]
        if cl.syncing is not None or not cl.member_id:
            return
        plan: dict[str, bytes] = {}
        if cl.members:  # the leader: a fresh plan for this generation's members
            for mid, _, _ in cl.members:
                if not data.draw(st.booleans()):  # now and then a member left out
                    self.plan_serial += 1
                    plan[mid] = b"p%d" % self.plan_serial
        g = self.group()
        leader_syncs = (g is not None and g.state == COMPLETING and
                        g.generation == cl.generation and g.leader == cl.member_id)
        if leader_syncs:
            self.plans[cl.generation] = {self.slot_of[mid]: a for mid, a in plan.items()}
        cl.syncing = []
        self.c.sync("g", cl.generation, cl.member_id, cl.instance, plan, cl.syncing.append)
        self.step_done()

    @rule(data=st.data())
    def leader_syncs(self, data) -> None:
        """The leader's SyncGroup, which ends a rebalance (a rule of its own, so that
        Stable groups are common)."""
        g = self.group()
        if g is not None and g.state == COMPLETING:
            leader = [cl.slot for cl in self.clients if cl.member_id == g.leader]
            if leader:
                self.sync(leader[0], data)

    @rule(data=st.data(), who=st.sets(slots, min_size=1))
    def settle(self, data, who: set[int]) -> None:
        """A round as clients run it when nothing goes wrong: these clients join (again),
        the initial delay passes, the leader and then the others sync (so that Stable
        groups, and static members coming back to them, are common)."""
        for slot in sorted(who):
            self.join(slot, restart=False)
        self.tick(INITIAL_DELAY_MS)
        self.leader_syncs(data)
        for slot in sorted(who):
            self.sync(slot, data)

    @rule(slot=slots)
    def heartbeat(self, slot: int) -> None:
        cl = self.clients[slot]
        if not cl.member_id:
            return
        error = self.c.heartbeat("g", cl.generation, cl.member_id, cl.instance)
        expected = self.expected_error(cl.member_id, cl.instance, cl.generation,
                                       heartbeat=True)
        assert error == expected, (error, expected)
        if error in (ErrorCode.none, ErrorCode.rebalance_in_progress):
            self.touched[cl.member_id] = self.clock.now
        if error in (ErrorCode.unknown_member_id, ErrorCode.fenced_instance_id):
            cl.member_id = ""
        self.step_done()

    @rule(slot=slots, by_instance=st.booleans())
    def leave(self, slot: int, by_instance: bool) -> None:
        cl = self.clients[slot]
        if by_instance and cl.instance is not None:
            g = self.group()
            known = g is not None and cl.instance in g.static
            error = self.c.leave("g", "", cl.instance)
            assert error == (ErrorCode.none if known else ErrorCode.unknown_member_id)
        elif cl.member_id:
            expected = self.expected_error(cl.member_id, cl.instance, None)
            assert self.c.leave("g", cl.member_id, cl.instance) == expected
        else:
            return
        cl.member_id, cl.generation = "", -1
        self.step_done()

    @rule(slot=slots, generation_off=st.sampled_from([0, 0, -1, 1]),
          who=st.sampled_from(["own", "own", "old", "none", "stranger"]))
    def commit(self, slot: int, generation_off: int, who: str) -> None:
        cl = self.clients[slot]
        member_id = {"own": cl.member_id, "old": cl.old_ids[-1] if cl.old_ids else "gone",
                     "none": "", "stranger": "stranger"}[who]
        instance = cl.instance if who != "none" else None
        generation = cl.generation + generation_off if who != "none" else -1
        error = self.c.commit_error("g", member_id, instance, generation)
        expected = self.expected_error(member_id, instance, generation, commit=True)
        assert error == expected, (who, error, expected)
        self.step_done()

    @rule(ms=st.sampled_from([10, 120, 400, 700, 1_100]))
    def tick(self, ms: int) -> None:
        self.clock.now += ms
        self.c.run_due()
        self.step_done()

    # ---------------------------------------------------------------- oracle

    def expected_error(self, member_id: str, instance: str | None, generation: int | None,
                       heartbeat: bool = False, commit: bool = False) -> ErrorCode:
        """Kafka's answer from what the group is now (its members, generation, state)."""
        g = self.group()
        if g is None:
            if commit:
                return ErrorCode.none if generation is not None and generation < 0 \
                    else ErrorCode.illegal_generation
            return ErrorCode.unknown_member_id
        if commit and generation is not None and generation < 0 and not member_id \
                and instance is None:
            return ErrorCode.unknown_member_id
        if instance is not None:
            owner = g.static.get(instance)
            if owner is None:
                return ErrorCode.unknown_member_id
            if owner != member_id:
                return ErrorCode.fenced_instance_id
        elif member_id not in g.members:
            return ErrorCode.unknown_member_id
        if generation is None:
            return ErrorCode.none
        if generation != g.generation:
            return ErrorCode.illegal_generation
        if heartbeat and g.state == "PreparingRebalance":
            return ErrorCode.rebalance_in_progress
        if commit and g.state == COMPLETING:
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    # ---------------------------------------------------------------- invariants

    @invariant()
    def stable_members_hold_the_leaders_plan(self) -> None:
        g = self.group()
        if g is None or g.state != STABLE:
            return
        plan = self.plans[g.generation]
        for mid, m in g.members.items():
            assert m.assignment == plan.get(self.slot_of[mid], b""), mid

    @invariant()
    def expired_members_are_gone(self) -> None:
        g = self.group()
        if g is None:
            return
        for mid, m in g.members.items():
            if m.join_reply is None and m.sync_reply is None:
                assert self.clock.now - self.touched[mid] <= SESSION_MS, mid

    @invariant()
    def an_empty_group_holds_nothing(self) -> None:
        g = self.group()
        assert g is None or g.members
        if g is None:
            assert len(self.c.timers) == 0
        else:
            assert g.awaiting_join == sum(m.join_reply is not None for m in g.members.values())
            assert set(g.static.values()) <= set(g.members)


TestCoordinatorModel = CoordinatorModel.TestCase
TestCoordinatorModel.settings = settings(max_examples=100, stateful_step_count=40,
                                         deadline=None)
