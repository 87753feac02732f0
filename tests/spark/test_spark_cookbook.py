"""docs/cookbook.md's Spark recipes run as written, in the shared SparkSession (a recipe's
kdelay.spark.session() returns the active one)."""

from __future__ import annotations

import pytest
from conftest import skip_module_without_spark_libraries
from cookbook_recipes import recipes, run

skip_module_without_spark_libraries()

SPARK = [r for r in recipes() if r.spark]


@pytest.mark.spark
@pytest.mark.parametrize("recipe", SPARK, ids=[r.title for r in SPARK])
def test_spark_recipe(recipe, spark, tmp_path) -> None:
    run(recipe, str(tmp_path))
