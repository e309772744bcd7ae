"""The C-level interface tokenwire publishes (tokenwire/_core.pxd) has a user: a small Cython
extension that `cimport`s TokenVector and the tv_* helpers is built against this tokenwire (the
.pxd files it ships, found beside the package), imported, and used. A change to the .pxd that
breaks such an extension (a renamed field, a changed signature, a struct size that no longer
matches the module) fails here."""

from __future__ import annotations

import importlib.util
import os
import pathlib
from types import ModuleType

import numpy as np
import pytest

import tokenwire

# Builds a Cython extension with a real compiler: `pytest -m "not integration"` skips it.
pytestmark = pytest.mark.integration

USER_SOURCE = '''
# cython: language_level=3
from libc.stdint cimport int32_t
from tokenwire._core cimport TokenVector, tv_alloc, tv_data, tv_from_int32, tv_len


def total(TokenVector tv):
    """The sum of the ids, read through tv_data / tv_len (no Python call per id)."""
    cdef const int32_t* p = tv_data(tv)
    cdef long long s = 0
    cdef Py_ssize_t i
    for i in range(tv_len(tv)):
        s += p[i]
    return s


def iota(Py_ssize_t n):
    """A new vector, filled before it is shared (tv_alloc's contract)."""
    cdef TokenVector tv = tv_alloc(n)
    cdef int32_t* p = <int32_t*>tv_data(tv)
    cdef Py_ssize_t i
    for i in range(n):
        p[i] = <int32_t>i
    return tv


def copy_of(TokenVector tv):
    return tv_from_int32(tv_data(tv), tv_len(tv))
'''


@pytest.fixture(scope="session")
def user(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    """Built once per session: cythonize (include path: the directory holding the tokenwire
    package, where its .pxd files are) and setuptools' build_ext, in a temporary directory."""
    from Cython.Build import cythonize
    from setuptools import Distribution, Extension

    build = tmp_path_factory.mktemp("cimport")
    pyx = build / "tw_cimport_user.pyx"
    pyx.write_text(USER_SOURCE)
    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(tokenwire.__file__)))
    ext = Extension("tw_cimport_user", [str(pyx)], include_dirs=[tokenwire.get_include()])
    dist = Distribution({"ext_modules": cythonize([ext], include_path=[package_parent],
                                                  quiet=True, language_level=3)})
    cmd = dist.get_command_obj("build_ext")
    cmd.build_lib = str(build)                       # type: ignore[attr-defined]
    cmd.build_temp = str(build / "tmp")              # type: ignore[attr-defined]
    cmd.ensure_finalized()
    cmd.run()
    path = pathlib.Path(cmd.get_ext_fullpath("tw_cimport_user"))   # type: ignore[attr-defined]
    spec = importlib.util.spec_from_file_location("tw_cimport_user", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_reads_ids_through_the_pxd(user: ModuleType) -> None:
    assert user.total(tokenwire.TokenVector([1, 2, 3, -4])) == 2
    assert user.total(tokenwire.TokenVector()) == 0
    # A zero-copy vector (a view of a bytes frame) reads the same way.
    frame = tokenwire.encode(np.arange(1000, dtype=np.int32), codec="raw")
    assert user.total(tokenwire.decode(frame)) == sum(range(1000))


def test_builds_vectors_through_the_pxd(user: ModuleType) -> None:
    tv = user.iota(5)
    assert type(tv) is tokenwire.TokenVector and tv == [0, 1, 2, 3, 4]
    assert user.iota(0) == []
    src = tokenwire.as_tokens([7, 8, 9])
    copy = user.copy_of(src)
    assert copy == src and copy is not src


def test_typed_argument_refuses_other_objects(user: ModuleType) -> None:
    # The cimported type is the module's own TokenVector: a list is not one.
    with pytest.raises(TypeError, match="TokenVector"):
        user.total([1, 2, 3])
    with pytest.raises(ValueError, match="negative length -1"):
        user.iota(-1)
