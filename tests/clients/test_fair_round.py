"""fair_round (kdelay.clients.topic): one pass of a multi-partition poll shares the budget
equally and asks the partitions that filled their share again."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kdelay.clients.topic import fair_round


def test_equal_shares_then_the_rest_from_partitions_that_still_have_records():
    avail = {0: list(range(10)), 1: [100], 2: list(range(200, 210))}
    asked = []

    def take(i, n):
        asked.append((i, n))
        got, avail[i] = avail[i][:n], avail[i][n:]
        return got

    out = fair_round([1, 2, 0], 9, take)
    assert asked[:3] == [(1, 3), (2, 3), (0, 3)]
    assert len(out) == 9 and out[:7] == [100, 200, 201, 202, 0, 1, 2]


@given(st.lists(st.integers(0, 20), min_size=1, max_size=6), st.integers(1, 50))
def test_takes_what_is_there_up_to_the_budget(sizes, budget):
    left = list(sizes)

    def take(i, n):
        k = min(n, left[i])
        left[i] -= k
        return [i] * k

    out = fair_round(list(range(len(sizes))), budget, take)
    assert len(out) == min(budget, sum(sizes))
