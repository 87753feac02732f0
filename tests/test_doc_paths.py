"""Every module path, module name and doc file that a docstring, a comment or a doc names
exists: a file moved or renamed takes its mentions with it.

Read: the package's sources (.py, .pyx, .pxd), the tests, the benchmarks, README.md and
docs/*.md. Checked:
- paths (`kdelay/log/local/loader.py`, `log/batch/walker.py`, `docs/api.md`): some file in
  the repository ends with that path;
- bare file names (`segment_tail.pyx`, `api.md`): a file of that name exists;
- dotted names under a kdelay package (`kdelay.log.segments.layout`): the module exists,
  and what follows it is one of its attributes;
- relative links in the docs ([formats.md](formats.md)): the target exists."""

from __future__ import annotations

import ast
import importlib
import io
import os
import pathlib
import re
import tokenize

ROOT = pathlib.Path(__file__).resolve().parents[1]
SUFFIXES = ("py", "pyx", "pxd", "pyi", "md", "h", "toml")
_PATH = re.compile(r"(?<![\w./-])((?:[\w.-]+/)+[\w.-]+\.(?:" + "|".join(SUFFIXES) + r"))\b")
_BARE = re.compile(r"(?<![\w./-])([A-Za-z_][\w-]*\.(?:py|pyx|pxd|pyi|md|h))\b(?![\w/(])")
_DOTTED = re.compile(r"\bkdelay(?:\.[A-Za-z_]\w*)+")
_LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
# files outside the repository that the texts mention on purpose: C headers, a user's
# script in an example
ELSEWHERE = {"Python.h", "sched.h", "app.py"}
# dotted names that are not modules: a Spark session's configuration key, and the broker's
# config and header names (kdelay.remote.storage, kdelay.share.*, kdelay.dlq.*, ...)
NOT_MODULES = {"kdelay.spark.registered"}
NOT_MODULE_PREFIXES = ("kdelay.remote.storage", "kdelay.share.", "kdelay.dlq.",
                       "kdelay.compaction.", "kdelay.frame.", "kdelay.deliver_after",
                       "kdelay.delay_ms")
# files the texts name as what a command writes (a benchmark's report)
PROMISED = {"bench/results/broker_consume.md"}


def prose(path: pathlib.Path) -> str:
    """What a file says in words: a doc's text; a Python file's docstrings and comments
    (its code, and the strings it builds, are not prose); a Cython file whole (ast cannot
    read it; its code names no files)."""
    text = path.read_text()
    if path.suffix != ".py":
        return text
    out = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                out.append(doc)
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT:
            out.append(tok.string)
    return "\n".join(out)


def texts() -> list[pathlib.Path]:
    out = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for top in ("kdelay", "tests", "bench"):
        for pattern in ("*.py", "*.pyx", "*.pxd", "*.pyi"):
            out += sorted((ROOT / top).rglob(pattern))
    return [p for p in out if "build" not in p.relative_to(ROOT).parts[:1]]


def repo_files() -> list[str]:
    skip = {".git", "build", ".hypothesis", "__pycache__", ".venv", "node_modules",
            ".pytest_cache", ".ruff_cache", ".mypy_cache", ".benchmarks"}
    out = []
    for top, dirs, names in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in skip and not d.endswith(".egg-info")]
        rel = pathlib.Path(top).relative_to(ROOT)
        out += [str(rel / n) if str(rel) != "." else n for n in names]
    return out


def _module_exists(dotted: str) -> bool:
    base = ROOT.joinpath(*dotted.split("."))
    return (any(base.with_suffix(s).exists() for s in (".py", ".pyx", ".pxd"))
            or (base / "__init__.py").exists())


def dotted_problem(name: str) -> str | None:
    """Why `kdelay.a.b.c` names nothing (None: it names a module or a module's attribute).
    Names whose first part is no kdelay module (the `kdelay.dlq.*` headers) are not
    module names."""
    parts = name.split(".")
    if not _module_exists(".".join(parts[:2])):
        return None
    k = 2
    while k < len(parts) and _module_exists(".".join(parts[:k + 1])):
        k += 1
    if k == len(parts):
        return None
    module = ".".join(parts[:k])
    try:
        obj = importlib.import_module(module)
    except ImportError as e:  # an optional extra absent: its modules are checked as files
        return None if "kdelay" not in str(e) else f"{module} does not import: {e}"
    if not hasattr(obj, parts[k]):
        return f"{module} has no {parts[k]}"
    return None


def problems() -> list[str]:
    files = repo_files()
    names = {pathlib.PurePath(f).name for f in files}
    found = []
    for path in texts():
        text = prose(path)
        where = path.relative_to(ROOT)
        for m in _PATH.finditer(text):
            token = m.group(1).lstrip("./")
            if token.startswith(("http", "www.")) or "://" in text[max(0, m.start() - 8):m.start()]:
                continue
            if token.startswith("../shared"):
                found.append(f"{where}: names {token}, which users do not have")
                continue
            if token not in PROMISED and not any(f == token or f.endswith("/" + token)
                                                 for f in files):
                found.append(f"{where}: names {token}, which does not exist")
        for m in _BARE.finditer(text):
            name = m.group(1)
            if name not in names and name not in ELSEWHERE:
                found.append(f"{where}: names {name}, which does not exist")
        for m in _DOTTED.finditer(text):
            if m.group(0) in NOT_MODULES or m.group(0).startswith(NOT_MODULE_PREFIXES):
                continue
            why = dotted_problem(m.group(0).rstrip("."))
            if why:
                found.append(f"{where}: names {m.group(0)}: {why}")
        if path.suffix == ".md":
            for m in _LINK.finditer(text):
                target = m.group(1)
                if "://" in target or target.startswith("mailto:"):
                    continue
                if not (path.parent / target).exists():
                    found.append(f"{where}: links {target}, which does not exist")
    return sorted(set(found))


def test_every_named_module_and_doc_exists() -> None:
    bad = problems()
    assert not bad, "\n".join(bad)


def test_the_check_sees_a_stale_name(tmp_path, monkeypatch) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "kdelay" / "log").mkdir(parents=True)
    (tmp_path / "kdelay" / "__init__.py").write_text("")
    (tmp_path / "kdelay" / "log" / "__init__.py").write_text("")
    (tmp_path / "kdelay" / "log" / "walker.py").write_text(
        '"""See log/walker.py, walker.py, kdelay.log.walker, docs/api.md, kdelay.log.gone,\n'
        'log/loader.py, gone.pyx and API.md; kdelay.dlq.reason is a header."""\n')
    (tmp_path / "docs" / "api.md").write_text("[design](design.md), [api](api.md)\n")
    (tmp_path / "README.md").write_text("")
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path)
    assert problems() == [
        "docs/api.md: links design.md, which does not exist",
        "docs/api.md: names design.md, which does not exist",
        "kdelay/log/walker.py: names API.md, which does not exist",
        "kdelay/log/walker.py: names gone.pyx, which does not exist",
        "kdelay/log/walker.py: names kdelay.log.gone: kdelay.log has no gone",
        "kdelay/log/walker.py: names log/loader.py, which does not exist",
    ]
