"""kdelay.testing.seeds: a seed derived from names is the same in every process."""

from __future__ import annotations

import os
import subprocess
import sys

from hypothesis import given
from hypothesis import strategies as st

import kdelay
from kdelay.testing.seeds import stable_seed

PART = st.one_of(st.text(max_size=8), st.integers(-(2 ** 70), 2 ** 70), st.none())


def test_same_in_processes_with_different_hash_salts() -> None:
    code = "from kdelay.testing.seeds import stable_seed; print(stable_seed('append', 3, 'torn'))"
    seen = set()
    for salt in ("0", "1", "random"):
        env = dict(os.environ, PYTHONHASHSEED=salt,
                   PYTHONPATH=os.path.dirname(os.path.dirname(kdelay.__file__)))
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, check=True).stdout
        seen.add(int(out))
    assert seen == {stable_seed("append", 3, "torn")}


@given(st.lists(PART, max_size=4), st.lists(PART, max_size=4))
def test_different_parts_give_different_seeds(a: list, b: list) -> None:
    assert 0 <= stable_seed(*a) < 2 ** 32
    if a != b:
        assert stable_seed(*a) != stable_seed(*b)


def test_parts_keep_their_types_and_boundaries() -> None:
    assert stable_seed("1") != stable_seed(1)
    assert stable_seed("a", "b") != stable_seed("a\x1fb") != stable_seed("ab")
    assert stable_seed(None) != stable_seed("None")
