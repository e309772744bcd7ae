"""The size of the public surface and of the seams between modules, counted from the source.

Public names: the names in ``tokenwire.__all__`` plus each public submodule's ``__all__``; a name
re-exported in two places counts once per object (an import is followed to where the object is
defined). Private cross-module imports: each distinct (importing module, imported module, name)
over the package's ``.py`` files where the name starts with ``_`` and is not a dunder; a module
imported by name (``from tokenwire import _oob``) is such a name. Read with ``ast``: nothing is
imported, so the counts do not depend on the extras installed."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path
from typing import Optional

PACKAGE = Path(__file__).resolve().parent.parent / "tokenwire"
API_REFERENCE = PACKAGE.parent / "docs" / "api"

MAX_PUBLIC_NAMES = 40
MAX_PRIVATE_IMPORTS = 15


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, ast.Module]:
    """Every .py module of the package (subpackages too), by dotted name."""
    return {_module_name(p): ast.parse(p.read_text(), str(p))
            for p in sorted(PACKAGE.rglob("*.py"))}


def _is_public_module(name: str) -> bool:
    return not any(part.startswith("_") for part in name.split("."))


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _resolve(module: str, node: ast.ImportFrom) -> Optional[str]:
    """The absolute module an ``ImportFrom`` in `module` names (relative imports resolved)."""
    if not node.level:
        return node.module
    base = module.split(".")
    package = base if module in _PACKAGES else base[:-1]
    base = package[:len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


_PACKAGES = {_module_name(p.parent / "__init__.py")
             for p in PACKAGE.rglob("__init__.py")}


def _all(tree: ast.Module) -> Optional[list[str]]:
    """The literal ``__all__`` of a module (None when it declares none)."""
    for node in tree.body:
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            return [ast.literal_eval(e) for e in value.elts]  # type: ignore[attr-defined]
    return None


def _origin(modules: dict[str, ast.Module], module: str, name: str,
            seen: frozenset[tuple[str, str]] = frozenset()) -> tuple[str, str]:
    """Where `module.name` is defined: module-level ``from X import Y [as name]`` lines are
    followed into the package's own .py modules (a name from the compiled core, or from
    outside, is its own origin: ``(X, Y)``)."""
    if (module, name) in seen or module not in modules:
        return module, name
    for node in modules[module].body:
        if isinstance(node, ast.ImportFrom):
            source = _resolve(module, node)
            for alias in node.names:
                if (alias.asname or alias.name) == name and source:
                    return _origin(modules, source, alias.name, seen | {(module, name)})
    return module, name


def _public_paths() -> dict[tuple[str, str], list[str]]:
    """Each public object (its origin) and the public paths that name it."""
    modules = _modules()
    paths: dict[tuple[str, str], list[str]] = defaultdict(list)
    for module, tree in modules.items():
        if not _is_public_module(module):
            continue
        for name in _all(tree) or ():
            paths[_origin(modules, module, name)].append(f"{module}.{name}")
    return dict(paths)


def _private_imports() -> set[tuple[str, str, str]]:
    """(importing module, imported module, name) for every private name one module of the
    package imports from another, at any depth of the module (function bodies included)."""
    found = set()
    for module, tree in _modules().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                source = _resolve(module, node)
                if not source or source.split(".")[0] != "tokenwire":
                    continue
                for alias in node.names:
                    if _private(alias.name):
                        found.add((module, source, alias.name))
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    parts = alias.name.split(".")
                    if parts[0] == "tokenwire" and len(parts) > 1 and _private(parts[-1]):
                        found.add((module, ".".join(parts[:-1]), parts[-1]))
    return {f for f in found if f[0] != f"{f[1]}.{f[2]}"}


def _per_module(rows: list[str]) -> str:
    counts: dict[str, int] = defaultdict(int)
    for row in rows:
        counts[row.split(" ")[0]] += 1
    return ", ".join(f"{m} {n}" for m, n in sorted(counts.items()))


def test_public_names_at_most_40() -> None:
    paths = _public_paths()
    listing = sorted(p for names in paths.values() for p in names)
    by_module = defaultdict(list)
    for origin, names in paths.items():
        by_module[names[0].rsplit(".", 1)[0]].append(origin)
    report = (f"{len(paths)} public names (limit {MAX_PUBLIC_NAMES}); per module: "
              + ", ".join(f"{m} {len(o)}" for m, o in sorted(by_module.items()))
              + "\n" + "\n".join(listing))
    print(report)
    assert len(paths) <= MAX_PUBLIC_NAMES, report


def test_private_cross_module_imports_at_most_15() -> None:
    found = sorted(_private_imports())
    rows = [f"{importer} <- {source}.{name}" for importer, source, name in found]
    report = (f"{len(found)} private cross-module imports (limit {MAX_PRIVATE_IMPORTS}); "
              f"per importing module: {_per_module(rows)}\n" + "\n".join(rows))
    print(report)
    assert len(found) <= MAX_PRIVATE_IMPORTS, report


def test_each_public_name_has_one_public_path() -> None:
    """No object is public under two names or in two modules (tokenwire.X and tokenwire.m.X),
    and every name of a public ``__all__`` is defined or imported by its module."""
    paths = _public_paths()
    twice = {origin: names for origin, names in paths.items() if len(names) > 1}
    assert twice == {}
    modules = _modules()
    for module, tree in modules.items():
        if not _is_public_module(module):
            continue
        bound = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                bound.add(node.name)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                bound |= {(a.asname or a.name).split(".")[0] for a in node.names}
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                bound.add(node.id)
        missing = set(_all(tree) or ()) - bound
        assert not missing, f"{module}.__all__ names what it does not define: {sorted(missing)}"


def test_the_counts_follow_re_exports_and_see_nested_imports(tmp_path: Path) -> None:
    """The counter itself: a re-export is one object, a private import inside a function
    counts, a dunder does not."""
    tree = ast.parse("from tokenwire._core import TokenVector as T\n__all__ = ['T']\n")
    modules = {"tokenwire": tree, "tokenwire.x": ast.parse(
        "from tokenwire import T\n__all__ = ['T']\n")}
    assert _origin(modules, "tokenwire.x", "T") == ("tokenwire._core", "TokenVector")
    assert _origin(modules, "tokenwire", "T") == ("tokenwire._core", "TokenVector")
    nested = ast.parse("def f():\n    from tokenwire.errors import _describe\n")
    names = {a.name for n in ast.walk(nested) if isinstance(n, ast.ImportFrom) for a in n.names}
    assert names == {"_describe"} and _private("_describe")
    assert not _private("__version__") and not _private("find_class")


def test_the_api_reference_documents_each_public_name_and_no_other() -> None:
    """docs/api/index.rst, which Sphinx builds: each public name has its own ``auto*``
    directive or is in the ``__all__`` of a module documented whole (``automodule`` documents
    ``__all__`` unless told otherwise), and every directive names a public path."""
    text = (API_REFERENCE / "index.rst").read_text()
    directives = re.findall(r"^\.\. auto(\w+):: ([\w.]+)\n((?:   :.*\n)*)", text, flags=re.M)
    whole = {name for kind, name, options in directives
             if kind == "module" and ":no-members:" not in options}
    named = {name for kind, name, _ in directives if kind != "module"}
    modules = {name for kind, name, _ in directives if kind == "module"}
    public = {path for paths in _public_paths().values() for path in paths}
    assert "ignore-module-all" not in (API_REFERENCE / "conf.py").read_text()
    missing = sorted(p for p in public if p not in named and p.rsplit(".", 1)[0] not in whole)
    assert missing == [], f"public names the API reference leaves out: {missing}"
    assert sorted(named - public) == [], "the API reference documents names that are not public"
    assert all(_is_public_module(m) and m in _modules() for m in modules), sorted(modules)

