"""Pickle-compatible request objects whose token-id fields travel as int32 buffers.

Serving frameworks pickle their request objects across the proxy -> worker boundary, and many
consumers read ``request.prompt_token_ids`` as a ``list[int]``. Pickling that list costs one
PyLong frame per token each way; this module keeps the ``list[int]`` contract while the hot path
never builds the list:

* ``TokenIds`` is a data descriptor for one token-id field. The ids are held as a ``TokenVector``
  (native int32) and a ``list`` is built from it, in C, only when someone reads the attribute;
  the list is cached and later reads return the same object.
* ``TokenWireMixin`` gives a class ``__getstate__`` / ``__setstate__`` that send each field as its
  buffer (an unread field is never turned into a list on either side), ``__copy__`` /
  ``__deepcopy__`` that share or memcpy the buffer, and a short ``__repr__``.
* ``GenerationRequest`` is a reference drop-in request built on both.

Why a descriptor and not a class-level ``__getattr__``: ``__getattr__`` runs a Python frame and
raises for *every* missing-attribute lookup on the object (``hasattr`` probes, copy/pickle dunder
lookups, duck typing); a descriptor is scoped to its one attribute, so everything else keeps the
interpreter's C-level miss. Why the attribute stays a ``list`` and not an array: ``ids[1:] +
[first]`` silently broadcasts on an ndarray and ``if ids:`` raises.

Never stale: a consumer may mutate the materialized list in place (append, sort, slice
assignment). Whenever the ids are needed as a buffer (``TokenIds.buffer``, the
``_prompt_token_ids_i32`` side channel, pickling, copying) a field whose list exists re-reads that
list with ``as_tokens`` -- one C pass, about the cost of ``TokenVector.tolist()`` -- and keeps the
previous vector only if it is byte-identical (a memcmp). A field that was never read costs
nothing: without a list there is nothing that could have changed.

Pickled state (version 1) is a dict::

    {"__tokenwire__": 1,                   # state version
     "<field>": TokenVector | bytes | None,  # one entry per TokenIds field, under its public
                                           # name: the vector ("raw") or a wire frame
     "<attr>": value, ...}                 # every other instance attribute, pickled as usual

A ``TokenVector`` pickles as raw int32 bytes, and at protocol 5 as a ``pickle.PickleBuffer``, so a
pickler with a ``buffer_callback`` sends it out-of-band (zero-copy through ZMQ multipart frames,
Ray, Dask). A state without ``"__tokenwire__"`` is one written before tokenwire was adopted: a
plain ``list[int]`` under the public name or under ``_<field>``; it still loads.
"""

from __future__ import annotations

import copy
import reprlib
from typing import Any, ClassVar, Optional, cast

from tokenwire._core import TokenVector, as_tokens, decode, encode
from tokenwire.errors import WireFormatError

__all__ = ["STATE_VERSION", "GenerationRequest", "TokenIds", "TokenWireMixin"]

#: Version of the pickled state written by ``TokenWireMixin.__getstate__``.
STATE_VERSION = 1

#: Key of the version in the pickled state; its absence marks a pre-tokenwire (legacy) state.
_VERSION_KEY = "__tokenwire__"

#: Codecs a field may name (those of tokenwire.encode). "raw" travels as the TokenVector itself
#: (a memcpy each way, out-of-band at protocol 5); the others as a wire frame (bytes).
_CODECS = ("raw", "u16", "packed", "auto", "zstd")

_MISSING = object()


# --------------------------------------------------------------------------------------------
# Per-instance storage of one field


class _TokenField:
    """What an instance holds for one TokenIds field (stored in its ``__dict__``).

    ``ids``    -- the materialized ``list[int]`` (or the list the user set), else None;
    ``vector`` -- a TokenVector of the ids, else None (at least one of the two is set);
    ``held``   -- True when ``vector`` is the source of the ids (decoded from the wire or set from
                  a buffer) rather than a cache built from a list. Cleared once a materialized
                  list is found to differ from it.
    """

    __slots__ = ("ids", "vector", "held")

    def __init__(self, ids: Optional[list[int]], vector: Optional[TokenVector], held: bool) -> None:
        self.ids = ids
        self.vector = vector
        self.held = held

    def sync(self) -> TokenVector:
        """The ids as a TokenVector, reflecting any in-place change to the list."""
        ids = self.ids
        if ids is None:
            return cast(TokenVector, self.vector)      # a field holds a list or a vector
        fresh = as_tokens(ids)            # one C pass over the list (validates every id)
        vec = self.vector
        if vec is not None and vec == fresh:   # TokenVector == TokenVector is a memcmp
            return vec
        self.vector = fresh
        self.held = False
        return fresh

    def __repr__(self) -> str:
        ids = "None" if self.ids is None else f"<list of {len(self.ids)}>"
        vec = "None" if self.vector is None else f"<TokenVector of {len(self.vector)}>"
        return f"_TokenField(ids={ids}, vector={vec}, held={self.held})"

    def __reduce__(self) -> tuple[Any, ...]:
        # Only reached when a class uses TokenIds without TokenWireMixin (default pickling of
        # its __dict__): send the buffer, never the list.
        return _TokenField, (None, self.sync(), self.held)


# --------------------------------------------------------------------------------------------
# Codec hook: the one place where a field's pickled payload is produced and consumed


def _check_codec(codec: str) -> str:
    if codec not in _CODECS:
        raise ValueError(
            f"unknown token codec {codec!r}; expected one of {', '.join(map(repr, _CODECS))}"
        )
    if codec != "raw":
        encode([], codec=cast(Any, codec))   # "zstd" without the zstandard package fails here, not later
    return codec


def _pack_field(codec: str, vector: TokenVector) -> Any:
    """The pickled payload of one field: for "raw" the vector itself (raw int32, out-of-band at
    protocol 5), for the compact codecs a wire frame (bytes, decoded by `_unpack_field`)."""
    if codec == "raw":
        return vector
    return encode(vector, codec=cast(Any, codec))


def _unpack_field(name: str, payload: Any) -> TokenVector:
    """A field's TokenVector from its pickled payload (self-describing: dispatch on its type)."""
    if type(payload) is TokenVector:
        return payload
    if isinstance(payload, (bytes, bytearray, memoryview)):
        try:
            return decode(payload)
        except WireFormatError as exc:
            raise type(exc)(f"token field {name!r}: {exc}") from None
    raise WireFormatError(
        f"token field {name!r}: expected a TokenVector or a wire frame, "
        f"got {type(payload).__name__}"
    )


# --------------------------------------------------------------------------------------------
# The descriptor


def _field_error(exc: Exception, where: str) -> Exception:
    """The same exception type, with the field named in the message."""
    return type(exc)(f"{where}: {exc}")


class TokenIds:
    """A token-id field: reads as a ``list[int]`` built lazily from a native int32 buffer.

        class Req(TokenWireMixin):
            prompt_token_ids = TokenIds()

    * reading returns the ids as a ``list`` (or None when unset); the first read of ids held as a
      buffer builds the list in C and caches it, later reads return that same list object;
    * setting accepts a list or tuple (held as a list: no conversion until the ids are needed
      as a buffer), a TokenVector (shared: it is immutable), an ndarray or any integer buffer
      (converted with ``as_tokens``: one memcpy for native int32), or None;
    * ``Req.prompt_token_ids.buffer(obj)`` -- the ids as a TokenVector without building a list;
    * ``Req.prompt_token_ids.is_materialized(obj)`` -- whether a list exists.

    ``codec`` names how the field is sent when pickled: "raw" (int32, a memcpy each way, the
    default: the CPU-cheapest) or a compact wire codec for slow links -- "packed", "u16",
    "auto", "zstd" (see tokenwire.encode); the receiver needs no setting, frames describe
    themselves.
    """

    def __init__(self, *, codec: str = "raw", doc: Optional[str] = None) -> None:
        self.codec = _check_codec(codec)
        self.name = "<unbound>"
        self.key = ""
        self.__doc__ = doc

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name
        self.key = "_tw_" + name

    def __repr__(self) -> str:
        return f"TokenIds(name={self.name!r}, codec={self.codec!r})"

    # -- attribute protocol (hot: keep these short) --------------------------------------------

    def __get__(self, obj: Any, objtype: Optional[type] = None) -> Any:
        if obj is None:
            return self
        field = obj.__dict__.get(self.key)
        if field is None:
            return None
        ids = field.ids
        if ids is None:
            ids = field.ids = field.vector.tolist()
        return ids

    def __set__(self, obj: Any, value: Any) -> None:
        if value is None:
            obj.__dict__.pop(self.key, None)
        elif isinstance(value, list):
            obj.__dict__[self.key] = _TokenField(value, None, False)
        elif isinstance(value, tuple):
            obj.__dict__[self.key] = _TokenField(list(value), None, False)
        else:
            try:
                vector = as_tokens(value)
            except (TypeError, ValueError, OverflowError) as exc:
                raise _field_error(exc, f"{type(obj).__name__}.{self.name}") from None
            obj.__dict__[self.key] = _TokenField(None, vector, True)

    def __delete__(self, obj: Any) -> None:
        obj.__dict__.pop(self.key, None)

    # -- buffer access -------------------------------------------------------------------------

    def _sync(self, obj: Any, field: _TokenField) -> TokenVector:
        try:
            return field.sync()
        except (TypeError, ValueError, OverflowError) as exc:
            # A list mutated to hold something that is not an int32 id.
            raise _field_error(exc, f"{type(obj).__name__}.{self.name}") from None

    def buffer(self, obj: Any) -> Optional[TokenVector]:
        """The ids as a TokenVector (None when unset), without building a list.

        If the list exists it is re-read (one C pass), so in-place changes to it are reflected.
        """
        field = obj.__dict__.get(self.key)
        return None if field is None else self._sync(obj, field)

    def held_buffer(self, obj: Any) -> Optional[TokenVector]:
        """The TokenVector the ids are held as -- decoded from the wire or set from a buffer --
        as long as any materialized list still equals it; None otherwise: unset, set from a
        Python list, or the list was found changed in place (from then on the list is the
        source of the ids, even if it is later changed back)."""
        field = obj.__dict__.get(self.key)
        if field is None or not field.held:
            return None
        vector = self._sync(obj, field)
        return vector if field.held else None

    def is_materialized(self, obj: Any) -> bool:
        """Whether a ``list`` of the ids exists on `obj` (read, or set as a list)."""
        field = obj.__dict__.get(self.key)
        return field is not None and field.ids is not None

    def length(self, obj: Any) -> int:
        """Number of ids (0 when unset), without building a list."""
        field = obj.__dict__.get(self.key)
        if field is None:
            return 0
        return len(field.ids) if field.ids is not None else len(field.vector)

    def summary(self, obj: Any) -> str:
        """A short description of the ids for ``__repr__``: length, head and tail."""
        field = obj.__dict__.get(self.key)
        if field is None:
            return "None"
        ids = field.ids if field.ids is not None else field.vector
        n = len(ids)
        if n <= 6:
            return repr(list(ids))
        head = ", ".join(str(ids[i]) for i in range(3))
        tail = ", ".join(str(ids[i]) for i in range(n - 3, n))
        return f"<{n} ids: [{head}, ..., {tail}]>"


# --------------------------------------------------------------------------------------------
# The mixin

_short = reprlib.Repr()
_short.maxstring = 60
_short.maxother = 80
_short.maxlist = 6
_short.maxdict = 6


class TokenWireMixin:
    """Pickling, copying and ``__repr__`` for a class with ``TokenIds`` fields.

    Instances need a ``__dict__`` (the fields keep their storage there). See the module
    docstring for the state format.
    """

    #: (name, descriptor) of every TokenIds field of the class, base classes included.
    _tokenwire_fields: ClassVar[tuple[tuple[str, TokenIds], ...]] = ()
    #: The instance-__dict__ keys the fields store under.
    _tokenwire_keys: ClassVar[frozenset[str]] = frozenset()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        fields: dict[str, TokenIds] = {}
        for klass in reversed(cls.__mro__):
            for name, value in vars(klass).items():
                if isinstance(value, TokenIds):
                    fields[name] = value
                elif name in fields:        # overridden by something that is not a field
                    del fields[name]
        cls._tokenwire_fields = tuple(fields.items())
        cls._tokenwire_keys = frozenset(d.key for d in fields.values())

    # -- pickling ------------------------------------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        attrs = self.__dict__
        keys = self._tokenwire_keys
        state: dict[str, Any] = {_VERSION_KEY: STATE_VERSION}
        for name, desc in self._tokenwire_fields:
            field = attrs.get(desc.key)
            state[name] = None if field is None else _pack_field(desc.codec, desc._sync(self, field))
        for key, value in attrs.items():
            if key not in keys:
                state[key] = value
        return state

    def __setstate__(self, state: Any) -> None:
        slots = None
        if isinstance(state, tuple) and len(state) == 2:   # (dict, slots) from default pickling
            state, slots = state
        state = state or {}
        version = state.get(_VERSION_KEY)
        if version is None:
            self._setstate_legacy(state)
        elif type(version) is not int or not 1 <= version <= STATE_VERSION:
            raise WireFormatError(
                f"{type(self).__name__} state version {version!r} is not supported "
                f"(this tokenwire reads versions 1..{STATE_VERSION})"
            )
        else:
            attrs = self.__dict__
            fields = self._tokenwire_fields
            for name, desc in fields:
                payload = state.get(name)
                if payload is None:
                    attrs.pop(desc.key, None)
                else:
                    attrs[desc.key] = _TokenField(None, _unpack_field(name, payload), True)
            names = {name for name, _ in fields}
            for key, value in state.items():
                if key != _VERSION_KEY and key not in names:
                    attrs[self._checked_state_key(key)] = value
        if slots:
            for key, value in slots.items():
                setattr(self, key, value)

    def _setstate_legacy(self, state: dict[str, Any]) -> None:
        """A state pickled before tokenwire: each field a plain list under its public name or
        under ``_<name>`` (a property's backing attribute)."""
        skip: set[str] = set()
        for name, desc in self._tokenwire_fields:
            value = state.get(name, _MISSING)
            private = state.get("_" + name, _MISSING)
            if value is _MISSING:
                value = private
            # `_<name>_i32` was the hand-written side channel this layer replaces.
            skip.update((name, "_" + name, "_" + name + "_i32"))
            desc.__set__(self, None if value is _MISSING else value)
        attrs = self.__dict__
        for key, value in state.items():
            if key not in skip:
                attrs[self._checked_state_key(key)] = value

    def _checked_state_key(self, key: Any) -> str:
        """An ordinary attribute name from a pickled state; never a field's private storage."""
        if type(key) is not str:
            raise WireFormatError(f"{type(self).__name__} state has a non-string key {key!r}")
        if key in self._tokenwire_keys:
            raise WireFormatError(
                f"{type(self).__name__} state sets {key!r}, the private storage of a token field"
            )
        return key

    # -- copying: the buffer is shared (immutable) or memcpy'd, never copied per token ---------

    def _copy_fields_into(self, new: Any, memo: Optional[dict[int, Any]]) -> None:
        attrs, new_attrs = self.__dict__, new.__dict__
        for _, desc in self._tokenwire_fields:
            field = attrs.get(desc.key)
            if field is not None:
                vector = desc._sync(self, field)
                if memo is not None:
                    vector = copy.deepcopy(vector, memo)   # itself if owned, else one memcpy
                new_attrs[desc.key] = _TokenField(None, vector, field.held)

    def __copy__(self) -> Any:
        cls = type(self)
        new = cls.__new__(cls)
        keys = self._tokenwire_keys
        new.__dict__.update((k, v) for k, v in self.__dict__.items() if k not in keys)
        self._copy_fields_into(new, None)
        return new

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        cls = type(self)
        new = cls.__new__(cls)
        memo[id(self)] = new
        keys = self._tokenwire_keys
        new_attrs = new.__dict__
        for key, value in self.__dict__.items():
            if key not in keys:
                new_attrs[key] = copy.deepcopy(value, memo)
        self._copy_fields_into(new, memo)
        return new

    # -- repr ----------------------------------------------------------------------------------

    def __repr__(self) -> str:
        parts = [f"{name}={desc.summary(self)}" for name, desc in self._tokenwire_fields]
        keys = self._tokenwire_keys
        parts += [
            f"{key}={_short.repr(value)}"
            for key, value in self.__dict__.items()
            if key not in keys and not key.startswith("_")
        ]
        return f"{type(self).__name__}({', '.join(parts)})"


# --------------------------------------------------------------------------------------------
# The reference request


class GenerationRequest(TokenWireMixin):
    """A drop-in generation request whose token ids cross process boundaries as int32 buffers.

    ``prompt_token_ids`` / ``query_token_ids`` read as ``list[int]`` (lazily, see TokenIds);
    worker code that hands the ids to a native constructor reads ``_prompt_token_ids_i32``
    instead and never builds the list.
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
