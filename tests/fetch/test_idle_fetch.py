"""The idle poll: a fetch that passes back the `next` of an empty page while nothing after it
can be due yet is answered from the quiet spell that page began (the due-order reader's QuietGate),
without planning or merging, and gives exactly what a planned fetch would."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kdelay import DeliveryKey, Log, Record

T0 = 1_700_000_000_000


def test_the_quiet_gate_holds_only_the_empty_page_s_own_cursor_before_the_spell_ends(tmp_path):
    t = [T0]
    with Log.open(tmp_path, clock=lambda: t[0]) as log:
        reader = log._due_order
        assert not reader.gate.holds(None, T0)  # no empty page yet
        log.append([Record(b"late")], deliver_after=T0 + 100)
        page = log.fetch(None)
        assert page.records == [] and page.next is None
        assert reader.gate.holds(None, T0 + 99)  # that page's next
        assert not reader.gate.holds(None, T0 + 100)  # the record is due then
        log.append([Record(b"sooner")], deliver_after=T0 + 10)  # the spell ends sooner
        assert reader.gate.holds(None, T0 + 9)
        assert not reader.gate.holds(None, T0 + 10)
        t[0] = T0 + 10
        page = log.fetch(None)
        assert [r.value for r in page.records] == [b"sooner"]
        empty = log.fetch(page.next)
        assert empty.records == [] and empty.next is page.next
        assert reader.gate.holds(page.next, T0 + 99)
        # the facade's lock-free answer takes only the page's own cursor object; an equal
        # one made anew is planned as usual
        quiet = reader.gate.answer(page.next, 500, 1 << 20, 0, log._clock)
        assert quiet is not None and quiet.records == [] and quiet.next is page.next
        assert reader.gate.answer(DeliveryKey(*page.next), 500, 1 << 20, 0, log._clock) is None


OPS = st.lists(st.one_of(
    st.tuples(st.just("append"), st.integers(0, 300)),
    st.tuples(st.just("tick"), st.integers(0, 120)),
    st.tuples(st.just("fetch"), st.integers(1, 4))), max_size=80)


@settings(max_examples=80, deadline=None)
@given(OPS)
def test_idle_polls_following_next_give_what_is_due(tmp_path_factory, ops):
    """A consumer following `next` (its idle polls answered from the quiet spell) gets
    exactly the records due after its cursor, as a model of the log says."""
    t = [T0]
    cursor = None
    keys: list[tuple[int, int]] = []
    with Log.open(tmp_path_factory.mktemp("idle"), clock=lambda: t[0]) as log:
        for op, arg in ops:
            if op == "append":
                res = log.append([Record(b"v")], deliver_after=t[0] + arg)
                keys.append((res.deliver_after, res.base_offset))
            elif op == "tick":
                t[0] += arg
            else:
                page = log.fetch(cursor, max_records=arg)
                due = sorted(k for k in keys if k[0] <= t[0] and (cursor is None or k > cursor))
                assert [r.delivery_key for r in page.records] == due[:arg]
                assert page.next == (due[:arg][-1] if due else cursor)
                if not due:
                    assert page.next is cursor
                cursor = page.next
