"""docs/cookbook.md's recipes: each ```python block, with the ```text block after it (what
it must print). Blocks marked ```python spark need a SparkSession."""

from __future__ import annotations

import contextlib
import io
import os
import re
from typing import NamedTuple

COOKBOOK = os.path.join(os.path.dirname(__file__), os.pardir, "docs", "cookbook.md")
_BLOCK = re.compile(r"^```(python(?: spark)?)\n(.*?)^```\n(?:\s*^```text\n(.*?)^```\n)?",
                    re.M | re.S)


class Recipe(NamedTuple):
    title: str
    spark: bool
    code: str
    expected: str | None


def recipes() -> list[Recipe]:
    with open(COOKBOOK, encoding="utf-8") as f:
        text = f.read()
    out = []
    for m in _BLOCK.finditer(text):
        titles = re.findall(r"^## (.+)$", text[:m.start()], re.M)
        out.append(Recipe(titles[-1] if titles else "", m.group(1).endswith("spark"),
                          m.group(2), m.group(3)))
    return out


def run(recipe: Recipe, directory: str) -> None:
    """Run the recipe in `directory` (as a script: a fresh namespace) and check what it
    prints against its text block."""
    here = os.getcwd()
    out = io.StringIO()
    os.chdir(directory)
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(recipe.code, f"cookbook: {recipe.title}", "exec"),
                 {"__name__": "__main__"})
    finally:
        os.chdir(here)
    if recipe.expected is not None:
        assert out.getvalue() == recipe.expected, out.getvalue()
