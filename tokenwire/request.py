"""Pickle-compatible request objects whose token-id fields travel as int32 buffers.

Serving frameworks pickle their request objects across the proxy -> worker boundary, and many
consumers read ``request.prompt_token_ids`` as a ``list[int]``. Pickling that list costs one
PyLong frame per token each way; this module keeps the ``list[int]`` contract while the hot path
never builds the list:

* ``TokenIds`` is a data descriptor for one token-id field. Ids that arrive as a buffer are held
  as a ``TokenVector`` (native int32) and a ``list`` is built from it, in C, only when someone
  reads the attribute; the list is cached and later reads return the same object. A list the
  user sets is kept as that list (no copy, no conversion until the ids are pickled); a tuple is
  kept as that tuple, and read back as a tuple after pickling.
* ``TokenWireMixin`` (a base class) or ``token_fields`` (a class decorator, for dataclasses) give
  a class ``__getstate__`` / ``__setstate__`` that send each field as its buffer (an unread field
  is never turned into a list on either side) and ``__copy__`` / ``__deepcopy__`` that share or
  memcpy the buffer; slots of base classes travel and are copied too. ``token_fields`` wraps a
  ``__getstate__`` / ``__setstate__`` the class already has. Each class (each subclass too) is
  configured from its own attributes, resolved through the MRO as attribute lookup resolves
  them, on first use.
* ``token_buffer(obj, name)`` is the worker's hand-off: the ids as a TokenVector, no list built.
* ``GenerationRequest`` is a reference drop-in request built on both.

Why a descriptor and not a class-level ``__getattr__``: ``__getattr__`` runs a Python frame and
raises for *every* missing-attribute lookup on the object (``hasattr`` probes, copy/pickle dunder
lookups, duck typing); a descriptor is scoped to its one attribute, so everything else keeps the
interpreter's C-level miss. Why the attribute stays a ``list`` and not an array: ``ids[1:] +
[first]`` silently broadcasts on an ndarray and ``if ids:`` raises.

Never stale: a consumer may mutate the materialized list in place (append, sort, slice
assignment). Whenever the ids are needed as a buffer (``token_buffer``, pickling, copying) a
field whose list exists re-reads that list with ``as_tokens`` -- one C pass, about the cost of
``TokenVector.tolist()`` -- and keeps the held vector only if it is byte-identical (a memcmp).
A vector built from a user's list is not kept: it lives as long as the pickling that needed it.

Pickled state (version 1) is a dict::

    {"__tokenwire__": 1,                   # state version
     "<field>": TokenVector | bytes | str | (payload,) | list | tuple | None,
                                           # one entry per set TokenIds field, under its public
                                           # name: the vector ("raw"), or a wire frame (bytes;
                                           # a latin-1 str below protocol 3); ids that were a
                                           # tuple as a one-item tuple around that payload; for
                                           # ints that are not int32 ids, the list (tuple) itself
     "<attr>": value, ...}                 # every other instance attribute, pickled as usual

or ``(that dict, {slot: value})`` when base classes have slots. A ``TokenVector`` pickles as raw
int32 bytes, and at protocol 5 as a ``pickle.PickleBuffer``, so a pickler with a
``buffer_callback`` sends it out-of-band (zero-copy through ZMQ multipart frames, Ray, Dask). A
state without ``"__tokenwire__"`` is the list form: what the class pickled before tokenwire was
adopted (a plain ``list[int]`` under the public name or under ``_<field>``), and what
``list_on_wire`` writes during a rolling upgrade; it loads.

See docs/adopting.md for converting an existing request class.
"""

from __future__ import annotations

import _compat_pickle
import copy
import copyreg
import dataclasses
import functools
import importlib
import os
import pickle
import reprlib
import sys
from typing import Any, Callable, ClassVar, Optional, TypeVar, cast

from tokenwire._core import TokenVector, _restore_shared, as_tokens, check_codec, decode, encode
from tokenwire.errors import WireFormatError

__all__ = [
    "PICKLE_GLOBALS",
    "STATE_VERSION",
    "GenerationRequest",
    "TokenIds",
    "TokenWireMixin",
    "find_class",
    "list_on_wire",
    "token_buffer",
    "token_fields",
]

#: Version of the pickled state written by ``TokenWireMixin.__getstate__``.
STATE_VERSION = 1

#: Key of the version in the pickled state; its absence marks a list-form (legacy) state.
_VERSION_KEY = "__tokenwire__"

#: The globals tokenwire's own objects name in a pickle, at every protocol >= 2: a restricted
#: unpickler allows these plus the request classes it already trusts. (Protocols 0 and 1 name
#: ``copyreg._reconstructor`` and ``builtins.object`` for *any* plain object, tokenwire or not.)
PICKLE_GLOBALS: frozenset[tuple[str, str]] = frozenset({
    ("tokenwire._core", "_restore_token_vector"),
})

_MISSING: Any = object()

#: Class-level settings live in names starting with this prefix; a pickled state may never set one.
_CONFIG_PREFIX = "_tokenwire"


# --------------------------------------------------------------------------------------------
# Restricted unpicklers


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


# --------------------------------------------------------------------------------------------
# Rolling upgrades: "list on the wire"

_TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
_FALSE_WORDS = frozenset({"", "0", "false", "no", "off"})


def _env_flag(name: str) -> bool:
    """A boolean environment variable: 1/true/yes/on or 0/false/no/off (any case; unset or
    empty is off). Anything else raises ValueError naming the variable and its value."""
    raw = os.environ.get(name, "")
    word = raw.strip().lower()
    if word in _TRUE_WORDS:
        return True
    if word in _FALSE_WORDS:
        return False
    raise ValueError(f"{name}={raw!r} is not a boolean: use 1/true/yes/on or 0/false/no/off")


_list_on_wire = _env_flag("TOKENWIRE_LIST_ON_WIRE")


def list_on_wire(enabled: Optional[bool] = None) -> bool:
    """Process-wide: pickle token fields as plain ``list[int]`` (the format of the class before
    tokenwire), so that processes still running the unmodified class can read them. With
    `enabled`, set it and return the previous value; without, return it. Starts from the
    environment variable ``TOKENWIRE_LIST_ON_WIRE`` (``1``/``true``/``yes``/``on`` on,
    ``0``/``false``/``no``/``off`` or unset off; any other value fails at import). A class can
    override it with ``list_on_wire=True/False`` (see TokenWireMixin / token_fields).
    Receivers need no setting: tokenwire classes read both forms."""
    global _list_on_wire
    previous = _list_on_wire
    if enabled is not None:
        _list_on_wire = bool(enabled)
    return previous


# --------------------------------------------------------------------------------------------
# Per-instance storage of one field
#
# obj.__dict__[name] is, for a TokenIds field `name`:
#   absent        -- never set: reading raises AttributeError, as for any unset attribute;
#   None          -- set to None;
#   a list/tuple  -- the list or tuple the user set (or a list-form state carried): the source;
#   a _TokenField -- the ids held as a TokenVector (decoded from the wire, or set from a buffer),
#                    plus the list (or, for ids that were a tuple, the tuple) built from it on
#                    first read.
# So vars(obj) shows the public name, and shows the very list on an object built from a list.


class _TokenField:
    """Ids held as a TokenVector (`vector`, the source) and the list built from it on first
    read (`ids`, else None); `as_tuple`: the ids were a tuple, and read back as one. Once the
    list is found changed in place, the field is replaced by the bare list (the list is the
    source from then on)."""

    __slots__ = ("ids", "vector", "as_tuple")

    def __init__(self, vector: TokenVector, as_tuple: bool = False) -> None:
        if type(vector) is not TokenVector:
            # Reachable from a pickle (see __reduce__): never hold anything else.
            raise WireFormatError(f"_TokenField needs a TokenVector, got {type(vector).__name__}")
        self.ids: Any = None
        self.vector = vector
        self.as_tuple = as_tuple is True

    def built(self) -> Any:
        """A new list (or tuple) of the ids; not cached."""
        ids = self.vector.tolist()
        return tuple(ids) if self.as_tuple else ids

    def __repr__(self) -> str:
        listed = "" if self.ids is None else ", list built"
        return f"<token ids: {len(self.vector)} held as int32{listed}>"

    def __reduce__(self) -> tuple[Any, ...]:
        # Only reached when a class uses TokenIds without TokenWireMixin / token_fields
        # (default pickling of its __dict__): send the buffer, never the list.
        return (_TokenField, (self.vector, True)) if self.as_tuple else (_TokenField, (self.vector,))


# --------------------------------------------------------------------------------------------
# Codec hook: the one place where a field's pickled payload is produced and consumed


def _check_codec(codec: str) -> str:
    """The core's codec table (tokenwire.CODECS) is the one home of codec names: an unknown one
    raises its ValueError (listing the names), "zstd" without the zstandard package fails here,
    not later."""
    return check_codec(codec)


def _pack_field(codec: str, vector: TokenVector) -> Any:
    """The pickled payload of one field: for "raw" the vector itself (raw int32, out-of-band at
    protocol 5), for the compact codecs a wire frame (bytes, decoded by `_field_from_state`)."""
    if codec == "raw":
        return vector
    return encode(vector, codec=cast(Any, codec))


def _all_ints(values: Any) -> bool:
    """Every item is an int (bool included, as list[int] allows); the C pass first, it covers
    every list of int32 ids."""
    try:
        as_tokens(values)
        return True
    except (TypeError, OverflowError, ValueError):
        return all(isinstance(v, int) for v in values)


_HELD_KINDS = (TokenVector, bytes, bytearray, memoryview, str)


def _held_from_state(owner: str, name: str, payload: Any, as_tuple: bool) -> _TokenField:
    """A _TokenField from a TokenVector or a wire frame (bytes; a latin-1 str below protocol 3).
    One frame named by many fields or objects is decoded (a mutable one copied) once:
    `_restore_shared`."""
    kind = type(payload)
    if kind is TokenVector:
        return _TokenField(payload, as_tuple)
    try:
        try:
            vector = _restore_shared(payload, decode)
        except UnicodeEncodeError:
            raise WireFormatError("a frame sent as text must be latin-1 (code points < 256)") from None
        return _TokenField(vector, as_tuple)
    except WireFormatError as exc:
        raise WireFormatError(f"{owner} state key {name!r}: {exc}") from None


def _field_from_state(owner: str, name: str, payload: Any) -> Any:
    """What an instance stores for field `name` from its pickled payload: None, a list or tuple
    of ints, or a _TokenField. Anything else is hostile or damaged: WireFormatError naming the
    key."""
    if payload is None:
        return None
    kind = type(payload)
    if kind in _HELD_KINDS:
        return _held_from_state(owner, name, payload, False)
    if kind is tuple and len(payload) == 1 and type(payload[0]) in _HELD_KINDS:
        return _held_from_state(owner, name, payload[0], True)   # ids that were a tuple
    if kind is list or kind is tuple:
        # A list-form state (written before tokenwire, or with list_on_wire), or ints that are
        # not int32 ids (the fallback of __getstate__): kept as the list or tuple it was.
        if not _all_ints(payload):
            raise WireFormatError(f"{owner} state key {name!r}: a token field {kind.__name__} must hold ints")
        return payload
    raise WireFormatError(
        f"{owner} state key {name!r}: a token field is a TokenVector, a wire frame, a list or "
        f"tuple of ints or None, got {kind.__name__}"
    )


def _frames_as_text(payload: Any) -> Any:
    """Below protocol 3 pickle has no bytes opcode (bytes pickle through ``_codecs.encode``):
    a frame travels as a latin-1 str instead, as a TokenVector does."""
    if type(payload) is bytes:
        return payload.decode("latin-1")
    if type(payload) is tuple and len(payload) == 1 and type(payload[0]) is bytes:
        return (payload[0].decode("latin-1"),)
    return payload


# --------------------------------------------------------------------------------------------
# The descriptor


def _field_error(exc: Exception, where: str) -> Exception:
    """The same exception type, with the field named in the message."""
    return type(exc)(f"{where}: {exc}")


class TokenIds:
    """A token-id field: reads as a ``list[int]`` built lazily from a native int32 buffer.

        class Req(TokenWireMixin):
            prompt_token_ids = TokenIds()

    (on a dataclass, or to leave a class's bases alone, use the ``token_fields`` decorator.)

    * reading returns the ids as a ``list`` (None when set to None; AttributeError when never
      set, as for any attribute); the first read of ids held as a buffer builds the list in C
      and caches it, later reads return that same list object;
    * setting accepts a list or a tuple (kept as it is, like a plain attribute: a tuple stays
      a tuple, through pickling too), a TokenVector (shared: it is immutable), an ndarray or
      any integer buffer (converted with ``as_tokens``: one memcpy for native int32), or None.
      A nested list (a batch of prompts) is refused here, naming the field: a token field
      holds one sequence of ids;
    * ``Req.prompt_token_ids.buffer(obj)`` / ``tokenwire.token_buffer(obj, "prompt_token_ids")``
      -- the ids as a TokenVector (the hand-off to an engine), without building a list;
    * ``Req.prompt_token_ids.is_materialized(obj)`` -- whether a list exists.

    ``codec`` names how the field is sent when pickled: "raw" (int32, a memcpy each way, the
    default: the CPU-cheapest) or a compact wire codec for slow links -- "packed", "u16",
    "auto", "zstd" (see tokenwire.encode); the receiver needs no setting, frames describe
    themselves.
    """

    def __init__(self, *, codec: str = "raw", doc: Optional[str] = None) -> None:
        self.codec = _check_codec(codec)
        self.name = "<unbound>"
        self.__doc__ = doc

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @property
    def key(self) -> str:
        """The instance-__dict__ key the field stores under: its public name."""
        return self.name

    def __repr__(self) -> str:
        return f"TokenIds(name={self.name!r}, codec={self.codec!r})"

    # -- attribute protocol (hot: keep these short) --------------------------------------------

    def __get__(self, obj: Any, objtype: Optional[type] = None) -> Any:
        if obj is None:
            if sys._getframe(1).f_globals.get("__name__") == "dataclasses":
                # @dataclass is reading the class attribute as the field's default: the
                # descriptor was installed before the dataclass was built.
                raise TypeError(
                    f"{getattr(objtype, '__name__', '?')}.{self.name} is a token field, and "
                    f"@dataclass would take it as the field's default: write "
                    f"@tokenwire.token_fields(...) above @dataclass (not below it, and not "
                    f"`{self.name}: ... = TokenIds()`)"
                )
            return self
        try:                              # inline: every read of the field takes this path
            value = obj.__dict__[self.name]
        except KeyError:
            raise self._unset(obj) from None
        if type(value) is _TokenField:
            ids = value.ids
            if ids is None:
                ids = value.ids = value.built()
            return ids
        return value

    def __set__(self, obj: Any, value: Any) -> None:
        if value is None:
            obj.__dict__[self.name] = None
        elif isinstance(value, (list, tuple)):
            if value and isinstance(value[0], (list, tuple)):
                raise TypeError(
                    f"{type(obj).__name__}.{self.name}: a token field holds one sequence of ids, "
                    f"got a nested {type(value).__name__} (item 0 is a {type(value[0]).__name__}); "
                    f"keep a batch of prompts in a plain attribute"
                )
            obj.__dict__[self.name] = value
        elif type(value) is _TokenField:
            # tokenwire's holder, as a class's own __setstate__ receives it: a fresh, checked one
            obj.__dict__[self.name] = _TokenField(value.vector, value.as_tuple)
        else:
            try:
                vector = as_tokens(value)
            except (TypeError, ValueError, OverflowError) as exc:
                raise _field_error(exc, f"{type(obj).__name__}.{self.name}") from None
            obj.__dict__[self.name] = _TokenField(vector)

    def __delete__(self, obj: Any) -> None:
        try:
            del obj.__dict__[self.name]
        except KeyError:
            raise AttributeError(self.name) from None

    # -- buffer access -------------------------------------------------------------------------

    def _vector(self, obj: Any, value: Any) -> Optional[TokenVector]:
        """The stored `value` as a TokenVector, reflecting in-place changes to a list. A held
        field whose list was changed (even to values that are not int32 ids) is replaced by
        that list first: from then on the list is the source, as on an object built from it."""
        if value is None:
            return None
        if type(value) is _TokenField:
            ids = value.ids
            if ids is None:
                return value.vector
            try:
                fresh: Optional[TokenVector] = as_tokens(ids)     # one C pass over the list
            except (TypeError, ValueError, OverflowError):
                fresh = None
            if fresh is not None and fresh == value.vector:       # a memcmp
                return value.vector
            if obj.__dict__.get(self.name) is value:
                obj.__dict__[self.name] = ids                     # changed in place
            if fresh is not None:
                return fresh
            value = ids
        try:
            return as_tokens(value)
        except (TypeError, ValueError, OverflowError) as exc:
            raise _field_error(exc, f"{type(obj).__name__}.{self.name}") from None

    def buffer(self, obj: Any) -> Optional[TokenVector]:
        """The ids as a TokenVector (None when set to None), without building a list -- the
        worker's hand-off to an engine. Held ids are returned as they are; a list is converted
        (one C pass), so in-place changes to it are reflected. AttributeError when unset;
        the error of ``as_tokens``, naming the field, for ids that are not int32."""
        return self._vector(obj, self._stored(obj))

    def _stored(self, obj: Any) -> Any:
        """What the instance holds for this field."""
        try:
            return obj.__dict__[self.name]
        except KeyError:
            raise self._unset(obj) from None

    def _unset(self, obj: Any) -> AttributeError:
        """The error of reading a field that was never set: the unmodified class's."""
        return AttributeError(f"{type(obj).__name__!r} object has no attribute {self.name!r}")

    def held_buffer(self, obj: Any) -> Optional[TokenVector]:
        """The TokenVector the ids are held as -- decoded from the wire or set from a buffer --
        as long as any materialized list still equals it; None otherwise: unset, set from a
        Python list, or the list was found changed in place (from then on the list is the
        source of the ids, even if it is later changed back). Never raises."""
        value = obj.__dict__.get(self.name)
        if type(value) is not _TokenField:
            return None
        try:
            vector = self._vector(obj, value)
        except (TypeError, ValueError, OverflowError):
            return None
        return vector if obj.__dict__.get(self.name) is value else None

    def is_materialized(self, obj: Any) -> bool:
        """Whether a ``list`` (or tuple) of the ids exists on `obj` (read, or set as one)."""
        value = obj.__dict__.get(self.name)
        return isinstance(value, (list, tuple)) or (type(value) is _TokenField and value.ids is not None)

    def length(self, obj: Any) -> int:
        """Number of ids (0 when unset or None), without building a list."""
        value = obj.__dict__.get(self.name)
        if value is None:
            return 0
        return len(value.vector) if type(value) is _TokenField else len(value)

    def summary(self, obj: Any) -> str:
        """A short description of the ids for ``__repr__``: length, head and tail."""
        value = obj.__dict__.get(self.name, _MISSING)
        if value is _MISSING:
            return "<unset>"
        if value is None:
            return "None"
        ids = value.vector if type(value) is _TokenField else value
        n = len(ids)
        if n <= 6:
            return repr(list(ids))
        head = ", ".join(str(ids[i]) for i in range(3))
        tail = ", ".join(str(ids[i]) for i in range(n - 3, n))
        return f"<{n} ids: [{head}, ..., {tail}]>"

    # -- pickling ------------------------------------------------------------------------------

    def _payload(self, obj: Any, value: Any) -> Any:
        """The pickled payload of the stored `value` (current state format): the vector or a
        frame; ``(payload,)`` for ids that are a tuple; the list or tuple itself for ints that
        are not int32 ids, however the list came to be (set, or read and changed in place)."""
        try:
            vector = self._vector(obj, value)
        except (TypeError, OverflowError):
            # Not int32 ids -- ids >= 2**31, bools: what the unmodified class pickled fine is
            # sent as that same list. Anything else in the list still fails, naming the field.
            ids = value.ids if type(value) is _TokenField else value
            if isinstance(ids, (list, tuple)) and _all_ints(ids):
                return ids
            raise
        if vector is None:
            return None
        payload = _pack_field(self.codec, vector)
        if isinstance(value, tuple) or (type(value) is _TokenField and value.as_tuple):
            return (payload,)
        return payload

    def _listed(self, value: Any) -> Any:
        """The stored `value` as the unmodified class held it (list form), caching nothing."""
        if type(value) is _TokenField:
            return value.built() if value.ids is None else value.ids
        return value


def token_buffer(obj: Any, name: str) -> Optional[TokenVector]:
    """The token ids of ``obj.<name>`` as a TokenVector, for a hand-off to native code (an
    engine's ``Request(input_token_ids=...)`` constructor memcpys a 1-D int32 buffer).

    On a tokenwire field, the held buffer without building a list (see TokenIds.buffer); on any
    other attribute -- a plain ``list[int]`` of a class not (yet) converted -- one ``as_tokens``
    pass. None when the value is None; AttributeError when unset."""
    desc = getattr(type(obj), name, None)
    if isinstance(desc, TokenIds):
        return desc.buffer(obj)
    value = getattr(obj, name)
    return None if value is None else as_tokens(value)


# --------------------------------------------------------------------------------------------
# Per-class configuration: computed for each class on first use, cached in that class's own
# __dict__ (a subclass never uses its base's), every name resolved as attribute lookup
# resolves it -- by the first class in the MRO that defines it.

_short = reprlib.Repr()
_short.maxstring = 60
_short.maxother = 80
_short.maxlist = 6
_short.maxdict = 6

_CONFIG_ATTR = "_tokenwire_config"
_ACCEPTED_CACHE_MAX = 1024


class _Config:
    """What pickling, copying and __setstate__'s checks need to know about one class."""

    __slots__ = ("fields", "keys", "fieldmap", "reserved", "slotnames", "slots", "frames",
                 "list_on_wire", "accepted")

    def __init__(self, cls: type) -> None:
        resolved: dict[str, Any] = {}
        for klass in reversed(cls.__mro__):        # later (more derived) classes win
            resolved.update(vars(klass))
        #: (name, descriptor) of every TokenIds field, base classes' included, base order.
        self.fields = tuple((n, a) for n, a in resolved.items() if isinstance(a, TokenIds))
        self.keys = frozenset(n for n, _ in self.fields)
        self.fieldmap = dict(self.fields)
        #: Names a pickled state may not set in __dict__: data descriptors (properties,
        #: slots, TokenIds, __dict__...), methods (functions, classmethods, staticmethods...:
        #: an instance attribute would shadow the method) and special names the class defines.
        #: A non-data descriptor that is not a method (functools.cached_property) keeps its
        #: value in __dict__ under its own name, so it stays allowed.
        self.reserved = frozenset(
            n for n, a in resolved.items()
            if hasattr(type(a), "__set__") or n[:2] == "__" == n[-2:]
            or hasattr(type(a), "__get__") and (
                callable(a) or isinstance(a, (classmethod, staticmethod, functools.partialmethod))))
        self.slotnames: tuple[str, ...] = tuple(copyreg._slotnames(cls))  # type: ignore[attr-defined]
        self.slots = frozenset(self.slotnames)
        self.frames = any(d.codec != "raw" for _, d in self.fields)
        #: True/False: this class's choice of list-on-the-wire; None: follow ``list_on_wire()``.
        self.list_on_wire: Optional[bool] = getattr(cls, "_tokenwire_list_on_wire", None)
        #: Ordinary keys already found acceptable (a bounded cache of the check below).
        self.accepted: set[str] = set()


def _config(cls: type) -> _Config:
    config = cls.__dict__.get(_CONFIG_ATTR)
    if config is None:
        config = _Config(cls)
        setattr(cls, _CONFIG_ATTR, config)
    return cast(_Config, config)


def _reconfigure(cls: type) -> _Config:
    if _CONFIG_ATTR in vars(cls):
        delattr(cls, _CONFIG_ATTR)
    return _config(cls)


def _state_key_problem(config: _Config, key: Any, strict: bool = True) -> Optional[str]:
    """Why `key` may not become an instance attribute from a pickled state, or None. Never a
    class-level tokenwire setting; with `strict` (tokenwire stores the state itself) also not a
    non-string, nor a name that shadows something class-level -- a property, slot or other data
    descriptor (the __dict__ entry would be dead), a method (the entry would replace it) or a
    special name the class defines."""
    if type(key) is not str:
        return "is not a string" if strict else None
    if key.startswith(_CONFIG_PREFIX):
        return "names class-level configuration"
    if strict and key in config.reserved:
        return ("names a class-level attribute (a method, property, slot, descriptor or special "
                "name)")
    return None


def _to_state(obj: Any, config: _Config, attrs: dict[str, Any]) -> dict[str, Any]:
    """The pickled dict state of `attrs` (the instance __dict__, or what a class's own
    __getstate__ returned): token fields as payloads under a version key, or in list form."""
    as_lists = config.list_on_wire
    if as_lists is None:
        as_lists = _list_on_wire
    state: dict[str, Any] = {} if as_lists else {_VERSION_KEY: STATE_VERSION}
    fields = config.fieldmap
    for key, value in attrs.items():          # in the object's order (an unset field: absent)
        desc = fields.get(key)
        if desc is None:
            state[key] = value
        elif as_lists:
            state[key] = desc._listed(value)          # the list-form state: a plain list
        else:
            state[key] = desc._payload(obj, value)
    return state


def _slot_values(obj: Any, slotnames: tuple[str, ...]) -> dict[str, Any]:
    slots = {}
    for name in slotnames:
        try:
            slots[name] = getattr(obj, name)
        except AttributeError:
            pass
    return slots


def _checked_state(cls: type, state: Any, strict: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """(updates, slot updates) from a pickled state: token fields converted to what an
    instance stores (_MISSING: unset), every key checked. Raises WireFormatError naming the key
    before anything is stored."""
    owner = cls.__name__
    config = _config(cls)
    slots: Any = None
    if type(state) is tuple:                            # (dict, slots) of default pickling
        if len(state) != 2:
            raise WireFormatError(f"{owner} state tuple must be (dict, slots), got {len(state)} items")
        state, slots = state
    if state is None:
        state = {}
    if type(state) is not dict:
        raise WireFormatError(f"{owner} state must be a dict, got {type(state).__name__}")
    if slots is not None and type(slots) is not dict:
        raise WireFormatError(f"{owner} slot state must be a dict, got {type(slots).__name__}")
    fields = config.fieldmap
    version = state.get(_VERSION_KEY)
    legacy = version is None
    if not legacy and (type(version) is not int or not 1 <= version <= STATE_VERSION):
        raise WireFormatError(
            f"{owner} state version {version!r} is not supported "
            f"(this tokenwire reads versions 1..{STATE_VERSION})"
        )
    # Keys keep the state's order, so vars() lists them as the sender's object did.
    updates = dict(state)
    if not legacy:
        del updates[_VERSION_KEY]
    # List form (legacy): written before tokenwire, or with list_on_wire. A field may be
    # under its public name or under "_<name>" (a property's backing attribute);
    # "_<name>_i32" was the hand-written side channel this layer replaces.
    aliases: dict[str, str] = {}
    if legacy:
        for name in fields:
            aliases["_" + name] = name
            aliases["_" + name + "_i32"] = ""
    accepted = config.accepted if strict else set()
    for key in updates:        # runs for every attribute of every request: cached when fine
        if key in accepted or key in fields or key in aliases:
            continue
        problem = _state_key_problem(config, key, strict)
        if problem is not None:
            raise WireFormatError(f"{owner} state key {key!r} {problem}")
        if strict and len(accepted) < _ACCEPTED_CACHE_MAX:
            accepted.add(key)
    for name in fields:
        if name in updates:
            updates[name] = _field_from_state(owner, name, updates[name])
    for alias, name in aliases.items():
        if alias in updates:
            value = updates.pop(alias)
            if name and name not in updates:        # the public name wins
                updates[name] = _field_from_state(owner, name, value)
    for name in fields:
        if name not in updates:
            updates[name] = _MISSING                 # absent from the state: unset
    slot_updates: dict[str, Any] = {}
    if slots:
        for key, value in slots.items():
            if key in fields:
                updates[key] = _field_from_state(owner, key, value)
            elif key in config.slots or not strict and type(key) is str and not key.startswith(_CONFIG_PREFIX):
                slot_updates[key] = value
            else:
                raise WireFormatError(f"{owner} slot state key {key!r} is not a slot of the class")
    return updates, slot_updates


# --------------------------------------------------------------------------------------------
# The mixin


class TokenWireMixin:
    """Pickling, copying and ``__repr__`` for a class with ``TokenIds`` fields.

    Instances need a ``__dict__`` (the fields keep their storage there); slots of base classes
    are pickled and copied too. See the module docstring for the state format.
    ``class Req(TokenWireMixin, list_on_wire=True)`` pickles this class's token fields as plain
    lists regardless of the process-wide ``list_on_wire()``. Every subclass gets its own
    configuration: a subclass that overrides a field with a plain attribute has a plain
    attribute there, one that adds a property keeps states from setting it.
    """

    #: True/False: this class's choice of list-on-the-wire; None: follow ``list_on_wire()``.
    _tokenwire_list_on_wire: ClassVar[Optional[bool]] = None

    def __init_subclass__(cls, list_on_wire: Optional[bool] = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if list_on_wire is not None:
            cls._tokenwire_list_on_wire = bool(list_on_wire)

    # -- pickling ------------------------------------------------------------------------------

    def __getstate__(self) -> Any:
        config = _config(type(self))       # configuration is read from the class, never the instance
        state = _to_state(self, config, self.__dict__)
        if config.slotnames:
            slots = _slot_values(self, config.slotnames)
            if slots:
                return state, slots
        return state

    def __setstate__(self, state: Any) -> None:
        updates, slots = _checked_state(type(self), state, strict=True)
        attrs = self.__dict__
        for key, value in updates.items():
            if value is _MISSING:
                attrs.pop(key, None)
            else:
                attrs[key] = value
        for key, value in slots.items():
            object.__setattr__(self, key, value)

    def __reduce_ex__(self, protocol: Any) -> Any:
        rv = object.__reduce_ex__(self, protocol)
        if protocol >= 3 or not _config(type(self)).frames:
            return rv
        return _reduce_frames_as_text(self, rv)

    # -- copying: the buffer is shared (immutable) or memcpy'd, never copied per token ---------

    def __copy__(self) -> Any:
        # Like a plain object's shallow copy: the same list (and the same held ids) is shared.
        cls = type(self)
        new = cls.__new__(cls)
        new.__dict__.update(self.__dict__)
        for key, value in _slot_values(self, _config(cls).slotnames).items():
            object.__setattr__(new, key, value)
        return new

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        cls = type(self)
        config = _config(cls)
        new = cls.__new__(cls)
        memo[id(self)] = new
        keys = config.keys
        new_attrs = new.__dict__
        for key, value in self.__dict__.items():
            if key not in keys:
                new_attrs[key] = copy.deepcopy(value, memo)
        for name, desc in config.fields:
            value = self.__dict__.get(name, _MISSING)
            if value is _MISSING or value is None:
                if value is None:
                    new_attrs[name] = None
                continue
            if type(value) is _TokenField:
                try:
                    desc._vector(self, value)               # a changed list becomes the source
                except (TypeError, ValueError, OverflowError):
                    pass
                value = self.__dict__[name]
            if type(value) is _TokenField:
                # itself if owned (immutable), else one memcpy
                new_attrs[name] = _TokenField(copy.deepcopy(value.vector, memo), value.as_tuple)
            elif id(value) in memo:
                new_attrs[name] = memo[id(value)]
            elif type(value) is tuple and _all_ints(value):
                new_attrs[name] = value                      # immutable all the way down
            elif type(value) is list and _all_ints(value):
                new_attrs[name] = memo[id(value)] = value[:]     # ints are immutable
            else:
                new_attrs[name] = copy.deepcopy(value, memo)
        for key, value in _slot_values(self, config.slotnames).items():
            object.__setattr__(new, key, copy.deepcopy(value, memo))
        return new

    # -- repr ----------------------------------------------------------------------------------

    def __repr__(self) -> str:
        config = _config(type(self))
        parts = [f"{name}={desc.summary(self)}" for name, desc in config.fields]
        keys = config.keys
        parts += [
            f"{key}={_short.repr(value)}"
            for key, value in self.__dict__.items()
            if key not in keys and not key.startswith("_")
        ]
        return f"{type(self).__name__}({', '.join(parts)})"


def _reduce_frames_as_text(obj: Any, rv: Any) -> Any:
    """`rv` (a reduce tuple below protocol 3) with compact-codec frames in tokenwire's state
    sent as latin-1 str, so the pickle names no ``_codecs.encode``."""
    if type(rv) is not tuple or len(rv) < 3:
        return rv
    state = rv[2]
    slots = _MISSING
    if type(state) is tuple and len(state) == 2:
        state, slots = state
    if type(state) is not dict or _VERSION_KEY not in state:
        return rv                                 # not tokenwire's state (a class's own reduce)
    state = dict(state)
    for name, desc in _config(type(obj)).fields:
        if desc.codec != "raw" and name in state:
            state[name] = _frames_as_text(state[name])
    return (*rv[:2], state if slots is _MISSING else (state, slots), *rv[3:])


_OURS = {vars(TokenWireMixin)[m] for m in ("__getstate__", "__setstate__", "__reduce_ex__",
                                          "__copy__", "__deepcopy__")}


def _wrap_getstate(user: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """The class's own __getstate__, then tokenwire's conversion of the token fields in the
    dict (or (dict, slots)) it returns; any other state is left as the class made it."""
    @functools.wraps(user)
    def __getstate__(self: Any) -> Any:
        state = user(self)
        config = _config(type(self))
        if type(state) is dict:
            return _to_state(self, config, state)
        if type(state) is tuple and len(state) == 2 and type(state[0]) is dict:
            return _to_state(self, config, state[0]), state[1]
        return state
    _OURS.add(__getstate__)
    return __getstate__


def _wrap_setstate(user: Callable[[Any, Any], None]) -> Callable[[Any, Any], None]:
    """tokenwire's checks and conversion of the token fields (payloads to what an instance
    stores; a class-level setting is never taken), then the class's own __setstate__ with the
    converted state, in the shape it was sent."""
    @functools.wraps(user)
    def __setstate__(self: Any, state: Any) -> None:
        shaped = type(state) is tuple and len(state) == 2 and all(
            part is None or type(part) is dict for part in state)
        if type(state) is dict or shaped:
            updates, slots = _checked_state(type(self), state, strict=False)
            clean = {k: v for k, v in updates.items() if v is not _MISSING}
            state = (clean, slots or None) if shaped else clean
        user(self, state)
    _OURS.add(__setstate__)
    return __setstate__


_C = TypeVar("_C", bound=type)


def _own_method(cls: type, name: str) -> Any:
    """What `cls` resolves `name` to, unless that is object's default or tokenwire's own."""
    method = getattr(cls, name, None)
    if method is None or method is getattr(object, name, None) or method in _OURS:
        return None
    return method


def token_fields(*names: str, codec: str = "raw",
                 list_on_wire: Optional[bool] = None) -> Callable[[_C], _C]:
    """Class decorator: make the attributes `names` token-id fields (TokenIds) and give the class
    tokenwire's pickling and copying -- without touching its bases, annotations or signature.

    Written above ``@dataclass``, it runs after the dataclass is built, so the fields keep
    their place in ``__init__`` (positional construction, fields without defaults after them),
    and ``dataclasses.fields/asdict/astuple/replace``, the generated ``__eq__`` and ``__repr__``
    behave as before::

        @tokenwire.token_fields("input_ids")
        @dataclass
        class TokenizedGenerateReqInput:
            rid: str
            input_text: str
            input_ids: List[int]
            ...

    On a dataclass every name must be one of its fields (TypeError otherwise); written below
    ``@dataclass`` it raises TypeError when the dataclass is built.

    A ``__getstate__`` / ``__setstate__`` the class has (its own or a base's) is wrapped, not
    replaced: tokenwire's ``__getstate__`` calls it and sends the token fields in the dict it
    returns as buffers; tokenwire's ``__setstate__`` checks and converts them, then calls it
    with the state (token fields as tokenwire's holders: store them with ``__dict__.update`` or
    ``setattr``). ``__copy__`` / ``__deepcopy__`` / ``__reduce__`` the class has are kept.
    Slots of base classes are pickled and copied. Instances need a ``__dict__``
    (``@dataclass(slots=True)`` is refused)."""
    for name in names:
        if not isinstance(name, str) or not name.isidentifier():
            raise TypeError(f"token_fields() takes attribute names, got {name!r}")
    _check_codec(codec)

    def decorate(cls: _C) -> _C:
        if "__slots__" in vars(cls) and "__dict__" not in vars(cls)["__slots__"]:
            raise TypeError(f"token_fields({cls.__name__}): instances need a __dict__, "
                            f"the class has __slots__ without one")
        if dataclasses.is_dataclass(cls):
            known = [f.name for f in dataclasses.fields(cls)]
            for name in names:
                if name not in known:
                    raise TypeError(f"token_fields({cls.__name__}): {name!r} is not a field of "
                                    f"the dataclass (its fields: {', '.join(known)})")
        for name in names:
            desc = TokenIds(codec=codec)
            desc.__set_name__(cls, name)
            setattr(cls, name, desc)
        getstate, setstate = _own_method(cls, "__getstate__"), _own_method(cls, "__setstate__")
        mixin = vars(TokenWireMixin)
        if getstate is not None:
            setattr(cls, "__getstate__", _wrap_getstate(getstate))
        elif getattr(cls, "__getstate__", None) not in _OURS:
            setattr(cls, "__getstate__", mixin["__getstate__"])
        if setstate is not None:
            setattr(cls, "__setstate__", _wrap_setstate(setstate))
        elif getattr(cls, "__setstate__", None) not in _OURS:
            setattr(cls, "__setstate__", mixin["__setstate__"])
        if getattr(cls, "__reduce_ex__") is object.__reduce_ex__ and \
                getattr(cls, "__reduce__") is object.__reduce__:
            setattr(cls, "__reduce_ex__", mixin["__reduce_ex__"])
        for method in ("__copy__", "__deepcopy__"):
            if getattr(cls, method, None) is None:
                setattr(cls, method, mixin[method])
        if list_on_wire is not None:
            setattr(cls, "_tokenwire_list_on_wire", bool(list_on_wire))
        _reconfigure(cls)
        return cls

    return decorate


# --------------------------------------------------------------------------------------------
# The reference request


class GenerationRequest(TokenWireMixin):
    """A drop-in generation request whose token ids cross process boundaries as int32 buffers.

    ``prompt_token_ids`` / ``query_token_ids`` read as ``list[int]`` (lazily, see TokenIds);
    worker code that hands the ids to a native constructor takes
    ``tokenwire.token_buffer(request, "prompt_token_ids")`` instead and never builds the list
    (``_prompt_token_ids_i32``, the seed's name, is kept: the held buffer, or None).
    """

    prompt_token_ids = TokenIds(doc="The prompt's token ids, a list[int] built on first read.")
    query_token_ids = TokenIds(doc="Optional query token ids, a list[int] built on first read.")

    def __init__(
        self,
        prompt_token_ids: Any,
        sampling_params: Any = None,
        query_token_ids: Any = None,
        *,
        streaming: bool = False,
        arrival_time: Optional[float] = None,
        id: Optional[int] = None,
        lora_request: Any = None,
        disaggregated_params: Any = None,
    ) -> None:
        self.prompt_token_ids = prompt_token_ids
        self.query_token_ids = query_token_ids
        self.sampling_params = sampling_params
        self.streaming = streaming
        self.arrival_time = arrival_time
        self.id = id
        self.lora_request = lora_request
        self.disaggregated_params = disaggregated_params

    def set_id(self, id: int) -> "GenerationRequest":
        """Assign the request id (executors number requests on submit); returns self."""
        self.id = id
        return self

    @property
    def prompt_len(self) -> int:
        """Number of prompt tokens, without building the list."""
        return _PROMPT_FIELD.length(self)

    @property
    def _prompt_token_ids_i32(self) -> Optional[TokenVector]:
        """The prompt as the int32 TokenVector the native constructor memcpys, whenever the ids
        are held as a buffer (decoded from the wire, or set from an array) and any materialized
        list is unchanged; None otherwise (e.g. built from a Python list on the proxy side)."""
        return _PROMPT_FIELD.held_buffer(self)


#: The prompt field itself (a module global: the side channel reads it on the hot path).
_PROMPT_FIELD: TokenIds = GenerationRequest.__dict__["prompt_token_ids"]
