"""docs/cookbook.md's recipes run as written (the Spark ones: tests/spark/
test_spark_cookbook.py)."""

from __future__ import annotations

import pytest
from cookbook_recipes import recipes, run

PLAIN = [r for r in recipes() if not r.spark]


def test_the_cookbook_has_its_recipes() -> None:
    titles = {r.title for r in recipes()}
    assert len(titles) == 6 and all(r.expected for r in recipes())


@pytest.mark.parametrize("recipe", PLAIN, ids=[r.title for r in PLAIN])
def test_recipe(recipe, tmp_path) -> None:
    run(recipe, str(tmp_path))
