"""The import graph of ``graphscale/`` is a DAG that follows the layers of ``docs/architecture.md``.

An AST walk of every module collects every ``import`` of a ``graphscale`` module, at module level and inside
functions alike (an import inside a function still ties the two modules together: it only moves the failure to
run time). Importing ``a.b.c`` also runs the package ``a.b``'s ``__init__``, so that is an import of ``a.b`` too,
unless that ``__init__`` imports nothing at module level. The test reports every import that goes up the layers
and every cycle, with the module names.
"""

from __future__ import annotations

import ast
from pathlib import Path

import graphscale

ROOT = Path(graphscale.__file__).parent

#: the layers, top to bottom: a module may import its own layer (without a cycle) and the layers below it; the
#: longest matching prefix places a module. Placed apart from their package, always above it (importing a module
#: imports its package: :func:`upward_imports` checks the packages too): ``partition.command`` (the ``graphscale
#: partition`` command: it prepares datasets and checks paths like a run), ``data.ingest_command`` (``graphscale
#: convert``: it shows progress like a run) and ``data.handle`` (it opens partition stores). The cost models' shared layer (``graphscale.cost``: the prediction every strategy fills in, the machine
#: profile's figures, the pricing primitives) sits below the strategies, which price their runs with it, and
#: ``advise`` sits above both. The option declarations and the constants they share (``graphscale.options``) are
#: the bottom: every layer reads them, and they import no strategy.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("cli", ("graphscale.cli", "graphscale.__main__")),
    ("bench", ("graphscale.bench",)),
    ("api", ("graphscale.api",)),
    ("advise", ("graphscale.advise",)),
    ("run", ("graphscale.run", "graphscale.partition.command", "graphscale.data.ingest_command")),
    ("prepare", ("graphscale.prepare", "graphscale.training_store", "graphscale.validation")),
    ("trainer", ("graphscale.trainer", "graphscale.checkpoint", "graphscale.progress", "graphscale.plot")),
    ("strategies", ("graphscale.strategies", "graphscale.testing")),
    ("tasks", ("graphscale.tasks",)),
    ("cost", ("graphscale.cost",)),
    ("partition", ("graphscale.partition", "graphscale.data.handle")),
    ("nn", ("graphscale.nn",)),
    ("distributed", ("graphscale.distributed",)),
    ("data", ("graphscale.data",)),
    ("config", ("graphscale.config", "graphscale.registry", "graphscale.metrics", "graphscale.allocator",
                "graphscale.errors", "graphscale.flags")),
    ("declarations", ("graphscale.options",)),
    ("package", ("graphscale",)),
]

#: (importer, imported) imports that go up the layers on purpose, each with its reason; keep this short
ALLOWED_UPWARD: dict[tuple[str, str], str] = {}


def module_files() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def layer_of(module: str) -> int:
    """Index into :data:`LAYERS` (0 = top) of the longest prefix that names ``module``."""
    best, index = -1, None
    for i, (_name, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, index = len(prefix), i
    assert index is not None, f"module {module} is in no layer of LAYERS"
    return index


def _imported(node: ast.AST, package: str) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        if node.level:
            base = package.split(".")[: len(package.split(".")) - node.level + 1]
            module = ".".join(base + ([node.module] if node.module else []))
        else:
            module = node.module or ""
        return [module] + [f"{module}.{alias.name}" for alias in node.names]
    return []


def import_graph() -> dict[str, set[str]]:
    """module -> the graphscale modules it imports (anywhere in its code), with the packages that runs."""
    files = module_files()
    trees = {module: ast.parse(path.read_text(), str(path)) for module, path in files.items()}

    def module_level_imports(tree: ast.Module) -> bool:
        return any(_imported(node, "graphscale") for node in tree.body)

    def resolve(name: str) -> str | None:
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {module: set() for module in files}
    for module, tree in trees.items():
        package = module if files[module].name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(tree):
            for name in _imported(node, package):
                target = resolve(name) if name.startswith("graphscale") else None
                if target is None:
                    continue
                targets = {target}
                parent = target.rpartition(".")[0]
                while parent:  # the packages on the way run their __init__
                    if module_level_imports(trees[parent]):
                        targets.add(parent)
                    parent = parent.rpartition(".")[0]
                graph[module] |= {t for t in targets if t != module and not module.startswith(t + ".")}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

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
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def packages_of(module: str) -> list[str]:
    """``module`` and the packages above it, ``graphscale`` left out: ``a.b.c`` -> ``[a.b.c, a.b]``."""
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(len(parts), 1, -1)]


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """The imports of a module, or of a module inside a package, above the importer's layer: importing
    ``graphscale.strategies.options.shared`` from ``config`` imports the package ``graphscale.strategies`` whatever
    its ``__init__`` holds."""
    out = []
    for module, targets in sorted(graph.items()):
        for target in sorted(targets):
            above = [p for p in packages_of(target) if layer_of(p) < layer_of(module) and not
                     (module == p or module.startswith(p + "."))]
            if above and (module, target) not in ALLOWED_UPWARD:
                where = "" if above[0] == target else f" in {above[0]}"
                out.append(f"{module} ({LAYERS[layer_of(module)][0]}) imports {target}{where} "
                           f"({LAYERS[layer_of(above[0])][0]})")
    return out


def test_no_import_goes_up_the_layers():
    upward = upward_imports(import_graph())
    assert not upward, "imports up the layers:\n" + "\n".join(upward)


def test_the_import_graph_has_no_cycle():
    found = cycles(import_graph())
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def imports_of_strategies_from_below(graph: dict[str, set[str]]) -> list[str]:
    """The imports of any module of the package ``graphscale.strategies`` by a module below the strategies' layer:
    the package is imported only from above, whatever its ``__init__`` holds."""
    strategies = [name for name, _ in LAYERS].index("strategies")
    return [f"{module} ({LAYERS[layer_of(module)][0]}) imports {target}"
            for module, targets in sorted(graph.items()) if layer_of(module) > strategies
            for target in sorted(targets) if target.startswith("graphscale.strategies.")]


def test_nothing_below_the_strategies_imports_the_strategies_package():
    found = imports_of_strategies_from_below(import_graph())
    assert not found, "imports of the strategies package from below it:\n" + "\n".join(found)
    assert imports_of_strategies_from_below({"graphscale.config": {"graphscale.strategies.base"}}) == [
        "graphscale.config (config) imports graphscale.strategies.base"]


def test_the_check_reports_a_module_placed_below_its_package(monkeypatch):
    """A module placed in a lower layer than its package (the declarations once in ``strategies.options``) imports
    the package: ``config`` importing it goes up to the strategies."""
    layers = [(name, prefixes + ("graphscale.strategies.options",) if name == "declarations" else prefixes)
              for name, prefixes in LAYERS]
    monkeypatch.setitem(globals(), "LAYERS", layers)
    graph = {"graphscale.config": {"graphscale.strategies.options.shared"}}
    assert upward_imports(graph) == ["graphscale.config (config) imports graphscale.strategies.options.shared in "
                                     "graphscale.strategies (strategies)"]


def test_the_checks_report_an_upward_import_and_a_cycle():
    """The two checks find what they guard against (a synthetic graph: config importing cli, a <-> b)."""
    graph = {"graphscale.config": {"graphscale.cli"}, "graphscale.cli": {"graphscale.config"},
             "graphscale.data.a": {"graphscale.data.b"}, "graphscale.data.b": {"graphscale.data.a"}}
    assert upward_imports(graph) == ["graphscale.config (config) imports graphscale.cli (cli)"]
    inside = {"graphscale.data.graph": {"graphscale.data.handle"}, "graphscale.registry": {"graphscale.data.handle"}}
    assert upward_imports(inside) == ["graphscale.data.graph (data) imports graphscale.data.handle (partition)",
                                      "graphscale.registry (config) imports graphscale.data.handle (partition)"]
    assert cycles(graph) == [["graphscale.cli", "graphscale.config"], ["graphscale.data.a", "graphscale.data.b"]]


def test_every_module_imports():
    """Each module imports on its own (a moved helper left behind would fail here, not in a rarely run path)."""
    import importlib

    for module in sorted(module_files()):
        if module != "graphscale.__main__":
            importlib.import_module(module)


def imported_names(roots: list[Path]) -> list[tuple[str, int, str, str]]:
    """``(file, line, module, name)`` of every ``from graphscale... import name`` in the files under ``roots``,
    imports inside functions included."""
    out = []
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith(
                        "graphscale"):
                    out += [(str(path), node.lineno, node.module, alias.name) for alias in node.names]
    return out


def missing_names(imports: list[tuple[str, int, str, str]]) -> list[str]:
    """The imports whose name is neither defined in its module nor a submodule of it."""
    import importlib
    import importlib.util

    missing = []
    for path, line, module, name in imports:
        target = importlib.import_module(module)
        submodule = hasattr(target, "__path__") and importlib.util.find_spec(f"{module}.{name}") is not None
        if not hasattr(target, name) and not submodule:
            missing.append(f"{path}:{line}: from {module} import {name}")
    return missing


def test_every_imported_name_exists():
    """Every ``from graphscale.X import Y`` in the package and the tests names something ``X`` defines (or a
    submodule): a name moved to another module and left imported from its old place inside a function, which only
    a rarely run path would execute, fails here."""
    tests = Path(__file__).parent
    assert missing_names(imported_names([ROOT, tests])) == []
    assert missing_names([("x.py", 1, "graphscale.config", "no_such_name")]) == [
        "x.py:1: from graphscale.config import no_such_name"]
