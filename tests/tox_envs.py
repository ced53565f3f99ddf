"""Which tox environment runs which test module: tox.ini's pytest commands (their paths and `-m`
expressions, pyproject's addopts and testpaths as defaults) against each module's marks, read from
its source without importing it (tests/test_collection.py asserts that every module runs somewhere).

A module is collected by an environment when one of the environment's pytest commands reaches its
path and one of its tests' marks satisfies the command's `-m` expression, and the environment has
every engine the test needs. An engine is a name `tox.ini` requires with `LOOPCERT_REQUIRE_<NAME>=1`
(mlx, llamacpp, openvino, vllm, ray): a test needs it when it is marked with it, or when its module
skips itself without it at import (`require_<name>()` from the tests' helpers, or
`pytest.importorskip` of a module whose name contains the engine's). An environment without the
engine only skips such a module, so it does not count.

The marks are read statically: `pytestmark` at module level, `@pytest.mark.X` on test functions,
their classes and module-level aliases of marks, and `pytest.param(..., marks=...)` in literal
`parametrize` lists. Marks added at run time by hooks are not seen (tests/conftest.py adds a skip
to gpu tests without CUDA, which the `gpu` mark already selects).
"""

from __future__ import annotations

import ast
import configparser
import re
import shlex
import sys
from dataclasses import dataclass
from itertools import product
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pytest depends on tomli below 3.11
    import tomli as tomllib

# pytest wrappers tox.ini runs, which pass their arguments on to pytest
PYTEST_WRAPPERS = (".ci/capabilities.py",)
# pytest options whose value is the next argument and selects nothing this module models
VALUE_OPTIONS = {"-p", "-c", "-o", "-W", "--rootdir", "--import-mode", "--confcutdir", "--basetemp", "-n"}
# options that select tests in a way this module does not model: tox.ini using one is an error
UNMODELLED = {"-k", "--ignore", "--ignore-glob", "--deselect", "--lf", "--last-failed", "--ff", "--sw"}
SKIP_DIRS = {"build", "dist", "__pycache__", "node_modules"}


@dataclass(frozen=True)
class PytestRun:
    """One pytest command of a tox environment."""

    env: str
    paths: tuple[str, ...]  # posix paths relative to the root (pyproject's testpaths when none given)
    markexpr: str | None  # the `-m` expression in force (the command's, else addopts'), None: all
    engines: frozenset[str]  # the environment's LOOPCERT_REQUIRE_<NAME>=1, lower case
    args: tuple[str, ...]  # what pytest receives (posargs at their defaults)


@dataclass(frozen=True)
class ModuleMarks:
    """A test module's tests as the sets of marks they carry, and the engines it skips without."""

    path: str  # posix, relative to the root
    variants: frozenset[frozenset[str]]  # one set of marks per distinct kind of test item
    skips_without: frozenset[str]  # engines whose absence skips the whole module at import


# --- tox.ini and pyproject ---------------------------------------------------------------------


def _pytest_defaults(root: Path) -> tuple[tuple[str, ...], str | None]:
    """pyproject's testpaths and the `-m` of its addopts."""
    path = root / "pyproject.toml"
    if not path.exists():
        return (), None
    ini = tomllib.loads(path.read_text()).get("tool", {}).get("pytest", {}).get("ini_options", {})
    addopts = ini.get("addopts", "")
    markexpr = None
    args = shlex.split(addopts) if isinstance(addopts, str) else list(addopts)
    for i, arg in enumerate(args):
        if arg == "-m":
            markexpr = args[i + 1]
    return tuple(ini.get("testpaths", ())), markexpr


def _key(cfg: configparser.ConfigParser, env: str, key: str) -> str:
    """A testenv key with tox's fallback to [testenv], and its `{[testenv]key}` references filled in."""
    section = f"testenv:{env}"
    if cfg.has_section(section) and cfg.has_option(section, key):
        value = cfg.get(section, key)
    elif cfg.has_section("testenv") and cfg.has_option("testenv", key):
        value = cfg.get("testenv", key)
    else:
        return ""
    return re.sub(r"\{\[testenv\](\w+)\}", lambda m: cfg.get("testenv", m.group(1), fallback=""), value)


def _lines(value: str) -> list[str]:
    return [ln.strip() for ln in value.splitlines() if ln.strip() and not ln.strip().startswith("#")]


def _engines(set_env: str) -> frozenset[str]:
    found = set()
    for line in _lines(set_env):
        name, _, value = line.partition("=")
        name = name.strip()
        if name.startswith("LOOPCERT_REQUIRE_") and value.strip() == "1":
            found.add(name.removeprefix("LOOPCERT_REQUIRE_").lower())
    return frozenset(found)


def _pytest_args(argv: list[str]) -> list[str] | None:
    """The arguments pytest receives from one command line, or None when it does not run pytest."""
    if argv[:1] == ["pytest"]:
        return argv[1:]
    if argv[:1] and re.fullmatch(r"python[\d.]*", argv[0]):
        if argv[1:3] == ["-m", "pytest"]:
            return argv[3:]
        if argv[1:2] and argv[1] in PYTEST_WRAPPERS:
            return argv[2:]
    return None


def _run(env: str, args: list[str], engines: frozenset[str], testpaths, markexpr) -> PytestRun:
    paths, i = [], 0
    while i < len(args):
        arg = args[i]
        if arg in UNMODELLED or arg.split("=")[0] in UNMODELLED:
            raise ValueError(f"tox -e {env}: pytest {arg} selects tests in a way this check does not model")
        if arg == "-m":
            markexpr, i = args[i + 1], i + 2
            continue
        if arg in VALUE_OPTIONS:
            i += 2
            continue
        if not arg.startswith("-"):
            paths.append(arg.split("::")[0].rstrip("/"))
        i += 1
    return PytestRun(env, tuple(paths) or tuple(testpaths), markexpr, engines, tuple(args))


def tox_runs(root: Path) -> list[PytestRun]:
    """Every pytest command of every environment in root/tox.ini, with posargs at their defaults."""
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(root / "tox.ini")
    testpaths, markexpr = _pytest_defaults(root)
    envs = [e.strip() for e in re.split(r"[,\s]+", cfg.get("tox", "envlist", fallback="")) if e.strip()]
    envs += [s.removeprefix("testenv:") for s in cfg.sections() if s.startswith("testenv:")]
    runs = []
    for env in dict.fromkeys(envs):
        engines = _engines(_key(cfg, env, "set_env"))
        for line in _lines(_key(cfg, env, "commands")):
            line = re.sub(r"\{posargs:([^}]*)\}", r"\1", line).replace("{posargs}", "")
            args = _pytest_args(shlex.split(line))
            if args is not None:
                runs.append(_run(env, args, engines, testpaths, markexpr))
    return runs


# --- test modules ------------------------------------------------------------------------------


def module_paths(root: Path) -> list[str]:
    """Every file pytest would take for a test module (test_*.py, *_test.py) under root, outside
    hidden folders (.tox, .venv, .git), build outputs and reports/out."""
    found = []
    for path in root.rglob("*.py"):
        rel = path.relative_to(root)
        hidden = any(p.startswith(".") or p in SKIP_DIRS for p in rel.parts[:-1])
        if hidden or rel.parts[:2] == ("reports", "out"):
            continue
        if rel.name.startswith("test_") or rel.name.endswith("_test.py"):
            found.append(rel.as_posix())
    return sorted(found)


def _is_pytest_mark(node: ast.AST) -> str | None:
    """X for `pytest.mark.X` and `pytest.mark.X(...)`."""
    if isinstance(node, ast.Call):
        node = node.func
    if (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "mark"
        and isinstance(node.value.value, ast.Name)
        and node.value.value.id == "pytest"
    ):
        return node.attr
    return None


def _marks(node: ast.AST | None, aliases: dict[str, frozenset[str]]) -> frozenset[str]:
    if node is None:
        return frozenset()
    if isinstance(node, (ast.List, ast.Tuple)):
        return frozenset().union(*(_marks(e, aliases) for e in node.elts))
    if isinstance(node, ast.Name):
        return aliases.get(node.id, frozenset())
    name = _is_pytest_mark(node)
    return frozenset({name}) if name else frozenset()


def _param_variants(deco: ast.AST, aliases) -> set[frozenset[str]]:
    """The marks each value of a `parametrize` adds (a set with the empty set when its values are
    not a literal list)."""
    if not (isinstance(deco, ast.Call) and _is_pytest_mark(deco) == "parametrize"):
        return {frozenset()}
    values = next((k.value for k in deco.keywords if k.arg == "argvalues"), None)
    if len(deco.args) > 1:
        values = deco.args[1]
    if not isinstance(values, (ast.List, ast.Tuple)) or not values.elts:
        return {frozenset()}
    out = set()
    for value in values.elts:
        is_param = (
            isinstance(value, ast.Call)
            and isinstance(value.func, ast.Attribute)
            and value.func.attr == "param"
            and isinstance(value.func.value, ast.Name)
            and value.func.value.id == "pytest"
        )
        marks = next((k.value for k in value.keywords if k.arg == "marks"), None) if is_param else None
        out.add(_marks(marks, aliases))
    return out


def _variants(decorators: list[ast.expr], base: frozenset[str], aliases) -> set[frozenset[str]]:
    own = base.union(*(_marks(d, aliases) for d in decorators))
    per_decorator = [_param_variants(d, aliases) for d in decorators]
    return {own.union(*combo) for combo in product(*per_decorator)}


def _module_level(tree: ast.Module):
    """Every node of the module's own statements, not inside functions or classes."""
    stack = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


def read_module(root: Path, rel: str, engines: frozenset[str]) -> ModuleMarks:
    """A test module's mark sets and the engines it skips without, read from its source."""
    tree = ast.parse((root / rel).read_text(), filename=rel)
    aliases: dict[str, frozenset[str]] = {}
    module_marks: frozenset[str] = frozenset()
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            marks = _marks(stmt.value, aliases)
            if stmt.targets[0].id == "pytestmark":
                module_marks = marks
            elif marks:
                aliases[stmt.targets[0].id] = marks
    skips = set()
    for node in _module_level(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        if name.startswith("require_") and name.removeprefix("require_") in engines:
            skips.add(name.removeprefix("require_"))
        if name == "importorskip" and node.args and isinstance(node.args[0], ast.Constant):
            top = str(node.args[0].value).split(".")[0].lower()
            skips.update(e for e in engines if e in top)
    variants: set[frozenset[str]] = set()
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name.startswith("test"):
            variants |= _variants(stmt.decorator_list, module_marks, aliases)
        elif isinstance(stmt, ast.ClassDef) and stmt.name.startswith("Test"):
            cls = module_marks.union(*(_marks(d, aliases) for d in stmt.decorator_list))
            for item in stmt.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name.startswith("test"):
                    variants |= _variants(item.decorator_list, cls, aliases)
    return ModuleMarks(rel, frozenset(variants), frozenset(skips))


# --- who collects what -------------------------------------------------------------------------


def _evaluate(expr: str, marks: frozenset[str]) -> bool:
    """pytest's `-m` grammar (names, and, or, not, parentheses) on one set of marks."""

    def ev(node: ast.AST) -> bool:
        if isinstance(node, ast.BoolOp):
            values = [ev(v) for v in node.values]
            return all(values) if isinstance(node.op, ast.And) else any(values)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return not ev(node.operand)
        if isinstance(node, ast.Name):
            return node.id in marks
        raise ValueError(f"-m {expr!r}: {ast.dump(node)} is outside the grammar this check models")

    return ev(ast.parse(expr, mode="eval").body)


def reaches(run: PytestRun, module: ModuleMarks) -> bool:
    return any(module.path == p or module.path.startswith(p + "/") for p in run.paths)


def selects(run: PytestRun, module: ModuleMarks) -> bool:
    """The run's paths reach the module and one of its tests passes the run's `-m` (engines aside)."""
    return reaches(run, module) and any(_passes(run, v) for v in module.variants)


def _passes(run: PytestRun, marks: frozenset[str]) -> bool:
    return run.markexpr is None or _evaluate(run.markexpr, marks)


def collects(run: PytestRun, module: ModuleMarks, engines: frozenset[str]) -> bool:
    """`selects`, for a test whose engines (its engine marks, the module's import skips) the
    environment has."""
    if not reaches(run, module):
        return False
    for marks in module.variants:
        needs = (marks & engines) | module.skips_without
        if needs <= run.engines and _passes(run, marks):
            return True
    return False


def where_tests_run(root: Path) -> dict[str, list[str]]:
    """Every test module under root -> the tox environments that collect it (sorted; [] for none)."""
    runs = tox_runs(root)
    engines = frozenset().union(*(r.engines for r in runs))
    table = {}
    for rel in module_paths(root):
        module = read_module(root, rel, engines)
        table[rel] = sorted({r.env for r in runs if collects(r, module, engines)})
    return table
