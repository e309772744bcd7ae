# The wire codec: encode / decode / encode_many / decode_many / frame_info.
#
# Included at the end of _core.pyx (one extension module, like msgpack's _cmsgpack.pyx), so it
# sees TokenVector's fields and the tv_* helpers directly. The byte-level format is specified in
# docs/wire-format.md; keep the two in step. Layout of this file:
#   * constants and the parsed-frame struct;
#   * kernels (nogil, no Python objects): payload writers and readers;
#   * _parse_frame: every structural check of an untrusted frame, before anything is allocated;
#   * the public functions.

from tokenwire._bitpack cimport (
    twbp_copy_or_all,
    twbp_have_avx2,
    twbp_init,
    twbp_narrow16,
    twbp_or_all,
    twbp_pack,
    twbp_pack_finish,
    twbp_packer,
    twbp_unpack,
    twbp_widen16,
)
from tokenwire._frame cimport (
    TW_CHECKSUM_MISMATCH,
    TW_CHECKSUM_SIZE as CHECKSUM_SIZE,
    TW_CODEC_PACKED as CODEC_PACKED,
    TW_CODEC_RAW as CODEC_RAW,
    TW_CODEC_U16 as CODEC_U16,
    TW_FLAG_CHECKSUM as FLAG_CHECKSUM,
    TW_FLAG_MULTI as FLAG_MULTI,
    TW_FLAG_ZSTD as FLAG_ZSTD,
    TW_HEADER_SIZE as HEADER_SIZE,
    TW_MSG_SIZE,
    TW_NCODECS,
    TW_WIRE_VERSION as WIRE_VERSION,
    TW_ZSTD_LENGTH_SIZE as ZSTD_LENGTH_SIZE,
    TW_ZSTD_MAX_EXPANSION as ZSTD_MAX_EXPANSION,
    tw_check_frame,
    tw_check_padding_bits,
    tw_choose_codec,
    tw_codec_misfit,
    tw_codecs,
    tw_layout,
    tw_write_header,
    tw_parse_prefix,
    tw_parse_rest,
    tw_payload_size,
    tw_zstd_frame_size,
)
from tokenwire._crc32c cimport tw_crc32c, tw_crc32c_portable, twcrc_have_hw, twcrc_init
from tokenwire._endian cimport load_le32, load_le64, store_le32, store_le64
from libc.string cimport memset


twcrc_init()
twbp_init()

# --------------------------------------------------------------------------------------------
# Format constants (docs/wire-format.md)

# The format's sizes, flags and limits live in include/tokenwire/frame.h (cimported above).
cdef enum:
    # Requested codecs (encode's `codec=`) that are not wire codecs: the encoder's choices.
    # Wire codecs are requested by their id (the codec table, include/tokenwire/frame.h).
    REQUEST_AUTO = 0x100        # TW_REQUEST_AUTO: tw_choose_codec takes it (and zstd) as auto
    REQUEST_ZSTD = 0x101

#: The 4 magic bytes every frame starts with ("TWIR", "tokenwire").
MAGIC = b"TWIR"
#: Wire codec names by id, read from the codec table (include/tokenwire/frame.h).
CODEC_NAMES = tuple([(<bytes>tw_codecs[_c].name).decode("ascii") for _c in range(TW_NCODECS)])
#: Every name `encode`'s `codec=` takes: "auto", the wire codecs, "zstd" (see `check_codec`).
CODECS = ("auto",) + CODEC_NAMES + ("zstd",)
_EXPECTED_CODECS = ", ".join([repr(c) for c in CODECS[:len(CODECS) - 1]]) + f" or {CODECS[len(CODECS) - 1]!r}"

cdef object _zstd_module = None     # zstandard, imported on first use (an optional extra)

# Every empty sequence decode_many returns: an empty vector is immutable, so one object serves
# all of them and a frame of empty sequences costs one list slot (8 bytes) per 4-byte count.
cdef TokenVector _EMPTY_VECTOR = TokenVector.__new__(TokenVector)


cdef object _zstd():
    global _zstd_module
    if _zstd_module is None:
        try:
            import zstandard
        except ImportError:
            return None
        _zstd_module = zstandard
    return _zstd_module


# What a frame's header says (frame.h's tw_layout). Its count table is where nothing can change
# it after it is checked: in the frame itself when the frame is immutable memory
# (`is_immutable_source`), otherwise in a copy read once from the frame (`counts_copy`, ours,
# freed by _layout_free). decode_many and frame_info read the counts only from there, so a writer
# racing with the decoder (a mutable source, the GIL released) cannot make them disagree with the
# total checked. (No copy for bytes keeps decode_many's allocation bound, docs/wire-format.md.)
ctypedef tw_layout FrameLayout


# --------------------------------------------------------------------------------------------
# Kernels

cdef inline Py_ssize_t _payload_size(int codec, unsigned width, uint64_t total) noexcept nogil:
    return <Py_ssize_t>tw_payload_size(codec, width, total)


cdef void _write_payload(uint8_t* out, const int32_t** ptrs, const Py_ssize_t* lens,
                         Py_ssize_t nseq, int codec, unsigned width) noexcept nogil:
    cdef Py_ssize_t k, i
    cdef twbp_packer pk
    if codec == CODEC_PACKED:
        pk.out = out
        pk.acc = 0
        pk.bits = 0
        for k in range(nseq):
            twbp_pack(&pk, ptrs[k], <size_t>lens[k], width)
        twbp_pack_finish(&pk)
        return
    for k in range(nseq):
        if codec == CODEC_RAW:
            if TW_HOST_BIG_ENDIAN:
                for i in range(lens[k]):
                    store_le32(out + 4 * i, <uint32_t>ptrs[k][i])
            else:
                memcpy(out, ptrs[k], <size_t>lens[k] * 4)
            out += lens[k] * 4
        else:
            twbp_narrow16(ptrs[k], <size_t>lens[k], out)
            out += lens[k] * 2


cdef void _read_payload(const uint8_t* payload, Py_ssize_t payload_len, int codec,
                        unsigned width, uint64_t start, Py_ssize_t n, int32_t* dst) noexcept nogil:
    """Ids [start, start + n) of a checked payload into dst."""
    cdef uint64_t bit
    cdef Py_ssize_t i
    if codec == CODEC_RAW:
        if TW_HOST_BIG_ENDIAN:
            for i in range(n):
                dst[i] = <int32_t>load_le32(payload + 4 * (start + i))
        else:
            memcpy(dst, payload + 4 * start, <size_t>n * 4)
    elif codec == CODEC_U16:
        twbp_widen16(payload + 2 * start, <size_t>n, dst)
    else:
        bit = start * width
        twbp_unpack(payload + (bit >> 3), <size_t>(payload_len - <Py_ssize_t>(bit >> 3)),
                    <unsigned>(bit & 7), dst, <size_t>n, width)


cdef uint32_t _or_all(const int32_t* p, Py_ssize_t n):
    cdef uint32_t r
    if n * 4 >= NOGIL_BYTES:
        with nogil:
            r = twbp_or_all(p, <size_t>n)
        return r
    return twbp_or_all(p, <size_t>n)


cdef uint32_t _crc(const uint8_t* p, Py_ssize_t n):
    cdef uint32_t r
    if n >= NOGIL_BYTES:
        with nogil:
            r = tw_crc32c(p, <size_t>n)
        return r
    return tw_crc32c(p, <size_t>n)


# --------------------------------------------------------------------------------------------
# Parsing (every check of an untrusted frame; nothing is allocated before it passes)

cdef inline object _wire_error(str msg):
    return WireFormatError(msg)


cdef inline str _text(const char* msg):
    return (<bytes>msg).decode("ascii")


cdef int _parse_header(const uint8_t* buf, Py_ssize_t n, FrameLayout* L, bint stable) except -1:
    """Header, count table and (zstd) length prefix: everything `frame_info` needs (the checks
    and their messages: frame.h, shared with wire.hpp). Does not require the payload to be
    present. `stable`: `buf` is immutable memory, so the count table is used in place; else it
    is copied once, between the two steps, and only the copy is read."""
    cdef char msg[TW_MSG_SIZE]
    if tw_parse_prefix(buf, <size_t>n, L, msg, TW_MSG_SIZE) != 0:
        raise _wire_error(_text(msg))
    if L.counts != NULL and L.nseq and not stable:
        # The table fits in the frame (checked): the copy is at most n bytes.
        L.counts_copy = <uint8_t*>PyMem_Malloc(<size_t>L.nseq * 4)
        if L.counts_copy == NULL:
            raise MemoryError(f"cannot copy a count table of {L.nseq} entries")
        memcpy(L.counts_copy, L.counts, <size_t>L.nseq * 4)      # the one read of the table
        L.counts = L.counts_copy
    if tw_parse_rest(buf, <size_t>n, L, msg, TW_MSG_SIZE) != 0:
        raise _wire_error(_text(msg))
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
    if n >= NOGIL_BYTES:
        with nogil:
            r = tw_check_frame(buf, <size_t>n, L, msg, TW_MSG_SIZE)
    else:
        r = tw_check_frame(buf, <size_t>n, L, msg, TW_MSG_SIZE)
    if r == TW_CHECKSUM_MISMATCH:
        raise ChecksumError(_text(msg))
    if r != 0:
        raise _wire_error(_text(msg))
    return 0


cdef bytes _zstd_payload(const uint8_t* buf, FrameLayout* L):
    """The decompressed payload of a checked zstd frame (exactly L.payload_len bytes). Never
    produces more than L.payload_len + 1 bytes, whatever the zstd frame holds."""
    zstd = _zstd()
    if zstd is None:
        raise _wire_error(
            "zstd-compressed frame, but the zstandard package is not installed "
            "(pip install tokenwire[zstd])"
        )
    cdef const uint8_t* section = buf + L.payload_off + ZSTD_LENGTH_SIZE
    cdef Py_ssize_t clen = <Py_ssize_t>L.stored_len - ZSTD_LENGTH_SIZE
    cdef Py_ssize_t plen = <Py_ssize_t>L.payload_len
    cdef char msg[TW_MSG_SIZE]
    # One read of the section (the frame may be memory another party writes): the walk and
    # libzstd both read this copy.
    comp = PyBytes_FromStringAndSize(<const char*>section, clen)
    # The frame's headers, walked in C (include/tokenwire/frame.h, shared with wire.hpp).
    cdef Py_ssize_t flen = <Py_ssize_t>tw_zstd_frame_size(
        <const uint8_t*>PyBytes_AS_STRING(comp), <size_t>clen, <uint64_t>plen, msg, TW_MSG_SIZE)
    if flen < 0:
        raise _wire_error(_text(msg))
    cdef Py_ssize_t want = plen + 1, got = 0
    if flen != clen:
        raise _wire_error(f"zstd payload has {clen - flen} trailing bytes after its zstd frame")
    try:
        declared = zstd.frame_content_size(comp)
    except zstd.ZstdError as e:
        raise _wire_error(f"zstd payload is corrupt: {e}") from None
    if declared != plen:
        raise _wire_error(
            f"zstd payload declares {declared} bytes, the header needs {plen}"
        )
    # libzstd compares the real output with the declared size only at the end of the frame, so
    # the output is capped here: read at most one byte more than the header allows, and stop.
    chunks = []
    try:
        reader = zstd.ZstdDecompressor().stream_reader(comp, read_across_frames=False)
        while got < want:
            chunk = reader.read(want - got)
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
    except zstd.ZstdError as e:
        raise _wire_error(f"zstd payload is corrupt: {e}") from None
    if got != plen:
        raise _wire_error(
            f"zstd payload decompresses to {'more than ' if got > plen else ''}"
            f"{min(got, plen)} bytes, the header needs {plen}"
        )
    out = b"".join(chunks)
    if tw_check_padding_bits(<const uint8_t*>PyBytes_AS_STRING(out), L, msg, TW_MSG_SIZE) != 0:
        raise _wire_error(_text(msg))
    return out


# --------------------------------------------------------------------------------------------
# Decoding

cdef TokenVector _decode_one(object source, const uint8_t* payload, FrameLayout* L,
                             uint64_t start, Py_ssize_t n, bint zero_copy):
    """Sequence [start, start + n) of a checked payload. With zero_copy (raw codec, immutable
    4-aligned source on a little-endian host) the vector views `source` instead of copying."""
    cdef TokenVector tv
    cdef Py_buffer view
    if n == 0:
        return _EMPTY_VECTOR
    if zero_copy:
        # A buffer of its own per vector: each vector releases what it holds.
        PyObject_GetBuffer(source, &view, PyBUF_SIMPLE)
        return tv_take_view(&view, <const int32_t*>(payload + 4 * start), n)
    tv = tv_alloc(n)
    if n * 4 >= NOGIL_BYTES:
        with nogil:
            _read_payload(payload, L.payload_len, L.codec, L.width, start, n, tv._data)
    else:
        _read_payload(payload, L.payload_len, L.codec, L.width, start, n, tv._data)
    return tv


cdef inline bint _can_view(object data, const uint8_t* payload, FrameLayout* L):
    # The same zero-copy rule as TokenVector.frombuffer: only memory that can never change.
    return (L.codec == CODEC_RAW and not TW_HOST_BIG_ENDIAN and (<uintptr_t>payload) % 4 == 0
            and is_immutable_source(data))


def decode(data, *, vocab_size=None):
    """Decode a single-sequence frame to a TokenVector.

    `data` is any bytes-like object. A raw frame in immutable, 4-aligned memory (`bytes`, a
    memoryview of bytes, an `ImmutableBuffer` such as a wrapped received pyzmq Frame; see
    `is_immutable_source`) is not copied: the
    vector views `data` and keeps it alive. Mutable memory (a bytearray, even behind a read-only
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
        _vocab_limit(vocab_size)      # a bad argument is reported before the data, as decode_many does
    L.counts_copy = NULL
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        buf = <const uint8_t*>view.buf
        _check_frame(buf, view.len, &L, is_immutable_source(data))
        if L.flags & FLAG_MULTI:
            raise _wire_error(
                f"multi-sequence frame ({L.nseq} sequences): read it with decode_many()"
            )
        if L.flags & FLAG_ZSTD:
            plain = _zstd_payload(buf, &L)
            payload = <const uint8_t*>PyBytes_AS_STRING(plain)
            tv = _decode_one(plain, payload, &L, 0, <Py_ssize_t>L.total,
                             L.codec == CODEC_RAW and not TW_HOST_BIG_ENDIAN)
        else:
            payload = buf + L.payload_off
            if _can_view(data, payload, &L) and L.total > 0:
                # Hand our buffer to the vector rather than acquiring a second one.
                moved = True             # the buffer now belongs to tv_take_view (even if it raises)
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
    one-element list for a single-sequence frame. Same checks and zero-copy rule as `decode`."""
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
        if L.flags & FLAG_ZSTD:
            source = _zstd_payload(buf, &L)
            payload = <const uint8_t*>PyBytes_AS_STRING(source)
            zero_copy = L.codec == CODEC_RAW and not TW_HOST_BIG_ENDIAN
        else:
            payload = buf + L.payload_off
            zero_copy = _can_view(data, payload, &L)
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
    raise ValueError(f"unknown codec {codec!r} (expected {_EXPECTED_CODECS})")


def check_codec(codec):
    """Return `codec` when `encode` accepts it (one of CODECS); raise the ValueError `encode`
    would raise otherwise: an unknown name (listing the known ones), or "zstd" without the
    zstandard package. For layers that take a codec name now and encode later."""
    _codec_request(codec)
    return codec


cdef object _codec_misfit(int codec, const int32_t** ptrs, const Py_ssize_t* lens,
                          Py_ssize_t nseq, bint multi):
    """The error for a forced codec that cannot hold the ids, naming the first that does not
    fit (the rule and the text: frame.h's codec table, shared with wire.hpp)."""
    cdef char msg[TW_MSG_SIZE]
    cdef Py_ssize_t k
    for k in range(nseq):
        if tw_codec_misfit(codec, ptrs[k], <size_t>lens[k], k if multi else -1, msg,
                           TW_MSG_SIZE) >= 0:
            return TokenIdError(_text(msg))
    return TokenIdError("codec cannot hold these ids")      # a writer changed them meanwhile


cdef bytes _encode_frame(const int32_t** ptrs, const Py_ssize_t* lens, Py_ssize_t nseq,
                         bint multi, int request, bint checksum, int64_t known_or=-1):
    """One frame of the ids at ptrs; `known_or`, when >= 0, is their bitwise OR (computed by the
    caller while it copied them)."""
    cdef uint64_t total = 0
    cdef uint32_t orv = <uint32_t>known_or if known_or >= 0 else 0
    cdef Py_ssize_t k, table_len = 0, off, payload_len, nbytes
    cdef unsigned width = 32
    cdef int codec
    cdef uint8_t* out
    cdef unsigned flags = 0
    for k in range(nseq):
        total += <uint64_t>lens[k]
        if request != CODEC_RAW and known_or < 0:
            orv |= _or_all(ptrs[k], lens[k])
    # The codec and width (frame.h: auto's choice, or what a forced codec can hold).
    codec = tw_choose_codec(request, orv, total, &width)
    if codec < 0:
        raise _codec_misfit(request, ptrs, lens, nseq, multi)
    if multi:
        flags |= FLAG_MULTI
        table_len = ((nseq * 4 + 7) // 8) * 8
    if checksum:
        flags |= FLAG_CHECKSUM
    off = HEADER_SIZE + table_len
    payload_len = _payload_size(codec, width, total)
    if request == REQUEST_ZSTD:
        return _encode_zstd(ptrs, lens, nseq, multi, codec, width, total, flags, table_len)
    nbytes = off + payload_len + (CHECKSUM_SIZE if checksum else 0)
    frame = PyBytes_FromStringAndSize(NULL, nbytes)
    out = <uint8_t*>PyBytes_AS_STRING(frame)
    _write_header(out, codec, width, flags, nseq if multi else <Py_ssize_t>total, lens, nseq,
                  multi, table_len)
    if payload_len >= NOGIL_BYTES:
        with nogil:
            _write_payload(out + off, ptrs, lens, nseq, codec, width)
    else:
        _write_payload(out + off, ptrs, lens, nseq, codec, width)
    if checksum:
        store_le32(out + off + payload_len, _crc(out, off + payload_len))
    return frame


cdef void _write_header(uint8_t* out, int codec, unsigned width, unsigned flags, Py_ssize_t count,
                        const Py_ssize_t* lens, Py_ssize_t nseq, bint multi,
                        Py_ssize_t table_len) noexcept:
    cdef Py_ssize_t k
    tw_write_header(out, codec, width, flags, <uint64_t>count)
    if multi:
        memset(out + HEADER_SIZE, 0, <size_t>table_len)
        for k in range(nseq):
            store_le32(out + HEADER_SIZE + 4 * k, <uint32_t>lens[k])


cdef bytes _encode_zstd(const int32_t** ptrs, const Py_ssize_t* lens, Py_ssize_t nseq, bint multi,
                        int codec, unsigned width, uint64_t total, unsigned flags,
                        Py_ssize_t table_len):
    """zstd (level 3) over the chosen payload; stored uncompressed (no zstd flag) when that is not
    smaller or would expand more than ZSTD_MAX_EXPANSION times."""
    cdef Py_ssize_t payload_len = _payload_size(codec, width, total)
    cdef Py_ssize_t off = HEADER_SIZE + table_len, clen, nbytes, stored
    cdef bint checksum = flags & FLAG_CHECKSUM
    cdef uint8_t* out
    plain = PyBytes_FromStringAndSize(NULL, payload_len)
    _write_payload(<uint8_t*>PyBytes_AS_STRING(plain), ptrs, lens, nseq, codec, width)
    comp = _zstd().ZstdCompressor(level=3, write_content_size=True).compress(plain)
    clen = len(comp)
    if clen + ZSTD_LENGTH_SIZE < payload_len and payload_len <= clen * ZSTD_MAX_EXPANSION:
        flags |= FLAG_ZSTD
        body = comp
        stored = ZSTD_LENGTH_SIZE + clen
    else:
        body = plain
        stored = payload_len
    nbytes = off + stored + (CHECKSUM_SIZE if checksum else 0)
    frame = PyBytes_FromStringAndSize(NULL, nbytes)
    out = <uint8_t*>PyBytes_AS_STRING(frame)
    _write_header(out, codec, width, flags, nseq if multi else <Py_ssize_t>total, lens, nseq,
                  multi, table_len)
    if flags & FLAG_ZSTD:
        store_le64(out + off, <uint64_t>clen)
        memcpy(out + off + ZSTD_LENGTH_SIZE, PyBytes_AS_STRING(body), <size_t>clen)
    else:
        memcpy(out + off, PyBytes_AS_STRING(body), <size_t>payload_len)
    if checksum:
        store_le32(out + off + stored, _crc(out, off + stored))
    return frame


def encode(tokens, *, codec="auto", bint checksum=False):
    """Encode token ids (anything `as_tokens` accepts) as one wire frame (`bytes`).

    codec: "auto" (the smallest of raw / u16 / packed for these ids, the faster one on a tie),
    "raw" (int32), "u16" (ids in [0, 65536)), "packed" (bit-packed at the width of the largest
    id; ids >= 0), or "zstd" (auto, then zstd-compressed when that is smaller; needs the
    `zstandard` package). checksum: append a CRC-32C of the frame.

    Raises ValueError when a forced codec cannot hold an id (naming it), and what `as_tokens`
    raises for unconvertible input.
    """
    cdef int request = _codec_request(codec)
    cdef Py_buffer view
    cdef bint have_view = False
    cdef const int32_t* ptr
    cdef Py_ssize_t n, stride
    cdef uint32_t orv
    cdef TokenVector tv
    cdef int ids = IDS_NOT_BUFFER
    if type(tokens) is not TokenVector:
        ids = _acquire_ids(tokens, &view, &n, &stride)
    if ids == IDS_INT32:
        # A native int32 buffer is encoded where it lies (no intermediate copy).
        ptr = <const int32_t*>view.buf
        if request == CODEC_RAW or is_immutable_source(tokens):
            have_view = True
        else:
            # Memory that may change: the width choice and the packing each read the ids,
            # so a writer between them could make a frame hold ids never written. Copy once
            # (one read of each id, OR-ed on the way), then check and code the copy. Raw
            # reads the ids once anyway (one memcpy into the frame).
            try:
                tv = tv_alloc(n)
                if n * 4 >= NOGIL_BYTES:
                    with nogil:
                        orv = twbp_copy_or_all(tv._data, ptr, <size_t>n)
                else:
                    orv = twbp_copy_or_all(tv._data, ptr, <size_t>n)
            finally:
                PyBuffer_Release(&view)
            return _encode_frame(<const int32_t**>&tv._data, &n, 1, False, request, checksum, orv)
    else:
        if ids != IDS_NOT_BUFFER:
            PyBuffer_Release(&view)
        tv = tokens if type(tokens) is TokenVector else _convert(tokens)
        ptr = tv._data
        n = tv._len
    try:
        return _encode_frame(&ptr, &n, 1, False, request, checksum)
    finally:
        if have_view:
            PyBuffer_Release(&view)


def encode_many(seqs, *, codec="auto", bint checksum=False):
    """Encode several sequences of token ids (each anything `as_tokens` accepts) as one frame:
    one codec and width for all of them, a table of counts, the ids back to back. Read it with
    `decode_many`. Raises OverflowError for a sequence of 2**32 ids or more."""
    cdef int request = _codec_request(codec)
    cdef list vectors = [v if type(v) is TokenVector else _convert(v) for v in seqs]
    cdef Py_ssize_t nseq = len(vectors), k
    cdef const int32_t** ptrs = <const int32_t**>malloc(max(nseq, 1) * sizeof(int32_t*))
    cdef Py_ssize_t* lens = <Py_ssize_t*>malloc(max(nseq, 1) * sizeof(Py_ssize_t))
    cdef TokenVector tv
    try:
        if ptrs == NULL or lens == NULL:
            raise MemoryError()
        for k in range(nseq):
            tv = vectors[k]
            if tv._len > 0xFFFFFFFF:
                raise TokenIdOverflowError(
                    f"sequence {k} has {tv._len} ids; a multi-sequence frame holds < 2**32 per sequence"
                )
            ptrs[k] = tv._data
            lens[k] = tv._len
        return _encode_frame(ptrs, lens, nseq, True, request, checksum)
    finally:
        free(ptrs)
        free(lens)


# --------------------------------------------------------------------------------------------
# Frame info

cdef class FrameInfo:
    """What a frame's header says (see tokenwire.frame_info)."""
    cdef readonly int version
    cdef readonly str codec
    cdef readonly int width
    cdef readonly tuple counts
    cdef readonly bint checksum
    cdef readonly bint multi
    cdef readonly object compression
    cdef readonly Py_ssize_t nbytes

    def __repr__(self):
        counts = self.counts if len(self.counts) <= 8 else f"({len(self.counts)} sequences)"
        return (f"FrameInfo(version={self.version}, codec={self.codec!r}, width={self.width}, "
                f"counts={counts}, checksum={self.checksum}, multi={self.multi}, "
                f"compression={self.compression!r}, nbytes={self.nbytes})")


def frame_info(data):
    """Read a frame's header without decoding its payload.

    Returns a FrameInfo: `version`, `codec` ("raw", "u16" or "packed"), `width` (bits per id),
    `counts` (one per sequence), `checksum`, `multi` (written by encode_many), `compression`
    (None or "zstd") and `nbytes`, the whole frame's size -- which `data` need not hold yet: a
    stream reader can use it to find where the frame ends. A malformed header raises
    WireFormatError; the payload and checksum are checked only by decode / decode_many.
    """
    cdef Py_buffer view
    cdef FrameLayout L
    cdef FrameInfo info = FrameInfo.__new__(FrameInfo)
    cdef const uint8_t* buf
    cdef Py_ssize_t k
    L.counts_copy = NULL
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        buf = <const uint8_t*>view.buf
        _parse_header(buf, view.len, &L, is_immutable_source(data))
        info.version = WIRE_VERSION
        info.codec = CODEC_NAMES[L.codec]
        info.width = L.width
        if L.flags & FLAG_MULTI:
            info.counts = tuple([load_le32(L.counts + 4 * k) for k in range(<Py_ssize_t>L.nseq)])
        else:
            info.counts = (L.total,)
        info.checksum = (L.flags & FLAG_CHECKSUM) != 0
        info.multi = (L.flags & FLAG_MULTI) != 0
        info.compression = "zstd" if L.flags & FLAG_ZSTD else None
        info.nbytes = L.nbytes
        return info
    finally:
        _layout_free(&L)
        PyBuffer_Release(&view)


def _crc32c(data, *, portable=False):
    """CRC-32C of a bytes-like object (the frame checksum; exposed for tests and tools)."""
    cdef Py_buffer view
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        if portable:
            return tw_crc32c_portable(view.buf, <size_t>view.len)
        return tw_crc32c(view.buf, <size_t>view.len)
    finally:
        PyBuffer_Release(&view)


CRC32C_HARDWARE = bool(twcrc_have_hw)
UNPACK_AVX2 = bool(twbp_have_avx2)


def _set_unpack_avx2(bint enabled):
    """Test hook: turn the AVX2 unpack off (or back on, if the CPU has it) so that the portable
    path is tested on machines that would never take it. Returns the previous setting."""
    global twbp_have_avx2
    cdef bint before = twbp_have_avx2
    twbp_have_avx2 = enabled and UNPACK_AVX2
    return before
