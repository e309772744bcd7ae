# Inspection: what a frame's header says (FrameInfo, frame_info), which kernels this CPU runs
# (CRC32C_HARDWARE, UNPACK_AVX2), and the hooks tests and tools use (_crc32c, _set_unpack_avx2).
#
# Included by _core.pyx after _wire.pxi (the hub): one file per concept, one extension module;
# it reads the frame parser and the codec table as the decoders do.

# --------------------------------------------------------------------------------------------
# Frame info

cdef class FrameInfo:
    """What a frame's header says, returned by `tokenwire.frame_info` (not constructed directly).

    Read-only attributes: `version`; `codec` ("raw", "u16", "packed" or "pfor"); `width` (bits
    per id; 0 for pfor, whose width is per block); `counts` (one count per sequence); `checksum`;
    `multi` (written by `encode_many`); `compression` (None or "zstd"); `nbytes` (the frame's
    size).
    """
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

    Returns a FrameInfo: `version`, `codec` ("raw", "u16", "packed" or "pfor"), `width` (bits
    per id; 0 for pfor, whose width is per block),
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
