"""The package's layers import one way, downwards only:

    base (errors, records, config, clock, validation, fsio, read_ranges, forks, remote)
      <- index <- log <- fetch <- groups <- partition (the Log facade) <- clients <- tools, spark

A module may import its own layer and any layer below it. kdelay.testing (test support)
may import anything. Every import is checked, including those inside functions.

Inside the log layer, the batch format (kdelay.log.batch: codec, record coders, walker)
knows nothing of segments, cancellation or compaction: it is the bytes of a batch and of a
.log's framing, and every room above it builds on it."""

from __future__ import annotations

import ast
import pathlib

PKG = pathlib.Path(__file__).resolve().parents[1] / "kdelay"

BASE = {"errors", "records", "config", "clock", "validation", "fsio", "read_ranges", "forks",
        "remote"}
TOOLS = {"__main__", "tools", "spark"}
LAYERS = ["base", "index", "log", "fetch", "groups", "partition", "clients", "tools"]


def layer_of(module: str) -> str | None:
    """The layer of a dotted kdelay module name (None: the testing support, unchecked)."""
    parts = module.split(".")
    assert parts[0] == "kdelay", module
    if len(parts) == 1:
        return "tools"  # the package itself re-exports the public surface: the top
    head = parts[1]
    if head == "testing":
        return None
    if head in BASE:
        return "base"
    if head in TOOLS:
        return "tools"
    if head in ("index", "log", "fetch", "groups", "partition", "clients"):
        return head
    raise AssertionError(f"kdelay.{head} is in no layer: add it to tests/test_layers.py")


def module_name(path: pathlib.Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported(path: pathlib.Path) -> list[tuple[int, str]]:
    """(line, dotted kdelay module) of every kdelay import in a file."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "kdelay"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "kdelay":
                continue
            for alias in node.names:
                # `from . import fsio` names a module; `from .errors import X` names a symbol
                sub = PKG.parent.joinpath(*f"{target}.{alias.name}".split("."))
                is_module = sub.with_suffix(".py").exists() or (sub / "__init__.py").exists()
                out.append((node.lineno, f"{target}.{alias.name}" if is_module else target))
    return out


def violations() -> list[str]:
    found = []
    for path in sorted(PKG.rglob("*.py")):
        here = layer_of(module_name(path))
        if here is None:
            continue
        for line, target in imported(path):
            there = layer_of(target)
            if there is not None and LAYERS.index(there) > LAYERS.index(here):
                found.append(f"{path.relative_to(PKG.parent)}:{line}: {here} imports "
                             f"{target} ({there})")
    return found


def test_every_module_has_a_layer() -> None:
    files = sorted(PKG.rglob("*.py"))
    assert len(files) > 20
    for path in files:
        layer_of(module_name(path))  # raises for a module outside every layer


def test_lower_layers_never_import_higher_ones() -> None:
    bad = violations()
    assert not bad, "upward imports:\n" + "\n".join(bad)


BATCH_FORMAT = "kdelay.log.batch"
ABOVE_BATCH_FORMAT = ("kdelay.log.segments", "kdelay.log.cancellation", "kdelay.log.compaction",
                      "kdelay.log.tiered", "kdelay.log.local")


def batch_format_violations() -> list[str]:
    found = []
    for path in sorted((PKG / "log" / "batch").rglob("*.py")):
        for line, target in imported(path):
            if target.startswith(ABOVE_BATCH_FORMAT):
                found.append(f"{path.relative_to(PKG.parent)}:{line}: the batch format imports "
                             f"{target}")
    return found


def test_the_batch_format_knows_nothing_of_segments() -> None:
    assert (PKG / "log" / "batch").is_dir()
    bad = batch_format_violations()
    assert not bad, "\n".join(bad)


def test_the_checker_sees_the_batch_format_import_a_segment(tmp_path, monkeypatch) -> None:
    fake = tmp_path / "kdelay"
    for pkg in ("", "log", "log/batch", "log/segments"):
        (fake / pkg).mkdir(parents=True, exist_ok=True)
        (fake / pkg / "__init__.py").write_text("")
    (fake / "log" / "segments" / "segment.py").write_text("")
    (fake / "log" / "batch" / "codec.py").write_text("from ..segments import segment\n")
    monkeypatch.setattr(__import__(__name__), "PKG", fake)
    assert batch_format_violations() == [
        "kdelay/log/batch/codec.py:1: the batch format imports kdelay.log.segments.segment"]


def test_the_checker_sees_an_upward_import(tmp_path, monkeypatch) -> None:
    """The rule itself: a log module importing the facade is reported."""
    fake = tmp_path / "kdelay"
    (fake / "log").mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "partition.py").write_text("")
    (fake / "log" / "__init__.py").write_text("")
    (fake / "log" / "bad.py").write_text("def f():\n    from ..partition import Log\n")
    monkeypatch.setattr(__import__(__name__), "PKG", fake)
    assert violations() == ["kdelay/log/bad.py:2: log imports kdelay.partition (partition)"]
