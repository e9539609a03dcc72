"""The package's shape: stage packages, small modules, no import cycles, no method named outside methods/."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

SRC = Path(__file__).resolve().parent.parent / "src" / "mathneuro"
MAX_LINES = 420  # "about 400"
#: The stage packages from the bottom up: a package imports only packages before it (no arrow runs back up).
STAGES = ("util", "models", "data", "statistics", "methods", "edit", "evaluation", "eval_tasks", "results", "pipeline",
          "report", "cli")


def _module_name(path: Path) -> str:
    parts = ("mathneuro", *path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _sources() -> dict[str, tuple[Path, ast.Module]]:
    return {_module_name(p): (p, ast.parse(p.read_text())) for p in sorted(SRC.rglob("*.py"))}


def _imported(node: ast.AST, module: str, is_package: bool, known: set[str]) -> list[str]:
    """Project modules one import statement executes: ``from a.b import c`` is ``a.b.c`` when that is a
    module, else ``a.b``."""
    out = []
    if isinstance(node, ast.Import):
        out = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:  # relative: resolve against this module's package
            package = module if is_package else module.rpartition(".")[0]
            for _ in range(node.level - 1):
                package = package.rpartition(".")[0]
            base = f"{package}.{base}" if base else package
        out = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
    return [m for m in out if m in known]


def _module_level_imports(tree: ast.Module):
    """Import statements run when the module is imported (top level, and inside if/try at top level)."""
    todo = list(tree.body)
    while todo:
        node = todo.pop(0)
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, (ast.If, ast.Try)):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                continue
            todo.extend(node.body + getattr(node, "orelse", []) + getattr(node, "finalbody", []))
            for handler in getattr(node, "handlers", []):
                todo.extend(handler.body)


def test_the_top_level_holds_only_the_stage_packages():
    top = sorted(p.name for p in SRC.iterdir() if not p.name.startswith(("__pycache__", ".")))
    files = [n for n in top if n.endswith(".py")]
    folders = [n for n in top if (SRC / n).is_dir() and n != "conf"]
    assert files == ["__init__.py", "__main__.py"]
    assert set(folders) == set(STAGES)


def test_no_module_is_large():
    sizes = {str(p.relative_to(SRC)): len(p.read_text().splitlines()) for p in SRC.rglob("*.py")}
    assert {name: n for name, n in sizes.items() if n > MAX_LINES} == {}


def test_no_import_cycles():
    sources = _sources()
    known = set(sources)
    graph = {
        name: {dep for node in _module_level_imports(tree)
               for dep in _imported(node, name, path.name == "__init__.py", known) if dep != name}
        for name, (path, tree) in sources.items()
    }
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                cycles.append(stack[stack.index(dep):] + [dep])
            elif dep not in state:
                visit(dep)
        stack.pop()
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name)
    assert [" -> ".join(c) for c in cycles] == []


def _stage(module: str) -> str | None:
    """The stage package of ``mathneuro.<stage>...``; None for the top-level modules."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in STAGES else None


def _all_imports(tree: ast.Module):
    """Every import statement of a module, deferred and TYPE_CHECKING ones too: each is an arrow."""
    return (node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom)))


def test_no_arrow_runs_back_up_the_stages():
    """A stage imports only the stages below it (:data:`STAGES`, docs/contracts.md), deferred imports included."""
    sources = _sources()
    known = set(sources)
    back_up = []
    for name, (path, tree) in sources.items():
        here = _stage(name)
        if here is None:
            continue
        for node in _all_imports(tree):
            for dep in _imported(node, name, path.name == "__init__.py", known):
                there = _stage(dep)
                if there is not None and STAGES.index(there) > STAGES.index(here):
                    back_up.append(f"{name}:{node.lineno} imports {dep} ({here} -> {there})")
    assert back_up == []


def test_no_private_name_is_imported_across_packages():
    """``from mathneuro.a.b import _x`` in another package reaches into a module's insides: a name that is
    really shared is public (no underscore) where it is defined."""
    bad = []
    for name, (path, tree) in _sources().items():
        for node in _all_imports(tree):
            if not isinstance(node, ast.ImportFrom) or node.level or not (node.module or "").startswith("mathneuro"):
                continue
            if _stage(node.module) == _stage(name):
                continue
            bad += [f"{path.relative_to(SRC)}:{node.lineno}: {a.name} from {node.module}" for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__")]
    assert bad == []


def test_no_function_local_imports_of_the_project_except_deferred_heavy_dependencies():
    """A project module imported inside a function hides an import cycle; the only excuse is a heavy
    dependency that most runs never need, which the statement says in a ``# deferred: why`` comment."""
    bad = []
    for path, tree in _sources().values():
        lines = path.read_text().splitlines()
        for func in ast.walk(tree):
            if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(func):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("mathneuro") or (
                        isinstance(node, ast.Import) and any(a.name.startswith("mathneuro") for a in node.names)):
                    text = "\n".join(lines[node.lineno - 1:node.end_lineno])
                    if "# deferred:" not in text:
                        bad.append(f"{path.relative_to(SRC)}:{node.lineno}: {lines[node.lineno - 1].strip()}")
    assert bad == []


def _builtin_method_names() -> set[str]:
    from mathneuro.methods.registry import BUILTIN_METHODS

    return set(BUILTIN_METHODS)


def _mentions_a_method(node: ast.AST) -> bool:
    """An expression holding a method's name: ``cfg.method.name``, ``selection.method``, ``point.get("method")``,
    ``point["method"]``, or a variable ``method`` / ``method_name`` (a string constant alone is not one)."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute) and (sub.attr == "method" or (
                sub.attr == "name" and isinstance(sub.value, ast.Attribute) and sub.value.attr == "method")):
            return True
        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and sub.func.attr == "get" and any(
                isinstance(a, ast.Constant) and a.value == "method" for a in sub.args[:1]):
            return True
        if isinstance(sub, ast.Subscript) and isinstance(sub.slice, ast.Constant) and sub.slice.value == "method":
            return True
        if isinstance(sub, ast.Name) and sub.id in ("method", "method_name"):
            return True
    return False


def test_no_module_outside_methods_compares_a_method_name():
    """Facts about a method live on its spec (methods/<name>.py); the generic stages read them and never
    test which method runs, so a user's method is as first-class as a built-in one."""
    names = _builtin_method_names()
    bad = []
    for name, (path, tree) in _sources().items():
        if name.startswith("mathneuro.methods"):
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.Compare):
                continue
            operands = [node.left, *node.comparators]
            literal = [ast.unparse(o) for o in operands for c in ast.walk(o)
                       if isinstance(c, ast.Constant) and c.value in names]
            by_name = any(isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)) for op in node.ops) and any(
                _mentions_a_method(o) for o in operands) and not all(
                isinstance(o, ast.Constant) and o.value is None for o in node.comparators)
            if literal or by_name:
                bad.append(f"{path.relative_to(SRC)}:{node.lineno}: {ast.unparse(node)}")
    assert bad == []


def _mentions_an_intervention(node: ast.AST) -> bool:
    """An expression holding an intervention's name: ``cfg.intervention.name``, ``point.get("intervention")``,
    ``point["intervention"]``, ``spec.name`` of an intervention spec (``ispec`` / ``intervention_spec``)."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute) and sub.attr == "name" and isinstance(sub.value, ast.Attribute) and \
                sub.value.attr == "intervention":
            return True
        if isinstance(sub, ast.Attribute) and sub.attr == "name" and isinstance(sub.value, ast.Name) and \
                sub.value.id in ("ispec", "intervention_spec"):
            return True
        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and sub.func.attr == "get" and any(
                isinstance(a, ast.Constant) and a.value == "intervention" for a in sub.args[:1]):
            return True
        if isinstance(sub, ast.Subscript) and isinstance(sub.slice, ast.Constant) and sub.slice.value == "intervention":
            return True
    return False


def test_no_module_outside_the_interventions_compares_an_intervention_name():
    """Facts about an intervention live on its spec (edit/interventions/<name>.py): the runner, the config
    checks and the reports never test which intervention runs, so a user's intervention is as first-class
    as a built-in one (``intervention.name=pkg.mod:fn``)."""
    from mathneuro.edit.interventions.registry import BUILTIN_INTERVENTIONS

    names = set(BUILTIN_INTERVENTIONS)
    bad = []
    for name, (path, tree) in _sources().items():
        if name.startswith("mathneuro.edit.interventions"):
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.Compare):
                continue
            operands = [node.left, *node.comparators]
            literal = [c for o in operands for c in ast.walk(o) if isinstance(c, ast.Constant) and c.value in names]
            strings = [o for o in operands if (isinstance(o, ast.Constant) and isinstance(o.value, str)) or (
                isinstance(o, (ast.Tuple, ast.List, ast.Set)) and any(isinstance(e, ast.Constant) for e in o.elts))]
            by_name = bool(strings) and any(_mentions_an_intervention(o) for o in operands)
            if literal or by_name:
                bad.append(f"{path.relative_to(SRC)}:{node.lineno}: {ast.unparse(node)}")
    assert bad == []


@pytest.mark.integration  # a subprocess: a fresh interpreter's sys.modules
def test_runner_imports_nothing_from_the_report_layer():
    code = ("import sys, mathneuro.pipeline.runner, mathneuro.cli.run; "
            "print(sorted(m for m in sys.modules if m.startswith(('mathneuro.report', 'matplotlib'))))")
    out = subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_module_paths_of_0_1_are_gone():
    """0.2 moved and renamed modules (CHANGELOG.md lists each); no alias keeps an old path importable."""
    import importlib.util

    import mathneuro.cli
    import mathneuro.results

    for old in ("mathneuro.runner", "mathneuro.report_cli", "mathneuro.intervention", "mathneuro.pipeline.results",
                "mathneuro.pipeline.cli", "mathneuro.edit.intervention", "mathneuro.evaluation.tasks"):
        assert importlib.util.find_spec(old) is None, old
    assert not hasattr(mathneuro.cli, "main") and not hasattr(mathneuro.results, "PointResult")


def test_a_points_identity_fields_are_written_down_once():
    """``POINT_FIELDS`` (and what pairing needs of it) live in results/schema.py; no other module spells the
    identity out again as a literal tuple of the same names, in any order."""
    from mathneuro.results.schema import PAIRING_FIELDS, POINT_FIELDS

    assert set(PAIRING_FIELDS) == set(POINT_FIELDS) - {"method", "seed"} | {"intervention_args"}
    identity = set(POINT_FIELDS)
    again = []
    for name, (path, tree) in _sources().items():
        if name == "mathneuro.results.schema":
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Tuple) and all(isinstance(e, ast.Constant) for e in node.elts) and (
                    {e.value for e in node.elts} in (identity, set(PAIRING_FIELDS), set(PAIRING_FIELDS) | {"seed"})):
                again.append(f"{path.relative_to(SRC)}:{node.lineno}")
    assert again == []


def _marked_integration(node: ast.AST) -> bool:
    return any("integration" in ast.unparse(d) for d in getattr(node, "decorator_list", []))


def test_tests_that_start_processes_are_in_the_integration_tier():
    """A test that starts a process (the CLI, bash, a fresh interpreter) belongs in ``make test-integration``,
    so ``make test-unit`` stays in-process and fast."""
    modules = {path: ast.parse(path.read_text()) for path in sorted((SRC.parent.parent / "tests").glob("*.py"))}
    functions = [(path, fn) for path, tree in modules.items() for fn in tree.body if isinstance(fn, ast.FunctionDef)]
    spawners = {fn.name for _, fn in functions if any(
        isinstance(a, ast.Attribute) and getattr(a.value, "id", None) == "subprocess" for a in ast.walk(fn))}
    grew = True
    while grew:  # helpers (of any test module) that call a helper that starts a process start one too
        calls = {fn.name for _, fn in functions if fn.name not in spawners and any(
            isinstance(c, ast.Call) and getattr(c.func, "id", None) in spawners for c in ast.walk(fn))}
        grew = bool(calls)
        spawners |= calls
    unmarked = []
    for path, fn in functions:
        module_marked = any(isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "pytestmark" for t in n.targets)
                            and "integration" in ast.unparse(n.value) for n in modules[path].body)
        if fn.name.startswith("test_") and fn.name in spawners and not (module_marked or _marked_integration(fn)):
            unmarked.append(f"{path.name}::{fn.name}")
    assert unmarked == []


def test_the_library_never_imports_the_experiments_code():
    """experiments/claims/claimslib serves the claims scripts and the tests only: no module under src imports it."""
    importers = set()
    for name, (_, tree) in _sources().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                roots = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                roots = [(node.module or "").split(".")[0]]
            else:
                continue
            if {"claimslib", "experiments"} & set(roots):
                importers.add(name)
    assert importers == set()


def test_the_experiments_top_level_holds_only_folders_and_its_two_pages():
    experiments = SRC.parents[1] / "experiments"
    files = sorted(p.name for p in experiments.iterdir() if p.is_file())
    assert files == ["ANALYSIS_PLAN.md", "README.md"]
