"""tokenwire.msgspec: Ext hooks, the out-of-band Encoder/Decoder over real pyzmq, JSON hooks,
bad input, and no per-id Python objects on any of these paths."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import tempfile
import tracemalloc
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, cast

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

msgspec = pytest.importorskip("msgspec")
zmq = pytest.importorskip("zmq")

import tokenwire  # noqa: E402
import tokenwire.msgspec as tm  # noqa: E402
from support.buffers import owns_memory  # noqa: E402
from support.leaks import traced_peak  # noqa: E402
from support.strategies import int_arrays, token_lists  # noqa: E402
from support.wait import WAIT_MS, WAIT_S  # noqa: E402
from tokenwire import TokenVector, WireFormatError  # noqa: E402
from tokenwire.errors import ChecksumError  # noqa: E402
from tokenwire._core import INT_CACHE_SIZE, ImmutableBuffer  # noqa: E402
import bench.msgspec_json as vllm  # noqa: E402
from bench.data import engine_request  # noqa: E402
from bench.msgspec_json import HostDecoder, HostEncoder  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
HOOKS = tm.Hooks()                     # the default hooks, for msgspec encoders and decoders


class Params(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    temperature: float = 1.0
    max_tokens: Optional[int] = 16


class Request(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    """The shape of vLLM's EngineCoreRequest, with the prompt as a TokenVector."""
    request_id: str
    prompt_token_ids: Optional[TokenVector]
    sampling_params: Optional[Params]
    arrival_time: float
    extra: Any = None                      # untyped position
    priority: int = 0


class ListRequest(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    request_id: str
    prompt_token_ids: Optional[List[int]]


def hooks_encoder(hooks: tm.Hooks | None = None) -> Any:
    return msgspec.msgpack.Encoder(enc_hook=(hooks or HOOKS).enc_hook)


def hooks_decoder(t: Any, hooks: tm.Hooks | None = None) -> Any:
    h = hooks or HOOKS
    return msgspec.msgpack.Decoder(t, ext_hook=h.ext_hook, dec_hook=h.dec_hook)


def address(obj: Any) -> int:
    return int(np.frombuffer(obj, np.uint8).ctypes.data)


def views(tv: TokenVector, buf: Any) -> bool:
    return len(tv) > 0 and bool(np.shares_memory(np.asarray(tv), np.frombuffer(buf, np.uint8)))


def auto_sends_a_list(ids: list[int]) -> bool:
    """Does the default codec send `ids` as msgpack's list (its Ext would take more bytes)?"""
    ext = msgspec.msgpack.encode(msgspec.msgpack.Ext(tm.Hooks.EXT_CODE, tokenwire.encode(ids)))
    return len(msgspec.msgpack.encode(ids)) < len(ext)


# -------------------------------------------------------------------------------------------
# Ext hooks


def test_ext_code_is_outside_vllms_and_the_two_codes_differ() -> None:
    assert tm.Hooks.EXT_CODE not in range(1, 6) and tm.Hooks.BUFFER_EXT_CODE not in range(1, 6)
    assert tm.Hooks.EXT_CODE != tm.Hooks.BUFFER_EXT_CODE


@given(ids=token_lists, codec=st.sampled_from(["raw", "auto", "u16", "packed"]),
       checksum=st.booleans())
def test_struct_fields_dict_values_and_list_items_round_trip(ids: list[int], codec: str,
                                                             checksum: bool) -> None:
    if codec == "u16" and any(not 0 <= i < 65536 for i in ids) or codec == "packed" and any(
            i < 0 for i in ids):
        codec = "raw"
    hooks = tm.Hooks(codec=codec, checksum=checksum)  # type: ignore[arg-type]
    tv = tokenwire.as_tokens(ids)
    req = Request("r", tv, Params(0.5), 1.5,
                  extra={"k": tv, "items": [tv, 1, "x"], "bare": tv})
    msg = hooks_encoder(hooks).encode(req)
    out = hooks_decoder(Request, hooks).decode(msg)
    assert type(out.prompt_token_ids) is TokenVector and out.prompt_token_ids == ids
    # Under "auto" a vector whose Ext would outweigh msgpack's list goes as the list: an untyped
    # position then reads a list (a typed field reads a TokenVector either way).
    untyped = list if codec == "auto" and auto_sends_a_list(ids) else TokenVector
    assert type(out.extra["k"]) is untyped and out.extra["k"] == ids
    assert out.extra["items"][0] == ids and out.extra["items"][1:] == [1, "x"]
    # Untyped decoding (msgspec's default type Any) reads the Exts as TokenVectors too.
    anyway = hooks_decoder(Any, hooks).decode(msg)
    assert type(anyway[1]) is untyped and anyway[1] == ids


@given(arr=int_arrays())
def test_any_integer_array_via_as_tokens(arr: np.ndarray) -> None:
    tv = tokenwire.as_tokens(arr)                 # strided, reversed, any dtype: the user converts
    out = hooks_decoder(Request).decode(hooks_encoder().encode(Request("r", tv, None, 0.0)))
    assert out.prompt_token_ids == arr.astype(np.int64).tolist()


def test_optional_field_none_and_omitted_defaults() -> None:
    msg = hooks_encoder().encode(Request("r", None, None, 2.0))
    assert msgspec.msgpack.decode(msg)[:4] == ["r", None, None, 2.0]        # array_like
    out = hooks_decoder(Request).decode(msg)
    assert out.prompt_token_ids is None and out.extra is None


def test_a_list_int_field_stays_a_list() -> None:
    ids = list(range(1000))
    msg = hooks_encoder().encode(ListRequest("r", ids))
    assert msg == msgspec.msgpack.encode(ListRequest("r", ids))    # hooks change nothing
    out = hooks_decoder(ListRequest).decode(msg)
    assert type(out.prompt_token_ids) is list and out.prompt_token_ids == ids
    # A peer that still sends a list is accepted into a TokenVector field (one as_tokens pass).
    out2 = hooks_decoder(Request).decode(msgspec.msgpack.encode(["r", ids, None, 0.0]))
    assert type(out2.prompt_token_ids) is TokenVector and out2.prompt_token_ids == ids


def test_decoding_views_an_immutable_message_at_any_alignment() -> None:
    tv = tokenwire.as_tokens(list(range(5000)))
    frame = tokenwire.encode(tv, codec="raw")
    seen = set()
    for pad in range(4):                       # the ids land at each of the 4 offsets mod 4
        msg = hooks_encoder(tm.Hooks(codec="raw")).encode(["x" * pad, tv])
        offset = (address(msg) + msg.find(frame) + 16) % 4
        seen.add(offset)
        out = hooks_decoder(Any).decode(msg)[1]
        assert not owns_memory(out)            # a view of the message: no alignment copy
        assert out.tolist() == list(range(5000)) and out[4999] == 4999 and 4321 in out
        assert out.count(17) == 1 and out.index(17) == 17 and list(reversed(out))[0] == 4999
        assert out == list(range(5000)) and out == tv and out[1::2] == list(range(1, 5000, 2))
        # An export is int32 at a 4-aligned address: an unaligned view gets a copy then, once.
        arr = np.asarray(out)
        assert arr.ctypes.data % 4 == 0 and arr.tolist() == list(range(5000))
        assert views(out, msg) == (offset == 0) and owns_memory(out) == (offset != 0)
        mutable = bytearray(msg)                 # mutable memory is always copied
        out = hooks_decoder(Any).decode(mutable)[1]
        assert owns_memory(out) and not views(out, mutable)
        mutable[msg.find(frame) + 16] ^= 0xFF
        assert out.tolist() == list(range(5000))
    assert seen == {0, 1, 2, 3}


def test_another_ext_code_and_chained_hooks_coexist_with_vllm_style_codes() -> None:
    class Custom:
        def __init__(self, v: int) -> None:
            self.v = v

    def my_enc(obj: Any) -> Any:
        if isinstance(obj, Custom):
            return msgspec.msgpack.Ext(1, obj.v.to_bytes(2, "little"))
        raise NotImplementedError

    def my_ext(code: int, data: memoryview) -> Any:
        assert code == 1
        return Custom(int.from_bytes(data, "little"))

    hooks = tm.Hooks(ext_code=42, codec="raw", enc_hook=my_enc, ext_hook=my_ext)
    tv = tokenwire.as_tokens([3, 1, 4])
    msg = msgspec.msgpack.Encoder(enc_hook=hooks.enc_hook).encode([tv, Custom(7)])
    assert [e.code for e in msgspec.msgpack.decode(msg)] == [42, 1]
    out = msgspec.msgpack.decode(msg, ext_hook=hooks.ext_hook)
    assert out[0] == [3, 1, 4] and out[1].v == 7
    # With the default code, code 42 is not ours: it comes back as an Ext object.
    ext = msgspec.msgpack.decode(msgspec.msgpack.encode(msgspec.msgpack.Ext(42, b"abc")),
                                 ext_hook=HOOKS.ext_hook)
    assert ext == msgspec.msgpack.Ext(42, b"abc")
    with pytest.raises(TypeError, match="Custom"):
        hooks_encoder().encode(Custom(1))
    with pytest.raises(ValueError, match="ext_code"):
        tm.Hooks(ext_code=200)
    with pytest.raises(ValueError, match="codec"):
        tm.Hooks(codec="nope")  # type: ignore[arg-type]


# -------------------------------------------------------------------------------------------
# Bad input: WireFormatError / msgspec errors that say what is wrong, never a crash


def ext_message(code: int, payload: bytes) -> bytes:
    return msgspec.msgpack.encode(["r", msgspec.msgpack.Ext(code, payload), None, 0.0])


@pytest.mark.parametrize(("payload", "error", "message"), [
    (b"", WireFormatError, "truncated: header needs 16 bytes, has 0"),
    (b"XXXX" + tokenwire.encode([1, 2, 3])[4:], WireFormatError, "bad magic"),
    (tokenwire.encode(list(range(100)), codec="raw")[:-5], WireFormatError, "truncated"),
    (tokenwire.encode(list(range(100)), codec="raw") + b"\0", WireFormatError, "trailing"),
    (bytes(bytearray(tokenwire.encode(list(range(100)), codec="raw", checksum=True))[:40]
           + bytes([tokenwire.encode(list(range(100)), codec="raw", checksum=True)[40] ^ 1])
           + tokenwire.encode(list(range(100)), codec="raw", checksum=True)[41:]),
     ChecksumError, "checksum mismatch"),
    (tokenwire.encode_many([[1], [2]]), WireFormatError, "multi-sequence frame"),
])
def test_a_damaged_ext_payload(payload: bytes, error: type, message: str) -> None:
    for decoder in (hooks_decoder(Request), tm.Decoder(Request)):
        with pytest.raises(error, match=message):
            decoder.decode(ext_message(tm.Hooks.EXT_CODE, payload))


@pytest.mark.parametrize("n", [3, 300, 16_383, 16_384, 90_000])
@pytest.mark.parametrize("codec", ["auto", "raw", "pfor"])
def test_an_id_outside_the_vocabulary_is_one_error_whatever_the_size(n: int, codec: str) -> None:
    """A short prompt (a list under "auto", an inline Ext) and a long one (out of band, past
    16,384 ids) raise the same TokenIdError, naming the index and the id."""
    ids = [1, 2, 70_000] * (n // 3) + [1] * (n % 3)
    tv = tokenwire.as_tokens(ids)
    for threshold in (None, 0, tm.Encoder().threshold):
        frames = tm.Encoder(threshold=threshold, codec=codec).encode(Request("r", tv, None, 0.0))
        out = tm.Decoder(Request, vocab_size=70_001).decode(frames).prompt_token_ids
        assert out.tolist() == ids
        with pytest.raises(tokenwire.TokenIdError,
                           match="index 2 is 70000, outside the vocabulary") as e:
            tm.Decoder(Request, vocab_size=70_000).decode(frames)
        assert type(e.value) is tokenwire.TokenIdError
        # The hooks in a msgspec decoder of one's own: the same error, or msgspec's
        # ValidationError (every dec_hook error becomes one) caused by it.
        hooks = tm.Hooks(vocab_size=70_000)
        one = msgspec.msgpack.Encoder(enc_hook=tm.Hooks(codec=cast(Any, codec)).enc_hook)
        with pytest.raises((tokenwire.TokenIdError, msgspec.ValidationError)) as e2:
            msgspec.msgpack.Decoder(Request, ext_hook=hooks.ext_hook,
                                    dec_hook=hooks.dec_hook).decode(one.encode(Request("r", tv,
                                                                                  None, 0.0)))
        err = e2.value
        assert type(err if type(err) is tokenwire.TokenIdError else err.__cause__) \
            is tokenwire.TokenIdError


BIG = tokenwire.as_tokens(np.arange(50_000, dtype=np.int32))


def ref(index: int, count: int) -> bytes:
    return index.to_bytes(4, "little") + count.to_bytes(8, "little")


@pytest.mark.parametrize(("payload", "buffers", "message"), [
    (b"\x01\x00", [BIG], "out-of-band reference (Ext 85) has 2 bytes, expected 12"),
    (ref(0, 50_000), [BIG], "reference to frame 0, but the message has 1 buffer(s) (frames 1..1)"),
    (ref(2, 50_000), [BIG], "reference to frame 2, but the message has 1 buffer(s)"),
    (ref(2**32 - 1, 1), [], "reference to frame 4294967295, but the message has 0 buffer(s)"),
    (ref(1, 50_001), [BIG], "frame 1 has 200000 bytes, its reference says 50001 ids (200004 bytes)"),
    (ref(1, 2**64 - 1), [BIG], f"its reference says {2**64 - 1} ids"),
    (ref(1, 1), [b"abc"], "frame 1 has 3 bytes, its reference says 1 ids (4 bytes)"),
])
def test_a_damaged_out_of_band_reference(payload: bytes, buffers: list[Any], message: str) -> None:
    frames = [ext_message(tm.Hooks.BUFFER_EXT_CODE, payload), *[memoryview(b) for b in buffers]]
    with pytest.raises(WireFormatError) as e:
        tm.Decoder(Request).decode(frames)
    assert message in str(e.value)


def test_other_bad_messages() -> None:
    dec = tm.Decoder(Request)
    good = tm.Encoder(codec="raw").encode(Request("r", BIG, None, 0.0))
    with pytest.raises(msgspec.DecodeError, match="truncated"):
        dec.decode([good[0][:-3], good[1]])
    with pytest.raises(msgspec.ValidationError, match=r"expected a TokenVector .* got int - at `\$\[1\]`"):
        dec.decode([msgspec.msgpack.encode(["r", 5, None, 0.0])])
    with pytest.raises(msgspec.ValidationError, match="out of range|outside int32|int32"):
        dec.decode([msgspec.msgpack.encode(["r", [2**40], None, 0.0])])
    with pytest.raises(WireFormatError, match="no frames"):
        dec.decode([])
    with pytest.raises(TypeError):
        dec.decode([12345])
    # A buffer reference seen by the plain hooks (no frames): an Ext object, not a crash.
    plain = hooks_decoder(Any).decode(good[0])
    assert plain[1] == msgspec.msgpack.Ext(tm.Hooks.BUFFER_EXT_CODE, ref(1, 50_000))
    with pytest.raises(ValueError, match="must differ"):
        tm.Encoder(ext_code=7, buffer_ext_code=7)


class Other:
    pass


class Holder(msgspec.Struct):
    x: Other


def test_types_the_hooks_do_not_know_fail_as_msgspec_says() -> None:
    with pytest.raises(TypeError, match="Encoding objects of type Other is unsupported"):
        hooks_encoder().encode({"x": Other()})
    with pytest.raises(msgspec.ValidationError, match=r"Expected `Other`, got `int` - at `\$.x`"):
        hooks_decoder(Holder).decode(msgspec.msgpack.encode({"x": 1}))
    with pytest.raises(msgspec.ValidationError, match=r"Expected `Other`, got `int` - at `\$.x`"):
        msgspec.json.decode(b'{"x": 1}', type=Holder, dec_hook=HOOKS.dec_hook)


@given(st.data())
def test_mangled_messages_raise_only_documented_errors(data: st.DataObject) -> None:
    tv = tokenwire.as_tokens(list(range(300)))
    frames = tm.Encoder(threshold=512).encode(
        Request("r", tv, Params(), 1.0, extra=[tokenwire.as_tokens([1, 2]), {"a": tv}]))
    frames = [bytes(f) for f in frames]
    which = data.draw(st.integers(0, len(frames) - 1))
    blob = bytearray(frames[which])
    for _ in range(data.draw(st.integers(1, 4))):
        op = data.draw(st.sampled_from(["flip", "cut", "extend"]))
        if op == "flip" and blob:
            i = data.draw(st.integers(0, len(blob) - 1))
            blob[i] ^= 1 << data.draw(st.integers(0, 7))
        elif op == "cut":
            del blob[data.draw(st.integers(0, len(blob))):]
        else:
            blob += data.draw(st.binary(max_size=8))
    frames[which] = bytes(blob)
    try:
        out = tm.Decoder(Request).decode(frames)
    except (WireFormatError, msgspec.DecodeError, msgspec.ValidationError):
        return
    # Damage that still decodes (a flipped bit in a string, say) gives a whole, typed Request:
    # the ids a TokenVector of int32 values, the message it re-encodes to decoding to it again.
    assert type(out) is Request and type(out.request_id) is str
    ids = out.prompt_token_ids
    assert ids is None or (type(ids) is TokenVector
                           and all(-(2**31) <= i < 2**31 for i in ids.tolist()))
    again = tm.Decoder(Request).decode(tm.Encoder(threshold=512).encode(out))
    assert again.request_id == out.request_id and (ids is None) == (again.prompt_token_ids is None)
    assert ids is None or again.prompt_token_ids.tolist() == ids.tolist()


# -------------------------------------------------------------------------------------------
# Out-of-band Encoder / Decoder


def test_threshold_inline_or_buffer_and_zero_copy_both_ways() -> None:
    small = tokenwire.as_tokens(list(range(100)))
    req = Request("r", BIG, None, 0.0, extra={"small": small, "again": BIG})
    frames = tm.Encoder(codec="raw").encode(req)
    assert len(frames) == 3 and type(frames[0]) is bytes
    assert all(views(BIG, f) for f in frames[1:])          # the sender's memory, not a copy
    out = tm.Decoder(Request).decode([bytes(f) for f in frames])
    assert out.prompt_token_ids == BIG and out.extra["small"] == small and out.extra["again"] == BIG
    received = [bytes(f) for f in frames]
    out = tm.Decoder(Request).decode(received)
    assert views(out.prompt_token_ids, received[1]) and views(out.extra["again"], received[2])
    mutable = [received[0], bytearray(received[1]), memoryview(bytearray(received[2]))]
    out = tm.Decoder(Request).decode(mutable)
    assert not views(out.prompt_token_ids, mutable[1]) and out.prompt_token_ids == BIG
    assert len(tm.Encoder(threshold=None, codec="raw").encode(req)) == 1
    assert len(tm.Encoder(threshold=0, codec="raw").encode(req)) == 4   # the small one too
    at = tokenwire.as_tokens(list(range(tokenwire.transport.OOB_THRESHOLD // 4)))
    assert len(tm.Encoder().encode(at)) == 2 and len(tm.Encoder().encode(at[1:])) == 1
    empty = tm.Encoder(threshold=0, codec="raw").encode(tokenwire.as_tokens([]))
    assert len(empty) == 2 and tm.Decoder().decode(empty) == []


def _pair() -> tuple[Any, Any, Any]:
    ctx = zmq.Context()
    a, b = ctx.socket(zmq.PUSH), ctx.socket(zmq.PULL)
    port = b.bind_to_random_port("tcp://127.0.0.1")
    a.connect(f"tcp://127.0.0.1:{port}")
    b.setsockopt(zmq.RCVTIMEO, WAIT_MS)
    return ctx, a, b


def test_over_a_real_pyzmq_socket() -> None:
    ctx, push, pull = _pair()
    try:
        ids = np.random.default_rng(0).integers(0, 151_936, 40_000, dtype=np.int32)
        req = Request("r1", tokenwire.as_tokens(ids), Params(0.2, 64), 3.0,
                      extra={"draft": tokenwire.as_tokens(ids[:100])})
        enc, dec = tm.Encoder(codec="raw"), tm.Decoder(Request)
        # 1. the frames as zmq.Frame objects: untrusted memory, copied once
        push.send_multipart(enc.encode(req), copy=False)
        frames = pull.recv_multipart(copy=False)
        assert len(frames) == 2 and all(isinstance(f, zmq.Frame) for f in frames)
        out = dec.decode(frames)
        assert out == req and not views(out.prompt_token_ids, frames[1])
        # 2. promised immutable (what Decoder.recv does): viewed where it was received
        push.send_multipart(enc.encode(req), copy=False)
        frames = pull.recv_multipart(copy=False)
        out = dec.decode([ImmutableBuffer(f) for f in frames])
        assert out == req and views(out.prompt_token_ids, frames[1])
    finally:
        push.close(linger=0)
        pull.close(linger=0)
        ctx.term()


# -------------------------------------------------------------------------------------------
# JSON


class Body(msgspec.Struct):
    prompt_token_ids: TokenVector
    model: str = "m"
    other: Any = None


def test_json_base64_string_round_trip() -> None:
    tv = tokenwire.as_tokens([151_935, 0, 7] * 100)
    text = msgspec.json.encode(Body(tv), enc_hook=HOOKS.json_enc_hook)
    doc = json.loads(text)
    assert doc["prompt_token_ids"] == tokenwire.to_base64(tv)           # codec "auto"
    out = msgspec.json.decode(text, type=Body, dec_hook=HOOKS.dec_hook)
    assert type(out.prompt_token_ids) is TokenVector
    assert out.prompt_token_ids.tolist() == [151_935, 0, 7] * 100
    # Untyped position: a string stays a string (JSON has no tag); from_base64 reads it.
    text = msgspec.json.encode({"x": tv}, enc_hook=HOOKS.json_enc_hook)
    assert tokenwire.from_base64(msgspec.json.decode(text)["x"]).tolist() == [151_935, 0, 7] * 100


def test_json_plain_array_on_request_and_accepted_either_way() -> None:
    tv = tokenwire.as_tokens([5, 6, 7])
    hooks = tm.Hooks(json_array=True)
    text = msgspec.json.encode(Body(tv), enc_hook=hooks.json_enc_hook)
    assert json.loads(text)["prompt_token_ids"] == [5, 6, 7]
    for h in (hooks, HOOKS):                  # one dec_hook reads both forms
        out = msgspec.json.decode(text, type=Body, dec_hook=h.dec_hook).prompt_token_ids
        assert out.tolist() == [5, 6, 7]
    url = tm.Hooks(urlsafe=True)
    text = msgspec.json.encode(Body(tokenwire.as_tokens([0xFBFF] * 64)), enc_hook=url.json_enc_hook)
    assert msgspec.json.decode(text, type=Body, dec_hook=url.dec_hook).prompt_token_ids == [0xFBFF] * 64


def test_json_bad_base64_says_where() -> None:
    with pytest.raises(msgspec.ValidationError,
                       match=r"character '\*' at position 3 .* - at `\$.prompt_token_ids`"):
        msgspec.json.decode(b'{"prompt_token_ids": "VFd*"}', type=Body, dec_hook=HOOKS.dec_hook)
    with pytest.raises(msgspec.ValidationError, match="bad magic"):
        msgspec.json.decode(b'{"prompt_token_ids": "AAAA"}', type=Body, dec_hook=HOOKS.dec_hook)
    with pytest.raises(msgspec.ValidationError, match="got float"):
        msgspec.json.decode(b'{"prompt_token_ids": 1.5}', type=Body, dec_hook=HOOKS.dec_hook)


# -------------------------------------------------------------------------------------------
# No per-id Python objects: allocated blocks do not grow with the number of ids


def allocations(fn: Callable[[], object]) -> tuple[int, int]:
    """(Python memory blocks still allocated after fn(), with its result kept alive; peak of
    the Python-traced bytes during the call). tracemalloc sees every Python object; a path
    that built an int per id (and a list of them) would show in the peak even if it freed them
    before returning."""
    fn()
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        kept = fn()
        peak = tracemalloc.get_traced_memory()[1] - base
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    del kept
    skip = [tracemalloc.Filter(False, tracemalloc.__file__)]
    stats = after.filter_traces(skip).compare_to(before.filter_traces(skip), "filename")
    return sum(s.count_diff for s in stats), peak


def paths(ids: np.ndarray) -> Dict[str, Callable[[], object]]:
    tv = tokenwire.as_tokens(ids)
    req = Request("r", tv, Params(), 1.0)
    enc_h, dec_h = hooks_encoder(), hooks_decoder(Request)
    enc, dec = tm.Encoder(), tm.Decoder(Request)
    return {
        "hooks": lambda: dec_h.decode(enc_h.encode(req)),
        "out-of-band": lambda: dec.decode([bytes(f) for f in enc.encode(req)]),
        "base64": lambda: tokenwire.from_base64(tokenwire.to_base64(tv)),
        "json": lambda: msgspec.json.decode(msgspec.json.encode(Body(tv), enc_hook=HOOKS.json_enc_hook),
                                            type=Body, dec_hook=HOOKS.dec_hook),
    }


def test_no_per_id_python_objects() -> None:
    # Ids above INT_CACHE_SIZE, so that an int per id would be a new object: 32 bytes, plus 8
    # for its list slot. What these paths may allocate per id is bytes/str payload: the
    # message, the frame, the text (about 10 bytes per id at most, measured).
    extra = 99_000
    small = paths(np.arange(1_000, dtype=np.int32) + INT_CACHE_SIZE)
    big = paths(np.arange(1_000 + extra, dtype=np.int32) + INT_CACHE_SIZE)
    for name in small:
        (blocks_small, peak_small), (blocks_big, peak_big) = (
            allocations(small[name]), allocations(big[name]))
        assert blocks_big - blocks_small < 20, f"{name}: {blocks_big - blocks_small} more blocks"
        per_id = (peak_big - peak_small) / extra
        assert per_id < 20, f"{name}: the peak grew by {per_id:.1f} bytes per id"


# -------------------------------------------------------------------------------------------
# The example, run as a real subprocess (from a neutral directory, so that a source checkout's
# tokenwire/ does not shadow the installed package); the benchmark suite is tests/test_bench.py


def test_http_base64_example_runs() -> None:
    r = subprocess.run([sys.executable, str(ROOT / "examples" / "http_base64.py")],
                       capture_output=True, text=True, timeout=WAIT_S, cwd=tempfile.gettempdir())
    assert r.returncode == 0, r.stderr
    assert "server decoded 40,000 ids" in r.stdout and "round trip OK" in r.stdout


def test_msgspec_stays_optional() -> None:
    code = (
        "import sys; sys.modules['msgspec'] = None\n"
        "import tokenwire\n"
        "assert tokenwire.from_base64(tokenwire.to_base64([1, 2])) == [1, 2]\n"
        "try:\n"
        "    import tokenwire.msgspec\n"
        "except ImportError as e:\n"
        "    print('ImportError', e)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=WAIT_S,
                       cwd=tempfile.gettempdir())
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("ImportError") and "pip install 'tokenwire[msgspec]'" in r.stdout


class Yield:
    """Encoded by a user hook that gives the GIL away, so that threads interleave mid-message."""


def test_one_encoder_and_decoder_shared_by_threads() -> None:
    import threading
    import time

    events: list[tuple[str, str]] = []
    # Both threads meet once inside the hook, i.e. each in the middle of a message: the
    # interleaving is forced, not left to the scheduler (which often ran them apart).
    meet = threading.Barrier(2, timeout=WAIT_S)
    met: set[str] = set()

    def yielding_enc(obj: Any) -> Any:
        name = threading.current_thread().name
        events.append((name, "hook"))
        if name not in met:
            met.add(name)
            meet.wait()
        time.sleep(0)
        return None

    enc = tm.Encoder(threshold=0, codec="raw", enc_hook=yielding_enc)
    dec = tm.Decoder()
    errors: list[str] = []

    def work(base: int) -> None:
        try:
            encode_and_check(base)
        except Exception as e:  # noqa: BLE001 - a thread's exception must fail the test
            errors.append(f"{threading.current_thread().name}: {type(e).__name__}: {e}")

    def encode_and_check(base: int) -> None:
        name = threading.current_thread().name
        for i in range(300):
            a = tokenwire.as_tokens([base + i] * 8)
            b = tokenwire.as_tokens([base + i + 1] * 3)
            events.append((name, "start"))
            frames = enc.encode([a, Yield(), b])
            events.append((name, "end"))
            out = dec.decode([bytes(f) for f in frames])
            if len(frames) != 3 or out[0] != a or out[2] != b:
                errors.append(f"{name} message {i}: {len(frames)} frames, got {out[0]!r}, {out[2]!r}")

    threads = [threading.Thread(target=work, args=(k * 1_000_000,), name=f"t{k}") for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    # The other thread really ran while a message was being encoded.
    inside: dict[str, bool] = {}
    interleaved = 0
    for name, what in events:
        if what == "start":
            inside[name] = True
        elif what == "end":
            inside[name] = False
        elif any(v for k, v in inside.items() if k != name):
            interleaved += 1
    assert interleaved > 0


def test_many_references_to_one_mutable_frame_copy_it_once() -> None:
    """A message naming one out-of-band frame many times: a frame that is not `bytes` (here a
    bytearray, as a zmq.Frame of copy=False is) is copied once per decode, not once per
    reference, so memory stays within a constant factor of the message."""
    n_ids, refs = 1 << 18, 300                           # a 1 MiB frame, 300 references
    frame = bytearray(np.arange(n_ids, dtype="<i4").tobytes())
    ref = msgspec.msgpack.Ext(tm.Hooks.BUFFER_EXT_CODE, tm._REF.pack(1, n_ids))
    main = msgspec.msgpack.encode([ref] * refs)
    assert len(main) < 20 * refs
    out, peak = traced_peak(lambda: tm.Decoder().decode([main, frame]))
    assert peak < 2 * len(frame), f"{peak} bytes traced for a {len(frame)}-byte frame"
    assert len(out) == refs and all(v is out[0] for v in out)
    assert out[0] == TokenVector.frombuffer(bytes(frame))
    frame[:4] = b"\7\0\0\0"                              # the copy never shows a later write
    assert out[0][0] == 0
    # The next decode copies again: a cache per decode, never a stale vector.
    assert tm.Decoder().decode([main, frame])[0][0] == 7


def test_a_second_reference_must_agree_on_the_count() -> None:
    frame = bytearray(8 * 4)
    refs = [msgspec.msgpack.Ext(tm.Hooks.BUFFER_EXT_CODE, tm._REF.pack(1, 8)),
            msgspec.msgpack.Ext(tm.Hooks.BUFFER_EXT_CODE, tm._REF.pack(1, 7))]
    with pytest.raises(WireFormatError, match="frame 1 is referenced with 7 ids, an earlier "
                                              "reference said 8"):
        tm.Decoder().decode([msgspec.msgpack.encode(refs), frame])


def test_recv_copies_inproc_frames_because_the_sender_can_still_write() -> None:
    """Decoder.recv over inproc: a frame sent with copy=False is the sender's memory (a write
    after the send shows on the receiver), so the decoded vector is a copy made before it."""
    ctx = zmq.Context()
    push, pull = ctx.socket(zmq.PUSH), ctx.socket(zmq.PULL)
    pull.setsockopt(zmq.RCVTIMEO, WAIT_MS)
    pull.bind("inproc://tokenwire-msgspec-sender-writes")
    push.connect("inproc://tokenwire-msgspec-sender-writes")
    try:
        ids = tokenwire.as_tokens(np.arange(40_000, dtype=np.int32))
        main, buf = tm.Encoder().encode([ids])
        mutable = bytearray(buf)
        push.send_multipart([main, mutable], copy=False)
        frames = pull.recv_multipart(copy=False)
        mutable[:4] = b"\7\0\0\0"
        assert bytes(frames[1].buffer[:4]) == b"\7\0\0\0"          # the hazard is real
        mutable = bytearray(buf)
        push.send_multipart([main, mutable], copy=False)
        out = tm.Decoder().recv(pull)[0]
        mutable[:4] = b"\7\0\0\0"
        assert out[0] == 0 and out == ids
    finally:
        push.close(linger=0)
        pull.close(linger=0)
        ctx.term()


# -------------------------------------------------------------------------------------------
# The default codec never sends more bytes than msgpack's list

@given(ids=token_lists)
def test_auto_never_sends_more_than_the_list(ids: list[int]) -> None:
    tv = tokenwire.as_tokens(ids)
    listed = len(msgspec.msgpack.encode(["r", ids]))
    assert len(hooks_encoder().encode(["r", tv])) <= listed
    frames = tm.Encoder(threshold=0).encode(["r", tv])
    assert sum(memoryview(f).nbytes for f in frames) <= listed
    assert tm.Decoder().decode([bytes(f) for f in frames])[1] == ids
    assert hooks_decoder(Request).decode(hooks_encoder().encode(
        Request("r", tv, None, 0.0))).prompt_token_ids == ids


def test_auto_sizes_on_token_like_ids() -> None:
    """Ids below 65,536 go as u16 (2 bytes, msgpack takes 3 for most); an 18-bit vocabulary
    as packed (2.25); ids mostly below 128 with one large one fall back to the list."""
    rng = np.random.default_rng(1)
    for hi, per_id in ((65_536, 2.0), (151_936, 2.25)):
        ids = rng.integers(256, hi, 40_000, dtype=np.int32)
        ids[0] = hi - 1
        msg = hooks_encoder().encode(tokenwire.as_tokens(ids))
        assert len(msg) == 4 + 16 + int(40_000 * per_id) + (1 if hi > 65_536 else 0) - 1 \
            or abs(len(msg) / 40_000 - per_id) < 0.01
        assert len(msg) < len(msgspec.msgpack.encode(ids.tolist()))
        frames = tm.Encoder().encode(tokenwire.as_tokens(ids))
        assert len(frames) == 2 and abs(len(frames[1]) / 40_000 - per_id) < 0.01
    mostly_small = [5] * 40_000 + [100_000]
    msg = hooks_encoder().encode(tokenwire.as_tokens(mostly_small))
    assert msg == msgspec.msgpack.encode(mostly_small)
    assert tm.Decoder(TokenVector).decode(msg) == mostly_small


def test_a_damaged_framed_reference() -> None:
    tv = tokenwire.as_tokens(np.arange(20_000, dtype=np.int32))
    frames = [bytes(f) for f in tm.Encoder().encode(["r", tv])]
    assert len(frames[1]) < tv.nbytes                         # a frame, not the raw ids
    framed = msgspec.msgpack.Ext(tm.Hooks.BUFFER_EXT_CODE, tm._REF_FRAMED.pack(1, 19_999, 1))
    with pytest.raises(WireFormatError, match="frame 1 holds 20000 ids, its reference says 19999"):
        tm.Decoder().decode([msgspec.msgpack.encode(framed), frames[1]])
    kind = msgspec.msgpack.Ext(tm.Hooks.BUFFER_EXT_CODE, tm._REF_FRAMED.pack(1, 20_000, 2))
    with pytest.raises(WireFormatError, match="buffer kind 2"):
        tm.Decoder().decode([msgspec.msgpack.encode(kind), frames[1]])
    with pytest.raises(WireFormatError, match="out-of-band frame 1: .*magic"):
        tm.Decoder().decode([frames[0], b"XXXX" + frames[1][4:]])
    with pytest.raises(tokenwire.TokenIdError, match="out-of-band frame 1: .*vocab"):
        tm.Decoder(vocab_size=100).decode(frames)             # the ids, not the frame, are bad


# -------------------------------------------------------------------------------------------
# Leading frames over real sockets: Encoder.send(prefix=) / Decoder.recv(prefix=N)


class EngineRequest(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    request_id: str
    prompt_token_ids: Optional[TokenVector]
    arrival_time: float
    priority: int = 0


def _socket_pair(kinds: tuple[int, int], identity: bytes = b"") -> tuple[Any, Any, Any]:
    ctx = zmq.Context()
    a, b = ctx.socket(kinds[0]), ctx.socket(kinds[1])
    if identity:
        b.setsockopt(zmq.IDENTITY, identity)
    port = a.bind_to_random_port("tcp://127.0.0.1")
    b.connect(f"tcp://127.0.0.1:{port}")
    for s in (a, b):
        s.setsockopt(zmq.RCVTIMEO, WAIT_MS)
        s.setsockopt(zmq.LINGER, 0)
    return ctx, a, b


@pytest.mark.parametrize("codec", ["auto", "raw"])
def test_a_type_frame_over_push_pull(codec: str) -> None:
    ctx, pull, push = _socket_pair((zmq.PULL, zmq.PUSH))
    try:
        req = EngineRequest("r", tokenwire.as_tokens(BIG), 1.5)
        enc, dec = tm.Encoder(codec=codec), tm.Decoder(EngineRequest)   # type: ignore[arg-type]
        enc.send(push, req, prefix=[b"\x00"])
        leading, got = dec.recv(pull, prefix=1)
        assert leading == [b"\x00"] and got == req
        # The message without prefix= reads the type frame as the message: msgspec says so.
        enc.send(push, req, prefix=[b"\x00"])
        with pytest.raises(msgspec.ValidationError, match="Expected `array`, got `int`"):
            dec.recv(pull)
        push.send(b"\x00")
        with pytest.raises(WireFormatError, match="1 frame.*expected 1 leading"):
            dec.recv(pull, prefix=1)
        with pytest.raises(TypeError, match="prefix frame 0 must be bytes-like"):
            enc.send(push, req, prefix=[0])
    finally:
        push.close()
        pull.close()
        ctx.term()


def test_router_identity_and_type_both_ways() -> None:
    ctx, router, dealer = _socket_pair((zmq.ROUTER, zmq.DEALER), identity=b"client-3")
    try:
        req = EngineRequest("r", tokenwire.as_tokens(BIG), 1.5, priority=2)
        enc, dec = tm.Encoder(), tm.Decoder(EngineRequest)
        enc.send(dealer, req, prefix=[b"\x00"])
        (identity, kind), got = dec.recv(router, prefix=2)
        assert (identity, kind) == (b"client-3", b"\x00") and got == req
        enc.send(router, got, prefix=[identity, b"\x01"])
        leading, back = dec.recv(dealer, prefix=1)
        assert leading == [b"\x01"] and back == req
    finally:
        router.close()
        dealer.close()
        ctx.term()


# -------------------------------------------------------------------------------------------
# A host encoder that keeps its own aux buffer list (the shape of vLLM's MsgpackEncoder), and
# vLLM's EngineCoreRequest: the benchmarks' models of both (bench/msgspec_json.py, bench/data.py),
# one copy.

TW = tm.Hooks()                          # the tokenwire line's hooks, per test


def test_the_out_of_band_encoder_chained_with_a_host_hook_fails_on_its_buffers() -> None:
    """What happens without aux_enc_hook: the host's hook runs outside its own encode."""
    host = HostEncoder(TW)
    req = engine_request(vllm.TokenRequest, tokenwire.as_tokens(BIG),
                         prompt_embeds=np.ones((64, 8), np.float32))
    with pytest.raises(AssertionError):
        tm.Encoder(enc_hook=host.enc_hook).encode(req)


@pytest.mark.parametrize("codec", ["auto", "raw"])
def test_one_buffer_list_for_tokens_and_tensors_over_zmq(codec: str) -> None:
    global TW
    TW = tm.Hooks(codec=codec)  # type: ignore[arg-type]
    ctx, pull, push = _socket_pair((zmq.PULL, zmq.PUSH))
    try:
        embeds = np.arange(64 * 16, dtype=np.float32).reshape(64, 16)
        req = engine_request(vllm.TokenRequest, tokenwire.as_tokens(BIG), prompt_embeds=embeds,
                             priority=1)
        frames = HostEncoder(TW).encode(req)
        assert len(frames) == 3                       # [main, tokens, tensor]: one list
        push.send_multipart([b"\x00", *frames], copy=False)
        kind, *data = pull.recv_multipart(copy=False)
        got = HostDecoder(vllm.TokenRequest, TW).decode(data)
        assert kind.bytes == b"\x00" and got.prompt_token_ids == BIG
        assert np.array_equal(got.prompt_embeds, embeds) and got.priority == 1
        assert got.prompt_token_ids.copy() == BIG and type(got.prompt_token_ids.copy()) is list
        # A short prompt and a small tensor stay inline; a host decoder without the tokenwire
        # line on an old peer's list message still works (engine first, then the proxy).
        small = engine_request(vllm.TokenRequest, tokenwire.as_tokens([1, 2, 3]),
                               prompt_embeds=np.ones(4, np.float32))
        assert len(HostEncoder(TW).encode(small)) == 1
        back = HostDecoder(vllm.TokenRequest, TW).decode(HostEncoder(TW).encode(small))
        assert back.prompt_token_ids == [1, 2, 3] and np.array_equal(back.prompt_embeds,
                                                                     small.prompt_embeds)
        old_peer = HostEncoder(None).encode(engine_request(vllm.ListRequest, list(BIG)))
        assert HostDecoder(vllm.TokenRequest, TW).decode(old_peer).prompt_token_ids == BIG
    finally:
        TW = tm.Hooks()
        push.close()
        pull.close()
        ctx.term()


@pytest.mark.parametrize("codec", ["auto", "raw"])
def test_aux_ext_hook_keeps_no_frame_once_the_message_is_dropped(codec: str) -> None:
    """The hook's record of the message it reads (for a buffer named twice) never outlives the
    message: once the frames and what was decoded from them are dropped, they are freed, the
    host's tensors included, with no later decode on the thread."""
    global TW
    TW = tm.Hooks(codec=codec)  # type: ignore[arg-type]
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        ids = tokenwire.as_tokens(np.arange(2_000_000, dtype=np.int32))      # 8 MB of ids
        embeds = np.ones((8, 1024, 1024), np.float32)                           # 32 MB
        frames = HostEncoder(TW).encode(engine_request(vllm.TokenRequest, ids,
                                                       prompt_embeds=embeds, priority=1))
        assert len(frames) == 3
        frames = [bytes(f) for f in frames]           # as received: frames of their own
        got = HostDecoder(vllm.TokenRequest, TW).decode(frames)
        assert got.prompt_token_ids == ids and np.array_equal(got.prompt_embeds, embeds)
        del got, frames, ids, embeds
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
        TW = tm.Hooks()
    assert held < 1 << 20, f"{held / 2**20:.1f} MiB still held after the message was dropped"


def test_aux_ext_hook_releases_a_message_it_refused() -> None:
    import weakref
    tensor = bytearray(16 << 20)

    class Frame(bytearray):                  # a frame whose death can be watched
        pass

    main = msgspec.msgpack.encode([msgspec.msgpack.Ext(tm.Hooks.BUFFER_EXT_CODE, ref(1, 10))])
    bufs: List[Any] = [main, Frame(tensor)]
    watch = weakref.ref(bufs[1])
    with pytest.raises(WireFormatError, match="has 16777216 bytes, its reference says 10 ids"):
        msgspec.msgpack.decode(main, ext_hook=lambda c, d, b=bufs: TW.aux_ext_hook(c, d, b))
    del bufs
    gc.collect()
    assert watch() is None


def test_aux_hooks_reject_a_missing_list_and_bad_references() -> None:
    with pytest.raises(ValueError, match="no buffer list"):
        TW.aux_enc_hook(tokenwire.as_tokens(BIG), None)
    main = msgspec.msgpack.encode(msgspec.msgpack.Ext(tm.Hooks.BUFFER_EXT_CODE, ref(1, 10)))
    with pytest.raises(WireFormatError, match="no buffers"):
        msgspec.msgpack.decode(main, ext_hook=lambda c, d: TW.aux_ext_hook(c, d, None))
    with pytest.raises(WireFormatError, match="frame 1, but the message has 0 buffer"):
        msgspec.msgpack.decode(main, ext_hook=lambda c, d: TW.aux_ext_hook(c, d, [main]))
    # Many references to one buffer: read once per message, never a stale vector after.
    buf = bytearray(np.arange(10, dtype="<i4").tobytes())
    many = msgspec.msgpack.encode([msgspec.msgpack.Ext(tm.Hooks.BUFFER_EXT_CODE, ref(1, 10))] * 50)
    bufs = [many, buf]                          # the host's list, one per message
    out = msgspec.msgpack.decode(many, ext_hook=lambda c, d: TW.aux_ext_hook(c, d, bufs))
    assert all(v is out[0] for v in out) and out[0] == list(range(10))
    buf[:4] = b"\7\0\0\0"
    bufs = [many, buf]
    again = msgspec.msgpack.decode(many, ext_hook=lambda c, d: TW.aux_ext_hook(c, d, bufs))
    assert again[0][0] == 7 and out[0][0] == 0


def _map_repeating_one_key(refs: List[bytes]) -> bytes:
    """A msgpack map whose entries all have the key "k": decoding it, each value replaces (and
    drops) the one before."""
    out = bytearray(b"\xde" + len(refs).to_bytes(2, "big"))
    for payload in refs:
        out += b"\xa1k" + msgspec.msgpack.encode(msgspec.msgpack.Ext(tm.Hooks.BUFFER_EXT_CODE,
                                                                        payload))
    return bytes(out)


def test_aux_ext_hook_bounds_the_reads_of_a_frame_whose_vectors_are_dropped() -> None:
    """A map that repeats a key, alternating two frames, drops a vector on every entry. The
    hook forgets only the dropped vector (the other frame's stays), and reads one frame at most
    64 times in one message: 400 references are refused instead of costing 400 decodes."""
    a = tokenwire.encode(tokenwire.as_tokens(np.arange(20_000)), codec="pfor")
    b = tokenwire.encode(tokenwire.as_tokens(np.arange(20_000) * 3), codec="pfor")
    framed = [tm._REF_FRAMED.pack(1, 20_000, 1), tm._REF_FRAMED.pack(2, 20_000, 1)]
    reads = []

    def decode(refs: List[bytes]) -> Any:
        main = _map_repeating_one_key(refs)
        bufs = [main, a, b]
        return msgspec.msgpack.decode(main, ext_hook=lambda c, d: reads.append(1) or
                                      TW.aux_ext_hook(c, d, bufs))

    got = decode(framed * 64)                                   # each frame read 64 times
    assert got["k"] == list(range(0, 60_000, 3))
    with pytest.raises(WireFormatError, match="out-of-band frame 1 is read more than 64 times "
                                              "in one message"):
        decode(framed * 200)
    assert len(reads) == 128 + 129
    kept = decode([framed[0]] * 400)                            # one vector, kept: read once
    assert kept["k"] == list(range(20_000))


def _map_dropping_each_vector(refs: int, payload: bytes) -> bytes:
    """A msgpack map {"k": ref, "k": 0, ...}: each reference's vector is dropped by the entry
    after it, so the message holds no vector of its frame between two references."""
    ext = msgspec.msgpack.encode(msgspec.msgpack.Ext(tm.Hooks.BUFFER_EXT_CODE, payload))
    out = bytearray(b"\xde" + (2 * refs).to_bytes(2, "big"))
    for _ in range(refs):
        out += b"\xa1k" + ext + b"\xa1k\x00"
    return bytes(out)


def test_aux_ext_hook_keeps_the_read_bound_when_a_message_drops_every_vector() -> None:
    """The hook lets go of a message's list when its last vector is dropped, but not of the
    counts: 400 references to one frame, each dropped before the next, are refused at the
    65th read, not decoded 400 times. The next messages, each within the bound, all load."""
    frame = tokenwire.encode(tokenwire.as_tokens(np.arange(20_000)), codec="pfor")
    payload = tm._REF_FRAMED.pack(1, 20_000, 1)
    reads = []

    def decode(main: bytes) -> Any:
        bufs = [main, frame]
        return msgspec.msgpack.decode(main, ext_hook=lambda c, d: reads.append(1) or
                                      TW.aux_ext_hook(c, d, bufs))

    with pytest.raises(WireFormatError, match="out-of-band frame 1 is read more than 64 times "
                                              "in one message"):
        decode(_map_dropping_each_vector(400, payload))
    assert len(reads) == 65
    for _ in range(100):                         # lists and buffers at recycled addresses
        assert decode(_map_dropping_each_vector(60, payload)) == {"k": 0}


def test_hooks_send_out_of_band_buffers_in_their_own_codec() -> None:
    """`oob_codec` is the out-of-band buffers' codec apart from the inline Exts': a vector of
    `threshold` bytes or more becomes a frame of `oob_codec` in the host's list, a small one an
    inline Ext of `codec`; what the socket-aware Encoder(codec=None) uses."""
    hooks = tm.Hooks(codec="auto", oob_codec="pfor", threshold=1024)
    big, small = tokenwire.as_tokens(range(5_000)), tokenwire.as_tokens(range(60_000, 60_100))
    buffers: List[Any] = [b""]
    ref = hooks.aux_enc_hook(big, buffers)
    assert ref.code == tm.Hooks.BUFFER_EXT_CODE and tokenwire.frame_info(buffers[1]).codec == "pfor"
    inline = hooks.aux_enc_hook(small, buffers)
    assert inline.code == tm.Hooks.EXT_CODE and tokenwire.frame_info(inline.data).codec == "u16"
    raw = tm.Hooks(codec="packed", oob_codec="raw", threshold=1024)
    views: List[Any] = [b""]
    raw.aux_enc_hook(big, views)
    assert type(views[1]) is memoryview and views[1].nbytes == big.nbytes
    with pytest.raises(ValueError, match="unknown codec 'lz4'"):
        tm.Hooks(oob_codec="lz4")  # type: ignore[arg-type]


# -------------------------------------------------------------------------------------------
# What goes into a TokenVector field: ndarrays taken, text refused where it is encoded


class Prompt(msgspec.Struct):
    prompt_token_ids: TokenVector
    mm_ids: Optional[TokenVector] = None


def test_an_int32_array_is_sent_without_a_copy() -> None:
    ids = np.arange(50_000, dtype=np.int32)
    frames = tm.Encoder(codec="raw").encode(Prompt(ids))
    assert len(frames) == 2 and np.shares_memory(np.asarray(frames[1]), ids)
    got = tm.Decoder(Prompt).decode([bytes(f) for f in frames]).prompt_token_ids
    assert type(got) is TokenVector and got == ids.tolist()
    # A host's own buffer list (aux_enc_hook) takes the array's memory the same way.
    hooks, buffers = tm.Hooks(codec="raw"), [b""]
    ext = hooks.aux_enc_hook(ids, buffers)
    assert ext.code == hooks.buffer_ext_code and np.shares_memory(np.asarray(buffers[1]), ids)
    # Compact codecs and inline Exts encode the array's ids (one pass, as for a TokenVector).
    for codec in ("auto", "pfor"):
        frames = tm.Encoder(codec=codec).encode(Prompt(ids, ids[:100]))
        back = tm.Decoder(Prompt).decode(frames)
        assert back.prompt_token_ids == ids.tolist() and back.mm_ids == list(range(100))


@pytest.mark.parametrize("arr", [np.arange(30_000, dtype=np.int64),
                                 np.arange(60_000, dtype=np.int32)[::2],
                                 np.arange(30_000, dtype=np.uint16),
                                 np.arange(30_000, dtype=">i4")])
def test_other_integer_arrays_are_converted(arr: Any) -> None:
    frames = tm.Encoder(codec="raw").encode(Prompt(arr))
    assert not np.shares_memory(np.asarray(frames[1]), arr)
    assert tm.Decoder(Prompt).decode(frames).prompt_token_ids == arr.tolist()
    text = msgspec.json.encode(Prompt(arr), enc_hook=HOOKS.json_enc_hook)
    assert msgspec.json.decode(text, type=Prompt, dec_hook=HOOKS.dec_hook).prompt_token_ids \
        == arr.tolist()


@pytest.mark.parametrize("arr", [np.zeros(5), np.array([True, False]),
                                 np.zeros((2, 3), np.int32)])
def test_arrays_that_are_not_ids_are_refused_naming_as_tokens(arr: Any) -> None:
    for encode in (tm.Encoder().encode, msgspec.msgpack.Encoder(enc_hook=HOOKS.enc_hook).encode,
                   msgspec.json.Encoder(enc_hook=HOOKS.json_enc_hook).encode):
        with pytest.raises(tokenwire.errors.TokenIdTypeError,
                           match=rf"dtype {arr.dtype} .*tokenwire\.as_tokens"):
            encode(Prompt(arr))


def test_your_enc_hook_gets_the_arrays() -> None:
    seen: List[Any] = []

    def mine(obj: Any) -> Any:
        seen.append(obj)
        return obj.tolist()

    arr = np.zeros(3)
    tm.Encoder(enc_hook=mine).encode({"x": arr})
    assert seen == [arr]


@pytest.mark.parametrize("value", ["1 2 3", b"\x01\x00\x00\x00", 7, 1.5, {"ids": [1]}])
def test_a_value_the_receiver_cannot_read_is_refused_at_encode(value: Any, zmq_ctx: Any) -> None:
    with pytest.raises(tokenwire.errors.TokenIdTypeError,
                       match=rf"Prompt\.prompt_token_ids is typed TokenVector, got "
                             rf"{type(value).__name__}: .*tokenwire\.as_tokens"):
        tm.Encoder().encode(Prompt(value))
    with pytest.raises(tokenwire.errors.TokenIdTypeError, match=r"Prompt\.mm_ids .* got str"):
        tm.Encoder().encode(Prompt([1], "1 2"))
    with pytest.raises(tokenwire.errors.TokenIdTypeError, match="got NoneType|got None"):
        tm.Encoder().encode(Prompt(None))                     # not Optional: refused
    zmq_, ctx = zmq_ctx
    sender, receiver = ctx.socket(zmq_.PUSH), ctx.socket(zmq_.PULL)
    sender.connect(f"tcp://127.0.0.1:{receiver.bind_to_random_port('tcp://127.0.0.1')}")
    with pytest.raises(tokenwire.errors.TokenIdTypeError):
        tm.Encoder().send(sender, Prompt(value))
    tm.Encoder().send(sender, Prompt([1, 2], None))       # lists, tuples and None (Optional) go
    assert receiver.poll(WAIT_MS)
    got = tm.Decoder(Prompt).recv(receiver)                   # the refused one was never sent
    assert got.prompt_token_ids == [1, 2] and got.mm_ids is None
