"""What an installed kdelay needs besides its Python modules is packaged: the `py.typed`
marker (PEP 561), and every other data file a module reads at run time."""

from __future__ import annotations

import subprocess
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# compiled into extension modules when the package is built, not read at run time
BUILD_SOURCES = (".py",)  # the modules themselves; everything else is package data


def _package_data() -> dict[str, list[str]]:
    with open(REPO / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["tool"]["setuptools"]["package-data"]


def test_py_typed_marker_is_in_the_package_and_listed_for_packaging():
    assert (REPO / "kdelay" / "py.typed").is_file()
    assert "py.typed" in _package_data()["kdelay"]


def test_every_data_file_of_the_package_is_listed_and_present():
    listed: set[Path] = set()
    for package, patterns in _package_data().items():
        for pattern in patterns:  # a name or a glob, relative to the package
            found = set((REPO / package.replace(".", "/")).glob(pattern))
            assert found, f"{package}: {pattern} matches no file"
            listed |= found
    tracked = subprocess.run(["git", "ls-files", "kdelay"], cwd=REPO, capture_output=True,
                             text=True, check=True).stdout.split()
    data = {REPO / name for name in tracked if not name.endswith(BUILD_SOURCES)}
    assert data <= listed, f"not in [tool.setuptools.package-data]: {sorted(data - listed)}"
