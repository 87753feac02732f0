"""kdelay.groups.queue.queue_groups: the live queue groups a Log holds (members counted, the
last one closes the state, every append notifies them) and group_counts, the one rule for a
group's counts, live or from its files."""

from __future__ import annotations

from kdelay.groups.queue import state_store
from kdelay.groups.queue.queue_groups import QueueGroups, group_counts
from kdelay.groups.queue.state_store import ACK, ACQUIRE, RELEASE, StateStore
from kdelay.records import AppendResult, DeliveryKey

NOW = 1_000


class FakeGroup:
    def __init__(self, counts: dict | None = None) -> None:
        self.closed = False
        self.closes = 0
        self.notified = 0
        self._counts = counts or {}

    def counts(self, now: int) -> dict:
        return dict(self._counts)

    def notify(self, due_in: int = 0) -> None:
        self.notified += 1
        self.due_in = due_in

    def close(self) -> None:
        self.closes += 1
        self.closed = True


def test_members_share_one_state_and_the_last_to_leave_closes_it(tmp_path):
    listeners = []
    groups = QueueGroups(str(tmp_path), listeners.append)
    made = []

    def open_group():
        made.append(FakeGroup())
        return made[-1]

    a = groups.attach("g", open_group)
    b = groups.attach("g", open_group)
    other = groups.attach("h", open_group)
    assert a is b and len(made) == 2 and len(listeners) == 1  # one listener per Log
    listeners[0](AppendResult(0, 0, NOW + 60, NOW))  # an append notifies every live group
    assert (a.notified, other.notified) == (1, 1)
    assert a.due_in == other.due_in == 60  # of when it comes due
    groups.detach("g", a)
    assert a.closes == 0 and groups.live() == {"g": a, "h": other}
    groups.detach("g", a)
    assert a.closes == 1 and groups.live() == {"h": other}
    c = groups.attach("g", open_group)  # a new first member opens it afresh
    assert c is not a and len(made) == 3


def test_a_state_closed_under_its_members_is_replaced(tmp_path):
    groups = QueueGroups(str(tmp_path), lambda listener: None)
    old = groups.attach("g", FakeGroup)
    old.closed = True  # e.g. abandoned by a simulated crash
    new = groups.attach("g", FakeGroup)
    assert new is not old
    groups.detach("g", old)  # a member of the old state leaving changes nothing
    assert groups.live() == {"g": new} and new.closes == 0


def write_group(path: str, group: str) -> None:
    """Offsets 0..3 acquired, 0 acked, 1 released at NOW + 50, 2 released at NOW; 3 held."""
    store = StateStore(path, group)
    store.open()
    cursor = DeliveryKey(NOW - 10, 3)
    store.append([(ACQUIRE, state_store.acquire_payload(cursor, [(o, 1, NOW - 10)
                                                                for o in range(4)]))],
                 sync=True)
    store.append([(ACK, state_store.offsets_payload([0]))], sync=True)
    store.append([(RELEASE, state_store.release_payload([(1, NOW + 50), (2, NOW)]))],
                 sync=True)
    store.close()


def test_group_counts_from_files_live_state_and_damage(tmp_path):
    path = str(tmp_path)
    write_group(path, "files")
    write_group(path, "damaged")
    snap, _ = state_store.paths(path, "damaged")
    with open(snap, "r+b") as f:
        f.seek(10)
        f.write(b"\xff")
    live = FakeGroup({"acquired": 7, "available": 1, "delayed": 0, "acked": 0,
                      "rejected": 0, "in_flight": 8, "cursor": None})
    asked = []

    def due_after(key):
        asked.append(key)
        return 100

    out = group_counts(path, NOW, due_after, {"live": live})
    assert sorted(out) == ["damaged", "files", "live"]
    assert "error" in out["damaged"] and set(out["damaged"]) == {"error"}
    assert out["files"] == {"acquired": 1, "available": 1 + 100, "delayed": 1, "acked": 1,
                            "rejected": 0, "in_flight": 3,
                            "cursor": DeliveryKey(NOW - 10, 3)}
    assert out["live"]["acquired"] == 7 and out["live"]["available"] == 1 + 100
    assert len(asked) == 2 and DeliveryKey(NOW - 10, 3) in asked and None in asked
    # the live state wins over the files of the same group
    write_group(path, "live")
    assert group_counts(path, NOW, due_after, {"live": live})["live"]["acquired"] == 7
