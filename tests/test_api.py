"""The public surface: a small sorted top level, submodules for the rest, one public path per
name, and pickles that name the request module's old globals still loading."""

from __future__ import annotations

import pickle
import importlib
import pickletools
import pkgutil
import types
from pathlib import Path

import numpy as np
import pytest

import tokenwire
import tokenwire.errors
import tokenwire.request
import tokenwire.state
import tokenwire.transport
import tokenwire.unpickle
import tokenwire.wires
from tokenwire import TokenIds, TokenVector
from tokenwire.fields import _TokenField

FIXTURES = Path(__file__).parent / "fixtures"
BOUNDARY_IDS = [0, 1, 2, 255, 256, 2**15 - 1, 2**15, 2**16 - 1, 2**16, 2**31 - 1, -1, -(2**31)]

SUBMODULES = [tokenwire.errors, tokenwire.state, tokenwire.transport, tokenwire.unpickle,
              tokenwire.wires]


def test_top_level_is_small_sorted_and_complete() -> None:
    names = tokenwire.__all__
    assert names == sorted(names) and len(set(names)) == len(names)
    assert len(names) <= 20
    for name in names:
        assert getattr(tokenwire, name) is not None
    star: dict[str, object] = {}
    exec("from tokenwire import *", star)
    assert set(star) - {"__builtins__"} == set(names)


@pytest.mark.parametrize("module", SUBMODULES, ids=lambda m: m.__name__)
def test_submodule_all_is_sorted_and_resolves(module) -> None:  # type: ignore[no-untyped-def]
    assert module.__all__ == sorted(module.__all__)
    for name in module.__all__:
        assert hasattr(module, name), name


def test_one_spelling_of_the_project_name() -> None:
    public = [n for m in [tokenwire, *SUBMODULES] for n in m.__all__]
    assert not [n for n in public if "TokenWire" in n]
    assert "TokenwireError" in tokenwire.__all__


def _public_modules() -> list[types.ModuleType]:
    """tokenwire and each of its submodules whose name has no leading underscore (but cli, the
    command, and __main__, which runs it)."""
    names = [m.name for m in pkgutil.iter_modules(tokenwire.__path__)
             if not m.name.startswith("_") and m.name != "cli"]
    return [tokenwire, *(importlib.import_module(f"tokenwire.{n}") for n in sorted(names))]


#: Values a module may define apart with the same value by chance (SLOTS and MIN_KEY_BYTES are
#: both 16, one int object): for them only the same name under two paths is a second path.
_VALUES = (bool, int, float, str, bytes, tuple, frozenset)


def test_each_public_object_has_one_public_path() -> None:
    # Public paths: the names in `__all__` of tokenwire and of its public submodules (no
    # re-export is allowed: a name the top level holds is in no submodule's `__all__`).
    paths: dict[object, list[str]] = {}
    for module in _public_modules():
        assert isinstance(getattr(module, "__all__", None), list), \
            f"{module.__name__} declares no __all__"
        for name in module.__all__:
            obj = getattr(module, name)
            key = (name, type(obj), obj) if isinstance(obj, _VALUES) else ("", id(obj))
            paths.setdefault(key, []).append(f"{module.__name__}.{name}")
    assert [p for p in paths.values() if len(p) > 1] == []


def test_unknown_top_level_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'TokenwireMixin'"):
        tokenwire.TokenwireMixin  # type: ignore[attr-defined]  # noqa: B018


def test_request_module_keeps_the_names_pickles_carry() -> None:
    assert tokenwire.request._TokenField is _TokenField
    assert tokenwire.request.GenerationRequest is tokenwire.GenerationRequest
    assert tokenwire.request.__all__ == []


def _globals_named(data: bytes) -> set[tuple[str, str]]:
    """Every (module, name) a pickle names, at any protocol."""
    named, strings = set(), []
    for op, arg, _ in pickletools.genops(data):
        if op.name == "GLOBAL":
            named.add(tuple(arg.split(" ", 1)))
        elif op.name == "STACK_GLOBAL":
            named.add((strings[-2], strings[-1]))
        elif isinstance(arg, str):
            strings.append(arg)
    return named


@pytest.mark.parametrize("protocol", [2, 5])
def test_field_holder_pickles_of_the_unsplit_module_still_load(protocol: int) -> None:
    # Written once with `make_request_fixtures.py --holder` by the release whose request module
    # held every part: they name tokenwire.request._TokenField.
    data = (FIXTURES / f"token_field_p{protocol}.pickle").read_bytes()
    assert ("tokenwire.request", "_TokenField") in _globals_named(data)
    plain, as_tuple = pickle.loads(data)
    assert type(plain) is _TokenField and type(plain.vector) is TokenVector
    assert plain.vector == BOUNDARY_IDS and plain.kind is False and plain.ids is None
    assert type(as_tuple) is _TokenField and as_tuple.vector == [7, 8, 9] and as_tuple.kind is True


@pytest.mark.parametrize("protocol", [2, 5])
def test_field_holder_pickles_still_name_the_request_module(protocol: int) -> None:
    # A receiver still running a release from before the split imports tokenwire.request only.
    class NoMixin:
        ids = TokenIds()

    obj = NoMixin()
    obj.ids = np.arange(5, dtype=np.int32)
    data = pickle.dumps(vars(obj), protocol=protocol)
    assert _globals_named(data) == {("tokenwire.request", "_TokenField"),
                                    ("tokenwire._core", "_restore_token_vector")}


def test_generation_request_pickles_still_name_the_request_module() -> None:
    data = pickle.dumps(tokenwire.GenerationRequest([1, 2, 3]), protocol=5)
    assert ("tokenwire.request", "GenerationRequest") in _globals_named(data)


def test_submodules_are_attributes_of_the_package_imported_on_first_use() -> None:
    # The guide's `import tokenwire` then `tokenwire.msgspec.Encoder`: reachable from the
    # package, while `import tokenwire` alone imports none of the optional extras.
    pytest.importorskip("msgspec")
    import subprocess
    import sys
    code = (
        "import sys, tokenwire\n"
        "heavy = [m for m in ('msgspec', 'zmq', 'pydantic', 'tokenwire.msgspec', 'tokenwire.shm')"
        " if m in sys.modules]\n"
        "assert heavy == [], heavy\n"
        "assert callable(tokenwire.msgspec.Encoder) and 'msgspec' in sys.modules\n"
        "assert callable(tokenwire.shm.Sender) and callable(tokenwire.transport.dumps_oob)\n"
        "try:\n"
        "    tokenwire.nosuchmodule\n"
        "except AttributeError as e:\n"
        "    assert 'nosuchmodule' in str(e)\n"
        "else:\n"
        "    raise SystemExit('no AttributeError')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parent)
    assert out.returncode == 0, out.stderr
