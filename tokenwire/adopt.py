"""Adopting tokenwire in a request class: ``_adopt``, the one hook that adopts a class, run by a
``TokenIds`` field line and by the ``token_fields`` decorator; the ``TokenwireMixin`` base class
adds ``__repr__`` and a per-class ``list_on_wire=``.
See docs/design.md, "tokenwire/adopt.py"."""

from __future__ import annotations

import copy
import functools
import reprlib
from typing import Any, Callable, ClassVar, Optional, TypeVar

from tokenwire._core import check_codec
from tokenwire.errors import _describe
from tokenwire.fields import TokenIds, _install_adoption_hook
from tokenwire.state import (
    _MISSING,
    _check_no_slot_fields,
    _checked_state,
    _config,
    _forget_config,
    _reconfigure,
    _reduce_frames_as_text,
    _slot_values,
    _to_state,
)

__all__: list[str] = []       # TokenwireMixin and token_fields are public as tokenwire.X

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


class TokenwireMixin:
    """Pickling, copying and ``__repr__`` for a class with ``TokenIds`` fields.

    Instances need a ``__dict__`` (the fields keep their storage there); slots of base classes
    are pickled and copied too. See tokenwire.state for the state format.
    ``class Req(TokenwireMixin, list_on_wire=True)`` pickles this class's token fields as plain
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


_OURS = {vars(TokenwireMixin)[m] for m in ("__getstate__", "__setstate__", "__reduce_ex__",
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


def _adopt(cls: type, list_on_wire: Optional[bool] = None, *, built: bool = False) -> None:
    """Give `cls` tokenwire's pickling and copying (idempotent): a ``__getstate__`` /
    ``__setstate__`` it has is wrapped, ``__copy__`` / ``__deepcopy__`` / ``__reduce__`` it has
    are kept. The one adoption hook: run by ``TokenIds.__set_name__`` (the field line adopts
    its class, while the class is being made: its configuration is computed on first use) and
    by ``token_fields`` (with `built`: the class is complete, its configuration is computed
    and checked now)."""
    if type(cls).__module__.split(".")[0] == "msgspec":            # StructMeta
        raise TypeError(f"{cls.__name__} is a msgspec.Struct: it pickles its field values, type "
                        f"the field tokenwire.TokenVector instead of using TokenIds "
                        f"(docs/adopting.md, section 7)")
    if "__slots__" in vars(cls) and "__dict__" not in vars(cls)["__slots__"]:
        raise TypeError(f"{cls.__name__}: token fields keep their ids in the instance __dict__, "
                        f"and the class has __slots__ without one")
    getstate, setstate = _own_method(cls, "__getstate__"), _own_method(cls, "__setstate__")
    mixin = vars(TokenwireMixin)
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


_install_adoption_hook(_adopt)


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
            setattr(cls, name, desc)
            desc._bind(cls, name)
        _adopt(cls, list_on_wire, built=True)
        return cls

    return decorate
