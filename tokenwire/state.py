"""How a class gets tokenwire's pickled state: the state's format -- the state dict and what
each token field contributes to it --, the per-class configuration that writes and checks it,
``_adopt``, which gives a class tokenwire's ``__getstate__`` / ``__setstate__`` / copying (run
by a ``TokenIds`` field line and by ``token_fields``), the ``_TokenwireMixin`` base class
(``__repr__`` and a per-class ``list_on_wire=``), and the process-wide "list on the wire"
switch for rolling upgrades.
See docs/design.md, "tokenwire/state.py"."""

from __future__ import annotations

import copy
import copyreg
import functools
import reprlib
import threading
import types
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Optional, cast

from tokenwire._core import TokenVector, _claim_state, _restore_shared, decode, encode
from tokenwire._envflag import env_flag
from tokenwire.errors import WireFormatError, _describe

if TYPE_CHECKING:
    from tokenwire.fields import TokenIds

__all__: list[str] = []       # list_on_wire is public as tokenwire.list_on_wire

#: Version of the pickled state written by ``_TokenwireMixin.__getstate__`` (under the key
#: ``"__tokenwire__"``); ``__setstate__`` reads versions 1.._STATE_VERSION and the list form.
_STATE_VERSION = 1

#: Key of the version in the pickled state; its absence marks a list-form (legacy) state.
_VERSION_KEY = "__tokenwire__"

#: Class-level settings live in names starting with this prefix; a pickled state may never set one.
_CONFIG_PREFIX = "_tokenwire"

#: "No value": an unset field, an attribute absent from a state.
_MISSING: Any = object()


# --------------------------------------------------------------------------------------------
# One field's payload: written by `_field_payload`, read by `_field_from_payload`

#: Types of a payload that is the ids: a vector, or a frame.
_HELD_KINDS = (TokenVector, bytes, bytearray, memoryview, str)

#: The key of the one-entry dict that carries a value sent as it is.
_AS_IS = "as_is"


def _marks_held(payload: Any) -> bool:
    """`payload` has the shape of the tuple forms: ``(ids,)`` or ``(ids, typecode)``."""
    return (type(payload) is tuple and 1 <= len(payload) <= 2 and type(payload[0]) in _HELD_KINDS
            and (len(payload) == 1 or type(payload[1]) is str))


def _field_payload(field: TokenIds, obj: Any, value: Any) -> Any:
    """The payload of `field` for `value`, what `obj` stores for it."""
    if value is None:
        return None
    ids, kind = field._state_ids(obj, value)
    if kind is None:                                # not int32 ids: as the unmodified class sent it
        if type(ids) is list or type(ids) is tuple and not _marks_held(ids):
            return ids
        return {_AS_IS: ids}
    # "raw": the vector itself (raw int32, out-of-band at protocol 5); else a wire frame
    payload = ids if field.codec == "raw" else encode(ids, codec=cast(Any, field.codec))
    if kind is False:
        return payload
    return (payload,) if kind is True else (payload, kind)


def _held_from_payload(field: TokenIds, owner: str, name: str, payload: Any,
                       kind: Any) -> Any:
    """What an instance stores for ids sent as a TokenVector or a wire frame (bytes; a latin-1
    str below protocol 3). One frame named by many fields or objects is decoded (a mutable one
    copied) once: `_restore_shared`."""
    try:
        if type(payload) is TokenVector:
            return field._held(payload, kind)
        try:
            vector = _restore_shared(payload, decode)
        except UnicodeEncodeError:
            raise WireFormatError(
                "a frame sent as text must be latin-1 (code points < 256)") from None
        return field._held(vector, kind)
    except WireFormatError as exc:
        raise WireFormatError(f"{owner} state key {_describe(name)}: {exc}") from None


def _field_from_payload(field: TokenIds, owner: str, name: str, payload: Any) -> Any:
    """What an instance stores for `field` (under `name` in a state of class `owner`) from its
    payload. Anything that is not a payload is hostile or damaged: WireFormatError naming the
    key."""
    if payload is None:
        return None
    kind = type(payload)
    if kind in _HELD_KINDS:
        return _held_from_payload(field, owner, name, payload, False)
    if _marks_held(payload):    # ids that were a tuple, (ids,), or an array, (ids, typecode)
        return _held_from_payload(field, owner, name, payload[0],
                                  True if len(payload) == 1 else payload[1])
    if kind is list or kind is tuple:
        # A list-form state (written before tokenwire, or with list_on_wire), or a list or
        # tuple that is not int32 ids (a nested list, big ints...): kept as it was sent, as
        # the unmodified class kept it (the field checks it against its vocab_size).
        return field._as_is(payload)
    if kind is dict and len(payload) == 1 and _AS_IS in payload:
        return field._as_is(payload[_AS_IS])
    raise WireFormatError(
        f"{owner} state key {_describe(name)}: a token field is a TokenVector, a wire frame, a "
        f"list, a tuple, a value sent as it is or None, got {kind.__name__}"
    )


# --------------------------------------------------------------------------------------------
# Rolling upgrades: "list on the wire"

_list_on_wire = env_flag("TOKENWIRE_LIST_ON_WIRE")


def list_on_wire(enabled: Optional[bool] = None) -> bool:
    """Process-wide: pickle token fields as plain ``list[int]`` (the format of the class before
    tokenwire), so that processes still running the unmodified class can read them. With
    `enabled`, set it and return the previous value; without, return it. Starts from the
    environment variable ``TOKENWIRE_LIST_ON_WIRE`` (``1``/``true``/``yes``/``on`` on,
    ``0``/``false``/``no``/``off`` or unset off; any other value fails at import). A class can
    override it with ``token_fields(..., list_on_wire=True/False)``.
    Receivers need no setting: tokenwire classes read both forms."""
    global _list_on_wire
    previous = _list_on_wire
    if enabled is not None:
        _list_on_wire = bool(enabled)
    return previous


# --------------------------------------------------------------------------------------------
# Per-class configuration: computed for each class on first use, cached in that class's own
# __dict__ (a subclass never uses its base's), every name resolved as attribute lookup
# resolves it -- by the first class in the MRO that defines it.

_CONFIG_ATTR = "_tokenwire_config"
#: A class's own token fields, ``{name: field}``: set by the field as it is bound (`_declare`).
_FIELDS_ATTR = "_tokenwire_fields"
_ACCEPTED_CACHE_MAX = 1024


class _Config:
    """What pickling, copying and __setstate__'s checks need to know about one class."""

    __slots__ = ("fields", "keys", "fieldmap", "reserved", "slotnames", "slots", "frames",
                 "list_on_wire", "accepted")

    def __init__(self, cls: type) -> None:
        resolved: dict[str, Any] = {}
        declared: dict[str, Any] = {}
        for klass in reversed(cls.__mro__):        # later (more derived) classes win
            # A copy taken at once (the class dict's own copy, under its lock without the
            # GIL): another thread may add to the class meanwhile (its cached configuration,
            # copyreg's __slotnames__), which iterating the live dict would trip over.
            own = vars(klass).copy()
            resolved.update(own)
            declared.update(own.get(_FIELDS_ATTR, {}))
        #: (name, field) of every token field, base classes' included, base order: a name the
        #: class resolves to the very field a class of its MRO declared under that name.
        _check_no_slot_fields(cls)
        self.fields: tuple[tuple[str, TokenIds], ...] = tuple(
            (n, a) for n, a in resolved.items() if declared.get(n, _MISSING) is a)
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


def _check_no_slot_fields(cls: type) -> None:
    """TypeError when a slot took the place of a token field (``@dataclass(slots=True)`` rebuilds
    the class from its namespace without the field's descriptor)."""
    for name in getattr(cls, _FIELDS_ATTR, {}):
        if isinstance(getattr(cls, name, None), types.MemberDescriptorType):
            raise TypeError(
                f"{cls.__name__}.{name} is a token field, and the class stores it in a slot "
                f"(@dataclass(slots=True)): token fields keep their ids in the instance "
                f"__dict__; drop slots=True")


def _forget_config(cls: type) -> None:
    """Drop `cls`'s cached configuration: it is computed again on first use."""
    if _CONFIG_ATTR in vars(cls):
        delattr(cls, _CONFIG_ATTR)


#: Taken only while a class's configuration is first computed, so that it is computed and
#: published once, whatever the threads pickling that class's first objects at once.
_CONFIG_LOCK = threading.RLock()


def _config(cls: type) -> _Config:
    config = cls.__dict__.get(_CONFIG_ATTR)
    if config is None:
        with _CONFIG_LOCK:
            config = cls.__dict__.get(_CONFIG_ATTR)
            if config is None:
                config = _Config(cls)
                setattr(cls, _CONFIG_ATTR, config)
    return cast(_Config, config)


def _reconfigure(cls: type) -> _Config:
    _forget_config(cls)
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
    state: dict[str, Any] = {} if as_lists else {_VERSION_KEY: _STATE_VERSION}
    fields = config.fieldmap
    for key, value in attrs.items():          # in the object's order (an unset field: absent)
        desc = fields.get(key)
        if desc is None:
            state[key] = value
        elif as_lists:
            state[key] = desc._listed(value)          # the list-form state: a plain list
        else:
            state[key] = _field_payload(desc, obj, value)
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
    _claim_state(state)
    if slots is not None:
        _claim_state(slots)
    fields = config.fieldmap
    version = state.get(_VERSION_KEY)
    legacy = version is None
    if not legacy and (type(version) is not int or not 1 <= version <= _STATE_VERSION):
        raise WireFormatError(
            f"{owner} state version {_describe(version)} is not supported "
            f"(this tokenwire reads versions 1..{_STATE_VERSION})"
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
            raise WireFormatError(f"{owner} state key {_describe(key)} {problem}")
        if strict and len(accepted) < _ACCEPTED_CACHE_MAX:
            accepted.add(key)
    for name, field in fields.items():
        if name in updates:
            updates[name] = _field_from_payload(field, owner, name, updates[name])
    for alias, name in aliases.items():
        if alias in updates:
            value = updates.pop(alias)
            if name and name not in updates:        # the public name wins
                updates[name] = _field_from_payload(fields[name], owner, name, value)
    for name in fields:
        if name not in updates:
            updates[name] = _MISSING                 # absent from the state: unset
    slot_updates: dict[str, Any] = {}
    if slots:
        for key, value in slots.items():
            if key in fields:
                updates[key] = _field_from_payload(fields[key], owner, key, value)
            elif key in config.slots or not strict and type(key) is str and not key.startswith(_CONFIG_PREFIX):
                slot_updates[key] = value
            else:
                raise WireFormatError(f"{owner} slot state key {_describe(key)} is not a slot "
                                      f"of the class")
    return updates, slot_updates


# --------------------------------------------------------------------------------------------
# Protocols 0-2: frames as text


def _frames_as_text(payload: Any) -> Any:
    """Below protocol 3 pickle has no bytes opcode (bytes pickle through ``_codecs.encode``):
    a frame travels as a latin-1 str instead, as a TokenVector does."""
    if type(payload) is bytes:
        return payload.decode("latin-1")
    if type(payload) is tuple and 1 <= len(payload) <= 2 and type(payload[0]) is bytes:
        return (payload[0].decode("latin-1"), *payload[1:])     # (frame,) / (frame, typecode)
    return payload


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


# --------------------------------------------------------------------------------------------
# Adoption: the mixin and the hook


class _ShortRepr(reprlib.Repr):
    def repr_int(self, x: int, level: int) -> str:
        # reprlib writes every digit first: an int of more than 4300 digits would raise
        return _describe(x, limit=self.maxlong)


_short = _ShortRepr()
_short.maxstring = 60
_short.maxother = 80
_short.maxlist = 6
_short.maxdict = 6


# --------------------------------------------------------------------------------------------
# The mixin


class _TokenwireMixin:
    """Pickling, copying and ``__repr__`` for a class with ``TokenIds`` fields.

    Instances need a ``__dict__`` (the fields keep their storage there); slots of base classes
    are pickled and copied too. See tokenwire.state for the state format.
    ``class Req(_TokenwireMixin, list_on_wire=True)`` pickles this class's token fields as plain
    lists regardless of the process-wide ``list_on_wire()``. Every subclass gets its own
    configuration: a subclass that overrides a field with a plain attribute has a plain
    attribute there, one that adds a property keeps states from setting it.
    """

    #: True/False: this class's choice of list-on-the-wire; None: follow ``list_on_wire()``.
    _tokenwire_list_on_wire: ClassVar[Optional[bool]] = None

    def __init_subclass__(cls, list_on_wire: Optional[bool] = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _check_no_slot_fields(cls)
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
        config = _config(cls)
        new = cls.__new__(cls)
        new.__dict__.update(self.__dict__)
        for key, value in _slot_values(self, config.slotnames).items():
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
        for _, field in config.fields:
            field._deepcopy_into(self, new_attrs, memo)     # shares or memcpys the ids
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


_OURS = {vars(_TokenwireMixin)[m] for m in ("__getstate__", "__setstate__", "__reduce_ex__",
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


def _own_method(cls: type, name: str) -> Any:
    """What `cls` resolves `name` to, unless that is object's default or tokenwire's own."""
    method = getattr(cls, name, None)
    if method is None or method is getattr(object, name, None) or method in _OURS:
        return None
    return method


def _adopt(cls: type, fields: dict[str, TokenIds], list_on_wire: Optional[bool] = None, *,
           built: bool = False) -> None:
    """Declare `fields` (``{name: field}``, each already named) token fields of `cls` and give
    `cls` tokenwire's pickling and copying (idempotent): a ``__getstate__`` / ``__setstate__``
    it has is wrapped, ``__copy__`` / ``__deepcopy__`` / ``__reduce__`` it has are kept. The
    one way a class is adopted: run by ``TokenIds.__set_name__`` (the field line adopts its
    class, while the class is being made: its configuration is computed on first use) and by
    ``token_fields`` (with `built`: the class is complete, its configuration is computed and
    checked now)."""
    setattr(cls, _FIELDS_ATTR, {**vars(cls).get(_FIELDS_ATTR, {}), **fields})
    if type(cls).__module__.split(".")[0] == "msgspec":            # StructMeta
        raise TypeError(f"{cls.__name__} is a msgspec.Struct: it pickles its field values, type "
                        f"the field tokenwire.TokenVector instead of using TokenIds "
                        f"(docs/adopting.md, section 7)")
    if "__slots__" in vars(cls) and "__dict__" not in vars(cls)["__slots__"]:
        raise TypeError(f"{cls.__name__}: token fields keep their ids in the instance __dict__, "
                        f"and the class has __slots__ without one")
    getstate, setstate = _own_method(cls, "__getstate__"), _own_method(cls, "__setstate__")
    mixin = vars(_TokenwireMixin)
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
    if built:
        _reconfigure(cls)
    else:
        _forget_config(cls)    # computed on first use, once the class is complete
