"""The public surface: a small sorted top level, submodules for the rest, the names of earlier
releases still resolving (with a DeprecationWarning), and pickles that name the request module's
old globals still loading."""

from __future__ import annotations

import pickle
import pickletools
import warnings
from pathlib import Path

import numpy as np
import pytest

import tokenwire
import tokenwire.errors
import tokenwire.memory
import tokenwire.request
import tokenwire.state
import tokenwire.unpickle
import tokenwire.wire
from tokenwire import TokenIds, TokenVector
from tokenwire.fields import _TokenField

FIXTURES = Path(__file__).parent / "fixtures"
BOUNDARY_IDS = [0, 1, 2, 255, 256, 2**15 - 1, 2**15, 2**16 - 1, 2**16, 2**31 - 1, -1, -(2**31)]

SUBMODULES = [tokenwire.errors, tokenwire.memory, tokenwire.state, tokenwire.unpickle, tokenwire.wire]


def test_top_level_is_small_sorted_and_complete() -> None:
    names = tokenwire.__all__
    assert names == sorted(names) and len(set(names)) == len(names)
    assert len(names) <= 24
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
    assert "TokenwireMixin" in tokenwire.__all__ and "TokenwireError" in tokenwire.__all__


MOVED = {
    "AuthenticationError": tokenwire.errors.AuthenticationError,
    "ChecksumError": tokenwire.errors.ChecksumError,
    "TokenIdOverflowError": tokenwire.errors.TokenIdOverflowError,
    "TokenIdTypeError": tokenwire.errors.TokenIdTypeError,
    "CODECS": tokenwire.wire.CODECS,
    "FrameInfo": tokenwire.wire.FrameInfo,
    "check_codec": tokenwire.wire.check_codec,
    "INT_CACHE_SIZE": tokenwire.memory.INT_CACHE_SIZE,
    "ImmutableBuffer": tokenwire.memory.ImmutableBuffer,
    "gil_release_threshold": tokenwire.memory.gil_release_threshold,
    "PICKLE_GLOBALS": tokenwire.unpickle.PICKLE_GLOBALS,
    "TokenWireMixin": tokenwire.TokenwireMixin,
}


@pytest.mark.parametrize("name", sorted(MOVED))
def test_names_of_earlier_releases_resolve_with_a_deprecation_warning(name: str) -> None:
    assert name not in tokenwire.__all__
    with pytest.warns(DeprecationWarning, match=f"tokenwire.{name} is deprecated: use tokenwire"):
        assert getattr(tokenwire, name) is MOVED[name]
    with pytest.warns(DeprecationWarning):
        exec(f"from tokenwire import {name}", {})


def test_unknown_top_level_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'TokenWireMixn'"):
        tokenwire.TokenWireMixn  # type: ignore[attr-defined]  # noqa: B018


def test_old_spelling_of_the_mixin_still_builds_a_class() -> None:
    with pytest.warns(DeprecationWarning, match="use tokenwire.TokenwireMixin"):
        from tokenwire.request import TokenWireMixin

    class Req(TokenWireMixin):
        ids = TokenIds()

    req = Req()
    req.ids = np.array([1, 2, 3], np.int32)
    state = req.__getstate__()
    assert state["__tokenwire__"] == 1 and type(state["ids"]) is TokenVector
    out = Req.__new__(Req)
    out.__setstate__(state)
    assert out.ids == [1, 2, 3] and type(vars(out)["ids"]) is _TokenField


def test_request_module_keeps_the_names_it_held() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from tokenwire.request import (  # noqa: F401
            PICKLE_GLOBALS,
            STATE_VERSION,
            GenerationRequest,
            TokenIds,
            TokenwireMixin,
            find_class,
            list_on_wire,
            token_buffer,
            token_fields,
        )
    assert tokenwire.request._TokenField is _TokenField
    assert tokenwire.request.__all__ == ["GenerationRequest"]


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
    assert plain.vector == BOUNDARY_IDS and plain.as_tuple is False and plain.ids is None
    assert type(as_tuple) is _TokenField and as_tuple.vector == [7, 8, 9] and as_tuple.as_tuple


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
    # The guide's `import tokenwire` then `tokenwire.msgspec.enc_hook`: reachable from the
    # package, while `import tokenwire` alone imports none of the optional extras.
    import subprocess
    import sys
    code = (
        "import sys, tokenwire\n"
        "heavy = [m for m in ('msgspec', 'zmq', 'pydantic', 'tokenwire.msgspec', 'tokenwire.shm')"
        " if m in sys.modules]\n"
        "assert heavy == [], heavy\n"
        "assert callable(tokenwire.msgspec.enc_hook) and 'msgspec' in sys.modules\n"
        "assert tokenwire.shm.SLOTS > 0 and tokenwire.transport.OOB_THRESHOLD > 0\n"
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
