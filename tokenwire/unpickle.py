"""Unpickling bytes from another party: the globals tokenwire's objects name in a pickle, a
``find_class`` that resolves only an allow-list of them, ``check_pickle``, which refuses a
pickle that would make the unpickler allocate more than the pickle's own size, and
``load_scope``, which bounds how often one pickle may restore token data from one source.

A pickle can name any importable callable; an unpickler that receives bytes from another party
should resolve only the globals it expects. ``PICKLE_GLOBALS`` lists tokenwire's own; a request
class adds itself (``(module, qualified name)``) to the allow-list it passes to ``find_class``.
An allow-list does not bound memory: CPython's unpickler allocates what some opcodes declare
before it reads their bytes, so a stack that loads received pickles itself calls
``check_pickle`` first and loads inside ``load_scope()`` (tokenwire's own receivers always do).
"""

from __future__ import annotations

import _compat_pickle
import importlib
import pickle
from typing import Any

from tokenwire._core import _check_pickle, _load_scope, _LoadScope

__all__ = ["PICKLE_GLOBALS", "check_pickle", "load_scope"]      # find_class is public as tokenwire.find_class

#: The globals tokenwire's own objects name in a pickle, at every protocol >= 2: a restricted
#: unpickler allows these plus the request classes it already trusts. (Protocols 0 and 1 name
#: ``copyreg._reconstructor`` and ``builtins.object`` for *any* plain object, tokenwire or not.)
PICKLE_GLOBALS: frozenset[tuple[str, str]] = frozenset({
    ("tokenwire._core", "_restore_token_vector"),
})


def find_class(module: str, name: str, allow: Any = frozenset()) -> Any:
    """``Unpickler.find_class`` for an allow-list: resolve ``module.name`` only when it is in
    `allow` (pairs ``(module, name)``) or in ``PICKLE_GLOBALS``; otherwise raise
    ``pickle.UnpicklingError`` naming the global. Nothing else is imported::

        class SafeUnpickler(pickle.Unpickler):
            def find_class(self, module, name):
                return tokenwire.find_class(module, name, allow=MY_REQUEST_CLASSES)

        tokenwire.unpickle.check_pickle(data)     # its allocations bounded by its size
        with tokenwire.unpickle.load_scope():      # its token data restored once per source
            request = SafeUnpickler(io.BytesIO(data)).load()
    """
    # Protocols 0-2 spell some globals with Python 2 names (copy_reg._reconstructor,
    # __builtin__.object); map them as Unpickler(fix_imports=True) does, then check.
    if (module, name) in _compat_pickle.NAME_MAPPING:
        module, name = _compat_pickle.NAME_MAPPING[(module, name)]
    elif module in _compat_pickle.IMPORT_MAPPING:
        module = _compat_pickle.IMPORT_MAPPING[module]
    if (module, name) not in PICKLE_GLOBALS and (module, name) not in allow:
        raise pickle.UnpicklingError(f"global '{module}.{name}' is not allowed")
    obj: Any = importlib.import_module(module)
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def check_pickle(data: Any) -> None:
    """Raise ``pickle.UnpicklingError`` when the pickle `data` (any bytes-like object) declares
    an allocation larger than itself; return None otherwise. Call it on received bytes before
    ``pickle.loads`` or an ``Unpickler``, restricted or not.

    CPython's unpickler allocates a counted argument before reading it (``BINBYTES`` up to
    4 GiB, ``BINBYTES8`` and ``BYTEARRAY8`` up to 2**64 bytes) and grows its memo to a put's
    index, zeroing each slot (``LONG_BINPUT`` up to 2**32), so a 9-byte pickle can make a
    process touch gigabytes whatever ``find_class`` allows. This walks the opcodes once, in C,
    and refuses, naming the opcode and its offset, a counted argument longer than the bytes
    after it, a memo index not below the pickle's length (a text ``PUT`` read as the
    unpickler reads it), an opcode that runs past the end of its ``FRAME``, and a ``FRAME``
    inside another: read from a file, CPython's unpickler parses those as other opcodes than
    the walk reads (it rereads from the file what crosses a frame's end), so they could hide a
    memo bomb. The walk stops where the unpickler itself would stop with an error.

    What passes: every pickle ``pickle.dumps`` writes (memo entries numbered from 0, one per
    memoized object; opcodes wholly inside or outside frames), and a ``Pickler``'s at
    protocol 4 and later. A ``Pickler`` reused for several ``dump`` calls at protocol 3 or
    lower keeps numbering its memo across them, so a later pickle may name an index beyond its
    own length and is refused: call ``clear_memo()`` between dumps, or use protocol 4 or 5.
    It reads `data` once and keeps nothing; it costs ~0.3 µs for a request whose ids travel as
    a buffer, ~150 µs for the pickle of a plain list of 40,000 ints (a tenth of its load).
    tokenwire's receivers (``loads_oob``, ``recv_pyobj_oob``, the channel's ``Receiver``) call
    it on every pickle they load."""
    _check_pickle(data)


def load_scope() -> _LoadScope:
    """``with load_scope(): unpickler.load()``: the pickle loaded in the block restores its token
    data (TokenVector buffers, request token fields) through a table of its own, dropped when
    the block ends. One source named many times gives one vector (immutable: viewed or decoded
    once; mutable: copied once while its bytes are unchanged), and a pickle that names one
    mutable buffer more than 64 times is refused with ``pickle.UnpicklingError``, counted per
    pickle: a vector dropped during the load does not reset the count, and nothing carries over
    to the next pickle. tokenwire's receivers load every pickle in one; a stack with its own
    ``Unpickler`` opens it around ``load()``. Outside a scope the table is process-wide and
    weak (an entry lives as long as its vector), which bounds only what stays alive."""
    return _load_scope()
