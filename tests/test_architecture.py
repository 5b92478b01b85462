"""The package's layers: every import points down (or within its layer), no import cycle,
the pipeline's modules stay small, and ``linalg/`` leaves placement to the scheduler.

Imports are read from the source (``ast``), function-level and ``TYPE_CHECKING`` ones
included: a cycle that holds only through a deferred import is still a cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import lsd_dask

PACKAGE = Path(lsd_dask.__file__).parent

#: the layers, lowest first: a module may import its own layer and those below it
LAYERS: list[tuple[str, ...]] = [
    ("lsd_dask._logging", "lsd_dask._validation", "lsd_dask._version"),
    ("lsd_dask.linalg",),
    ("lsd_dask.surface", "lsd_dask.similarity", "lsd_dask.metrics"),
    ("lsd_dask.io", "lsd_dask.plotting", "lsd_dask.testing"),
    ("lsd_dask.distributed", "lsd_dask.datasets", "lsd_dask.spin", "lsd_dask.evaluation"),
    ("lsd_dask.cluster",),
    ("lsd_dask.selection",),
    ("lsd_dask.pipeline.settings",),
    ("lsd_dask.pipeline.engine",),
    ("lsd_dask.pipeline.stages",),
    ("lsd_dask.pipeline.products",),
    ("lsd_dask.pipeline",),
    ("lsd_dask.cli", "lsd_dask"),
]
#: the most lines a pipeline module may have (one idea a module)
MAX_PIPELINE_LINES = 350
#: what ``linalg/`` must not call: it computes, and the scheduler places
SCHEDULER_CALLS = {"default_client", "get_client", "annotate", "scatter"}


def test_every_module_is_in_a_layer():
    unplaced = [m for m in _modules() if _layer(m) is None]
    assert unplaced == []


def test_imports_point_down_or_sideways():
    upward = [
        f"{a} imports {b}"
        for a, targets in _import_graph().items()
        for b in sorted(targets)
        if _layer(b) > _layer(a)  # type: ignore[operator]
    ]
    assert upward == []


def test_no_import_cycle():
    cycles = [sorted(c) for c in _strongly_connected(_import_graph()) if len(c) > 1]
    assert cycles == []


def test_pipeline_modules_are_small():
    large = {
        str(p.relative_to(PACKAGE)): n
        for p in (PACKAGE / "pipeline").rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_PIPELINE_LINES
    }
    assert large == {}


def test_linalg_leaves_placement_to_the_scheduler():
    calls = []
    for path in (PACKAGE / "linalg").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            name = None
            if isinstance(node, ast.Attribute):
                name = node.attr
            elif isinstance(node, ast.Name):
                name = node.id
            elif isinstance(node, ast.alias):
                name = node.name.rsplit(".", 1)[-1]
            if name in SCHEDULER_CALLS:
                calls.append(f"{path.name}:{getattr(node, 'lineno', '?')} {name}")
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in (
                "distributed",
            ):
                calls.append(f"{path.name}:{node.lineno} imports distributed")
    assert calls == []


# the checks above are only as good as the graph: it must see what Python sees
def test_the_graph_sees_function_level_and_type_checking_imports(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from .b import x\n")
    (pkg / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .sub import b\n"
    )
    (pkg / "sub" / "b.py").write_text("def x():\n    from ..a import y\n    from .. import a\n")
    graph = _import_graph(pkg)
    assert graph["pkg.a"] == {"pkg.sub.b"}
    assert graph["pkg.sub.b"] == {"pkg.a"}
    assert graph["pkg.sub"] == {"pkg.sub.b"}
    assert [sorted(c) for c in _strongly_connected(graph) if len(c) > 1] == [["pkg.a", "pkg.sub.b"]]


@pytest.mark.parametrize(
    ("module", "layer"),
    [("lsd_dask.pipeline.run", 11), ("lsd_dask.pipeline.stages.svd", 9), ("lsd_dask", 12)],
)
def test_a_module_takes_its_longest_prefix_layer(module, layer):
    assert _layer(module) == layer


def _modules(root: Path = PACKAGE) -> dict[str, Path]:
    """Dotted module name -> file, for every module under ``root`` (a package)."""
    out = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the package modules it imports, anywhere in its source."""
    modules = _modules(root)
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    parts = parts[: len(parts) - node.level + 1]
                    base = ".".join(parts + ([node.module] if node.module else []))
                # a name may be a submodule (`from . import files`) or an attribute
                targets = [
                    f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                    for a in node.names
                ]
            else:
                continue
            for t in targets:
                while t and t not in modules:
                    t = t.rpartition(".")[0]
                if t and t != name:
                    graph[name].add(t)
    return graph


def _layer(module: str) -> int | None:
    """The layer of the longest prefix that names the module or a package holding it."""
    best: tuple[int, int] | None = None
    for i, prefixes in enumerate(LAYERS):
        for p in prefixes:
            if module == p or module.startswith(p + "."):
                if best is None or len(p) > best[1]:
                    best = (i, len(p))
    return None if best is None else best[0]


def _strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components (iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[v] = min(low[v], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                out.append(component)
    return out
