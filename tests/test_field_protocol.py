"""The request layer's seams: tokenwire.state owns the pickled format and reaches a token field
only through the methods tokenwire.state._FieldProtocol declares; a class is adopted through one
hook, by a field line as by ``token_fields``; tokenwire's modules import one another in one
direction only, and the request layer's modules never import each other from a function."""

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
import tokenwire.adopt
import tokenwire.fields
import tokenwire.state
from tokenwire import GenerationRequest, TokenIds, TokenVector, TokenwireMixin, token_fields
from tokenwire.state import _MISSING, _FieldProtocol

PACKAGE = Path(tokenwire.__file__).parent
#: The request layer: the modules that must not import each other from a function.
LAYER = {"tokenwire.state", "tokenwire.fields", "tokenwire.adopt", "tokenwire.request"}


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
    # The request layer's direction: the format below the field, the field below adoption.
    assert "tokenwire.fields" in graph["tokenwire.adopt"]
    assert "tokenwire.state" in graph["tokenwire.fields"]


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


@pytest.mark.parametrize("module", ["tokenwire.state", "tokenwire.adopt"])
def test_state_and_adoption_never_look_into_what_an_instance_stores(module: str) -> None:
    # The holder, its attributes and the descriptor's storage helpers are tokenwire.fields' own.
    names = {"_TokenField", "_fresh", "_kind_of", "_all_ints"}
    attributes = {"vector", "ids", "kind", "built", "_vector", "_stored", "_buffer"}
    tree = _source_tree(module)
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    used |= {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
    assert used & names == set()
    assert {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)} & attributes == set()


def test_token_ids_implements_every_method_of_the_protocol() -> None:
    declared = [n for n, v in vars(_FieldProtocol).items() if callable(v) and n[:2] != "__"]
    assert {"_state_ids", "_held", "_as_is", "_listed", "_deepcopy_into",
            "summary"} <= set(declared)
    assert [n for n in declared if getattr(TokenIds, n) is getattr(_FieldProtocol, n)] == []
    assert isinstance(GenerationRequest.__dict__["prompt_token_ids"], _FieldProtocol)


class _ListField(_FieldProtocol):
    """A token field of another kind: the ids always kept as a plain list."""

    codec = "raw"

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        return self if obj is None else obj.__dict__[self.name]

    def __set__(self, obj: Any, value: Any) -> None:
        obj.__dict__[self.name] = list(value)

    def _state_ids(self, obj: Any, value: Any) -> tuple[Any, Any]:
        return tokenwire.as_tokens(value), False

    def _held(self, vector: TokenVector, kind: Any) -> Any:
        return vector.tolist()

    def _as_is(self, value: Any) -> Any:
        return value

    def _listed(self, value: Any) -> Any:
        return value

    def _deepcopy_into(self, obj: Any, attrs: dict[str, Any], memo: dict[int, Any]) -> None:
        value = obj.__dict__.get(self.name, _MISSING)
        if value is not _MISSING:
            attrs[self.name] = list(value)

    def summary(self, obj: Any) -> str:
        return f"<{len(obj.__dict__[self.name])} ids>"


class _ListReq(TokenwireMixin):
    ids = _ListField()


def test_any_implementation_of_the_protocol_is_a_token_field() -> None:
    # The state format and TokenwireMixin ask the field, whatever it is, and nothing else.
    req = _ListReq()
    req.ids = range(5)
    state = req.__getstate__()
    assert type(state["ids"]) is TokenVector and state["ids"] == [0, 1, 2, 3, 4]
    back = pickle.loads(pickle.dumps(req, protocol=5))
    assert type(vars(back)["ids"]) is list and back.ids == [0, 1, 2, 3, 4]
    deep = copy.deepcopy(req)
    assert deep.ids == req.ids and deep.ids is not req.ids
    assert repr(req) == "_ListReq(ids=<5 ids>)"


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


def test_the_adoption_hook_is_the_one_of_tokenwire_adopt() -> None:
    assert tokenwire.fields._adoption_hook is tokenwire.adopt._adopt

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
