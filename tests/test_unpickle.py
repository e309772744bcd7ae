"""Restricted unpicklers: `tokenwire.unpickle.find_class` and `tokenwire.unpickle._PICKLE_GLOBALS`.

An allow-list unpickler needs only the globals tokenwire names (for every protocol and codec),
those globals are exactly what a pickle carries, and everything else (os.system, _codecs.encode)
is refused with the global's name.
"""

from __future__ import annotations

import io
import pickle

import pytest

import tokenwire
import tokenwire.unpickle
from support.serving import PROTOCOLS, after, executor, ids_of, tokenized

# --------------------------------------------------------------------------------------------
# restricted unpicklers


class AllowListUnpickler(pickle.Unpickler):
    allow = frozenset({("serving_requests", "ExecutorRequest"), (__name__, "PackedExecutorRequest"),
                       ("serving_requests", "TokenizedGenerateReqInput"),
                       ("serving_requests", "SamplingParams"),
                       ("serving_requests", "LoRARequest")})

    def find_class(self, module, name):
        return tokenwire.unpickle.find_class(module, name, allow=self.allow)


class OldProtocolUnpickler(AllowListUnpickler):
    # Protocols 0 and 1 name these for any plain object (documented in docs/adopting.md).
    allow = AllowListUnpickler.allow | {("copyreg", "_reconstructor"), ("builtins", "object")}


@tokenwire.token_fields("prompt_token_ids", "query_token_ids", codec="packed")
class PackedExecutorRequest(after.ExecutorRequest):
    """The executor request sending compact frames (a slow link)."""


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_restricted_unpickler_needs_only_pickle_globals(protocol):
    ids = ids_of(300) + [-(2**31), 2**31 - 1, 0, 255, 256]
    cls = AllowListUnpickler if protocol >= 2 else OldProtocolUnpickler
    unsigned = [i for i in ids if i >= 0]                       # what "packed" codes
    packed = PackedExecutorRequest(list(unsigned), after.SamplingParams(), lora_request=None)
    assert type(packed.__getstate__()["prompt_token_ids"]) is bytes       # a frame
    for req, expected in ((executor(after, list(ids)), ids), (tokenized(after, list(ids)), ids),
                          (packed, unsigned)):
        data = pickle.dumps(req, protocol)
        assert b"_codecs" not in data
        out = cls(io.BytesIO(data)).load()
        assert type(out) is type(req)
        name = "input_ids" if type(req) is after.TokenizedGenerateReqInput else "prompt_token_ids"
        assert getattr(out, name) == expected


def test_pickle_globals_is_exactly_what_is_named():
    seen: set = set()

    class Recorder(pickle.Unpickler):
        def find_class(self, module, name):
            seen.add((module, name))
            return super().find_class(module, name)

    req = executor(after, ids_of(10))
    for protocol in range(2, pickle.HIGHEST_PROTOCOL + 1):
        Recorder(io.BytesIO(pickle.dumps(req, protocol))).load()
    ours = {g for g in seen if g[0] != "serving_requests"}
    assert ours == set(tokenwire.unpickle._PICKLE_GLOBALS) == {("tokenwire._core", "_restore_token_vector")}


def test_find_class_refuses_everything_else():
    evil = b"cos\nsystem\n(S'echo pwned'\ntR."
    with pytest.raises(pickle.UnpicklingError, match="global 'os.system' is not allowed"):
        AllowListUnpickler(io.BytesIO(evil)).load()
    with pytest.raises(pickle.UnpicklingError, match="_codecs.encode"):
        tokenwire.unpickle.find_class("_codecs", "encode")
    assert tokenwire.unpickle.find_class("tokenwire._core", "_restore_token_vector") is \
        tokenwire._core._restore_token_vector
    with pytest.raises(ValueError, match="code point above 255"):
        tokenwire._core._restore_token_vector("\u0100abc")




def test_check_pickle_is_the_native_walk_itself() -> None:
    """The public name is the extension's function, not a Python wrapper around it (one call
    less for every received pickle), and carries the documentation."""
    import tokenwire._core

    assert tokenwire.unpickle.check_pickle is tokenwire._core.check_pickle
    assert "FRAME" in tokenwire.unpickle.check_pickle.__doc__
    with pytest.raises(pickle.UnpicklingError, match="BINBYTES at offset 2 declares"):
        tokenwire.unpickle.check_pickle(b"\x80\x05B\xff\xff\xff\x7f")


_RESTORE = b"\x8c\x0ftokenwire._core\x94\x8c\x15_restore_token_vector\x94\x93\x94"   # memo 0-2
_RECONSTRUCTOR = b"\x8c\x07copyreg\x94\x8c\x0e_reconstructor\x94\x93\x94"              # memo 0-2

# Pickles that change a global (an object the pickle did not create): each would rename an
# allowed function, fill its __dict__, or call a mutator on it for the rest of the process.
_CHANGING_A_GLOBAL = {
    "BUILD a slot state": b"\x80\x05" + _RESTORE
    + b"N}\x94\x8c\x0c__qualname__\x94\x8c\x04gone\x94s\x86\x94b.",
    "BUILD a dict state": b"\x80\x05" + _RESTORE + b"}(\x8c\x01k\x8c\x01vub.",
    "BUILD from the memo": b"\x80\x05" + _RESTORE + b"0h\x02}(\x8c\x01k\x8c\x01vub.",
    "BUILD on a DUP": b"\x80\x05" + _RESTORE + b"2}b0.",
    "BUILD a user's global": b"\x80\x05" + _RECONSTRUCTOR + b"}(\x8c\x01k\x8c\x01vub.",
    "BUILD a text GLOBAL": b"ctokenwire._core\n_restore_token_vector\np0\n0g0\n(dS'k'\nS'v'\nsb.",
    "APPEND": b"\x80\x05" + _RESTORE + b"Na.",
    "APPENDS": b"\x80\x05" + _RESTORE + b"(Ne.",
    "SETITEM": b"\x80\x05" + _RESTORE + b"NNs.",
    "SETITEMS": b"\x80\x05" + _RESTORE + b"(NNu.",
    "ADDITEMS": b"\x80\x05" + _RESTORE + b"(N\x90.",
}


@pytest.mark.parametrize("name", sorted(_CHANGING_A_GLOBAL))
def test_a_pickle_that_changes_a_global_is_refused(name: str) -> None:
    """check_pickle refuses an opcode that changes a global, so a restricted load (the
    receivers' find_class, an allow-list with a user's own globals) ends with the load: the
    function keeps its name and an empty __dict__, and a TokenVector still pickles."""
    from tokenwire._core import _restore_token_vector
    from tokenwire.transport import loads_oob

    data = _CHANGING_A_GLOBAL[name]
    with pytest.raises(pickle.UnpicklingError, match="changes a global"):
        tokenwire.unpickle.check_pickle(data)
    allow = {("copyreg", "_reconstructor")}
    with pytest.raises(pickle.UnpicklingError, match="changes a global"):
        loads_oob([data], find_class=lambda m, n: tokenwire.unpickle.find_class(m, n, allow=allow))
    assert _restore_token_vector.__qualname__ == "_restore_token_vector"
    assert _restore_token_vector.__dict__ == {}
    vector = tokenwire.as_tokens([1, 2, 3])
    assert pickle.loads(pickle.dumps(vector)) == vector


def test_what_a_pickle_made_may_still_be_built() -> None:
    """BUILD, APPENDS and SETITEMS onto what REDUCE, NEWOBJ or a new container made pass: every
    pickle the pickler writes does that (a popped global leaves the object below unchanged)."""
    made = (b"\x80\x05" + _RECONSTRUCTOR + b"\x8c\x08builtins\x8c\x06object\x93\x94N\x87R"
            b"}(\x8c\x01k\x8c\x01vub.")
    tokenwire.unpickle.check_pickle(made)
    tokenwire.unpickle.check_pickle(b"\x80\x05]\x94(" + _RESTORE + b"0Ne.")
    tokenwire.unpickle.check_pickle(b"\x80\x05}" + _RESTORE + b"0NNs.")
