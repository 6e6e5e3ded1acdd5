"""The grader is one pipeline that flows one way: intake, tasks, backend, result, sinks. A cycle among its modules
(even one closed only by an import inside a function) means two modules cannot be read, tested or reused apart,
and a second entry point would have to enter the knot. A private name (``_x``) imported from another module is a
hidden interface. And what learners install (``attention_course``) must not depend on the instructor's grader.

The graph is read from the source with ``ast``, not by importing: every ``import`` and ``from ... import``
anywhere in a module (inside functions and ``if TYPE_CHECKING:`` blocks too), relative imports resolved against
the module's package, and ``from package import name`` counted as an import of the submodule when ``name`` is
one."""
from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("autograder", "attention_course")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            found[module_name(path)] = path
    return found


def is_package(name: str, known: dict[str, Path]) -> bool:
    return known[name].name == "__init__.py"


def imports(name: str, known: dict[str, Path]) -> list[tuple[str, str | None, int]]:
    """(imported module, imported attribute or None, line) for every import statement anywhere in ``name``."""
    tree = ast.parse(known[name].read_text(encoding="utf-8"), filename=str(known[name]))
    package = name if is_package(name, known) else name.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, None, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                submodule = f"{target}.{alias.name}"
                if submodule in known:
                    found.append((submodule, None, node.lineno))
                else:
                    found.append((target, alias.name, node.lineno))
    return found


def internal(target: str, known: dict[str, Path]) -> str | None:
    """The module of ours that importing ``target`` loads last (``a.b.c`` loads ``a``, ``a.b`` and ``a.b.c``;
    the graph keeps the edge to the deepest one that exists), or None for a third-party module."""
    parts = target.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in known:
            return candidate
    return None


def graph() -> dict[str, set[str]]:
    known = modules()
    edges: dict[str, set[str]] = {name: set() for name in known}
    for name in known:
        for target, _attribute, _line in imports(name, known):
            ours = internal(target, known)
            if ours is not None and ours != name:
                edges[name].add(ours)
    return edges


def knots(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan): each module of one reaches every
    other."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(edges[node]):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return sorted(components)


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """One cycle through each knot."""
    return [one_cycle(component, edges) for component in knots(edges)]


def one_cycle(component: list[str], edges: dict[str, set[str]]) -> list[str]:
    """A shortest cycle through the component's first module, to print: ``a -> b -> a``."""
    members = set(component)
    start = component[0]
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for successor in sorted(edges[node] & members):
                if successor == start:
                    return paths[node] + [start]
                if successor not in paths:
                    paths[successor] = paths[node] + [successor]
                    following.append(successor)
        frontier = following
    raise AssertionError(f"{component} is not strongly connected")


def test_the_graph_sees_function_level_relative_and_package_imports(tmp_path, monkeypatch):
    """The reader itself: a cycle closed only inside a function, through ``from . import x`` in a package, is
    found; so is a private name imported from a sibling."""
    package = tmp_path / "autograder"
    (package / "inner").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from . import b\n")
    (package / "b.py").write_text("def f():\n    from .inner import c\n    return c._secret\n")
    (package / "inner" / "__init__.py").write_text("")
    (package / "inner" / "c.py").write_text("from ..a import _hidden\nimport os\n")
    (tmp_path / "attention_course").mkdir()
    (tmp_path / "attention_course" / "__init__.py").write_text("")
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    assert cycles(graph()) == [["autograder.a", "autograder.b", "autograder.inner.c", "autograder.a"]]
    assert sorted(private_imports()) == ["autograder.b:3 uses _secret of autograder.inner.c",
                                         "autograder.inner.c:1 imports _hidden from autograder.a"]


def module_aliases(name: str, known: dict[str, Path]) -> dict[str, str]:
    """{local name: our module} for the modules ``name`` binds as a whole (``from . import x``, ``import a.b as
    c``), whose attributes it can then reach (``x._private``)."""
    tree = ast.parse(known[name].read_text(encoding="utf-8"))
    package = name if is_package(name, known) else name.rpartition(".")[0]
    bound = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname and alias.name in known:
                    bound[alias.asname] = alias.name
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")
            base = base[:len(base) - (node.level - 1)] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:
                if f"{target}.{alias.name}" in known:
                    bound[alias.asname or alias.name] = f"{target}.{alias.name}"
    return bound


def private_imports() -> list[str]:
    known = modules()
    found = []
    for name in known:
        aliases = module_aliases(name, known)
        for node in ast.walk(ast.parse(known[name].read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                    and aliases[node.value.id] != name and node.attr.startswith("_")
                    and not node.attr.startswith("__")):
                found.append(f"{name}:{node.lineno} uses {node.attr} of {aliases[node.value.id]}")
        for target, attribute, line in imports(name, known):
            ours = internal(target, known)
            if ours is None or ours == name:
                continue
            names = [attribute] if attribute else []
            names += [part for part in target.split(".")[len(ours.split(".")):]]
            hidden = [part for part in names + ours.split(".") if part.startswith("_") and not part.startswith("__")]
            if hidden:
                found.append(f"{name}:{line} imports {'.'.join(hidden)} from {ours}")
    return found


def test_no_import_cycle():
    edges = graph()
    found = [f"{len(knot)} modules ({', '.join(knot)}), e.g. {' -> '.join(one_cycle(knot, edges))}"
             for knot in knots(edges)]
    assert not found, "import cycles:\n" + "\n".join(found)


def test_no_private_name_crosses_a_module():
    found = private_imports()
    assert not found, "private names imported from another module:\n" + "\n".join(found)


def test_the_learner_package_needs_nothing_of_the_grader():
    known = modules()
    found = [f"{name}:{line} imports {target}"
             for name in known if name.split(".")[0] == "attention_course"
             for target, _attribute, line in imports(name, known) if target.split(".")[0] == "autograder"]
    assert not found, "\n".join(found)
