"""The package's layers import one way, downwards only:

    base (errors, records, config, clock, validation, fsio, read_ranges, forks, remote,
          settle)
      <- index <- log <- fetch <- groups <- partition (the Log facade, facade_calls) <- clients
      <- broker <- tools, spark

A module may import its own layer and any layer below it. kdelay.testing (test support)
may import anything. Every import is checked: in .py files and in the compiled modules'
.pyx and .pxd files (`import`, `from x import`, `cimport`, `from x cimport`), at the top
of a file and inside functions alike.

Inside the log layer the sub-packages import one way too:

    batch <- segments <- cancellation <- compaction, tiered <- local

The batch format (kdelay.log.batch: codec, record coders, walker) is the bytes of a batch
and of a .log's framing; a segment (kdelay.log.segments) knows nothing of cancellation,
compaction, tiering or the log that drives it (kdelay.log.local). Peers (compaction and
tiered) do not import each other. And no two packages anywhere in kdelay import each
other, directly or round a longer circle."""

from __future__ import annotations

import ast
import pathlib
import re

PKG = pathlib.Path(__file__).resolve().parents[1] / "kdelay"
SOURCES = ("*.py", "*.pyi", "*.pyx", "*.pxd")  # (.pyi: the compiled modules' type stubs)

BASE = {"errors", "records", "config", "clock", "validation", "fsio", "read_ranges", "forks",
        "remote", "settle"}
TOOLS = {"__main__", "tools", "spark"}
LAYERS = ["base", "index", "log", "fetch", "groups", "partition", "clients", "broker",
          "tools"]
# the sub-packages of kdelay.log, lowest first; a tuple is peers that import neither way
LOG_ROOMS: list[tuple[str, ...]] = [("batch",), ("segments",), ("cancellation",),
                                    ("compaction", "tiered"), ("local",)]


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
    if head == "facade_calls":  # Log.append and Log.fetch compiled (partition.py binds them)
        return "partition"
    if head in ("index", "log", "fetch", "groups", "partition", "clients", "broker"):
        return head
    raise AssertionError(f"kdelay.{head} is in no layer: add it to tests/test_layers.py")


def sources() -> list[pathlib.Path]:
    return sorted(p for pattern in SOURCES for p in PKG.rglob(pattern))


def module_name(path: pathlib.Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_module(dotted: str) -> bool:
    sub = PKG.parent.joinpath(*dotted.split("."))
    return (any(sub.with_suffix(s).exists() for s in (".py", ".pyx", ".pxd"))
            or (sub / "__init__.py").exists())


def _absolute(path: pathlib.Path, level: int, module: str | None) -> str:
    """The dotted target of `from <dots><module> import ...` written in `path`."""
    if not level:
        return module or ""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    base = package.split(".")
    base = base[:len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def _targets(path: pathlib.Path, level: int, module: str | None,
             names: list[str]) -> list[str]:
    """`from X import a, b`: X.a where a names a module (`from . import fsio`), else X."""
    target = _absolute(path, level, module)
    if target.split(".")[0] != "kdelay":
        return []
    return [f"{target}.{n}" if _is_module(f"{target}.{n}") else target for n in names]


def _python_imports(path: pathlib.Path) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "kdelay"]
        elif isinstance(node, ast.ImportFrom):
            out += [(node.lineno, t) for t in _targets(path, node.level, node.module,
                                                       [a.name for a in node.names])]
    return out


_STRING = re.compile(r'("""|\'\'\')(?:.|\n)*?\1')  # docstrings, blanked to keep line numbers
_FROM = re.compile(r"^[ \t]*from[ \t]+(\.*)([\w.]*)[ \t]+c?import[ \t]+(\([^)]*\)|[^\n#]*)",
                   re.M)
_IMPORT = re.compile(r"^[ \t]*c?import[ \t]+([^\n#]*)", re.M)


def _cython_imports(path: pathlib.Path) -> list[tuple[int, str]]:
    """Cython is not Python to `ast`: its imports are read line by line (comments and
    docstrings skipped), inside functions as at the top."""
    text = _STRING.sub(lambda m: "\n" * m.group(0).count("\n"), path.read_text())
    text = re.sub(r"#[^\n]*", "", text)
    out = []
    for m in _FROM.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        names = [n.split()[0] for n in m.group(3).strip("() \t").replace("\n", " ").split(",")
                 if n.strip()]
        out += [(line, t) for t in _targets(path, len(m.group(1)), m.group(2) or None, names)]
    for m in _IMPORT.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        for name in m.group(1).split(","):
            dotted = name.split()[0] if name.split() else ""
            if dotted.split(".")[0] == "kdelay":
                out.append((line, dotted))
    return out


def imported(path: pathlib.Path) -> list[tuple[int, str]]:
    """(line, dotted kdelay module) of every kdelay import in a file."""
    if path.suffix in (".py", ".pyi"):
        return _python_imports(path)
    return sorted(_cython_imports(path))


def violations() -> list[str]:
    found = []
    for path in sources():
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
    files = sources()
    assert len(files) > 20
    assert any(p.suffix == ".pyx" for p in files) and any(p.suffix == ".pxd" for p in files)
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
    for path in sorted(p for s in SOURCES for p in (PKG / "log" / "batch").rglob(s)):
        for line, target in imported(path):
            if target.startswith(ABOVE_BATCH_FORMAT):
                found.append(f"{path.relative_to(PKG.parent)}:{line}: the batch format imports "
                             f"{target}")
    return found


def test_the_batch_format_knows_nothing_of_segments() -> None:
    assert (PKG / "log" / "batch").is_dir()
    bad = batch_format_violations()
    assert not bad, "\n".join(bad)


def log_room_of(module: str) -> int | None:
    """The rank of a module's sub-package of kdelay.log (None: not in one)."""
    parts = module.split(".")
    if parts[:2] != ["kdelay", "log"] or len(parts) < 3:
        return None
    for rank, rooms in enumerate(LOG_ROOMS):
        if parts[2] in rooms:
            return rank
    raise AssertionError(f"{module} is in no room of kdelay.log: add it to LOG_ROOMS in "
                         "tests/test_layers.py")


def log_room_violations() -> list[str]:
    found = []
    for path in sorted(p for s in SOURCES for p in (PKG / "log").rglob(s)):
        here_name = module_name(path)
        here = log_room_of(here_name)
        if here is None:
            continue
        for line, target in imported(path):
            there = log_room_of(target)
            if there is None:
                continue
            same_room = target.split(".")[2] == here_name.split(".")[2]
            if there > here or (there == here and not same_room):
                found.append(f"{path.relative_to(PKG.parent)}:{line}: "
                             f"{'.'.join(here_name.split('.')[:3])} imports {target}")
    return found


def test_the_rooms_of_the_log_import_one_way() -> None:
    for path in (PKG / "log").iterdir():
        if path.suffix in (".py", ".pyx", ".pxd") and path.name != "__init__.py":
            raise AssertionError(f"{path.name} sits in kdelay/log itself: put it in a room")
    rooms = {p.name for p in (PKG / "log").iterdir() if (p / "__init__.py").exists()}
    assert rooms == {r for group in LOG_ROOMS for r in group}, rooms
    bad = log_room_violations()
    assert not bad, "\n".join(bad)


def package_of(module: str) -> str:
    """The unit a circle is looked for between: a package of kdelay (kdelay.fetch, with its
    own sub-packages), a room of kdelay.log (kdelay.log.segments), or a top-level module
    (kdelay.errors) on its own. (A package may lean on its own sub-packages both ways, as
    the broker's dispatcher lists the modules of broker.apis, which register with it.)"""
    parts = module.split(".")
    if parts[1:2] == ["log"] and len(parts) > 2:
        return ".".join(parts[:3])
    return ".".join(parts[:2])


def package_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in sources():
        name = module_name(path)
        if name == "kdelay" or layer_of(name) is None:
            continue  # the re-exporting package itself, and the test support
        here = package_of(name)
        for _, target in imported(path):
            if layer_of(target) is None or target == "kdelay":
                continue
            there = package_of(target)
            if there != here:
                graph.setdefault(here, set()).add(there)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One circle per strongly connected component of more than one package (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_circle_between_packages() -> None:
    graph = package_graph()
    assert "kdelay.log.segments" in graph and "kdelay.log.local" in graph
    bad = circles(graph)
    assert not bad, "packages that import each other:\n" + "\n".join(
        " <-> ".join(c) for c in bad)


# ------------------------------------------------------------------ the checker itself

def _fake(tmp_path, monkeypatch, files: dict[str, str]) -> pathlib.Path:
    fake = tmp_path / "kdelay"
    fake.mkdir()
    (fake / "__init__.py").write_text("")
    for rel, text in files.items():
        path = fake / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        for parent in path.relative_to(fake).parents:
            init = fake / parent / "__init__.py"
            if not init.exists():
                init.write_text("")
        path.write_text(text)
    monkeypatch.setattr(__import__(__name__), "PKG", fake)
    return fake


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


def test_the_checker_reads_cython(tmp_path, monkeypatch) -> None:
    """cimport, `from x cimport`, plain imports and imports inside a function of a .pyx or
    .pxd are all seen; the same words in a docstring or a comment are not."""
    _fake(tmp_path, monkeypatch, {
        "partition.py": "",
        "fetch/__init__.py": "",
        "fetch/reader.pxd": "",
        "log/segments/tail.pxd": "from kdelay.fetch.reader cimport Reader\n",
        "log/segments/tail.pyx": (
            '"""A docstring that says\nfrom kdelay.partition import Log\n"""\n'
            "# import kdelay.partition\n"
            "cimport kdelay.fetch.reader\n"
            "def f():\n"
            "    from kdelay import partition\n"
            "    import kdelay.partition as p\n"),
        "log/local/w.pyx": "from ..segments.tail cimport (\n    Tail,\n)\n",
    })
    assert violations() == [
        "kdelay/log/segments/tail.pxd:1: log imports kdelay.fetch.reader (fetch)",
        "kdelay/log/segments/tail.pyx:5: log imports kdelay.fetch.reader (fetch)",
        "kdelay/log/segments/tail.pyx:7: log imports kdelay.partition (partition)",
        "kdelay/log/segments/tail.pyx:8: log imports kdelay.partition (partition)",
    ]
    assert imported(tmp_path / "kdelay" / "log" / "local" / "w.pyx") == [
        (1, "kdelay.log.segments.tail")]


def test_the_checker_sees_a_room_of_the_log_import_upwards(tmp_path, monkeypatch) -> None:
    _fake(tmp_path, monkeypatch, {
        "log/segments/segment.py": "from ..cancellation import store\n",
        "log/cancellation/store.py": "",
        "log/compaction/swap.py": "from ..tiered import tier\n",
        "log/tiered/tier.py": "",
        "log/local/loader.py": "from ..compaction import swap\nfrom ..segments import segment\n",
    })
    assert log_room_violations() == [
        "kdelay/log/compaction/swap.py:1: kdelay.log.compaction imports kdelay.log.tiered.tier",
        "kdelay/log/segments/segment.py:1: kdelay.log.segments imports "
        "kdelay.log.cancellation.store",
    ]


def test_the_checker_finds_a_circle(tmp_path, monkeypatch) -> None:
    _fake(tmp_path, monkeypatch, {
        "fetch/a.py": "from ..groups import b\n",
        "groups/b.py": "def f():\n    from ..clients import c\n",
        "clients/c.py": "from ..fetch import a\n",
        "clients/d.py": "from ..groups import b\n",
        "errors.py": "",
    })
    assert circles(package_graph()) == [["kdelay.clients", "kdelay.fetch", "kdelay.groups"]]
