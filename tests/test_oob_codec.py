"""Out-of-band messages with codec=: TokenVector buffers as compact wire frames, marked in a
codec header (docs/transport.md, "Encoded token frames: the format"); the default follows the
socket's endpoint; raw messages stay what they were."""

from __future__ import annotations

import functools
import hashlib
import hmac
import pickle
import struct
import uuid
from typing import Any, List

import numpy as np
import pytest

import tokenwire
from tokenwire import _oob
from tokenwire.errors import AuthenticationError, WireFormatError
from tokenwire.transport import (NETWORK_CODEC, dumps_oob, endpoint_codec, loads_oob,
                                 recv_pyobj_oob, send_pyobj_oob, socket_codec)

from support.codec_harness import has_zstandard
from support.wait import WAIT_MS

zmq = pytest.importorskip("zmq")

KEY = bytes(range(32))
IDS = tokenwire.as_tokens(np.random.default_rng(7).integers(0, 151_936, 40_000, dtype=np.int32))
OTHER = np.linspace(0.0, 1.0, 20_000, dtype=np.float64)          # a non-token buffer, 160 KB
# zstd where the zstandard extra is installed (encoding with it raises ValueError otherwise).
CODECS = tuple(c for c in ("packed", "pfor", "zstd", "auto")
               if c != "zstd" or has_zstandard())


def request() -> dict:
    return {"id": "r1", "ids": IDS, "extra": OTHER, "more": IDS[:30_000], "small": IDS[:10]}


def check(out: dict) -> None:
    assert out["ids"] == IDS and out["more"] == IDS[:30_000] and out["small"] == IDS[:10]
    assert type(out["ids"]) is tokenwire.TokenVector
    np.testing.assert_array_equal(out["extra"], OTHER)


def body(frames: List[Any], signed: bool) -> List[bytes]:
    return [bytes(f) for f in frames[1 if signed else 0:]]


# -------------------------------------------------------------------------------------------
# Raw messages are byte for byte the format without a codec header

def expected_raw(obj: Any, key: Any = None, sign_buffers: bool = False) -> List[bytes]:
    """The pre-codec format, built here from its specification (docs/transport.md)."""
    bufs: List[bytes] = []

    def cb(b: pickle.PickleBuffer) -> bool:
        if b.raw().nbytes < _oob.OOB_THRESHOLD:
            return True
        bufs.append(b.raw().tobytes())
        return False
    head = pickle.dumps(obj, protocol=5, buffer_callback=cb)
    if key is None:
        return [head, *bufs]
    m = b"tokenwire-oob-v1\0" + (b"\1" if sign_buffers else b"\0")
    m += struct.pack(f"<{len(bufs) + 2}Q", len(bufs), *(len(b) for b in bufs), len(head)) + head
    if sign_buffers:
        m += b"".join(bufs)
    return [b"TWS2" + hmac.new(hashlib.sha256(key).digest(), m, "sha256").digest(), head, *bufs]


@pytest.mark.parametrize("codec", [None, "raw"])
@pytest.mark.parametrize("key,sign_buffers", [(None, False), (KEY, False), (KEY, True)])
def test_raw_messages_are_the_format_without_codecs(codec: Any, key: Any,
                                                     sign_buffers: bool) -> None:
    got = dumps_oob(request(), codec=codec, key=key, sign_buffers=sign_buffers)
    assert [bytes(f) for f in got] == expected_raw(request(), key, sign_buffers)


def test_a_message_without_token_buffers_has_no_header() -> None:
    """codec= encodes token ids only: a message of other buffers is the raw format."""
    obj = {"extra": OTHER, "blob": pickle.PickleBuffer(bytes(100_000))}
    assert [bytes(f) for f in dumps_oob(obj, codec="pfor")] == expected_raw(obj)


# -------------------------------------------------------------------------------------------
# Round trips per codec

@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("key,sign_buffers", [(None, False), (KEY, False), (KEY, True)])
def test_round_trip_per_codec(codec: str, key: Any, sign_buffers: bool) -> None:
    frames = dumps_oob(request(), codec=codec, key=key, sign_buffers=sign_buffers)
    parts = body(frames, key is not None)
    assert parts[0].startswith(_oob.CODEC_HEADER_MAGIC)
    # header, pickle, ids, extra, more: the two token buffers are frames, the ndarray raw
    assert len(parts) == 5
    # the count, one kind per buffer, then each encoded frame's 16-byte wire header
    assert parts[0][len(_oob.CODEC_HEADER_MAGIC):] == \
        struct.pack("<I", 3) + b"\1\0\1" + parts[2][:16] + parts[4][:16]
    info = tokenwire.frame_info(parts[2])
    assert info.counts == (40_000,) and info.checksum
    # "zstd" of ids it cannot shrink (these are uniform) falls back to packed, as encode does
    assert info.codec == codec if codec in ("packed", "pfor") else info.codec != "raw"
    assert len(parts[2]) < IDS.nbytes * 0.6
    assert parts[3] == OTHER.tobytes()
    check(loads_oob([bytes(f) for f in frames], key=key, sign_buffers=sign_buffers))


def test_explicit_codec_is_checked() -> None:
    with pytest.raises(ValueError, match="unknown codec 'lz4'"):
        dumps_oob(request(), codec="lz4")


# -------------------------------------------------------------------------------------------
# Damaged and hostile encoded frames

def damaged(frames: List[Any], index: int, at: int) -> List[bytes]:
    out = [bytes(f) for f in frames]
    b = bytearray(out[index])
    b[at] ^= 0x40
    out[index] = bytes(b)
    return out


def test_a_damaged_encoded_frame_is_refused_unsigned() -> None:
    frames = dumps_oob(request(), codec="pfor")
    with pytest.raises(WireFormatError, match=r"encoded token frame 1: .*checksum"):
        loads_oob(damaged(frames, 2, 5_000))
    cut = [bytes(f) for f in frames]
    cut[2] = cut[2][:-100]
    with pytest.raises(WireFormatError, match="encoded token frame 1: "):
        loads_oob(cut)
    not_a_frame = [bytes(f) for f in frames]
    not_a_frame[4] = bytes(len(not_a_frame[4]))
    with pytest.raises(WireFormatError, match="encoded token frame 3 does not start with the "
                                              "wire header its codec header gives"):
        loads_oob(not_a_frame)


@pytest.mark.parametrize("sign_buffers", [False, True])
def test_a_damaged_signed_message_is_refused_by_the_signature(sign_buffers: bool) -> None:
    frames = dumps_oob(request(), codec="pfor", key=KEY, sign_buffers=sign_buffers)
    with pytest.raises(AuthenticationError, match="bad signature"):
        loads_oob(damaged(frames, 1, len(_oob.CODEC_HEADER_MAGIC) + 5), key=KEY,
                  sign_buffers=sign_buffers)                     # the header's kinds
    if sign_buffers:
        with pytest.raises(AuthenticationError, match="bad signature"):
            loads_oob(damaged(frames, 3, 5_000), key=KEY, sign_buffers=True)
    else:                 # contents not signed: the frame's checksum refuses it
        with pytest.raises(WireFormatError, match="checksum"):
            loads_oob(damaged(frames, 3, 5_000), key=KEY)


def test_the_header_is_checked_against_the_frames() -> None:
    frames = [bytes(f) for f in dumps_oob(request(), codec="packed")]
    magic = _oob.CODEC_HEADER_MAGIC
    wire = frames[2][:16] + frames[4][:16]
    for header, message in (
            (magic + b"\3\0", "truncated"),
            (magic + struct.pack("<I", 4) + b"\1\0\1\0" + wire, "names 4 buffer frame"),
            (magic + struct.pack("<I", 3) + b"\1\0" + wire, "names 3 buffer frame"),
            (magic + struct.pack("<I", 3) + b"\1\0\1" + wire[:16], "names 3 buffer frame"),
            (magic + struct.pack("<I", 3) + b"\1\2\1" + wire, "frame 2 has kind 2")):
        with pytest.raises(WireFormatError, match=message):
            loads_oob([header, *frames[1:]])


def test_a_header_marking_a_raw_buffer_as_encoded_is_refused_whole() -> None:
    """Marking the ndarray's frame as a token frame: refused (not a wire frame), and nothing
    is unpickled: no partial result."""
    frames = [bytes(f) for f in dumps_oob(request(), codec="packed")]
    frames[0] = (_oob.CODEC_HEADER_MAGIC + struct.pack("<I", 3) + b"\1\1\1" + frames[2][:16]
                 + frames[3][:16] + frames[4][:16])
    with pytest.raises(WireFormatError, match="encoded token frame 2"):
        loads_oob(frames)


def _same_length_frame(frame: bytes) -> bytes:
    """A valid checksummed pfor frame of `frame`'s length holding as many ids as fit: zeros,
    one header byte per block of 128 (16 + 8 + ceil(N/128) + 4 bytes), what a man in the
    middle can put in place of a frame whose length alone is signed."""
    forged = tokenwire.encode(np.zeros(128 * (len(frame) - 28), np.int32), codec="pfor",
                              checksum=True)
    assert len(forged) == len(frame)
    return forged


@pytest.mark.parametrize("path", ["loads_oob", "socket"])
def test_a_signed_encoded_frame_is_bound_to_its_codec_and_count(path: str, zmq_ctx) -> None:  # type: ignore[no-untyped-def]
    """The signature covers an encoded frame's length, not its bytes (sign_buffers=False),
    and an encoded frame's length does not fix its id count (pfor holds up to 128 ids a byte).
    The signed codec header repeats each encoded frame's wire header (codec, width, flags,
    count): a valid frame of the same length holding 289x the ids is refused before it is
    decoded, on the functions and on a socket."""
    frames = [bytes(f) for f in dumps_oob(request(), codec="pfor", key=KEY)]
    assert tokenwire.frame_info(frames[3]).counts == (40_000,)
    forged = list(frames)
    forged[3] = _same_length_frame(frames[3])
    assert tokenwire.frame_info(forged[3]).counts[0] >= 280 * 40_000
    if path == "loads_oob":
        def receive(parts: List[bytes]) -> Any:
            return loads_oob(parts, key=KEY)
    else:
        zmq, ctx = zmq_ctx
        pull, push = ctx.socket(zmq.PULL), ctx.socket(zmq.PUSH)
        pull.bind("inproc://bound-frames")
        push.connect("inproc://bound-frames")

        def receive(parts: List[bytes]) -> Any:
            push.send_multipart(parts)
            return recv_pyobj_oob(pull, key=KEY)
    with pytest.raises(AuthenticationError, match="encoded token frame 1 does not start with "
                                                   "the wire header its codec header gives"):
        receive(forged)
    check(receive(frames))                               # the message as sent still loads
    unsigned = body(forged, True)                        # without a key: a malformed message
    with pytest.raises(WireFormatError, match="encoded token frame 1 does not start with"):
        loads_oob(unsigned)


def test_an_encoded_frame_must_decode_to_the_count_its_header_gives() -> None:
    """Checked after decoding too (what was decoded, not what was read before): a frame whose
    memory changed between the check and the decode is refused."""
    frames = [bytes(f) for f in dumps_oob(request(), codec="pfor", key=KEY)]
    parts = body(frames, True)
    header = _oob.codec_kinds(parts)
    assert header is not None and set(header.wire_headers) == {0, 2}
    short = tokenwire.TokenVector(range(10))
    with pytest.raises(AuthenticationError, match="encoded token frame 1 decodes to 10 ids, "
                                                   "its codec header gives 40000"):
        _oob.load(parts[1], parts[2:], header, None, lambda frame: short, signed=True)


def test_the_layer_without_a_decoder_refuses_encoded_frames() -> None:
    frames = dumps_oob(request(), codec="packed")
    with pytest.raises(WireFormatError, match="encoded token-id frames"):
        _oob.unpickle_frames(frames)


# -------------------------------------------------------------------------------------------
# A receiver that predates the header fails naming it, never with other ids

def test_a_receiver_without_the_header_fails_clearly() -> None:
    frames = [bytes(f) for f in dumps_oob(request(), codec="pfor")]
    # what loads_oob did without a codec header: the first frame is the pickle
    with pytest.raises(AttributeError, match="encoded_token_frames__upgrade_tokenwire"):
        pickle.loads(frames[0], buffers=frames[1:])
    restricted = functools.partial(tokenwire.unpickle.find_class, allow=frozenset())
    with pytest.raises(pickle.UnpicklingError, match="encoded_token_frames__upgrade_tokenwire"):
        _oob.unpickle(frames[0], frames[1:], restricted)
    # signed: such a receiver checks the mode-0 signature of [pickle, *buffers]; it differs
    signed = dumps_oob(request(), codec="pfor", key=KEY)
    assert bytes(signed[0]) != _oob.signature(KEY, signed[1], signed[2:], False)


# -------------------------------------------------------------------------------------------
# The default over real sockets

def test_endpoint_codec() -> None:
    assert endpoint_codec(b"ipc:///tmp/x") == "raw" and endpoint_codec("inproc://q") == "raw"
    for ep in ("tcp://127.0.0.1:5555", b"tcp://0.0.0.0:1", "tcp://worker-3:5555",
               "TCP://[::1]:9", "ws://host:80", "epgm://eth0;239.1.1.1:5555"):
        assert endpoint_codec(ep) == NETWORK_CODEC, ep
    for ep in (b"", "", "nothing", "vsock://1:2"):
        assert endpoint_codec(ep) == "raw", ep
    assert socket_codec(object()) == "raw"


def pair(endpoint: str, bind_sender: bool) -> Any:
    ctx = zmq.Context.instance()
    push, pull = ctx.socket(zmq.PUSH), ctx.socket(zmq.PULL)
    pull.setsockopt(zmq.RCVTIMEO, WAIT_MS)
    if bind_sender:
        if endpoint.endswith(":*"):
            port = push.bind_to_random_port(endpoint[:-2])
            pull.connect(f"tcp://127.0.0.1:{port}")
        else:
            push.bind(endpoint)
            pull.connect(endpoint)
    else:
        if endpoint.endswith(":*"):
            port = pull.bind_to_random_port(endpoint[:-2])
            endpoint = f"{endpoint[:-2]}:{port}"
        else:
            pull.bind(endpoint)
        push.connect(endpoint)
    return push, pull


def ipc() -> str:
    return f"ipc:///tmp/tw-oob-codec-{uuid.uuid4().hex}.ipc"


@pytest.mark.parametrize("endpoint,bind_sender,codec", [
    ("ipc", True, "raw"), ("ipc", False, "raw"),
    ("tcp://127.0.0.1:*", True, NETWORK_CODEC), ("tcp://127.0.0.1:*", False, NETWORK_CODEC),
    ("tcp://0.0.0.0:*", True, NETWORK_CODEC)])
@pytest.mark.parametrize("key", [None, KEY])
def test_the_default_follows_the_endpoint(endpoint: str, bind_sender: bool, codec: str,
                                           key: Any) -> None:
    push, pull = pair(ipc() if endpoint == "ipc" else endpoint, bind_sender)
    try:
        assert socket_codec(push) == codec
        send_pyobj_oob(push, request(), key=key)
        frames = pull.recv_multipart()
        parts = body(frames, key is not None)
        if codec == "raw":
            assert parts == expected_raw(request(), key)[1 if key else 0:]
        else:
            assert parts[0].startswith(_oob.CODEC_HEADER_MAGIC)
            assert tokenwire.frame_info(parts[2]).codec == codec
            assert len(parts[2]) < IDS.nbytes * 0.6 and parts[3] == OTHER.tobytes()
        check(loads_oob(frames, key=key))
        send_pyobj_oob(push, request(), key=key)
        check(recv_pyobj_oob(pull, key=key))
    finally:
        push.close(linger=0)
        pull.close(linger=0)


@pytest.mark.parametrize("codec", ["raw", *CODECS])
@pytest.mark.parametrize("transport", ["ipc", "tcp://127.0.0.1:*"])
def test_an_explicit_codec_over_sockets(codec: str, transport: str) -> None:
    push, pull = pair(ipc() if transport == "ipc" else transport, False)
    try:
        for key, sign_buffers in ((None, False), (KEY, False), (KEY, True)):
            send_pyobj_oob(push, request(), key=key, sign_buffers=sign_buffers, codec=codec)
            check(recv_pyobj_oob(pull, key=key, sign_buffers=sign_buffers))
        # leading frames, signed with the header
        send_pyobj_oob(push, request(), key=KEY, codec=codec, prefix=[b"T"])
        leading, out = recv_pyobj_oob(pull, key=KEY, prefix=1)
        assert leading == [b"T"]
        check(out)
        send_pyobj_oob(push, request(), codec=codec, prefix=[b"T"])
        frames = pull.recv_multipart()
        assert frames[1].startswith(_oob.CODEC_HEADER_MAGIC) == (codec != "raw")
    finally:
        push.close(linger=0)
        pull.close(linger=0)


def test_a_damaged_signed_frame_through_a_socket_is_refused() -> None:
    """(An unsigned one is the harness's hostile-bytes check, tests/test_transport_harness.py.)"""
    push, pull = pair(ipc(), False)
    try:
        push.send_multipart(damaged(dumps_oob(request(), codec="pfor", key=KEY,
                                                  sign_buffers=True), 3, 5_000))
        with pytest.raises(AuthenticationError, match="bad signature"):
            recv_pyobj_oob(pull, key=KEY, sign_buffers=True)
    finally:
        push.close(linger=0)
        pull.close(linger=0)


def test_a_channel_takes_raw_only() -> None:
    shm = pytest.importorskip("tokenwire.shm")
    push, pull = pair(ipc(), False)
    sender = shm.Sender()
    try:
        with pytest.raises(ValueError, match="codec must be None or 'raw'"):
            send_pyobj_oob(push, request(), channel=sender, codec="pfor")
    finally:
        sender.close()
        push.close(linger=0)
        pull.close(linger=0)


# -------------------------------------------------------------------------------------------
# msgspec's Encoder

def test_msgspec_encoder_codec() -> None:
    tm = pytest.importorskip("tokenwire.msgspec")
    msg = ["r", IDS, IDS[:10]]
    raw = tm.Encoder(codec=None).encode(msg)
    assert len(raw) == 2 and memoryview(raw[1]).nbytes == IDS.nbytes      # no socket: raw
    assert tm.Decoder().decode([bytes(f) for f in raw])[1] == IDS
    for codec in CODECS:
        frames = tm.Encoder(codec=codec).encode(msg)                  # type: ignore[arg-type]
        assert len(frames[1]) < IDS.nbytes * 0.6
        assert tm.Decoder().decode([bytes(f) for f in frames])[1] == IDS
    for endpoint, framed in (("ipc", False), ("tcp://127.0.0.1:*", True)):
        push, pull = pair(ipc() if endpoint == "ipc" else endpoint, False)
        try:
            tm.Encoder(codec=None).send(push, msg)
            frames = pull.recv_multipart()
            assert (len(frames[1]) < IDS.nbytes) == framed
            if framed:
                assert tokenwire.frame_info(frames[1]).codec == NETWORK_CODEC
            out = tm.Decoder().decode(frames)
            assert out[1] == IDS and out[2] == IDS[:10]
        finally:
            push.close(linger=0)
            pull.close(linger=0)
