"""A smoke test of an installed tokenwire wheel (cibuildwheel's test-command; any platform).

Runs from outside the source tree, against the wheel: conversion, a frame round trip in every
codec that needs no extra, pickling at protocol 5, a damaged frame refused with the documented
error, the C/C++ headers under get_include(), the .pxd and the stubs; on a free-threaded
interpreter, that the GIL stayed off.
"""

import os
import pickle
import sys
import sysconfig

import numpy as np

import tokenwire

# A free-threaded interpreter (cp314t, cp315t wheels) keeps the GIL off: the extension declares
# itself free-threading compatible (CPython would turn the GIL on, and warn, at the import
# otherwise).
if sysconfig.get_config_var("Py_GIL_DISABLED"):
    assert not sys._is_gil_enabled(), "importing tokenwire turned the GIL on"

here = os.path.dirname(os.path.abspath(tokenwire.__file__))
assert "site-packages" in here or "dist-packages" in here, f"not the installed wheel: {here}"

ids = np.arange(0, 151_936, 7, dtype=np.int32)
tv = tokenwire.as_tokens(ids)
assert len(tv) == len(ids) and tv.tolist() == ids.tolist()
for codec in ("auto", "raw", "u16" if ids.max() < 65_536 else "packed", "packed"):
    frame = tokenwire.encode(tv, codec=codec, checksum=True)
    assert tokenwire.decode(frame) == tv, codec
assert tokenwire.decode_many(tokenwire.encode_many([tv, [1, 2, 3]])) == [tv, [1, 2, 3]]
assert pickle.loads(pickle.dumps(tv, protocol=5)) == tv
try:
    tokenwire.decode(tokenwire.encode([1, 2, 3], checksum=True)[:-1])
except tokenwire.WireFormatError:
    pass
else:
    raise AssertionError("a truncated frame was accepted")
inc = os.path.join(tokenwire.get_include(), "tokenwire")
for header in ("wire.hpp", "nanobind.hpp", "pybind11.hpp", "python.hpp", "frame.h", "bitpack.h",
               "crc32c.h", "pyint.h"):
    assert os.path.isfile(os.path.join(inc, header)), header
for typed in ("_core.pxd", "_core.pyi", "py.typed"):       # cimport and type checkers
    assert os.path.isfile(os.path.join(here, typed)), typed
gil = "" if not sysconfig.get_config_var("Py_GIL_DISABLED") else ", free-threaded, GIL off"
print(f"tokenwire {tokenwire.__version__} wheel OK on {sys.platform}, "
      f"Python {sys.version.split()[0]}{gil}")
