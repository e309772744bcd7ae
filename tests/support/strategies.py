"""Hypothesis strategies shared by every test module (one place, so edges stay consistent)."""

from __future__ import annotations

import random
import re

import numpy as np
from hypothesis import strategies as st

import tokenwire
import tokenwire._core
from support.frame_damage import DrawChooser, RandomChooser, damage

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1

#: Boundary values every codec and conversion must survive.
BOUNDARY_IDS = [0, 1, 2, 255, 256, 2**15 - 1, 2**15, 2**16 - 1, 2**16, 2**31 - 1, -1, -(2**31)]

#: Realistic vocabulary sizes: Llama 2, GPT-2, Llama 3, Qwen2/3, Gemma 3.
VOCAB_SIZES = [32_000, 50_257, 128_256, 151_936, 262_144]

int32s = st.integers(INT32_MIN, INT32_MAX)
token_ids = st.one_of(st.integers(0, 262_143), st.sampled_from(BOUNDARY_IDS), int32s)
token_lists = st.lists(token_ids, max_size=300)
#: Ids outside int32 (either side), for overflow paths.
out_of_int32 = st.one_of(st.integers(INT32_MAX + 1, 2**70), st.integers(-(2**70), INT32_MIN - 1))

#: Every integer dtype as_tokens converts, in both byte orders where it matters.
INT_DTYPES = [
    np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64,
    ">i2", ">u2", ">i4", ">u4", ">i8", ">u8", "<i4", "<i8",
]


@st.composite
def int_arrays(draw: st.DrawFn, max_size: int = 200) -> np.ndarray:
    """An integer ndarray of any dtype whose values fit both the dtype and int32, possibly
    strided (step) or reversed."""
    dtype = np.dtype(draw(st.sampled_from(INT_DTYPES)))
    info = np.iinfo(dtype)
    lo, hi = max(info.min, INT32_MIN), min(info.max, INT32_MAX)
    values = draw(st.lists(st.integers(lo, hi), max_size=max_size))
    step = draw(st.sampled_from([1, 1, 2, 3, -1]))
    if step == 1:
        return np.array(values, dtype=dtype)
    if step == -1:  # a reversed (negative-stride) view showing `values` in order
        return np.array(values[::-1], dtype=dtype)[::-1]
    wide = np.zeros(len(values) * step, dtype=dtype)
    wide[::step] = values
    return wide[::step]


# --------------------------------------------------------------------------------------------
# Request layer (tests/test_fields.py, test_state.py, test_adopt.py, test_request.py,
# test_transports.py)

#: How a caller may hand token ids to a TokenIds field.
ID_SOURCES = ["list", "tuple", "ndarray_int32", "ndarray_int64", "token_vector"]


def as_source(ids: list[int], kind: str) -> object:
    """`ids` in the form named by `kind` (one of ID_SOURCES)."""
    import tokenwire

    if kind == "list":
        return list(ids)
    if kind == "tuple":
        return tuple(ids)
    if kind == "ndarray_int32":
        return np.array(ids, dtype=np.int32)
    if kind == "ndarray_int64":
        return np.array(ids, dtype=np.int64)
    if kind == "token_vector":
        return tokenwire.TokenVector(ids)
    raise ValueError(kind)


#: One in-place change a consumer might make to a materialized list, as (operation, args).
list_mutations = st.one_of(
    st.tuples(st.just("append"), token_ids),
    st.tuples(st.just("extend"), st.lists(token_ids, max_size=5)),
    st.tuples(st.just("insert"), st.integers(-5, 50), token_ids),
    st.tuples(st.just("setitem"), st.integers(0, 50), token_ids),
    st.tuples(st.just("setslice"), st.integers(0, 50), st.integers(0, 50),
              st.lists(token_ids, max_size=5)),
    st.tuples(st.just("delslice"), st.integers(0, 50), st.integers(0, 50)),
    st.tuples(st.just("pop")),
    st.tuples(st.just("sort")),
    st.tuples(st.just("reverse")),
    st.tuples(st.just("clear")),
)


def apply_mutation(ids: list[int], mutation: tuple) -> None:
    """Apply one `list_mutations` example to `ids` in place (indices wrap to the length)."""
    op, *args = mutation
    n = len(ids)
    if op == "append":
        ids.append(args[0])
    elif op == "extend":
        ids.extend(args[0])
    elif op == "insert":
        ids.insert(args[0], args[1])
    elif op == "setitem":
        if n:
            ids[args[0] % n] = args[1]
    elif op == "setslice":
        ids[args[0]:args[1]] = args[2]
    elif op == "delslice":
        del ids[args[0]:args[1]]
    elif op == "pop":
        if n:
            ids.pop()
    elif op == "sort":
        ids.sort()
    elif op == "reverse":
        ids.reverse()
    elif op == "clear":
        ids.clear()
    else:
        raise ValueError(op)


# --------------------------------------------------------------------------------------------
# Wire codec (tests/test_wire.py, fuzz/fuzz_decode.py)

#: Every codec name `encode` accepts, from the one codec table (tokenwire._core.CODECS); "zstd" only
#: where zstandard is installed.
try:
    import zstandard as _zstandard  # noqa: F401
    _HAS_ZSTD = True
except ImportError:  # pragma: no cover - the extra is optional
    _HAS_ZSTD = False
CODECS = [c for c in tokenwire._core.CODECS if c != "zstd" or _HAS_ZSTD]

#: Ids a given codec can hold, from the codec table (tokenwire._core.CODEC_TABLE: u16 holds
#: [0, 65536), packed ids >= 0); "auto" and "zstd" hold every int32.
CODEC_RANGES = {
    "auto": (INT32_MIN, INT32_MAX),
    **{spec.name: (spec.min_id, spec.max_id) for spec in tokenwire._core.CODEC_TABLE},
    "zstd": (INT32_MIN, INT32_MAX),
}


@st.composite
def ids_for_codec(draw: st.DrawFn, codec: str, max_size: int = 300) -> list[int]:
    """Token ids `codec` can hold, mixing boundary values, one random width, and repeats (so
    zstd has something to compress)."""
    lo, hi = CODEC_RANGES[codec]
    width = draw(st.integers(1, 31))
    top = min(hi, 2**width - 1)
    boundary = [b for b in BOUNDARY_IDS if lo <= b <= hi]
    elem = st.one_of(st.integers(max(lo, 0), top), st.sampled_from(boundary), st.integers(lo, hi))
    if draw(st.booleans()):
        return draw(st.lists(elem, max_size=max_size))
    base = draw(st.lists(elem, min_size=1, max_size=8))
    return base * draw(st.integers(0, max_size // len(base)))


@st.composite
def frames(draw: st.DrawFn) -> tuple[bytes, list[list[int]], bool]:
    """A valid frame, the sequences in it, and whether it is multi-sequence."""
    import tokenwire

    codec = draw(st.sampled_from(CODECS))
    checksum = draw(st.booleans())
    if draw(st.booleans()):
        seqs = draw(st.lists(ids_for_codec(codec, max_size=60), max_size=5))
        return tokenwire.encode_many(seqs, codec=codec, checksum=checksum), seqs, True
    ids = draw(ids_for_codec(codec))
    return tokenwire.encode(ids, codec=codec, checksum=checksum), [ids], False


@st.composite
def damaged_frames(draw: st.DrawFn) -> bytes:
    """A valid frame after 1-4 edits of tests/support/frame_damage.py (choices drawn, so they shrink)."""
    data, _, _ = draw(frames())
    return damage(data, DrawChooser(draw))


# --------------------------------------------------------------------------------------------
# Decoder rejection branches (tests/test_wire.py, fuzz/fuzz_decode.py)

#: One entry per place the decoder rejects a frame: the start of its WireFormatError message
#: (docs/wire-format.md, "Decoding rules"). A message that starts with none of these is a bug.
WIRE_ERROR_KINDS = [
    "bad magic", "truncated: header", "unsupported version", "unknown codec", "bad width",
    "reserved flag", "truncated: count table", "nonzero padding byte", "truncated: payload",
    "truncated: checksum", "trailing bytes", "checksum mismatch", "nonzero padding bits",
    "truncated: zstd length", "truncated: zstd payload", "zstd payload of", "zstd payload is corrupt",
    "zstd payload is truncated", "zstd payload has", "zstd payload declares",
    "zstd payload regenerates", "multi-sequence", "truncated: pfor length",
    "truncated: pfor payload", "pfor payload of", "pfor payload is corrupt",
    "pfor payload is truncated",
]
#: Rejections no mutation of a valid frame reaches by chance: a vocabulary check needs
#: `vocab_size=`; the others are listed in WIRE_ERROR_KINDS_WITHOUT_FIXTURE.
WIRE_ERROR_KINDS_RARE = [
    "token id at index", "zstd payload decompresses to", "zstd-compressed frame, but",
    # not a frame error: a vocab_size below 1 is a plain ValueError, before the frame is read
    "vocab_size must be positive",
]
#: Rejections that no committed frame can produce, and where each is tested instead. Every other
#: kind has a negative fixture in tests/fixtures/invalid/ (tests/test_wire_fixtures.py checks).
WIRE_ERROR_KINDS_WITHOUT_FIXTURE = {
    # libzstd refuses such a frame itself before its output overruns the declared size
    "zstd payload decompresses to": "tests/test_hostile.py (the output cap, a rewritten frame)",
    # only where the zstandard package (Python) or libzstd (C++) is missing
    "zstd-compressed frame, but": "tests/test_cpp_wire.py (a C++ build without zstd)",
}
ALL_WIRE_ERROR_KINDS = WIRE_ERROR_KINDS + WIRE_ERROR_KINDS_RARE

_SEQUENCE_PREFIX = re.compile(r"^sequence \d+: ")


def wire_error_kind(message: str) -> str:
    """The kind (an ALL_WIRE_ERROR_KINDS entry) a decoder message belongs to, ignoring
    decode_many's "sequence K: " prefix (AssertionError if none)."""
    message = _SEQUENCE_PREFIX.sub("", message)
    for kind in ALL_WIRE_ERROR_KINDS:
        if message.startswith(kind):
            return kind
    raise AssertionError(f"unclassified WireFormatError message: {message!r}")


def damage_frame(rng: random.Random, frame: bytes) -> bytes:
    """A valid frame after 1-4 edits of tests/support/frame_damage.py, chosen by `rng`."""
    return damage(frame, RandomChooser(rng))


# --------------------------------------------------------------------------------------------
# Buffers of every kind (tests/test_buffers_hypothesis.py): hypothesis.extra.numpy arrays of
# any dtype and byte order, 0-d to 3-d, strided and reversed views, as ndarrays or memoryviews.

def _buffer_dtypes() -> st.SearchStrategy[np.dtype]:
    from hypothesis.extra import numpy as npst

    integers = st.one_of(npst.integer_dtypes(endianness="?"),
                         npst.unsigned_integer_dtypes(endianness="?"))
    others = st.one_of(npst.boolean_dtypes(), npst.floating_dtypes(endianness="?"),
                       npst.complex_number_dtypes(endianness="?"))
    # integers are what a caller sends; the others must be refused the same way everywhere
    return st.one_of(integers, integers, integers, others)


def _elements(dtype: np.dtype, narrow: bool) -> st.SearchStrategy | None:
    """Elements for `dtype`: with `narrow`, integers that fit int32 (so 64-bit arrays convert
    rather than almost always overflow), else numpy's default for the dtype."""
    if dtype.kind not in "iu" or not narrow:
        return None
    info = np.iinfo(dtype)
    lo, hi = max(int(info.min), INT32_MIN), min(int(info.max), INT32_MAX)
    return st.one_of(st.integers(lo, hi), st.sampled_from([b for b in BOUNDARY_IDS if lo <= b <= hi]))


@st.composite
def any_buffers(draw: st.DrawFn, max_side: int = 12) -> object:
    """An ndarray or a memoryview of one: any numeric dtype in either byte order, 0-d to 3-d
    (mostly 1-d), possibly a strided or reversed view."""
    from hypothesis.extra import numpy as npst

    dtype = draw(_buffer_dtypes())
    ndim = draw(st.sampled_from([1, 1, 1, 1, 0, 2, 3]))
    shape = draw(npst.array_shapes(min_dims=ndim, max_dims=ndim, min_side=0, max_side=max_side))
    arr = draw(npst.arrays(dtype, shape, elements=_elements(dtype, draw(st.booleans()))))
    if ndim:
        steps = draw(st.lists(st.sampled_from([1, 1, 1, 2, 3, -1, -2]), min_size=ndim,
                              max_size=ndim))
        arr = arr[tuple(slice(None, None, s) for s in steps)]
    return memoryview(arr) if draw(st.integers(0, 3)) == 0 else arr


def as_tokens_reference(buf: object) -> list[int]:
    """What `as_tokens` documents for a buffer, computed with numpy: the ids, or the exception
    class it raises (TypeError: not an integer dtype, bool included, or a memoryview of raw
    bytes -- format 'B', what a wire frame looks like; ValueError: not 1-d; OverflowError: an
    id outside int32)."""
    arr = np.asarray(buf)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"dtype {arr.dtype}")
    if isinstance(buf, memoryview) and buf.format in ("B", "@B", "c"):
        raise TypeError("raw bytes")
    if arr.ndim != 1:
        raise ValueError(f"shape {arr.shape}")
    ids = [int(v) for v in arr]
    for i, v in enumerate(ids):
        if not INT32_MIN <= v <= INT32_MAX:
            raise OverflowError(f"token id at index {i} is {v}")
    return ids


def frombuffer_reference(buf: object) -> list[int]:
    """What `TokenVector.frombuffer` documents: the buffer's bytes read as little-endian int32
    (TypeError when its items are not integers -- floats, bool, complex; ValueError when not
    C-contiguous or not a multiple of 4 bytes)."""
    arr = np.asarray(buf)
    if not arr.flags.c_contiguous:
        raise ValueError("not C-contiguous")
    if arr.dtype.kind not in "iu":
        raise TypeError(f"dtype {arr.dtype}")
    if arr.nbytes % 4:
        raise ValueError(f"{arr.nbytes} bytes")
    return np.frombuffer(arr.tobytes(), dtype="<i4").tolist()
