# The wire codec: encode / decode / encode_many / decode_many (frame_info: _inspect.pxi).
#
# Included by _core.pyx (one extension module, like msgpack's _cmsgpack.pyx), so it
# sees TokenVector's fields and the tv_* helpers directly. The byte-level format is specified in
# docs/wire-format.md; keep the two in step. The C that both this file and the C++ header use
# (include/tokenwire/: frame.h's checks, payload.h's codec kernels, encode.h's frame writer) is
# cimported through _frame.pxd. Layout of this file:
#   * constants and the parsed-frame struct;
#   * _parse_header / _check_frame: every structural check of an untrusted frame, before
#     anything is allocated;
#   * _zstd.pxi, included: codec="zstd" (decompression of a checked payload, the writer);
#   * decoding, encoding: the public functions.

from tokenwire._bitpack cimport twbp_copy_or_all, twbp_have_avx2, twbp_init
from tokenwire._frame cimport (
    TW_CHECKSUM_MISMATCH,
    TW_CODEC_PFOR as CODEC_PFOR,
    TW_CODEC_RAW as CODEC_RAW,
    TW_FLAG_CHECKSUM as FLAG_CHECKSUM,
    TW_FLAG_MULTI as FLAG_MULTI,
    TW_FLAG_ZSTD as FLAG_ZSTD,
    TW_MAGIC,
    TW_MAGIC_SIZE,
    TW_MSG_SIZE,
    TW_NCODECS,
    TW_REQUEST_AUTO as REQUEST_AUTO,
    TW_REQUEST_ZSTD as REQUEST_ZSTD,
    TW_WIRE_VERSION as WIRE_VERSION,
    tw_check_frame,
    tw_codec_misfit,
    tw_codecs,
    tw_decode_pfor,
    tw_frame_plan,
    tw_layout,
    tw_parse_prefix,
    tw_parse_rest,
    tw_plan_frame,
    tw_read_payload,
    tw_seq,
    tw_seqs_or,
    tw_write_frame,
    twpf_init,
)
from tokenwire._crc32c cimport tw_crc32c, tw_crc32c_portable, twcrc_have_hw, twcrc_init
from tokenwire._byteorder cimport load_le32


twcrc_init()
twbp_init()
twpf_init()

# --------------------------------------------------------------------------------------------
# Format constants (docs/wire-format.md)

# The format's sizes, flags and limits live in include/tokenwire/frame.h, the requests that are
# not wire codecs (REQUEST_AUTO, REQUEST_ZSTD) in encode.h (cimported above).

#: The 4 magic bytes every frame starts with ("TWIR", "tokenwire"; frame.h's TW_MAGIC).
MAGIC = PyBytes_FromStringAndSize(TW_MAGIC, TW_MAGIC_SIZE)
from collections import namedtuple as _namedtuple

#: One record of the codec table (include/tokenwire/frame.h's tw_codecs): the codec's name, its
#: wire id (the header's codec byte), the widths its frames may declare (0..0: pfor, whose
#: payload size is in the frame), the ids it holds, and that range as its messages print it.
CodecSpec = _namedtuple("CodecSpec", ["name", "wire_id", "min_width", "max_width", "min_id",
                                      "max_id", "id_range"])
#: The codec table itself, one CodecSpec per wire codec in wire-id order.
CODEC_TABLE = tuple([
    CodecSpec((<bytes>tw_codecs[_c].name).decode("ascii"), _c, tw_codecs[_c].min_width,
              tw_codecs[_c].max_width, tw_codecs[_c].min_id, tw_codecs[_c].max_id,
              (<bytes>tw_codecs[_c].id_range).decode("ascii"))
    for _c in range(TW_NCODECS)])
#: Wire codec names by id, read from the codec table.
CODEC_NAMES = tuple([_spec.name for _spec in CODEC_TABLE])
#: Every name `encode`'s `codec=` takes: "auto", the wire codecs, "zstd" (see `check_codec`).
CODECS = ("auto",) + CODEC_NAMES + ("zstd",)
_EXPECTED_CODECS = (", ".join([repr(c) for c in CODECS[:len(CODECS) - 1]])
                    + f" or {CODECS[len(CODECS) - 1]!r}")

cdef extern from "Python.h":
    # A new bytes object as a raw reference, and its shrinking in place (a pfor frame is
    # allocated at the most it can take and shrunk to what the payload took).
    PyObject* _tw_bytes_new "PyBytes_FromStringAndSize"(const char* v, Py_ssize_t n) except NULL
    int _PyBytes_Resize(PyObject** frame, Py_ssize_t size) except -1

# Every empty sequence decode_many returns: an empty vector is immutable, so one object serves
# all of them and a frame of empty sequences costs one list slot (8 bytes) per 4-byte count.
cdef TokenVector _EMPTY_VECTOR = TokenVector.__new__(TokenVector)


# What a frame's header says (frame.h's tw_layout). Its count table is where nothing can change
# it after it is checked: in the frame itself when the frame is immutable memory
# (`is_immutable_source`), otherwise in a copy read once from the frame (`counts_copy`, ours,
# freed by _layout_free). decode_many and frame_info read the counts only from there, so a writer
# racing with the decoder (a mutable source, the GIL released) cannot make them disagree with the
# total checked. (No copy for bytes keeps decode_many's allocation bound, docs/wire-format.md.)
ctypedef tw_layout FrameLayout


# --------------------------------------------------------------------------------------------
# Parsing (every check of an untrusted frame; nothing is allocated before it passes)

cdef inline str _text(const char* msg):
    return (<bytes>msg).decode("ascii")


cdef int _parse_header(const uint8_t* buf, Py_ssize_t n, FrameLayout* L, bint stable) except -1:
    """Header, count table and (zstd) length prefix: everything `frame_info` needs (the checks
    and their messages: frame.h, shared with wire.hpp). Does not require the payload to be
    present. `stable`: `buf` is immutable memory, so the count table is used in place; else it
    is copied once, between the two steps, and only the copy is read."""
    cdef char msg[TW_MSG_SIZE]
    if tw_parse_prefix(buf, <size_t>n, L, msg, TW_MSG_SIZE) != 0:
        raise WireFormatError(_text(msg))
    if L.counts != NULL and L.nseq and not stable:
        # The table fits in the frame (checked): the copy is at most n bytes.
        L.counts_copy = <uint8_t*>PyMem_Malloc(<size_t>L.nseq * 4)
        if L.counts_copy == NULL:
            raise MemoryError(f"cannot copy a count table of {L.nseq} entries")
        memcpy(L.counts_copy, L.counts, <size_t>L.nseq * 4)      # the one read of the table
        L.counts = L.counts_copy
    if tw_parse_rest(buf, <size_t>n, L, msg, TW_MSG_SIZE) != 0:
        raise WireFormatError(_text(msg))
    return 0


cdef inline void _layout_free(FrameLayout* L) noexcept:
    PyMem_Free(L.counts_copy)
    L.counts_copy = NULL
    L.counts = NULL


cdef int _check_frame(const uint8_t* buf, Py_ssize_t n, FrameLayout* L, bint stable) except -1:
    """All structural checks of a whole frame, and the checksum (without the GIL from
    NOGIL_BYTES: the checksum reads the whole frame)."""
    cdef char msg[TW_MSG_SIZE]
    cdef int r
    _parse_header(buf, n, L, stable)
    if _release_gil(n):
        with nogil:
            r = tw_check_frame(buf, <size_t>n, L, msg, TW_MSG_SIZE)
    else:
        r = tw_check_frame(buf, <size_t>n, L, msg, TW_MSG_SIZE)
    if r == TW_CHECKSUM_MISMATCH:
        raise ChecksumError(_text(msg))
    if r != 0:
        raise WireFormatError(_text(msg))
    return 0


# --------------------------------------------------------------------------------------------
# zstd (decompression of a checked frame's payload, the codec="zstd" writer)

include "_zstd.pxi"


# --------------------------------------------------------------------------------------------
# Decoding

cdef TokenVector _decode_one(object source, const uint8_t* payload, FrameLayout* L,
                             uint64_t start, Py_ssize_t n, bint zero_copy):
    """Sequence [start, start + n) of a checked payload. With zero_copy (raw codec, immutable
    source on a little-endian host, any address) the vector views `source` instead of copying."""
    cdef TokenVector tv
    cdef Py_buffer view
    if n == 0:
        return _EMPTY_VECTOR
    if zero_copy:
        # A buffer of its own per vector: each vector releases what it holds.
        PyObject_GetBuffer(source, &view, PyBUF_SIMPLE)
        return tv_take_view(&view, <const int32_t*>(payload + 4 * start), n)
    tv = tv_alloc(n)
    if _release_gil(n * 4):
        with nogil:
            tw_read_payload(payload, L.payload_len, L.codec, L.width, start, <size_t>n, tv._data)
    else:
        tw_read_payload(payload, L.payload_len, L.codec, L.width, start, <size_t>n, tv._data)
    return tv


cdef int _pfor_decode(const uint8_t* buf, FrameLayout* L, int32_t** dst,
                      const size_t* count) except -1:
    """The ids of a checked pfor frame into its parts (frame.h's tw_decode_pfor: the kernel
    checks the payload's rules while it decodes); WireFormatError when it breaks one."""
    cdef char msg[TW_MSG_SIZE]
    cdef int r
    if _release_gil(<Py_ssize_t>L.total * 4):
        with nogil:
            r = tw_decode_pfor(buf, L, dst, count, msg, TW_MSG_SIZE)
    else:
        r = tw_decode_pfor(buf, L, dst, count, msg, TW_MSG_SIZE)
    if r != 0:
        raise WireFormatError(_text(msg))
    return 0


cdef TokenVector _pfor_ids(const uint8_t* buf, FrameLayout* L):
    """Every id of a checked pfor frame, as one vector (L.total ids): the output is allocated
    only now, after the frame checks bounded the count by the payload's size (at most 128 ids
    per byte)."""
    cdef size_t n = <size_t>L.total
    if n == 0:
        return _EMPTY_VECTOR
    cdef TokenVector tv = tv_alloc(<Py_ssize_t>n)
    cdef int32_t* dst = tv._data
    _pfor_decode(buf, L, &dst, &n)
    return tv


cdef list _pfor_sequences(const uint8_t* buf, FrameLayout* L):
    """Every sequence of a checked multi-sequence pfor frame, each decoded straight into its own
    vector (the kernel splits the blocks that run across sequences): the ids take 4·N bytes,
    with no second copy of them. The counts are the checked copy of the table."""
    cdef Py_ssize_t k, nseq = <Py_ssize_t>L.nseq
    cdef list out = [None] * nseq
    cdef TokenVector tv
    cdef int32_t** dst = <int32_t**>PyMem_Malloc(max(nseq, 1) * sizeof(int32_t*))
    cdef size_t* count = <size_t*>PyMem_Malloc(max(nseq, 1) * sizeof(size_t))
    try:
        if dst == NULL or count == NULL:
            raise MemoryError()
        for k in range(nseq):
            count[k] = load_le32(L.counts + 4 * k)
            tv = tv_alloc(<Py_ssize_t>count[k]) if count[k] else _EMPTY_VECTOR
            dst[k] = tv._data
            out[k] = tv
        if L.total:
            _pfor_decode(buf, L, dst, count)
        return out
    finally:
        PyMem_Free(dst)
        PyMem_Free(count)


cdef inline bint _can_view(object source, const uint8_t* payload, FrameLayout* L) except -1:
    # A raw payload is native int32s on a little-endian host: the zero-copy rule of _memory.pxi.
    return L.codec == CODEC_RAW and _can_view_ids(source, payload)


def decode(data, *, vocab_size=None):
    """Decode a single-sequence frame to a TokenVector.

    `data` is any bytes-like object. A raw frame in immutable memory (`bytes`, a memoryview of
    bytes, a pyzmq frame `tokenwire.transport.recv_pyobj_oob` read from a tcp or ipc stream)
    is not copied, at any address: the vector views `data` and keeps it
    alive (its ids are read with unaligned loads; an unaligned view is aligned, once, when its
    buffer is first exported). Mutable memory (a bytearray, even behind a read-only
    memoryview) is copied. With `vocab_size`, every id must lie in [0, vocab_size).

    Raises WireFormatError (a ValueError) saying what is wrong with a malformed frame,
    ChecksumError (a WireFormatError) on a checksum mismatch; a multi-sequence frame is refused
    (read it with decode_many).
    """
    cdef Py_buffer view
    cdef FrameLayout L
    cdef const uint8_t* buf
    cdef const uint8_t* payload
    cdef TokenVector tv
    cdef bint moved = False
    if vocab_size is not None:
        _vocab_limit(vocab_size)      # a bad argument is reported before the data (decode_many too)
    L.counts_copy = NULL
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        buf = <const uint8_t*>view.buf
        _check_frame(buf, view.len, &L, is_immutable_source(data))
        if L.flags & FLAG_MULTI:
            raise WireFormatError(
                f"multi-sequence frame ({L.nseq} sequences): read it with decode_many()"
            )
        if L.codec == CODEC_PFOR:
            tv = _pfor_ids(buf, &L)
        elif L.flags & FLAG_ZSTD:
            plain = _zstd_payload(buf, &L)
            payload = <const uint8_t*>PyBytes_AS_STRING(plain)
            tv = _decode_one(plain, payload, &L, 0, <Py_ssize_t>L.total,
                             _can_view(plain, payload, &L))
        else:
            payload = buf + L.payload_off
            if _can_view(data, payload, &L) and L.total > 0:
                # Hand our buffer to the vector rather than acquiring a second one.
                moved = True        # the buffer now belongs to tv_take_view (even if it raises)
                tv = tv_take_view(&view, <const int32_t*>payload, <Py_ssize_t>L.total)
            else:
                tv = _decode_one(data, payload, &L, 0, <Py_ssize_t>L.total, False)
    finally:
        _layout_free(&L)
        if not moved:
            PyBuffer_Release(&view)
    if vocab_size is not None:
        _check_vocab(tv, vocab_size, WireFormatError)
    return tv


def decode_many(data, *, vocab_size=None):
    """Decode a frame to a list of TokenVectors: one per sequence of a multi-sequence frame, a
    one-element list for a single-sequence frame. Same checks and zero-copy rule as `decode`; the
    count table is checked against the input's size before anything is allocated, so a frame
    cannot claim more than it holds."""
    cdef Py_buffer view
    cdef FrameLayout L
    cdef const uint8_t* buf
    cdef const uint8_t* payload
    cdef Py_ssize_t k, n
    cdef uint64_t start = 0
    cdef uint32_t limit = 0
    cdef bint zero_copy
    cdef list out
    cdef TokenVector tv
    if vocab_size is not None:
        limit = _vocab_limit(vocab_size)
    L.counts_copy = NULL
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        buf = <const uint8_t*>view.buf
        _check_frame(buf, view.len, &L, is_immutable_source(data))
        source = data
        if L.codec == CODEC_PFOR:
            out = _pfor_sequences(buf, &L) if L.flags & FLAG_MULTI else [_pfor_ids(buf, &L)]
            if limit:
                for k in range(len(out)):
                    _check_vocab(out[k], vocab_size, WireFormatError, k, limit)
            return out
        elif L.flags & FLAG_ZSTD:
            source = _zstd_payload(buf, &L)
            payload = <const uint8_t*>PyBytes_AS_STRING(source)
        else:
            payload = buf + L.payload_off
        zero_copy = _can_view(source, payload, &L)
        out = [None] * <Py_ssize_t>L.nseq
        for k in range(<Py_ssize_t>L.nseq):
            # The checked copy of the table: its counts add up to L.total by construction.
            n = load_le32(L.counts + 4 * k) if L.flags & FLAG_MULTI else <Py_ssize_t>L.total
            tv = _decode_one(source, payload, &L, start, n, zero_copy)
            start += n
            if limit:
                _check_vocab(tv, vocab_size, WireFormatError, k, limit)
            out[k] = tv
        return out
    finally:
        _layout_free(&L)
        PyBuffer_Release(&view)


# --------------------------------------------------------------------------------------------
# Encoding

cdef int _codec_request(object codec) except -1:
    """The codec `encode` was asked for: a wire codec's id, REQUEST_AUTO or REQUEST_ZSTD."""
    cdef int c
    if codec == "auto":
        return REQUEST_AUTO
    for c in range(TW_NCODECS):
        if codec == CODEC_NAMES[c]:
            return c
    if codec == "zstd":
        if _zstd() is None:
            raise ValueError(
                "codec 'zstd' needs the zstandard package (pip install tokenwire[zstd])"
            )
        return REQUEST_ZSTD
    raise ValueError(f"unknown codec {_describe(codec)} (expected {_EXPECTED_CODECS})")


def check_codec(codec):
    """Return `codec` when `encode` accepts it (one of CODECS); raise the ValueError `encode`
    would raise otherwise: an unknown name (listing the known ones), or "zstd" without the
    zstandard package. For layers that take a codec name now and encode later."""
    _codec_request(codec)
    return codec


cdef object _codec_misfit(int codec, const tw_seq* seqs, Py_ssize_t nseq, bint multi):
    """The error for a forced codec that cannot hold the ids, naming the first that does not
    fit (the rule and the text: encode.h, shared with wire.hpp)."""
    cdef char msg[TW_MSG_SIZE]
    cdef Py_ssize_t k
    for k in range(nseq):
        if tw_codec_misfit(codec, seqs[k].ids, seqs[k].n, k if multi else -1, msg,
                           TW_MSG_SIZE) >= 0:
            return TokenIdError(_text(msg))
    return TokenIdError("codec cannot hold these ids")      # a writer changed them meanwhile


cdef bytes _encode_frame(const tw_seq* seqs, Py_ssize_t nseq, bint multi, int request,
                         bint checksum, int64_t known_or=-1):
    """One frame of the ids of `seqs` (MULTI when `multi`): planned and written by encode.h, the
    writer the C++ header uses too, into a bytes object of the planned size. `known_or`, when
    >= 0, is the ids' bitwise OR (computed by the caller while it copied them)."""
    cdef uint64_t total = 0
    cdef uint32_t orv = 0
    cdef Py_ssize_t k
    cdef tw_frame_plan P
    for k in range(nseq):
        total += seqs[k].n
    if known_or >= 0:
        orv = <uint32_t>known_or
    elif request != CODEC_RAW and request != CODEC_PFOR:      # both hold every int32
        if _release_gil(<Py_ssize_t>total * 4):
            with nogil:
                orv = tw_seqs_or(seqs, <size_t>nseq)
        else:
            orv = tw_seqs_or(seqs, <size_t>nseq)
    if tw_plan_frame(&P, request, orv, total, <size_t>nseq, multi, checksum) != 0:
        raise _codec_misfit(request, seqs, nseq, multi)
    if request == REQUEST_ZSTD:
        return _encode_zstd(seqs, nseq, &P, orv)
    if P.codec == CODEC_PFOR:
        return _encode_pfor(seqs, nseq, &P)
    frame = PyBytes_FromStringAndSize(NULL, <Py_ssize_t>P.nbytes)
    cdef uint8_t* out = <uint8_t*>PyBytes_AS_STRING(frame)
    if _release_gil(<Py_ssize_t>P.nbytes):
        with nogil:
            tw_write_frame(out, &P, seqs, <size_t>nseq, NULL)
    else:
        tw_write_frame(out, &P, seqs, <size_t>nseq, NULL)
    return frame


cdef bytes _encode_pfor(const tw_seq* seqs, Py_ssize_t nseq, tw_frame_plan* P):
    """A pfor frame: written into a bytes object of the most it can take (P.nbytes: twpf_bound
    of the ids), which is then shrunk in place to the size tw_write_frame reports."""
    cdef PyObject* raw = _tw_bytes_new(NULL, <Py_ssize_t>P.nbytes)
    cdef uint8_t* out = <uint8_t*>PyBytes_AS_STRING(<object>raw)
    cdef size_t size
    if _release_gil(<Py_ssize_t>P.total * 4):
        with nogil:
            size = tw_write_frame(out, P, seqs, <size_t>nseq, NULL)
    else:
        size = tw_write_frame(out, P, seqs, <size_t>nseq, NULL)
    _PyBytes_Resize(&raw, <Py_ssize_t>size)       # on failure raw is released and NULL
    frame = <bytes>raw          # a second reference ...
    Py_DECREF(frame)            # ... and the raw one given up: `frame` owns the object
    return frame


def encode(tokens, *, codec="auto", bint checksum=False):
    """Encode token ids (anything `as_tokens` accepts) as one wire frame (`bytes`).

    codec: "auto" (the smallest of raw / u16 / packed for these ids, the faster one on a tie),
    "raw" (int32), "u16" (ids in [0, 65536)), "packed" (bit-packed at the width of the largest
    id; ids >= 0), "pfor" (a bit width per block of 128 ids, the few wider ids patched; any
    int32; its size and speed against packed: docs/benchmarks.md, `python -m bench codec --ids`),
    or "zstd" (the ids as u16, or raw when an id does not fit, zstd-compressed at level 1;
    auto's frame when that is not smaller; needs the `zstandard` package).
    checksum: append a CRC-32C of the frame.

    Raises TokenIdError (a ValueError) when a forced codec cannot hold an id (naming it), and
    what `as_tokens` raises for unconvertible input (TokenIdOverflowError for an id outside
    int32).
    """
    cdef int request = _codec_request(codec)
    cdef Py_buffer view
    cdef bint have_view = False
    cdef tw_seq seq
    cdef Py_ssize_t n, stride
    cdef uint32_t orv
    cdef TokenVector tv
    cdef int ids = IDS_NOT_BUFFER
    if type(tokens) is not TokenVector:
        ids = _acquire_ids(tokens, &view, &n, &stride)
    if ids == IDS_INT32:
        # A native int32 buffer is encoded where it lies (no intermediate copy).
        seq.ids = <const int32_t*>view.buf
        seq.n = <size_t>n
        if request == CODEC_RAW or request == CODEC_PFOR or is_immutable_source(tokens):
            have_view = True
        else:
            # Memory that may change: the width choice and the packing each read the ids,
            # so a writer between them could make a frame hold ids never written. Copy once
            # (one read of each id, OR-ed on the way), then check and code the copy. Raw
            # reads the ids once anyway (one memcpy into the frame), and so does pfor (its
            # kernel copies each block of 128 ids once and codes that copy).
            try:
                tv = tv_alloc(<Py_ssize_t>seq.n)
                if _release_gil(<Py_ssize_t>seq.n * 4):
                    with nogil:
                        orv = twbp_copy_or_all(tv._data, seq.ids, seq.n)
                else:
                    orv = twbp_copy_or_all(tv._data, seq.ids, seq.n)
            finally:
                PyBuffer_Release(&view)
            seq.ids = tv._data
            return _encode_frame(&seq, 1, False, request, checksum, orv)
    else:
        if ids != IDS_NOT_BUFFER:
            PyBuffer_Release(&view)
        tv = tokens if type(tokens) is TokenVector else _convert(tokens)
        seq.ids = tv._data
        seq.n = <size_t>tv._len
    try:
        return _encode_frame(&seq, 1, False, request, checksum)
    finally:
        if have_view:
            PyBuffer_Release(&view)


cdef TokenVector _convert_sequence(object v, Py_ssize_t k):
    """Sequence `k` of encode_many as a TokenVector; a conversion error names the sequence
    ("sequence K: " before as_tokens' message), as the encoder's own errors do."""
    if type(v) is TokenVector:
        return v
    try:
        return _convert(v)
    except (TokenIdError, TokenIdOverflowError, TokenIdTypeError) as e:
        raise type(e)(f"sequence {k}: {e}") from None


def encode_many(seqs, *, codec="auto", bint checksum=False):
    """Encode several sequences of token ids (each anything `as_tokens` accepts) as one frame:
    one codec and width for all of them, a table of counts, the ids back to back. Read it with
    `decode_many`. Errors name the sequence ("sequence K: ..."); TokenIdOverflowError for a
    sequence of 2**32 ids or more."""
    cdef int request = _codec_request(codec)
    cdef list vectors = [_convert_sequence(v, k) for k, v in enumerate(seqs)]
    cdef Py_ssize_t nseq = len(vectors), k
    cdef tw_seq* table = <tw_seq*>PyMem_Malloc(<size_t>max(nseq, 1) * sizeof(tw_seq))
    cdef TokenVector tv
    if table == NULL:
        raise MemoryError(f"cannot allocate a table of {nseq} sequences")
    try:
        for k in range(nseq):
            tv = vectors[k]
            if tv._len > 0xFFFFFFFF:
                raise TokenIdOverflowError(
                    f"sequence {k} has {tv._len} ids; "
                    f"a multi-sequence frame holds < 2**32 per sequence"
                )
            table[k].ids = tv._data
            table[k].n = <size_t>tv._len
        return _encode_frame(table, nseq, True, request, checksum)
    finally:
        PyMem_Free(table)
