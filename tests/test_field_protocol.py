"""The request layer's seams: tokenwire.state owns the pickled format and the adoption of a
class, and reaches a token field only through the field's own methods, never through what an
instance stores for it; a class is adopted one way, by a field line as by ``token_fields``;
tokenwire's modules import one another in one direction only, and the request layer's modules
never import each other from a function."""

from __future__ import annotations

import array
import ast
import builtins
import copy
import pickle
from pathlib import Path
from typing import Any, Iterator, Optional

import numpy as np
import pytest

import tokenwire
import tokenwire.fields
import tokenwire.state
from tokenwire import GenerationRequest, TokenIds, TokenVector, token_fields
from tokenwire.state import _TokenwireMixin as TokenwireMixin

PACKAGE = Path(tokenwire.__file__).parent
#: The request layer: the modules that must not import each other from a function.
LAYER = {"tokenwire.state", "tokenwire.fields", "tokenwire.request"}


# --------------------------------------------------------------------------------------------
# Imports


def _module_names() -> set[str]:
    return {f"tokenwire.{p.stem}" for p in PACKAGE.glob("*.py") if p.stem != "__init__"}


def _imports(module: str) -> Iterator[tuple[str, int, bool]]:
    """(tokenwire module imported, line, inside a function?) for every import statement of
    `module` that runs (imports under ``if TYPE_CHECKING:`` are left out)."""
    known = _module_names()
    source = (PACKAGE / f"{module.rsplit('.', 1)[1]}.py").read_text()

    def targets(node: ast.AST) -> list[str]:
        if isinstance(node, ast.Import):
            return [a.name for a in node.names]
        assert isinstance(node, ast.ImportFrom)
        base = node.module or ""
        if node.level:
            base = "tokenwire" + (f".{base}" if base else "")
        # `from tokenwire import x` imports the submodule tokenwire.x when there is one
        return [base] + [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in known]

    def walk(node: ast.AST, in_function: bool) -> Iterator[tuple[str, int, bool]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and ast.unparse(child.test).endswith("TYPE_CHECKING"):
                yield from (i for c in child.orelse for i in walk(c, in_function))
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                for name in targets(child):
                    if name in known:
                        yield name, child.lineno, in_function
            nested = isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            yield from walk(child, in_function or nested)

    yield from walk(ast.parse(source), False)


def _cycle(graph: dict[str, set[str]]) -> Optional[list[str]]:
    """A cycle of `graph`, as the list of its modules, or None."""
    state: dict[str, int] = {}            # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> Optional[list[str]]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_no_module_of_the_package_imports_back_a_module_that_imports_it() -> None:
    # Every import counts, at the top of a module or in a function (run time).
    graph = {m: {name for name, _, _ in _imports(m) if name != m} for m in _module_names()}
    assert _cycle(graph) is None
    # The request layer's direction: the state (format and adoption) below the field.
    assert "tokenwire.state" in graph["tokenwire.fields"]
    assert "tokenwire.fields" not in graph["tokenwire.state"]


def test_the_request_layer_never_imports_itself_from_a_function() -> None:
    late = [f"{m}:{line} imports {name}" for m in sorted(LAYER)
            for name, line, in_function in _imports(m) if in_function and name in LAYER]
    assert late == []


class _Line:
    ids = TokenIds(codec="packed")


@token_fields("ids", codec="pfor")
class _Decorated:
    ids: Optional[list[int]] = None


def test_nothing_in_the_request_layer_imports_tokenwire_modules_at_run_time() -> None:
    # Every import statement the layer's code runs while classes are declared, adopted,
    # pickled at every protocol, unpickled, copied and shown: none names a tokenwire module.
    seen: list[tuple[str, str]] = []
    real_import = builtins.__import__

    def recording(name: str, globals: Any = None, *args: Any, **kwargs: Any) -> Any:
        importer = (globals or {}).get("__name__", "")
        if importer in LAYER and (name or "").startswith("tokenwire"):
            seen.append((importer, name))
        return real_import(name, globals, *args, **kwargs)

    builtins.__import__ = recording
    try:
        class Line:
            ids = TokenIds(codec="packed")

        @token_fields("ids", list_on_wire=False)
        class Decorated:
            ids: Optional[list[int]] = None

        for cls in (Line, Decorated, _Line, _Decorated):
            obj = cls()
            obj.ids = np.arange(50, dtype=np.int32)
            copy.copy(obj), copy.deepcopy(obj), repr(obj), tokenwire.token_buffer(obj, "ids")
        for obj in (_Line(), _Decorated(), GenerationRequest(array.array("q", range(50)))):
            if not isinstance(obj, GenerationRequest):
                obj.ids = (7, 8, 9)
            for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
                back = pickle.loads(pickle.dumps(obj, protocol=protocol))
                copy.copy(back), copy.deepcopy(back), repr(back)
        previous = tokenwire.list_on_wire(True)
        try:
            pickle.loads(pickle.dumps(_Line()))
        finally:
            tokenwire.list_on_wire(previous)
    finally:
        builtins.__import__ = real_import
    assert seen == []


# --------------------------------------------------------------------------------------------
# The field protocol


def _source_tree(module: str) -> ast.AST:
    return ast.parse((PACKAGE / f"{module.rsplit('.', 1)[1]}.py").read_text())


@pytest.mark.parametrize("module", ["tokenwire.state"])
def test_state_and_adoption_never_look_into_what_an_instance_stores(module: str) -> None:
    # The holder, its attributes and the descriptor's storage helpers are tokenwire.fields' own.
    names = {"_TokenField", "_fresh", "_kind_of", "_all_ints"}
    attributes = {"vector", "ids", "kind", "built", "_vector", "_stored", "_buffer"}
    tree = _source_tree(module)
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    used |= {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
    assert used & names == set()
    assert {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)} & attributes == set()


def test_a_token_field_is_one_its_class_declared() -> None:
    # The state finds a class's token fields by what the field lines (and token_fields)
    # declared, resolved as attribute lookup resolves them: a TokenIds put on a class without
    # being declared there (no __set_name__) is not one, a subclass's plain attribute hides one.
    class Req:
        ids = TokenIds()

    stray = TokenIds()
    Req.extra = stray                       # type: ignore[attr-defined]

    class Plain(Req):
        ids = None                          # type: ignore[assignment]

    assert [n for n, _ in tokenwire.state._config(Req).fields] == ["ids"]
    assert tokenwire.state._config(Plain).fields == ()
    req = Req()
    req.ids = [1, 2, 3]
    assert type(req.__getstate__()["ids"]) is TokenVector


# --------------------------------------------------------------------------------------------
# The format, as tokenwire.state's docstring lists it


def _payload(value: Any, codec: str = "raw") -> Any:
    @token_fields("ids", codec=codec)
    class Req:
        pass

    req = Req()
    req.ids = value
    return req.__getstate__()["ids"]


def test_each_payload_form_of_the_format() -> None:
    frame = tokenwire.encode([1, 2, 3], codec="packed")
    assert _payload(None) is None
    assert type(_payload([1, 2, 3])) is TokenVector
    assert _payload([1, 2, 3], codec="packed") == frame
    assert _payload((1, 2, 3), codec="packed") == (frame,)
    assert _payload(array.array("q", [1, 2, 3]), codec="packed") == (frame, "q")
    assert _payload([[1], [2]]) == [[1], [2]]                            # not int32 ids: itself
    assert _payload((2**31,)) == (2**31,)
    assert _payload((b"ab",)) == {"as_is": (b"ab",)}                    # the shape of a form above
    assert _payload(array.array("d", [1.0])) == {"as_is": array.array("d", [1.0])}


def test_a_field_line_and_token_fields_adopt_a_class_alike() -> None:
    class Line:
        ids = TokenIds()

    @token_fields("ids")
    class Decorated:
        pass

    for method in ("__getstate__", "__setstate__", "__reduce_ex__", "__copy__", "__deepcopy__"):
        assert getattr(Line, method) is getattr(Decorated, method) is \
            vars(TokenwireMixin)[method], method
    line, decorated = Line(), Decorated()
    line.ids = decorated.ids = (4, 5)
    assert line.__getstate__() == decorated.__getstate__()
