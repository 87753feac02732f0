"""The package type-checks, and its compiled modules' stubs say what the modules hold.

`mypy` (its settings: pyproject.toml's [tool.mypy]) checks every .py module of kdelay and
reads the compiled modules (Cython) through the .pyi stub beside each .pyx: it cannot read a
compiled module itself. A stub that drifts from its module would let mypy pass code that
fails at run time, so the stubs are held to the built modules here both ways: every public
name a stub declares (module level, and the members of its classes) exists on the module,
and every public name the module defines itself (not one it imports) is declared.

Cost: mypy's run, about 15 s cold (CI: no cache yet) on a loaded 2-core machine, under a
second with its cache (.mypy_cache, in the checkout); the stub checks, milliseconds.
"""

from __future__ import annotations

import ast
import importlib
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PKG = ROOT / "kdelay"
COMPILED = sorted(PKG.rglob("*.pyx"))


def module_name(pyx: pathlib.Path) -> str:
    return ".".join(pyx.relative_to(ROOT).with_suffix("").parts)


def test_mypy_finds_no_errors():
    done = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert "Success: no issues found" in done.stdout


def test_every_compiled_module_has_a_stub():
    """(test_packaging.py holds every .pyi, as every data file, to the package data.)"""
    assert COMPILED, "no compiled modules found"
    missing = [str(p.relative_to(ROOT)) for p in COMPILED if not p.with_suffix(".pyi").exists()]
    assert not missing, f"compiled modules without a .pyi stub: {missing}"


def _public(name: str) -> bool:
    return not name.startswith("_")


def stub_names(pyi: pathlib.Path) -> dict[str, set[str] | None]:
    """The names a stub declares at module level (None) and per class (its members), the
    private ones and what it imports left out."""
    out: dict[str, set[str] | None] = {}
    for node in ast.parse(pyi.read_text()).body:
        if isinstance(node, ast.ClassDef):
            members = set()
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                    members.add(item.name)
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    members.add(item.target.id)
            out[node.name] = {m for m in members if _public(m)}
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            out[node.name] = None
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out[node.target.id] = None
        elif isinstance(node, ast.Assign):
            out.update((t.id, None) for t in node.targets if isinstance(t, ast.Name))
    return {k: v for k, v in out.items() if _public(k) and k != "__all__"}


_FROM_IMPORT = re.compile(r"^from\s+\S+\s+import\s+(\([^)]*\)|[^\n]+)", re.M)
_IMPORT = re.compile(r"^import\s+([\w.]+)(?:\s+as\s+(\w+))?", re.M)


def imported_names(pyx: pathlib.Path) -> set[str]:
    """What a .pyx binds by Python import (`cimport` binds nothing Python sees)."""
    text = pyx.read_text()
    names = set()
    for m in _FROM_IMPORT.finditer(text):
        for part in m.group(1).strip("()").replace("\n", " ").split(","):
            part = part.split("#")[0].strip()
            if part:
                names.add(part.split(" as ")[-1].strip())
    for m in _IMPORT.finditer(text):
        names.add(m.group(2) or m.group(1).split(".")[0])
    return names


def own_public_names(module, pyx: pathlib.Path) -> set[str]:
    imported = imported_names(pyx)
    return {n for n in dir(module) if _public(n) and n not in imported
            and type(getattr(module, n)).__name__ != "module"}


@pytest.mark.parametrize("pyx", COMPILED, ids=module_name)
def test_stub_matches_its_compiled_module(pyx):
    module = importlib.import_module(module_name(pyx))
    assert module.__file__ is not None and not module.__file__.endswith(".py"), \
        f"{module_name(pyx)} is not the compiled module (build it: setup.py build_ext)"
    declared = stub_names(pyx.with_suffix(".pyi"))
    problems = [f"the stub declares {n}, which the module lacks"
                for n in sorted(declared) if not hasattr(module, n)]
    problems += [f"the module defines {n}, which the stub leaves out"
                 for n in sorted(own_public_names(module, pyx) - set(declared))]
    for name, members in sorted(declared.items()):
        cls = getattr(module, name, None)
        if members is None or not isinstance(cls, type):
            continue
        problems += [f"the stub declares {name}.{m}, which the class lacks"
                     for m in sorted(members) if not hasattr(cls, m)]
        own = {m for m in vars(cls) if _public(m)}
        problems += [f"the class defines {name}.{m}, which the stub leaves out"
                     for m in sorted(own - members)]
    assert not problems, f"{pyx.with_suffix('.pyi').relative_to(ROOT)}: " + "; ".join(problems)
