# codec="zstd": the zstandard package (an optional extra), the decompression of a checked zstd
# frame's payload and the zstd frame writer. Included by _wire.pxi (after its parsing checks),
# whose constants, FrameLayout and cimports it uses; the rule (level, which payload, when the
# compressed one is kept) is encode.h's, shared with wire.hpp, and docs/wire-format.md's.

from tokenwire._frame cimport (
    TW_ZSTD_KEPT as ZSTD_KEPT,
    TW_ZSTD_LENGTH_SIZE as ZSTD_LENGTH_SIZE,
    TW_ZSTD_LEVEL as ZSTD_LEVEL,
    TW_ZSTD_RETRY as ZSTD_RETRY,
    tw_check_padding_bits,
    tw_payload_size,
    tw_plan_zstd,
    tw_write_payload,
    tw_zstd_codec,
    tw_zstd_frame_size,
)

import threading

cdef object _zstd_module = None     # zstandard, imported on first use (an optional extra)
cdef object _zstd_local = threading.local()     # per thread: the reused compressor

cdef extern from "Python.h":
    object PyMemoryView_FromMemory(char* mem, Py_ssize_t size, int flags)
    int PyBUF_READ


cdef object _zstd():
    global _zstd_module
    if _zstd_module is None:
        try:
            import zstandard
        except ImportError:
            return None
        _zstd_module = zstandard
    return _zstd_module


cdef object _zstd_compressor():
    """This thread's compressor for codec="zstd" (level ZSTD_LEVEL of encode.h, content size
    declared, no zstd checksum). Reused, so that a short frame does not pay for a new
    compression context; one per thread, as a ZstdCompressor must not run in two threads at
    once (it releases the GIL while it compresses)."""
    cctx = getattr(_zstd_local, "cctx", None)
    if cctx is None:
        cctx = _zstd().ZstdCompressor(level=ZSTD_LEVEL, write_content_size=True,
                                      write_checksum=False)
        _zstd_local.cctx = cctx
    return cctx


#: The texts zstandard puts before libzstd's ZSTD_getErrorName text in a ZstdError, by the call
#: that failed (stream_reader's, decompress's, decompressobj's).
_ZSTANDARD_PREFIXES = ("zstd decompress error: ", "decompression error: ",
                       "zstd decompressor error: ")


cdef str _libzstd_text(object error):
    """libzstd's own text of a ZstdError: ZSTD_getErrorName's (e.g. "Data corruption detected"),
    zstandard's prefix removed (docs/wire-format.md, "libzstd's text (22)")."""
    text = str(error)
    for prefix in _ZSTANDARD_PREFIXES:
        if text.startswith(prefix):
            return text[len(prefix):]
    return text


cdef bytes _zstd_payload(const uint8_t* buf, FrameLayout* L):
    """The decompressed payload of a checked zstd frame (exactly L.payload_len bytes). Never
    produces more than L.payload_len + 1 bytes, whatever the zstd frame holds."""
    zstd = _zstd()
    if zstd is None:
        raise WireFormatError(
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
        raise WireFormatError(_text(msg))
    cdef Py_ssize_t want = plen + 1, got = 0
    if flen != clen:
        raise WireFormatError(f"zstd payload has {clen - flen} trailing bytes after its zstd frame")
    try:
        declared = zstd.frame_content_size(comp)
    except zstd.ZstdError:
        # (the walk refuses the one header this can fail on: a window of 2**32 bytes or more)
        raise WireFormatError("zstd payload is corrupt: error when determining content size") \
            from None
    if declared != plen:
        raise WireFormatError(
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
        raise WireFormatError(
            f"zstd payload is corrupt: zstd decompress error: {_libzstd_text(e)}") from None
    if got != plen:
        raise WireFormatError(
            f"zstd payload decompresses to {'more than ' if got > plen else ''}"
            f"{min(got, plen)} bytes, the header needs {plen}"
        )
    out = b"".join(chunks)
    if tw_check_padding_bits(<const uint8_t*>PyBytes_AS_STRING(out), L, msg, TW_MSG_SIZE) != 0:
        raise WireFormatError(_text(msg))
    return out


cdef bytes _encode_zstd(const tw_seq* seqs, Py_ssize_t nseq, tw_frame_plan* P, uint32_t orv):
    """codec="zstd" by encode.h's rule: zstd over the payload of tw_zstd_codec's codec (u16 or
    raw), kept when tw_plan_zstd says so; on TW_ZSTD_RETRY zstd over auto's payload (the
    plan's), else auto's plain frame `P` as planned."""
    cdef unsigned width = 0
    cdef unsigned codec = tw_zstd_codec(orv, &width)
    cctx = _zstd_compressor()
    if codec == CODEC_RAW and nseq == 1 and not TW_HOST_BIG_ENDIAN:
        # a single sequence's raw payload is its int32 ids as they are: no copy
        comp = cctx.compress(PyMemoryView_FromMemory(<char*>seqs[0].ids,
                                                     <Py_ssize_t>seqs[0].n * 4, PyBUF_READ))
    else:
        comp = cctx.compress(_plain_payload(seqs, nseq, codec, width, P.total))
    cdef int kept = tw_plan_zstd(P, codec, width, <size_t>len(comp))
    if kept == ZSTD_RETRY:
        comp = cctx.compress(_plain_payload(seqs, nseq, P.codec, P.width, P.total))
        kept = tw_plan_zstd(P, P.codec, P.width, <size_t>len(comp))
    frame = PyBytes_FromStringAndSize(NULL, <Py_ssize_t>P.nbytes)
    cdef uint8_t* out = <uint8_t*>PyBytes_AS_STRING(frame)
    cdef const uint8_t* section = NULL
    if kept == ZSTD_KEPT:
        section = <const uint8_t*>PyBytes_AS_STRING(comp)
        tw_write_frame(out, P, seqs, <size_t>nseq, section)
    elif _release_gil(<Py_ssize_t>P.nbytes):
        with nogil:
            tw_write_frame(out, P, seqs, <size_t>nseq, NULL)
    else:
        tw_write_frame(out, P, seqs, <size_t>nseq, NULL)
    return frame


cdef bytes _plain_payload(const tw_seq* seqs, Py_ssize_t nseq, unsigned codec, unsigned width,
                          uint64_t total):
    """The plain payload of `codec` at `width` for the ids of `seqs` (`total` of them)."""
    cdef Py_ssize_t size = <Py_ssize_t>tw_payload_size(width, total)
    plain = PyBytes_FromStringAndSize(NULL, size)
    cdef uint8_t* out = <uint8_t*>PyBytes_AS_STRING(plain)
    if _release_gil(size):
        with nogil:
            tw_write_payload(out, seqs, <size_t>nseq, codec, width)
    else:
        tw_write_payload(out, seqs, <size_t>nseq, codec, width)
    return plain
