"""Unpickling bytes from another party: the globals tokenwire's objects name in a pickle, a
``find_class`` that resolves only an allow-list of them, ``check_pickle``, which refuses a
pickle that would make the unpickler allocate more than the pickle's own size, and
``load_scope``, which bounds how often one pickle may restore token data from one source.
See docs/design.md, "tokenwire/unpickle.py"."""

from __future__ import annotations

import _compat_pickle
import importlib
import pickle
from typing import Any

from tokenwire._core import check_pickle, load_scope

__all__ = ["check_pickle", "find_class", "load_scope"]

#: The globals tokenwire's own objects name in a pickle, at every protocol >= 2: a restricted
#: unpickler allows these plus the request classes it already trusts. (Protocols 0 and 1 name
#: ``copyreg._reconstructor`` and ``builtins.object`` for *any* plain object, tokenwire or not.)
_PICKLE_GLOBALS: frozenset[tuple[str, str]] = frozenset({
    ("tokenwire._core", "_restore_token_vector"),
})


def find_class(module: str, name: str, allow: Any = frozenset()) -> Any:
    """``Unpickler.find_class`` for an allow-list: resolve ``module.name`` only when it is in
    `allow` (pairs ``(module, name)``) or among the globals tokenwire's own objects name; otherwise raise
    ``pickle.UnpicklingError`` naming the global. Nothing else is imported::

        class SafeUnpickler(pickle.Unpickler):
            def find_class(self, module, name):
                return tokenwire.unpickle.find_class(module, name, allow=MY_REQUEST_CLASSES)

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
    if (module, name) not in _PICKLE_GLOBALS and (module, name) not in allow:
        raise pickle.UnpicklingError(f"global '{module}.{name}' is not allowed")
    obj: Any = importlib.import_module(module)
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj
