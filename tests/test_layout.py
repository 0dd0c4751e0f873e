"""The floor plan of zoo/, checked from its imports (every ``import`` statement counts, also those
inside functions and under ``TYPE_CHECKING``): no import circle, imports go down the layers of
docs/architecture.md, nothing in zoo/ imports the benchmarks, and only the trainer's model set-up
(zoo.train.model_setup) imports zoo.accel."""

import ast
import pathlib
from typing import Dict, List, Set

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent

# The layers of zoo/, top first: a module imports only from its own layer or the layers below.
# (The cli is the top; zoo.engine, the deprecated old paths, imports by name only.)
LAYERS = ["cli", "integrations", "train", "infer", "launch", "accel", "models", "data", "solver",
          "config", "utils"]


def module_graph(package_dir: pathlib.Path) -> Dict[str, Set[str]]:
    """Module name -> the modules of the same package it imports (by any import statement)."""
    top = package_dir.name
    modules: Dict[str, pathlib.Path] = {}
    for path in package_dir.rglob("*.py"):
        parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    graph: Dict[str, Set[str]] = {}
    for name, path in modules.items():
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        targets: Set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package[:len(package) - node.level + 1]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                # "from pkg import sub" imports the module pkg.sub; "from mod import name", mod.
                candidates = [f"{source}.{alias.name}" if f"{source}.{alias.name}" in modules
                              else source for alias in node.names]
            elif isinstance(node, ast.Import):
                candidates = [alias.name for alias in node.names]
            else:
                continue
            for target in candidates:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name and target.split(".")[0] == top:
                    targets.add(target)
        graph[name] = targets
    return graph


def import_circles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    circles: List[List[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
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
                circles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return circles


@pytest.fixture(scope="module")
def zoo_graph() -> Dict[str, Set[str]]:
    return module_graph(ROOT / "zoo")


def test_no_import_circle_in_zoo(zoo_graph):
    assert import_circles(zoo_graph) == []


def test_the_check_finds_a_circle(tmp_path):
    """The check itself: a package whose two modules import each other, one of them from inside a
    function, is reported."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .sub import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from ..a import f\n")
    (pkg / "c.py").write_text("from . import a\n")
    assert import_circles(module_graph(pkg)) == [["pkg.a", "pkg.sub.b"]]


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_imports_go_down_the_layers(zoo_graph):
    rank = {name: i for i, name in enumerate(LAYERS)}
    upward = []
    for source, targets in zoo_graph.items():
        if _layer(source) not in rank:  # zoo/__init__ and the deprecated zoo.engine
            continue
        for target in targets:
            if _layer(target) in rank and rank[_layer(target)] < rank[_layer(source)]:
                upward.append(f"{source} -> {target}")
    assert sorted(upward) == []


def test_no_module_of_zoo_imports_the_benchmarks_or_tools():
    hits = []
    for path in (ROOT / "zoo").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([node.module or ""] if isinstance(node, ast.ImportFrom) else
                     [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            for name in names:
                if name.split(".")[0] in ("benchmarks", "tools") or name.startswith(
                        "zoo.benchmark"):
                    hits.append(f"{path.relative_to(ROOT)}: {name}")
    assert hits == []


def test_data_does_not_import_models(zoo_graph):
    assert [f"{s} -> {t}" for s, targets in zoo_graph.items() if _layer(s) == "data"
            for t in targets if _layer(t) == "models"] == []


def test_only_the_model_setup_imports_accel(zoo_graph):
    importers = {s for s, targets in zoo_graph.items() if _layer(s) != "accel"
                 and any(_layer(t) == "accel" for t in targets)}
    assert importers == {"zoo.train.model_setup"}
