"""The project's import graph, read from the source: every import statement wherever it stands
(module level or inside a function), `importlib.import_module("...")` and `__import__("...")`
with a literal name, relative imports resolved, and the parent packages a submodule import runs.

Used by `test_contracts.py` to check that layers run one way.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Top-level folders mapped onto `monarch.*` packages (pyproject's package-dir).
FOLDERS = {"monarch": "monarch", "telemetry": "monarch.telemetry",
           "console": "monarch.console", "cli": "monarch.cli"}


def module_files(root: Path = ROOT) -> dict[str, Path]:
    """Module name -> source file, for every module of the installed package."""
    found: dict[str, Path] = {}
    for folder, package in FOLDERS.items():
        for path in sorted((root / folder).rglob("*.py")):
            parts = list(path.relative_to(root / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([package, *parts])] = path
    return found


def _is_package(name: str, path: Path) -> bool:
    return path.name == "__init__.py"


def _literal_import_call(node: ast.Call) -> str | None:
    """The module named by `importlib.import_module("x")` / `__import__("x")`, if literal."""
    func = node.func
    named = (isinstance(func, ast.Attribute) and func.attr == "import_module") or (
        isinstance(func, ast.Name) and func.id in ("import_module", "__import__"))
    if named and node.args and isinstance(node.args[0], ast.Constant) \
            and isinstance(node.args[0].value, str):
        return node.args[0].value
    return None


def raw_imports(name: str, path: Path) -> set[str]:
    """Absolute dotted names a module imports (a name may be a module or an attribute)."""
    package = name if _is_package(name, path) else name.rpartition(".")[0]
    found: set[str] = set()
    for node in _running_nodes(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Call):
            literal = _literal_import_call(node)
            if literal:
                found.add(literal)
    return found


def _running_nodes(tree: ast.AST) -> Iterable[ast.AST]:
    """Every node of `tree` but those under `if TYPE_CHECKING:` (imports a checker reads and
    Python never runs)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                stack.extend(child.orelse)
                continue
            stack.append(child)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _with_parents(name: str) -> Iterable[str]:
    parts = name.split(".")
    for i in range(1, len(parts) + 1):
        yield ".".join(parts[:i])


def graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the project modules importing it runs (their parent packages included, but
    not the module's own: those are being imported already when it runs, as a package's
    `__init__` that imports its own modules)."""
    files = module_files(root)
    edges: dict[str, set[str]] = {}
    for name, path in files.items():
        own = set(_with_parents(name.rpartition(".")[0])) if "." in name else set()
        targets: set[str] = set()
        for imported in raw_imports(name, path):
            for candidate in _with_parents(imported):
                if candidate in files and candidate != name and candidate not in own:
                    targets.add(candidate)
        edges[name] = targets
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(start: str) -> None:
        nonlocal counter
        work = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return sorted(found)


def reachable(edges: dict[str, set[str]], start: str) -> set[str]:
    """Every module that importing `start` imports, directly or not."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        for child in edges.get(todo.pop(), ()):
            if child not in seen:
                seen.add(child)
                todo.append(child)
    return seen
