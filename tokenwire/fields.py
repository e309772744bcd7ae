"""Token-id fields: the ``TokenIds`` descriptor, what an instance stores for one field, and
``token_buffer``, the hand-off of the ids to native code.
See docs/design.md, "tokenwire/fields.py"."""

from __future__ import annotations

import array
import threading
import copy
from typing import Any, Callable, Optional, TypeVar, Union

from tokenwire._core import TokenVector, as_tokens, check_codec
from tokenwire.errors import WireFormatError, _describe
from tokenwire.state import _adopt

__all__: list[str] = []       # TokenIds, token_fields and token_buffer are public as tokenwire.X

#: "No value": a field without a default, an attribute absent from an instance or a class.
_MISSING: Any = object()


# --------------------------------------------------------------------------------------------
# Per-instance storage of one field
#
# obj.__dict__[name] is, for a TokenIds field `name`:
#   absent        -- never set: reading raises AttributeError, as for any unset attribute;
#   None          -- set to None;
#   a list/tuple/ -- the list, tuple or array the user set (or a state carried): the source,
#   array.array     int32 ids or not (a nested list, big ints: pickled as the value itself);
#   a _TokenField -- the ids held as a TokenVector (decoded from the wire, or set from a buffer),
#                    plus the list (tuple, array: the field's kind) built from it on first read;
#   anything else -- a value a received state carried as it is ({"as_is": value}).
# So vars(obj) shows the public name, and shows the very list on an object built from a list.


#: array.array typecodes of integers: an array of one of these is a kind a field can read back as.
_INT_TYPECODES = frozenset("bBhHiIlLqQ")


def _kind_of(value: Any) -> Union[bool, str]:
    """The kind of container `value` is: False a list (or anything else), True a tuple, a
    typecode an ``array.array`` of integers."""
    if isinstance(value, tuple):
        return True
    if isinstance(value, array.array) and value.typecode in _INT_TYPECODES:
        return value.typecode
    return False


def _array_from(vector: TokenVector, typecode: str) -> "array.array[int]":
    """An ``array(typecode)`` of the ids: one allocation and one widening copy in numpy (no
    per-id Python work). The caller has checked that the typecode holds every id."""
    import numpy as np         # here, not at the top: `import tokenwire` leaves numpy out
    out = array.array(typecode, [0]) * len(vector)
    np.copyto(np.frombuffer(out, np.dtype(typecode)), np.asarray(vector), casting="unsafe")
    return out


def _fits(vector: TokenVector, typecode: str) -> bool:
    """Whether an ``array(typecode)`` holds every id of `vector`."""
    if not len(vector):
        return True
    import numpy as np
    info = np.iinfo(np.dtype(typecode))
    ids = np.asarray(vector)
    return bool(info.min <= int(ids.min()) and int(ids.max()) <= info.max)


#: Taken only when a held field publishes the container of its first read (_TokenField.listed):
#: once per field, never on the reads after it.
_PUBLISH = threading.Lock()


class _TokenField:
    """Ids held as a TokenVector (`vector`, the source) and the container built from it on first
    read (`ids`, else None); `kind`: what to build -- False a list, True a tuple, a typecode an
    ``array.array`` (the container the ids were when sent). Once the built container is found
    changed in place, the field is replaced by it (it is the source from then on)."""

    __slots__ = ("ids", "vector", "kind")

    # The name pickles carry for this class (its home before the request module was split):
    # pickles written by earlier releases name it, and receivers still running one resolve it.
    __module__ = "tokenwire.request"

    def __init__(self, vector: TokenVector, kind: Any = False) -> None:
        if type(vector) is not TokenVector:
            # Reachable from a pickle (see __reduce__): never hold anything else.
            raise WireFormatError(f"_TokenField needs a TokenVector, got {type(vector).__name__}")
        if type(kind) is str:
            if kind not in _INT_TYPECODES:
                raise WireFormatError(f"_TokenField kind {_describe(kind)} is not an integer "
                                      f"array typecode")
            if not _fits(vector, kind):
                raise WireFormatError(f"_TokenField: an array({_describe(kind)}) cannot hold "
                                      f"every id")
        else:
            kind = kind is True
        self.ids: Any = None
        self.vector = vector
        self.kind: Union[bool, str] = kind

    def __setstate__(self, state: Any) -> None:
        # Made only by its checked constructor (see __reduce__): a pickle's BUILD of a state
        # into one would set `vector` and `kind` past those checks.
        raise WireFormatError("a _TokenField takes no pickled state")

    def listed(self) -> Any:
        """The container built from the ids on the first read, published once: every reader,
        on any thread, gets the same object, so a change made through it is never lost. Two
        threads reading the field for the first time at once (no GIL) may both build; one
        publishes, under _PUBLISH, and both return what was published."""
        ids = self.ids
        if ids is None:
            built = self.built()
            with _PUBLISH:
                ids = self.ids
                if ids is None:
                    ids = self.ids = built
        return ids

    def built(self) -> Any:
        """A new list (tuple, array) of the ids; not cached."""
        kind = self.kind
        if type(kind) is str:
            return _array_from(self.vector, kind)
        ids = self.vector.tolist()
        return tuple(ids) if kind else ids

    def __repr__(self) -> str:
        listed = "" if self.ids is None else ", list built"
        return f"<token ids: {len(self.vector)} held as int32{listed}>"

    def __reduce__(self) -> tuple[Any, ...]:
        # Only reached when a class uses TokenIds without tokenwire's pickling (it replaced
        # __getstate__ with default pickling of its __dict__): send the buffer, never the list.
        if self.kind is False:
            return (_TokenField, (self.vector,))
        return (_TokenField, (self.vector, self.kind))


def _all_ints(values: Any) -> bool:
    """Every item is an int (bool included, as list[int] allows); the C pass first, it covers
    every list of int32 ids."""
    try:
        as_tokens(values)
        return True
    except (TypeError, OverflowError, ValueError):
        return all(isinstance(v, int) for v in values)


def _fresh(value: Any) -> Any:
    """`value`, or for tokenwire's holder (as a pickle or a class's own ``__setstate__`` may hand
    one over) a fresh one, checked as it is made."""
    if type(value) is _TokenField:
        return _TokenField(value.vector, value.kind)
    return value


# --------------------------------------------------------------------------------------------
# The descriptor


# Python >= 3.14 evaluates annotations on demand (annotationlib). Looked up once: a failed import
# is not cached, and retrying it on every read of a field on its class would search sys.path
# each time.
try:
    import annotationlib as _annotationlib  # type: ignore[import-not-found, unused-ignore]
except ImportError:
    _annotationlib = None


def _dataclass_building(cls: Optional[type], name: str) -> bool:
    """Whether ``@dataclass`` may be building `cls` and reading `name`'s default: the class
    body annotates `name`, and the class is not a dataclass of its own yet."""
    if cls is None:
        return False
    own = vars(cls)
    if "__dataclass_fields__" in own:
        return False
    annotations = own.get("__annotations__")
    if type(annotations) is dict:
        return name in annotations
    if _annotationlib is None:
        return False
    try:
        found = _annotationlib.get_annotations(cls, format=_annotationlib.Format.FORWARDREF)
    except Exception:                     # an annotation that cannot even be referenced
        return True
    return name in found


def _field_error(exc: Exception, where: str) -> Exception:
    """The same exception type, with the field named in the message."""
    return type(exc)(f"{where}: {exc}")


class TokenIds:
    """A token-id field: reads as a ``list[int]`` built lazily from a native int32 buffer.

    One line per field, on a plain class or a dataclass -- the line adopts the class (it gets
    tokenwire's ``__getstate__`` / ``__setstate__`` / ``__copy__`` / ``__deepcopy__``;
    docs/design.md, "tokenwire/state.py")::

        @dataclass
        class TokenizedGenerateReqInput:
            rid: str
            input_text: str
            input_ids: List[int] = TokenIds()        # a required field, same place in __init__
            sampling_params: SamplingParams
            ...

        class Req:
            prompt_token_ids = TokenIds()

    (``token_fields("name")`` converts fields without touching their lines.)

    * reading returns the ids as a ``list`` (None when set to None; AttributeError when never
      set, as for any attribute, or `default` when given); the first read of ids held as a
      buffer builds the list in C and caches it, later reads return that same list object;
    * setting keeps a list, tuple or ``array.array`` as that very object (a receiver reads back
      the same kind: a tuple, an ``array`` of the same typecode), takes a TokenVector (shared: it
      is immutable), an ndarray or any integer buffer (converted with ``as_tokens``: one memcpy
      for native int32; anything else raises the error of ``as_tokens`` naming the field), or
      None. A list or tuple that is not int32 ids -- a nested list (a batch), ids >= 2**31,
      bools, strings -- is kept and pickled as the unmodified class would;
    * ``tokenwire.token_buffer(obj, "prompt_token_ids")`` -- the ids as a TokenVector (the
      hand-off to an engine), without building a list.

    On the class, ``Cls.field`` is the descriptor -- except while ``@dataclass`` builds the class
    (the name is annotated in the class body, and the class has no ``__dataclass_fields__``
    yet): then it follows the dataclass protocol for descriptor-typed fields and raises
    AttributeError (no default: the field is required, as an unmodified ``input_ids:
    List[int]`` line), or returns `default` (``TokenIds(default=None)`` is ``input_ids:
    Optional[List[int]] = None``).

    ``codec`` names how the field is sent when pickled: "raw" (int32, a memcpy each way, the
    default: the CPU-cheapest) or a compact wire codec for slow links -- "packed", "u16",
    "auto", "pfor", "zstd" (see tokenwire.encode); the receiver needs no setting, frames describe
    themselves.

    ``vocab_size``: every id set on the field, and every id a pickled state brings in, must be
    in ``[0, vocab_size)``; otherwise TokenIdError naming the field, the index and the id (a
    value that is not ids at all: the error of ``as_tokens``). Without it any int32 id is taken.

    Type checkers see ``TokenIds(...)`` as returning ``Any``, as ``dataclasses.field()``: the
    line ``ids: List[int] = TokenIds()`` checks, and the annotation types the field.
    """

    def __init__(self, *, codec: str = "raw", doc: Optional[str] = None,
                 default: Any = _MISSING, vocab_size: Optional[int] = None) -> None:
        self.codec = check_codec(codec)
        if vocab_size is not None:
            as_tokens((), vocab_size=vocab_size)           # as_tokens's rule for vocab_size
        self.vocab_size = vocab_size
        self.name = "<unbound>"
        self.where = "<unbound>"
        self.default = default
        self.__doc__ = doc

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name
        self.where = f"{owner.__name__}.{name}"
        _adopt(owner, {name: self})          # the line adopts its class

    def __repr__(self) -> str:
        vocab = "" if self.vocab_size is None else f", vocab_size={self.vocab_size}"
        return f"TokenIds(name={self.name!r}, codec={self.codec!r}{vocab})"

    # -- attribute protocol (hot: keep these short) --------------------------------------------

    def __get__(self, obj: Any, objtype: Optional[type] = None) -> Any:
        if obj is None:
            if _dataclass_building(objtype, self.name):
                # @dataclass reads a descriptor-typed field's default as the class attribute:
                # none (AttributeError: a required field, as `input_ids: List[int]`) or `default`.
                if self.default is _MISSING:
                    raise AttributeError(f"type object {objtype.__name__!r} has no attribute "  # type: ignore[union-attr]
                                         f"{self.name!r}")
                return self.default
            return self
        try:                              # inline: every read of the field takes this path
            value = obj.__dict__[self.name]
        except KeyError:
            if self.default is not _MISSING:
                return self.default
            raise self._unset(obj) from None
        if type(value) is _TokenField:
            ids = value.ids
            if ids is None:
                ids = value.listed()
            return ids
        return value

    def __set__(self, obj: Any, value: Any) -> None:
        if value is None or isinstance(value, (list, tuple, array.array)):
            if self.vocab_size is not None and value is not None:
                self._check_vocab(value, f"{type(obj).__name__}.{self.name}")
            obj.__dict__[self.name] = value       # the very object, as a plain attribute keeps it
        elif type(value) is _TokenField:
            # tokenwire's holder, as a class's own __setstate__ receives it: a fresh, checked one
            if self.vocab_size is not None:
                self._check_vocab(value, f"{type(obj).__name__}.{self.name}")
            obj.__dict__[self.name] = _fresh(value)
        else:
            try:
                vector = as_tokens(value, vocab_size=self.vocab_size)
            except (TypeError, ValueError, OverflowError) as exc:
                raise _field_error(exc, f"{type(obj).__name__}.{self.name}") from None
            obj.__dict__[self.name] = _TokenField(vector)

    def _check_vocab(self, value: Any, where: str) -> None:
        """Every id of `value` is in [0, vocab_size), or the error of ``as_tokens`` naming
        `where` (the field)."""
        if type(value) is _TokenField:
            value = value.vector
        try:
            as_tokens(value, vocab_size=self.vocab_size)
        except (TypeError, ValueError, OverflowError) as exc:
            raise _field_error(exc, where) from None

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
        """Whether a ``list`` (tuple, array) of the ids exists on `obj` (read, or set as one)."""
        value = obj.__dict__.get(self.name)
        return isinstance(value, (list, tuple, array.array)) or (
            type(value) is _TokenField and value.ids is not None)

    def length(self, obj: Any) -> int:
        """Number of ids (0 when unset or None), without building a list."""
        value = obj.__dict__.get(self.name)
        if type(value) is _TokenField:
            return len(value.vector)
        try:
            return len(value)
        except TypeError:                 # None, or a value that is not a sequence
            return 0

    def summary(self, obj: Any) -> str:
        """A short description of the ids for ``__repr__``: length, head and tail."""
        value = obj.__dict__.get(self.name, _MISSING)
        if value is _MISSING:
            return "<unset>"
        if value is None:
            return "None"
        if not isinstance(value, (list, tuple, array.array, _TokenField)):
            return f"<not token ids: {type(value).__name__}>"
        ids: Any = value.vector if type(value) is _TokenField else value
        n = len(ids)
        if n <= 6:
            return "[" + ", ".join(_describe(ids[i]) for i in range(n)) + "]"
        head = ", ".join(_describe(ids[i]) for i in range(3))
        tail = ", ".join(_describe(ids[i]) for i in range(n - 3, n))
        return f"<{n} ids: [{head}, ..., {tail}]>"

    # -- what the pickled state (tokenwire.state) asks of a field ----------------------------

    def _state_ids(self, obj: Any, value: Any) -> tuple[Any, Union[bool, str, None]]:
        try:
            vector = self._vector(obj, value)
        except (TypeError, ValueError, OverflowError):
            if type(value) is _TokenField:
                return value.ids, None                     # its list, found changed in place
            return value, None
        if type(value) is _TokenField:
            return vector, value.kind
        return vector, _kind_of(value)

    def _held(self, vector: TokenVector, kind: Any) -> Any:
        if self.vocab_size is not None:
            self._check_vocab(vector, self.where)
        return _TokenField(vector, kind)

    def _as_is(self, value: Any) -> Any:
        if self.vocab_size is not None and value is not None:
            self._check_vocab(value, self.where)
        return _fresh(value)

    def _listed(self, value: Any) -> Any:
        if type(value) is _TokenField:
            return value.built() if value.ids is None else value.ids
        return value

    def _deepcopy_into(self, obj: Any, attrs: dict[str, Any], memo: dict[int, Any]) -> None:
        name = self.name
        value = obj.__dict__.get(name, _MISSING)
        if value is _MISSING or value is None:
            if value is None:
                attrs[name] = None
            return
        if type(value) is _TokenField:
            try:
                self._vector(obj, value)                   # a changed list becomes the source
            except (TypeError, ValueError, OverflowError):
                pass
            value = obj.__dict__[name]
        if type(value) is _TokenField:
            # itself if owned (immutable), else one memcpy
            attrs[name] = _TokenField(copy.deepcopy(value.vector, memo), value.kind)
        elif id(value) in memo:
            attrs[name] = memo[id(value)]
        elif type(value) is tuple and _all_ints(value):
            attrs[name] = value                            # immutable all the way down
        elif type(value) is list and _all_ints(value):
            attrs[name] = memo[id(value)] = value[:]       # ints are immutable
        elif type(value) is array.array:
            attrs[name] = memo[id(value)] = value[:]       # a memcpy
        else:
            attrs[name] = copy.deepcopy(value, memo)


_C = TypeVar("_C", bound=type)


def token_fields(*names: str, codec: str = "raw",
                 list_on_wire: Optional[bool] = None) -> Callable[[_C], _C]:
    """Class decorator: make the attributes `names` token-id fields (TokenIds) and give the class
    tokenwire's pickling and copying -- without touching its bases, annotations, field lines or
    signature. (Writing ``input_ids: List[int] = TokenIds()`` on the field line does the same
    for that field; the decorator is for classes whose lines stay as they are.)

    Above or below ``@dataclass``, the fields keep their place in ``__init__`` (positional
    construction, fields without defaults after them) and their defaults (``= None``),
    and ``dataclasses.fields/asdict/astuple/replace``, the generated ``__eq__`` and ``__repr__``
    behave as before::

        @tokenwire.token_fields("input_ids")
        @dataclass
        class TokenizedGenerateReqInput:
            rid: str
            input_text: str
            input_ids: List[int]
            ...

    On a dataclass every name must be one of its fields (TypeError otherwise). Below
    ``@dataclass``, a field line ``= dataclasses.field(...)`` is refused (TypeError: write the
    decorator above ``@dataclass``); a plain default (``= None``) is kept.

    A ``__getstate__`` / ``__setstate__`` the class has (its own or a base's) is wrapped, not
    replaced: tokenwire's ``__getstate__`` calls it and sends the token fields in the dict it
    returns as buffers; tokenwire's ``__setstate__`` checks and converts them, then calls it
    with the state (token fields as tokenwire's holders: store them with ``__dict__.update`` or
    ``setattr``). ``__copy__`` / ``__deepcopy__`` / ``__reduce__`` the class has are kept.
    Slots of base classes are pickled and copied. Instances need a ``__dict__``
    (``@dataclass(slots=True)`` is refused)."""
    for name in names:
        if not isinstance(name, str) or not name.isidentifier():
            raise TypeError(f"token_fields() takes attribute names, got {_describe(name)}")
    check_codec(codec)

    def decorate(cls: _C) -> _C:
        import dataclasses     # here: it imports inspect and ast, which `import tokenwire` skips
        if "__slots__" in vars(cls) and "__dict__" not in vars(cls)["__slots__"]:
            raise TypeError(f"token_fields({cls.__name__}): instances need a __dict__, "
                            f"the class has __slots__ without one")
        defaults: dict[str, Any] = {}
        fields: dict[str, TokenIds] = {}
        if dataclasses.is_dataclass(cls):
            known = {f.name: f for f in dataclasses.fields(cls)}
            for name in names:
                if name not in known:
                    raise TypeError(f"token_fields({cls.__name__}): {_describe(name)} is not "
                                    f"a field of the dataclass (its fields: {', '.join(known)})")
                if known[name].default is not dataclasses.MISSING:
                    defaults[name] = known[name].default
        else:
            for name in names:
                attr = vars(cls).get(name, _MISSING)
                if isinstance(attr, dataclasses.Field):
                    raise TypeError(f"token_fields({cls.__name__}): {_describe(name)} is a "
                                    f"dataclasses.field(...): write @token_fields above @dataclass")
                if isinstance(attr, TokenIds):
                    attr = attr.default
                if attr is not _MISSING:
                    defaults[name] = attr          # the class attribute stays the default
        for name in names:
            desc = TokenIds(codec=codec, default=defaults.get(name, _MISSING))
            desc.name = name
            setattr(cls, name, desc)
            fields[name] = desc
        _adopt(cls, fields, list_on_wire, built=True)
        return cls

    return decorate


def token_buffer(obj: Any, name: str) -> Optional[TokenVector]:
    """The token ids of ``obj.<name>`` as a TokenVector, for a hand-off to native code (an
    engine's ``Request(input_token_ids=...)`` constructor memcpys a 1-D int32 buffer).

    On a tokenwire field, the ids held as a buffer are returned as they are, without building a
    list; a list (set by the user, or read and changed in place) is converted in one C pass, so
    in-place changes are reflected. On any other attribute -- a plain ``list[int]`` of a class
    not (yet) converted -- one ``as_tokens`` pass. None when the value is None; AttributeError
    when unset; the error of ``as_tokens``, naming the field, for ids that are not int32."""
    desc = _token_field(type(obj), name)
    if desc is not None:
        return desc._buffer(obj)
    value = getattr(obj, name)
    return None if value is None else as_tokens(value)


def _token_field(cls: type, name: str) -> Optional[TokenIds]:
    """The TokenIds that `cls` resolves `name` to (through its MRO, as attribute lookup does),
    or None. (``Cls.name`` itself follows the dataclass protocol: no default, AttributeError.)"""
    for klass in cls.__mro__:
        attr = vars(klass).get(name, _MISSING)
        if attr is not _MISSING:
            return attr if isinstance(attr, TokenIds) else None
    return None
