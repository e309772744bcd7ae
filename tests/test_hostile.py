"""Hostile input and hostile callers: zstd frames that would inflate past their declared size,
headers that claim more than a frame holds, crafted pickles (of tokenwire's extension types, and
one mutable source named many times under a restricted unpickler), buffers written by another
thread during a call, failing allocations, and values an error message cannot simply print.
Valid input at the edges of what is accepted is tests/test_valid_edge_inputs.py; refused
request states are tests/test_state.py.

Anything that could take the interpreter down (a crash, hundreds of MB) runs in a subprocess, so
that a regression is a failed test and not a dead pytest.
"""

from __future__ import annotations

import functools
import io
import pickle
import pickletools
import re
import struct
import subprocess
import sys
import textwrap
import threading
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tokenwire
import tokenwire._core
import tokenwire.unpickle
from tokenwire import WireFormatError
from tokenwire.request import GenerationRequest
from tokenwire.unpickle import check_pickle

from support.leaks import traced_peak
from support.wait import WAIT_S

# Subprocesses, peak-RSS measurements and racing threads: `pytest -m "not slow"` skips them.
pytestmark = pytest.mark.slow


ZSTD_BLOCK = 128 * 1024


def run_python(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run `code` in a fresh interpreter (same environment, so the same tokenwire). It runs in
    tests/: from the repository root, `-c` would import the uncompiled source tree instead of
    the installed package."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args],
                          capture_output=True, text=True, timeout=WAIT_S, cwd=Path(__file__).parent)


# --------------------------------------------------------------------------------------------
# zstd frames that would inflate past their declared size


def zstd_rle_bomb(blocks: int) -> bytes:
    """A raw-codec tokenwire frame with the ZSTD flag whose zstd frame (RFC 8878, written by hand)
    declares a legal content size -- the most the 64x rule allows for its compressed size -- but
    holds `blocks` RLE blocks of 128 KiB each: 4 bytes in, 128 KiB out, per block."""
    def block(last: int) -> bytes:
        return ((ZSTD_BLOCK << 3) | (1 << 1) | last).to_bytes(3, "little") + b"\x00"
    body = [block(0)] * (blocks - 1) + [block(1)]
    clen = 4 + 2 + 8 + 4 * blocks                      # magic, descriptors, content size, blocks
    declared = (64 * clen) // 4 * 4                    # P <= 64 * C, a whole number of ids
    # Frame header descriptor 0xC0: an 8-byte content size and a window descriptor (0x38: a
    # 128 KiB window), so the decoder streams instead of writing into one P-byte buffer.
    zframe = (b"\x28\xb5\x2f\xfd" + bytes([0xC0, 0x38])
              + struct.pack("<Q", declared) + b"".join(body))
    assert len(zframe) == clen
    header = b"TWIR" + struct.pack("<BBBBQ", 1, 0, 32, 0x04, declared // 4)
    return header + struct.pack("<Q", clen) + zframe


def test_zstd_bomb_is_refused_before_decompressing() -> None:
    pytest.importorskip("zstandard")
    bomb = zstd_rle_bomb(40)                            # 5 MiB of RLE output for a 1.6 KB frame
    for fn in (tokenwire.decode, tokenwire.decode_many):
        with pytest.raises(WireFormatError, match=r"zstd payload regenerates more than the \d+ "
                                                  r"bytes the header needs \(block at byte \d+\)"):
            fn(bomb)


def test_compressed_blocks_are_cut_off_one_byte_past_the_declared_size() -> None:
    """Compressed blocks do not say what they regenerate, so the decompressor's output is capped
    instead: a real zstd frame of 8 MiB whose content-size field is rewritten to a legal small
    value stops early (traced peak far below the 8 MiB it holds)."""
    zstandard = pytest.importorskip("zstandard")
    comp = zstandard.ZstdCompressor(level=1, write_content_size=True).compress(b"abcdefgh" * 2**20)
    params = zstandard.get_frame_parameters(comp)
    assert params.content_size == 8 * 2**20
    hsize = zstandard.frame_header_size(comp)
    # A new header: 8-byte content size and a 128 KiB window (not single-segment, so libzstd
    # streams rather than decoding into one buffer of the declared size), checksum flag kept.
    declared = (64 * (len(comp) - hsize + 14)) // 4 * 4
    comp = (comp[:4] + bytes([0xC0 | (comp[4] & 0x04), 0x38]) + struct.pack("<Q", declared)
            + comp[hsize:])
    frame = (b"TWIR" + struct.pack("<BBBBQ", 1, 0, 32, 0x04, declared // 4)
             + struct.pack("<Q", len(comp)) + comp)
    def decode() -> None:
        # libzstd itself notices an overlong compressed block (one block past the declared size
        # at most); the reader's cap is the second line of defence for any frame it misses.
        with pytest.raises(WireFormatError, match=f"zstd payload (decompresses to more than "
                                                  f"{declared} bytes|is corrupt)"):
            tokenwire.decode(frame)

    peak = traced_peak(decode)[1]
    assert peak < 4 * declared + 2**20, peak

BOMB_PATHS = {
    "decode": "tokenwire.decode(data)",
    "decode_many": "tokenwire.decode_many(data)",
    "GenerationRequest.__setstate__": """
        from tokenwire import GenerationRequest
        state = GenerationRequest([1, 2, 3]).__getstate__()
        state["prompt_token_ids"] = data
        GenerationRequest.__new__(GenerationRequest).__setstate__(state)
    """,
    "tokenwire inspect": """
        from tokenwire.cli import main
        if main(["inspect", path]) != 1:
            raise SystemExit("inspect did not report an invalid frame")
        raise WireFormatError("inspect: exit status 1")
    """,
}


@pytest.mark.parametrize("path", list(BOMB_PATHS))
def test_zstd_bomb_peak_memory_stays_small(path: str, tmp_path: Path) -> None:
    """6000 RLE blocks: a 24 KB frame that libzstd would inflate to 786 MB before noticing that
    the output does not match the declared size. Peak RSS must not move by more than 64 MB."""
    pytest.importorskip("zstandard")
    frame = tmp_path / "bomb.twir"
    frame.write_bytes(zstd_rle_bomb(6000))
    code = """
        import resource, sys, textwrap
        import zstandard, tokenwire
        from tokenwire import WireFormatError
        path = sys.argv[1]
        data = open(path, "rb").read()
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        try:
            exec(textwrap.dedent(sys.argv[2]))
        except WireFormatError as e:
            print("refused:", e)
        else:
            raise SystemExit("the bomb was accepted")
        grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
        print("peak RSS grew by", grown, "KiB")
        assert grown < 64 * 1024, grown
    """
    r = run_python(code, str(frame), BOMB_PATHS[path])
    assert r.returncode == 0, r.stdout + r.stderr
    assert "refused:" in r.stdout and "zstd payload" in r.stdout + r.stderr


# --------------------------------------------------------------------------------------------
# headers that claim more than the frame holds: allocation stays bounded by the input


def test_decode_many_of_empty_sequences_allocates_one_list_slot_each() -> None:
    frame = tokenwire.encode_many([[]] * 1_000_000)                   # 4 MB
    peak = traced_peak(lambda: tokenwire.decode_many(frame))[1]
    assert peak <= 2 * len(frame) + 4096, f"{peak / len(frame):.1f} bytes per input byte"
    out = tokenwire.decode_many(frame)
    assert len(out) == 1_000_000 and all(len(v) == 0 for v in out[:10])


def test_decode_many_allocation_bound_per_input_byte() -> None:
    # The worst case per count-table entry: one id each, packed at width 1 (docs/wire-format.md:
    # at most 26 bytes per input byte: a 64-byte vector, its storage, a list slot per 4.1 bytes).
    frame = tokenwire.encode_many([[1]] * 200_000, codec="packed")
    peak = traced_peak(lambda: tokenwire.decode_many(frame))[1]
    assert peak <= 26 * len(frame), f"{peak / len(frame):.1f} bytes per input byte"


def test_pfor_allocation_is_bounded_by_its_payload() -> None:
    """A pfor frame holds at most 128 ids per payload byte (width-0 blocks): its claimed count
    is checked against the length prefix before the ids are allocated, so a decoder allocates
    at most 512 bytes of ids per payload byte; a larger claim is refused without allocating."""
    blocks = 10_000
    frame = tokenwire.encode([0] * (128 * blocks), codec="pfor")          # one byte per block
    assert len(frame) == 24 + blocks
    peak = traced_peak(lambda: tokenwire.decode(frame))[1]
    assert peak <= 512 * blocks + 4096, f"{peak / blocks:.1f} bytes per payload byte"
    claim = bytearray(frame)
    claim[8:16] = (128 * blocks + 1).to_bytes(8, "little")               # one id too many
    peak = traced_peak(lambda: pytest.raises(WireFormatError, tokenwire.decode, bytes(claim)))[1]
    assert peak < 64 * 1024, peak
    with pytest.raises(WireFormatError, match=r"^pfor payload of 10000 bytes cannot hold 1280001 "):
        tokenwire.frame_info(bytes(claim))
    # several sequences: each decoded straight into its own vector, the 4 bytes an id and no
    # second copy (the sequences' lengths put block boundaries inside sequences and across them)
    many = tokenwire.encode_many([[0] * 64_001] * 20, codec="pfor")
    peak = traced_peak(lambda: tokenwire.decode_many(many))[1]
    assert peak <= 4 * 64_001 * 20 + 20 * 200 + 4096, f"{peak / (4 * 64_001 * 20):.2f} x the ids"
    assert [len(v) for v in tokenwire.decode_many(many)] == [64_001] * 20


def test_count_table_total_is_exact_and_checked_before_allocating() -> None:
    """Ruled out for real buffers (a wrap needs a table of 2**32 entries, 16 GiB); the sum is
    128-bit anyway. A table of maximal counts gives the exact size needed."""
    nseq = 1000
    table = struct.pack(f"<{nseq}I", *([0xFFFFFFFF] * nseq))
    frame = b"TWIR" + struct.pack("<BBBBQ", 1, 0, 32, 0x02, nseq) + table
    need = nseq * 0xFFFFFFFF * 4
    info = tokenwire.frame_info(frame)                  # reads no payload: reports the sizes
    assert sum(info.counts) == nseq * 0xFFFFFFFF and info.nbytes == len(frame) + need
    with pytest.raises(WireFormatError, match=f"truncated: payload needs {need} bytes, has 0"):
        tokenwire.decode_many(frame)


# --------------------------------------------------------------------------------------------
# crafted pickles of tokenwire's extension types


def _extension_types() -> list[type]:
    from tokenwire import _core
    return [t for t in vars(_core).values()
            if isinstance(t, type) and t.__module__ == "tokenwire._core"]


def test_no_extension_type_has_generated_pickle_helpers() -> None:
    from tokenwire import _core
    types = _extension_types()
    assert {t.__name__ for t in types} >= {"TokenVector", "ImmutableBuffer", "FrameInfo"}
    for t in types:
        assert not hasattr(t, "__setstate_cython__"), t
        assert not hasattr(t, "__reduce_cython__"), t
    assert not [n for n in vars(_core) if n.startswith("__pyx_unpickle")]


def test_only_token_vector_pickles() -> None:
    info = tokenwire.frame_info(tokenwire.encode([1, 2, 3]))
    for obj in (info, tokenwire._core.ImmutableBuffer(b"abcd")):
        for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
            with pytest.raises(TypeError, match="cannot pickle"):
                pickle.dumps(obj, protocol=protocol)
    fn, args = tokenwire.as_tokens([1, 2]).__reduce_ex__(3)
    assert fn is tokenwire._core._restore_token_vector and args == (b"\1\0\0\0\2\0\0\0",)
    # Below protocol 3 the bytes travel as a latin-1 str (no _codecs.encode global needed).
    fn, args = tokenwire.as_tokens([1, 2]).__reduce_ex__(2)
    assert fn is tokenwire._core._restore_token_vector and args == ("\1\0\0\0\2\0\0\0",)

CRAFTED_PICKLES = {
    # __pyx_unpickle_FrameInfo(FrameInfo, <checksum>, ()) -- the generated helper itself
    "unpickle helper": b"ctokenwire._core\n__pyx_unpickle_FrameInfo\n(ctokenwire._core\n"
                       b"FrameInfo\nI12345\n)tR.",
    # FrameInfo.__new__(FrameInfo), then BUILD with an empty and a short state
    "FrameInfo NEWOBJ+BUILD ()": b"\x80\x02ctokenwire._core\nFrameInfo\n)\x81)b.",
    "FrameInfo NEWOBJ+BUILD (1,)": b"\x80\x02ctokenwire._core\nFrameInfo\n)\x81(I1\ntb.",
    "FrameInfo reconstructor": b"ccopyreg\n_reconstructor\n(ctokenwire._core\nFrameInfo\n"
                               b"cbuiltins\nobject\nNtR.",
    "TokenVector NEWOBJ+BUILD": b"\x80\x02ctokenwire._core\nTokenVector\n)\x81(I1\nI2\ntb.",
    "ImmutableBuffer NEWOBJ": b"\x80\x02ctokenwire._core\nImmutableBuffer\n)\x81.",
    "ImmutableBuffer(int)": b"ctokenwire._core\nImmutableBuffer\n(I7\ntR.",
    "restore(int)": b"ctokenwire._core\n_restore_token_vector\n(I7\ntR.",
    "restore(3 bytes)": b"\x80\x03ctokenwire._core\n_restore_token_vector\nC\x03abc\x85R.",
    "restore(str, not latin-1)": b"ctokenwire._core\n_restore_token_vector\n(Vab\\u0100d\ntR.",
    "restore(str, 3 chars)": b"ctokenwire._core\n_restore_token_vector\n(Vabc\ntR.",
}


def test_crafted_pickles_and_setstate_never_crash() -> None:
    code = """
        import pickle, sys
        import tokenwire
        from tokenwire import _core
        crafted = eval(sys.argv[1])
        attempts = {name: (lambda p=p: pickle.loads(p)) for name, p in crafted.items()}
        attempts["FrameInfo().__setstate_cython__(())"] = (
            lambda: _core.FrameInfo().__setstate_cython__(()))
        attempts["FrameInfo().__reduce_cython__()"] = lambda: _core.FrameInfo().__reduce_cython__()
        attempts["FrameInfo().__reduce__()"] = lambda: _core.FrameInfo().__reduce__()
        for name, fn in attempts.items():
            try:
                fn()
            except Exception as e:
                print(f"{name}: {type(e).__name__}")
            else:
                print(f"{name}: RETURNED")
    """
    r = run_python(code, repr(CRAFTED_PICKLES))
    assert r.returncode == 0, f"exit status {r.returncode}\n{r.stdout}{r.stderr}"
    lines = r.stdout.splitlines()
    assert len(lines) == len(CRAFTED_PICKLES) + 3, r.stdout
    assert not [line for line in lines if line.endswith("RETURNED")], r.stdout


# --------------------------------------------------------------------------------------------
# crafted pickles under a restricted unpickler: a pickle naming one source many times (its
# memo makes that cost a few bytes a time) gets one vector, so memory stays within a constant
# factor of the pickle, and one mutable source named past a bound is refused

_REFS = 30

_SOURCE = 1 << 20                                        # 1 MiB of ids

_GLOBAL = b"\x8c\x0ftokenwire._core\x8c\x15_restore_token_vector\x93\x94"   # memo 0


def _in_band_bytearray() -> tuple[bytes, list[object]]:
    """BYTEARRAY8 once (memo 1), then restored _REFS times (6 bytes each)."""
    first = _GLOBAL + b"\x96" + struct.pack("<Q", _SOURCE) + bytes(_SOURCE) + b"\x94\x85R"
    again = b"h\x00h\x01\x85R" * (_REFS - 1)
    return b"\x80\x05](" + first + again + b"e.", []


def _out_of_band_view() -> tuple[bytes, list[object]]:
    """One out-of-band buffer over writable memory, made read-only once (memo 1), restored
    _REFS times."""
    first = _GLOBAL + b"\x97\x98\x94\x85R"
    again = b"h\x00h\x01\x85R" * (_REFS - 1)
    return b"\x80\x05](" + first + again + b"e.", [bytearray(_SOURCE)]


def _out_of_band_fresh_views() -> tuple[bytes, list[object]]:
    """The buffer itself memoized (memo 1): each restore makes a new read-only view of it."""
    first = _GLOBAL + b"0\x97\x940"                     # both memoized, then popped
    again = b"h\x00h\x01\x98\x85R" * _REFS
    return b"\x80\x05](" + first + again + b"e.", [bytearray(_SOURCE)]


def _request_states() -> tuple[bytes, list[object]]:
    """_REFS requests whose states name one bytearray frame (pickle memoizes it)."""

    frame = bytearray(tokenwire.encode(np.zeros(_SOURCE // 4, np.int32), codec="raw"))
    fn, args, state = GenerationRequest([1]).__reduce_ex__(5)[:3]

    class Shared:
        __class__ = property(lambda self: GenerationRequest)    # what pickle checks of __newobj__

        def __reduce_ex__(self, protocol: object) -> object:
            return fn, args, dict(state, prompt_token_ids=frame, query_token_ids=(frame,))

    return pickle.dumps([Shared() for _ in range(_REFS)], protocol=5), []


@pytest.mark.parametrize("craft", [_in_band_bytearray, _out_of_band_view,
                                   _out_of_band_fresh_views, _request_states])
def test_restricted_unpickle_copies_a_mutable_source_once(craft) -> None:
    data, buffers = craft()
    assert len(data) < _SOURCE + 200 * _REFS
    allow = {("tokenwire.request", "GenerationRequest"), ("copyreg", "__newobj__")}
    find = functools.partial(tokenwire.unpickle.find_class, allow=allow)

    class Restricted(pickle.Unpickler):
        def find_class(self, module: str, name: str) -> object:
            return find(module, name)

    out, peak = traced_peak(lambda: Restricted(io.BytesIO(data), buffers=buffers).load())
    assert len(out) == _REFS
    assert peak < 2 * len(data) + 2 * _SOURCE, f"{peak} bytes traced for a {len(data)}-byte pickle"
    if isinstance(out[0], GenerationRequest):
        vectors = [v for r in out for v in (r.prompt_token_ids, r.query_token_ids)]
        assert all(type(v) is list for v in vectors[::2])
        assert all(type(v) is tuple for v in vectors[1::2])
        assert len(vectors[0]) == _SOURCE // 4 and not any(vectors[0])
        assert vectors[1] == tuple(vectors[0])
    else:
        assert all(v is out[0] for v in out) and len(out[0]) == _SOURCE // 4 and not any(out[0])


def test_the_repeat_count_does_not_carry_over_to_the_next_message(zmq_ctx) -> None:  # type: ignore[no-untyped-def]
    """No attacker needed: over inproc a received frame is the sender's memory, at the same
    address for every send of one request. 100 identical messages, every result kept alive,
    all load (each pickle names its buffer once)."""
    from tokenwire.transport import recv_pyobj_oob, send_pyobj_oob

    zmq, ctx = zmq_ctx
    pull, push = ctx.socket(zmq.PULL), ctx.socket(zmq.PUSH)
    pull.bind("inproc://same-address")
    push.connect("inproc://same-address")
    request = GenerationRequest(list(range(40_000)))
    kept = []
    for _ in range(100):
        send_pyobj_oob(push, request)
        kept.append(recv_pyobj_oob(pull, find_class=functools.partial(
            tokenwire.unpickle.find_class, allow={("tokenwire.request", "GenerationRequest")})))
    assert all(r.prompt_token_ids == request.prompt_token_ids for r in kept)


def _one_state_built_into_many(keys: int, requests: int, slots: bool) -> bytes:
    """A pickle that builds one memoized `keys`-entry state into `requests` GenerationRequests,
    7 bytes each (9 with a (state, slots) tuple around it): each request copies the state."""
    out = bytearray(b"\x80\x05\x8c\x11tokenwire.request\x94\x8c\x11GenerationRequest\x94"
                    b"\x93\x94}\x94(")                                       # memo 0-3
    for k in range(keys):
        name = f"a{k}".encode()
        out += b"\x8c" + bytes([len(name)]) + name + b"K\x01"
    out += b"u0" + (b"h\x02)\x81h\x03" + (b"N\x86" if slots else b"") + b"b") * requests
    return bytes(out + b".")


@pytest.mark.parametrize("slots", [False, True])
def test_one_state_built_into_many_requests_is_refused(slots: bool) -> None:
    """Each request takes a copy of its state, so one state named again for each request would
    make memory quadratic in the pickle (a 21 KB pickle peaked at 78 MB): a load refuses a
    state applied to a second object, and its traced peak stays within the documented 256
    times the pickle's size plus 256 KiB. A pickle of many requests loads."""
    from tokenwire.transport import loads_oob

    allow = functools.partial(tokenwire.unpickle.find_class,
                              allow={("tokenwire.request", "GenerationRequest")})
    data = _one_state_built_into_many(1000, 3000, slots)
    check_pickle(data)
    tracemalloc.start()
    try:
        with pytest.raises(pickle.UnpicklingError, match="applies one state of 1000 entries "
                                                         "to more than one object"):
            loads_oob([data], find_class=allow)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak <= 256 * len(data) + (256 << 10), f"{peak} bytes for {len(data)}"
    many = [GenerationRequest([k] * 10) for k in range(100)]
    got = loads_oob([pickle.dumps(many, protocol=5)], find_class=allow)
    assert [r.prompt_token_ids for r in got] == [r.prompt_token_ids for r in many]


def test_load_scopes_nest_and_are_per_thread() -> None:
    """An inner scope has a table of its own and the outer one's comes back after it; another
    thread's loads never see this thread's table."""
    from tokenwire._core import _restore_token_vector

    source = bytearray(b"\1\0\0\0")
    with tokenwire.unpickle.load_scope():
        outer = _restore_token_vector(source)
        with tokenwire.unpickle.load_scope():
            assert _restore_token_vector(source) is not outer
        assert _restore_token_vector(source) is outer
        seen = []
        thread = threading.Thread(target=lambda: seen.append(_restore_token_vector(source)))
        thread.start()
        thread.join()
        assert seen[0] is not outer and seen[0] == outer


# --------------------------------------------------------------------------------------------
# received pickles that declare more than they hold

# CPython's unpickler allocates a counted argument before reading it, and grows its memo to a
# put's index (zeroing it) before anything else: each of these few bytes would cost the worker
# the named amount, find_class or not. tokenwire's receivers refuse them first.
HUGE_PICKLES = {
    "BINBYTES 2 GiB": (b"\x80\x05B\xff\xff\xff\x7f", "BINBYTES at offset 2 declares 2147483647"),
    "BINBYTES8": (b"\x80\x05\x8e" + (2**40).to_bytes(8, "little"), "BINBYTES8 at offset 2"),
    "BYTEARRAY8": (b"\x80\x05\x96" + (2**40).to_bytes(8, "little") + b"ab",
                   "BYTEARRAY8 at offset 2 declares 1099511627776 bytes, 2 follow it"),
    "LONG_BINPUT 16M": (b"\x80\x05NrX\x00\x00\x01.", "memo index 16777304, beyond a 9-byte"),
    "PUT text": (b"Np16777216\n.", "PUT at offset 1 puts memo index b'16777216'"),
    "PUT underscores": (b"Np16_777_216\n.", "PUT at offset 1 puts memo index b'16_777_216'"),
    # the unpickler reads the line as a C string: it ends at the NUL, the index is 16777216
    "PUT text with a NUL": (b"Np16777216\x00x\n.", "PUT at offset 1 puts memo index b'16777216'"),
}


@pytest.mark.parametrize("find_class", [tokenwire.unpickle.find_class, None], ids=["restricted", "plain"])
@pytest.mark.parametrize("name", list(HUGE_PICKLES))
def test_a_received_pickle_allocates_no_more_than_its_size(name: str, find_class) -> None:  # type: ignore[no-untyped-def]
    from tokenwire.transport import loads_oob

    data, message = HUGE_PICKLES[name]

    def load() -> None:
        with pytest.raises(pickle.UnpicklingError, match=re.escape(message)):
            loads_oob([data], find_class=find_class)

    assert traced_peak(load)[1] < 256 * 1024      # unchecked: 16 MiB of memo to 1 TiB of bytes


def test_a_received_pickle_is_checked_on_the_socket_and_the_channel(zmq_ctx) -> None:  # type: ignore[no-untyped-def]
    from tokenwire.shm import Receiver
    from tokenwire.transport import recv_pyobj_oob

    zmq, ctx = zmq_ctx
    pull, push = ctx.socket(zmq.PULL), ctx.socket(zmq.PUSH)
    pull.bind("inproc://huge-pickles")
    push.connect("inproc://huge-pickles")
    data, message = HUGE_PICKLES["BINBYTES 2 GiB"]
    for find_class in (tokenwire.unpickle.find_class, None):
        push.send(data)
        with pytest.raises(pickle.UnpicklingError, match=re.escape(message)):
            recv_pyobj_oob(pull, find_class=find_class)
    push.send(data)
    with Receiver() as receiver, pytest.raises(pickle.UnpicklingError, match=re.escape(message)):
        recv_pyobj_oob(pull, find_class=tokenwire.unpickle.find_class, channel=receiver)


@pytest.mark.parametrize("name", list(HUGE_PICKLES))
def test_a_stack_that_loads_pickles_itself_checks_them_first(name: str) -> None:
    """A stack with its own restricted Unpickler (docs/adopting.md, section 4): the allow-list
    does not bound memory, `check_pickle` does, before anything is allocated; the same bytes
    given to the unpickler unchecked would allocate what they declare."""
    data, message = HUGE_PICKLES[name]

    class RequestUnpickler(pickle.Unpickler):
        def find_class(self, module: str, name: str) -> object:
            return tokenwire.unpickle.find_class(module, name, allow={("tokenwire.request",
                                                               "GenerationRequest")})

    def load() -> None:
        with pytest.raises(pickle.UnpicklingError, match=re.escape(message)):
            check_pickle(data)
            RequestUnpickler(io.BytesIO(data)).load()

    assert traced_peak(load)[1] < 64 * 1024
    for source in (bytearray(data), memoryview(data), np.frombuffer(data, np.uint8)):
        with pytest.raises(pickle.UnpicklingError, match=re.escape(message)):
            check_pickle(source)                    # any bytes-like object
    # What a received request looks like passes, and loads through the same unpickler.
    good = pickle.dumps(GenerationRequest(list(range(50_000))), protocol=5)
    check_pickle(good)
    assert RequestUnpickler(io.BytesIO(good)).load().prompt_token_ids == list(range(50_000))


# What CPython's own unpickler does with the bombs below differs between releases (3.15's
# grows its memo and reads a long frame as the data comes; 3.14's refuses an opcode that runs
# past its frame); check_pickle refuses them on all. Each tiny probe below tells which unpickler
# this is, so that the tests below assert what the unchecked unpickler really does here.
def _unpickler_grows_its_memo() -> bool:
    """True if a LONG_BINPUT of index 2**16 does not make the unpickler allocate a 65536-entry
    memo (it grows the memo with its entries)."""
    data = b"\x80\x05Nr" + (2**16).to_bytes(4, "little") + b"."
    return traced_peak(lambda: pickle.Unpickler(io.BytesIO(data)).load())[1] < 256 * 1024


def _unpickler_keeps_to_frames() -> bool:
    """True if the unpickler refuses a string that runs past the end of its frame (older ones
    read the rest from the file and drop the frame's remainder)."""
    data = b"\x80\x04\x95" + (4).to_bytes(8, "little") + b"U\x05ab" + b"12345."
    try:
        pickle.Unpickler(io.BytesIO(data)).load()
    except pickle.UnpicklingError as e:
        assert "pickle exhausted before end of frame" in str(e)
        return True
    return False


def _unpickler_reads_a_frame_as_it_comes() -> bool:
    """True if a FRAME that declares 16 MiB, read through a file with peek(), does not make the
    unpickler allocate the 16 MiB before it finds the data missing."""
    data = b"\x80\x04\x95" + (16 << 20).to_bytes(8, "little") + b"N."

    def load() -> None:
        with pytest.raises(pickle.UnpicklingError, match="truncated"):
            pickle.Unpickler(io.BufferedReader(io.BytesIO(data))).load()

    return traced_peak(load)[1] < 8 << 20


def test_the_memo_bomb_is_what_check_pickle_stops() -> None:
    """The bound is real: the 9-byte LONG_BINPUT pickle, unchecked, makes a restricted
    unpickler allocate its memo (16 MiB traced for index 2**20) where the unpickler sizes its
    memo by the index; checked, it is refused (its peak when checked is bounded by the test
    above)."""
    data = b"\x80\x05Nr" + (2**20).to_bytes(4, "little") + b"."

    class Restricted(pickle.Unpickler):
        def find_class(self, module: str, name: str) -> object:
            return tokenwire.unpickle.find_class(module, name)

    peak = traced_peak(lambda: Restricted(io.BytesIO(data)).load())[1]
    if _unpickler_grows_its_memo():
        assert peak < 256 * 1024
    else:
        assert peak >= 8 * 2**20
    with pytest.raises(pickle.UnpicklingError, match="puts memo index 1048576, beyond a 9-byte"):
        check_pickle(data)


# Pickles whose opcodes cross the end of a frame. Read from memory (pickle.loads) a FRAME is a
# hint; read from a file (Unpickler(io.BytesIO(data)), every restricted receiver) CPython's
# unpickler reads an argument that runs past the frame's end fresh from the file and drops the
# rest of the frame, so it parses other opcodes than a walk of the bytes as one stream. Each of
# these hides a LONG_BINPUT of index 2**24 (a 256 MiB memo) from such a walk.
def _frame(body: bytes) -> bytes:
    return b"\x95" + len(body).to_bytes(8, "little") + body


_BOMB = b"r" + (2**24).to_bytes(4, "little")
FRAME_CROSSINGS = {
    # SHORT_BINSTRING of 5 bytes, 2 of them in the frame: the unpickler takes "123U\x05" after
    # the frame as the string and runs the LONG_BINPUT; a stream walk reads a second
    # SHORT_BINSTRING ("U\x05") that swallows it.
    "argument": (b"\x80\x04" + _frame(b"U\x05ab") + b"123U\x05" + _BOMB + b".",
                 "SHORT_BINSTRING at offset 11 runs past the end of its frame at offset 15"),
    # A line (INT) whose newline lies beyond the frame: the unpickler reads a fresh line.
    "line": (b"\x80\x04" + _frame(b"I1") + b"2\nU\x05" + _BOMB + b".",
             "INT at offset 11 runs past the end of its frame at offset 13"),
    # The opcode's fixed argument (BININT2) split by the frame's end.
    "fixed argument": (b"\x80\x04" + _frame(b"M\x01") + b"\x02U\x01" + _BOMB[:1] + _BOMB
                       + b".", "BININT2 at offset 11 runs past the end of its frame at offset 13"),
    # A FRAME inside a frame, longer than what is left of it: read from a file, the inner frame
    # is the 5 bytes after the outer one (the LONG_BINPUT), the outer frame's "NU\x05" dropped.
    "frame in a frame": (b"\x80\x04" + _frame(b"N\x95" + (5).to_bytes(8, "little") + b"NU\x05")
                         + _BOMB + b".",
                         "FRAME at offset 12 starts inside the frame that ends at offset 24"),
}


class _Restricted(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> object:
        return tokenwire.unpickle.find_class(module, name)


@pytest.mark.parametrize("name", list(FRAME_CROSSINGS))
def test_a_pickle_that_crosses_a_frame_is_refused(name: str) -> None:
    """The check parses what a file-reading unpickler parses: an opcode that runs past its
    frame's end, or a frame inside a frame, is refused before anything is loaded."""
    data, message = FRAME_CROSSINGS[name]
    with pytest.raises(pickle.UnpicklingError, match=re.escape(message)):
        check_pickle(data)
    from tokenwire.transport import loads_oob

    def load() -> None:
        with pytest.raises(pickle.UnpicklingError, match=re.escape(message)):
            loads_oob([data], find_class=tokenwire.unpickle.find_class)

    assert traced_peak(load)[1] < 256 * 1024


def test_the_frame_crossing_hides_a_memo_bomb_from_a_stream_walk() -> None:
    """What the refusal stops: unchecked, a restricted unpickler that reads past a frame's end
    (older CPython releases) reading the 26 bytes from a file allocates the 256 MiB memo the
    hidden LONG_BINPUT asks for (traced), while pickle.loads of the same bytes reads them as one
    stream and stops without it. Newer ones refuse both pickles themselves."""
    data = FRAME_CROSSINGS["argument"][0]
    assert len(data) == 26
    nested = FRAME_CROSSINGS["frame in a frame"][0]
    if _unpickler_keeps_to_frames():
        # This unpickler refuses both itself, before the LONG_BINPUT.
        for bomb, message in ((data, "pickle exhausted before end of frame"),
                              (nested, "beginning of a new frame before end of current frame")):
            def load(bomb: bytes = bomb, message: str = message) -> None:
                with pytest.raises(pickle.UnpicklingError, match=message):
                    _Restricted(io.BytesIO(bomb)).load()

            assert traced_peak(load)[1] < 256 * 1024
        return
    loaded, peak = traced_peak(lambda: _Restricted(io.BytesIO(data)).load())
    assert loaded == "123U\x05" and peak >= 128 * 2**20
    assert pickle.loads(data) == "r\0\0\0\1"          # the stream walk's reading
    assert traced_peak(lambda: _Restricted(io.BytesIO(nested)).load())[1] >= 128 * 2**20


def test_a_frame_longer_than_the_pickle_is_refused() -> None:
    """A FRAME is an allocation too when the unpickler reads a file with peek()
    (io.BufferedReader, socket.makefile("rb")): it reads the frame with read(length), which
    allocates `length` bytes first. 13 bytes made it allocate 256 MiB; checked, refused."""
    data = b"\x80\x04\x95" + (256 << 20).to_bytes(8, "little") + b"N."
    with pytest.raises(pickle.UnpicklingError,
                       match="FRAME at offset 2 declares 268435456 bytes, 2 follow it"):
        check_pickle(data)

    def unchecked() -> None:
        with pytest.raises(pickle.UnpicklingError, match="truncated"):
            _Restricted(io.BufferedReader(io.BytesIO(data))).load()

    peak = traced_peak(unchecked)[1]
    if _unpickler_reads_a_frame_as_it_comes():
        assert peak < 16 << 20
    else:
        assert peak >= 256 << 20


def test_a_binstring_count_is_unsigned_as_the_unpickler_reads_it() -> None:
    """BINSTRING's 4-byte count is unsigned in CPython's unpickler: a count of 2**31 or more is
    a count like any other (only LONG4's is signed), checked against the bytes that follow."""
    with pytest.raises(pickle.UnpicklingError,
                       match="BINSTRING at offset 2 declares 2147483648 bytes, 2 follow it"):
        check_pickle(b"\x80\x02T" + (2**31).to_bytes(4, "little") + b"x.")
    check_pickle(b"\x80\x02\x8b" + (2**31).to_bytes(4, "little") + b"x.")   # LONG4: negative


def test_what_the_pickler_writes_around_frames_passes() -> None:
    """Frames as the pickler writes them: several frames, large arguments between them
    (written outside any frame), memo puts and gets across them; and a text PUT with the
    "\\r\\n" line end a protocol-0 pickle may carry."""
    big = [b"x" * 200_000, list(range(50_000)), "s" * 100_000, bytearray(70_000)]
    for protocol in (4, 5):
        data = pickle.dumps([big, big[1], {"k": big[2]}], protocol=protocol)
        assert data.count(b"\x95") >= 2
        check_pickle(data)
        assert pickle.Unpickler(io.BytesIO(data)).load()[0][1] == big[1]
    check_pickle(b"Np0\r\n.")
    assert pickle.loads(b"(Np0\r\ng0\r\nl.") == [None, None]


_PICKLABLE = st.recursive(
    st.none() | st.booleans() | st.integers() | st.integers(min_value=2**64, max_value=2**300)
    | st.floats(allow_nan=False) | st.text(max_size=300) | st.binary(max_size=300)
    | st.builds(bytearray, st.binary(max_size=300))
    | st.frozensets(st.integers(), max_size=8) | st.sets(st.text(max_size=4)),
    # every branch of the extension uses `inner` (hypothesis warns of one that cannot recurse)
    lambda inner: (st.lists(inner, max_size=8) | st.tuples(inner, inner)
                   | st.dictionaries(st.text(max_size=8), inner, max_size=8)),
    max_leaves=30)


@given(obj=_PICKLABLE, protocol=st.integers(0, pickle.HIGHEST_PROTOCOL), shared=st.booleans())
def test_every_pickle_the_pickler_writes_passes_the_check(obj: object, protocol: int,
                                                         shared: bool) -> None:
    if shared:                                # memo puts and gets: one object named twice
        obj = [obj, obj, GenerationRequest([1, 2, 3]), tokenwire.as_tokens([5, 6])]
    data = pickle.dumps(obj, protocol=protocol)
    check_pickle(data)
    check_pickle(pickletools.optimize(data))       # memo puts renumbered from 0, unused ones gone


# --------------------------------------------------------------------------------------------
# buffers written by another thread while a call reads them without the GIL


class Flipper:
    """A thread that keeps overwriting `dest` with each of `patterns` in turn. np.copyto releases
    the GIL while it copies, so the writes really overlap a tokenwire call that runs without it.
    `ran_during(fn)` calls fn and says whether the thread wrote at least once while fn ran.

    Patterns of another dtype (float64) make numpy store each id with one store through its cast
    loop; a same-dtype copy is a memmove, which may store an id a byte at a time (it does under
    ASan), so that the source itself briefly holds a mix of two values."""

    def __init__(self, dest: np.ndarray, *patterns: np.ndarray) -> None:
        self.dest, self.patterns = dest, patterns
        self.writes = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            for p in self.patterns:
                np.copyto(self.dest, p, casting="unsafe")
                self.writes += 1

    def __enter__(self) -> "Flipper":
        self.thread.start()
        while not self.writes:
            pass
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()

    def ran_during(self, fn):  # type: ignore[no-untyped-def]
        before = self.writes
        out = fn()
        return out, self.writes != before

    def calls(self, fn, *, want: int = 20, seconds: float = 120.0):  # type: ignore[no-untyped-def]
        """Call fn until the writer has run during `want` calls, for at most `seconds` (on a busy
        machine the threads overlap less often); yields each result. `self.overlapped` counts
        the calls the writer ran during -- the caller asserts it is large enough."""
        self.overlapped = 0
        end = time.monotonic() + seconds
        while self.overlapped < want and time.monotonic() < end:
            out, ran = self.ran_during(fn)
            self.overlapped += ran
            yield out


@pytest.fixture
def gil_always_released():  # type: ignore[no-untyped-def]
    previous = tokenwire._core.gil_release_threshold(0)
    try:
        yield
    finally:
        tokenwire._core.gil_release_threshold(previous)


def _call(fn):  # type: ignore[no-untyped-def]
    try:
        return fn()
    except (OverflowError, ValueError) as e:             # WireFormatError is a ValueError
        return e


def test_as_tokens_race_returns_only_checked_values(gil_always_released: None) -> None:
    bad = 2**32 + 7                                      # would truncate to 7, never in the source
    n = 200_000
    arr = np.ones(n, dtype=np.int64)
    tail = arr[-1000:]        # read last by each pass: the writer flips it between the passes
    with Flipper(tail, np.full(1000, float(bad)), np.ones(1000)) as writer:
        for out in writer.calls(lambda: _call(lambda: tokenwire.as_tokens(arr))):
            if isinstance(out, OverflowError):
                assert f" is {bad}, outside int32" in str(out), out
            else:
                assert set(np.unique(np.asarray(out)).tolist()) == {1}
    assert writer.overlapped >= 10, f"the writer ran during only {writer.overlapped} calls"


@pytest.mark.parametrize("codec", ["auto", "packed", "u16", "zstd", "pfor"])
def test_encode_race_frames_hold_only_written_values(codec: str, gil_always_released: None) -> None:
    if codec == "zstd":
        pytest.importorskip("zstandard")
    n = 200_000
    arr = np.ones(n, dtype=np.int32)
    values = (1, 6, 70_000)
    with Flipper(arr[-1000:], *[np.full(1000, float(v)) for v in values]) as writer:
        for out in writer.calls(lambda: _call(lambda: tokenwire.encode(arr, codec=codec))):
            if isinstance(out, Exception):
                assert codec == "u16" and "70000" in str(out), out
                continue
            ids = set(np.unique(np.asarray(tokenwire.decode(out))).tolist())
            assert ids <= set(values), ids
    assert writer.overlapped >= 10, f"the writer ran during only {writer.overlapped} calls"


def test_decode_many_race_never_reads_past_the_payload(gil_always_released: None) -> None:
    frame = tokenwire.encode_many([np.arange(2_000_000, dtype=np.int32), [7]], codec="raw")
    ba = bytearray(frame)
    # The writer rewrites the count table and the first 256 KB of ids after it (unchanged) in one
    # GIL-free copy; only the second count differs between the patterns, and the bad one is in
    # place one copy in eight, so that most calls pass the checks and then see it change.
    region = np.frombuffer(ba, dtype=np.uint8, count=1 << 18, offset=16)
    good = region.copy()
    bad = region.copy()
    bad[4:8] = np.frombuffer(struct.pack("<I", 200_000), dtype=np.uint8)
    # The decoder reads the table once into a checked copy (FrameLayout.counts): a frame that
    # read the bad table is refused by the size check, and one that passed is never re-read.
    outcomes = {"ok": 0, "refused": 0}
    with Flipper(region, bad, *[good] * 7) as writer:
        for out in writer.calls(lambda: _call(lambda: tokenwire.decode_many(ba))):
            if isinstance(out, WireFormatError):
                assert str(out).startswith("truncated: payload needs 8800000 bytes"), out
                outcomes["refused"] += 1
            else:
                assert [len(v) for v in out] == [2_000_000, 1]    # never a 200,000-id read
                assert out[1].tolist() == [7]
                outcomes["ok"] += 1
    assert writer.overlapped >= 10, f"the writer ran during only {writer.overlapped} calls"
    print(outcomes)


# --------------------------------------------------------------------------------------------
# failing allocations


def test_zero_copy_decode_releases_its_buffer_when_allocation_fails() -> None:
    """A zero-copy decode (decode, decode_many) hands the input's buffer to the vectors it
    makes; when any allocation after the buffer is acquired fails, the buffer is released all
    the same. Every allocation in turn is made to fail (_testcapi.set_nomemory) and the input's
    reference count must come back to where it started."""
    pytest.importorskip("_testcapi")
    code = """
        import sys, _testcapi, tokenwire
        frame = tokenwire.encode_many([[1, 2, 3], [4, 5]], codec="raw")
        single = tokenwire.encode([1, 2, 3], codec="raw")
        for fn, data in ((tokenwire.decode_many, frame), (tokenwire.decode, single)):
            fn(data)
            base = sys.getrefcount(data)
            failures = 0
            for start in range(0, 12):
                _testcapi.set_nomemory(start, start + 1)
                try:
                    out = fn(data)
                except MemoryError:
                    failures += 1
                finally:
                    _testcapi.remove_mem_hooks()
                out = None
                assert sys.getrefcount(data) == base, (
                    fn.__name__, start, sys.getrefcount(data) - base)
            assert failures >= 2, (fn.__name__, failures)
        print("ok", flush=True)
        # Free-threaded CPython 3.13.5 can hang in finalization after set_nomemory (the same
        # loop over bytes() and list() does, without tokenwire): the checks are done, so leave.
        import os
        os._exit(0)
    """
    r = run_python(code)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr


# --------------------------------------------------------------------------------------------
# values a message cannot simply print: an int past Python's int-to-text limit (4300 digits,
# sys.set_int_max_str_digits), a repr that raises, a repr of a megabyte, an __index__ that
# raises. Building the message must never fail: the error is the documented one, and its
# message stays short.


class _ReprRaises:
    def __repr__(self) -> str:
        raise RuntimeError("repr refused")


class _ReprHuge:
    def __repr__(self) -> str:
        return "<" + "x" * 10**6 + ">"


class _ReprNotText:
    def __repr__(self) -> str:
        return 5  # type: ignore[return-value]

_UNPRINTABLE = {"10**5000": 10**5000, "-10**5000": -(10**5000), "repr raises": _ReprRaises(),
                "repr of 1 MB": _ReprHuge(), "repr not text": _ReprNotText()}


def _recv_pyobj_oob(prefix: object) -> object:
    from tokenwire.transport import recv_pyobj_oob
    # the counts are checked before the socket is touched
    return recv_pyobj_oob(None, prefix=prefix)  # type: ignore[arg-type]


def _decoder_recv(prefix: object) -> object:
    msgspec_mod = pytest.importorskip("tokenwire.msgspec")
    return msgspec_mod.Decoder().recv(None, prefix=prefix)  # type: ignore[arg-type]


def _negative(v: object) -> object:
    return -abs(v) if isinstance(v, int) else v


def _hooks(**kw: object) -> object:
    return pytest.importorskip("tokenwire.msgspec").Hooks(**kw)

_QUOTING_CALLS = {
    "TokenVector.index": (lambda v: tokenwire.TokenVector([1]).index(v), ValueError),
    "encode codec": (lambda v: tokenwire.encode([1], codec=v), ValueError),
    "check_codec": (lambda v: tokenwire._core.check_codec(v), ValueError),
    "from_base64 format": (lambda v: tokenwire.from_base64("AAAA", format=v), ValueError),
    "token_fields": (lambda v: tokenwire.token_fields(v), TypeError),
    "Hooks ext_code": (lambda v: _hooks(ext_code=v), ValueError),
    # counts: a huge positive one is valid, a huge negative one is not
    "Hooks threshold": (lambda v: _hooks(threshold=_negative(v)), ValueError),
    "Decoder.recv prefix": (lambda v: _decoder_recv(_negative(v)), ValueError),
    "recv_pyobj_oob prefix": (lambda v: _recv_pyobj_oob(_negative(v)), ValueError),
    "state key": (lambda v: tokenwire.GenerationRequest.__new__(tokenwire.GenerationRequest)
                  .__setstate__({"__tokenwire__": 1, v: 1}), WireFormatError),
    "state version": (lambda v: tokenwire.GenerationRequest.__new__(tokenwire.GenerationRequest)
                      .__setstate__({"__tokenwire__": v}), WireFormatError),
}


@pytest.mark.parametrize("value", list(_UNPRINTABLE.values()), ids=list(_UNPRINTABLE))
@pytest.mark.parametrize("call", list(_QUOTING_CALLS), ids=list(_QUOTING_CALLS))
def test_messages_never_fail_while_being_built(call: str, value: object) -> None:
    fn, error = _QUOTING_CALLS[call]
    with pytest.raises(error) as info:
        fn(value)
    message = str(info.value)
    assert len(message) < 300, message[:300]
    if isinstance(value, int):
        assert "int of 16610 bits" in message, message
    if isinstance(value, (_ReprRaises, _ReprNotText)):
        assert f"<{type(value).__name__} object: " in message, message


@pytest.mark.parametrize("value", [v for v in _UNPRINTABLE.values() if isinstance(v, int)],
                         ids=[k for k, v in _UNPRINTABLE.items() if isinstance(v, int)])
def test_ids_too_long_to_print_raise_the_documented_overflow_everywhere(value: int) -> None:
    calls = [lambda: tokenwire.as_tokens([1, value]), lambda: tokenwire.TokenVector([value]),
             lambda: tokenwire.encode([value]), lambda: tokenwire.encode_many([[1], [value]]),
             lambda: tokenwire.to_base64([value]),
             lambda: tokenwire.as_tokens(range(value, value + 1)),
             lambda: tokenwire.as_tokens(x for x in [1, value])]
    for call in calls:
        with pytest.raises(tokenwire.errors.TokenIdOverflowError, match="int of 16610 bits"):
            call()


def test_a_value_whose_type_has_no_name_is_still_described() -> None:
    from tokenwire.errors import _describe

    class BadName(type):
        @property
        def __name__(cls) -> str:                     # type: ignore[override]
            raise RuntimeError("no name")

    class Nameless(metaclass=BadName):
        def __repr__(self) -> str:
            raise RuntimeError("repr refused")

    assert _describe(Nameless()) == "<? object: RuntimeError from its repr()>"
    assert _describe("x" * 100, limit=10) == "'xx...xx'"
    assert _describe(-(2**128)) == "a negative int of 129 bits"
    assert _describe(2**128 - 1) == str(2**128 - 1)
    assert _describe(True) == "True"


def test_type_error_inside_index_is_chained_with_the_index() -> None:
    class Broken:
        def __index__(self) -> int:
            raise TypeError("no index for you")

    with pytest.raises(TypeError, match=r"token id at index 2: Broken.__index__ raised "
                                        r"TypeError: no index for you") as info:
        tokenwire.as_tokens([1, 2, Broken()])
    assert isinstance(info.value.__cause__, TypeError)
    assert str(info.value.__cause__) == "no index for you"
    with pytest.raises(TypeError, match="token id at index 1 must be an int, got float"):
        tokenwire.as_tokens([1, 1.5])
