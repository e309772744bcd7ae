"""docs/api.md documents the public API as it is: every name of `tokenwire.__all__` (and of the
submodules in MODULES) has an entry with a signature and a description, every entry names
something in its module's `__all__`, and a function's parameters in the doc are its real ones.
The names come from the modules at run time; no name is in two of them (tests/test_api.py), so
each is documented once."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from pathlib import Path

import pytest

API_MD = Path(__file__).resolve().parent.parent / "docs" / "api.md"
MODULES = ["tokenwire", "tokenwire.errors", "tokenwire.wire", "tokenwire.memory",
           "tokenwire.unpickle", "tokenwire.state", "tokenwire.msgspec", "tokenwire.transport",
           "tokenwire.shm"]

#: "### `tokenwire.msgspec.Encoder`", then a ```python block (the signature), then the text.
ENTRY = re.compile(r"^### `(tokenwire(?:\.\w+)*)\.(\w+)`\n\n```python\n(.*?)\n```\n\n"
                   r"(.+?)(?=\n### |\n## |\Z)", re.S | re.M)


def entries() -> dict[tuple[str, str], tuple[str, str]]:
    """(module, name) -> (signature line, description) for every entry of docs/api.md."""
    text = API_MD.read_text()
    found: dict[tuple[str, str], tuple[str, str]] = {}
    for module, name, signature, description in ENTRY.findall(text):
        assert (module, name) not in found, f"{module}.{name} is documented twice"
        found[(module, name)] = (signature.strip(), description.strip())
    # every "### `tokenwire...`" heading is an entry the pattern read (none malformed)
    headings = re.findall(r"^### `(tokenwire[\w.]*)`", text, flags=re.M)
    assert len(headings) == len(found), sorted(set(headings) - {f"{m}.{n}" for m, n in found})
    return found


def public(module: str) -> set[str]:
    """The names of `module.__all__`, documented under `module`."""
    return set(importlib.import_module(module).__all__)


@pytest.mark.parametrize("module", MODULES)
def test_every_public_name_is_documented_and_every_entry_is_public(module: str) -> None:
    documented = {name for m, name in entries() if m == module}
    names = public(module)
    assert names - documented == set(), f"in {module}.__all__ but not in docs/api.md"
    assert documented - names == set(), f"in docs/api.md but not in {module}.__all__"


def test_entries_name_only_the_documented_modules() -> None:
    assert {m for m, _ in entries()} <= set(MODULES)


def _doc_parameters(signature: str, name: str) -> list[str] | None:
    """The parameter names of a `name(...) -> ...` signature line; None for a constant
    (`NAME: type`) or a class line (`class NAME(bases)`)."""
    if signature.startswith("class ") or signature.startswith(f"{name}:"):
        return None
    assert signature.startswith(f"{name}("), f"{name}: the signature starts with another name"
    tree = ast.parse(f"def {signature}: ...")
    fn = tree.body[0]
    assert isinstance(fn, ast.FunctionDef)
    a = fn.args
    params = [p.arg for p in a.posonlyargs + a.args]
    params += [f"*{a.vararg.arg}"] if a.vararg else (["*"] if a.kwonlyargs else [])
    params += [p.arg for p in a.kwonlyargs]
    params += [f"**{a.kwarg.arg}"] if a.kwarg else []
    return params


def _real_parameters(obj: object) -> list[str] | None:
    try:
        sig = inspect.signature(obj)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None                   # an extension type without a text signature
    out: list[str] = []
    star = False                      # a "*" or "*args" already separates keyword-only ones
    for p in sig.parameters.values():
        if p.kind is p.VAR_POSITIONAL:
            out.append(f"*{p.name}")
            star = True
        elif p.kind is p.VAR_KEYWORD:
            out.append(f"**{p.name}")
        else:
            if p.kind is p.KEYWORD_ONLY and not star:
                out.append("*")
                star = True
            out.append(p.name)
    return out


def test_signatures_and_descriptions() -> None:
    checked = 0
    for (module, name), (signature, description) in entries().items():
        assert "\n" not in signature, f"{module}.{name}: one signature line"
        assert len(description.split()) >= 5, f"{module}.{name}: no description"
        if module == "tokenwire.msgspec":
            pytest.importorskip("msgspec")
        obj = getattr(importlib.import_module(module), name)
        documented = _doc_parameters(signature, name)
        if documented is None:
            is_class_line = signature.startswith("class ")
            assert is_class_line == inspect.isclass(obj), f"{module}.{name}: class or not"
            continue
        assert callable(obj), f"{module}.{name} is documented as callable"
        real = _real_parameters(obj)
        if real is not None:
            assert documented == real, f"{module}.{name}: documented {documented}, real {real}"
            checked += 1
    assert checked >= 20                 # the functions and Python classes, at least
