"""Sphinx configuration of the API reference: `sphinx-build -W -b html docs/api build/api`."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path
from typing import Any

import tokenwire

project = "tokenwire"
release = tokenwire.__version__
extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon"]
autodoc_default_options = {"members": True, "undoc-members": True, "imported-members": True,
                           "member-order": "bysource"}
autodoc_typehints = "signature"
html_theme = "alabaster"

# The extension's signatures come from its stubs, tokenwire/_core.pyi (the compiled module's
# embedded signatures carry no types); the sources are the clone's, the module the installed one.
SOURCES = Path(__file__).resolve().parents[2] / "tokenwire"
STUBS = SOURCES / "_core.pyi"


def _stub_signatures() -> dict[str, tuple[str, str | None]]:
    """'TokenVector.frombuffer' -> ('(data)', 'TokenVector') for every def in the stubs."""
    out: dict[str, tuple[str, str | None]] = {}

    def visit(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef):
                visit(node.body, f"{prefix}{node.name}.")
            elif isinstance(node, ast.FunctionDef) and "overload" not in ast.unparse(node):
                args = node.args
                if prefix and args.args and args.args[0].arg in ("self", "cls"):
                    args.args = args.args[1:]
                ret = ast.unparse(node.returns) if node.returns else None
                out[prefix + node.name] = (f"({ast.unparse(args)})", ret)

    visit(ast.parse(STUBS.read_text()).body, "")
    return out


SIGNATURES = _stub_signatures()


def _from_stubs(app: Any, what: str, name: str, obj: Any, options: Any, signature: str | None,
               return_annotation: str | None) -> tuple[str | None, str | None] | None:
    """The signature of an object of tokenwire._core, from the stubs; others are left alone."""
    parts = name.split(".")
    if what == "class":
        return None                  # given in the directive: see _class_signatures
    if what == "method":
        owner, key = _CLASSES.get(parts[-2]), ".".join(parts[-2:])
    else:                            # a re-export (tokenwire.wires.read) by its own name
        owner, key = obj, getattr(obj, "__name__", parts[-1])
    if getattr(owner, "__module__", None) != "tokenwire._core" or key not in SIGNATURES:
        return None
    return SIGNATURES[key]


_CLASSES = {n: getattr(tokenwire._core, n) for n in dir(tokenwire._core)
            if isinstance(getattr(tokenwire._core, n), type)}


def _doc_comments() -> dict[str, list[str]]:
    """NAME -> its `#:` comment, for every module-level NAME assigned in tokenwire's Python and
    Cython sources: a constant is documented where it is defined, also when a public module
    re-exports it."""
    out: dict[str, list[str]] = {}
    for path in sorted([*SOURCES.glob("*.py"), *SOURCES.glob("*.pyx"), *SOURCES.glob("*.pxi")]):
        comment: list[str] = []
        for line in path.read_text().splitlines():
            if line.startswith("#:"):
                comment.append(line[2:].strip())
                continue
            if line.startswith(("cdef ", "    ")):   # a C-level twin the constant is read from
                continue
            match = re.match(r"([A-Z][A-Z0-9_]*)\s*(?::[^=]*)?=", line)
            if match and comment:
                out.setdefault(match.group(1), comment)
            comment = []
    return out


DOC_COMMENTS = _doc_comments()


def _constant_doc(app: Any, what: str, name: str, obj: Any, options: Any,
                  lines: list[str]) -> None:
    if what == "data" and not any(line.strip() for line in lines):
        lines[:] = DOC_COMMENTS.get(name.rsplit(".", 1)[1], [])


def _embedded_signature(app: Any, what: str, name: str, obj: Any, options: Any,
                        lines: list[str]) -> None:
    """Cython's embedded signature line, which autodoc strips only where the documented name is
    the function's own (a re-export as tokenwire.wires.read keeps `read_wire(...)`)."""
    own = getattr(obj, "__name__", None)
    if what == "function" and own and lines and lines[0].startswith(f"{own}("):
        del lines[:2 if len(lines) > 1 and not lines[1].strip() else 1]


def _expand(app: Any, docname: str, source: list[str]) -> None:
    """Two things autodoc does not do for an extension or a re-export: `.. autoclass::
    tokenwire.X` of an extension type gets the signature of `X.__new__` in the stubs, and
    `.. automodule:: M` is followed by an `autodata` for each constant of `M.__all__` that `M`
    imports (autodoc documents only the constants a module assigns)."""
    def with_signature(match: re.Match[str]) -> str:
        found = SIGNATURES.get(f"{match.group(2)}.__new__")
        return match.group(0) + (found[0] if found else "")

    def with_constants(match: re.Match[str]) -> str:
        module = importlib.import_module(match.group(1))
        own = Path(module.__file__ or "").read_text()
        imported = [name for name in getattr(module, "__all__", ()) if name in DOC_COMMENTS
                    and not re.search(rf"^{name}\s*[:=]", own, flags=re.M)]
        return match.group(0) + "".join(f"\n.. autodata:: {match.group(1)}.{name}\n"
                                        for name in imported)

    text = re.sub(r"^(\.\. autoclass:: [\w.]+\.)(\w+)$", with_signature, source[0], flags=re.M)
    source[0] = re.sub(r"^\.\. automodule:: ([\w.]+)\n(?:   :.*\n)*", with_constants, text,
                       flags=re.M)


def setup(app: Any) -> None:
    app.connect("source-read", _expand)
    app.connect("autodoc-process-signature", _from_stubs)
    app.connect("autodoc-process-docstring", _constant_doc)
    app.connect("autodoc-process-docstring", _embedded_signature)
