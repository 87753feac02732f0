"""kdelay.settle: a check of directories that move while it runs."""

from __future__ import annotations

import os

from kdelay.settle import in_motion, settle


def _touch(path: str, data: bytes = b"x") -> None:
    with open(path, "ab") as f:
        f.write(data)


def test_a_still_directory_is_checked_once(tmp_path) -> None:
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    os.mkdir(a), os.mkdir(b)
    runs: list[bool] = []
    result, counted = settle([a, b], lambda first: runs.append(first) or {"damage"},
                             lambda r: r)
    assert runs == [True] and counted == {"damage"} == result


def test_only_what_every_run_finds_counts_while_any_directory_moves(tmp_path) -> None:
    """The second directory changes during every run: a problem seen once is motion, one
    seen every time is damage."""
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    os.mkdir(a), os.mkdir(b)
    runs: list[bool] = []

    def run(first: bool) -> set[str]:
        runs.append(first)
        _touch(os.path.join(b, "grows"))
        return {"damage", f"seen in run {len(runs)}"}

    result, counted = settle([a, b], run, lambda r: r)
    assert runs == [True, False, False]
    assert counted == {"damage"} and result == {"damage", "seen in run 3"}
    # one directory given as a string is watched the same way
    runs.clear()
    _, counted = settle(b, run, lambda r: r, attempts=2)
    assert runs == [True, False] and counted == {"damage"}


def test_a_run_that_finds_nothing_is_the_answer(tmp_path) -> None:
    a = str(tmp_path / "a")
    os.mkdir(a)
    runs: list[bool] = []

    def run(first: bool) -> set[str]:
        runs.append(first)
        _touch(os.path.join(a, "grows"))
        return set()

    assert settle(a, run, lambda r: r) == (set(), set()) and runs == [True]


def test_in_motion_says_so() -> None:
    assert in_motion("offset gap") == "in motion (changed while checked; not seen again): " \
        "offset gap"
