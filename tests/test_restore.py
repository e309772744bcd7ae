"""Token data restored from a pickle (`_restore_token_vector`, tokenwire/_restore.pxi): a vector
made from a mutable source never shows a write made to it since, and one mutable buffer named
again and again is compared at most a bounded number of times, then refused. Quick, in-process
checks; the memory bounds of restoring (traced peaks, other sources, messages over sockets) are
tests/test_hostile.py's."""

from __future__ import annotations

import io
import pickle

import pytest

import tokenwire
import tokenwire.unpickle
from tokenwire.request import GenerationRequest
from tokenwire.unpickle import check_pickle


def test_a_restored_vector_never_shows_a_later_write() -> None:
    """The source is copied, and a source written since a vector was made from it gives a new
    vector; the same unchanged memory gives the same one."""
    from tokenwire._core import _restore_token_vector
    source = bytearray(b"\0\0\0\0\1\0\0\0")
    view = memoryview(source).toreadonly()
    first = _restore_token_vector(view)
    assert _restore_token_vector(memoryview(source).toreadonly()) is first
    source[0] = 7
    assert list(first) == [0, 1]
    second = _restore_token_vector(view)
    assert list(second) == [7, 1] and list(first) == [0, 1]
    assert _restore_token_vector(source) is second
    third = _restore_token_vector(bytearray(b"\7\0\0\0\1\0\0\0"))   # another object: a copy
    assert list(third) == [7, 1]
    # Text (protocols 0-2) is immutable: one vector per str object, the same error as before.
    text = "\1\0\0\0\2\0\0\0"
    assert _restore_token_vector(text) is _restore_token_vector(text)
    with pytest.raises(tokenwire.TokenIdError, match="code point above 255"):
        _restore_token_vector("\u0100abc")


def _bytearray_named(refs: int, nbytes: int) -> bytes:
    """A protocol-5 pickle naming only the allowed restore function: one BYTEARRAY8 of `nbytes`,
    restored `refs` times through the memo (5 bytes per reference)."""
    out = bytearray(b"\x80\x05")
    out += b"\x8c\x0ftokenwire._core\x94\x8c\x15_restore_token_vector\x94\x93\x94"   # memo 2
    out += b"\x96" + nbytes.to_bytes(8, "little") + b"\x01" * nbytes + b"\x94"     # memo 3
    out += b"\x85\x94("                                                             # memo 4
    out += b"h\x02h\x04R" * refs
    return bytes(out + b"l.")


class _AllowListed(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> object:
        return tokenwire.unpickle.find_class(module, name)


def test_one_mutable_buffer_named_many_times_is_refused_past_a_bound() -> None:
    # Each repeat of a mutable source costs a full comparison (its bytes may have changed since):
    # 50,000 references to one 8 MiB bytearray took 12 s. tokenwire never names one buffer twice,
    # so past a small bound the pickle is refused.
    with tokenwire.unpickle.load_scope():
        few = _AllowListed(io.BytesIO(_bytearray_named(64, 4096))).load()
    assert len({id(v) for v in few}) == 1 and few[0].tolist() == [0x01010101] * 1024
    with pytest.raises(pickle.UnpicklingError,
                       match="names one mutable buffer of 4096 bytes more than 64"):
        with tokenwire.unpickle.load_scope():
            _AllowListed(io.BytesIO(_bytearray_named(65 + 1000, 4096))).load()


def test_bare_loads_of_one_message_into_one_buffer_all_load() -> None:
    """Outside a load scope nothing is counted from one load to the next: a worker that
    receives every message into the same buffer and keeps its requests loads 100 identical
    messages with bare pickle.loads, each naming its buffer once."""
    request = GenerationRequest(list(range(40_000)))
    views: list = []
    payload = pickle.dumps(request, protocol=5, buffer_callback=views.append)
    received = [bytearray(v.raw()) for v in views]           # the worker's receive buffer
    kept = [pickle.loads(payload, buffers=received) for _ in range(100)]
    assert all(r.prompt_token_ids == request.prompt_token_ids for r in kept)


def _bytearray_popped(rounds: int, nbytes: int) -> bytes:
    """A protocol-5 pickle that restores one memoized BYTEARRAY8 of `nbytes` `rounds` times and
    drops each vector at once (POP): each round is 6 bytes and would copy the whole buffer if
    a dropped vector made its source forgotten."""
    out = bytearray(b"\x80\x05")
    out += b"\x8c\x0ftokenwire._core\x94\x8c\x15_restore_token_vector\x94\x93\x94"   # memo 2
    out += b"\x96" + nbytes.to_bytes(8, "little") + b"\x01" * nbytes + b"\x94"     # memo 3
    out += b"h\x02h\x03\x85R0" * rounds
    return bytes(out + b"N.")


def test_dropping_each_restored_vector_does_not_reset_the_repeat_count() -> None:
    """A receiver counts repeats per pickle, in a table that holds what it restored until the
    load returns: popping each vector does not make the source new again (5,000 rounds over
    8 MiB would copy 40 GB). The same bytes through a bare Unpickler (no scope, the weak
    process-wide table) load, each round a copy, which is what the scope stops."""
    from tokenwire.transport import loads_oob

    data = _bytearray_popped(66, 4096)              # named 66 times: 65 repeats
    for find_class in (tokenwire.unpickle.find_class, None):
        with pytest.raises(pickle.UnpicklingError,
                           match="names one mutable buffer of 4096 bytes more than 64 times"):
            loads_oob([data], find_class=find_class)
    with pytest.raises(pickle.UnpicklingError, match="more than 64 times"):
        check_pickle(data)
        with tokenwire.unpickle.load_scope():
            _AllowListed(io.BytesIO(data)).load()
    assert _AllowListed(io.BytesIO(data)).load() is None          # unbounded without a scope
    assert loads_oob([_bytearray_popped(65, 4096)]) is None       # 64 repeats are allowed
