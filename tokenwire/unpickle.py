"""Restricted unpickling: the globals tokenwire's objects name in a pickle, and a ``find_class``
that resolves only an allow-list of them.

A pickle can name any importable callable; an unpickler that receives bytes from another party
should resolve only the globals it expects. ``PICKLE_GLOBALS`` lists tokenwire's own; a request
class adds itself (``(module, qualified name)``) to the allow-list it passes to ``find_class``.
"""

from __future__ import annotations

import _compat_pickle
import importlib
import pickle
from typing import Any

__all__ = ["PICKLE_GLOBALS"]      # find_class is public as tokenwire.find_class

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
