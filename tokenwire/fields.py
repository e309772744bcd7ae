"""Token-id fields: the ``TokenIds`` descriptor, what an instance stores for one field, and
``token_buffer``, the hand-off of the ids to native code.

``TokenIds`` is a data descriptor for one token-id field. Ids that arrive as a buffer are held
as a ``TokenVector`` (native int32) and a ``list`` is built from it, in C, only when someone
reads the attribute; the list is cached and later reads return the same object. A list the user
sets is kept as that list (no copy, no conversion until the ids are pickled); a tuple is kept as
that tuple, and read back as a tuple after pickling.

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

A field's pickled payload is produced (``TokenIds._payload``) and read back
(``_field_from_state``) here; the state around it is tokenwire.state's.
"""

from __future__ import annotations

import sys
import warnings
from typing import Any, Optional, cast

from tokenwire._core import TokenVector, _restore_shared, as_tokens, check_codec, decode, encode
from tokenwire.errors import WireFormatError

__all__ = ["TokenIds", "token_buffer"]

#: "No value": an unset field, an attribute absent from a state.
_MISSING: Any = object()


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

    # The name pickles carry for this class (its home before the request module was split):
    # pickles written by earlier releases name it, and receivers still running one resolve it.
    __module__ = "tokenwire.request"

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
        # Only reached when a class uses TokenIds without TokenwireMixin / token_fields
        # (default pickling of its __dict__): send the buffer, never the list.
        return (_TokenField, (self.vector, True)) if self.as_tuple else (_TokenField, (self.vector,))


# --------------------------------------------------------------------------------------------
# Codec hook: the one place where a field's pickled payload is produced and consumed


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


# --------------------------------------------------------------------------------------------
# The descriptor


def _field_error(exc: Exception, where: str) -> Exception:
    """The same exception type, with the field named in the message."""
    return type(exc)(f"{where}: {exc}")


class TokenIds:
    """A token-id field: reads as a ``list[int]`` built lazily from a native int32 buffer.

        class Req(TokenwireMixin):
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
    * ``tokenwire.token_buffer(obj, "prompt_token_ids")`` -- the ids as a TokenVector (the
      hand-off to an engine), without building a list;
    * ``Req.prompt_token_ids.is_materialized(obj)`` -- whether a list exists.

    ``codec`` names how the field is sent when pickled: "raw" (int32, a memcpy each way, the
    default: the CPU-cheapest) or a compact wire codec for slow links -- "packed", "u16",
    "auto", "zstd" (see tokenwire.encode); the receiver needs no setting, frames describe
    themselves.
    """

    def __init__(self, *, codec: str = "raw", doc: Optional[str] = None) -> None:
        self.codec = check_codec(codec)
        self.name = "<unbound>"
        self.__doc__ = doc

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

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

    def _buffer(self, obj: Any) -> Optional[TokenVector]:
        """``token_buffer`` for this field."""
        return self._vector(obj, self._stored(obj))

    def buffer(self, obj: Any) -> Optional[TokenVector]:
        """Deprecated: ``tokenwire.token_buffer(obj, name)`` is the one hand-off."""
        warnings.warn("TokenIds.buffer(obj) is deprecated: use tokenwire.token_buffer(obj, "
                      f"{self.name!r})", DeprecationWarning, stacklevel=2)
        return self._buffer(obj)

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

    On a tokenwire field, the ids held as a buffer are returned as they are, without building a
    list; a list (set by the user, or read and changed in place) is converted in one C pass, so
    in-place changes are reflected. On any other attribute -- a plain ``list[int]`` of a class
    not (yet) converted -- one ``as_tokens`` pass. None when the value is None; AttributeError
    when unset; the error of ``as_tokens``, naming the field, for ids that are not int32."""
    desc = getattr(type(obj), name, None)
    if isinstance(desc, TokenIds):
        return desc._buffer(obj)
    value = getattr(obj, name)
    return None if value is None else as_tokens(value)
