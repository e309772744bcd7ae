"""The C++ hand-off: tokenwire/nanobind.hpp and tokenwire/pybind11.hpp convert what as_tokens
converts into std::vector<int32_t>, and refuse what it refuses with the same exception.

Two real extensions are built once per session: the nanobind engine stand-in that
`python -m bench e2e --engine nanobind` uses (bench/engine.py, CMake + ninja from PyPI) and
a pybind11 twin (tests/cpp/pybind_engine.cpp, compiled directly). Each has `RequestStock`
(the library's stock std::vector caster) and `RequestTokens` (tokenwire::Tokens).
"""

from __future__ import annotations

import array
import importlib.util
import json
import os
import pathlib
import subprocess
import sys
import tempfile
from collections.abc import Callable
from types import ModuleType

import numpy as np
import pytest
from hypothesis import given

import tokenwire
import tokenwire._core
from support.cpp_harness import compile_pybind_engine, require_compiler
from support.strategies import int_arrays, token_lists
from support.bench_cli import run_bench
from support.gil import longest_stall_fraction, stall_fraction_below
from support.wait import WAIT_S
from bench import engine

# Builds C++ extensions with a real compiler: `pytest -m "not integration"` skips them.
pytestmark = pytest.mark.integration


def _load(name: str, path: pathlib.Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def cache_home(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """An XDG_CACHE_HOME whose tokenwire/engine holds this session's engine build, so that the
    `python -m bench e2e --engine nanobind` subprocess below reuses it."""
    return tmp_path_factory.mktemp("cache-home")


@pytest.fixture(scope="session")
def nb_engine(cache_home: pathlib.Path) -> ModuleType:
    require_compiler()
    return engine.load(cache_home / "tokenwire" / "engine")


@pytest.fixture(scope="session")
def pb_engine(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    require_compiler()
    out = tmp_path_factory.mktemp("pybind11-engine")
    return _load("_tokenwire_pybind_engine", compile_pybind_engine(out))


@pytest.fixture(params=["nanobind", "pybind11"])
def ext(request: pytest.FixtureRequest) -> ModuleType:
    return request.getfixturevalue("nb_engine" if request.param == "nanobind" else "pb_engine")


def ids_of(b: bytes) -> list[int]:
    return np.frombuffer(b, dtype=np.int32).tolist()


def via_tokens(ext: ModuleType) -> Callable[[object], list[int]]:
    return lambda obj: ids_of(ext.RequestTokens(obj, 16).ids_bytes())


def via_to_vector(ext: ModuleType) -> Callable[[object], list[int]]:
    return lambda obj: ids_of(ext.to_vector_bytes(obj))


class IntSub(int):
    pass


GOOD_INPUTS: dict[str, Callable[[], object]] = {
    "list": lambda: [1, 2, 151_935, 0],
    "empty list": lambda: [],
    "tuple": lambda: (5, 6, 7),
    "boundaries": lambda: [0, 1, 2**30 - 1, 2**30, 2**31 - 1, -1, -(2**30), -(2**31)],
    "TokenVector": lambda: tokenwire.as_tokens(range(1000)),
    "TokenVector slice": lambda: tokenwire.as_tokens(range(1000))[10:20],
    "numpy int32": lambda: np.arange(100, dtype=np.int32),
    "numpy int32 strided": lambda: np.arange(100, dtype=np.int32)[::3],
    "numpy int32 reversed": lambda: np.arange(100, dtype=np.int32)[::-1],
    "numpy int64": lambda: np.arange(100, dtype=np.int64),
    "numpy uint16": lambda: np.arange(100, dtype=np.uint16),
    "numpy big-endian": lambda: np.arange(100, dtype=">i4"),
    "array('i')": lambda: array.array("i", [3, 4, 5]),
    "array('q')": lambda: array.array("q", [3, 4, 5]),
    "memoryview int32": lambda: memoryview(np.arange(5, dtype=np.int32)),
    "range": lambda: range(10, 20),
    "generator": lambda: (i for i in range(5)),
    "numpy scalars in a list": lambda: [np.int64(4), np.int32(5), 6],
    "int subclass in a list": lambda: [IntSub(7), 8],
}


@pytest.mark.parametrize("name", list(GOOD_INPUTS))
def test_accepts_what_as_tokens_accepts(ext: ModuleType, name: str) -> None:
    expected = tokenwire.as_tokens(GOOD_INPUTS[name]()).tolist()
    assert via_tokens(ext)(GOOD_INPUTS[name]()) == expected
    assert via_to_vector(ext)(GOOD_INPUTS[name]()) == expected
    assert ext.RequestTokens(GOOD_INPUTS[name](), 16).max_tokens == 16


BAD_INPUTS: dict[str, Callable[[], object]] = {
    "too big in a list": lambda: [1, 2**31],
    "too small in a tuple": lambda: (1, -(2**31) - 1),
    "huge int": lambda: [0, 0, 10**30],
    "str element": lambda: [1, "2"],
    "float element": lambda: [1.0],
    "bool element": lambda: [True, 1],
    "None element": lambda: [1, None],
    "str": lambda: "hello",
    "bytes": lambda: b"\x01\x00\x00\x00",
    "bytearray": lambda: bytearray(8),
    "raw memoryview": lambda: memoryview(b"abcd"),
    "float array": lambda: np.zeros(3),
    "bool array": lambda: np.zeros(3, dtype=bool),
    "2-D array": lambda: np.zeros((2, 3), dtype=np.int32),
    "0-d array": lambda: np.array(5, dtype=np.int32),
    "int64 out of range": lambda: np.array([1, 2**40], dtype=np.int64),
    "uint32 out of range": lambda: np.array([2**31], dtype=np.uint32),
    "set": lambda: {1, 2},
    "None": lambda: None,
    "int": lambda: 5,
}


def _error(call: Callable[[], object]) -> tuple[type, str]:
    with pytest.raises(Exception) as exc:
        call()
    return type(exc.value), str(exc.value)


@pytest.mark.parametrize("name", list(BAD_INPUTS))
def test_refuses_what_as_tokens_refuses_with_its_error(ext: ModuleType, name: str) -> None:
    make = BAD_INPUTS[name]
    expected = _error(lambda: tokenwire.as_tokens(make()))
    # tokenwire's own classes (errors.py), each also the built-in a caller catches.
    assert issubclass(expected[0], tokenwire.TokenwireError)
    assert issubclass(expected[0], (TypeError, ValueError, OverflowError))
    assert _error(lambda: ext.RequestTokens(make(), 1)) == expected
    assert _error(lambda: ext.to_vector_bytes(make())) == expected


# Around as_tokens' loop boundaries (pyint.h: TW_PYINT_PREFETCH = 16 items prefetched ahead, a
# tail without): lists shorter than, equal to and longer than the prefetch distance.
@pytest.mark.parametrize("n", [1, 2, 16, 17, 33])
def test_every_position_of_a_list_is_as_tokens(ext: ModuleType, n: int) -> None:
    """The hand-off runs as_tokens' loop: an item that loop does not take (an int subclass, a
    numpy scalar, an int of two digits, a bool, an int outside int32, a non-int), wherever it
    falls, gives as_tokens' ids or as_tokens' error (type and message, naming its index)."""
    base = list(range(100_000, 100_000 + n))
    specials = (2**31 - 1, -(2**31), 2**30, -(2**30) - 1, IntSub(7), np.int64(9),
                True, 2**31, -(2**31) - 1, 2**100, None, 1.5)
    for k in range(n):
        for special in specials:
            ids = base[:k] + [special] + base[k + 1:]
            for seq in (ids, tuple(ids)):
                try:
                    expected: object = tokenwire.as_tokens(seq).tolist()
                except (TypeError, OverflowError) as e:
                    assert _error(lambda: ext.to_vector_bytes(seq)) == (type(e), str(e))
                    assert f"index {k} " in str(e) or f"index {k}:" in str(e)
                    continue
                assert via_to_vector(ext)(seq) == expected == base[:k] + [int(special)] + \
                    base[k + 1:]


_COUNT_AS_TOKENS = """
import importlib.util, pathlib, sys
import numpy as np
import tokenwire._core as core

calls = []
real = core.as_tokens
def counting(*args, **kwargs):
    calls.append(len(args[0]))
    return real(*args, **kwargs)
core.as_tokens = counting               # before the extension's first call looks it up
if sys.argv[2] == "no capsule":         # a tokenwire older than the headers
    del core._items_into_v1

path = pathlib.Path(sys.argv[1])
spec = importlib.util.spec_from_file_location(path.name.split(".")[0], path)
ext = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ext)

class IntSub(int):
    pass

ids = list(range(128_000))
for odd in (np.int64(7), IntSub(7), 2**30 + 7):
    lst = ids[:-1] + [odd]
    assert np.frombuffer(ext.to_vector_bytes(lst), np.int32).tolist() == ids[:-1] + [int(odd)]
for bad, error in (([*ids[:-1], "x"], TypeError), ([*ids[:-1], 2**31], OverflowError)):
    try:
        ext.to_vector_bytes(bad)
    except error as e:
        assert f"index {len(ids) - 1}" in str(e), e
    else:
        raise AssertionError("accepted")
print(calls)
"""


def test_an_odd_item_late_in_a_list_is_read_once(ext: ModuleType) -> None:
    """A 128k-id list whose last item the typed loop does not take (a numpy scalar, an int
    subclass, an int of two digits; a str, an int outside int32): the hand-off converts that
    item with as_tokens' own function, from where its loop stopped, and never hands the whole
    list to as_tokens for a second pass. Run in a fresh interpreter, where the extension's first
    call looks up a counting as_tokens."""
    # From a directory of its own: `-c` puts the working directory first on sys.path, where a
    # clone's tokenwire/ sources would shadow the installed package.
    r = subprocess.run([sys.executable, "-c", _COUNT_AS_TOKENS, ext.__file__, "capsule"],
                       capture_output=True, text=True, timeout=WAIT_S, cwd=tempfile.gettempdir())
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]", f"as_tokens converted the whole list: {r.stdout}"


def test_without_the_capsule_a_list_goes_to_as_tokens_whole(ext: ModuleType) -> None:
    """Headers newer than the tokenwire installed (no `_items_into_v1` capsule): the same ids and
    errors, each such list converted by as_tokens whole, as before the capsule."""
    r = subprocess.run([sys.executable, "-c", _COUNT_AS_TOKENS, ext.__file__, "no capsule"],
                       capture_output=True, text=True, timeout=WAIT_S, cwd=tempfile.gettempdir())
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str([128_000] * 5)


@pytest.mark.parametrize("vocab", [0, -1, -5, 3, 4, 151_936, 2**40])
@pytest.mark.parametrize("ids", [[1, 2, 3], [0, 3, -1], np.array([1, 2, 3], dtype=np.int64),
                                 np.array([3, 2, 1], dtype=np.int32)], ids=repr)
def test_vocab_check_is_as_tokens(ext: ModuleType, ids: object, vocab: int) -> None:
    try:
        expected: object = tokenwire.as_tokens(ids, vocab_size=vocab).tolist()
    except ValueError as e:
        assert _error(lambda: ext.to_vector_bytes(ids, vocab)) == (type(e), str(e))
        return
    assert ids_of(ext.to_vector_bytes(ids, vocab)) == expected


@given(token_lists)
def test_lists_agree(nb_engine: ModuleType, ids: list[int]) -> None:
    assert ids_of(nb_engine.RequestTokens(ids, 1).ids_bytes()) == ids
    assert ids_of(nb_engine.RequestStock(ids, 1).ids_bytes()) == ids


@given(int_arrays())
def test_arrays_agree(nb_engine: ModuleType, arr: np.ndarray) -> None:
    assert ids_of(nb_engine.to_vector_bytes(arr)) == tokenwire.as_tokens(arr).tolist()


def test_tokens_converts_back_to_a_list(ext: ModuleType) -> None:
    assert ext.tokens_roundtrip(np.array([4, 5, 6], dtype=np.int32)) == [4, 5, 6]


def test_failed_conversions_leak_nothing(ext: ModuleType) -> None:
    # Every path that hands the input to as_tokens or keeps an error must drop its references.
    bad, good, arr = [1, "x"], [1, 2, IntSub(3)], np.array([1, 2**40])
    before = [sys.getrefcount(o) for o in (bad, good, arr)]
    for _ in range(2000):
        for obj in (bad, arr):
            with pytest.raises((TypeError, OverflowError)):
                ext.RequestTokens(obj, 1)
        ext.RequestTokens(good, 1)
        ext.to_vector_bytes(good, 10)
    del obj
    assert [sys.getrefcount(o) for o in (bad, good, arr)] == before


@pytest.mark.usefixtures("threshold")
def test_large_buffers_are_copied_without_the_gil(nb_engine: ModuleType) -> None:
    big = tokenwire.as_tokens(np.arange(40_000_000, dtype=np.int32))    # 160 MB
    tokenwire._core.gil_release_threshold(0)
    released = stall_fraction_below(lambda: nb_engine.to_vector_len(big), 0.3)
    tokenwire._core.gil_release_threshold(2**62)
    held = longest_stall_fraction(lambda: nb_engine.to_vector_len(big))
    assert released < 0.3 and held > 0.5, (released, held)


def _e2e(env_cache: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, XDG_CACHE_HOME=env_cache)
    return run_bench("e2e", "--isl", "2000", "--requests", "4", "--engine", "nanobind", env=env)


def test_e2e_with_the_nanobind_engine(nb_engine: ModuleType, cache_home: pathlib.Path) -> None:
    r = _e2e(str(cache_home))
    assert r.returncode == 0, r.stderr
    assert "engine: nanobind C++ Request" in r.stdout
    assert "correctness: tokens received == tokens sent" in r.stdout
    for column in ("prep p50", "ctor p50", "trip p50"):
        assert column in r.stdout


def test_load_with_the_nanobind_engine(nb_engine: ModuleType, cache_home: pathlib.Path,
                                       tmp_path: pathlib.Path) -> None:
    """`python -m bench load --engine nanobind`: every request's ids end in the C++ Request
    (the worker checks them there), for the baseline's list and tokenwire's buffer alike."""
    out = tmp_path / "load.json"
    env = dict(os.environ, XDG_CACHE_HOME=str(cache_home))
    r = run_bench("load", "--quick", "--engine", "nanobind", "--rows", "baseline,tokenwire-oob",
                  "--json", str(out), env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "engine: nanobind C++ Request" in r.stdout
    doc = json.loads(out.read_text())
    assert doc["engine"] == "nanobind C++ Request"
    assert {(row["row"], row["isl"]) for row in doc["rows"]} == {
        (row, isl) for row in ("baseline", "tokenwire-oob") for isl in (1000, 40_000)}
    for row in doc["rows"]:
        assert row["correct"] and row["requests"] > 0, row
    assert "correctness: tokens received == tokens sent" in r.stdout


def test_e2e_falls_back_when_the_engine_cannot_be_built(tmp_path: pathlib.Path) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")                 # the build directory cannot be created under a file
    r = _e2e(str(blocker))
    assert r.returncode == 0, r.stderr
    assert "cannot build the nanobind engine" in r.stderr
    assert "falling back to the numpy stand-in" in r.stderr
    assert "engine: numpy stand-in" in r.stdout
    assert "correctness: tokens received == tokens sent" in r.stdout
