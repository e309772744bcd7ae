"""Restricted unpicklers: `tokenwire.find_class` and `tokenwire.unpickle.PICKLE_GLOBALS`.

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
        return tokenwire.find_class(module, name, allow=self.allow)


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
    assert ours == set(tokenwire.unpickle.PICKLE_GLOBALS) == {("tokenwire._core", "_restore_token_vector")}


def test_find_class_refuses_everything_else():
    evil = b"cos\nsystem\n(S'echo pwned'\ntR."
    with pytest.raises(pickle.UnpicklingError, match="global 'os.system' is not allowed"):
        AllowListUnpickler(io.BytesIO(evil)).load()
    with pytest.raises(pickle.UnpicklingError, match="_codecs.encode"):
        tokenwire.find_class("_codecs", "encode")
    assert tokenwire.find_class("tokenwire._core", "_restore_token_vector") is \
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
