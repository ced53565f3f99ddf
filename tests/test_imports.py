"""The import graph runs one way:
refdec <- fastdec <- analysis <- speed <- proofs <- reports <- trainer <- loopcert.

speed (the timing protocol and `loopcert bench`'s measurement) sits below proofs: the
certificate's speed check (proofs.checks.speed) and the regression gates (proofs.gates) time
through it, and it imports nothing of proofs (the decoder results it reads go through
refdec.decode.tokens_of; progress and stamp are refdec's).

Every import statement of every module counts, those inside functions too (a lazy import is
still a dependency, and a lazy import both ways is a cycle that only hides until someone moves
it to the top). A package may import only itself and the packages before it, and no modules
import each other in a circle. No module takes a `_private` name from a module of another
package (`from m import _x`, or `m._x` on an imported module): a name another package needs is
public. Inside proofs/ the subpackages are layered too (PROOFS_LAYERS). `import_graph`,
`violations` and `private_imports` are checked on small trees that break every rule, so each
check can fail.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("refdec", "fastdec", "analysis", "speed", "proofs", "reports", "trainer", "loopcert")
# Inside proofs/: its top-level modules (result, details, record, certificate, prompts) <- stats <-
# decoders <- checks and gates (independent of each other) <- run <- cost. The memory need of
# proofs/cost (need, kv_need) ranks with run: RunModels.load asks it before loading.
PROOFS_LAYERS = (
    "proofs",
    "proofs.stats",
    "proofs.decoders",
    ("proofs.checks", "proofs.gates"),
    ("proofs.run", "proofs.cost.need", "proofs.cost.kv_need"),
    "proofs.cost",
)


def module_files(root: Path, packages=LAYERS) -> dict[str, Path]:
    """Dotted module name -> file, for every .py file of `packages` under `root`."""
    mods = {}
    for pkg in packages:
        for f in sorted((root / pkg).rglob("*.py")):
            parts = f.relative_to(root).with_suffix("").parts
            mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return mods


def package_of(name: str, f: Path) -> str:
    return name if f.name == "__init__.py" else name.rpartition(".")[0]


def from_base(node: ast.ImportFrom, package: str) -> str:
    """The module a `from ... import` reads, relative imports resolved against `package`."""
    base = node.module or ""
    if node.level:  # relative: from the package, up level - 1
        up = package.split(".")[: len(package.split(".")) - node.level + 1]
        base = ".".join(up + ([base] if base else []))
    return base


def import_graph(root: Path, packages=LAYERS) -> dict[str, set[str]]:
    """Module -> the first-party modules it imports. `from p import m` names the submodule
    p.m when there is one, else p itself (its __init__)."""
    mods = module_files(root, packages)
    graph = {}
    for name, f in mods.items():
        package = package_of(name, f)
        targets = set()
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            if isinstance(node, ast.Import):
                wanted = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = from_base(node, package)
                wanted = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            else:
                continue
            for target in wanted:
                while target and target not in mods:  # `import a.b.c` of a function or class
                    target = target.rpartition(".")[0]
                if target and target != name:
                    targets.add(target)
        graph[name] = targets
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while not component or component[-1] != v:
                component.append(stack.pop())
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def layer_rank(module: str, layers) -> int | None:
    """The rank of the layer `module` belongs to: the entry of `layers` (a name, or a tuple of
    names of equal rank) that is its longest dotted prefix; None when none is."""
    best, length = None, -1
    for i, entry in enumerate(layers):
        for name in entry if isinstance(entry, tuple) else (entry,):
            if (module == name or module.startswith(name + ".")) and len(name) > length:
                best, length = i, len(name)
    return best


def violations(graph: dict[str, set[str]], layers=LAYERS) -> dict[str, list]:
    """upward: (module, imported module of a later layer); cycles: modules in a circle. Modules
    of no layer (another package, when `layers` orders one package's subpackages) are left out."""
    rank = {m: layer_rank(m, layers) for m in graph}
    upward = sorted(
        (m, t)
        for m, ts in graph.items()
        for t in ts
        if rank[m] is not None and rank.get(t) is not None and rank[t] > rank[m]
    )
    return {"upward": upward, "cycles": cycles(graph)}


def is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def dotted(node: ast.expr) -> str | None:
    """`a.b.c` of a Name/Attribute chain, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else None


def private_imports(root: Path, packages=LAYERS) -> list[tuple[str, str]]:
    """(module, "module.name") for every `_private` name a module takes from a first-party
    module of another package: `from m import _x`, or `m._x` where m names an imported module."""
    mods = module_files(root, packages)
    found = set()
    for name, f in mods.items():
        package = package_of(name, f)
        tree = ast.parse(f.read_text(), str(f))
        modules: dict[str, str] = {}  # local name -> the first-party module it is bound to
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    modules[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom):
                base = from_base(node, package)
                for a in node.names:
                    if f"{base}.{a.name}" in mods:
                        modules[a.asname or a.name] = f"{base}.{a.name}"
                    elif is_private(a.name) and base in mods and package_of(base, mods[base]) != package:
                        found.add((name, f"{base}.{a.name}"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and is_private(node.attr):
                chain = dotted(node.value)
                if chain is None or chain.split(".")[0] not in modules:
                    continue
                target = ".".join([modules[chain.split(".")[0]], *chain.split(".")[1:]])
                if target in mods and package_of(target, mods[target]) != package:
                    found.add((name, f"{target}.{node.attr}"))
    return sorted(found)


def test_the_import_graph_runs_one_way():
    graph = import_graph(ROOT)
    assert len(graph) > 40 and "refdec.layers" in graph["fastdec.engine"]  # the parse sees the tree
    assert violations(graph) == {"upward": [], "cycles": []}


def test_the_check_finds_an_upward_import_and_a_cycle(tmp_path):
    files = {
        "low/__init__.py": "",
        "low/a.py": "def f():\n    from low import b\n",  # lazy, still an edge
        "low/b.py": "from .a import f\n",  # relative
        "low/c.py": "import high.x\n",  # upward
        "high/__init__.py": "",
        "high/x.py": "from low.a import f\nimport low.c\n",
    }
    for path, text in files.items():
        (tmp_path / path).parent.mkdir(exist_ok=True)
        (tmp_path / path).write_text(text)
    graph = import_graph(tmp_path, ("low", "high"))
    assert graph["high.x"] == {"low.a", "low.c"}
    assert violations(graph, ("low", "high")) == {
        "upward": [("low.c", "high.x")],
        "cycles": [["high.x", "low.c"], ["low.a", "low.b"]],
    }


def test_the_subpackages_of_proofs_run_one_way():
    graph = import_graph(ROOT)
    assert "proofs.stats.exact_laws" in graph["proofs.checks.greedy"]  # the parse sees the subpackages
    assert "proofs.cost.need" in graph["proofs.run.run"] and "proofs.run.run" in graph["proofs.cost.predict"]
    assert violations(graph, PROOFS_LAYERS)["upward"] == []


def test_the_check_finds_an_upward_import_between_subpackages():
    graph = {
        "p.top": set(),
        "p.low.a": {"p.top"},
        "p.mid.b": {"p.low.a", "p.side.c"},  # same rank: fine
        "p.side.c": {"p.high.d"},  # upward
        "p.high.d": {"p.mid.b", "other.x"},  # another package: not ranked here
        "other.x": {"p.high.d"},
    }
    layers = ("p", "p.low", ("p.mid", "p.side"), "p.high")
    assert violations(graph, layers)["upward"] == [("p.side.c", "p.high.d")]
    assert layer_rank("p.top", layers) == 0 and layer_rank("p.lowly", layers) == 0
    assert layer_rank("other.x", layers) is None


def test_no_module_takes_a_private_name_from_another_package():
    assert private_imports(ROOT) == []


def test_the_private_name_check_finds_both_forms(tmp_path):
    files = {
        "low/__init__.py": "",
        "low/a.py": "_hidden = 1\npublic = 2\n",
        "low/b.py": "from low.a import _hidden\nfrom . import a\nx = a._hidden\n",  # same package: fine
        "low/sub/__init__.py": "",
        "low/sub/c.py": "from ..a import _hidden\n",  # a subpackage is another package
        "high/__init__.py": "",
        "high/x.py": "from low.a import _hidden, public, __doc__\n",
        "high/y.py": "import low.a as la\nimport low.b\nla._hidden\nlow.b._cache\nself._own = 1\n",
    }
    for path, text in files.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    assert private_imports(tmp_path, ("low", "high")) == [
        ("high.x", "low.a._hidden"),
        ("high.y", "low.a._hidden"),
        ("high.y", "low.b._cache"),
        ("low.sub.c", "low.a._hidden"),
    ]
